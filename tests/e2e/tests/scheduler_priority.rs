//! Without Kueue, collectors given a lower PriorityClass than their job's core are what
//! kube-scheduler preempts first when the nodes are full: their pods alone go, nothing is counted
//! as a failure, and they come back as room appears.

use std::sync::Arc;
use std::time::Duration;

use di_api::Phase;
use di_e2e::capacity::{self, NodeShape};
use di_e2e::cluster::until_watched;
use di_e2e::nodes::{real_nodes, schedulable};
use di_e2e::scenario::Scenario;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde_json::json;

/// The extended resource that makes a node hold so many of the scenario's pods, on simulated
/// nodes and on kind's real one alike (a node advertises it in its status, as device plugins'
/// resources are).
const SLOT: &str = "di-e2e/slot";
/// The label that keeps the scenario's pods on its node; the value is the scenario's namespace.
const SLOTS_LABEL: &str = "di-e2e/slots";

/// A node of `slots` [`SLOT`]s labelled for the scenario: a simulated node of its own, or on
/// kind the cluster's first worker. Its name.
async fn slots_node(client: &Client, ns: &str, slots: u32) -> String {
    let nodes: Api<Node> = Api::all(client.clone());
    let name = if real_nodes() {
        let name = schedulable(client).await.remove(0);
        let label = json!({"metadata": {"labels": {SLOTS_LABEL: ns}}});
        nodes.patch(&name, &PatchParams::default(), &Patch::Merge(&label)).await.unwrap();
        name
    } else {
        let mut shape = NodeShape { name: format!("{ns}-slots"), ..NodeShape::default() };
        shape.labels.insert(SLOTS_LABEL.into(), ns.into());
        capacity::register(client, &shape).await.unwrap();
        shape.name
    };
    // A kubelet copies an advertised extended resource into allocatable itself; a simulated node
    // has none to do it.
    let mut status = json!({"capacity": {SLOT: slots.to_string()}});
    if !real_nodes() {
        status["allocatable"] = status["capacity"].clone();
    }
    nodes.patch_status(&name, &PatchParams::default(), &Patch::Merge(&json!({"status": status}))).await.unwrap();
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let what = format!("node {name} to offer {slots} {SLOT}");
    until_watched(nodes, config, (), Duration::from_secs(60), &what, |all: &[Arc<Node>]| {
        let offered = all.first()?.status.as_ref()?.allocatable.as_ref()?.get(SLOT)?.0.clone();
        (offered == slots.to_string()).then_some(())
    })
    .await;
    name
}

/// Gives the node back: a simulated one goes, kind's loses the label and the resource.
async fn release(client: &Client, name: &str) {
    if !real_nodes() {
        return capacity::unregister(client, name).await.unwrap();
    }
    let nodes: Api<Node> = Api::all(client.clone());
    let label = json!({"metadata": {"labels": {SLOTS_LABEL: null}}});
    nodes.patch(name, &PatchParams::default(), &Patch::Merge(&label)).await.unwrap();
    let status = json!({"status": {"capacity": {SLOT: null}}});
    nodes.patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await.unwrap();
}

/// A role job of a coordinator and `collectors` collectors, each pod taking one [`SLOT`] of the
/// scenario's node; `class` is the job's PriorityClass, `collector_class` its collectors' own.
async fn submit(s: &Scenario, name: &str, collectors: i32, class: &str, collector_class: Option<&str>) {
    let mut container = s.nodes.container();
    container["resources"] = json!({"limits": {SLOT: "1"}});
    let mut pod = s.nodes.pod_spec();
    pod["containers"] = json!([container]);
    pod["nodeSelector"] = json!({SLOTS_LABEL: s.ns});
    let mut collector_pod = pod.clone();
    if let Some(class) = collector_class {
        collector_pod["priorityClassName"] = json!(class);
    }
    let job = json!({
        "apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJob",
        "metadata": {"name": name},
        "spec": {
            "priorityClassName": class,
            "coordinator": {"template": {"spec": pod}},
            "collector": {"replicas": collectors, "template": {"spec": collector_pod}},
        },
    });
    s.jobs.create(&PostParams::default(), &serde_json::from_value(job).unwrap()).await.expect("job accepted");
}

/// How long the scenario waits for a job's pods to run (the preempted ones stop first).
const RUNNING: Duration = Duration::from_secs(90);

/// A node of 4 slots full with a job's coordinator and 3 collectors of a lower class; a job of a
/// higher class comes: kube-scheduler preempts 2 of those collectors, never the coordinator, and
/// the first job stays Running with no restart counted. The second job goes: the collectors
/// run again.
#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn the_scheduler_preempts_collectors_of_a_lower_class_before_any_core() {
    let s = Scenario::new("scheduler-priority").await;
    let client = s.cluster.client.clone();
    let classes: Api<PriorityClass> = Api::all(client.clone());
    let (core, spare, high) = (format!("{}-core", s.ns), format!("{}-spare", s.ns), format!("{}-high", s.ns));
    for (name, value) in [(&core, 100), (&spare, 10), (&high, 1000)] {
        let class = json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                           "metadata": {"name": name}, "value": value});
        classes.create(&PostParams::default(), &serde_json::from_value(class).unwrap()).await.unwrap();
    }
    let node = slots_node(&client, &s.ns, 4).await;

    submit(&s, "low", 3, &core, Some(&spare)).await;
    s.wait_phase("low", Phase::Running).await;
    s.until_running_pods("low", 4, RUNNING).await;
    let coordinator = s.pods.get("low-coordinator").await.unwrap().uid();

    submit(&s, "high", 1, &high, None).await;
    s.wait_phase("high", Phase::Running).await;
    s.until_running_pods("high", 2, RUNNING).await;
    let kept = s.until_running_pods("low", 2, RUNNING).await;
    assert!(kept.contains("low-coordinator"), "{kept:?}");
    assert_eq!(s.pods.get("low-coordinator").await.unwrap().uid(), coordinator, "the coordinator untouched");
    let low = s.jobs.get("low").await.unwrap();
    let status = low.status.unwrap_or_default();
    assert_eq!((status.phase, status.restarts.unwrap_or(0)), (Some(Phase::Running), 0), "no failure counted");
    assert_eq!(low.spec.collector.and_then(|c| c.replicas), Some(3), "what the job asked for stands");

    s.jobs.delete("high", &DeleteParams::default()).await.unwrap();
    s.until_running_pods("low", 4, RUNNING).await;
    let restarts = s.jobs.get("low").await.unwrap().status.and_then(|st| st.restarts).unwrap_or(0);
    assert_eq!(restarts, 0, "the collectors came back as room appeared, no restart counted");
    drop(s);
    release(&client, &node).await;
    for class in [&core, &spare, &high] {
        classes.delete(class, &DeleteParams::default()).await.unwrap();
    }
}
