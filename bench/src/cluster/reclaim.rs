//! Interruptible collectors under Kueue (`spec.collector.minReplicas` and `maxReplicas`), on a
//! control plane of their own with Kueue v0.19.2 beside it and two teams' ClusterQueues in one
//! cohort (`di_e2e::kueue::Cohort`). Two figures:
//! - reclaim: team b's job, time to running while team a's spare-room collectors hold b's quota
//!   (Kueue preempts them, the orchestrator deletes their pods and gives the quota back), against
//!   the same job with b's quota idle. The goal: no more than the collectors' stopping time (the
//!   simulated kubelet's, [`STOPPING`]) and one second above the idle cluster's.
//! - fill: the time for a job's spare-room collectors, each a Workload of its own, to fill the
//!   cohort's idle quota, against the same collectors asked for in one Workload.

use std::sync::Arc;
use std::time::Duration;

use di_api::DIJob;
use di_api::contract::labels;
use di_e2e::kueue::{self, Cohort};
use kube::api::{DynamicObject, ListParams, PostParams};
use kube::{Api, Client};

use super::Row;
use super::empty::until_none;
use super::harness::{self, Bench, median, took, watch_until};
use super::jobs::{job, pod_running};
use super::limit::paired_median;
use super::queues::{in_queue, on_kueue};

/// Runs of each figure.
const RUNS: usize = 5;
/// Collectors of team b's job, each of 10m CPU beside its coordinator's 20m (with the sidecar):
/// b's whole quota.
const LENDER_COLLECTORS: usize = 10;
/// Team a's job's collectors above `replicas` (1, its core), up to `maxReplicas`: b's quota
/// again, borrowed.
const SPARE: usize = 12;
/// How long a simulated kubelet takes to stop a deleted pod (`di_e2e::nodes`).
const STOPPING: Duration = Duration::from_millis(100);

pub async fn measure(rows: &mut Vec<Row>) -> anyhow::Result<()> {
    on_kueue("reclaim", ("bench-reclaim", "-reclaim"), async |bench: &Bench, client: &Client| {
        // a: its job's core (20m + 10m); b: its job (20m + 10 x 10m). Memory is no one's limit.
        let a = [("cpu", "30m"), ("memory", "100Gi")];
        let cohort = Cohort::create(client, &bench.jobs_ns, &a, &[("cpu", "120m"), ("memory", "100Gi")]).await;
        let measured = on(bench, rows).await;
        cohort.delete().await;
        measured
    })
    .await
}

async fn on(bench: &Bench, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    // The first of each warms the caches of the kinds it makes.
    bench.submit_shaped("warm", 1, LENDER_COLLECTORS, in_queue("team-b")).await?;
    empty(bench).await?;
    let (mut idle, mut reclaimed, mut spare, mut whole) = (vec![], vec![], vec![], vec![]);
    for run in 0..RUNS {
        // Which side goes first alternates.
        if run % 2 == 1 {
            idle.push(
                bench.submit_shaped(&format!("idle{run}"), 1, LENDER_COLLECTORS, in_queue("team-b")).await?.took(),
            );
            empty(bench).await?;
        }
        whole.push(bench.submit_shaped(&format!("whole{run}"), 1, SPARE + 1, in_queue("team-a")).await?.took());
        empty(bench).await?;
        spare.push(fill(bench, &format!("spare{run}")).await?);
        reclaimed
            .push(bench.submit_shaped(&format!("lend{run}"), 1, LENDER_COLLECTORS, in_queue("team-b")).await?.took());
        empty(bench).await?;
        if run % 2 == 0 {
            idle.push(
                bench.submit_shaped(&format!("idle{run}"), 1, LENDER_COLLECTORS, in_queue("team-b")).await?.took(),
            );
            empty(bench).await?;
        }
    }
    let ratio = paired_median(&reclaimed, &idle);
    let over = median(&mut reclaimed).saturating_sub(median(&mut idle.clone()));
    let allowed = STOPPING + Duration::from_secs(1);
    rows.push(Row {
        figure: format!(
            "reclaim: time to running, a job of {LENDER_COLLECTORS} collectors whose quota {SPARE} spare-room \
             collectors of another team borrow, median of {RUNS} runs"
        ),
        value: format!("{:.3} s", median(&mut reclaimed).as_secs_f64()),
        baseline: format!("{:.3} s (the same job, its quota idle)", median(&mut idle).as_secs_f64()),
        ratio: Some(ratio),
        goal: format!("at most {:.1} s above the baseline (the collectors' stopping, and 1 s)", allowed.as_secs_f64()),
        met: Some(over <= allowed),
    });
    rows.push(Row {
        figure: format!(
            "fill: time until {SPARE} spare-room collectors (maxReplicas), each a Workload of its own, run on a \
             cohort's idle quota, median of {RUNS} runs"
        ),
        value: format!("{:.3} s", median(&mut spare).as_secs_f64()),
        baseline: format!("{:.3} s (the same collectors asked for in one Workload)", median(&mut whole).as_secs_f64()),
        ratio: Some(paired_median(&spare, &whole)),
        goal: "-".into(),
        met: None,
    });
    Ok(())
}

/// Submits team a's job of one collector in its core and up to [`SPARE`] more on spare room,
/// and returns the time until every one of them runs. The job is left running.
async fn fill(bench: &Bench, name: &str) -> anyhow::Result<Duration> {
    let jobs: Api<DIJob> = Api::namespaced(bench.client.clone(), &bench.jobs_ns);
    let pods = Api::namespaced(bench.client.clone(), &bench.jobs_ns);
    let want = SPARE + 2;
    let running = watch_until(pods, &format!("{}={name}", labels::JOB_NAME), move |all: &[Arc<_>]| {
        all.iter().filter(|p| pod_running(p)).count() == want
    })
    .await?;
    let mut filler = job(name, 1);
    in_queue("team-a")(&mut filler);
    let collector = filler.spec.collector.as_mut().expect("a collector role");
    (collector.min_replicas, collector.max_replicas) = (Some(1), Some(1 + SPARE as i32));
    let start = bench.clock(harness::Start::Quiet).await?;
    jobs.create(&PostParams::default(), &filler).await?;
    took(running, start, Duration::from_secs(300), &format!("{name}: {want} pods running")).await
}

/// Empties the namespace, and waits until Kueue has no Workload of its jobs left (their quota
/// back in the cohort).
async fn empty(bench: &Bench) -> anyhow::Result<()> {
    bench.empty(&bench.jobs_ns).await?;
    let resource = kueue::resource("Workload", "workloads");
    let workloads: Api<DynamicObject> = Api::namespaced_with(bench.client.clone(), &bench.jobs_ns, &resource);
    until_none(&workloads, &ListParams::default(), &format!("{}: Workloads", bench.jobs_ns)).await
}
