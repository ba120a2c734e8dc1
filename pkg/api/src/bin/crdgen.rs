//! Writes what the repository generates from the types (`make manifests`): the CRDs, where the
//! manifests and the Helm chart keep them, and the reference page rendered from those CRDs; with
//! `--check` reports which checked-in file differs and exits non-zero.

use std::path::PathBuf;
use std::process::ExitCode;

use di_api::reference;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (check, dir) = match (args.next(), args.next()) {
        (Some(flag), Some(dir)) if flag == "--check" => (true, dir),
        (Some(dir), None) if dir != "--check" => (false, dir),
        _ => {
            eprintln!("usage: crdgen [--check] REPOSITORY_ROOT");
            return ExitCode::from(2);
        }
    };
    let dir = PathBuf::from(dir);
    let mut files = di_api::crd::generated_files();
    files.push((reference::PAGE_PATH.to_owned(), reference_page()));
    let mut stale = false;
    for (name, text) in files {
        let path = dir.join(name);
        if check {
            if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
                eprintln!("{} is not what pkg/api generates; run `make manifests`", path.display());
                stale = true;
            }
        } else if let Err(e) =
            std::fs::create_dir_all(path.parent().unwrap_or(&dir)).and_then(|()| std::fs::write(&path, text))
        {
            eprintln!("cannot write {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    }
    if stale { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}

/// The reference page, from the CRDs as they are written out (so from what `kubectl explain` reads).
fn reference_page() -> String {
    let crds: Vec<serde_json::Value> = di_api::crd::crd_files()
        .iter()
        .map(|(name, yaml)| serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("{name}: {e}")))
        .collect();
    reference::page(&crds)
}
