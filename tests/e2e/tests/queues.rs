//! Queues and quotas: Kueue beside a control plane of the test's own (`di_e2e::kueue`).

use std::sync::Arc;
use std::time::Duration;

use di_api::contract::kueue::QUEUE_NAME as QUEUE_LABEL;
use di_api::{DIJob, DIJobCondition, Phase};
use di_e2e::binaries::{self, Unavailable};
use di_e2e::capacity::{self, NodeShape};
use di_e2e::cluster::{TestCluster, not_applicable, skip, until_watched, within};
use di_e2e::controlplane::{ControlPlane, Options};
use di_e2e::history::{created_once, pod_uids};
use di_e2e::kueue;
use di_e2e::nodes::real_nodes;
use di_e2e::scenario::{Scenario, WAIT, names};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde_json::json;

/// A flavor, a ClusterQueue `team` of `quota` (resource, quantity) for every namespace, whose
/// workloads preempt lower-priority ones, and a LocalQueue `queue` of it in `ns`.
async fn queue_of(client: &Client, ns: &str, queue: &str, quota: &[(&str, &str)]) {
    flavored_queue_of(client, ns, queue, quota, json!({})).await;
}

/// As [`queue_of`], its flavor's nodes those labelled `node_labels`.
async fn flavored_queue_of(
    client: &Client,
    ns: &str,
    queue: &str,
    quota: &[(&str, &str)],
    node_labels: serde_json::Value,
) {
    let create = |kind: &'static str, plural: &str, namespace: Option<&str>, object: serde_json::Value| {
        let resource = kueue::resource(kind, plural);
        let api: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        async move {
            let object: DynamicObject = serde_json::from_value(object).unwrap();
            api.create(&PostParams::default(), &object).await.unwrap_or_else(|e| panic!("creating a {kind}: {e}"));
        }
    };
    create(
        "ResourceFlavor",
        "resourceflavors",
        None,
        json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "default"},
            "spec": {"nodeLabels": node_labels},
        }),
    )
    .await;
    create("ClusterQueue", "clusterqueues", None, json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "team"},
        "spec": {"namespaceSelector": {}, "preemption": {"withinClusterQueue": "LowerPriority"}, "resourceGroups": [{
            "coveredResources": quota.iter().map(|(r, _)| *r).collect::<Vec<_>>(),
            "flavors": [{"name": "default", "resources": quota.iter().map(|(r, q)| json!({"name": r, "nominalQuota": q})).collect::<Vec<_>>()}],
        }]},
    }))
    .await;
    create(
        "LocalQueue",
        "localqueues",
        Some(ns),
        json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": queue},
            "spec": {"clusterQueue": "team"},
        }),
    )
    .await;
}

/// A control plane's run folder is named after its process: one at a time in this one.
static ONE_PLANE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A control plane of its own with Kueue beside it (the test's while it holds the guard), or
/// `None` after saying why there is none.
async fn with_kueue() -> Option<(ControlPlane, TestCluster, tokio::sync::MutexGuard<'static, ()>)> {
    if real_nodes() {
        not_applicable("Kueue runs beside a control plane of its own, which the test starts");
        return None;
    }
    let root = binaries::repo_root();
    let binaries = match binaries::obtain(&root).unwrap() {
        Ok(binaries) => binaries,
        Err(Unavailable(why)) => {
            skip(&format!("Kueue's tests need a control plane: {why}"));
            return None;
        }
    };
    let (kueue, module) = match kueue::obtain(&root).unwrap() {
        Ok(found) => found,
        Err(Unavailable(why)) => {
            skip(&why);
            return None;
        }
    };
    let guard = ONE_PLANE.lock().await;
    let runs = root.join(".cache/controlplane/runs");
    let mut plane = Box::pin(ControlPlane::start_with(&binaries, &runs, &Options::default())).await.unwrap();
    let cluster = TestCluster { client: plane.client().await.unwrap(), kubeconfig: plane.kubeconfig.clone() };
    kueue::start(&mut plane, &cluster, &kueue, &module).await.unwrap();
    Some((plane, cluster, guard))
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn kueue_runs_beside_the_control_plane_and_admits_within_its_quota() {
    let Some((plane, cluster, _one)) = with_kueue().await else { return };
    let ns = cluster.namespace("kueue").await;
    queue_of(&cluster.client, &ns, "queue", &[("cpu", "1")]).await;
    // Three Jobs of one CPU each in a queue of one CPU, created suspended as Kueue's webhook
    // would have them: Kueue lets exactly one start.
    let jobs: Api<Job> = Api::namespaced(cluster.client.clone(), &ns);
    for i in 0..3 {
        let job = json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": format!("queued-{i}"), "labels": {"kueue.x-k8s.io/queue-name": "queue"}},
            "spec": {"suspend": true, "template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}},
            ]}}},
        });
        jobs.create(&PostParams::default(), &serde_json::from_value(job).unwrap()).await.unwrap();
    }
    let started =
        |all: &[Arc<Job>]| all.iter().filter(|j| j.spec.as_ref().and_then(|s| s.suspend) == Some(false)).count();
    let what = "Kueue to start one of the three Jobs";
    let seen = until_watched(jobs.clone(), watcher::Config::default(), (), Duration::from_secs(60), what, |all| {
        (started(all) > 0).then(|| all.to_vec())
    })
    .await;
    assert_eq!(started(&seen), 1);
    // Kueue's view: one Workload admitted, two still pending.
    let workloads: Api<DynamicObject> =
        Api::namespaced_with(cluster.client.clone(), &ns, &kueue::resource("Workload", "workloads"));
    let admitted = |w: &DynamicObject| {
        w.data["status"]["conditions"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["type"] == "Admitted" && c["status"] == "True"))
    };
    let all = workloads.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(all.len(), 3, "one Workload per Job");
    assert_eq!(all.iter().filter(|w| admitted(w)).count(), 1);
    plane.stop().await;
}

/// A role job in `queue`: a coordinator and one collector of one CPU each (and the sidecar's
/// 10m beside the coordinator).
async fn submit_queued(s: &Scenario, name: &str, queue: &str) {
    submit_ranked(s, name, queue, None).await;
}

/// As [`submit_queued`], of PriorityClass `class` when given.
async fn submit_ranked(s: &Scenario, name: &str, queue: &str, class: Option<&str>) {
    let mut container = s.nodes.container();
    container["resources"] = json!({"requests": {"cpu": "1"}});
    let pod = json!({"containers": [container]});
    let job = json!({
        "apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJob",
        "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}},
        "spec": {"coordinator": {"template": {"spec": pod}}, "collector": {"replicas": 1, "template": {"spec": pod}}},
    });
    let mut job = job;
    if let Some(class) = class {
        job["spec"]["priorityClassName"] = json!(class);
    }
    s.jobs.create(&PostParams::default(), &serde_json::from_value(job).unwrap()).await.expect("job accepted");
}

fn phase(job: &DIJob) -> Option<Phase> {
    job.status.as_ref().and_then(|s| s.phase)
}

fn queued(job: &DIJob) -> Option<&DIJobCondition> {
    job.status.as_ref()?.conditions.iter().find(|c| c.type_ == "Queued")
}

/// The jobs of the scenario once exactly `running` of them run, the rest held by their queue
/// (but those that have finished).
async fn until_running(s: &Scenario, running: usize) -> Vec<DIJob> {
    let what = format!("{running} job(s) running, the others queued");
    until_watched(s.jobs.clone(), watcher::Config::default(), (), Duration::from_secs(60), &what, |jobs| {
        let held = jobs.iter().filter(|j| queued(j).is_some_and(|c| c.status == "True")).count();
        let run = jobs.iter().filter(|j| phase(j) == Some(Phase::Running)).count();
        let finished = jobs.iter().filter(|j| phase(j).is_some_and(Phase::is_finished)).count();
        (run == running && held + run + finished == jobs.len()).then(|| jobs.iter().map(|j| DIJob::clone(j)).collect())
    })
    .await
}

async fn pods_of(s: &Scenario, job: &str) -> usize {
    let params = ListParams::default().labels(&format!("{}={job}", di_api::contract::labels::JOB_NAME));
    s.pods.list(&params).await.unwrap().items.len()
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn jobs_in_a_queue_run_one_at_a_time_within_its_quota() {
    let Some((plane, cluster, _one)) = with_kueue().await else { return };
    let s = Box::pin(Scenario::on(cluster, "queued", &[])).await;
    // Room for one job of 2.01 CPUs, not two.
    queue_of(&s.cluster.client, &s.ns, "team-queue", &[("cpu", "3"), ("memory", "100Gi")]).await;
    for name in ["first", "second", "third"] {
        submit_queued(&s, name, "team-queue").await;
    }
    let jobs = until_running(&s, 1).await;
    let running = jobs.iter().find(|j| phase(j) == Some(Phase::Running)).unwrap().name_any();
    let admitted = queued(jobs.iter().find(|j| j.name_any() == running).unwrap()).expect("a Queued condition");
    assert_eq!((admitted.status.as_str(), admitted.reason.as_deref()), ("False", Some("Admitted")));
    for job in jobs.iter().filter(|j| j.name_any() != running) {
        let held = queued(job).unwrap();
        assert_eq!(held.reason.as_deref(), Some("Pending"), "{held:?}");
        let message = held.message.as_deref().unwrap_or_default();
        assert!(message.contains("team-queue"), "it names its queue: {message}");
        assert_eq!(pods_of(&s, &job.name_any()).await, 0, "{} waits with no pod", job.name_any());
    }
    assert_eq!(pods_of(&s, &running).await, 2);

    // Its collectors scaled past its admission: none more is created, and the job says why.
    let patch = json!({"spec": {"collector": {"replicas": 3}}});
    s.jobs.patch(&running, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let said = |job: Option<&DIJob>| {
        job.and_then(queued)
            .and_then(|c| c.message.as_deref())
            .is_some_and(|m| m.contains("beyond what Kueue admitted"))
    };
    within(WAIT, "the job to say its collectors wait", await_condition(s.jobs.clone(), &running, said)).await.unwrap();
    assert_eq!(pods_of(&s, &running).await, 2, "never more pods than admitted");

    // The running job ends: its Workload is finished, its quota given back, and the next starts.
    s.nodes.exit(&s.ns, &format!("{running}-coordinator"), 0).await;
    s.wait_phase(&running, Phase::Succeeded).await;
    let jobs = until_running(&s, 1).await;
    let next = jobs.iter().find(|j| phase(j) == Some(Phase::Running)).unwrap().name_any();
    assert_ne!(next, running);
    let waiting: Vec<String> =
        jobs.iter().filter(|j| queued(j).is_some_and(|c| c.status == "True")).map(|j| j.name_any()).collect();
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    assert_eq!(pods_of(&s, &waiting[0]).await, 0);
    drop(s);
    plane.stop().await;
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn a_higher_priority_job_preempts_a_lower_one_which_runs_again_later() {
    let Some((plane, cluster, _one)) = with_kueue().await else { return };
    let classes: Api<PriorityClass> = Api::all(cluster.client.clone());
    for (name, value) in [("di-low", 10), ("di-high", 1000)] {
        let class = json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value});
        classes.create(&PostParams::default(), &serde_json::from_value(class).unwrap()).await.unwrap();
    }
    let s = Box::pin(Scenario::on(cluster, "preempt", &[])).await;
    queue_of(&s.cluster.client, &s.ns, "team-queue", &[("cpu", "3"), ("memory", "100Gi")]).await;
    submit_ranked(&s, "low", "team-queue", Some("di-low")).await;
    s.wait_phase("low", Phase::Running).await;

    // Room for one of them: the higher one takes it, the lower one loses its pods and waits.
    submit_ranked(&s, "high", "team-queue", Some("di-high")).await;
    s.wait_phase("high", Phase::Running).await;
    let evicted = s.jobs.get("low").await.unwrap();
    let held = queued(&evicted).expect("a Queued condition");
    assert_eq!(held.status, "True", "{held:?}");
    let low = watcher::Config::default().labels(&format!("{}=low", di_api::contract::labels::JOB_NAME));
    until_watched(s.pods.clone(), low, (), WAIT, "the lower job's pods to go", |pods| pods.is_empty().then_some(()))
        .await;
    let params = ListParams::default().labels(&format!("{}=low", di_api::contract::labels::JOB_NAME));
    assert!(!s.services.list(&params).await.unwrap().items.is_empty(), "its Services stay, with its restart counts");
    let events: Api<Event> = Api::namespaced(s.cluster.client.clone(), &s.ns);
    let what = "a Warning event saying the job was evicted";
    until_watched(events, watcher::Config::default(), (), WAIT, what, |all| {
        let said = all.iter().any(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("low")
                && e.reason.as_deref() == Some("Evicted")
                && e.type_.as_deref() == Some("Warning")
        });
        said.then_some(())
    })
    .await;

    // The higher one ends: the lower one is admitted again and runs to its end.
    s.nodes.exit(&s.ns, "high-coordinator", 0).await;
    s.wait_phase("high", Phase::Succeeded).await;
    s.wait_phase("low", Phase::Running).await;
    s.nodes.exit(&s.ns, "low-coordinator", 0).await;
    s.wait_phase("low", Phase::Succeeded).await;
    drop(s);
    plane.stop().await;
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn an_admitted_jobs_pods_run_on_its_flavors_nodes() {
    let Some((plane, cluster, _one)) = with_kueue().await else { return };
    // The flavor's node: the only one its labels select.
    let mut node =
        NodeShape { name: "fast-node".into(), cpu: "8".into(), memory: "64Gi".into(), ..NodeShape::default() };
    node.labels.insert("di-e2e/flavor".into(), "fast".into());
    capacity::register(&cluster.client, &node).await.unwrap();
    let s = Box::pin(Scenario::on(cluster, "flavors", &[])).await;
    let quota = [("cpu", "3"), ("memory", "100Gi")];
    flavored_queue_of(&s.cluster.client, &s.ns, "team-queue", &quota, json!({"di-e2e/flavor": "fast"})).await;
    submit_queued(&s, "placed", "team-queue").await;
    s.wait_phase("placed", Phase::Running).await;
    let params = ListParams::default().labels(&format!("{}=placed", di_api::contract::labels::JOB_NAME));
    let pods = s.pods.list(&params).await.unwrap().items;
    assert_eq!(pods.len(), 2);
    for pod in &pods {
        let spec = pod.spec.as_ref().unwrap();
        let selector = spec.node_selector.clone().unwrap_or_default();
        assert_eq!(selector.get("di-e2e/flavor").map(String::as_str), Some("fast"), "{}", pod.name_any());
        assert_eq!(spec.node_name.as_deref(), Some("fast-node"), "{} runs on the flavor's node", pod.name_any());
    }
    drop(s);
    plane.stop().await;
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn an_orchestrator_killed_during_admission_makes_one_workload_and_leaves_nothing() {
    let Some((plane, cluster, _one)) = with_kueue().await else { return };
    let mut s = Box::pin(Scenario::on(cluster, "admit-crash", &[])).await;
    queue_of(&s.cluster.client, &s.ns, "team-queue", &[("cpu", "3"), ("memory", "100Gi")]).await;
    let workloads: Api<DynamicObject> =
        Api::namespaced_with(s.cluster.client.clone(), &s.ns, &kueue::resource("Workload", "workloads"));
    let created = pod_uids(&s.pods).await;
    submit_queued(&s, "sturdy", "team-queue").await;
    // Killed the moment its Workload exists: before, or while, Kueue admits it.
    let kind = kueue::resource("Workload", "workloads");
    let first = until_watched(workloads.clone(), watcher::Config::default(), kind, WAIT, "the job's Workload", |all| {
        all.first().map(|w| DynamicObject::clone(w))
    })
    .await;
    s.orchestrator.kill().await;
    s.orchestrator.restart().await;
    s.wait_phase("sturdy", Phase::Running).await;
    let expected = names("sturdy", &["coordinator", "collector-0"]);
    let pods = s.wait_pods("sturdy", &expected).await;
    created_once(&created, &pods, &expected, "after a restart during admission");
    let all = workloads.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(all.len(), 1, "one Workload");
    assert_eq!(all[0].uid(), first.uid(), "the one made before the kill, not made again");

    // Deleted, the job takes its Workload, pods and Services with it.
    let uid = s.jobs.get("sturdy").await.unwrap().uid().unwrap();
    s.jobs.delete("sturdy", &DeleteParams::foreground()).await.unwrap();
    within(WAIT, "the job to be gone", await_condition(s.jobs.clone(), "sturdy", conditions::is_deleted(&uid)))
        .await
        .unwrap();
    assert!(workloads.list(&ListParams::default()).await.unwrap().items.is_empty(), "its Workload went with it");
    assert!(s.pods.list(&ListParams::default()).await.unwrap().items.is_empty());
    assert!(s.services.list(&ListParams::default()).await.unwrap().items.is_empty());
    drop(s);
    plane.stop().await;
}
