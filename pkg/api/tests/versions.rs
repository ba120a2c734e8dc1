//! Every install path defaults to the image of its own version: the install manifests, the Helm
//! chart, `kubectl di install` and the orchestrator's sidecar image. A `latest`, or a tag left
//! behind by a version bump, fails here. (The kind tier loads a locally built `:dev` and names it
//! explicitly; kind/ and tests/ are not defaults and are not read.)

mod common;

use std::path::{Path, PathBuf};

use di_api::contract::IMAGE;
use serde_yaml::Value;

const VERSION: &str = env!("CARGO_PKG_VERSION");
const REPOSITORY: &str = "opendilab/di-orchestrator:";

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The files under `dir` whose names end with one of `extensions`, at any depth.
fn files(dir: &Path, extensions: &[&str]) -> Vec<PathBuf> {
    let mut found = vec![];
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(files(&path, extensions));
        } else if extensions.iter().any(|e| path.to_string_lossy().ends_with(e)) {
            found.push(path);
        }
    }
    found
}

/// Every tag written after the orchestrator's repository in `text`.
fn tags(text: &str) -> Vec<&str> {
    text.match_indices(REPOSITORY)
        .map(|(at, _)| {
            let rest = &text[at + REPOSITORY.len()..];
            let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || "._-".contains(c))).unwrap_or(rest.len());
            &rest[..end]
        })
        // `concat!(REPOSITORY, env!(...))` writes the repository with the tag to come.
        .filter(|tag| !tag.is_empty())
        .collect()
}

#[test]
fn the_image_constant_is_tagged_with_the_version() {
    assert_eq!(IMAGE, format!("{REPOSITORY}{VERSION}"));
}

#[test]
fn every_default_image_is_this_version() {
    let root = common::repo_root();
    let mut read_files = vec![];
    for (dir, extensions) in [
        ("manifests/install", &[".yaml"][..]),
        ("charts/di-orchestrator", &[".yaml", ".tpl", ".md", ".txt"]),
        ("cmd", &[".rs"]),
        ("pkg", &[".rs"]),
        ("docs", &[".md"]),
    ] {
        read_files.extend(files(&root.join(dir), extensions));
    }
    read_files.push(root.join("README.md"));
    let mut wrong = vec![];
    let mut seen = 0;
    for path in &read_files {
        // This file names wrong tags on purpose, in its checks.
        if path.ends_with("pkg/api/tests/versions.rs") {
            continue;
        }
        for tag in tags(&read(path)) {
            seen += 1;
            if tag != VERSION {
                wrong.push(format!("{}: {REPOSITORY}{tag}", path.strip_prefix(&root).unwrap_or(path).display()));
            }
        }
    }
    assert!(wrong.is_empty(), "images not tagged {VERSION}, the workspace's version:\n{}", wrong.join("\n"));
    // The Deployment's container and its DI_REPLICAS_IMAGE at least.
    assert!(seen >= 2, "only {seen} tagged images found: is the scan reading the right files?");
}

#[test]
fn the_chart_defaults_to_its_own_version() {
    let chart_dir = common::repo_root().join("charts/di-orchestrator");
    let chart: Value = serde_yaml::from_str(&read(&chart_dir.join("Chart.yaml"))).unwrap();
    assert_eq!(chart["version"].as_str(), Some(VERSION), "Chart.yaml's version");
    assert_eq!(chart["appVersion"].as_str(), Some(VERSION), "Chart.yaml's appVersion, the default image tag");
    let values: Value = serde_yaml::from_str(&read(&chart_dir.join("values.yaml"))).unwrap();
    assert_eq!(values["image"]["repository"].as_str(), REPOSITORY.strip_suffix(':'));
    // Empty: the template takes the appVersion.
    assert!(matches!(values["image"]["tag"].as_str(), Some("") | Some(VERSION)), "image.tag: {:?}", values["image"]);
    assert!(matches!(values["replicasImage"].as_str(), Some("") | Some(IMAGE)), "{:?}", values["replicasImage"]);
    let helpers = read(&chart_dir.join("templates/_helpers.tpl"));
    assert!(helpers.contains("default .Chart.AppVersion"), "the chart's image tag no longer defaults to appVersion");
}

#[test]
fn the_scan_finds_a_wrong_tag() {
    let text = format!("image: {REPOSITORY}latest\nvalue: \"{REPOSITORY}0.0.9\"\nconcat!(\"{REPOSITORY}\", v)");
    assert_eq!(tags(&text), ["latest", "0.0.9"]);
}
