//! Nodes for the suite's pods. On the local control plane no kubelet runs, so the simulated nodes
//! play it: they move pods to Running through the status subresource as soon as kube-scheduler
//! has bound them to one of the Nodes registered by [`crate::capacity`], and to Succeeded or
//! Failed when a test says so. On kind (real nodes, `DI_E2E_NODES=real`) the same
//! calls act on real containers, whose command waits for the exit code a test writes into them.
//! Every scenario is written once against [`Nodes`].

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::task::JoinHandle;

/// Whether the cluster under test runs pods for real (kind) or the suite simulates its nodes.
pub fn real_nodes() -> bool {
    std::env::var("DI_E2E_NODES").is_ok_and(|v| v == "real")
}

/// The nodes a pod of the suite may be placed on, by name, sorted: every node without a taint
/// that keeps pods off (on kind, the workers; the control-plane node keeps its NoSchedule).
pub async fn schedulable(client: &Client) -> Vec<String> {
    let nodes: Api<Node> = Api::all(client.clone());
    let listed = nodes.list(&ListParams::default()).await.expect("listing the nodes").items;
    let keeps_off = |node: &Node| {
        let taints = node.spec.as_ref().and_then(|s| s.taints.as_deref()).unwrap_or_default();
        taints.iter().any(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
    };
    let mut names: Vec<String> = listed.iter().filter(|n| !keeps_off(n)).map(|n| n.name_any()).collect();
    names.sort();
    names
}

/// What the scenarios ask of the nodes, in either mode.
pub enum Nodes {
    Simulated(Arc<SimulatedNodes>),
    Real(Client),
}

/// The image of the replicas' main containers on real nodes: Debian's busybox, which kind/up.sh
/// builds and loads (no registry is asked for it).
pub const REAL_IMAGE: &str = "di-e2e/busybox:1.35";

/// A real container's command: wait for the exit code a test writes, then exit with it. The
/// wait is a read of a FIFO, which costs nothing while it lasts (a poll would start a process
/// per container several times a second, and a whole suite's pods share one node's cores); a
/// code written before the FIFO exists lands in a plain file, which reads at once. A shell that
/// is PID 1 ignores SIGTERM unless it traps it, and it runs a trap only between commands or
/// during `wait`: hence the reader in the background.
pub const WAIT_FOR_EXIT: &str =
    "trap 'exit 143' TERM; mkfifo /tmp/exit-code; cat /tmp/exit-code >/tmp/code & wait $!; exit $(cat /tmp/code)";

impl Nodes {
    /// The nodes of the cluster under test, for one namespace.
    pub fn start(client: Client, namespace: &str) -> Nodes {
        if real_nodes() { Nodes::Real(client) } else { Nodes::Simulated(SimulatedNodes::start(client, namespace)) }
    }

    /// A replica's main container that these nodes can run and end on demand.
    pub fn container(&self) -> serde_json::Value {
        match self {
            Nodes::Simulated(_) => json!({"name": "di-container", "image": "ding"}),
            Nodes::Real(_) => {
                json!({"name": "di-container", "image": REAL_IMAGE, "command": ["sh", "-c", WAIT_FOR_EXIT]})
            }
        }
    }

    /// A replica's pod spec around [`Nodes::container`]. On real nodes its grace period is short:
    /// a pod deleted while its container starts gets SIGTERM before the shell, PID 1, has set its
    /// trap, and PID 1 ignores a signal it does not handle, so the kubelet would wait out the
    /// default 30 s before it kills the container.
    pub fn pod_spec(&self) -> serde_json::Value {
        match self {
            Nodes::Simulated(_) => json!({"containers": [self.container()]}),
            Nodes::Real(_) => json!({"containers": [self.container()], "terminationGracePeriodSeconds": 2}),
        }
    }

    /// Running pods removed by a forced delete (simulated nodes keep this record; real ones do
    /// not, so there it is empty).
    pub fn force_deleted(&self) -> Vec<String> {
        match self {
            Nodes::Simulated(nodes) => nodes.force_deleted(),
            Nodes::Real(_) => vec![],
        }
    }

    /// Ends `pod`'s main container with `exit_code`: 0 makes it Succeeded, anything else Failed.
    pub async fn exit(&self, namespace: &str, pod: &str, exit_code: i32) {
        match self {
            Nodes::Simulated(nodes) => nodes.exit(namespace, pod, exit_code).await,
            Nodes::Real(client) => {
                let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
                // A job runs once its coordinator does; its other containers may still be starting
                // (on a busy node, for seconds), and an exec finds none until one has.
                let what = format!("{pod}'s main container to run");
                let started = kube::runtime::wait::await_condition(api.clone(), pod, main_container_running);
                crate::cluster::within(crate::cluster::WAIT, &what, started).await.unwrap();
                let command = ["sh", "-c", &format!("echo {exit_code} > /tmp/exit-code")].map(String::from);
                // An exec needs one stream at least: stderr, which says why when it fails.
                let params = kube::api::AttachParams::default().container("di-container").stdout(false).stderr(true);
                let mut process =
                    api.exec(pod, command, &params).await.unwrap_or_else(|e| panic!("exec in {pod}: {e}"));
                let mut stderr = String::new();
                if let Some(mut stream) = process.stderr() {
                    use tokio::io::AsyncReadExt;
                    let _ = stream.read_to_string(&mut stderr).await;
                }
                process.join().await.unwrap_or_else(|e| panic!("exec in {pod}: {e}: {stderr}"));
            }
        }
    }
}

/// Whether the pod's main container (`di-container`) has started and not ended.
fn main_container_running(pod: Option<&Pod>) -> bool {
    let statuses = pod.and_then(|p| p.status.as_ref()).and_then(|s| s.container_statuses.as_deref());
    let main = statuses.unwrap_or_default().iter().find(|c| c.name == "di-container");
    main.and_then(|c| c.state.as_ref()).is_some_and(|state| state.running.is_some())
}

pub use crate::capacity::NODE;

/// Pods the simulated nodes start at once. A real cluster starts a big job's pods on many nodes,
/// each kubelet its own pods: with 16, one job of 1,000 collectors waited for these nodes for 2
/// to 3 s after its last pod existed, whoever created the pods (docs/PERFORMANCE.md).
const KUBELETS: usize = 64;

/// How long a simulated container takes to stop once its pod is deleted.
const STOPPING: Duration = Duration::from_millis(100);

/// Who binds the pods the simulated nodes run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binding {
    /// kube-scheduler does: a pod runs once it is bound, and a pod no node has room for stays
    /// Pending, as on a real cluster.
    Scheduler,
    /// The nodes do, each pod to [`NODE`] as soon as it exists: for a control plane started
    /// without a scheduler, where what is measured is the orchestrator alone.
    Themselves,
}

/// The local control plane's kubelet: every pod of a namespace bound to a node (by the scheduler,
/// or by these nodes themselves) is Running and Ready at once. Because pods are bound, a delete
/// is graceful, as on a real node: the pod stays, terminating, until its "containers" have
/// stopped and the node removes it. A pod removed while its containers still ran (a forced
/// delete) is recorded: on a real node its container could still be running beside a
/// replacement of the same name.
pub struct SimulatedNodes {
    client: Client,
    binding: Binding,
    task: JoinHandle<()>,
    /// UIDs of the pods this node started: each is started once, as a kubelet does. The watch
    /// reports the pod again after its binding and after its status, and those reports can
    /// arrive before the status write returns; starting it again would double the API server's
    /// work for every pod, and more so the slower the API server answers.
    started: Mutex<HashSet<String>>,
    /// UIDs of the pods this node removed itself, after their containers stopped.
    stopped: Mutex<HashSet<String>>,
    /// Names of running pods removed by someone else's forced delete.
    force_deleted: Mutex<Vec<String>>,
}

impl SimulatedNodes {
    /// Runs the pods of `namespace` that kube-scheduler binds to a node.
    pub fn start(client: Client, namespace: &str) -> Arc<SimulatedNodes> {
        Self::start_with(client, namespace, Binding::Scheduler)
    }

    /// Runs the pods of `namespace`, bound as `binding` says.
    pub fn start_with(client: Client, namespace: &str, binding: Binding) -> Arc<SimulatedNodes> {
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        Arc::new_cyclic(|this: &std::sync::Weak<SimulatedNodes>| {
            let this = this.clone();
            let task = tokio::spawn(async move {
                let events = watcher(pods.clone(), watcher::Config::default()).default_backoff();
                // Many kubelets start pods at once: a burst of thousands must not queue behind one.
                events
                    .take_while(|event| std::future::ready(event.is_ok()))
                    .for_each_concurrent(KUBELETS, |event| {
                        let (pods, this) = (pods.clone(), this.clone());
                        async move {
                            let Some(nodes) = this.upgrade() else { return };
                            match event {
                                Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => {
                                    nodes.run(&pods, pod).await
                                }
                                Ok(watcher::Event::Delete(pod)) => nodes.removed(&pod),
                                _ => {}
                            }
                        }
                    })
                    .await;
            });
            SimulatedNodes {
                client,
                binding,
                task,
                started: Mutex::default(),
                stopped: Mutex::default(),
                force_deleted: Mutex::default(),
            }
        })
    }

    /// Plays the kubelet for one observed pod. Errors are no failure: a pod deleted meanwhile is
    /// simply gone.
    async fn run(&self, pods: &Api<Pod>, pod: Pod) {
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        let bound = is_bound(&pod);
        if pod.metadata.deletion_timestamp.is_some() {
            if bound {
                self.stop(pods, &pod).await;
            }
        } else if phase.is_none_or(|p| p == "Pending") {
            // Until the scheduler binds it; its binding is reported as a change of the pod.
            if !bound && self.binding == Binding::Scheduler {
                return;
            }
            let uid = pod.uid().unwrap_or_default();
            if !self.started.lock().unwrap().insert(uid.clone()) {
                return;
            }
            if !bound {
                let _ = bind(pods, &pod).await;
            }
            if set_status(pods, &pod, running_status(&pod)).await.is_err() {
                // The pod's next report tries again.
                self.started.lock().unwrap().remove(&uid);
            }
        }
    }

    /// Stops a deleted pod's containers, then removes the pod, as a kubelet does.
    async fn stop(&self, pods: &Api<Pod>, pod: &Pod) {
        let uid = pod.uid().unwrap_or_default();
        if !self.stopped.lock().unwrap().insert(uid.clone()) {
            return;
        }
        tokio::time::sleep(STOPPING).await;
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions { uid: Some(uid), ..Default::default() }),
            ..Default::default()
        };
        let _ = pods.delete(&pod.name_any(), &params).await;
    }

    /// A pod is gone: if its containers were still running, someone forced it.
    fn removed(&self, pod: &Pod) {
        self.started.lock().unwrap().remove(&pod.uid().unwrap_or_default());
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        let bound = is_bound(pod);
        let stopped = self.stopped.lock().unwrap().contains(&pod.uid().unwrap_or_default());
        if bound && phase == Some("Running") && !stopped {
            self.force_deleted.lock().unwrap().push(pod.name_any());
        }
    }

    /// Running pods that were removed before their containers stopped.
    pub fn force_deleted(&self) -> Vec<String> {
        self.force_deleted.lock().unwrap().clone()
    }
}

/// Whether a node took the pod. Every node of the control-plane tier is simulated, so any node
/// is one of ours.
fn is_bound(pod: &Pod) -> bool {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some()
}

/// Binds `pod` to the simulated node, as the scheduler would.
async fn bind(pods: &Api<Pod>, pod: &Pod) -> Result<(), kube::Error> {
    let binding = json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": pod.name_any()},
        "target": {"apiVersion": "v1", "kind": "Node", "name": NODE},
    });
    pods.create_subresource::<_, serde_json::Value>("binding", &pod.name_any(), &PostParams::default(), &binding)
        .await
        .map(drop)
}

impl Drop for SimulatedNodes {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl SimulatedNodes {
    async fn exit(&self, namespace: &str, pod: &str, exit_code: i32) {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let current = api.get(pod).await.unwrap_or_else(|e| panic!("pod {pod}: {e}"));
        // A real kubelet restarts such a container in place and the pod never ends: a scenario
        // that ends it here would pass on simulated nodes only.
        let policy = current.spec.as_ref().and_then(|s| s.restart_policy.as_deref()).unwrap_or("Always");
        assert!(
            policy == "Never" || (policy == "OnFailure" && exit_code == 0),
            "pod {pod} has restartPolicy {policy}: a kubelet would restart its container after exit code {exit_code}, \
             not end the pod; give the template restartPolicy Never"
        );
        let now = Timestamp::now().to_string();
        let containers: Vec<_> = container_names(&current)
            .into_iter()
            .map(|name| json!({
                "name": name, "ready": false, "restartCount": 0, "image": "simulated", "imageID": "",
                "state": {"terminated": {"exitCode": exit_code, "reason": if exit_code == 0 { "Completed" } else { "Error" },
                                         "startedAt": now, "finishedAt": now}},
            }))
            .collect();
        let phase = if exit_code == 0 { "Succeeded" } else { "Failed" };
        let status = json!({
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": now, "reason": "PodCompleted"}],
            "containerStatuses": containers,
        });
        set_status(&api, &current, status).await.unwrap_or_else(|e| panic!("ending pod {pod}: {e}"));
    }

    /// Evicts `pod` as a kubelet under node pressure does: its containers killed, the pod left
    /// `Failed` with reason `Evicted` and the condition `DisruptionTarget`.
    pub async fn evict(&self, namespace: &str, pod: &str) {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let current = api.get(pod).await.unwrap_or_else(|e| panic!("pod {pod}: {e}"));
        let now = Timestamp::now().to_string();
        let status = json!({
            "phase": "Failed",
            "reason": "Evicted",
            "message": "The node was low on resource: memory. Threshold quantity: 100Mi, available: 60Mi.",
            "conditions": [
                {"type": "Ready", "status": "False", "lastTransitionTime": now, "reason": "PodFailed"},
                {"type": "DisruptionTarget", "status": "True", "lastTransitionTime": now,
                 "reason": "TerminationByKubelet", "message": "The node was low on resource: memory."},
            ],
        });
        set_status(&api, &current, status).await.unwrap_or_else(|e| panic!("evicting pod {pod}: {e}"));
    }
}

fn container_names(pod: &Pod) -> Vec<String> {
    pod.spec.as_ref().map(|s| s.containers.iter().map(|c| c.name.clone()).collect()).unwrap_or_default()
}

fn running_status(pod: &Pod) -> serde_json::Value {
    let now = Timestamp::now().to_string();
    let containers: Vec<_> = container_names(pod)
        .into_iter()
        .map(|name| {
            json!({
                "name": name, "ready": true, "started": true, "restartCount": 0, "image": "simulated", "imageID": "",
                "state": {"running": {"startedAt": now}},
            })
        })
        .collect();
    json!({
        "phase": "Running",
        "podIP": "10.244.0.10",
        "startTime": now,
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
            {"type": "Initialized", "status": "True", "lastTransitionTime": now},
            {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
            {"type": "Ready", "status": "True", "lastTransitionTime": now},
        ],
        "containerStatuses": containers,
    })
}

async fn set_status(api: &Api<Pod>, pod: &Pod, status: serde_json::Value) -> Result<Pod, kube::Error> {
    let patch = json!({"status": status});
    api.patch_status(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await
}
