//! Writes the CRDs generated from the types where the repository keeps them (`make manifests`):
//! the manifests and the Helm chart; with `--check` reports which checked-in file differs and
//! exits non-zero.

use std::path::PathBuf;
use std::process::ExitCode;

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
    let mut stale = false;
    for (name, yaml) in di_api::crd::generated_files() {
        let path = dir.join(name);
        if check {
            if std::fs::read_to_string(&path).ok().as_deref() != Some(yaml.as_str()) {
                eprintln!("{} is not what pkg/api generates; run `make manifests`", path.display());
                stale = true;
            }
        } else if let Err(e) =
            std::fs::create_dir_all(path.parent().unwrap_or(&dir)).and_then(|()| std::fs::write(&path, yaml))
        {
            eprintln!("cannot write {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    }
    if stale { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}
