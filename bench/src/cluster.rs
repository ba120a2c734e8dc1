//! The orchestrator on the local control plane: time to running against a plain client creating
//! the same objects, API requests per job against the minimum, memory and CPU idle, at scale and
//! among unrelated pods, and the scaling curve.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use di_api::contract::labels;
use di_api::{DIJob, Phase};
use di_controller::desired::{self, Settings};
use di_e2e::binaries::{self, Unavailable};
use di_e2e::cluster::TestCluster;
use di_e2e::controlplane::ControlPlane;
use di_e2e::nodes::SimulatedNodes;
use di_e2e::orchestrator::{LocalOrchestrator, Sidecar};

use crate::profile::Profile;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::sync::Semaphore;

/// Label on the benchmark's jobs and baseline pods, naming the scenario they belong to.
const RUN_LABEL: &str = "di-bench/run";

/// Users submitting jobs at once.
const SUBMITTERS: usize = 64;

/// Jobs reconciled at once by the orchestrator (its default), and so the baseline's concurrency.
const CONCURRENCY: usize = 16;

pub struct Row {
    pub figure: String,
    pub value: String,
    pub baseline: String,
    pub ratio: Option<f64>,
    pub goal: String,
    pub met: Option<bool>,
}

pub struct ClusterReport {
    pub rows: Vec<Row>,
    /// Fitted over the curve, when it was measured.
    pub slope_ms_per_replica: Option<f64>,
    pub curve: Vec<(usize, f64, f64)>,
    /// Per scenario, where the orchestrator waited on the API server.
    pub waits: Vec<(String, Vec<RequestTime>)>,
    /// Per profiled scenario, where the orchestrator's CPU went (a markdown table), or why
    /// there is no profile.
    pub profiles: Vec<(String, Result<String, String>)>,
}

/// Requests of one verb and resource the orchestrator sent in a scenario, and the time until
/// they were answered.
pub struct RequestTime {
    pub request: String,
    pub count: f64,
    pub seconds: f64,
}

/// The orchestrator's metrics at one moment, or what grew between two: every sample by its series
/// (name and labels).
#[derive(Default)]
struct Scrape(std::collections::BTreeMap<String, f64>);

impl Scrape {
    fn add(&mut self, more: &Scrape) {
        for (k, v) in &more.0 {
            *self.0.entry(k.clone()).or_default() += v;
        }
    }

    fn parse(text: &str) -> Scrape {
        let samples = text.lines().filter(|l| !l.starts_with('#')).filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse().ok()?))
        });
        Scrape(samples.collect())
    }

    /// What grew since `before`.
    fn since(&self, before: &Scrape) -> Scrape {
        Scrape(self.0.iter().map(|(k, v)| (k.clone(), v - before.0.get(k).unwrap_or(&0.0))).collect())
    }

    /// Sum of the series whose name and labels start with `prefix`.
    fn sum(&self, prefix: &str) -> f64 {
        self.0.iter().filter(|(k, _)| k.starts_with(prefix)).map(|(_, v)| v).sum()
    }

    /// Requests by verb and resource, the longest total wait first.
    fn request_time(&self) -> Vec<RequestTime> {
        const SUM: &str = "di_orchestrator_api_request_duration_seconds_sum{";
        const COUNT: &str = "di_orchestrator_api_request_duration_seconds_count{";
        let mut times: Vec<RequestTime> = self
            .0
            .iter()
            .filter_map(|(k, seconds)| {
                let labels = k.strip_prefix(SUM)?.trim_end_matches('}');
                let count = *self.0.get(&format!("{COUNT}{labels}}}"))?;
                let value = |name: &str| labels.split(',').find_map(|kv| kv.strip_prefix(&format!("{name}=\"")));
                let request =
                    format!("{} {}", value("verb")?.trim_end_matches('"'), value("resource")?.trim_end_matches('"'));
                Some(RequestTime { request, count, seconds: *seconds })
            })
            .filter(|t| t.count > 0.0)
            .collect();
        times.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
        times
    }
}

struct Bench {
    client: Client,
    /// The orchestrator's own identity, for the baseline: the same authorization checks.
    base_client: Client,
    jobs_ns: String,
    base_ns: String,
    probe: String,
    pid: u32,
    /// The API server's and etcd's processes.
    server_pids: Vec<u32>,
}

pub async fn run(only: &[Scenario]) -> anyhow::Result<Option<ClusterReport>> {
    let root = binaries::repo_root();
    let binaries = match binaries::obtain(&root)? {
        Ok(b) => b,
        Err(Unavailable(why)) => {
            eprintln!("SKIPPED: the control-plane benchmarks need a local control plane: {why}");
            return Ok(None);
        }
    };
    let plane = ControlPlane::start(&binaries, &root.join(".cache/controlplane/runs")).await?;
    let result = measure(&plane, only).await;
    plane.stop().await;
    result.map(Some)
}

/// The parts of the cluster benchmark, in the order they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// Time to running and API requests per job, against the plain client and the minimum.
    Running,
    /// Time to running and RSS as one job grows.
    Curve,
    /// A coordinator's scale-up through its replica endpoint, against the reconciler alone.
    Replicas,
    /// RSS with 1,000 jobs and their pods, then among unrelated pods.
    Scale,
}

async fn measure(plane: &ControlPlane, only: &[Scenario]) -> anyhow::Result<ClusterReport> {
    let wanted = |s: Scenario| only.is_empty() || only.contains(&s);
    let client = plane.client().await?;
    let cluster = TestCluster { client: client.clone(), kubeconfig: plane.kubeconfig.clone() };
    cluster.install_crds().await;
    let base_ns = cluster.namespace("bench-baseline").await;
    let _base_nodes = SimulatedNodes::start(client.clone(), &base_ns);
    let (orchestrator, bench, _nodes) = Bench::start(plane, &cluster, "bench-jobs", "", &base_ns).await?;
    let idle_rss = rss_mib(bench.pid)?;
    let idle_cpu = cpu_seconds(bench.pid)?;
    let mut report = ClusterReport {
        rows: vec![Row {
            figure: "orchestrator RSS, no jobs".into(),
            value: format!("{idle_rss:.1} MiB"),
            baseline: "-".into(),
            ratio: None,
            goal: "< 15 MiB".into(),
            met: Some(idle_rss < 15.0),
        }],
        slope_ms_per_replica: None,
        curve: vec![],
        waits: vec![],
        profiles: vec![],
    };
    if wanted(Scenario::Running) {
        bench.running(&mut report).await?;
    }
    if wanted(Scenario::Curve) {
        for n in [10, 100, 1000] {
            let t = bench.time_to_running(&format!("c{n}"), 1, n).await?;
            report.curve.push((n, t.as_secs_f64(), rss_mib(bench.pid)?));
        }
        let points: Vec<(f64, f64)> = report.curve.iter().map(|(n, t, _)| (*n as f64, *t)).collect();
        report.slope_ms_per_replica = Some(fit_slope(&points) * 1000.0);
    }
    if wanted(Scenario::Replicas) {
        bench.replicas(&cluster, &mut report.rows).await?;
    }
    if wanted(Scenario::Scale) {
        // A fresh orchestrator of its own, so its memory is that of these jobs alone.
        let (_scaled, scale, _scale_nodes) = Bench::start(plane, &cluster, "bench-scale", "-scale", &base_ns).await?;
        scale.scale(rss_mib(scale.pid)?, &mut report.rows).await?;
    }
    let cpu = cpu_seconds(bench.pid)? - idle_cpu;
    report.rows.push(Row {
        figure: "orchestrator CPU over every scenario but scale (which has its own)".into(),
        value: format!("{cpu:.1} s"),
        baseline: "-".into(),
        ratio: None,
        goal: "-".into(),
        met: None,
    });
    std::fs::write(crate::out_dir()?.join("orchestrator.log"), orchestrator.log())?;
    Ok(report)
}

impl Bench {
    /// An orchestrator of its own for a new namespace, with simulated nodes, once it is ready.
    async fn start(
        plane: &ControlPlane,
        cluster: &TestCluster,
        hint: &str,
        instance: &str,
        base_ns: &str,
    ) -> anyhow::Result<(LocalOrchestrator, Bench, Arc<SimulatedNodes>)> {
        let jobs_ns = cluster.namespace(hint).await;
        let nodes = SimulatedNodes::start(cluster.client.clone(), &jobs_ns);
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let orchestrator =
            LocalOrchestrator::start_with(cluster, &jobs_ns, instance, &[format!("--probe-addr=127.0.0.1:{port}")])
                .await;
        let kubeconfig = kube::config::Kubeconfig::read_from(orchestrator.kubeconfig())?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
        let bench = Bench {
            client: cluster.client.clone(),
            base_client: Client::try_from(config)?,
            jobs_ns,
            base_ns: base_ns.to_owned(),
            probe: format!("http://127.0.0.1:{port}"),
            pid: orchestrator.pid().context("orchestrator pid")?,
            server_pids: ["kube-apiserver", "etcd"].iter().filter_map(|name| plane.pid(name)).collect(),
        };
        bench.wait_ready().await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        Ok((orchestrator, bench, nodes))
    }

    /// M jobs of N collectors against the plain client creating the same objects, and the
    /// requests each job cost against the least it could.
    async fn running(&self, report: &mut ClusterReport) -> anyhow::Result<()> {
        let (rows, waits, profiles) = (&mut report.rows, &mut report.waits, &mut report.profiles);
        // The API server's first requests of a kind pay for warming its caches; neither side
        // should be charged for that.
        self.time_to_running("warm", 1, 10).await?;
        self.baseline("bwarm", 1, 10).await?;
        // Small scenarios are over in a tenth of a second, so they are run several times,
        // alternating with the baseline, and the medians compared.
        for (m, n, runs) in [(1, 10, 7), (10, 10, 3), (100, 10, 1), (1, 500, 1)] {
            let (mut ours, mut base) = (vec![], vec![]);
            let (mut server_ours, mut server_base) = (0.0, 0.0);
            let mut spent = Scrape::default();
            let profiled = m > 1 && runs == 1;
            let mut profile = if profiled { Some(Profile::start(self.pid, &crate::out_dir()?).await) } else { None };
            for run in 0..runs {
                let (server, scrape) = (self.server_cpu()?, self.metrics().await?);
                ours.push(self.time_to_running(&format!("r{m}x{n}-{run}"), m, n).await?);
                if let Some(started) = profile.take() {
                    let summary = match started {
                        Ok(p) => p.finish(15).await,
                        Err(why) => Err(why),
                    };
                    profiles.push((format!("{m} job(s) x {n} collectors"), summary));
                }
                server_ours += self.server_cpu()? - server;
                spent.add(&self.metrics().await?.since(&scrape));
                let server = self.server_cpu()?;
                base.push(self.baseline(&format!("b{m}x{n}-{run}"), m, n).await?);
                server_base += self.server_cpu()? - server;
            }
            let (ours, base) = (median(&mut ours), median(&mut base));
            let ratio = ours.as_secs_f64() / base.as_secs_f64();
            let scenario = format!("{m} job(s) x {n} collectors");
            let jobs = (m * runs) as f64;
            let runs_note = if runs > 1 { format!(", median of {runs}") } else { String::new() };
            rows.push(Row {
                figure: format!("time to running, {scenario}{runs_note}"),
                value: format!("{:.3} s", ours.as_secs_f64()),
                baseline: format!("{:.3} s (plain client, same objects)", base.as_secs_f64()),
                ratio: Some(ratio),
                goal: "ratio <= 1.15".into(),
                met: Some(ratio <= 1.15),
            });
            // The least a job can cost: one create per pod, service and RBAC object, and one
            // status write per phase (Created, Running).
            let minimum = (2 * (n + 1) + 3 + 2) as f64;
            let requests = spent.sum("di_orchestrator_api_requests_total{") / jobs;
            rows.push(Row {
                figure: format!("API requests per job, {scenario}"),
                value: format!("{requests:.1}"),
                baseline: format!("{minimum:.0} (minimum)"),
                ratio: Some(requests / minimum),
                goal: "ratio <= 1.5".into(),
                met: Some(requests / minimum <= 1.5),
            });
            let writes = spent.sum("di_orchestrator_status_writes_total") / jobs;
            let passes = spent.sum("di_orchestrator_reconciles_total") / jobs;
            rows.push(Row {
                figure: format!("status writes and passes per job, {scenario}"),
                value: format!("{writes:.1} writes, {passes:.1} passes"),
                baseline: "2 writes (one per phase)".into(),
                ratio: Some(writes / 2.0),
                goal: "-".into(),
                met: None,
            });
            rows.push(Row {
                figure: format!("API server and etcd CPU, {scenario}, all runs"),
                value: format!("{server_ours:.2} s"),
                baseline: format!("{server_base:.2} s (plain client)"),
                ratio: Some(server_ours / server_base),
                goal: "-".into(),
                met: None,
            });
            waits.push((scenario, spent.request_time()));
        }
        Ok(())
    }

    /// CPU seconds the API server and etcd have used so far.
    fn server_cpu(&self) -> anyhow::Result<f64> {
        self.server_pids.iter().map(|pid| cpu_seconds(*pid)).sum()
    }

    /// `POST /replicas` for 1 and 10 more collectors, from the request to the answer with their
    /// URLs, against the reconciler's own time to create the same pods when the job's spec is
    /// changed directly. Medians of a few runs.
    async fn replicas(&self, cluster: &TestCluster, rows: &mut Vec<Row>) -> anyhow::Result<()> {
        const RUNS: usize = 3;
        let (job, ns) = ("scaler", self.jobs_ns.clone());
        self.time_to_running(job, 1, 1).await?;
        let job = format!("{job}-0");
        let sidecar = Sidecar::start(cluster, &ns, &job).await;
        let url = format!("{}/v1alpha1/replicas", sidecar.url);
        let http = reqwest::Client::new();
        for _ in 0..100 {
            if http.get(format!("{}/healthz", sidecar.url)).send().await.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let jobs: Api<DIJob> = Api::namespaced(self.client.clone(), &ns);
        let mut collectors = 1;
        for add in [1, 10] {
            let (mut endpoint, mut reconciler) = (vec![], vec![]);
            for _ in 0..RUNS {
                self.settle(&jobs, &job, collectors).await?;
                let start = Instant::now();
                let body = json!({"namespace": ns, "coordinator": format!("{job}-coordinator"), "collectors": {"replicas": add}});
                let reply: serde_json::Value = http.post(&url).json(&body).send().await?.json().await?;
                endpoint.push(start.elapsed());
                let urls = reply["data"]["collectors"].as_array().map_or(0, Vec::len);
                if reply["success"] != true || urls != add {
                    bail!("the replica endpoint answered {reply}\n{}", sidecar.log());
                }
                collectors += add;

                self.settle(&jobs, &job, collectors).await?;
                let pods: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
                let want = collectors + add + 1;
                let created = watch_until(pods, &format!("{}={job}", labels::JOB_NAME), move |all: &[Arc<Pod>]| {
                    all.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).count() == want
                })
                .await?;
                let start = Instant::now();
                let scale = json!({"spec": {"collector": {"replicas": collectors + add}}});
                jobs.patch(&job, &PatchParams::default(), &Patch::Merge(&scale)).await?;
                reconciler.push(took(created, start, Duration::from_secs(60), "scaling by the spec").await?);
                collectors += add;
            }
            let (e, r) = (median(&mut endpoint), median(&mut reconciler));
            let ratio = e.as_secs_f64() / r.as_secs_f64();
            rows.push(Row {
                figure: format!("replica endpoint, +{add} collector(s): request to answer with URLs"),
                value: format!("{:.0} ms", e.as_secs_f64() * 1000.0),
                baseline: format!("{:.0} ms (spec changed directly, until the pods exist)", r.as_secs_f64() * 1000.0),
                ratio: Some(ratio),
                goal: "-".into(),
                met: None,
            });
        }
        Ok(())
    }

    /// Waits until the job runs its `collectors` and its status says so, then a little longer,
    /// so a measurement does not start in the wake of the one before.
    async fn settle(&self, jobs: &Api<DIJob>, job: &str, collectors: usize) -> anyhow::Result<()> {
        let want = format!("{collectors}/{collectors}");
        let deadline = Instant::now() + Duration::from_secs(60);
        while jobs.get(job).await?.status.and_then(|s| s.collectors).as_deref() != Some(want.as_str()) {
            if Instant::now() > deadline {
                bail!("{job} did not settle at {want} collectors");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        Ok(())
    }

    /// Memory and CPU with 1,000 jobs and their 11,000 pods, then while and after 100,000 more
    /// pods that are not the orchestrator's are created.
    async fn scale(&self, idle_rss: f64, rows: &mut Vec<Row>) -> anyhow::Result<()> {
        const WINDOW: Duration = Duration::from_secs(10);
        let idle_cpu = self.cpu_percent(WINDOW).await?;
        rows.push(Row {
            figure: "orchestrator CPU, no jobs".into(),
            value: format!("{idle_cpu:.2} % of a core"),
            baseline: "-".into(),
            ratio: None,
            goal: "-".into(),
            met: None,
        });
        let (m, n) = (1000, 10);
        let took = self.time_to_running("s", m, n).await?;
        let managed = self.count_pods(&self.jobs_ns).await?;
        rows.push(Row {
            figure: format!("time to running, {m} jobs x {n} collectors"),
            value: format!("{:.1} s", took.as_secs_f64()),
            baseline: "-".into(),
            ratio: None,
            goal: "-".into(),
            met: None,
        });
        tokio::time::sleep(Duration::from_secs(2)).await;
        let scale_rss = rss_mib(self.pid)?;
        rows.push(Row {
            figure: format!("orchestrator RSS, {managed} managed pods"),
            value: format!("{scale_rss:.1} MiB"),
            baseline: format!("{idle_rss:.1} MiB idle"),
            ratio: Some(scale_rss / idle_rss),
            goal: "< 64 MiB at 10,000 pods".into(),
            met: Some(scale_rss < 64.0),
        });
        let settled_cpu = self.cpu_percent(WINDOW).await?;
        rows.push(Row {
            figure: format!("orchestrator CPU, {managed} managed pods, settled"),
            value: format!("{settled_cpu:.2} % of a core"),
            baseline: "-".into(),
            ratio: None,
            goal: "-".into(),
            met: None,
        });

        let unrelated = 100_000;
        let before = cpu_seconds(self.pid)?;
        let start = Instant::now();
        self.unrelated_pods(unrelated).await?;
        let busy = 100.0 * (cpu_seconds(self.pid)? - before) / start.elapsed().as_secs_f64();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let among = rss_mib(self.pid)?;
        rows.push(Row {
            figure: format!("orchestrator RSS, plus {unrelated} unrelated pods"),
            value: format!("{among:.1} MiB"),
            baseline: format!("{scale_rss:.1} MiB before them"),
            ratio: Some(among / scale_rss),
            goal: "flat (ratio <= 1.05)".into(),
            met: Some(among / scale_rss <= 1.05),
        });
        rows.push(Row {
            figure: format!("orchestrator CPU while {unrelated} unrelated pods are created"),
            value: format!("{busy:.2} % of a core"),
            baseline: format!("{settled_cpu:.2} % settled"),
            ratio: None,
            goal: "-".into(),
            met: None,
        });
        Ok(())
    }

    /// The orchestrator's CPU use over `window`, in percent of one core.
    async fn cpu_percent(&self, window: Duration) -> anyhow::Result<f64> {
        let before = cpu_seconds(self.pid)?;
        tokio::time::sleep(window).await;
        Ok(100.0 * (cpu_seconds(self.pid)? - before) / window.as_secs_f64())
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

    async fn metrics(&self) -> anyhow::Result<Scrape> {
        let text = reqwest::get(format!("{}/metrics", self.probe)).await?.text().await?;
        Ok(Scrape::parse(&text))
    }

    /// Submits `m` jobs of `n` collectors at once; the time until every one runs with every
    /// collector ready and every pod and service present. Completion is seen on a watch, as the
    /// baseline's is, so neither pays a polling interval.
    async fn time_to_running(&self, prefix: &str, m: usize, n: usize) -> anyhow::Result<Duration> {
        let jobs: Api<DIJob> = Api::namespaced(self.client.clone(), &self.jobs_ns);
        let want = format!("{n}/{n}");
        let running = watch_until(jobs.clone(), &format!("{RUN_LABEL}={prefix}"), move |all: &[Arc<DIJob>]| {
            let running = all.iter().filter(|j| {
                let s = j.status.as_ref();
                s.and_then(|s| s.phase) == Some(Phase::Running)
                    && s.and_then(|s| s.collectors.as_deref()) == Some(&want)
            });
            running.count() == m
        })
        .await?;
        let start = Instant::now();
        let mut creates = vec![];
        let permits = Arc::new(Semaphore::new(SUBMITTERS));
        for i in 0..m {
            let (jobs, permits) = (jobs.clone(), permits.clone());
            let mut job = job(&format!("{prefix}-{i}"), n);
            job.labels_mut().insert(RUN_LABEL.into(), prefix.into());
            creates.push(tokio::spawn(async move {
                let _permit = permits.acquire_owned().await?;
                jobs.create(&PostParams::default(), &job).await?;
                Ok::<_, anyhow::Error>(())
            }));
        }
        for c in creates {
            c.await??;
        }
        let took = took(running, start, Duration::from_secs(600), &format!("{prefix}: every job running")).await?;
        // Running with every collector ready implies their pods; the services are checked too.
        while !self.objects_present(prefix, m * (n + 1)).await? {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(took)
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

    /// The same pods, services and RBAC created by a plain client with the orchestrator's identity
    /// (so the same authorization checks), `CONCURRENCY` jobs at a time, each job's objects in the
    /// reconciler's order; until every pod runs.
    async fn baseline(&self, prefix: &str, m: usize, n: usize) -> anyhow::Result<Duration> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.base_ns);
        let total = m * (n + 1);
        let running = watch_until(pods.clone(), &format!("{RUN_LABEL}={prefix}"), move |all: &[Arc<Pod>]| {
            let running = all.iter().filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
            running.count() == total
        })
        .await?;
        let permits = Arc::new(Semaphore::new(CONCURRENCY));
        let start = Instant::now();
        let mut tasks = vec![];
        for i in 0..m {
            let mut job = job(&format!("{prefix}-{i}"), n);
            job.metadata.namespace = Some(self.base_ns.clone());
            job.metadata.uid = Some(format!("baseline-{prefix}-{i}"));
            di_api::defaults::default_dijob(&mut job);
            let replicas = desired::replicas(&job, None, &Settings::default())?;
            let mut rbac = desired::rbac(&job)?;
            for meta in [&mut rbac.service_account.metadata, &mut rbac.role.metadata, &mut rbac.binding.metadata] {
                meta.owner_references = None;
            }
            let client = self.base_client.clone();
            let ns = self.base_ns.clone();
            let (services, permits) = (Api::<Service>::namespaced(client.clone(), &ns), permits.clone());
            let pods = Api::<Pod>::namespaced(client.clone(), &ns);
            let prefix = prefix.to_owned();
            tasks.push(tokio::spawn(async move {
                let _permit = permits.acquire_owned().await?;
                let post = PostParams::default();
                // In the reconciler's order: the ServiceAccount; then the Role, RoleBinding and
                // coordinator pod, alongside every service and the other pods.
                Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(client.clone(), &ns)
                    .create(&post, &rbac.service_account)
                    .await?;
                let mut coordinator = None;
                let mut objects = vec![];
                for mut r in replicas {
                    // No owner: the job does not exist, and garbage collection must not interfere.
                    r.service.metadata.owner_references = None;
                    r.pod.metadata.owner_references = None;
                    r.pod.labels_mut().insert(RUN_LABEL.into(), prefix.clone());
                    if r.role == di_api::contract::Role::Coordinator {
                        objects.push((r.service, None));
                        coordinator = Some(r.pod);
                    } else {
                        objects.push((r.service, Some(r.pod)));
                    }
                }
                let grants = async {
                    Api::<k8s_openapi::api::rbac::v1::Role>::namespaced(client.clone(), &ns)
                        .create(&post, &rbac.role)
                        .await?;
                    Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(client.clone(), &ns)
                        .create(&post, &rbac.binding)
                        .await?;
                    if let Some(pod) = &coordinator {
                        pods.create(&post, pod).await?;
                    }
                    Ok::<_, anyhow::Error>(())
                };
                let replicas = async {
                    for (service, pod) in &objects {
                        services.create(&post, service).await?;
                        if let Some(pod) = pod {
                            pods.create(&post, pod).await?;
                        }
                    }
                    Ok::<_, anyhow::Error>(())
                };
                futures::try_join!(grants, replicas)?;
                Ok::<_, anyhow::Error>(())
            }));
        }
        for t in tasks {
            t.await??;
        }
        took(running, start, Duration::from_secs(600), &format!("{prefix}: every baseline pod running")).await
    }

    async fn count_pods(&self, ns: &str) -> anyhow::Result<usize> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        Ok(pods.list_metadata(&ListParams::default()).await?.items.len())
    }

    /// Pods the orchestrator has no business with, in a namespace of their own.
    async fn unrelated_pods(&self, count: usize) -> anyhow::Result<()> {
        let ns = "bench-unrelated";
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(self.client.clone());
        namespaces.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": ns}}))?).await?;
        // Its default ServiceAccount must exist before pods are admitted.
        let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(self.client.clone(), ns);
        while accounts.get_opt("default").await?.is_none() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let permits = Arc::new(Semaphore::new(64));
        let mut tasks = vec![];
        for i in 0..count {
            let (pods, permits) = (pods.clone(), permits.clone());
            tasks.push(tokio::spawn(async move {
                let _permit = permits.acquire_owned().await?;
                let pod: Pod = serde_json::from_value(json!({
                    "metadata": {"name": format!("unrelated-{i}"), "labels": {"app": "unrelated"}},
                    "spec": {"containers": [{"name": "c", "image": "unrelated"}]},
                }))?;
                pods.create(&PostParams::default(), &pod).await?;
                Ok::<_, anyhow::Error>(())
            }));
        }
        for t in tasks {
            t.await??;
        }
        Ok(())
    }
}

/// Starts watching `api`'s objects with `label`, and returns, once the watch is established, a
/// task that resolves to the moment `done` first holds for what it has seen.
async fn watch_until<K>(
    api: Api<K>,
    label: &str,
    done: impl Fn(&[Arc<K>]) -> bool + Send + 'static,
) -> anyhow::Result<tokio::task::JoinHandle<anyhow::Result<Instant>>>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let mut events = watcher(api, watcher::Config::default().labels(label)).reflect(writer).boxed();
    // The first event is the initial list's start: from then on, nothing created is missed.
    events.next().await.context("watch ended")??;
    Ok(tokio::spawn(async move {
        while let Some(event) = events.next().await {
            event?;
            if done(&reader.state()) {
                return Ok(Instant::now());
            }
        }
        bail!("watch ended")
    }))
}

/// Time from `start` until a [`watch_until`] task saw its condition, waiting at most `limit`.
async fn took(
    seen: tokio::task::JoinHandle<anyhow::Result<Instant>>,
    start: Instant,
    limit: Duration,
    what: &str,
) -> anyhow::Result<Duration> {
    let at = tokio::time::timeout(limit, seen).await.with_context(|| format!("{what}: not within {limit:?}"))???;
    Ok(at.max(start) - start)
}

fn job(name: &str, collectors: usize) -> DIJob {
    let pod = json!({"containers": [{"name": "di-container", "image": "ding"}]});
    serde_json::from_value(json!({
        "apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJob",
        "metadata": {"name": name},
        "spec": {"coordinator": {"template": {"spec": pod}}, "collector": {"replicas": collectors, "template": {"spec": pod}}},
    }))
    .expect("a valid job")
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn rss_mib(pid: u32) -> anyhow::Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib: f64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .context("VmRSS")?;
    Ok(kib / 1024.0)
}

fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name, which may contain spaces: utime is the 14th, stime the 15th.
    let rest = stat.rsplit_once(')').context("stat")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>()? + fields[12].parse::<f64>()?;
    Ok(ticks / 100.0)
}

/// Least-squares slope of `y` over `x`.
pub fn fit_slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    let (sx, sy) = points.iter().fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let cov: f64 = points.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let var: f64 = points.iter().map(|(x, _)| (x - mx) * (x - mx)).sum();
    if var == 0.0 { 0.0 } else { cov / var }
}
