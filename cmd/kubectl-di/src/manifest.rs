//! The manifest given to `kubectl di create -f`: a YAML stream of DIJobs and AggregatorConfigs,
//! read as kubectl reads YAML and checked as the webhook checks objects, before anything reaches
//! the cluster. Pure, so it can be fuzzed: whatever the bytes, the answer is the objects or an
//! error that names the document and the field.

use anyhow::{Context, anyhow, bail};
use di_api::{AggregatorConfig, DIJob};
use kube::Resource;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

#[cfg(test)]
mod fuzz;

/// A document of the stream: its number (from 1, as a reader counts them) and its content.
pub type Document = (usize, Value);

/// The objects of a manifest, each readable and valid, in their order; else the first problem.
pub fn read(bytes: &[u8]) -> anyhow::Result<Vec<Value>> {
    let docs = documents(bytes)?;
    check(&docs)?;
    Ok(docs.into_iter().map(|(_, doc)| doc).collect())
}

/// The non-empty documents of a YAML stream. Merge keys (`<<: *base`) are applied as kubectl
/// applies them.
pub fn documents(bytes: &[u8]) -> anyhow::Result<Vec<Document>> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let line = bytes[..e.valid_up_to()].iter().filter(|b| **b == b'\n').count() + 1;
        anyhow!("the manifest is not UTF-8 text: line {line}: {e}")
    })?;
    let mut docs = vec![];
    for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let number = i + 1;
        // Stop at the first error: serde_yaml's iterator goes on with what is left of a broken
        // stream, and can panic on it.
        let mut yaml =
            serde_yaml::Value::deserialize(doc).map_err(|e| anyhow!("document {number} is not valid YAML: {e}"))?;
        yaml.apply_merge().map_err(|e| anyhow!("document {number} is not valid YAML: {e}"))?;
        let json = to_json(&yaml, "").map_err(|e| anyhow!("document {number}: {e}"))?;
        if !json.is_null() {
            docs.push((number, json));
        }
    }
    if docs.is_empty() {
        bail!("the manifest has no objects to create");
    }
    Ok(docs)
}

/// YAML as JSON, the way kubectl sends it: numbers and booleans as keys become strings; what
/// JSON cannot carry (tags, non-finite numbers, lists as keys) is an error at its field.
fn to_json(yaml: &serde_yaml::Value, at: &str) -> anyhow::Result<Value> {
    use serde_yaml::Value as Yaml;
    let field = |at: &str| if at.is_empty() { "the document".to_owned() } else { at.to_owned() };
    Ok(match yaml {
        Yaml::Null => Value::Null,
        Yaml::Bool(b) => Value::Bool(*b),
        Yaml::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => Value::from(i),
            (_, Some(u), _) => Value::from(u),
            (_, _, Some(f)) if f.is_finite() => Value::from(f),
            _ => bail!("{}: {n} is not a number JSON can carry", field(at)),
        },
        Yaml::String(s) => Value::String(s.clone()),
        Yaml::Sequence(items) => {
            let items = items.iter().enumerate().map(|(i, item)| to_json(item, &format!("{at}[{i}]")));
            Value::Array(items.collect::<anyhow::Result<_>>()?)
        }
        Yaml::Mapping(mapping) => {
            let mut map = Map::new();
            for (key, value) in mapping {
                let key = match key {
                    Yaml::String(s) => s.clone(),
                    Yaml::Number(n) => n.to_string(),
                    Yaml::Bool(b) => b.to_string(),
                    other => bail!("{}: a key must be a string, not {}", field(at), kind_of_yaml(other)),
                };
                let path = if at.is_empty() { key.clone() } else { format!("{at}.{key}") };
                map.insert(key, to_json(value, &path)?);
            }
            Value::Object(map)
        }
        Yaml::Tagged(tagged) => bail!("{}: the tag {} is not supported; remove it", field(at), tagged.tag),
    })
}

fn kind_of_yaml(value: &serde_yaml::Value) -> &'static str {
    match value {
        serde_yaml::Value::Null => "null",
        serde_yaml::Value::Bool(_) => "a boolean",
        serde_yaml::Value::Number(_) => "a number",
        serde_yaml::Value::String(_) => "a string",
        serde_yaml::Value::Sequence(_) => "a list",
        serde_yaml::Value::Mapping(_) => "a mapping",
        serde_yaml::Value::Tagged(_) => "a tagged value",
    }
}

fn kind_of_json(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// Checks every document as the webhook would; the first problem names its document (by name
/// when it has one) and its field.
pub fn check(docs: &[Document]) -> anyhow::Result<()> {
    let several = docs.len() > 1;
    docs.iter().try_for_each(|(number, doc)| check_document(*number, several, doc))
}

fn check_document(number: usize, several: bool, doc: &Value) -> anyhow::Result<()> {
    if !doc.is_object() {
        bail!(
            "document {number} is {}, not an object; each document is a DIJob or an AggregatorConfig",
            kind_of_json(doc)
        );
    }
    let kind = match doc.get("kind") {
        Some(Value::String(kind)) => kind.as_str(),
        None => bail!("document {number}: kind: Required value: use DIJob or AggregatorConfig"),
        Some(other) => bail!("document {number}: kind: Invalid value {other}: use DIJob or AggregatorConfig"),
    };
    // A name that could garble the terminal is left to validation, which quotes it.
    let name = doc["metadata"]["name"].as_str().filter(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_graphic()));
    let what = match (name, several) {
        (Some(name), false) => format!("{kind} {name}"),
        (Some(name), true) => format!("{kind} {name} (document {number})"),
        (None, _) => format!("{kind} in document {number}"),
    };
    match kind {
        "DIJob" => {
            check_api_version(doc, &DIJOB_VERSIONS).with_context(|| what.clone())?;
            let mut job: DIJob = typed(doc).with_context(|| format!("{what} cannot be read"))?;
            di_api::defaults::default_dijob(&mut job);
            di_api::validation::validate_dijob(&job).map_err(|e| anyhow!("{what} is invalid: {e}"))?;
            // As kubectl shows the webhook's admission warnings.
            for warning in di_api::validation::warnings(&job) {
                eprintln!("Warning: {what}: {warning}");
            }
            Ok(())
        }
        "AggregatorConfig" => {
            check_api_version(doc, &[&AggregatorConfig::api_version(&())]).with_context(|| what.clone())?;
            let mut config: AggregatorConfig = typed(doc).with_context(|| format!("{what} cannot be read"))?;
            di_api::defaults::default_aggregator_config(&mut config);
            di_api::validation::validate_aggregator_config(&config).map_err(|e| anyhow!("{what} is invalid: {e}"))
        }
        other => bail!(
            "document {number}: kind: Unsupported value {other:?}: kubectl di create takes DIJob and AggregatorConfig documents; use kubectl apply for others"
        ),
    }
}

/// The API versions a DIJob is served under: 0.2's and 1.x's (one schema).
pub const DIJOB_VERSIONS: [&str; 2] = ["diengine.opendilab.org/v1alpha1", "diengine.opendilab.org/v2alpha1"];

/// The API server refuses an object of a version it does not serve; say so before.
fn check_api_version(doc: &Value, served: &[&str]) -> anyhow::Result<()> {
    let want = served.join(" or ");
    match &doc["apiVersion"] {
        Value::String(v) if served.contains(&v.as_str()) => Ok(()),
        Value::Null => bail!("apiVersion: Required value: use {want}"),
        other => bail!("apiVersion: Unsupported value {other}: use {want}"),
    }
}

/// `doc` as `T`; an error names the field that does not fit, as `spec.collector.replicas`.
fn typed<T: DeserializeOwned>(doc: &Value) -> anyhow::Result<T> {
    serde_path_to_error::deserialize(doc).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." { anyhow!("{inner}") } else { anyhow!("{path}: {inner}") }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(text: &str) -> String {
        format!("{:#}", read(text.as_bytes()).unwrap_err())
    }

    const JOB: &str = "apiVersion: diengine.opendilab.org/v1alpha1\nkind: DIJob\nmetadata:\n  name: job\nspec:\n  coordinator:\n    template:\n      spec:\n        containers: [{name: di-container, image: ding}]\n";

    #[test]
    fn the_examples_are_read() {
        for file in ["cartpole-dqn.yaml", "multi-gpu-learner.yaml", "demo.yaml"] {
            let path = format!(
                "{}/../../manifests/examples/{file}",
                std::env::var("CARGO_MANIFEST_DIR").expect("run by cargo")
            );
            let objects = read(&std::fs::read(path).unwrap()).unwrap();
            assert!(!objects.is_empty(), "{file}");
        }
    }

    #[test]
    fn errors_name_the_document_and_the_field() {
        let two = format!("{JOB}---\n{}", JOB.replace("name: job", "name: two").replace("[{", "[{ports: 7, "));
        assert_eq!(
            error(&two),
            "DIJob two (document 2) cannot be read: spec.coordinator.template.spec.containers[0].ports: invalid type: integer `7`, expected a sequence"
        );
        assert_eq!(
            error(&JOB.replace("name: job\n", "generateName: 5\n")),
            "DIJob in document 1 cannot be read: metadata.generateName: invalid type: integer `5`, expected a string"
        );
        assert_eq!(
            error(&JOB.replace("diengine.opendilab.org/v1alpha1", "v1")),
            "DIJob job: apiVersion: Unsupported value \"v1\": use diengine.opendilab.org/v1alpha1 or diengine.opendilab.org/v2alpha1"
        );
        assert_eq!(
            error(&format!("{JOB}---\n- a\n")),
            "document 2 is a list, not an object; each document is a DIJob or an AggregatorConfig"
        );
        assert_eq!(error("a: 1\n---\nb: *nope\n"), "document 2 is not valid YAML: unknown anchor at line 3 column 4");
        assert_eq!(error("a: 1\na: 2\n"), "document 1 is not valid YAML: duplicate entry with key \"a\"");
        assert_eq!(error("spec: {x: !Thing 1}\n"), "document 1: spec.x: the tag !Thing is not supported; remove it");
        assert_eq!(error("spec: {x: .nan}\n"), "document 1: spec.x: .nan is not a number JSON can carry");
        assert_eq!(error("---\n# nothing\n"), "the manifest has no objects to create");
        assert_eq!(
            format!("{:#}", read(b"kind: DIJob\nmetadata: {name: \xff}\n").unwrap_err()),
            "the manifest is not UTF-8 text: line 2: invalid utf-8 sequence of 1 bytes from index 29"
        );
    }

    #[test]
    fn merge_keys_are_applied() {
        let text = "apiVersion: diengine.opendilab.org/v1alpha1\nkind: DIJob\nmetadata: {name: job}\nspec:\n  coordinator:\n    template:\n      spec:\n        containers:\n        - &main {name: di-container, image: ding}\n  collector:\n    template:\n      spec:\n        containers:\n        - <<: *main\n          image: ding:2\n";
        let objects = read(text.as_bytes()).unwrap();
        let collector = &objects[0]["spec"]["collector"]["template"]["spec"]["containers"][0];
        assert_eq!(collector, &serde_json::json!({"name": "di-container", "image": "ding:2"}));
    }
}
