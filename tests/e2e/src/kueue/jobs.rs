//! The queue scenarios' jobs: small role jobs whose every replica asks for the same CPU, so a
//! queue's quota counts them, and the `Queued` condition the orchestrator reports on them.

use di_api::contract::kueue::QUEUE_NAME;
use di_api::{DIJob, DIJobCondition};
use kube::api::PostParams;
use serde_json::json;

use crate::scenario::Scenario;

/// What each replica asks for (on kind one node's cores run every scenario at once).
pub const REPLICA_CPU: &str = "50m";

/// A role job in `queue` of a coordinator (with the sidecar's 10m beside it) and `collectors`
/// collectors, each asking for [`REPLICA_CPU`], of PriorityClass `class` when given.
pub async fn submit(s: &Scenario, name: &str, queue: &str, collectors: i32, class: Option<&str>) {
    let extra = class.map_or_else(|| json!({}), |class| json!({"priorityClassName": class}));
    submit_with(s, name, queue, collectors, extra).await;
}

/// As [`submit`], with `extra` merged into the job's spec.
pub async fn submit_with(s: &Scenario, name: &str, queue: &str, collectors: i32, extra: serde_json::Value) {
    let mut container = s.nodes.container();
    container["resources"] = json!({"requests": {"cpu": REPLICA_CPU}});
    let mut pod = s.nodes.pod_spec();
    pod["containers"] = json!([container]);
    let mut job = json!({
        "apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJob",
        "metadata": {"name": name, "labels": {QUEUE_NAME: queue}},
        "spec": {"coordinator": {"template": {"spec": pod}}, "collector": {"replicas": collectors, "template": {"spec": pod}}},
    });
    crate::scenario::merge(&mut job["spec"], extra);
    s.jobs.create(&PostParams::default(), &serde_json::from_value(job).unwrap()).await.expect("job accepted");
}

/// The job's `Queued` condition, once reported.
pub fn queued(job: &DIJob) -> Option<&DIJobCondition> {
    job.status.as_ref()?.conditions.iter().find(|c| c.type_ == "Queued")
}
