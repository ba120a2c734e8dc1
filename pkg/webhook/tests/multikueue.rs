//! The mutating webhook gives a new job in a queue that goes through MultiKueue to MultiKueue
//! (`spec.managedBy`), as Kueue's webhook does for its own kinds; no other job.

use axum::body::Body;
use axum::http::Request;
use di_webhook::limits::Limits;
use di_webhook::queues::{MULTIKUEUE_CONTROLLER, Queues};
use di_webhook::server::router_checking;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

/// LocalQueue `remote` of namespace `default` leads to a ClusterQueue with a MultiKueue check;
/// `local` to one with another check.
fn queues() -> Queues {
    let local_queue = |name: &str, cluster: &str| {
        json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
               "metadata": {"name": name, "namespace": "default"}, "spec": {"clusterQueue": cluster}})
    };
    let cluster_queue = |name: &str, check: &str| {
        json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": name},
               "spec": {"admissionChecksStrategy": {"admissionChecks": [{"name": check}]}}})
    };
    let check = |name: &str, controller: &str| {
        json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": name},
               "spec": {"controllerName": controller}})
    };
    Queues::of(
        &[local_queue("remote", "workers"), local_queue("local", "gpus")],
        &[cluster_queue("workers", "multikueue"), cluster_queue("gpus", "provisioning")],
        &[check("multikueue", MULTIKUEUE_CONTROLLER), check("provisioning", "kueue.x-k8s.io/provisioning-request")],
    )
}

fn job(queue: Option<&str>, extra: Value) -> Value {
    let template = json!({"spec": {"containers": [{"name": "di-container", "image": "ding"}]}});
    let mut job = json!({
        "apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJob",
        "metadata": {"name": "job", "namespace": "default"},
        "spec": {"coordinator": {"template": template}},
    });
    if let Some(queue) = queue {
        job["metadata"]["labels"] = json!({"kueue.x-k8s.io/queue-name": queue});
    }
    for (k, v) in extra.as_object().into_iter().flatten() {
        job["metadata"][k] = v.clone();
    }
    job
}

/// The `spec.managedBy` the mutating webhook would store for `object` on `operation`.
async fn managed_by(operation: &str, object: Value) -> Option<String> {
    let review = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "1", "kind": {"group": "diengine.opendilab.org", "version": "v1alpha1", "kind": "DIJob"},
            "resource": {"group": "diengine.opendilab.org", "version": "v1alpha1", "resource": "dijobs"},
            "name": "job", "namespace": "default", "operation": operation, "userInfo": {"username": "alice"},
            "object": object, "oldObject": if operation == "UPDATE" { object.clone() } else { Value::Null },
        }
    });
    let router = router_checking(&Limits::default(), None, Some(queues()));
    let body = Body::from(serde_json::to_vec(&review).unwrap());
    let response = router.oneshot(Request::post("/mutate").body(body).unwrap()).await.unwrap();
    let reply: Value = serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap();
    use base64::Engine;
    // Bytes on the wire: a base64 string, or (as kube writes them) an array of byte values.
    let bytes: Vec<u8> = match &reply["response"]["patch"] {
        Value::String(s) => base64::engine::general_purpose::STANDARD.decode(s).unwrap(),
        Value::Array(a) => a.iter().map(|b| b.as_u64().unwrap() as u8).collect(),
        _ => return None,
    };
    let patch: Vec<Value> = serde_json::from_slice(&bytes).unwrap();
    patch.iter().find(|op| op["path"] == "/spec/managedBy").map(|op| op["value"].as_str().unwrap().to_owned())
}

#[tokio::test]
async fn a_new_job_in_a_multikueue_queue_is_given_to_multikueue() {
    assert_eq!(
        managed_by("CREATE", job(Some("remote"), json!({}))).await.as_deref(),
        Some("kueue.x-k8s.io/multikueue")
    );
    assert_eq!(managed_by("CREATE", job(Some("local"), json!({}))).await, None, "another check");
    assert_eq!(managed_by("CREATE", job(Some("unknown"), json!({}))).await, None, "a queue not seen");
    assert_eq!(managed_by("CREATE", job(None, json!({}))).await, None, "no queue");
    assert_eq!(managed_by("UPDATE", job(Some("remote"), json!({}))).await, None, "fixed once the job exists");
    // MultiKueue's copy on a worker, and a job that names who runs it, keep what they say.
    let copy = json!({"annotations": {"kueue.x-k8s.io/prebuilt-workload-name": "dijob-job-1234abcd"}});
    assert_eq!(managed_by("CREATE", job(Some("remote"), copy)).await, None);
    let mut named = job(Some("remote"), json!({}));
    named["spec"]["managedBy"] = json!("diengine.opendilab.org/di-orchestrator");
    assert_eq!(managed_by("CREATE", named).await, None);
}
