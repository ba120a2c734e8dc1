//! DI-engine 0.5.3's own code, run from the venv `hack/ding/setup.sh` keeps: its K8SParser (see
//! the task tests) and its coordinator's client of the replica endpoint.

use std::process::{Command, Stdio};

use crate::binaries::repo_root;
use crate::cluster::skip;

/// The venv's python, installing DI-engine first if needed; `None`, having said why (a failure
/// under `CI=true`), where it cannot be had.
pub fn python() -> Option<String> {
    let setup = Command::new("bash").arg(repo_root().join("hack/ding/setup.sh")).stderr(Stdio::inherit()).output();
    match setup {
        Ok(out) if out.status.success() => {
            Some(String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or("").to_owned())
        }
        Ok(out) => {
            skip(&format!("hack/ding/setup.sh could not install DI-engine ({})", out.status));
            None
        }
        Err(e) => {
            skip(&format!("hack/ding/setup.sh cannot be run: {e}"));
            None
        }
    }
}

/// What DI-engine's coordinator client (`OperatorServer`) returns for `op` (`post`, `get`,
/// `delete`) with `count` collectors, asking the endpoint at `url` as `coordinator`:
/// `{success, code, message, data}`.
pub fn operator_client(
    python: &str,
    url: &str,
    namespace: &str,
    coordinator: &str,
    op: &str,
    count: u32,
) -> serde_json::Value {
    let out = Command::new(python)
        .arg(repo_root().join("hack/ding/operator_client.py"))
        .args([url, namespace, coordinator, op, &count.to_string()])
        .output()
        .expect("running DI-engine's operator client");
    assert!(out.status.success(), "DI-engine's client failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("the client's answer as JSON")
}
