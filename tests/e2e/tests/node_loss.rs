//! A worker lost under a running job, on kind's real nodes, its coordinator on the other worker:
//! - the worker's kubelet stops, so the node stops reporting (Ready `Unknown`) while its
//!   containers, out of the cluster's reach, run on. The job's collectors there leave it within a
//!   minute of the node going silent (their short tolerations of `node.kubernetes.io/unreachable`),
//!   and once their grace period is over the orchestrator lets them go (their kubelet cannot
//!   confirm they stopped), so their replacements, under the same names, run on the other worker.
//!   Its learner is left where it is until the node is tainted `out-of-service`, then runs again
//!   on the other worker;
//! - a spot reclaim: the worker's machine is gone at once and its Node deleted, as a cloud's
//!   controller does. Kubernetes' pod garbage collector deletes its pods; the collectors and the
//!   learner there run again on the other worker, counted as no restart.
//!
//! Either way the coordinator runs on untouched and the job never leaves Running; then the worker
//! returns (its kubelet started, its machine started and registered again).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use di_api::Phase;
use di_e2e::cluster::{not_applicable, until_watched};
use di_e2e::nodes::{real_nodes, schedulable};
use di_e2e::scenario::Scenario;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

/// The label that makes a worker room for the scenario's collectors (its value: the namespace).
const SPOT: &str = "di-e2e/spot";

/// How long the whole loss may take: the node controller's grace (50 s), the collectors'
/// toleration (30 s), their grace period and the orchestrator's margin, and a start elsewhere.
const LOSS: Duration = Duration::from_secs(240);

/// One worker lost at a time: the scenarios take turns.
static WORKERS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Runs this command (program, arguments) when dropped, so a failed test still gives the worker
/// back.
struct Undo(Vec<String>);

impl Undo {
    fn new(command: &[&str]) -> Undo {
        Undo(command.iter().map(|a| a.to_string()).collect())
    }
}

impl Drop for Undo {
    fn drop(&mut self) {
        let _ = std::process::Command::new(&self.0[0]).args(&self.0[1..]).status();
    }
}

async fn docker(args: &[&str]) {
    let out = tokio::process::Command::new("docker").args(args).output().await;
    let out = out.unwrap_or_else(|e| panic!("docker {args:?}: {e}"));
    assert!(out.status.success(), "docker {args:?}: {}", String::from_utf8_lossy(&out.stderr));
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

/// Waits until two workers are Ready and untainted (the node controller takes its `unreachable`
/// taint off a returned node a moment after it is Ready), as every later scenario expects.
async fn until_two_workers(client: &Client) {
    let nodes: Api<Node> = Api::all(client.clone());
    let what = "two workers Ready and untainted (kind/cluster-offline.yaml)";
    until_watched(nodes, watcher::Config::default(), (), LOSS, what, |all| {
        let ready_workers = all.iter().filter(|n| {
            let tainted = n.spec.as_ref().and_then(|s| s.taints.as_ref()).is_some_and(|t| !t.is_empty());
            !tainted && ready(Some(n)).as_deref() == Some("True")
        });
        (ready_workers.count() >= 2).then_some(())
    })
    .await;
}

/// The nodes Kueue's controller runs on: its admission webhooks (pods' among them) must answer
/// while the worker is lost, so the lost worker is one without it.
async fn kueue_nodes(client: &Client) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "kueue-system");
    let listed = pods.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
    listed.iter().filter_map(|p| p.spec.as_ref()?.node_name.clone()).collect()
}

/// A running job placed for a loss: its coordinator on the worker that stays (`kept`), its
/// collectors and learners on the one that goes (`lost`), which Kueue's controller does not run
/// on (its admission webhooks, pods' among them, must answer meanwhile). Once placed, both
/// workers are room for collectors and learners (a spot pool of two nodes).
struct Placed {
    s: Scenario,
    lost: String,
    kept: String,
    /// Each pod's UID and node before the loss.
    before: BTreeMap<String, (String, String)>,
    /// Every phase the job's watch showed from the moment it ran.
    phases: Arc<Mutex<Vec<Phase>>>,
    watch: tokio::task::JoinHandle<()>,
}

impl Placed {
    async fn new(hint: &str, collectors: i32, learners: i32) -> Placed {
        let s = Scenario::new(hint).await;
        let client = s.cluster.client.clone();
        // Both workers Ready: one lost by a scenario before this one may still be on its way back.
        until_two_workers(&client).await;
        let workers = schedulable(&client).await;
        let kueue = kueue_nodes(&client).await;
        let lost = workers.iter().find(|w| !kueue.contains(w)).expect("a worker without Kueue").clone();
        let kept = workers.iter().find(|w| **w != lost).unwrap().clone();
        label(&client, &lost, json!(s.ns)).await;
        let spot = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": SPOT, "operator": "In", "values": [s.ns]}]}]}}});
        let placed = json!({
            "coordinator": {"template": {"spec": {"nodeSelector": {"kubernetes.io/hostname": kept}}}},
            "collector": {"template": {"spec": {"affinity": spot}}},
            "learner": {"template": {"spec": {"affinity": spot}}},
        });
        s.submit("far", collectors, learners, placed).await;
        s.wait_phase("far", Phase::Running).await;
        let listed = s.pods.list(&ListParams::default().labels("dijob-name=far")).await.unwrap().items;
        let node_of = |p: &Pod| p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
        let before: BTreeMap<String, (String, String)> =
            listed.iter().map(|p| (p.name_any(), (p.uid().unwrap(), node_of(p)))).collect();
        for (name, (_, node)) in &before {
            let expected = if name.ends_with("coordinator") { &kept } else { &lost };
            assert_eq!(node, expected, "{name}");
        }
        label(&client, &kept, json!(s.ns)).await;
        let phases = Arc::new(Mutex::new(vec![]));
        let seen = phases.clone();
        let stream = watcher(s.jobs.clone(), watcher::Config::default().fields("metadata.name=far"));
        let watch = tokio::spawn(async move {
            let mut jobs = std::pin::pin!(stream.applied_objects());
            while let Some(Ok(job)) = jobs.next().await {
                let mut seen = seen.lock().unwrap();
                if let Some(phase) = job.status.and_then(|s| s.phase).filter(|p| !seen.contains(p)) {
                    seen.push(phase);
                }
            }
        });
        Placed { s, lost, kept, before, phases, watch }
    }

    /// Waits until each of `moved` runs again, a new pod of its name, on the kept worker; how
    /// long that took since `start`.
    async fn until_replaced(&self, moved: &[&str], start: Instant) -> Duration {
        let config = watcher::Config::default().labels("dijob-name=far");
        let what = format!("{moved:?} running on {}", self.kept);
        until_watched(self.s.pods.clone(), config, (), LOSS, &what, |all| {
            let again = |name: &&str| {
                all.iter().any(|p| {
                    p.name_any() == *name
                        && p.uid().as_ref() != Some(&self.before[*name].0)
                        && p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(self.kept.as_str())
                        && p.status.as_ref().and_then(|st| st.phase.as_deref()) == Some("Running")
                })
            };
            moved.iter().all(again).then(|| start.elapsed())
        })
        .await
    }

    /// The job ran on through the loss: Running all along, no restart counted, the same
    /// coordinator.
    async fn ran_on(&self) {
        let status = self.s.jobs.get("far").await.unwrap().status.unwrap();
        assert_eq!(status.phase, Some(Phase::Running), "{status:?}");
        assert_eq!(*self.phases.lock().unwrap(), [Phase::Running], "its phases meanwhile");
        assert_eq!(status.restarts.unwrap_or(0), 0, "a lost node's pods are no restarts: {status:?}");
        let coordinator = self.s.pods.get("far-coordinator").await.unwrap();
        assert_eq!(coordinator.uid().unwrap(), self.before["far-coordinator"].0, "the coordinator ran on");
    }

    /// Waits for the lost worker to be Ready and untainted again, then takes the scenario's labels
    /// off.
    async fn returned(&self) {
        self.watch.abort();
        until_two_workers(&self.s.cluster.client).await;
        for node in [&self.lost, &self.kept] {
            label(&self.s.cluster.client, node, serde_json::Value::Null).await;
        }
    }
}

/// The taint an administrator puts on a node that will not come back (non-graceful shutdown).
const OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";

#[tokio::test]
#[ignore = "kind tier: run with `make e2e`"]
async fn collectors_on_a_worker_whose_kubelet_stops_run_again_on_another_and_the_job_runs_on() {
    if !real_nodes() {
        not_applicable("stops a real node's kubelet (kind tier only)");
        return;
    }
    let _turn = WORKERS.lock().await;
    let placed = Placed::new("node-silent", 2, 1).await;
    let (lost, kept) = (placed.lost.clone(), placed.kept.clone());
    let start = Instant::now();
    let restart = Undo::new(&["docker", "exec", &lost, "systemctl", "start", "kubelet"]);
    docker(&["exec", &lost, "systemctl", "stop", "kubelet"]).await;
    let took = placed.until_replaced(&["far-collector-0", "far-collector-1"], start).await;
    println!("collectors running again on {kept} {:.0} s after {lost}'s kubelet stopped", took.as_secs_f64());
    let nodes: Api<Node> = Api::all(placed.s.cluster.client.clone());
    assert_eq!(ready(nodes.get(&lost).await.ok().as_ref()).as_deref(), Some("Unknown"), "the node went silent");
    // The learner is core: never forced off the silent node, it is the same pod.
    let learner = placed.s.pods.get("far-learner-0").await.unwrap();
    assert_eq!(learner.uid().unwrap(), placed.before["far-learner-0"].0, "the learner was left where it was");

    // The administrator says the node will not come back: Kubernetes lets its pods go, and the
    // learner runs again on the other worker.
    let kubeconfig = placed.s.cluster.kubeconfig.to_string_lossy().into_owned();
    let untaint =
        Undo::new(&["kubectl", "--kubeconfig", &kubeconfig, "taint", "nodes", &lost, &format!("{OUT_OF_SERVICE}-")]);
    let taint = format!("{OUT_OF_SERVICE}=nodeshutdown:NoExecute");
    let out = tokio::process::Command::new("kubectl")
        .args(["--kubeconfig", &kubeconfig, "taint", "nodes", &lost, &taint])
        .output()
        .await
        .expect("kubectl taint");
    assert!(out.status.success(), "kubectl taint: {}", String::from_utf8_lossy(&out.stderr));
    let tainted = Instant::now();
    let took = placed.until_replaced(&["far-learner-0"], tainted).await;
    println!("the learner running again on {kept} {:.0} s after {lost} was taken out of service", took.as_secs_f64());
    placed.ran_on().await;

    // The node returns to service, and its kubelet with it.
    drop(untaint);
    drop(restart);
    placed.returned().await;
}

#[tokio::test]
#[ignore = "kind tier: run with `make e2e`"]
async fn a_spot_reclaim_takes_a_worker_and_its_collectors_and_learner_run_again_on_another() {
    if !real_nodes() {
        not_applicable("stops a real node (kind tier only)");
        return;
    }
    let _turn = WORKERS.lock().await;
    let placed = Placed::new("node-reclaimed", 2, 1).await;
    let lost = placed.lost.clone();
    let start = Instant::now();
    // The machine is gone at once, and the cloud's controller deletes its Node.
    let started = Undo::new(&["docker", "start", &lost]);
    docker(&["kill", &lost]).await;
    let nodes: Api<Node> = Api::all(placed.s.cluster.client.clone());
    nodes.delete(&lost, &Default::default()).await.unwrap();
    let took = placed.until_replaced(&["far-collector-0", "far-collector-1", "far-learner-0"], start).await;
    println!(
        "collectors and learner running again on {} {:.0} s after {lost} was reclaimed",
        placed.kept,
        took.as_secs_f64()
    );
    placed.ran_on().await;
    // The machine comes back and registers again.
    drop(started);
    placed.returned().await;
}
