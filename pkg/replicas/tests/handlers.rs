//! Every route driven in-process with the request shapes DI-engine sends (JSON without a
//! Content-Type, `gpus` as a string), against a fake API server that keeps the DIJob, checks
//! resourceVersions like the real one, and lists the job's pods.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::connect_info::MockConnectInfo;
use axum::http::{Request, Response, StatusCode};
use di_replicas::scale::Scope;
use di_replicas::server::{Endpoint, MAX_BODY, router};
use http_body_util::BodyExt;
use kube::Client;
use serde_json::{Value, json};
use tower::ServiceExt;

/// What the fake API server holds.
struct World {
    job: Value,
    pods: Vec<Value>,
    patches: usize,
}

fn job() -> Value {
    let container =
        json!({"containers": [{"name": "di-container", "image": "ding", "resources": {"requests": {"cpu": "2"}}}]});
    json!({
        "apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJob",
        "metadata": {"name": "job", "namespace": "ns", "uid": "job-uid", "resourceVersion": "1"},
        "spec": {
            "coordinator": {"template": {"spec": container}},
            "collector": {"replicas": 2, "template": {"spec": container}},
            "learner": {"replicas": 1, "template": {"spec": container}},
        }
    })
}

fn pod(name: &str, role: &str, index: Option<u32>, port: i32) -> Value {
    let mut labels = json!({"dijob-name": "job", "replica-type": role});
    if let Some(i) = index {
        labels["diengine.opendilab.org/replica-index"] = json!(i.to_string());
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"), "labels": labels},
        "spec": {"containers": [{"name": "di-container", "image": "ding", "ports": [{"name": "di-port", "containerPort": port}]}]},
    })
}

fn pods() -> Vec<Value> {
    vec![
        pod("job-coordinator", "coordinator", None, 22273),
        pod("job-collector-0", "collector", Some(0), 22270),
        pod("job-collector-1", "collector", Some(1), 22270),
        pod("job-learner-0", "learner", Some(0), 22271),
    ]
}

fn fake_api_server(world: Arc<Mutex<World>>) -> Client {
    let (service, mut handle) = tower_test::mock::pair::<Request<kube::client::Body>, Response<kube::client::Body>>();
    tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            let (parts, body) = request.into_parts();
            let bytes = body.collect().await.unwrap().to_bytes();
            let path = parts.uri.path().to_string();
            let mut w = world.lock().unwrap();
            let (code, answer) = match (parts.method.as_str(), path.as_str()) {
                ("GET", "/apis/diengine.opendilab.org/v1alpha1/namespaces/ns/dijobs/job") => (200, w.job.clone()),
                ("PATCH", "/apis/diengine.opendilab.org/v1alpha1/namespaces/ns/dijobs/job") => {
                    let patch: Value = serde_json::from_slice(&bytes).unwrap();
                    let current = w.job["metadata"]["resourceVersion"].as_str().unwrap().parse::<u64>().unwrap();
                    if patch["metadata"]["resourceVersion"] != json!(current.to_string()) {
                        (
                            409,
                            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict", "code": 409, "message": "the object has been modified"}),
                        )
                    } else {
                        json_patch::merge(&mut w.job, &patch);
                        w.job["metadata"]["resourceVersion"] = json!((current + 1).to_string());
                        w.patches += 1;
                        (200, w.job.clone())
                    }
                }
                ("GET", "/api/v1/namespaces/ns/pods") => (
                    200,
                    json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "1"}, "items": w.pods}),
                ),
                _ => (
                    404,
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}),
                ),
            };
            drop(w);
            let body = kube::client::Body::from(serde_json::to_vec(&answer).unwrap());
            send.send_response(Response::builder().status(code).body(body).unwrap());
        }
    });
    Client::new(service, "default")
}

fn setup(peer: [u8; 4]) -> (axum::Router, Arc<Mutex<World>>) {
    let world = Arc::new(Mutex::new(World { job: job(), pods: pods(), patches: 0 }));
    let scope = Scope { namespace: "ns".into(), job: "job".into() };
    let endpoint =
        Endpoint::new(fake_api_server(world.clone()), scope, vec!["10.1.2.3".parse().unwrap()], Duration::ZERO);
    let app = router(endpoint).layer(MockConnectInfo(SocketAddr::from((peer, 40000))));
    (app, world)
}

async fn call(app: &axum::Router, method: &str, uri: &str, body: &[u8]) -> (StatusCode, Value) {
    // No Content-Type, as DI-engine sends it.
    let request = Request::builder().method(method).uri(uri).body(Body::from(body.to_vec())).unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| panic!("not an envelope: {}", String::from_utf8_lossy(&bytes))),
    )
}

fn assert_error(status: StatusCode, reply: &Value, want: StatusCode, message: &str) {
    assert_eq!(status, want, "{reply}");
    assert_eq!(
        (reply["success"].clone(), reply["code"].clone(), reply["data"].clone()),
        (json!(false), json!(1), Value::Null)
    );
    assert!(reply["message"].as_str().unwrap().contains(message), "{:?} lacks {message:?}", reply["message"]);
}

const LOCAL: [u8; 4] = [127, 0, 0, 1];

#[tokio::test]
async fn get_lists_collectors_and_learners_as_urls() {
    let (app, _) = setup(LOCAL);
    for version in ["v1alpha1", "v1alpha2"] {
        let (status, reply) =
            call(&app, "GET", &format!("/{version}/replicas?namespace=ns&coordinator=job-coordinator"), b"").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            reply,
            json!({"success": true, "code": 0, "message": "successfully get replicas", "data": {
                "namespace": "ns", "coordinator": "job-coordinator",
                "collectors": ["job-collector-0.ns:22270", "job-collector-1.ns:22270"],
                "learners": ["job-learner-0.ns:22271"]}})
        );
    }
    let (status, reply) = call(&app, "GET", "/v1alpha1/replicas?namespace=ns&name=job-collector-1", b"").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(reply["data"]["collectors"], json!(["job-collector-1.ns:22270"]));
}

#[tokio::test]
async fn post_raises_the_desired_counts_and_answers_with_the_new_urls() {
    let (app, world) = setup(LOCAL);
    let body = br#"{"namespace": "ns", "coordinator": "job-coordinator", "collectors": {"replicas": 2}, "learners": {"replicas": 1, "gpus": "0"}}"#;
    let (status, reply) = call(&app, "POST", "/v1alpha1/replicas", body).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    assert_eq!(reply["success"], true);
    assert_eq!(reply["data"]["collectors"], json!(["job-collector-2.ns:22270", "job-collector-3.ns:22270"]));
    assert_eq!(reply["data"]["learners"], json!(["job-learner-1.ns:22271"]));
    let w = world.lock().unwrap();
    assert_eq!(w.job["spec"]["collector"]["replicas"], 4);
    assert_eq!(w.job["spec"]["learner"]["replicas"], 2);
    assert!(w.job["spec"]["learner"].get("gpus").is_none(), "gpus 0 is what the job has: nothing to change");
}

#[tokio::test]
async fn delete_lowers_the_counts_highest_index_first() {
    let (app, world) = setup(LOCAL);
    let body = br#"{"namespace": "ns", "coordinator": "job-coordinator", "collectors": {"replicas": 2}, "learners": {"replicas": 0}}"#;
    let (status, reply) = call(&app, "DELETE", "/v1alpha1/replicas", body).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    assert_eq!(reply["message"].as_str().unwrap().split(';').next(), Some("successfully delete replicas"));
    // With no wait the pods are still there: their URLs are the ones going.
    assert_eq!(reply["data"]["collectors"], json!(["job-collector-1.ns:22270", "job-collector-0.ns:22270"]));
    assert_eq!(world.lock().unwrap().job["spec"]["collector"]["replicas"], 0);
}

#[tokio::test]
async fn failed_marks_the_pods_for_replacement() {
    let (app, world) = setup(LOCAL);
    let body = br#"{"namespace": "ns", "coordinator": "job-coordinator", "collectors": ["job-collector-1.ns:22270"], "learners": ["job-learner-0"]}"#;
    let (status, reply) = call(&app, "POST", "/v1alpha1/replicas/failed", body).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    assert_eq!(reply["data"]["collectors"], json!(["job-collector-1.ns:22270"]));
    assert_eq!(reply["data"]["learners"], json!(["job-learner-0.ns:22271"]));
    let w = world.lock().unwrap();
    assert_eq!(
        w.job["metadata"]["annotations"]["diengine.opendilab.org/replace"],
        "job-collector-1=uid-job-collector-1,job-learner-0=uid-job-learner-0"
    );
}

#[tokio::test]
async fn bad_input_gets_the_error_envelope_and_changes_nothing() {
    let (app, world) = setup(LOCAL);
    let post = |body: &'static [u8]| {
        let app = app.clone();
        async move { call(&app, "POST", "/v1alpha1/replicas", body).await }
    };
    let (s, r) = post(b"collectors please").await;
    assert_error(s, &r, StatusCode::BAD_REQUEST, "the body is not a valid request");
    let (s, r) =
        post(br#"{"namespace": "ns", "coordinator": "job-coordinator", "collectors": {"replicas": "two"}}"#).await;
    assert_error(s, &r, StatusCode::BAD_REQUEST, "invalid type: string \"two\"");
    let (s, r) =
        post(br#"{"namespace": "ns", "coordinator": "job-coordinator", "collectors": {"replicas": -1}}"#).await;
    assert_error(s, &r, StatusCode::BAD_REQUEST, "collectors.replicas: -1: must be 0 or more");
    let (s, r) =
        post(br#"{"namespace": "ns", "coordinator": "job-coordinator", "learners": {"replicas": 1, "gpus": "0.5"}}"#)
            .await;
    assert_error(s, &r, StatusCode::BAD_REQUEST, "GPUs are whole devices");
    let (s, r) =
        post(br#"{"namespace": "ns", "coordinator": "job-coordinator", "learners": {"replicas": 1, "gpus": "2"}}"#)
            .await;
    assert_error(
        s,
        &r,
        StatusCode::CONFLICT,
        "the job's learners have 0 GPU(s) each; learners with 2 cannot join them",
    );
    let (s, r) =
        post(br#"{"namespace": "ns", "coordinator": "job-coordinator", "collectors": {"replicas": 1, "cpus": "4"}}"#)
            .await;
    assert_error(s, &r, StatusCode::CONFLICT, "the job's collectors get cpu 2 from their template, not 4");
    let (s, r) =
        post(br#"{"namespace": "ns", "coordinator": "job-coordinator", "collectors": {"replicas": 999}}"#).await;
    assert_error(s, &r, StatusCode::CONFLICT, "1001 collectors is more than the 1000 a job may have");
    let (s, r) =
        post(br#"{"namespace": "other", "coordinator": "job-coordinator", "collectors": {"replicas": 1}}"#).await;
    assert_error(s, &r, StatusCode::FORBIDDEN, "this endpoint serves job ns/job only");
    let (s, r) =
        post(br#"{"namespace": "ns", "coordinator": "other-coordinator", "collectors": {"replicas": 1}}"#).await;
    assert_error(s, &r, StatusCode::FORBIDDEN, "not ns/other-coordinator");

    let (s, r) = call(
        &app,
        "DELETE",
        "/v1alpha1/replicas",
        br#"{"namespace": "ns", "coordinator": "job-coordinator", "collectors": {"replicas": 3}}"#,
    )
    .await;
    assert_error(s, &r, StatusCode::BAD_REQUEST, "cannot delete 3 collectors: the job has 2");
    let (s, r) = call(
        &app,
        "POST",
        "/v1alpha1/replicas/failed",
        br#"{"namespace": "ns", "coordinator": "job-coordinator", "collectors": ["job-collector-7"]}"#,
    )
    .await;
    assert_error(s, &r, StatusCode::NOT_FOUND, "no collector pod \"job-collector-7\" in job job");
    let (s, r) = call(
        &app,
        "POST",
        "/v1alpha1/replicas/failed",
        br#"{"namespace": "ns", "coordinator": "job-coordinator", "learners": ["job-collector-0"]}"#,
    )
    .await;
    assert_error(s, &r, StatusCode::NOT_FOUND, "no learner pod \"job-collector-0\"");

    let big = vec![b' '; MAX_BODY + 1];
    let (s, r) = call(&app, "POST", "/v1alpha1/replicas", &big).await;
    assert_error(s, &r, StatusCode::PAYLOAD_TOO_LARGE, "");

    let (s, r) = call(&app, "GET", "/v1alpha1/replicas?namespace=ns&aggregator=job-learner-0", b"").await;
    assert_error(s, &r, StatusCode::NOT_FOUND, "no aggregator pod \"job-learner-0\" in job job");
    let (s, r) = call(&app, "GET", "/v1alpha1/replicas?coordinator=job-coordinator", b"").await;
    assert_error(s, &r, StatusCode::BAD_REQUEST, "the namespace parameter is required");
    let (s, r) = call(&app, "PUT", "/v1alpha1/replicas", b"{}").await;
    assert_error(s, &r, StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
    let (s, r) = call(&app, "GET", "/v1alpha3/replicas", b"").await;
    assert_error(s, &r, StatusCode::NOT_FOUND, "no such route");

    let w = world.lock().unwrap();
    assert_eq!(w.patches, 0, "no bad request changed the job");
    assert_eq!(w.job, job());
}

#[tokio::test]
async fn writes_come_from_the_coordinators_pod_only() {
    let body = br#"{"namespace": "ns", "coordinator": "job-coordinator", "collectors": {"replicas": 1}}"#;
    let (stranger, world) = setup([10, 9, 9, 9]);
    let (s, r) = call(&stranger, "POST", "/v1alpha1/replicas", body).await;
    assert_error(
        s,
        &r,
        StatusCode::FORBIDDEN,
        "only the coordinator's own pod may change the job's replicas, not 10.9.9.9",
    );
    // Reads are open to the job's pods (an aggregator asks for its learners).
    let (s, _) = call(&stranger, "GET", "/v1alpha1/replicas?namespace=ns&coordinator=job-coordinator", b"").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(world.lock().unwrap().patches, 0);
    // The pod's own address may write.
    let (own, _) = setup([10, 1, 2, 3]);
    let (s, r) = call(&own, "POST", "/v1alpha1/replicas", body).await;
    assert_eq!(s, StatusCode::OK, "{r}");
}

#[tokio::test]
async fn concurrent_requests_lose_no_update() {
    let (app, world) = setup(LOCAL);
    let mut tasks = vec![];
    for i in 0..30 {
        let app = app.clone();
        let (method, n) = if i % 3 == 0 { ("DELETE", 1) } else { ("POST", 2) };
        tasks.push(tokio::spawn(async move {
            let body = format!(
                r#"{{"namespace": "ns", "coordinator": "job-coordinator", "collectors": {{"replicas": {n}}}}}"#
            );
            let (status, _) = call(&app, method, "/v1alpha1/replicas", body.as_bytes()).await;
            (method, n, status)
        }));
    }
    let mut expected = 2;
    for task in tasks {
        let (method, n, status) = task.await.unwrap();
        if status == StatusCode::OK {
            expected += if method == "POST" { n } else { -n };
        }
    }
    assert_eq!(world.lock().unwrap().job["spec"]["collector"]["replicas"], expected);
}

#[tokio::test]
async fn health() {
    let (app, _) = setup([10, 9, 9, 9]);
    let (status, reply) = call(&app, "GET", "/healthz", b"").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(reply, json!({"success": true, "code": 0, "message": "ok", "data": null}));
}
