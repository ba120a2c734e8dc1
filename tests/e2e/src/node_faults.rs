//! A running job placed for a worker's fault on kind's real nodes, and the faults themselves: its
//! coordinator on the worker that stays, its collectors and learners on the one that fails. The
//! scenarios are tests/node_loss.rs; each fails a worker of its own, so two run at once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable};
use di_api::Phase;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::cluster::until_watched;
use crate::commands::run;
use crate::scenario::{Scenario, merge};

/// The label that makes a worker room for one scenario's collectors and learners: its own key
/// (`spot.di-e2e/<namespace>`), as two scenarios, each with its own failing worker, share the
/// worker that stays.
fn spot(namespace: &str) -> String {
    format!("spot.di-e2e/{namespace}")
}

/// How long a loss may take: the node controller's grace (50 s), the collectors' toleration
/// (30 s), their grace period and the orchestrator's margin, and a start elsewhere.
pub const LOSS: Duration = Duration::from_secs(240);

/// Runs this command (program, arguments) when dropped, so a failed test still gives the worker
/// back.
pub struct Undo(Vec<String>);

impl Undo {
    pub fn new(command: &[&str]) -> Undo {
        Undo(command.iter().map(|a| a.to_string()).collect())
    }
}

impl Drop for Undo {
    fn drop(&mut self) {
        let _ = std::process::Command::new(&self.0[0]).args(&self.0[1..]).output();
    }
}

/// How a worker stops answering the cluster while its containers stay where they are.
#[derive(Clone, Copy, Debug)]
pub enum Silence {
    /// Its kubelet stopped: its containers run on, out of the cluster's reach.
    KubeletStopped,
    /// Its machine frozen (`docker pause`): nothing on it runs until it thaws.
    Paused,
    /// Cut from the network: every packet arriving on its interface dropped, and every one
    /// leaving it (its own processes' and its pods').
    CutOff,
}

/// The rules that cut a node from its network, for IPv4 and IPv6 (kind's nodes reach the API
/// server by either): raw PREROUTING sees every packet that arrives, mangle POSTROUTING every one
/// that leaves; no one else writes rules there.
const CUT: [[&str; 3]; 4] = [
    ["iptables", "raw", "PREROUTING -i eth0"],
    ["iptables", "mangle", "POSTROUTING -o eth0"],
    ["ip6tables", "raw", "PREROUTING -i eth0"],
    ["ip6tables", "mangle", "POSTROUTING -o eth0"],
];

impl Silence {
    /// Makes `node` silent; what gives it back when dropped.
    pub async fn start(self, node: &str) -> Vec<Undo> {
        match self {
            Silence::KubeletStopped => {
                let undo = Undo::new(&["docker", "exec", node, "systemctl", "start", "kubelet"]);
                run("docker", &["exec", node, "systemctl", "stop", "kubelet"]).await;
                vec![undo]
            }
            Silence::Paused => {
                let undo = Undo::new(&["docker", "unpause", node]);
                run("docker", &["pause", node]).await;
                vec![undo]
            }
            Silence::CutOff => {
                let mut undo = vec![];
                for [tables, table, rule] in CUT {
                    let mut delete = vec!["docker", "exec", node, tables, "-t", table, "-D"];
                    delete.extend(rule.split(' ').chain(["-j", "DROP"]));
                    undo.push(Undo::new(&delete));
                    let mut insert = vec!["exec", node, tables, "-t", table, "-I"];
                    insert.extend(rule.split(' ').chain(["-j", "DROP"]));
                    run("docker", &insert).await;
                }
                undo
            }
        }
    }
}

async fn label(client: &Client, node: &str, namespace: &str, value: serde_json::Value) {
    let nodes: Api<Node> = Api::all(client.clone());
    let patch = json!({"metadata": {"labels": {spot(namespace): value}}});
    nodes.patch(node, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
}

/// The node's Ready condition's status.
pub fn ready(node: Option<&Node>) -> Option<String> {
    let conditions = node?.status.as_ref()?.conditions.as_ref()?;
    conditions.iter().find(|c| c.type_ == "Ready").map(|c| c.status.clone())
}

fn untainted(node: &Node) -> bool {
    let taints = node.spec.as_ref().and_then(|s| s.taints.as_ref());
    taints.is_none_or(|t| t.is_empty()) && !node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false)
}

/// Waits until each of `workers` is Ready, untainted and schedulable (the node controller takes
/// its `unreachable` taint off a returned node a moment after it is Ready), as every later
/// scenario expects.
async fn until_ready(client: &Client, workers: &[&str]) {
    let nodes: Api<Node> = Api::all(client.clone());
    let what = format!("{workers:?} Ready and untainted (kind/cluster-offline.yaml)");
    until_watched(nodes, watcher::Config::default(), (), LOSS, &what, |all| {
        let ready = |name: &&str| {
            all.iter().any(|n| n.name_any() == *name && untainted(n) && ready(Some(n)).as_deref() == Some("True"))
        };
        workers.iter().all(ready).then_some(())
    })
    .await;
}

/// The workers that scenarios fail, one scenario each at a time.
static TAKEN: std::sync::Mutex<BTreeSet<String>> = std::sync::Mutex::new(BTreeSet::new());
static FREED: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// Scenarios whose faults may run at once hold this shared; one that measures what the whole
/// cluster sees holds it alone: a worker gone silent with an orchestrator replica on it keeps
/// that replica in the webhook's Service until Kubernetes marks its pods not ready (about 50 s),
/// and admissions sent to it meanwhile time out.
static FAULTS: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// How a scenario shares the cluster with the others' faults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Share {
    /// Beside another scenario failing a worker of its own.
    Beside,
    /// With no other fault under way.
    Alone,
}

enum Hold {
    Beside { _guard: tokio::sync::RwLockReadGuard<'static, ()> },
    Alone { _guard: tokio::sync::RwLockWriteGuard<'static, ()> },
}

/// A worker this scenario may fail; given back when dropped.
struct Turn(String);

impl Turn {
    /// The first of `workers` no other scenario holds, once there is one.
    async fn take(workers: &[String]) -> Turn {
        loop {
            let freed = FREED.notified();
            {
                let mut taken = TAKEN.lock().unwrap();
                if let Some(free) = workers.iter().find(|w| !taken.contains(*w)) {
                    taken.insert(free.clone());
                    return Turn(free.clone());
                }
            }
            freed.await;
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        TAKEN.lock().unwrap().remove(&self.0);
        FREED.notify_waiters();
    }
}

/// Whether the API server refused a write because its call to a webhook failed.
fn webhook_unanswered(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if status.code == 500 && status.message.contains("failed calling webhook"))
}

/// The workers (every node but the control plane's), by name.
async fn workers(client: &Client) -> Vec<String> {
    let nodes: Api<Node> = Api::all(client.clone());
    let listed = nodes.list(&ListParams::default()).await.expect("listing the nodes").items;
    let control_plane = |n: &Node| n.labels().contains_key("node-role.kubernetes.io/control-plane");
    let mut names: Vec<String> = listed.iter().filter(|n| !control_plane(n)).map(|n| n.name_any()).collect();
    names.sort();
    names
}

/// The nodes Kueue's controller runs on: its admission webhooks (pods' among them) must answer
/// while the worker fails, so the failing worker is one without it.
async fn kueue_nodes(client: &Client) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "kueue-system");
    let listed = pods.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
    listed.iter().filter_map(|p| p.spec.as_ref()?.node_name.clone()).collect()
}

/// A running job `far` placed for a fault: its coordinator on the worker that stays (`kept`), its
/// collectors and learners on the one that fails (`lost`), which Kueue's controller does not run
/// on. Once placed, both are room for the job's collectors and learners (a spot pool of two
/// nodes), and the scenario holds its failing worker until it is back.
pub struct Placed {
    pub s: Scenario,
    pub lost: String,
    pub kept: String,
    /// Each pod's UID and node before the fault.
    pub before: BTreeMap<String, (String, String)>,
    /// Every phase the job's watch showed from the moment it ran.
    phases: Arc<Mutex<Vec<Phase>>>,
    watch: tokio::task::JoinHandle<()>,
    _turn: Turn,
    _hold: Hold,
}

impl Placed {
    /// `extra` is merged into the job's spec after the placement.
    pub async fn new(hint: &str, share: Share, collectors: i32, learners: i32, extra: serde_json::Value) -> Placed {
        let hold = match share {
            Share::Beside => Hold::Beside { _guard: FAULTS.read().await },
            Share::Alone => Hold::Alone { _guard: FAULTS.write().await },
        };
        let s = Scenario::new(hint).await;
        let client = s.cluster.client.clone();
        // The worker that stays is Kueue's: its admission webhooks (pods' among them) must answer
        // meanwhile. Scenarios share it, each failing a worker of its own.
        let workers = workers(&client).await;
        let kueue = kueue_nodes(&client).await;
        let kept = workers.iter().find(|w| kueue.contains(w)).unwrap_or(&workers[0]).clone();
        let others: Vec<String> = workers.iter().filter(|w| **w != kept).cloned().collect();
        assert!(!others.is_empty(), "kind has workers to fail besides {kept} (kind/cluster-offline.yaml)");
        let turn = Turn::take(&others).await;
        let lost = turn.0.clone();
        // Ready: a scenario before this one may have failed either a moment ago.
        until_ready(&client, &[&lost, &kept]).await;
        label(&client, &lost, &s.ns, json!("true")).await;
        let spot = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": spot(&s.ns), "operator": "Exists"}]}]}}});
        let mut spec = json!({
            "coordinator": {"template": {"spec": {"nodeSelector": {"kubernetes.io/hostname": kept}}}},
            "collector": {"template": {"spec": {"affinity": spot}}},
            "learner": {"template": {"spec": {"affinity": spot}}},
        });
        merge(&mut spec, extra);
        // Applied again while the webhook's call fails, as a user would: another scenario's
        // silent worker may hold an orchestrator replica the webhook's Service still sends to.
        let job = s.job("far", collectors, learners, spec);
        let create = || async { s.jobs.create(&PostParams::default(), &job).await };
        let backoff = ExponentialBuilder::default()
            .with_min_delay(Duration::from_secs(1))
            .with_max_delay(Duration::from_secs(8))
            .with_max_times(12);
        create.retry(backoff).when(webhook_unanswered).await.expect("job accepted");
        s.wait_phase("far", Phase::Running).await;
        // The job runs once its coordinator does: where the others run is known once they do.
        let pods = 1 + collectors.max(0) as usize + learners.max(0) as usize;
        s.until_running_pods("far", pods, crate::cluster::WAIT).await;
        let listed = s.pods.list(&ListParams::default().labels("dijob-name=far")).await.unwrap().items;
        let node_of = |p: &Pod| p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
        let before: BTreeMap<String, (String, String)> =
            listed.iter().map(|p| (p.name_any(), (p.uid().unwrap(), node_of(p)))).collect();
        for (name, (_, node)) in &before {
            let expected = if name.ends_with("coordinator") { &kept } else { &lost };
            assert_eq!(node, expected, "{name}");
        }
        label(&client, &kept, &s.ns, json!("true")).await;
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
        Placed { s, lost, kept, before, phases, watch, _turn: turn, _hold: hold }
    }

    /// Waits until each of `moved` runs again, a new pod of its name, on the kept worker; how
    /// long that took since `start`.
    pub async fn until_replaced(&self, moved: &[&str], start: Instant) -> Duration {
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

    /// Fails unless `name` is the pod it was before the fault, on the node it was on, running.
    pub async fn stayed(&self, name: &str) {
        let pod = self.s.pods.get(name).await.unwrap();
        assert_eq!(pod.uid().unwrap(), self.before[name].0, "{name} is the pod it was");
        assert_eq!(pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap(), self.before[name].1, "{name}'s node");
        assert!(pod.metadata.deletion_timestamp.is_none(), "{name} is not being deleted");
    }

    /// The job ran on through the fault: Running all along, no restart counted, the same
    /// coordinator.
    pub async fn ran_on(&self) {
        let status = self.s.jobs.get("far").await.unwrap().status.unwrap();
        assert_eq!(status.phase, Some(Phase::Running), "{status:?}");
        assert_eq!(*self.phases.lock().unwrap(), [Phase::Running], "its phases meanwhile");
        assert_eq!(status.restarts.unwrap_or(0), 0, "a failed node's pods are no restarts: {status:?}");
        self.stayed("far-coordinator").await;
    }

    /// Waits for the failed worker to be Ready and untainted again, then takes the scenario's
    /// labels off.
    pub async fn returned(&self) {
        self.watch.abort();
        until_ready(&self.s.cluster.client, &[&self.lost, &self.kept]).await;
        for node in [&self.lost, &self.kept] {
            label(&self.s.cluster.client, node, &self.s.ns, serde_json::Value::Null).await;
        }
    }
}
