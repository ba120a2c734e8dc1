//! The webhook handlers driven in-process with real AdmissionReview JSON: every default appears
//! in the patch, every rule's message comes back, updates check immutability, garbage is refused.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use di_webhook::server::{MAX_BODY, router};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

fn review(operation: &str, kind: &str, object: Value, old: Option<Value>) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "diengine.opendilab.org", "version": "v1alpha1", "kind": kind},
            "resource": {"group": "diengine.opendilab.org", "version": "v1alpha1", "resource": format!("{}s", kind.to_lowercase())},
            "name": object["metadata"]["name"],
            "namespace": "default",
            "operation": operation,
            "userInfo": {"username": "alice"},
            "object": object,
            "oldObject": old,
            "dryRun": false,
        }
    })
}

async fn post(path: &str, body: Vec<u8>) -> (StatusCode, Vec<u8>) {
    let request = Request::post(path).body(Body::from(body)).unwrap();
    let response = router().oneshot(request).await.unwrap();
    let status = response.status();
    (status, response.into_body().collect().await.unwrap().to_bytes().to_vec())
}

/// Posts a review and returns its response part.
async fn answer(path: &str, review: Value) -> Value {
    let (status, body) = post(path, serde_json::to_vec(&review).unwrap()).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let reply: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(reply["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(reply["kind"], "AdmissionReview");
    assert_eq!(reply["response"]["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
    reply["response"].clone()
}

fn example(name: &str, kind: &str) -> Value {
    let text = std::fs::read_to_string(format!(
        "{}/../../manifests/examples/{name}",
        std::env::var("CARGO_MANIFEST_DIR").expect("run by cargo")
    ))
    .unwrap();
    di_api::manifest::yaml_documents(&text).unwrap().into_iter().find(|d| d["kind"] == kind).unwrap()
}

fn minimal_job() -> Value {
    json!({
        "apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJob",
        "metadata": {"name": "job", "namespace": "default"},
        "spec": {
            "cleanPodPolicy": "ALL",
            "coordinator": {"template": {"spec": {"containers": [{"name": "di-container", "image": "ding",
                "futureField": {"kept": true}}]}}},
            "collector": {"replicas": 1, "template": {"spec": {"containers": [{"name": "di-container", "image": "ding",
                "ports": [{"name": "metrics", "containerPort": 9090}]}]}}},
        }
    })
}

/// Applies a response's patch to `object`.
fn patched(object: &Value, response: &Value) -> Value {
    use base64::Engine;
    assert_eq!(response["patchType"], "JSONPatch");
    // Bytes on the wire: a base64 string, or (as kube writes them, and the API server reads) an
    // array of byte values.
    let bytes: Vec<u8> = match &response["patch"] {
        Value::String(s) => base64::engine::general_purpose::STANDARD.decode(s).unwrap(),
        Value::Array(a) => a.iter().map(|b| b.as_u64().unwrap() as u8).collect(),
        other => panic!("no patch: {other}"),
    };
    let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
    let mut out = object.clone();
    json_patch::patch(&mut out, &patch).unwrap();
    out
}

#[tokio::test]
async fn mutation_fills_in_every_default_and_keeps_unknown_fields() {
    let job = minimal_job();
    let response = answer("/mutate", review("CREATE", "DIJob", job.clone(), None)).await;
    assert_eq!(response["allowed"], true);
    let out = patched(&job, &response);
    assert_eq!(out["spec"]["cleanPodPolicy"], "All");
    let coordinator = &out["spec"]["coordinator"]["template"]["spec"];
    assert_eq!(coordinator["restartPolicy"], "Never");
    assert_eq!(
        coordinator["containers"][0]["ports"],
        json!([{"name": "di-port", "containerPort": 22273, "protocol": "TCP"}])
    );
    assert_eq!(coordinator["containers"][0]["futureField"], json!({"kept": true}), "unknown fields survive the patch");
    assert_eq!(
        out["spec"]["collector"]["template"]["spec"]["containers"][0]["ports"],
        json!([{"name": "metrics", "containerPort": 9090}, {"name": "di-port", "containerPort": 22270, "protocol": "TCP"}])
    );
    assert!(out["spec"]["collector"]["template"]["spec"].get("restartPolicy").is_none());
    // Defaulting the defaulted object changes nothing: no patch at all.
    let again = answer("/mutate", review("CREATE", "DIJob", out.clone(), None)).await;
    assert_eq!(again["allowed"], true);
    assert!(again.get("patch").is_none(), "{again}");
}

#[tokio::test]
async fn mutation_defaults_an_aggregator_config() {
    let config = example("multi-gpu-learner.yaml", "AggregatorConfig");
    let response = answer("/mutate", review("CREATE", "AggregatorConfig", config.clone(), None)).await;
    let out = patched(&config, &response);
    let ports = &out["spec"]["aggregator"]["template"]["spec"]["containers"][0]["ports"];
    assert_eq!(ports, &json!([{"name": "di-port", "containerPort": 22272, "protocol": "TCP"}]));
}

#[tokio::test]
async fn validation_names_every_problem() {
    let response = answer("/validate", review("CREATE", "DIJob", example("invalid.yaml", "DIJob"), None)).await;
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 422);
    assert_eq!(response["status"]["reason"], "Invalid");
    let message = response["status"]["message"].as_str().unwrap();
    for expected in [
        "spec.cleanPodPolicy: Unsupported value \"Sometimes\": use one of \"Running\", \"All\", \"None\"",
        "spec.coordinator.template.spec.restartPolicy: Unsupported value \"Always\"",
        "spec.coordinator.template.spec.containers[0].ports[1].containerPort: Invalid value: 70000",
        "spec.coordinator.template.spec.containers[0].ports[1].name: Duplicate value \"di-port\"",
        "spec.collector.template.spec.containers: Required value",
        "spec.learner.template.spec.containers[0].resources.limits[nvidia.com/gpu]: Invalid value \"0.5\"",
        "spec.collector.replicas: Invalid value: 5000",
    ] {
        assert!(message.contains(expected), "{expected:?} missing from {message:?}");
    }
}

#[tokio::test]
async fn validation_accepts_the_examples() {
    for (file, kind) in [
        ("cartpole-dqn.yaml", "DIJob"),
        ("multi-gpu-learner.yaml", "DIJob"),
        ("multi-gpu-learner.yaml", "AggregatorConfig"),
        ("demo.yaml", "DIJob"),
    ] {
        let response = answer("/validate", review("CREATE", kind, example(file, kind), None)).await;
        assert_eq!(response["allowed"], true, "{file} {kind}: {response}");
    }
}

#[tokio::test]
async fn updates_check_immutability() {
    let old = minimal_job();
    let mut scaled = old.clone();
    scaled["spec"]["collector"]["replicas"] = json!(5);
    let response = answer("/validate", review("UPDATE", "DIJob", scaled, Some(old.clone()))).await;
    assert_eq!(response["allowed"], true, "{response}");

    let mut changed = old.clone();
    changed["spec"]["collector"]["template"]["spec"]["containers"][0]["image"] = json!("ding:v2");
    let response = answer("/validate", review("UPDATE", "DIJob", changed, Some(old.clone()))).await;
    assert_eq!(response["allowed"], false);
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .starts_with("spec.collector.template: Forbidden: a role's pod template is immutable")
    );

    // An edit that makes a running job invalid is refused like a bad new job: the reconciler
    // never sees it.
    let mut broken = old.clone();
    broken["spec"]["collector"]["replicas"] = json!(-1);
    let response = answer("/validate", review("UPDATE", "DIJob", broken, Some(old.clone()))).await;
    assert_eq!(response["allowed"], false);
    assert!(response["status"]["message"].as_str().unwrap().contains("spec.collector.replicas"), "{response}");

    let response = answer("/validate", review("UPDATE", "DIJob", old, None)).await;
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["message"], "the admission request carries no old object");
}

#[tokio::test]
async fn objects_that_cannot_be_read_are_denied_with_the_reason() {
    let mut job = minimal_job();
    job["spec"]["collector"]["replicas"] = json!("two");
    for path in ["/mutate", "/validate"] {
        let response = answer(path, review("CREATE", "DIJob", job.clone(), None)).await;
        assert_eq!(response["allowed"], false, "{path}");
        let message = response["status"]["message"].as_str().unwrap();
        assert!(
            message.starts_with(
                "the object cannot be read as a DIJob: spec.collector.replicas: invalid type: string \"two\""
            ),
            "{path}: {message}"
        );
    }
}

#[tokio::test]
async fn other_kinds_are_denied() {
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
    let mut r = review("CREATE", "Pod", pod, None);
    r["request"]["kind"] = json!({"group": "", "version": "v1", "kind": "Pod"});
    let response = answer("/validate", r).await;
    assert_eq!(response["allowed"], false);
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .contains("serves diengine.opendilab.org DIJob and AggregatorConfig only")
    );
}

#[tokio::test]
async fn deletes_are_allowed_unexamined() {
    let mut r = review("DELETE", "DIJob", Value::Null, Some(minimal_job()));
    r["request"]["name"] = json!("job");
    let response = answer("/validate", r).await;
    assert_eq!(response["allowed"], true);
}

#[tokio::test]
async fn garbage_gets_an_http_error_not_a_panic() {
    let (status, body) = post("/validate", b"\x00\xffnot json".to_vec()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(String::from_utf8_lossy(&body).starts_with("the body is not an AdmissionReview"));

    let (status, _) =
        post("/mutate", br#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": 7}"#.to_vec())
            .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    let (status, _) = post("/validate", vec![b' '; MAX_BODY + 1]).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);

    // A review without a request is answered with a denial that says so.
    let (status, body) =
        post("/validate", br#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}"#.to_vec()).await;
    assert_eq!(status, StatusCode::OK);
    let reply: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(reply["response"]["allowed"], false);
    assert_eq!(reply["response"]["status"]["message"], "the AdmissionReview carries no request");

    let (status, _) = post("/nowhere", b"{}".to_vec()).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// Under 1.x's version a role job is accepted as under 0.2's: the API server returns every job
/// under v2alpha1 (its preferred version), so an export of a role job comes back in it. Any write
/// that leaves a spec alone passes too: the garbage collector removes finalizers through
/// whichever version it prefers, and a refusal there would keep a deleted job forever.
#[tokio::test]
async fn v2alpha1_takes_a_role_job_and_never_refuses_a_write_that_keeps_the_spec() {
    let as_v2 = |mut review: Value| {
        review["request"]["kind"]["version"] = json!("v2alpha1");
        review["request"]["resource"]["version"] = json!("v2alpha1");
        review
    };
    let job = minimal_job();
    let response = answer("/validate", as_v2(review("CREATE", "DIJob", job.clone(), None))).await;
    assert_eq!(response["allowed"], true, "{response}");
    let mut neither = job.clone();
    neither["spec"].as_object_mut().unwrap().remove("coordinator");
    let response = answer("/validate", as_v2(review("CREATE", "DIJob", neither, None))).await;
    assert_eq!(response["allowed"], false);
    assert!(
        response["status"]["message"].as_str().unwrap().starts_with("spec.coordinator: Required value"),
        "{response}"
    );

    let mut finalized = job.clone();
    finalized["metadata"]["finalizers"] = json!([]);
    let mut old = job.clone();
    old["metadata"]["finalizers"] = json!(["foregroundDeletion"]);
    let response = answer("/validate", as_v2(review("UPDATE", "DIJob", finalized, Some(old)))).await;
    assert_eq!(response["allowed"], true, "{response}");
}

/// A write that keeps the spec but moves a running job into a Kueue queue is refused, naming
/// the label; the same write while the job's queue holds it passes.
#[tokio::test]
async fn a_running_job_is_not_moved_between_queues() {
    let mut old = minimal_job();
    old["status"] = json!({"phase": "Running"});
    let mut queued = old.clone();
    queued["metadata"]["labels"] = json!({"kueue.x-k8s.io/queue-name": "team"});
    let response = answer("/validate", review("UPDATE", "DIJob", queued.clone(), Some(old.clone()))).await;
    assert_eq!(response["allowed"], false, "{response}");
    let message = response["status"]["message"].as_str().unwrap();
    assert!(message.starts_with("metadata.labels[kueue.x-k8s.io/queue-name]: Forbidden"), "{message}");

    old["status"]["conditions"] = json!([{"type": "Queued", "status": "True"}]);
    let response = answer("/validate", review("UPDATE", "DIJob", queued, Some(old))).await;
    assert_eq!(response["allowed"], true, "{response}");
}

/// A job the webhook lets through but that will not do what it reads is answered with an
/// admission warning, which kubectl prints.
#[tokio::test]
async fn a_restart_limit_that_cannot_act_is_warned_about() {
    let mut job = minimal_job();
    job["spec"]["restartLimit"] = json!(2);
    let response = answer("/validate", review("CREATE", "DIJob", job.clone(), None)).await;
    assert_eq!(response["allowed"], true, "{response}");
    let warnings = response["warnings"].as_array().expect("warnings");
    assert!(warnings[0].as_str().unwrap().contains("spec.collector.template.spec.restartPolicy"), "{response}");
    job["spec"]["collector"]["template"]["spec"]["restartPolicy"] = json!("Never");
    let response = answer("/validate", review("CREATE", "DIJob", job, None)).await;
    assert!(response.get("warnings").is_none_or(|w| w.is_null()), "{response}");
}

/// A new job whose pods would take a name another job of its namespace claims is refused, naming
/// the name and the job; in another namespace, or with other names, it is not.
#[tokio::test]
async fn a_job_whose_names_another_job_claims_is_refused() {
    use di_webhook::claims::Claims;
    use di_webhook::limits::Limits;
    use di_webhook::server::router_checking;
    let template = json!({"spec": {"containers": [{"name": "di-container", "image": "ding"}]}});
    let tasks: di_api::DIJob = serde_json::from_value(json!({"metadata": {"name": "a"},
        "spec": {"tasks": [{"name": "b-collector", "type": "collector", "template": template}]}}))
    .unwrap();
    let claims = Claims::listed(&[("default", "a", &tasks)]);
    let decide = |job: Value| {
        let router = router_checking(&Limits::default(), Some(claims.clone()), None);
        async move {
            let body = serde_json::to_vec(&review("CREATE", "DIJob", job, None)).unwrap();
            let response = router.oneshot(Request::post("/validate").body(Body::from(body)).unwrap()).await.unwrap();
            let reply: Value =
                serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap();
            reply["response"].clone()
        }
    };
    let mut job = minimal_job();
    job["metadata"]["name"] = json!("a-b");
    let response = decide(job.clone()).await;
    assert_eq!(response["allowed"], false, "{response}");
    let message = response["status"]["message"].as_str().unwrap();
    assert!(message.starts_with("metadata.name: Invalid value: \"a-b\""), "{message}");
    assert!(message.contains("a-b-collector-0 (job a's)"), "{message}");
    job["metadata"]["name"] = json!("c");
    assert_eq!(decide(job).await["allowed"], true);
}
