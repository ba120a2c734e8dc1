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
//! among 100,000 unrelated pods, and the scaling curve. `--headline` takes only what the README
//! shows; `--only SCENARIO` runs a part of it (the webhook figures are always taken).

mod cluster;
mod out;
mod profile;
mod publish;
mod report;
mod webhook;

use clap::{Parser, Subcommand};

use cluster::{HEADLINE, VERDICT, sizes};
use report::{Mode, Provenance};

/// Runs the benchmarks and writes target/bench/report.md and report.json.
#[derive(Parser)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// Only the headline (`make bench`): time to running at the README's four sizes, one
    /// invocation, fewer runs; without it every scenario (`make bench-verdict`).
    #[arg(long, conflicts_with = "only")]
    headline: bool,
    /// Only these cluster scenarios (repeatable); the report then covers only them.
    #[arg(long, value_enum)]
    only: Vec<cluster::Scenario>,
    /// Invocations of time to running against the limit, each on control planes of its own; the
    /// goal is judged on their median (the other figures are taken in the first). 3 by default,
    /// 1 with --headline.
    #[arg(long)]
    invocations: Option<usize>,
}

#[derive(Subcommand)]
enum Command {
    /// Copies target/bench/report.md to docs/bench/ and a headline's block into README.md and
    /// docs/PERFORMANCE.md (`make bench-publish`).
    Publish,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(Command::Publish) = args.command {
        for written in publish::publish(&di_e2e::binaries::repo_root())? {
            println!("wrote {written}");
        }
        return Ok(());
    }
    let (default_sizes, default_invocations) = if args.headline { (&HEADLINE[..], 1) } else { (&VERDICT[..], 3) };
    let invocations = args.invocations.unwrap_or(default_invocations);
    let whole = args.invocations.is_none_or(|n| n == default_invocations)
        && args.only.is_empty()
        && ["DI_BENCH_SCENARIOS", "DI_BENCH_ORCHESTRATOR_ARGS"].iter().all(|v| std::env::var_os(v).is_none());
    let mode = match (whole, args.headline) {
        (true, true) => Mode::Headline,
        (true, false) => Mode::Verdict,
        (false, _) => Mode::Partial,
    };
    let only = if args.headline { vec![cluster::Scenario::Running] } else { args.only };
    let plan = cluster::Plan { only, invocations, sizes: sizes(default_sizes)?, detail: !args.headline };
    // Before measuring: a commit made while it runs is not what was measured.
    let provenance = Provenance::here(mode, invocations);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let webhook = runtime.block_on(webhook::run())?;
    let cluster = runtime.block_on(cluster::run(&plan))?;
    let out = out::out_dir()?;
    let json = report::json(&provenance, &webhook, cluster.as_ref());
    std::fs::write(out.join("report.json"), serde_json::to_string_pretty(&json)?)?;
    let markdown = report::markdown(&provenance, &webhook, cluster.as_ref());
    std::fs::write(out.join("report.md"), &markdown)?;
    println!("{markdown}");
    println!("written to {}", out.display());
    Ok(())
}
