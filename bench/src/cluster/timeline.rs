//! Where one job's time to running goes, on each side: when its client's writes were answered
//! (on the orchestrator's side, the DIJob's create; the bench's orchestrator serves no webhooks),
//! when a watcher first saw one of its pods, when it saw them all, when it saw them all running,
//! and when it saw the job's status say so. What a controller adds to the plain client is the
//! time before the first pod and after the last one runs; between them, what its creates cost.
//! The baseline asks for all its objects at once. At one job of 10 without latency, and of 100
//! with it, where the paired runs put the orchestrator furthest behind the limit. These runs are
//! apart from the paired ones: their extra watch costs the API server.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use di_api::contract::labels;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use tokio::task::JoinHandle;

use super::Row;
use super::harness::{Bench, Marks, median, watch_until};
use super::jobs::pod_running;

const RUNS: usize = 9;

/// Each step's time from the run's start, one sample per run.
#[derive(Default)]
struct Steps {
    posted: Vec<Duration>,
    first_pod: Vec<Duration>,
    all_pods: Vec<Duration>,
    pods_running: Vec<Duration>,
    done: Vec<Duration>,
}

impl Steps {
    fn add(&mut self, marks: &Marks, seen: PodsSeen) {
        let from_start = |at: Instant| at.max(marks.start) - marks.start;
        self.posted.push(from_start(marks.posted));
        self.first_pod.push(from_start(seen.first));
        self.all_pods.push(from_start(seen.all));
        self.pods_running.push(from_start(seen.running));
        self.done.push(from_start(marks.done));
    }
}

/// One job of `collectors` (and its coordinator), `RUNS` times a side; `scenario` names the
/// cluster's (its latency) in the rows, and `prefix` the runs' jobs.
pub async fn measure(
    bench: &Bench,
    rows: &mut Vec<Row>,
    scenario: &str,
    prefix: &str,
    collectors: usize,
) -> anyhow::Result<()> {
    let (mut ours, mut base) = (Steps::default(), Steps::default());
    let pods = collectors + 1;
    bench.settle().await?;
    for run in 0..RUNS {
        let job = format!("{prefix}{run}");
        let seen = pods_seen(bench, &bench.jobs_ns, &format!("{job}-0"), pods).await?;
        let marks = bench.submit(&job, 1, collectors).await?;
        ours.add(&marks, seen.await??);
        bench.settle().await?;
        let job = format!("{prefix}b{run}");
        let seen = pods_seen(bench, &bench.base_ns, &format!("{job}-0"), pods).await?;
        let marks = bench.baseline_marks(&job, 1, collectors, 2 * pods).await?;
        base.add(&marks, seen.await??);
        bench.settle().await?;
    }
    let ms = |samples: &mut Vec<Duration>| format!("{:.1} ms", median(samples).as_secs_f64() * 1000.0);
    let scenario = format!("{scenario}1 job x {collectors} collectors, median of {RUNS}");
    let steps = [
        ("its client's writes answered", ms(&mut ours.posted), format!("{} (every create)", ms(&mut base.posted))),
        ("its first pod seen", ms(&mut ours.first_pod), ms(&mut base.first_pod)),
        ("its pods all seen", ms(&mut ours.all_pods), ms(&mut base.all_pods)),
        ("its pods all seen running", ms(&mut ours.pods_running), ms(&mut base.pods_running)),
        ("the job seen running", ms(&mut ours.done), ms(&mut base.done)),
    ];
    for (step, value, baseline) in steps {
        rows.push(Row {
            figure: format!("time to running, {scenario}: {step}"),
            value,
            baseline,
            ratio: None,
            goal: "-".into(),
            met: None,
        });
    }
    Ok(())
}

/// When a watcher first saw one of a job's pods, saw them all, and saw them all running.
struct PodsSeen {
    first: Instant,
    all: Instant,
    running: Instant,
}

/// Watches the pods of the job `job` in `namespace`; once the watch is established, a task that
/// resolves to when it saw them (`count` in all).
async fn pods_seen(
    bench: &Bench,
    namespace: &str,
    job: &str,
    count: usize,
) -> anyhow::Result<JoinHandle<anyhow::Result<PodsSeen>>> {
    let api: Api<Pod> = Api::namespaced(bench.client.clone(), namespace);
    // When the first pod was seen, and when the last.
    let marks = Arc::new(Mutex::new((None, None)));
    let seen = marks.clone();
    let running = watch_until(api, &format!("{}={job}", labels::JOB_NAME), move |pods: &[Arc<Pod>]| {
        let mut seen = seen.lock().expect("not poisoned");
        if !pods.is_empty() {
            seen.0.get_or_insert_with(Instant::now);
        }
        if pods.len() >= count {
            seen.1.get_or_insert_with(Instant::now);
        }
        pods.iter().filter(|p| pod_running(p)).count() == count
    })
    .await?;
    Ok(tokio::spawn(async move {
        let running = running.await??;
        let (first, all) = *marks.lock().expect("not poisoned");
        Ok(PodsSeen { first: first.unwrap_or(running), all: all.unwrap_or(running), running })
    }))
}
