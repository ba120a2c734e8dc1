//! Where one job's time to running goes, on each side: when its client's writes were answered
//! (on the orchestrator's side, the DIJob's create; the bench's orchestrator serves no webhooks),
//! when a watcher first saw one of its pods, when it saw them all running, and when it saw the
//! job's status say so. What a controller adds to the plain client is the time before the first
//! pod and after the last one runs. The baseline asks for all its objects at once. These runs are
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
const COLLECTORS: usize = 10;

/// Each step's time from the run's start, one sample per run.
#[derive(Default)]
struct Steps {
    posted: Vec<Duration>,
    first_pod: Vec<Duration>,
    pods_running: Vec<Duration>,
    done: Vec<Duration>,
}

impl Steps {
    fn add(&mut self, marks: &Marks, (first_pod, pods_running): (Instant, Instant)) {
        let from_start = |at: Instant| at.max(marks.start) - marks.start;
        self.posted.push(from_start(marks.posted));
        self.first_pod.push(from_start(first_pod));
        self.pods_running.push(from_start(pods_running));
        self.done.push(from_start(marks.done));
    }
}

pub async fn measure(bench: &Bench, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    let (mut ours, mut base) = (Steps::default(), Steps::default());
    bench.settle().await?;
    for run in 0..RUNS {
        let job = format!("t{run}");
        let pods = pods_seen(bench, &bench.jobs_ns, &format!("{job}-0"), COLLECTORS + 1).await?;
        let marks = bench.submit(&job, 1, COLLECTORS).await?;
        ours.add(&marks, pods.await??);
        bench.settle().await?;
        let job = format!("tb{run}");
        let pods = pods_seen(bench, &bench.base_ns, &format!("{job}-0"), COLLECTORS + 1).await?;
        let marks = bench.baseline_marks(&job, 1, COLLECTORS, 2 * (COLLECTORS + 1)).await?;
        base.add(&marks, pods.await??);
        bench.settle().await?;
    }
    let ms = |samples: &mut Vec<Duration>| format!("{:.1} ms", median(samples).as_secs_f64() * 1000.0);
    let scenario = format!("1 job x {COLLECTORS} collectors, median of {RUNS}");
    let steps = [
        ("its client's writes answered", ms(&mut ours.posted), format!("{} (every create)", ms(&mut base.posted))),
        ("its first pod seen", ms(&mut ours.first_pod), ms(&mut base.first_pod)),
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

/// Watches the pods of the job `job` in `namespace`; once the watch is established, a task that
/// resolves to when it first saw one and when it saw `count` of them running.
async fn pods_seen(
    bench: &Bench,
    namespace: &str,
    job: &str,
    count: usize,
) -> anyhow::Result<JoinHandle<anyhow::Result<(Instant, Instant)>>> {
    let api: Api<Pod> = Api::namespaced(bench.client.clone(), namespace);
    let first = Arc::new(Mutex::new(None));
    let seen = first.clone();
    let running = watch_until(api, &format!("{}={job}", labels::JOB_NAME), move |pods: &[Arc<Pod>]| {
        if !pods.is_empty() {
            seen.lock().expect("not poisoned").get_or_insert_with(Instant::now);
        }
        pods.iter().filter(|p| pod_running(p)).count() == count
    })
    .await?;
    Ok(tokio::spawn(async move {
        let all_running = running.await??;
        let first = first.lock().expect("not poisoned").unwrap_or(all_running);
        Ok((first, all_running))
    }))
}
