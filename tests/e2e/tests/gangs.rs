//! Gang scheduling with a real kube-scheduler (Kubernetes 1.37's native PodGroups): a job's gang
//! is placed whole or not at all, so two jobs that each fit the cluster alone but not together
//! never hold GPUs the other needs. Each scenario has GPUs of its own, which only its pods select
//! ([`GpuPool`]).

use std::time::Duration;

use di_api::{DIJob, DIJobCondition, Phase};
use di_e2e::binaries::{self, Unavailable};
use di_e2e::capacity::{self, GPU, NodeShape};
use di_e2e::cluster::{TestCluster, not_applicable, skip, within};
use di_e2e::controlplane::{ControlPlane, Options};
use di_e2e::nodes::{real_nodes, schedulable};
use di_e2e::scenario::{Scenario, WAIT};
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::{Api, ResourceExt};
use serde_json::json;

/// The condition of a job whose pods the scheduler cannot place.
const WAITING: &str = "WaitingForCapacity";

/// The label a scenario's GPU nodes carry, and its pods select.
const POOL: &str = "di-e2e/pool";

/// GPUs for one scenario's pods alone (they select [`POOL`]). On the control-plane tier, nodes
/// of their own; on kind, whose workers are shared by the suite, the workers' capacity, labelled
/// and advertised as an extended resource (as a device plugin would), one scenario at a time: the
/// n-th node asked for is the n-th worker (round the workers again past the last), so a gang
/// larger than one node spreads over kubelets as over simulated nodes.
struct GpuPool {
    client: kube::Client,
    ns: String,
    /// The simulated nodes registered for the scenario.
    nodes: Vec<String>,
    /// On kind: the workers and the GPUs each advertises, while this scenario holds them.
    real: Option<(Vec<Worker>, tokio::sync::MutexGuard<'static, ()>)>,
    /// Nodes asked for so far.
    asked: usize,
}

/// A kind worker's name and the GPUs it advertises for the scenario.
type Worker = (String, u32);

/// The kind workers' GPUs are one scenario's at a time.
static REAL_NODES: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

impl GpuPool {
    /// `count` nodes of `gpus` each.
    async fn new(s: &Scenario, count: usize, gpus: u32) -> GpuPool {
        let mut pool =
            GpuPool { client: s.cluster.client.clone(), ns: s.ns.clone(), nodes: vec![], real: None, asked: 0 };
        if real_nodes() {
            let guard = REAL_NODES.lock().await;
            let nodes: Api<Node> = Api::all(pool.client.clone());
            let workers = schedulable(&pool.client).await;
            assert!(workers.len() >= 2, "kind has three workers (kind/cluster-offline.yaml): {workers:?}");
            for node in &workers {
                let label = json!({"metadata": {"labels": {POOL: pool.ns}}});
                nodes.patch(node, &PatchParams::default(), &Patch::Merge(&label)).await.unwrap();
            }
            pool.real = Some((workers.into_iter().map(|w| (w, 0)).collect(), guard));
        }
        for _ in 0..count {
            pool.add(gpus).await;
        }
        pool
    }

    /// One more node of `gpus` (on kind: as many more on the next worker).
    async fn add(&mut self, gpus: u32) {
        self.asked += 1;
        match &mut self.real {
            Some((workers, _)) => {
                let count = workers.len();
                let (node, has) = &mut workers[(self.asked - 1) % count];
                *has += gpus;
                let nodes: Api<Node> = Api::all(self.client.clone());
                let capacity = json!({"status": {"capacity": {GPU: has.to_string()}}});
                nodes.patch_status(node, &PatchParams::default(), &Patch::Merge(&capacity)).await.unwrap();
            }
            None => {
                let mut shape = NodeShape::gpu(&format!("{}-gpu-{}", self.ns, self.nodes.len()), gpus);
                shape.labels.insert(POOL.into(), self.ns.clone());
                capacity::register(&self.client, &shape).await.expect("registering a GPU node");
                self.nodes.push(shape.name);
            }
        }
    }

    /// Gives the GPUs back: the nodes go, or the kind workers lose their label and GPUs.
    async fn release(self) {
        for node in &self.nodes {
            capacity::unregister(&self.client, node).await.unwrap();
        }
        if let Some((workers, _guard)) = &self.real {
            let nodes: Api<Node> = Api::all(self.client.clone());
            for (node, _) in workers {
                let label = json!({"metadata": {"labels": {POOL: null}}});
                nodes.patch(node, &PatchParams::default(), &Patch::Merge(&label)).await.unwrap();
                let capacity = json!({"status": {"capacity": {GPU: null}}});
                nodes.patch_status(node, &PatchParams::default(), &Patch::Merge(&capacity)).await.unwrap();
            }
        }
    }
}

/// A task job of `workers` pods of one GPU each, on the scenario's nodes.
async fn submit_gpu_tasks(s: &Scenario, name: &str, workers: i32) {
    let mut container = s.nodes.container();
    container["resources"] = json!({"limits": {GPU: "1"}});
    let job = json!({
        "apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob",
        "metadata": {"name": name},
        "spec": {"tasks": [{"name": "worker", "type": "learner", "replicas": workers, "template": {"spec": {
            "containers": [container], "nodeSelector": {POOL: s.ns}, "restartPolicy": "Never",
        }}}]},
    });
    s.jobs.create(&PostParams::default(), &serde_json::from_value(job).unwrap()).await.expect("job accepted");
}

async fn pods_of(s: &Scenario, job: &str) -> Vec<Pod> {
    let params = ListParams::default().labels(&format!("{}={job}", di_api::contract::labels::JOB_NAME));
    s.pods.list(&params).await.unwrap().items
}

fn condition<'a>(job: Option<&'a DIJob>, type_: &str) -> Option<&'a DIJobCondition> {
    job?.status.as_ref()?.conditions.iter().find(|c| c.type_ == type_)
}

fn bound(pods: &[Pod]) -> Vec<String> {
    pods.iter().filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()).map(|p| p.name_any()).collect()
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn a_gang_that_does_not_fit_holds_no_gpu_until_the_one_running_ends() {
    let s = Scenario::new("gangs").await;
    let pool = GpuPool::new(&s, 2, 4).await;
    one_gang_at_a_time(&s, &["minCount (6)"]).await;
    pool.release().await;
}

/// Two gangs of six one-GPU pods on eight GPUs: the first runs whole; the second holds no GPU,
/// says it waits in the scheduler's words (which contain one of `says`) until the first ends, then runs.
async fn one_gang_at_a_time(s: &Scenario, says: &[&str]) {
    submit_gpu_tasks(s, "first", 6).await;
    s.wait_phase("first", Phase::Running).await;
    let first = pods_of(s, "first").await;
    assert_eq!(bound(&first).len(), 6);
    // No node has six GPUs: the gang is placed whole over two (on kind, two kubelets).
    let spread: std::collections::BTreeSet<_> =
        first.iter().filter_map(|p| p.spec.as_ref()?.node_name.clone()).collect();
    assert_eq!(spread.len(), 2, "the gang's nodes: {spread:?}");

    // Two of the eight GPUs are free: without a gang, two of its pods would take them.
    submit_gpu_tasks(s, "second", 6).await;
    // Its pods exist, waiting to be placed whole.
    let workers: Vec<String> = (0..6).map(|i| format!("second-worker-{i}")).collect();
    s.wait_pods("second", &workers).await;
    none_bound_for(s, "second", 5).await;
    // The job says it waits, and why, in the scheduler's words: its gang plugin's, or, where the
    // scheduler holds some of the gang's pods at its Permit stage (the GPUs they would take
    // reserved) while it tries the others, the resources those others lack.
    let scheduler_said =
        move |m: &str| says.iter().any(|w| m.contains(w)) || m.contains(&format!("Insufficient {GPU}"));
    wait_waiting(s, "second").await;
    let job = s.jobs.get("second").await.unwrap();
    let said = condition(Some(&job), WAITING).unwrap().message.clone().unwrap_or_default();
    assert!(said.contains("pod(s) cannot be placed yet; second-worker-") && scheduler_said(&said), "{said}");

    for i in 0..6 {
        s.nodes.exit(&s.ns, &format!("first-worker-{i}"), 0).await;
    }
    s.wait_phase("first", Phase::Succeeded).await;
    let job = s.wait_phase("second", Phase::Running).await;
    assert_eq!(bound(&pods_of(s, "second").await).len(), 6);
    let placed = condition(Some(&job), WAITING).expect("the condition stays, cleared");
    assert_eq!((placed.status.as_str(), placed.reason.as_deref()), ("False", Some("Placed")));
    let events: Api<Event> = Api::namespaced(s.cluster.client.clone(), &s.ns);
    let told = events.list(&ListParams::default()).await.unwrap().items.into_iter().any(|e| {
        e.reason.as_deref() == Some(WAITING)
            && e.involved_object.name.as_deref() == Some("second")
            && e.message.as_deref().is_some_and(scheduler_said)
    });
    assert!(told, "no {WAITING} event on the second job in the scheduler's words");
}

/// Polls for `secs` seconds that none of `job`'s pods is bound, the pods existing.
async fn none_bound_for(s: &Scenario, job: &str, secs: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    while tokio::time::Instant::now() < deadline {
        assert_eq!(bound(&pods_of(s, job).await), Vec::<String>::new(), "a part of {job}'s gang was placed");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn wait_waiting(s: &Scenario, job: &str) {
    let waiting = |job: Option<&DIJob>| condition(job, WAITING).is_some_and(|c| c.status == "True");
    within(WAIT, &format!("{job} to say it waits"), await_condition(s.jobs.clone(), job, waiting)).await.unwrap();
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn a_mesh_larger_than_the_cluster_is_never_placed_in_part_and_runs_once_a_node_joins() {
    let s = Scenario::new("gang-mesh").await;
    let mut pool = GpuPool::new(&s, 2, 4).await;
    submit_gpu_tasks(&s, "mesh", 10).await;
    wait_waiting(&s, "mesh").await;
    none_bound_for(&s, "mesh", 3).await;

    pool.add(4).await;
    s.wait_phase("mesh", Phase::Running).await;
    assert_eq!(bound(&pods_of(&s, "mesh").await).len(), 10);
    pool.release().await;
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn collectors_scale_while_the_learners_gang_waits_for_gpus() {
    let s = Scenario::new("gang-roles").await;
    let pool = GpuPool::new(&s, 1, 4).await;
    let on_pool = |gpus: Option<u32>| {
        let mut container = s.nodes.container();
        if let Some(gpus) = gpus {
            container["resources"] = json!({"limits": {GPU: gpus.to_string()}});
        }
        json!({"spec": {"containers": [container], "nodeSelector": {POOL: s.ns}}})
    };
    let config = json!({
        "apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "AggregatorConfig",
        "metadata": {"name": "agg"},
        "spec": {"aggregator": {"template": on_pool(None)}},
    });
    let configs: Api<di_api::AggregatorConfig> = Api::namespaced(s.cluster.client.clone(), &s.ns);
    configs.create(&PostParams::default(), &serde_json::from_value(config).unwrap()).await.unwrap();
    // One logic learner of 8 GPUs (its aggregator and one DDP learner pod): more than the node has.
    let job = json!({
        "apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJob",
        "metadata": {"name": "roles"},
        "spec": {
            "coordinator": {"template": on_pool(None)},
            "collector": {"replicas": 2, "template": on_pool(None)},
            "learner": {"replicas": 1, "gpus": 8, "aggregatorConfig": "agg", "template": on_pool(Some(8))},
        },
    });
    s.jobs.create(&PostParams::default(), &serde_json::from_value(job).unwrap()).await.expect("job accepted");
    wait_waiting(&s, "roles").await;

    let scaled = json!({"spec": {"collector": {"replicas": 5}}});
    s.jobs.patch("roles", &PatchParams::default(), &Patch::Merge(&scaled)).await.unwrap();
    // The job counts its ready collectors: all five run though the learners' gang waits.
    let five_ready = |job: Option<&DIJob>| {
        job.and_then(|j| j.status.as_ref()).and_then(|st| st.collectors.as_deref()) == Some("5/5")
    };
    within(WAIT, "five collectors running", await_condition(s.jobs.clone(), "roles", five_ready)).await.unwrap();
    // The gang's aggregator needs no GPU, yet is not placed apart from its DDP learner.
    let pods = pods_of(&s, "roles").await;
    let placed = bound(&pods);
    assert!(!placed.iter().any(|p| p.contains("aggregator") || p.contains("ddp-learner")), "{placed:?}");
    assert!(placed.iter().any(|p| p.ends_with("-coordinator")), "{placed:?}");
    pool.release().await;
}

/// scheduler-plugins' kube-scheduler with only its Coscheduling plugin added, under the name the
/// orchestrator gives gang pods by default (`--gang-scheduler-name`).
fn coscheduling_config(kubeconfig: &std::path::Path) -> String {
    let config = json!({
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": false},
        "clientConnection": {"kubeconfig": kubeconfig, "qps": 1000, "burst": 2000},
        "profiles": [{
            "schedulerName": "scheduler-plugins-scheduler",
            "plugins": {
                "multiPoint": {"enabled": [{"name": "Coscheduling"}]},
                "queueSort": {"enabled": [{"name": "Coscheduling"}], "disabled": [{"name": "*"}]},
            },
            "pluginConfig": [{"name": "Coscheduling", "args": {"permitWaitingTimeSeconds": 10}}],
        }],
    });
    serde_yaml::to_string(&config).expect("a JSON value is YAML")
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn coscheduling_places_a_gang_whole_with_its_own_scheduler() {
    if real_nodes() {
        not_applicable("coscheduling runs on a control plane of its own, which the test starts");
        return;
    }
    // Kubernetes 1.34, the release scheduler-plugins v0.34.7 is built against, without its
    // default scheduler: the coscheduling one places the gang pods.
    let root = binaries::repo_root();
    let binaries = match binaries::obtain_release(&root, &binaries::COSCHEDULING, None).unwrap() {
        Ok(binaries) => binaries,
        Err(Unavailable(why)) => return skip(&format!("coscheduling needs scheduler-plugins' scheduler: {why}")),
    };
    let options = Options { scheduler: false, workload_api: false, ..Options::default() };
    let runs = root.join(".cache/controlplane/runs");
    let mut plane = Box::pin(ControlPlane::start_with(&binaries, &runs, &options)).await.unwrap();
    let config = plane.dir.join("coscheduling.yaml");
    std::fs::write(&config, coscheduling_config(&plane.kubeconfig)).unwrap();
    // Coscheduling requeues the pods it rejected only when a pod is added or a PodGroup changes,
    // not when a sibling job's pods end: they wait for the scheduler's flush of unschedulable
    // pods, 5 minutes by default, shortened here so the scenario does not wait it out.
    let args = [
        format!("--config={}", config.display()),
        "--pod-max-in-unschedulable-pods-duration=5s".into(),
        "--secure-port=0".into(),
        "--v=1".into(),
    ];
    plane.run_beside("scheduler-plugins", &binaries.kube_scheduler, &args).unwrap();

    let cluster = TestCluster { client: plane.client().await.unwrap(), kubeconfig: plane.kubeconfig.clone() };
    let module = binaries::module_dir(&root, &binaries::COSCHEDULING, "sigs.k8s.io/scheduler-plugins@v0.34.7").unwrap();
    let crd = module.join("manifests/coscheduling/crd.yaml");
    cluster.install_crd(&crd.display().to_string(), &std::fs::read_to_string(&crd).unwrap()).await;
    let s = Box::pin(Scenario::on(cluster, "cosched", &["--gang-scheduler=coscheduling"])).await;
    let pool = GpuPool::new(&s, 2, 4).await;
    // Coscheduling's own words: its PostFilter rejects the pod it tried, and the pods it held at
    // Permit are rejected with words of their own; the job may quote either first.
    let group = format!("PodGroup {}/second gets rejected", s.ns);
    one_gang_at_a_time(&s, &[&group, "optimistic rejection in PostFilter"]).await;
    pool.release().await;
    drop(s);
    plane.stop().await;
}
