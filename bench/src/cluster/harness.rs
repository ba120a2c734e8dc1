//! What every figure measures with: the local control plane, an orchestrator of its own with
//! simulated nodes and a client with its identity (for the baseline), its metrics, and jobs
//! submitted and watched until they run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use di_api::DIJob;
use di_e2e::binaries::{self, Unavailable};
use di_e2e::cluster::TestCluster;
use di_e2e::controlplane::{ControlPlane, Options, admin_client};
use di_e2e::nodes::{Binding, SimulatedNodes};
use di_e2e::orchestrator::LocalOrchestrator;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{ListParams, PostParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::Semaphore;

use super::jobs::{all_ready, job, job_running};
use super::process::cpu_seconds;
use super::requests::Scrape;

/// Label on the benchmark's jobs and baseline pods, naming the scenario they belong to.
pub const RUN_LABEL: &str = "di-bench/run";

/// Users submitting jobs at once.
pub const SUBMITTERS: usize = 64;

/// The local control plane without a scheduler, or `None` (and why, on stderr) when this machine
/// cannot run one. The simulated nodes bind pods themselves, so that what is timed is the
/// orchestrator (and the limit) alone, not kube-scheduler's queue.
pub async fn control_plane() -> anyhow::Result<Option<ControlPlane>> {
    control_plane_with(unscheduled(None)).await
}

/// Options of a control plane without a scheduler, with etcd's answers `etcd_delay` late when
/// given.
pub fn unscheduled(etcd_delay: Option<Duration>) -> Options {
    Options { etcd_delay, scheduler: false, ..Options::default() }
}

/// As [`control_plane`], started with `options`.
pub async fn control_plane_with(options: Options) -> anyhow::Result<Option<ControlPlane>> {
    let root = binaries::repo_root();
    let binaries = match binaries::obtain(&root)? {
        Ok(b) => b,
        Err(Unavailable(why)) => {
            eprintln!("SKIPPED: the control-plane benchmarks need a local control plane: {why}");
            return Ok(None);
        }
    };
    Ok(Some(ControlPlane::start_with(&binaries, &root.join(".cache/controlplane/runs"), &options).await?))
}

/// One orchestrator under test, and what a figure needs to measure it.
pub struct Bench {
    pub client: Client,
    /// The orchestrator's own identity, for the baseline: the same authorization checks.
    pub base_client: Client,
    pub jobs_ns: String,
    pub base_ns: String,
    probe: String,
    pub pid: u32,
    /// The control plane's processes of [`PLANE`] that run, each by its name.
    plane_pids: Vec<(&'static str, u32)>,
}

/// The control plane's processes whose CPU each run's log line gives, in this order; the first
/// two are the server whose CPU the report compares (`Bench::server_cpu`).
const PLANE: [&str; 3] = ["kube-apiserver", "etcd", "kube-controller-manager"];
const SERVER: [&str; 2] = ["kube-apiserver", "etcd"];

impl Bench {
    /// An orchestrator of its own for a new namespace, with simulated nodes that bind its pods
    /// themselves, once it is ready; `flags` besides the defaults.
    pub async fn start(
        plane: &ControlPlane,
        cluster: &TestCluster,
        hint: &str,
        instance: &str,
        base_ns: &str,
        flags: &[&str],
    ) -> anyhow::Result<(LocalOrchestrator, Bench, Arc<SimulatedNodes>)> {
        Self::start_bound(plane, cluster, (hint, instance), base_ns, flags, Binding::Themselves).await
    }

    /// As [`Bench::start`], with the namespace's pods bound as `binding` says.
    pub async fn start_bound(
        plane: &ControlPlane,
        cluster: &TestCluster,
        (hint, instance): (&str, &str),
        base_ns: &str,
        flags: &[&str],
        binding: Binding,
    ) -> anyhow::Result<(LocalOrchestrator, Bench, Arc<SimulatedNodes>)> {
        let jobs_ns = cluster.namespace(hint).await;
        let nodes = SimulatedNodes::start_with(cluster.client.clone(), &jobs_ns, binding);
        let port = di_e2e::ports::free_port()?;
        // DI_BENCH_ORCHESTRATOR_ARGS: flags to try (`--concurrency=8 --status-period-seconds=2`),
        // measured against the same baseline.
        // The scenario's own flags last: a flag given twice takes its last value.
        let mut args = vec![format!("--probe-addr=127.0.0.1:{port}")];
        args.extend(
            std::env::var("DI_BENCH_ORCHESTRATOR_ARGS").unwrap_or_default().split_whitespace().map(String::from),
        );
        args.extend(flags.iter().map(|f| f.to_string()));
        let orchestrator = LocalOrchestrator::start_with(cluster, &jobs_ns, instance, &args).await;
        let bench = Bench {
            client: cluster.client.clone(),
            base_client: admin_client(orchestrator.kubeconfig()).await?,
            jobs_ns,
            base_ns: base_ns.to_owned(),
            probe: format!("http://127.0.0.1:{port}"),
            pid: orchestrator.pid().context("orchestrator pid")?,
            plane_pids: PLANE.iter().filter_map(|name| Some((*name, plane.pid(name)?))).collect(),
        };
        bench.wait_ready().await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        Ok((orchestrator, bench, nodes))
    }

    async fn wait_ready(&self) -> anyhow::Result<()> {
        for _ in 0..100 {
            if reqwest::get(format!("{}/readyz", self.probe)).await.is_ok_and(|r| r.status().is_success()) {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!("the orchestrator did not become ready")
    }

    /// The orchestrator's metrics now.
    pub async fn metrics(&self) -> anyhow::Result<Scrape> {
        let text = reqwest::get(format!("{}/metrics", self.probe)).await?.text().await?;
        Ok(Scrape::parse(&text))
    }

    /// The API server's own metrics now.
    pub async fn server_metrics(&self) -> anyhow::Result<Scrape> {
        let request = axum::http::Request::get("/metrics").body(vec![])?;
        Ok(Scrape::parse(&self.client.request_text(request).await?))
    }

    /// CPU seconds the API server and etcd have used so far.
    pub fn server_cpu(&self) -> anyhow::Result<f64> {
        self.plane_pids.iter().filter(|(name, _)| SERVER.contains(name)).map(|(_, pid)| cpu_seconds(*pid)).sum()
    }

    /// CPU seconds so far of each of the control plane's processes ([`PLANE`]), by name.
    pub fn plane_cpu(&self) -> anyhow::Result<Vec<(&'static str, f64)>> {
        self.plane_pids.iter().map(|(name, pid)| Ok((*name, cpu_seconds(*pid)?))).collect()
    }

    /// Waits until the orchestrator has sent every event it queued (at most three minutes), then
    /// (at most five seconds) until the API server and etcd are nearly idle: a quarter of a
    /// second in which they used at most 30 ms of CPU (idle, they use 0 to 10). So every run starts
    /// from a quiet cluster rather than from the tail of the run before (a job's events and status
    /// land after the bench saw it run), and that tail can be charged to the side that caused it.
    /// Events are waited for by count: they go out at their own pace (5 a second by default, a
    /// hundred jobs' in about 40 s), too slowly for the API server's CPU to show them.
    pub async fn settle(&self) -> anyhow::Result<()> {
        self.drain_events().await?;
        const WINDOW: Duration = Duration::from_millis(250);
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let before = self.server_cpu()?;
            tokio::time::sleep(WINDOW).await;
            if self.server_cpu()? - before <= 0.03 || Instant::now() >= deadline {
                return Ok(());
            }
        }
    }

    /// The start of a run's clock, once the side's own preparations (its watches, the limit's
    /// ServiceAccount) are done: after a settle, unless the run is meant to meet another's
    /// (`Start::Now`). The limit's side makes more requests before its clock than the
    /// orchestrator's, and a run started right after them found the API server warm
    /// (docs/PERFORMANCE.md, after commit 202c437).
    pub async fn clock(&self, start: Start) -> anyhow::Result<Instant> {
        if start == Start::Quiet {
            self.settle().await?;
        }
        Ok(Instant::now())
    }

    /// Waits until the orchestrator has sent every event it queued, at most three minutes; how
    /// long that took.
    pub async fn drain_events(&self) -> anyhow::Result<Duration> {
        let start = Instant::now();
        let deadline = start + Duration::from_secs(180);
        while self.metrics().await?.events_waiting() > 0.0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(start.elapsed())
    }

    /// The API server's and etcd's CPU per second over `window` on a quiet cluster (call it
    /// right after a settle).
    pub async fn idle_server_rate(&self, window: Duration) -> anyhow::Result<f64> {
        per_second(window, || self.server_cpu()).await
    }

    /// The orchestrator's CPU use over `window`, in percent of one core.
    pub async fn cpu_percent(&self, window: Duration) -> anyhow::Result<f64> {
        Ok(100.0 * per_second(window, || cpu_seconds(self.pid)).await?)
    }

    /// Submits `m` jobs of `n` collectors at once; the time until every one runs with every
    /// collector ready and every pod and service present. Completion is seen on a watch, as the
    /// baseline's is, so neither pays a polling interval.
    pub async fn time_to_running(&self, prefix: &str, m: usize, n: usize) -> anyhow::Result<Duration> {
        let took = self.until_running(prefix, m, n).await?;
        self.objects_complete(prefix, m * (n + 1)).await?;
        Ok(took)
    }

    /// As [`Bench::time_to_running`], without the check of the pods and services that follows:
    /// that check lists the namespace, which costs the API server more the more runs it holds,
    /// and is no cost of the orchestrator's.
    pub async fn until_running(&self, prefix: &str, m: usize, n: usize) -> anyhow::Result<Duration> {
        Ok(self.submit(prefix, m, n).await?.took())
    }

    /// Submits the jobs and waits until they run, as [`Bench::until_running`]; when each step was.
    pub async fn submit(&self, prefix: &str, m: usize, n: usize) -> anyhow::Result<Marks> {
        self.submit_shaped(prefix, m, n, |_| {}).await
    }

    /// As [`Bench::submit`], each job changed by `shape` before it is created.
    pub async fn submit_shaped(
        &self,
        prefix: &str,
        m: usize,
        n: usize,
        shape: impl Fn(&mut DIJob),
    ) -> anyhow::Result<Marks> {
        self.submit_when(prefix, m, n, shape, Start::Quiet).await
    }

    /// As [`Bench::submit_shaped`], the clock started as `start` says.
    pub async fn submit_when(
        &self,
        prefix: &str,
        m: usize,
        n: usize,
        shape: impl Fn(&mut DIJob),
        start: Start,
    ) -> anyhow::Result<Marks> {
        let jobs: Api<DIJob> = Api::namespaced(self.client.clone(), &self.jobs_ns);
        let want = all_ready(n);
        let running = watch_until(jobs.clone(), &format!("{RUN_LABEL}={prefix}"), move |all: &[Arc<DIJob>]| {
            all.iter().filter(|j| job_running(j, &want)).count() == m
        })
        .await?;
        let start = self.clock(start).await?;
        let mut creates = vec![];
        let permits = Arc::new(Semaphore::new(SUBMITTERS));
        for i in 0..m {
            let (jobs, permits) = (jobs.clone(), permits.clone());
            let mut job = job(&format!("{prefix}-{i}"), n);
            job.labels_mut().insert(RUN_LABEL.into(), prefix.into());
            shape(&mut job);
            creates.push(tokio::spawn(async move {
                let _permit = permits.acquire_owned().await?;
                jobs.create(&PostParams::default(), &job).await?;
                Ok::<_, anyhow::Error>(())
            }));
        }
        for c in creates {
            c.await??;
        }
        let posted = Instant::now();
        let took = took(running, start, Duration::from_secs(600), &format!("{prefix}: every job running")).await?;
        Ok(Marks { start, posted, done: start + took })
    }

    /// Waits until the `count` pods and services of the run `prefix` are all there: running with
    /// every collector ready implies the pods, and the services are checked too.
    pub async fn objects_complete(&self, prefix: &str, count: usize) -> anyhow::Result<()> {
        while !self.objects_present(prefix, count).await? {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    async fn objects_present(&self, prefix: &str, count: usize) -> anyhow::Result<bool> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.jobs_ns);
        let services: Api<Service> = Api::namespaced(self.client.clone(), &self.jobs_ns);
        let mine = |name: String| name.starts_with(&format!("{prefix}-"));
        let p =
            pods.list_metadata(&ListParams::default()).await?.items.into_iter().filter(|o| mine(o.name_any())).count();
        let s = services
            .list_metadata(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|o| mine(o.name_any()))
            .count();
        Ok(p == count && s == count)
    }
}

/// Starts watching `api`'s objects with `label`, and returns, once the watch is established, a
/// task that resolves to the moment `done` first holds for what it has seen. A watch error is
/// passing, as for the limit's status writer (see `baseline`): the watcher lists again after a
/// backoff and the wait goes on, the error in the log: the run it delays shows it in its time,
/// where an error that ended the wait would end the whole invocation.
pub async fn watch_until<K>(
    api: Api<K>,
    label: &str,
    done: impl Fn(&[Arc<K>]) -> bool + Send + 'static,
) -> anyhow::Result<tokio::task::JoinHandle<anyhow::Result<Instant>>>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let mut events = watcher(api, watcher::Config::default().labels(label)).default_backoff().reflect(writer).boxed();
    // The first event is the initial list's start: from then on, nothing created is missed.
    events.next().await.context("watch ended")??;
    let label = label.to_owned();
    Ok(tokio::spawn(async move {
        while let Some(event) = events.next().await {
            if let Err(error) = event {
                eprintln!("watching {label} again: {error}");
                continue;
            }
            if done(&reader.state()) {
                return Ok(Instant::now());
            }
        }
        bail!("watch ended")
    }))
}

/// How fast the CPU seconds that `used` reads grew over `window`, per second.
async fn per_second(window: Duration, used: impl Fn() -> anyhow::Result<f64>) -> anyhow::Result<f64> {
    let before = used()?;
    tokio::time::sleep(window).await;
    Ok((used()? - before) / window.as_secs_f64())
}

/// Time from `start` until a [`watch_until`] task saw its condition, waiting at most `limit`.
pub async fn took(
    seen: tokio::task::JoinHandle<anyhow::Result<Instant>>,
    start: Instant,
    limit: Duration,
    what: &str,
) -> anyhow::Result<Duration> {
    let at = tokio::time::timeout(limit, seen).await.with_context(|| format!("{what}: not within {limit:?}"))???;
    Ok(at.max(start) - start)
}

/// When a run's clock starts (see [`Bench::clock`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// After a settle: the run is timed from a quiet cluster, as every run of the comparisons is.
    Quiet,
    /// At once: the run is meant to meet what is already going on (fairness).
    Now,
}

/// When a run started, when its client's writes were all answered, and when it was seen done.
pub struct Marks {
    pub start: Instant,
    pub posted: Instant,
    pub done: Instant,
}

impl Marks {
    pub fn took(&self) -> Duration {
        self.done - self.start
    }
}

pub fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}
