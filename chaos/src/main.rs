//! `make chaos`: the orchestrator on the local control plane under faults, each with a load, and
//! a table of what every fault lost, which must be nothing: a kill -9 of the orchestrator again
//! and again, the API server and etcd restarted, a frozen leader, concurrent scale requests whose
//! clients hang up, a job submitted again over its predecessor's pods, a coordinator failing
//! while collectors are replaced, the leader's webhook flooded by hostile clients. Every fault ends with the same checks (`checks`, `world`):
//! each job in its phase with the desired counts it was given, pods and services exact, none
//! without its job, no replica name alive twice.
//!
//! The table goes to stdout and to target/chaos/report.md, with the orchestrators' logs beside
//! it; the exit code is non-zero when anything was lost or a fault could not be judged, and under
//! `CI=true` when a fault was skipped.
//! `--only FAULT` runs one row.

mod checks;
mod exactly_once;
mod faults;
mod flood;
mod follow;
mod monitor;
mod plain_http;
mod plane;
mod process;
mod report;
mod world;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;

/// Runs the faults and writes target/chaos/report.md.
#[derive(Parser)]
struct Args {
    /// Only these faults (repeatable).
    #[arg(long, value_enum)]
    only: Vec<faults::Fault>,
}

fn main() -> anyhow::Result<ExitCode> {
    let args = Args::parse();
    // A DIJob's deserializer takes a deep stack in debug builds.
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().thread_stack_size(16 << 20).build()?;
    let started = Instant::now();
    let rows = runtime.block_on(faults::run(&args.only));
    let ci = di_e2e::cluster::in_ci();
    let table = report::markdown(&rows, started.elapsed(), ci);
    let path = out_dir()?.join("report.md");
    std::fs::write(&path, format!("# di-orchestrator under faults\n\n{table}"))?;
    println!("{table}");
    eprintln!("written to {}", path.display());
    Ok(if rows.iter().all(|r| r.passed(ci)) { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// Where the report and the orchestrators' logs go.
pub fn out_dir() -> anyhow::Result<PathBuf> {
    let out = di_e2e::binaries::repo_root().join("target/chaos");
    std::fs::create_dir_all(&out)?;
    Ok(out.canonicalize()?)
}
