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
use di_e2e::orchestrator::LocalOrchestrator;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::sync::Semaphore;

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
    pub slope_ms_per_replica: f64,
    pub curve: Vec<(usize, f64, f64)>,
}

struct Bench {
    client: Client,
    jobs_ns: String,
    base_ns: String,
    probe: String,
    pid: u32,
}

pub async fn run() -> anyhow::Result<Option<ClusterReport>> {
    let root = binaries::repo_root();
    let binaries = match binaries::obtain(&root)? {
        Ok(b) => b,
        Err(Unavailable(why)) => {
            eprintln!("SKIPPED: the control-plane benchmarks need a local control plane: {why}");
            return Ok(None);
        }
    };
    let plane = ControlPlane::start(&binaries, &root.join(".cache/controlplane/runs")).await?;
    let result = measure(&plane).await;
    plane.stop().await;
    result.map(Some)
}

async fn measure(plane: &ControlPlane) -> anyhow::Result<ClusterReport> {
    let client = plane.client().await?;
    let cluster = TestCluster { client: client.clone(), kubeconfig: plane.kubeconfig.clone() };
    cluster.install_crds().await;
    let jobs_ns = cluster.namespace("bench-jobs").await;
    let base_ns = cluster.namespace("bench-baseline").await;
    let _nodes = (SimulatedNodes::start(client.clone(), &jobs_ns), SimulatedNodes::start(client.clone(), &base_ns));
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let orchestrator =
        LocalOrchestrator::start_with(&cluster, &jobs_ns, "", &[format!("--probe-addr=127.0.0.1:{port}")]).await;
    let bench = Bench {
        client,
        jobs_ns,
        base_ns,
        probe: format!("http://127.0.0.1:{port}"),
        pid: orchestrator.pid().context("orchestrator pid")?,
    };
    bench.wait_ready().await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle_rss = rss_mib(bench.pid)?;
    let idle_cpu = cpu_seconds(bench.pid)?;
    let mut rows = vec![Row {
        figure: "orchestrator RSS, no jobs".into(),
        value: format!("{idle_rss:.1} MiB"),
        baseline: "-".into(),
        ratio: None,
        goal: "< 15 MiB".into(),
        met: Some(idle_rss < 15.0),
    }];

    for (m, n) in [(1, 10), (10, 10), (100, 10), (1, 500)] {
        let before = bench.api_requests().await?;
        let ours = bench.time_to_running(&format!("r{m}x{n}"), m, n).await?;
        let requests = (bench.api_requests().await? - before) as f64 / m as f64;
        let base = bench.baseline(&format!("b{m}x{n}"), m, n).await?;
        let ratio = ours.as_secs_f64() / base.as_secs_f64();
        rows.push(Row {
            figure: format!("time to running, {m} job(s) x {n} collectors"),
            value: format!("{:.2} s", ours.as_secs_f64()),
            baseline: format!("{:.2} s (plain client, same objects)", base.as_secs_f64()),
            ratio: Some(ratio),
            goal: "ratio <= 1.15".into(),
            met: Some(ratio <= 1.15),
        });
        // The least a job can cost: one create per pod, service and RBAC object, and one status
        // write per phase (Created, Running).
        let minimum = (2 * (n + 1) + 3 + 2) as f64;
        rows.push(Row {
            figure: format!("API requests per job, {m} job(s) x {n} collectors"),
            value: format!("{requests:.1}"),
            baseline: format!("{minimum:.0} (minimum)"),
            ratio: Some(requests / minimum),
            goal: "ratio <= 1.5".into(),
            met: Some(requests / minimum <= 1.5),
        });
    }
    let managed = bench.count_pods(&bench.jobs_ns).await?;
    let scale_rss = rss_mib(bench.pid)?;
    rows.push(Row {
        figure: format!("orchestrator RSS, {managed} managed pods"),
        value: format!("{scale_rss:.1} MiB"),
        baseline: format!("{idle_rss:.1} MiB idle"),
        ratio: Some(scale_rss / idle_rss),
        goal: "< 64 MiB at 10,000 pods".into(),
        met: Some(scale_rss < 64.0),
    });

    let unrelated = 10_000;
    bench.unrelated_pods(unrelated).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let among = rss_mib(bench.pid)?;
    rows.push(Row {
        figure: format!("orchestrator RSS, plus {unrelated} unrelated pods"),
        value: format!("{among:.1} MiB"),
        baseline: format!("{scale_rss:.1} MiB before them"),
        ratio: Some(among / scale_rss),
        goal: "flat (ratio <= 1.05)".into(),
        met: Some(among / scale_rss <= 1.05),
    });

    let mut curve = vec![];
    for n in [10, 100, 1000] {
        let t = bench.time_to_running(&format!("c{n}"), 1, n).await?;
        curve.push((n, t.as_secs_f64(), rss_mib(bench.pid)?));
    }
    let slope = fit_slope(&curve.iter().map(|(n, t, _)| (*n as f64, *t)).collect::<Vec<_>>());
    let cpu = cpu_seconds(bench.pid)? - idle_cpu;
    rows.push(Row {
        figure: "orchestrator CPU over every scenario".into(),
        value: format!("{cpu:.1} s"),
        baseline: "-".into(),
        ratio: None,
        goal: "-".into(),
        met: None,
    });
    Ok(ClusterReport { rows, slope_ms_per_replica: slope * 1000.0, curve })
}

impl Bench {
    async fn wait_ready(&self) -> anyhow::Result<()> {
        for _ in 0..100 {
            if reqwest::get(format!("{}/readyz", self.probe)).await.is_ok_and(|r| r.status().is_success()) {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!("the orchestrator did not become ready")
    }

    async fn api_requests(&self) -> anyhow::Result<u64> {
        let text = reqwest::get(format!("{}/metrics", self.probe)).await?.text().await?;
        Ok(text
            .lines()
            .filter(|l| l.starts_with("di_orchestrator_api_requests_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum())
    }

    /// Submits `m` jobs of `n` collectors at once; the time until every one runs with every
    /// collector ready and every pod and service present.
    async fn time_to_running(&self, prefix: &str, m: usize, n: usize) -> anyhow::Result<Duration> {
        let jobs: Api<DIJob> = Api::namespaced(self.client.clone(), &self.jobs_ns);
        let start = Instant::now();
        let mut creates = vec![];
        for i in 0..m {
            let jobs = jobs.clone();
            let job = job(&format!("{prefix}-{i}"), n);
            creates.push(tokio::spawn(async move { jobs.create(&PostParams::default(), &job).await }));
        }
        for c in creates {
            c.await??;
        }
        let want = format!("{n}/{n}");
        let names: Vec<String> = (0..m).map(|i| format!("{prefix}-{i}")).collect();
        let deadline = start + Duration::from_secs(600);
        loop {
            let list = jobs.list(&ListParams::default()).await?.items;
            let running = list
                .iter()
                .filter(|j| names.contains(&j.name_any()))
                .filter(|j| {
                    let s = j.status.clone().unwrap_or_default();
                    s.phase == Some(Phase::Running) && s.collectors.as_deref() == Some(want.as_str())
                })
                .count();
            if running == m && self.objects_present(prefix, m * (n + 1)).await? {
                return Ok(start.elapsed());
            }
            if Instant::now() > deadline {
                bail!("{prefix}: {running} of {m} jobs running after 600 s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
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

    /// The same pods, services and RBAC created by a plain client, `CONCURRENCY` jobs at a time, each
    /// job's objects one after the other as the reconciler does; until every pod runs.
    async fn baseline(&self, prefix: &str, m: usize, n: usize) -> anyhow::Result<Duration> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.base_ns);
        let services: Api<Service> = Api::namespaced(self.client.clone(), &self.base_ns);
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
            let client = self.client.clone();
            let ns = self.base_ns.clone();
            let (pods, services, permits) = (pods.clone(), services.clone(), permits.clone());
            tasks.push(tokio::spawn(async move {
                let _permit = permits.acquire_owned().await?;
                let post = PostParams::default();
                Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(client.clone(), &ns)
                    .create(&post, &rbac.service_account)
                    .await?;
                Api::<k8s_openapi::api::rbac::v1::Role>::namespaced(client.clone(), &ns)
                    .create(&post, &rbac.role)
                    .await?;
                Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(client, &ns)
                    .create(&post, &rbac.binding)
                    .await?;
                for mut r in replicas {
                    // No owner: the job does not exist, and garbage collection must not interfere.
                    r.service.metadata.owner_references = None;
                    r.pod.metadata.owner_references = None;
                    services.create(&PostParams::default(), &r.service).await?;
                    pods.create(&PostParams::default(), &r.pod).await?;
                }
                Ok::<_, anyhow::Error>(())
            }));
        }
        for t in tasks {
            t.await??;
        }
        let total = m * (n + 1);
        loop {
            let running = pods
                .list(&ListParams::default().labels(labels::APP_MANAGED_BY))
                .await?
                .items
                .iter()
                .filter(|p| p.name_any().starts_with(&format!("{prefix}-")))
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .count();
            if running == total {
                return Ok(start.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
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

fn job(name: &str, collectors: usize) -> DIJob {
    let pod = json!({"containers": [{"name": "di-container", "image": "ding"}]});
    serde_json::from_value(json!({
        "apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJob",
        "metadata": {"name": name},
        "spec": {"coordinator": {"template": {"spec": pod}}, "collector": {"replicas": collectors, "template": {"spec": pod}}},
    }))
    .expect("a valid job")
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
