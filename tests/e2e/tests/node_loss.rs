//! A worker lost under a running job, on kind's real nodes: the worker's kubelet stops, so the
//! node stops reporting (Ready `Unknown`) while its containers, out of the cluster's reach, run
//! on. The job's collectors there leave it within a minute of the node going silent (their short
//! tolerations of `node.kubernetes.io/unreachable`), and once their grace period is over the
//! orchestrator lets them go (their kubelet cannot confirm they stopped), so their replacements,
//! under the same names, run on the other worker. The coordinator, on the other worker, runs on
//! untouched, and the job never leaves Running. Then the kubelet returns and the node with it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use di_api::{DIJob, Phase};
use di_e2e::cluster::{not_applicable, until_watched, within};
use di_e2e::nodes::{real_nodes, schedulable};
use di_e2e::scenario::Scenario;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::wait::await_condition;
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde_json::json;

/// The label that makes a worker room for the scenario's collectors (its value: the namespace).
const SPOT: &str = "di-e2e/spot";

/// How long the whole loss may take: the node controller's grace (50 s), the collectors'
/// toleration (30 s), their grace period and the orchestrator's margin, and a start elsewhere.
const LOSS: Duration = Duration::from_secs(240);

/// Starts the node's kubelet again when dropped, so a failed test leaves the cluster whole.
struct Restart(String);

impl Drop for Restart {
    fn drop(&mut self) {
        let _ = std::process::Command::new("docker").args(["exec", &self.0, "systemctl", "start", "kubelet"]).status();
    }
}

async fn docker_exec(node: &str, command: &[&str]) {
    let out = tokio::process::Command::new("docker").arg("exec").arg(node).args(command).output().await;
    let out = out.unwrap_or_else(|e| panic!("docker exec {node}: {e}"));
    assert!(out.status.success(), "docker exec {node} {command:?}: {}", String::from_utf8_lossy(&out.stderr));
}

async fn label(client: &Client, node: &str, value: serde_json::Value) {
    let nodes: Api<Node> = Api::all(client.clone());
    let patch = json!({"metadata": {"labels": {SPOT: value}}});
    nodes.patch(node, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
}

/// The node's Ready condition's status.
fn ready(node: Option<&Node>) -> Option<String> {
    let conditions = node?.status.as_ref()?.conditions.as_ref()?;
    conditions.iter().find(|c| c.type_ == "Ready").map(|c| c.status.clone())
}

/// The nodes Kueue's controller runs on: its admission webhooks (pods' among them) must answer
/// while the worker is lost, so the lost worker is one without it.
async fn kueue_nodes(client: &Client) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "kueue-system");
    let listed = pods.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
    listed.iter().filter_map(|p| p.spec.as_ref()?.node_name.clone()).collect()
}

#[tokio::test]
#[ignore = "kind tier: run with `make e2e`"]
async fn collectors_on_a_worker_whose_kubelet_stops_run_again_on_another_and_the_job_runs_on() {
    if !real_nodes() {
        not_applicable("stops a real node's kubelet (kind tier only)");
        return;
    }
    let s = Scenario::new("node-loss").await;
    let client = s.cluster.client.clone();
    let workers = schedulable(&client).await;
    assert!(workers.len() >= 2, "kind has two workers (kind/cluster-offline.yaml): {workers:?}");
    let kueue = kueue_nodes(&client).await;
    let lost = workers.iter().find(|w| !kueue.contains(w)).expect("a worker without Kueue").clone();
    let kept = workers.iter().find(|w| **w != lost).unwrap().clone();

    // The coordinator on the worker that stays; the collectors on the one that goes.
    label(&client, &lost, json!(s.ns)).await;
    let spot = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": SPOT, "operator": "In", "values": [s.ns]}]}]}}});
    let placed = json!({
        "coordinator": {"template": {"spec": {"nodeSelector": {"kubernetes.io/hostname": kept}}}},
        "collector": {"template": {"spec": {"affinity": spot}}},
    });
    s.submit("far", 2, 0, placed).await;
    s.wait_phase("far", Phase::Running).await;
    let before: BTreeMap<String, (String, String)> = s
        .pods
        .list(&ListParams::default().labels("dijob-name=far"))
        .await
        .unwrap()
        .items
        .iter()
        .map(|p| (p.name_any(), (p.uid().unwrap(), p.spec.as_ref().unwrap().node_name.clone().unwrap())))
        .collect();
    assert_eq!(before["far-collector-0"].1, lost);
    assert_eq!(before["far-collector-1"].1, lost);
    // The other worker is room for collectors too from now on (a spot pool of two nodes).
    label(&client, &kept, json!(s.ns)).await;

    let start = Instant::now();
    let restart = Restart(lost.clone());
    docker_exec(&lost, &["systemctl", "stop", "kubelet"]).await;
    let config = watcher::Config::default().labels("dijob-name=far");
    let replaced =
        until_watched(s.pods.clone(), config, (), LOSS, "both collectors running on the other worker", |all| {
            let again = |name: &str| {
                all.iter().any(|p| {
                    p.name_any() == name
                        && p.uid().as_ref() != Some(&before[name].0)
                        && p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(kept.as_str())
                        && p.status.as_ref().and_then(|st| st.phase.as_deref()) == Some("Running")
                })
            };
            (again("far-collector-0") && again("far-collector-1")).then(|| start.elapsed())
        })
        .await;
    println!("collectors running again on {kept} {:.0} s after {lost}'s kubelet stopped", replaced.as_secs_f64());

    let nodes: Api<Node> = Api::all(client.clone());
    assert_eq!(ready(nodes.get(&lost).await.ok().as_ref()).as_deref(), Some("Unknown"), "the node went silent");
    let job = s.jobs.get("far").await.unwrap();
    let status = job.status.clone().unwrap();
    assert_eq!(status.phase, Some(Phase::Running), "{status:?}");
    assert_eq!(status.restarts.unwrap_or(0), 0, "a lost node's collectors are no restarts: {status:?}");
    let coordinator = s.pods.get("far-coordinator").await.unwrap();
    assert_eq!(coordinator.uid().unwrap(), before["far-coordinator"].0, "the coordinator ran on");

    // The kubelet returns: the node is Ready again (and stops what it still ran of the old pods).
    drop(restart);
    let back = |n: Option<&Node>| ready(n).as_deref() == Some("True");
    within(LOSS, "the node Ready again", await_condition(nodes, &lost, back)).await.unwrap();
    for node in [&lost, &kept] {
        label(&client, node, serde_json::Value::Null).await;
    }
    let running =
        |j: Option<&DIJob>| j.and_then(|j| j.status.as_ref()).is_some_and(|st| st.phase == Some(Phase::Running));
    within(Duration::from_secs(10), "the job still running", await_condition(s.jobs.clone(), "far", running))
        .await
        .unwrap();
}
