//! A job in a Kueue queue: a scale-up its admission has no room for is refused, naming the
//! queue, and changes nothing; one within it is written; one whose admission cannot be read is
//! written and says so.

use axum::http::StatusCode;
use di_api::DIJob;
use di_core::queue::{QUEUE_LABEL, workload_name};
use serde_json::{Value, json};

use crate::world::*;

/// `job()` in queue `team`, with a Workload admitted for `collectors` collectors.
fn queued(collectors: u64) -> (Value, Value) {
    let mut job = job();
    job["metadata"]["labels"] = json!({QUEUE_LABEL: "team"});
    let typed: DIJob = serde_json::from_value(job.clone()).unwrap();
    let set = |name: &str, count: u64| json!({"name": name, "count": count, "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}});
    let workload = json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {"name": workload_name(&typed), "namespace": "ns", "resourceVersion": "3"},
        "spec": {"queueName": "team", "podSets": [set("coordinator", 1), set("collector", collectors), set("learner", 1)]},
        "status": {
            "conditions": [{"type": "QuotaReserved", "status": "True"}, {"type": "Admitted", "status": "True"}],
            "admission": {"clusterQueue": "gpus", "podSetAssignments": [{"name": "collector", "count": collectors}]},
        },
    });
    (job, workload)
}

fn serve_queued(collectors: u64) -> (axum::Router, std::sync::Arc<std::sync::Mutex<World>>) {
    let (job, workload) = queued(collectors);
    let (app, world) = serve(job, pods(), std::time::Duration::ZERO, LOCAL);
    world.lock().unwrap().workload = Some(workload);
    (app, world)
}

#[tokio::test]
async fn a_scale_up_past_the_admission_is_refused_naming_the_queue_and_changes_nothing() {
    // Admitted for the job's 2 collectors; the coordinator asks for one more.
    let (app, world) = serve_queued(2);
    let (status, reply) = call(&app, "POST", "/v1alpha1/replicas", SCALE_UP).await;
    assert_error(status, &reply, StatusCode::CONFLICT, "Kueue queue team, admitted by ClusterQueue gpus");
    assert!(reply["message"].as_str().unwrap().contains("1 collector pod(s)"), "{reply}");
    let w = world.lock().unwrap();
    assert_eq!((w.patches, w.job["spec"]["collector"]["replicas"].clone()), (0, json!(2)), "nothing changed");
}

#[tokio::test]
async fn a_scale_up_within_the_admission_is_written() {
    let (app, world) = serve_queued(3);
    let (status, reply) = call(&app, "POST", "/v1alpha1/replicas", SCALE_UP).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    assert_eq!(world.lock().unwrap().job["spec"]["collector"]["replicas"], json!(3));
    // Fewer is always room enough.
    let (status, reply) = call(&app, "DELETE", "/v1alpha1/replicas", SCALE_DOWN).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
}

#[tokio::test]
async fn an_admission_that_cannot_be_read_lets_the_scale_up_through_and_says_so() {
    let (app, world) = serve_queued(2);
    world.lock().unwrap().trouble.workloads_forbidden = true;
    let (status, reply) = call(&app, "POST", "/v1alpha1/replicas", SCALE_UP).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    assert!(reply["message"].as_str().unwrap().contains("admission by Kueue was not checked"), "{reply}");
    assert_eq!(world.lock().unwrap().job["spec"]["collector"]["replicas"], json!(3));
}

#[tokio::test]
async fn collectors_already_waiting_refuse_only_a_request_for_more() {
    // Admitted for 1 collector; the job asks for 2 already (a `kubectl scale`), one waits.
    let (app, world) = serve_queued(1);
    let asks_nothing = br#"{"namespace": "ns", "coordinator": "job-coordinator", "collectors": {"replicas": 0}}"#;
    let (status, reply) = call(&app, "POST", "/v1alpha1/replicas", asks_nothing).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    let (status, reply) = call(&app, "POST", "/v1alpha1/replicas", SCALE_UP).await;
    assert_error(status, &reply, StatusCode::CONFLICT, "1 collector pod(s) more than its admission");
    assert_eq!(world.lock().unwrap().job["spec"]["collector"]["replicas"], json!(2));
}

/// With `minReplicas`, collectors above the job's core have Workloads of their own: a scale-up
/// past the core's admission is written, answered at once naming the new collectors, and says
/// that they wait for their queue's quota. (Its wait of 30 s would show as a note.)
#[tokio::test(start_paused = true)]
async fn a_scale_up_above_the_core_is_written_and_answered_at_once() {
    let (mut job, workload) = queued(2);
    job["spec"]["collector"]["minReplicas"] = json!(2);
    let (app, world) = serve(job, pods(), WAIT, LOCAL);
    world.lock().unwrap().workload = Some(workload);
    let started = tokio::time::Instant::now();
    let (status, reply) = call(&app, "POST", "/v1alpha1/replicas", SCALE_UP).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    assert!(started.elapsed() < WAIT, "answered at once, not after its wait");
    assert_eq!(world.lock().unwrap().job["spec"]["collector"]["replicas"], json!(3));
    assert_eq!(reply["data"]["collectors"], json!(["job-collector-2.ns:22270"]), "{reply}");
    let message = reply["message"].as_str().unwrap();
    assert!(message.contains("1 collector(s) above the job's core"), "{message}");
    assert!(!message.contains("not every replica"), "{message}");
}
