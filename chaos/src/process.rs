//! Local processes by their id: signals through `kill(1)` (the workspace forbids unsafe code, so
//! no `libc::kill`), and whether a process still runs, from `/proc`.

use std::time::Duration;

use anyhow::{Context, bail};

/// Sends signal `name` (`KILL`, `STOP`, `CONT`, ...) to process `pid`.
pub fn signal(pid: u32, name: &str) -> anyhow::Result<()> {
    let status =
        std::process::Command::new("kill").args(["-s", name, &pid.to_string()]).status().context("running kill")?;
    if !status.success() {
        bail!("kill -s {name} {pid} failed ({status})");
    }
    Ok(())
}

/// Whether `pid` runs: it exists and is not a zombie waiting to be reaped.
pub fn running(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    // The state follows the command name, which is in parentheses and may hold spaces.
    let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next());
    !matches!(state, None | Some("Z" | "X"))
}

/// Whether anything of `pid` is left but its exit status: its main thread shows as a zombie as
/// soon as it exits, while its other threads may still be letting go of its files and sockets.
fn gone(pid: u32) -> bool {
    let threads = std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |tasks| tasks.count());
    !running(pid) && threads <= 1
}

/// Waits, at most `limit`, until `pid` no longer runs and every thread of it has exited. No
/// event tells a process that is not the parent, so `/proc` is looked at every few milliseconds.
pub async fn until_gone(pid: u32, limit: Duration) -> anyhow::Result<()> {
    tokio::time::timeout(limit, async {
        while !gone(pid) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .with_context(|| format!("process {pid} still runs after {limit:?}"))
}

/// The command line `pid` was started with: its program, then its arguments.
pub fn command_line(pid: u32) -> anyhow::Result<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).with_context(|| format!("reading process {pid}"))?;
    let words: Vec<String> =
        raw.split(|b| *b == 0).filter(|w| !w.is_empty()).map(|w| String::from_utf8_lossy(w).into_owned()).collect();
    if words.is_empty() {
        bail!("process {pid} has no command line (it exited)");
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_runs_and_has_a_command_line() {
        let me = std::process::id();
        assert!(running(me));
        assert!(!command_line(me).unwrap().is_empty());
        assert!(!running(u32::MAX));
    }
}
