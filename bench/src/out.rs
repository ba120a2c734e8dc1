//! Where `make bench` writes: target/bench of the repository (the report, and the
//! orchestrator's log and profiles for looking into a figure).

use std::path::PathBuf;

pub fn out_dir() -> anyhow::Result<PathBuf> {
    let out = di_e2e::binaries::repo_root().join("target/bench");
    std::fs::create_dir_all(&out)?;
    Ok(out)
}
