//! Queues and quotas: each scenario with a queue of its own, on Kueue beside a control plane of
//! the test's own or, on kind, the Kueue deployed there (`di_e2e::kueue`).

use std::sync::Arc;
use std::time::Duration;

use di_api::contract::kueue::QUEUE_NAME as QUEUE_LABEL;
use di_api::{DIJob, Phase};
use di_e2e::capacity::{self, NodeShape};
use di_e2e::cluster::{until_watched, within};
use di_e2e::history::{created_once, pod_uids};
use di_e2e::kueue::jobs::{REPLICA_CPU, queued, submit};
use di_e2e::kueue::{self, Share, TestQueue};
use di_e2e::nodes::{REAL_IMAGE, real_nodes, schedulable};
use di_e2e::scenario::{Scenario, WAIT, names};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde_json::json;

/// Room for one job of two replicas (and the sidecar's 10m beside the coordinator: 110m), not two.
const ROOM_FOR_ONE: [(&str, &str); 2] = [("cpu", "150m"), ("memory", "100Gi")];

/// Kueue alone, with batch/Jobs (one of its own frameworks): on kind this checks the deployment
/// itself, its Job webhook among it, so that a failure of the scenarios below is the orchestrator's.
#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn kueue_admits_batch_jobs_within_its_quota() {
    let Some((kueue, cluster)) = kueue::with_kueue(Share::Beside).await else { return };
    let ns = cluster.namespace("kueue").await;
    let queue = TestQueue::create(&cluster.client, &ns, "queue", &[("cpu", REPLICA_CPU)]).await;
    // Three Jobs of one replica's CPU each in a queue of one's, created suspended as Kueue's
    // webhook would have them: Kueue lets exactly one start. Its pod waits (on kind, a container
    // that sleeps until the namespace goes).
    let jobs: Api<Job> = Api::namespaced(cluster.client.clone(), &ns);
    for i in 0..3 {
        let job = json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": format!("queued-{i}"), "labels": {QUEUE_LABEL: "queue"}},
            "spec": {"suspend": true, "template": {"spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0, "containers": [
                {"name": "main", "image": REAL_IMAGE, "command": ["sleep", "3600"], "resources": {"requests": {"cpu": REPLICA_CPU}}},
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
    // Kueue makes each Job's Workload in its own time: the others may come after the first starts.
    let kind = kueue::resource("Workload", "workloads");
    let all = until_watched(workloads, watcher::Config::default(), kind, WAIT, "one Workload per Job", |all| {
        (all.len() == 3).then(|| all.to_vec())
    })
    .await;
    assert_eq!(all.iter().filter(|w| admitted(w)).count(), 1);
    let namespaces: Api<Namespace> = Api::all(cluster.client.clone());
    namespaces.delete(&ns, &DeleteParams::default()).await.unwrap();
    queue.delete().await;
    kueue.stop().await;
}

fn phase(job: &DIJob) -> Option<Phase> {
    job.status.as_ref().and_then(|s| s.phase)
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
    let Some((kueue, cluster)) = kueue::with_kueue(Share::Beside).await else { return };
    let s = Box::pin(Scenario::on(cluster, "queued", &[])).await;
    let queue = TestQueue::create(&s.cluster.client, &s.ns, "team-queue", &ROOM_FOR_ONE).await;
    for name in ["first", "second", "third"] {
        submit(&s, name, "team-queue", 1, None).await;
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
    queue.delete().await;
    kueue.stop().await;
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn a_higher_priority_job_preempts_a_lower_one_which_runs_again_later() {
    let Some((kueue, cluster)) = kueue::with_kueue(Share::Beside).await else { return };
    let s = Box::pin(Scenario::on(cluster, "preempt", &[])).await;
    // PriorityClasses are cluster-wide: named after the namespace, as the scenario's own.
    let classes: Api<PriorityClass> = Api::all(s.cluster.client.clone());
    let (low_class, high_class) = (format!("{}-low", s.ns), format!("{}-high", s.ns));
    for (name, value) in [(&low_class, 10), (&high_class, 1000)] {
        let class = json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value});
        classes.create(&PostParams::default(), &serde_json::from_value(class).unwrap()).await.unwrap();
    }
    let queue = TestQueue::create(&s.cluster.client, &s.ns, "team-queue", &ROOM_FOR_ONE).await;
    submit(&s, "low", "team-queue", 1, Some(&low_class)).await;
    s.wait_phase("low", Phase::Running).await;

    // Room for one of them: the higher one takes it, the lower one loses its pods and waits.
    submit(&s, "high", "team-queue", 1, Some(&high_class)).await;
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
    queue.delete().await;
    for class in [&low_class, &high_class] {
        classes.delete(class, &DeleteParams::default()).await.unwrap();
    }
    kueue.stop().await;
}

/// The label that marks the flavor scenario's node, its value the scenario's namespace.
const FLAVOR_LABEL: &str = "di-e2e/flavor";

/// A node labelled [`FLAVOR_LABEL`]`=value`, its name: on simulated nodes one registered for the
/// scenario, on kind the first worker (every node is shared; the value is the scenario's).
async fn flavor_node(client: &Client, value: &str) -> String {
    if !real_nodes() {
        let mut node =
            NodeShape { name: "fast-node".into(), cpu: "8".into(), memory: "64Gi".into(), ..NodeShape::default() };
        node.labels.insert(FLAVOR_LABEL.into(), value.into());
        capacity::register(client, &node).await.unwrap();
        return node.name;
    }
    let name = schedulable(client).await.remove(0);
    label_node(client, &name, json!(value)).await;
    name
}

/// On kind the flavor scenarios label the same workers: they take turns.
static FLAVOR_NODES: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Sets (or, given null, removes) [`FLAVOR_LABEL`] on node `name`.
async fn label_node(client: &Client, name: &str, value: serde_json::Value) {
    let nodes: Api<Node> = Api::all(client.clone());
    let patch = json!({"metadata": {"labels": {FLAVOR_LABEL: value}}});
    nodes.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn an_admitted_jobs_pods_run_on_its_flavors_nodes() {
    let Some((kueue, cluster)) = kueue::with_kueue(Share::Beside).await else { return };
    let _turn = FLAVOR_NODES.lock().await;
    let s = Box::pin(Scenario::on(cluster, "flavors", &[])).await;
    // The flavor's node: the only one its labels select.
    let node = flavor_node(&s.cluster.client, &s.ns).await;
    let labels = json!({FLAVOR_LABEL: s.ns});
    let queue = TestQueue::flavored(&s.cluster.client, &s.ns, "team-queue", &ROOM_FOR_ONE, labels, &[]).await;
    submit(&s, "placed", "team-queue", 1, None).await;
    s.wait_phase("placed", Phase::Running).await;
    // Where its pods run is known once they run (the job runs once its coordinator does).
    s.until_running_pods("placed", 2, WAIT).await;
    let params = ListParams::default().labels(&format!("{}=placed", di_api::contract::labels::JOB_NAME));
    let pods = s.pods.list(&params).await.unwrap().items;
    assert_eq!(pods.len(), 2);
    for pod in &pods {
        let spec = pod.spec.as_ref().unwrap();
        let selector = spec.node_selector.clone().unwrap_or_default();
        assert_eq!(selector.get(FLAVOR_LABEL), Some(&s.ns), "{} asks for the flavor's nodes", pod.name_any());
        assert_eq!(spec.node_name.as_deref(), Some(node.as_str()), "{} runs on the flavor's node", pod.name_any());
    }
    label_node(&s.cluster.client, &node, serde_json::Value::Null).await;
    drop(s);
    queue.delete().await;
    kueue.stop().await;
}

/// The rack label of the topology scenario's nodes.
const RACK_LABEL: &str = "di-e2e/rack";

/// Kueue's topology-aware scheduling: the collectors ask to share a rack, and Kueue admits the
/// job with a topology assignment. Its pods are created gated; Kueue's own ungater puts each in
/// its domain and lifts the gate; the collectors run in one rack, the job runs.
#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn a_topology_assignment_places_the_pods_in_their_domains() {
    let Some((kueue, cluster)) = kueue::with_kueue(Share::Beside).await else { return };
    let _turn = FLAVOR_NODES.lock().await;
    let s = Box::pin(Scenario::on(cluster, "topology", &[])).await;
    let client = s.cluster.client.clone();
    // Two racks of one node each: simulated nodes, or two of kind's workers.
    let mut racks: Vec<(String, &str)> = vec![];
    if real_nodes() {
        let nodes: Api<Node> = Api::all(client.clone());
        for (node, rack) in schedulable(&client).await.into_iter().zip(["a", "b"]) {
            let patch = json!({"metadata": {"labels": {RACK_LABEL: rack, FLAVOR_LABEL: s.ns}}});
            nodes.patch(&node, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
            racks.push((node, rack));
        }
        assert_eq!(racks.len(), 2, "kind has three workers (kind/cluster-offline.yaml)");
    } else {
        for rack in ["a", "b"] {
            let mut node = NodeShape {
                name: format!("rack-{rack}-node"),
                cpu: "8".into(),
                memory: "64Gi".into(),
                ..NodeShape::default()
            };
            node.labels.insert(FLAVOR_LABEL.into(), s.ns.clone());
            node.labels.insert(RACK_LABEL.into(), rack.into());
            capacity::register(&client, &node).await.unwrap();
            racks.push((node.name, rack));
        }
    }
    let labels = json!({FLAVOR_LABEL: s.ns});
    let levels = [RACK_LABEL, "kubernetes.io/hostname"];
    let queue =
        TestQueue::flavored(&client, &s.ns, "team-queue", &[("cpu", "1"), ("memory", "100Gi")], labels, &levels).await;
    let mut container = s.nodes.container();
    container["resources"] = json!({"requests": {"cpu": REPLICA_CPU}});
    let mut pod = s.nodes.pod_spec();
    pod["containers"] = json!([container]);
    let job = json!({
        "apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJob",
        "metadata": {"name": "racked", "labels": {QUEUE_LABEL: "team-queue"}},
        "spec": {
            "coordinator": {"template": {"spec": pod}},
            "collector": {"replicas": 2, "template": {
                "metadata": {"annotations": {"kueue.x-k8s.io/podset-required-topology": RACK_LABEL}}, "spec": pod}},
        },
    });
    s.jobs.create(&PostParams::default(), &serde_json::from_value(job).unwrap()).await.expect("job accepted");
    s.wait_phase("racked", Phase::Running).await;
    // Where its pods run is known once they run (the job runs once its coordinator does).
    s.until_running_pods("racked", 3, WAIT).await;

    let workloads: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &s.ns, &kueue::resource("Workload", "workloads"));
    let workload = workloads.list(&ListParams::default()).await.unwrap().items.remove(0);
    let sets = workload.data["spec"]["podSets"].as_array().unwrap().clone();
    let collectors = sets.iter().find(|p| p["name"] == "collector").unwrap();
    assert_eq!(collectors["topologyRequest"]["required"], RACK_LABEL, "{collectors}");
    let assignments = workload.data["status"]["admission"]["podSetAssignments"].as_array().unwrap().clone();
    assert!(assignments.iter().all(|a| !a["topologyAssignment"].is_null()), "{assignments:?}");

    let params = ListParams::default().labels(&format!("{}=racked", di_api::contract::labels::JOB_NAME));
    let pods = s.pods.list(&params).await.unwrap().items;
    assert_eq!(pods.len(), 3);
    let rack_of = |node: &str| racks.iter().find(|(n, _)| n == node).map(|(_, r)| *r);
    let mut collector_racks = vec![];
    for pod in &pods {
        let spec = pod.spec.as_ref().unwrap();
        assert!(spec.scheduling_gates.as_ref().is_none_or(Vec::is_empty), "{}: still gated", pod.name_any());
        assert_eq!(pod.annotations().get("kueue.x-k8s.io/workload"), Some(&workload.name_any()));
        let node = spec.node_name.as_deref().unwrap_or_default();
        let rack =
            rack_of(node).unwrap_or_else(|| panic!("{} runs on {node:?}, in no rack of the flavor", pod.name_any()));
        if pod.name_any().contains("collector") {
            collector_racks.push(rack);
        }
    }
    assert_eq!(collector_racks.len(), 2);
    assert_eq!(collector_racks[0], collector_racks[1], "the collectors share a rack");

    if real_nodes() {
        for (node, _) in &racks {
            let nodes: Api<Node> = Api::all(client.clone());
            let patch = json!({"metadata": {"labels": {RACK_LABEL: null, FLAVOR_LABEL: null}}});
            nodes.patch(node, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
        }
    }
    drop(s);
    queue.delete().await;
    kueue.stop().await;
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn an_orchestrator_killed_during_admission_makes_one_workload_and_leaves_nothing() {
    // Alone: on kind the kill takes the deployed orchestrator, and with it the webhook the
    // other scenarios' writes need, away.
    let Some((kueue, cluster)) = kueue::with_kueue(Share::Alone).await else { return };
    let mut s = Box::pin(Scenario::on(cluster, "admit-crash", &[])).await;
    let queue = TestQueue::create(&s.cluster.client, &s.ns, "team-queue", &ROOM_FOR_ONE).await;
    let workloads: Api<DynamicObject> =
        Api::namespaced_with(s.cluster.client.clone(), &s.ns, &kueue::resource("Workload", "workloads"));
    let created = pod_uids(&s.pods).await;
    submit(&s, "sturdy", "team-queue", 1, None).await;
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
    queue.delete().await;
    kueue.stop().await;
}
