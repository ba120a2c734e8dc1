//! `make bench`: measures, and reports each figure with the baseline it is compared with, both
//! taken in the same run on the same machine, as a ratio. Nothing here asserts a time.
//!
//! Webhook: the same admission handler served twice on loopback, once over plain HTTP (the
//! baseline) and once over TLS as the API server calls it; a closed-loop load generator with a
//! fixed number of connections sends a fixed number of reviews to each.
//!
//! Cluster: the orchestrator on the local control plane with simulated nodes (see `cluster`):
//! time to running against the limit (the least any operator must do for a job, as fast as the
//! API server allows), with and without production's latency, and for gang jobs placed by a real
//! kube-scheduler, over several invocations; API
//! requests and status writes per job, where the orchestrator waited on the API server, a perf
//! profile of the largest multi-job size, the replica endpoint against the reconciler alone and
//! its memory at 1,000 collectors, the orchestrator's memory and CPU idle, with 1,000 jobs and
//! among 100,000 unrelated pods, and the scaling curve. `--only SCENARIO` runs a part of it (the
//! webhook figures are always taken).

mod cluster;
mod profile;
mod webhook;

use std::path::PathBuf;

use clap::Parser;

/// Runs every benchmark and writes target/bench/report.md and report.json.
#[derive(Parser)]
struct Args {
    /// Only these cluster scenarios (repeatable); the report then covers only them.
    #[arg(long, value_enum)]
    only: Vec<cluster::Scenario>,
    /// Invocations of time to running against the limit, each on control planes of its own; the
    /// goal is judged on their median (the other figures are taken in the first).
    #[arg(long, default_value_t = 3)]
    invocations: usize,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let webhook = runtime.block_on(webhook::run())?;
    let cluster = runtime.block_on(cluster::run(&args.only, args.invocations))?;
    let out = out_dir()?;
    let cluster_json = cluster.as_ref().map(|c| {
        serde_json::json!({
            "rows": c.rows.iter().map(|r| serde_json::json!({"figure": r.figure, "value": r.value, "baseline": r.baseline, "ratio": r.ratio, "goal": r.goal, "met": r.met})).collect::<Vec<_>>(),
            "slope_ms_per_replica": c.slope_ms_per_replica,
            "waits": c.waits.iter().map(|(scenario, times)| serde_json::json!({"scenario": scenario, "requests": times.iter().map(|t| serde_json::json!({"request": t.request, "count": t.count, "seconds": t.seconds})).collect::<Vec<_>>()})).collect::<Vec<_>>(),
            "curve": c.curve.iter().map(|(n, t, rss)| serde_json::json!({"replicas": n, "seconds": t, "rss_mib": rss})).collect::<Vec<_>>(),
        })
    });
    let report = serde_json::json!({"machine": machine(), "webhook": webhook.json(), "cluster": cluster_json});
    std::fs::write(out.join("report.json"), serde_json::to_string_pretty(&report)?)?;
    let cluster_md = cluster
        .as_ref()
        .map_or_else(|| "## Cluster\n\nSKIPPED: no local control plane.\n".to_string(), cluster_markdown);
    let markdown =
        format!("# di-orchestrator benchmarks\n\nMachine: {}\n\n{}\n{cluster_md}", machine(), webhook.markdown());
    std::fs::write(out.join("report.md"), &markdown)?;
    println!("{markdown}");
    println!("written to {}", out.display());
    Ok(())
}

fn cluster_markdown(c: &cluster::ClusterReport) -> String {
    let mut text = "## Cluster (local control plane, simulated nodes)\n\n| figure | value | baseline | ratio | goal | met |\n|---|---|---|---|---|---|\n".to_string();
    for r in &c.rows {
        let ratio = r.ratio.map_or("-".into(), |x| format!("{x:.2}"));
        let met = match r.met {
            Some(true) => "yes",
            Some(false) => "MISSED",
            None => "-",
        };
        text += &format!("| {} | {} | {} | {ratio} | {} | {met} |\n", r.figure, r.value, r.baseline, r.goal);
    }
    for (scenario, times) in &c.waits {
        text += &format!(
            "\nWhere the orchestrator waited on the API server, {scenario}:\n\n| request | count | total | mean |\n|---|---|---|---|\n"
        );
        for t in times {
            text += &format!(
                "| {} | {:.0} | {:.2} s | {:.1} ms |\n",
                t.request,
                t.count,
                t.seconds,
                1000.0 * t.seconds / t.count
            );
        }
    }
    for (scenario, profile) in &c.profiles {
        text += &format!("\nWhere the orchestrator's CPU went (perf), {scenario}:\n\n");
        text += &match profile {
            Ok(table) => table.clone(),
            Err(why) => format!("No profile: {why}.\n"),
        };
    }
    if let Some(slope) = c.slope_ms_per_replica {
        text +=
            "\nScaling curve, one job of N collectors:\n\n| N | time to running | orchestrator RSS |\n|---|---|---|\n";
        for (n, t, rss) in &c.curve {
            text += &format!("| {n} | {t:.2} s | {rss:.1} MiB |\n");
        }
        text += &format!("\nFitted slope: {slope:.2} ms per replica.\n");
    }
    text
}

/// Where the report (and the orchestrator's log, for looking into a figure) is written.
pub fn out_dir() -> anyhow::Result<PathBuf> {
    let out = di_e2e::binaries::repo_root().join("target/bench");
    std::fs::create_dir_all(&out)?;
    Ok(out)
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
