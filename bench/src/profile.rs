//! A CPU profile of the orchestrator while a scenario runs, with `perf` when the machine has it:
//! the report lists the functions the samples fell in, so a missed goal comes with where the
//! orchestrator's own time went (the API server's share is in the request tables).

use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::process::{Child, Command};

pub struct Profile {
    child: Child,
    data: PathBuf,
}

impl Profile {
    /// Starts sampling `pid`; `Err` says why it cannot.
    pub async fn start(pid: u32, out: &Path) -> Result<Profile, String> {
        let data = out.join("orchestrator.perf.data");
        let mut child = Command::new("perf")
            .args(["record", "-F", "499", "-g", "-o"])
            .arg(&data)
            .args(["-p", &pid.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("perf could not be started: {e}"))?;
        // perf exits at once when it may not sample (perf_event_paranoid, no permission).
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        if let Ok(Some(status)) = child.try_wait() {
            let mut why = String::new();
            if let Some(mut err) = child.stderr.take() {
                use tokio::io::AsyncReadExt;
                let _ = err.read_to_string(&mut why).await;
            }
            return Err(format!("perf record exited ({status}): {}", why.lines().next().unwrap_or("")));
        }
        Ok(Profile { child, data })
    }

    /// Stops sampling and returns the functions with the most samples, as a markdown table.
    pub async fn finish(mut self, top: usize) -> Result<String, String> {
        if let Some(pid) = self.child.id() {
            let _ = Command::new("kill").args(["-INT", &pid.to_string()]).status().await;
        }
        let _ = self.child.wait().await;
        let report = Command::new("perf")
            .args(["report", "--stdio", "--no-children", "--sort", "symbol", "-i"])
            .arg(&self.data)
            .output()
            .await
            .map_err(|e| format!("perf report: {e}"))?;
        let text = String::from_utf8_lossy(&report.stdout);
        let rows: Vec<String> = text
            .lines()
            .filter_map(|line| {
                let (share, rest) = line.trim_start().split_once('%')?;
                let share: f64 = share.parse().ok()?;
                let symbol = rest.trim().trim_start_matches("[.]").trim_start_matches("[k]").trim();
                // perf pads the column with spaces and may follow it with more columns.
                let symbol = symbol.split("  ").next().unwrap_or(symbol);
                Some(format!("| {share:.1} % | `{}` |", symbol.chars().take(110).collect::<String>()))
            })
            .take(top)
            .collect();
        if rows.is_empty() {
            return Err("perf recorded no samples".into());
        }
        Ok(format!("| share of samples | function |\n|---|---|\n{}\n", rows.join("\n")))
    }
}
