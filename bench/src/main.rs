//! `make bench`: measures, and reports each figure with the baseline it is compared with, both
//! taken in the same run on the same machine, as a ratio. Nothing here asserts a time.
//!
//! Webhook: the same admission handler served twice on loopback, once over plain HTTP (the
//! baseline) and once over TLS as the API server calls it; a closed-loop load generator with a
//! fixed number of connections sends a fixed number of reviews to each.

mod webhook;

use std::path::PathBuf;

fn main() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let webhook = runtime.block_on(webhook::run())?;
    let out = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/bench");
    std::fs::create_dir_all(&out)?;
    let report = serde_json::json!({"machine": machine(), "webhook": webhook.json()});
    std::fs::write(out.join("report.json"), serde_json::to_string_pretty(&report)?)?;
    let markdown = format!("# di-orchestrator benchmarks\n\nMachine: {}\n\n{}", machine(), webhook.markdown());
    std::fs::write(out.join("report.md"), &markdown)?;
    println!("{markdown}");
    println!("written to {}", out.display());
    Ok(())
}

/// What the figures were taken on.
fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    format!("{cpus} cores, {model}")
}
