//! Nodes for the suite's pods. On the local control plane no kubelet runs, so the simulated nodes
//! play it: they move pods to Running through the status subresource as soon as they exist, and
//! to Succeeded or Failed when a test says so. On kind (real nodes, `DI_E2E_NODES=real`) the same
//! calls act on real containers, whose command waits for the exit code a test writes into them.
//! Every scenario is written once against [`Nodes`].

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::task::JoinHandle;

/// Whether the cluster under test runs pods for real (kind) or the suite simulates its nodes.
pub fn real_nodes() -> bool {
    std::env::var("DI_E2E_NODES").is_ok_and(|v| v == "real")
}

/// What the scenarios ask of the nodes, in either mode.
pub enum Nodes {
    Simulated(Arc<SimulatedNodes>),
    Real(Client),
}

/// A real container's command: wait for the exit code a test writes, then exit with it.
const WAIT_FOR_EXIT: &str = "until [ -f /tmp/exit-code ]; do sleep 0.2; done; exit $(cat /tmp/exit-code)";

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
                json!({"name": "di-container", "image": "busybox:1.36", "command": ["sh", "-c", WAIT_FOR_EXIT]})
            }
        }
    }

    /// Ends `pod`'s main container with `exit_code`: 0 makes it Succeeded, anything else Failed.
    pub async fn exit(&self, namespace: &str, pod: &str, exit_code: i32) {
        match self {
            Nodes::Simulated(nodes) => nodes.exit(namespace, pod, exit_code).await,
            Nodes::Real(client) => {
                let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
                let command = ["sh", "-c", &format!("echo {exit_code} > /tmp/exit-code")].map(String::from);
                let params = kube::api::AttachParams::default().container("di-container").stdout(false).stderr(false);
                let process = api.exec(pod, command, &params).await.unwrap_or_else(|e| panic!("exec in {pod}: {e}"));
                process.join().await.unwrap_or_else(|e| panic!("exec in {pod}: {e}"));
            }
        }
    }
}

/// Pods the simulated nodes start at once.
const KUBELETS: usize = 16;

/// The local control plane's kubelet: every new pod of a namespace is Running and Ready at once.
pub struct SimulatedNodes {
    client: Client,
    task: JoinHandle<()>,
}

impl SimulatedNodes {
    pub fn start(client: Client, namespace: &str) -> Arc<SimulatedNodes> {
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let runner = pods.clone();
        let task = tokio::spawn(async move {
            let events = watcher(pods, watcher::Config::default()).default_backoff().applied_objects();
            // Many kubelets start pods at once: a burst of thousands must not queue behind one.
            events
                .take_while(|event| std::future::ready(event.is_ok()))
                .for_each_concurrent(KUBELETS, |pod| {
                    let runner = runner.clone();
                    async move {
                        let Ok(pod) = pod else { return };
                        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
                        if phase.is_none_or(|p| p == "Pending") && pod.metadata.deletion_timestamp.is_none() {
                            // A pod deleted meanwhile is no error: it is simply gone.
                            let _ = set_status(&runner, &pod, running_status(&pod)).await;
                        }
                    }
                })
                .await;
        });
        Arc::new(SimulatedNodes { client, task })
    }
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
