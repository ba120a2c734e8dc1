//! A process's memory and CPU, read from /proc.

use anyhow::Context;

/// Resident memory of `pid`, in MiB.
pub fn rss_mib(pid: u32) -> anyhow::Result<f64> {
    status_mib(pid, "VmRSS")
}

/// The part of `pid`'s resident memory that is anonymous (heap, stacks), in MiB; the rest is
/// pages of files (its binary, its libraries), clean and shared with the page cache.
pub fn anon_rss_mib(pid: u32) -> anyhow::Result<f64> {
    status_mib(pid, "RssAnon")
}

/// The most resident memory `pid` has had, in MiB.
pub fn peak_rss_mib(pid: u32) -> anyhow::Result<f64> {
    status_mib(pid, "VmHWM")
}

fn status_mib(pid: u32, field: &str) -> anyhow::Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib: f64 = status
        .lines()
        .find(|l| l.strip_prefix(field).is_some_and(|rest| rest.starts_with(':')))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("{field} of process {pid}"))?;
    Ok(kib / 1024.0)
}

/// CPU seconds `pid` has used so far, user and system.
pub fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name, which may contain spaces: utime is the 14th, stime the 15th.
    let rest = stat.rsplit_once(')').context("stat")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>()? + fields[12].parse::<f64>()?;
    Ok(ticks / 100.0)
}
