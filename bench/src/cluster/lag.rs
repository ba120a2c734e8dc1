//! How long each job's status trails its pods when many jobs start together: from when a watcher
//! saw all of a job's pods running until it saw the job's status say so, for every job of one
//! run of 100 jobs of 10, on each side. The batch's time to running is its last job's, and hides
//! this: a job whose pods ran first can wait for its status behind the passes creating the other
//! jobs' objects (each holds one of `--concurrency` slots while its creates wait for the shared
//! budget). Beside them, the lag of the job seen running last: the part of the batch's time
//! that is a status and not pods. Apart from the paired runs, since its watches cost the API
//! server.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use di_api::DIJob;
use di_api::contract::labels;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use tokio::task::JoinHandle;

use super::Row;
use super::harness::{Bench, RUN_LABEL};
use super::jobs::{JobPods, all_ready, job_running};

const JOBS: usize = 100;
const COLLECTORS: usize = 10;
/// The baseline's window: the orchestrator's default creates in flight (64 before commit ba1b477).
const WINDOW: usize = 256;

pub async fn measure(bench: &Bench, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    bench.settle().await?;
    let seen = Seen::watch(bench, &bench.jobs_ns, "lag").await?;
    bench.submit("lag", JOBS, COLLECTORS).await?;
    let ours = seen.lags().await?;
    bench.settle().await?;
    let seen = Seen::watch(bench, &bench.base_ns, "lagb").await?;
    bench.baseline_marks("lagb", JOBS, COLLECTORS, WINDOW).await?;
    let base = seen.lags().await?;
    bench.settle().await?;
    rows.push(Row {
        figure: format!(
            "each job's status after its pods all ran, {JOBS} jobs x {COLLECTORS} collectors started together, \
             one run: median, 90th percentile, slowest job; the job seen running last (whose time is the batch's)"
        ),
        value: described(&ours),
        baseline: format!("{} (the limit's status writer)", described(&base)),
        ratio: None,
        goal: "-".into(),
        met: None,
    });
    Ok(())
}

/// When each job of a run was seen with all its pods running, and seen running.
struct Seen {
    pods: JoinHandle<anyhow::Result<HashMap<String, Instant>>>,
    jobs: JoinHandle<anyhow::Result<HashMap<String, Instant>>>,
}

impl Seen {
    /// Watches the run `prefix` in `namespace`, once both watches are established.
    async fn watch(bench: &Bench, namespace: &str, prefix: &str) -> anyhow::Result<Seen> {
        let want = all_ready(COLLECTORS);
        let jobs: Api<DIJob> = Api::namespaced(bench.client.clone(), namespace);
        let jobs = watcher(jobs, watcher::Config::default().labels(&format!("{RUN_LABEL}={prefix}")));
        let jobs = first_time(jobs, move |job: &DIJob| job_running(job, &want).then(|| job.name_any())).await?;
        // Pods carry their job's name, not the run's label: all of the namespace's are watched.
        let mine = format!("{prefix}-");
        let mut running = JobPods::new(COLLECTORS + 1);
        let pods = watcher(Api::<Pod>::namespaced(bench.client.clone(), namespace), watcher::Config::default());
        let pods = first_time(pods, move |pod: &Pod| {
            let of_run = pod.labels().get(labels::JOB_NAME).is_some_and(|job| job.starts_with(&mine));
            if of_run { running.saw(pod) } else { None }
        })
        .await?;
        Ok(Seen { pods, jobs })
    }

    /// Each job's status lag (from its pods all running to the job running) and when it was seen
    /// running.
    async fn lags(self) -> anyhow::Result<Vec<(Instant, Duration)>> {
        let limit = Duration::from_secs(600);
        let pods = tokio::time::timeout(limit, self.pods).await???;
        let jobs = tokio::time::timeout(limit, self.jobs).await???;
        let lag = |(job, at): (&String, &Instant)| pods.get(job).map(|ran| (*at, at.saturating_duration_since(*ran)));
        Ok(jobs.iter().filter_map(lag).collect())
    }
}

/// Once the watch is established, a task that records when `done` first named each job, until
/// it has named [`JOBS`].
async fn first_time<K: kube::Resource + Clone + Send + 'static>(
    events: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    mut done: impl FnMut(&K) -> Option<String> + Send + 'static,
) -> anyhow::Result<JoinHandle<anyhow::Result<HashMap<String, Instant>>>> {
    let mut events = events.boxed();
    // The first event is the initial list's start: from then on, nothing is missed.
    events.next().await.ok_or_else(|| anyhow::anyhow!("watch ended"))??;
    Ok(tokio::spawn(async move {
        let mut at = HashMap::new();
        while at.len() < JOBS {
            let object = match events.next().await.ok_or_else(|| anyhow::anyhow!("watch ended"))?? {
                watcher::Event::Apply(o) | watcher::Event::InitApply(o) => o,
                _ => continue,
            };
            if let Some(job) = done(&object) {
                at.entry(job).or_insert_with(Instant::now);
            }
        }
        Ok(at)
    }))
}

/// The quantiles of a run's lags, then the lag of the job seen running last.
fn described(lags: &[(Instant, Duration)]) -> String {
    let last = lags.iter().max_by_key(|(at, _)| *at).map_or(f64::NAN, |(_, lag)| lag.as_secs_f64());
    format!("{}; {last:.2} s", quantiles(lags.iter().map(|(_, lag)| *lag).collect()))
}

/// "median, 90th percentile, slowest" of `lags`, in seconds.
fn quantiles(mut lags: Vec<Duration>) -> String {
    lags.sort();
    let at = |p: usize| lags.get(lags.len().saturating_sub(1) * p / 100).map_or(f64::NAN, Duration::as_secs_f64);
    format!("{:.2} s, {:.2} s, {:.2} s", at(50), at(90), at(100))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_median_the_90th_percentile_and_the_slowest() {
        let lags = (1..=10).rev().map(|i| Duration::from_millis(100 * i)).collect();
        assert_eq!(quantiles(lags), "0.50 s, 0.90 s, 1.00 s");
        assert_eq!(quantiles(vec![]), "NaN s, NaN s, NaN s");
    }

    #[test]
    fn names_the_lag_of_the_job_seen_running_last() {
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let lags = [
            (at(300), Duration::from_millis(200)),
            (at(900), Duration::from_millis(50)),
            (at(100), Duration::from_millis(400)),
        ];
        assert_eq!(described(&lags), "0.20 s, 0.20 s, 0.40 s; 0.05 s");
    }
}
