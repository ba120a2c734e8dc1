//! The simulated nodes' Node objects: what kube-scheduler places the control-plane tier's pods
//! on. Each has a capacity (cpu, memory, pods, GPUs) and is Ready; no kubelet heartbeats it, and
//! nothing minds, as the tier runs no node lifecycle controller.

use std::collections::BTreeMap;

use di_client::is_status;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

/// The node the control-plane tier registers when it starts: room for every pod a test or a
/// bench makes, and no GPU. Scenarios that need a shape of their own register more
/// ([`register`]).
pub const NODE: &str = "simulated-node";

/// A simulated node: its name, labels and what it offers the scheduler.
#[derive(Clone, Debug)]
pub struct NodeShape {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// Quantities, as in a Node's capacity: `"8"`, `"32Gi"`.
    pub cpu: String,
    pub memory: String,
    pub gpus: u32,
    pub pods: u32,
}

impl Default for NodeShape {
    fn default() -> Self {
        NodeShape {
            name: NODE.into(),
            labels: BTreeMap::new(),
            cpu: "1000".into(),
            memory: "4Ti".into(),
            gpus: 0,
            pods: 100_000,
        }
    }
}

impl NodeShape {
    /// A node of `gpus` `nvidia.com/gpu` and room for everything else, as a GPU node of a
    /// training cluster.
    pub fn gpu(name: &str, gpus: u32) -> Self {
        NodeShape { name: name.into(), cpu: "64".into(), memory: "512Gi".into(), gpus, pods: 110, ..Default::default() }
    }
}

/// The extended resource GPU nodes offer (NVIDIA's device plugin names it so).
pub const GPU: &str = "nvidia.com/gpu";

/// Registers a simulated node as a kubelet registers its own: the Node, then its status (its
/// capacity, and Ready). Idempotent: an existing node takes the shape given.
pub async fn register(client: &Client, shape: &NodeShape) -> Result<(), kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut labels = shape.labels.clone();
    labels.insert("kubernetes.io/hostname".into(), shape.name.clone());
    labels.insert(SIMULATED_LABEL.into(), "true".into());
    let node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": shape.name, "labels": labels},
    });
    match nodes.create(&PostParams::default(), &serde_json::from_value(node).expect("a Node")).await {
        Ok(_) => {}
        Err(e) if is_status(&e, 409) => {
            let patch = json!({"metadata": {"labels": labels}});
            nodes.patch(&shape.name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        }
        Err(e) => return Err(e),
    }
    let mut resources = json!({"cpu": shape.cpu, "memory": shape.memory, "pods": shape.pods.to_string()});
    if shape.gpus > 0 {
        resources[GPU] = json!(shape.gpus.to_string());
    }
    let now = Timestamp::now().to_string();
    let status = json!({"status": {
        "capacity": resources, "allocatable": resources,
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "lastHeartbeatTime": now, "lastTransitionTime": now}],
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": shape.name}],
    }});
    nodes.patch_status(&shape.name, &PatchParams::default(), &Patch::Merge(&status)).await?;
    // The API server taints a new Node not-ready; the node lifecycle controller, which the tier
    // does not run, would lift the taint once the node is Ready.
    let untainted = json!({"spec": {"taints": null}});
    nodes.patch(&shape.name, &PatchParams::default(), &Patch::Merge(&untainted)).await.map(drop)
}

/// Removes a simulated node. The pods bound to it stay, as when a real node is deleted with
/// no controller to evict them.
pub async fn unregister(client: &Client, name: &str) -> Result<(), kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    match nodes.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(e) if is_status(&e, 404) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The label on every node [`register`] made.
pub const SIMULATED_LABEL: &str = "di-e2e/simulated";
