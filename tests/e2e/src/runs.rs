//! The run folders of the control planes the suite starts (`runs/<pid>`, or
//! `runs/<pid>/<name>` for one of several at once), and the processes started against each:
//! what a harness that died left behind is found by its folder and killed.

use std::path::Path;

/// Kills what a harness that died without cleaning up left behind, and removes its folder; and
/// what this process left from an earlier plane, unless `keep_own`.
pub fn reap_stale(runs: &Path, keep_own: bool) {
    let Ok(entries) = std::fs::read_dir(runs) else { return };
    for entry in entries.flatten() {
        let owner = entry.file_name().to_string_lossy().into_owned();
        let own = owner == std::process::id().to_string();
        let owner_alive = Path::new("/proc").join(&owner).exists() && (!own || keep_own);
        if !owner_alive {
            kill_processes_of(&entry.path());
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Environment variable that marks a process the suite started against a control plane: its
/// value is the control plane's folder.
pub const RUN_MARKER: &str = "DI_E2E_RUN";

/// Kills every process of the control plane in `dir`: its own (their command lines name the
/// folder) and what the suite started against it (marked with [`RUN_MARKER`]), even when the
/// test process that started them was aborted.
pub fn kill_processes_of(dir: &Path) {
    let marker = dir.to_string_lossy().into_owned();
    let env_marker = format!("{RUN_MARKER}={marker}");
    let me = std::process::id().to_string();
    let Ok(procs) = std::fs::read_dir("/proc") else { return };
    for entry in procs.flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) || pid == me {
            continue;
        }
        let read =
            |f: &str| String::from_utf8_lossy(&std::fs::read(entry.path().join(f)).unwrap_or_default()).into_owned();
        let mentions = read("cmdline").contains(&marker) || read("environ").split('\0').any(|v| v == env_marker);
        if mentions {
            eprintln!("killing process {pid}, left over from the control plane in {marker}");
            let _ = std::process::Command::new("kill").args(["-9", &pid]).status();
        }
    }
}
