//! Gang jobs placed by a real scheduler, on a control plane of its own: kube-scheduler with
//! Kubernetes 1.37's gang scheduling, simulated nodes of 8 GPUs each, and task jobs of one-GPU
//! workers, each job one gang (a native PodGroup whose minimum is every worker). The orchestrator
//! against the limit (see `limit`): the DIJob's create, its PodGroup, then its headless Service
//! and pods at the window a sweep finds best, and one status write once every worker runs. Both
//! sides wait for the same scheduler, which holds a gang until all of it can be placed.
//!
//! The cluster has GPUs for the largest size's workers, not for every run's: each run's jobs are
//! deleted once it is measured, and the next run starts when their pods are gone.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use di_api::{DIJob, Phase};
use di_controller::desired::gang::{self, Backend};
use di_controller::desired::{self, Settings};
use di_e2e::capacity::{self, GPU, NodeShape};
use di_e2e::cluster::TestCluster;
use di_e2e::controlplane::{ControlPlane, Options};
use di_e2e::nodes::{Binding, SimulatedNodes};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{DeleteParams, DynamicObject, ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::baseline::{WINDOWS, took_writing};
use super::empty::until_none;
use super::harness::{self, Bench, RUN_LABEL, SUBMITTERS, Start, took, watch_until};
use super::limit::{Limit, Pairs};

/// GPUs of one simulated node, as a common 8-GPU training server.
const GPUS_PER_NODE: u32 = 8;

/// Jobs, one-GPU workers per job (one gang) and runs of each size.
const SIZES: [(usize, usize, usize); 3] = [(1, 8, 5), (1, 64, 3), (10, 8, 3)];

/// The scenario as the report names it, what a size counts and what the baseline makes.
pub fn limit() -> Limit {
    Limit::of("real scheduler, native gangs", "one-GPU workers (one gang)", "its PodGroup, Service and pods")
}

pub async fn measure(limit: &mut Limit) -> anyhow::Result<()> {
    // The workload API and the scheduler's gang plugin are on by default in the tier's options.
    let options = Options { scheduler: true, ..Options::default() };
    let Some(plane) = harness::control_plane_with(options).await? else { return Ok(()) };
    let result = on(&plane, limit).await;
    plane.stop().await;
    result
}

async fn on(plane: &ControlPlane, limit: &mut Limit) -> anyhow::Result<()> {
    let client = plane.client().await?;
    let cluster = TestCluster { client: client.clone(), kubeconfig: plane.kubeconfig.clone() };
    cluster.install_crds().await;
    let most = SIZES.iter().map(|(m, w, _)| m * w).max().unwrap_or(0);
    for i in 0..most.div_ceil(GPUS_PER_NODE as usize) {
        capacity::register(&client, &NodeShape::gpu(&format!("gpu-{i}"), GPUS_PER_NODE)).await?;
    }
    let base_ns = cluster.namespace("gangs-baseline").await;
    let _base_nodes = SimulatedNodes::start_with(client.clone(), &base_ns, Binding::Scheduler);
    let flags = ["--gang-scheduler=native"];
    let (_o, bench, _n) =
        Bench::start_bound(plane, &cluster, ("bench-gangs", "-gangs"), &base_ns, &flags, Binding::Scheduler).await?;
    // Each side's first gang warms the API server's and the scheduler's caches of its kinds.
    bench.gangs_done("gwarm", 1, 4).await?;
    bench.gangs_baseline("gbwarm", 1, 4, 16).await?;
    for (m, w, runs) in SIZES {
        let (best, swept) = bench.gang_sweep(&format!("gsw{m}x{w}"), m, w).await?;
        let (mut ours, mut base) = (vec![], vec![]);
        for run in 0..runs {
            // Which side goes first alternates, as in `running`.
            if run % 2 == 1 {
                base.push(bench.gangs_baseline(&format!("gb{m}x{w}-{run}"), m, w, best).await?);
            }
            ours.push(bench.gangs_done(&format!("g{m}x{w}-{run}"), m, w).await?);
            if run % 2 == 0 {
                base.push(bench.gangs_baseline(&format!("gb{m}x{w}-{run}"), m, w, best).await?);
            }
        }
        limit.add(m, w, Pairs::of(ours, base, best, swept));
    }
    Ok(())
}

impl Bench {
    /// The orchestrator's time to running for `m` gang jobs of `w` workers; the jobs are gone
    /// again when it returns.
    async fn gangs_done(&self, prefix: &str, m: usize, w: usize) -> anyhow::Result<Duration> {
        let jobs: Api<DIJob> = Api::namespaced(self.client.clone(), &self.jobs_ns);
        let running = watch_until(jobs.clone(), &run_label(prefix), move |all: &[Arc<DIJob>]| {
            all.iter().filter(|j| gang_running(j, w)).count() == m
        })
        .await?;
        let permits = Arc::new(Semaphore::new(SUBMITTERS));
        let start = self.clock(Start::Quiet).await?;
        let mut creates = JoinSet::new();
        for i in 0..m {
            let (jobs, permits, job) = (jobs.clone(), permits.clone(), gang_job(&format!("{prefix}-{i}"), w, prefix));
            creates.spawn(async move {
                let _permit = permits.acquire_owned().await?;
                jobs.create(&PostParams::default(), &job).await.map(drop).map_err(anyhow::Error::from)
            });
        }
        while let Some(done) = creates.join_next().await {
            done??;
        }
        let took = took(running, start, LIMIT, &format!("{prefix}: every gang job running")).await?;
        self.clear(&self.jobs_ns, prefix).await?;
        Ok(took)
    }

    /// The limit's time to running for `m` gang jobs of `w` workers with a window of `window`
    /// creates; the jobs are gone again when it returns.
    async fn gangs_baseline(&self, prefix: &str, m: usize, w: usize, window: usize) -> anyhow::Result<Duration> {
        let jobs: Api<DIJob> = Api::namespaced(self.client.clone(), &self.base_ns);
        let running = watch_until(jobs.clone(), &run_label(prefix), move |all: &[Arc<DIJob>]| {
            all.iter().filter(|j| gang_running(j, w)).count() == m
        })
        .await?;
        let status = json!({"status": {"phase": "Running", "replicas": w, "readyReplicas": w}});
        let writer = self.status_writer(prefix, m, w, status).await?;
        let (submitters, window) = (Arc::new(Semaphore::new(SUBMITTERS)), Arc::new(Semaphore::new(window)));
        let start = self.clock(Start::Quiet).await?;
        let mut creates = JoinSet::new();
        for i in 0..m {
            let (jobs, submitters, window) = (jobs.clone(), submitters.clone(), window.clone());
            let (objects, job) = (self.base_client.clone(), gang_job(&format!("{prefix}-{i}"), w, prefix));
            creates.spawn(async move {
                let created = {
                    let _permit = submitters.acquire_owned().await?;
                    jobs.create(&PostParams::default(), &job).await?
                };
                create_gang(objects, created, window).await
            });
        }
        while let Some(done) = creates.join_next().await {
            done??;
        }
        let took =
            took_writing(running, writer, start, LIMIT, &format!("{prefix}: every baseline gang job running")).await?;
        self.clear(&self.base_ns, prefix).await?;
        Ok(took)
    }

    /// One baseline run at each window of the sweep: the window that did best, and each one's
    /// time.
    async fn gang_sweep(&self, prefix: &str, m: usize, w: usize) -> anyhow::Result<(usize, Vec<(usize, Duration)>)> {
        // A PodGroup, a Service and the workers per job.
        let objects = m * (w + 2);
        let mut windows: Vec<usize> = WINDOWS.iter().map(|x| (*x).min(objects)).collect();
        windows.dedup();
        let mut times = vec![];
        for window in windows {
            times.push((window, self.gangs_baseline(&format!("{prefix}-w{window}"), m, w, window).await?));
        }
        let best = times.iter().min_by_key(|(_, t)| *t).map(|(x, _)| *x).context("no window swept")?;
        Ok((best, times))
    }

    /// Deletes the run `prefix`'s jobs in `ns` and waits until their pods are gone, so their
    /// GPUs are free, then until the cluster is quiet.
    async fn clear(&self, ns: &str, prefix: &str) -> anyhow::Result<()> {
        let jobs: Api<DIJob> = Api::namespaced(self.client.clone(), ns);
        let selector = ListParams::default().labels(&run_label(prefix));
        jobs.delete_collection(&DeleteParams::background(), &selector).await?;
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        until_none(&pods, &selector, &format!("{prefix}: pods")).await?;
        self.settle().await
    }
}

/// How long any one wait of the scenario may take.
const LIMIT: Duration = Duration::from_secs(300);

fn run_label(prefix: &str) -> String {
    format!("{RUN_LABEL}={prefix}")
}

/// Whether a task job of `w` workers runs with every one of them ready.
fn gang_running(job: &DIJob, w: usize) -> bool {
    let status = job.status.as_ref();
    status.and_then(|s| s.phase) == Some(Phase::Running) && status.and_then(|s| s.ready_replicas) == Some(w as i32)
}

/// A task job of `workers` one-GPU workers in one gang, its pods labelled with the run.
fn gang_job(name: &str, workers: usize, run: &str) -> DIJob {
    let container = json!({"name": "di-container", "image": "ding", "resources": {"limits": {GPU: "1"}}});
    serde_json::from_value(json!({
        "apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob",
        "metadata": {"name": name, "labels": {RUN_LABEL: run}},
        "spec": {"tasks": [{"name": "worker", "type": "learner", "replicas": workers, "template": {
            "metadata": {"labels": {RUN_LABEL: run}},
            "spec": {"containers": [container], "restartPolicy": "Never"},
        }}]},
    }))
    .expect("a valid job")
}

/// What the orchestrator makes for the created task `job`, made by a plain client: its PodGroup
/// first (a careful client's order, and the orchestrator's), then its Service and pods, each
/// create holding a permit of `window`.
async fn create_gang(client: kube::Client, mut job: DIJob, window: Arc<Semaphore>) -> anyhow::Result<()> {
    let ns = job.namespace().context("the created job's namespace")?;
    di_api::defaults::default_dijob(&mut job);
    let settings = Settings { gang: Backend::Native, ..Settings::default() };
    let owner = desired::owner_reference(&job, &settings.owner_version)?;
    let kind = gang::api_resource(&settings.gang).context("native PodGroups' kind")?;
    let groups: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &kind);
    let gangs = gang::task_gangs(&job);
    let mut gang_of = BTreeMap::new();
    for g in &gangs {
        let group = gang::pod_group(&job, g, &settings.gang, &owner, None).context("a native PodGroup")?;
        let _permit = window.acquire().await?;
        groups.create(&PostParams::default(), &serde_json::from_value(group)?).await?;
        gang_of.extend(g.pods.iter().map(|p| (p.clone(), g.name.clone())));
    }
    let objects = desired::task_objects(&job, &settings)?;
    let mut creates = JoinSet::new();
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let permit = window.clone();
    creates.spawn(async move {
        let _permit = permit.acquire_owned().await?;
        services.create(&PostParams::default(), &objects.service).await.map(drop).map_err(anyhow::Error::from)
    });
    for mut task_pod in objects.pods {
        if let Some(group) = gang_of.get(&task_pod.pod.name_any()) {
            gang::join(&mut task_pod.pod, group, &settings.gang);
        }
        let (pods, permit) = (Api::<Pod>::namespaced(client.clone(), &ns), window.clone());
        creates.spawn(async move {
            let _permit = permit.acquire_owned().await?;
            pods.create(&PostParams::default(), &task_pod.pod).await.map(drop).map_err(anyhow::Error::from)
        });
    }
    while let Some(done) = creates.join_next().await {
        done??;
    }
    Ok(())
}
