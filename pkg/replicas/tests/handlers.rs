//! Every route driven in-process with the request shapes DI-engine sends (JSON without a
//! Content-Type, `gpus` as a string), against a fake API server that keeps the DIJob, checks
//! resourceVersions like the real one, lists the job's pods, and records every request. No
//! reconciler runs: a watch on the pods stays silent. The fake can also misbehave (see
//! `Trouble`): conflicting writers, failing or unanswered pod reads, watches that end at once,
//! and writes held until the test lets them through.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::connect_info::MockConnectInfo;
use axum::http::{Request, Response, StatusCode};
use di_api::contract::{Role, names};
use di_replicas::scale::Scope;
use di_replicas::server::{Endpoint, MAX_BODY, router};
use di_replicas::update::WRITE_ATTEMPTS;
use http_body_util::BodyExt;
use kube::Client;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tower::ServiceExt;

/// What the fake API server holds, how it misbehaves, and every request it was sent, in order.
struct World {
    job: Value,
    pods: Vec<Value>,
    /// Writes of the job applied.
    patches: usize,
    /// Writes of the job dropped because their client had gone before the answer, as the API
    /// server drops a request whose connection closed before it committed.
    abandoned: usize,
    trouble: Trouble,
    /// Requests held back until `release`, and requests never to be answered.
    held: Vec<Call>,
    ignored: Vec<Call>,
    seen: watch::Sender<Vec<Seen>>,
}

/// How the fake API server misbehaves; by default it does not.
#[derive(Default)]
struct Trouble {
    /// Another writer changes the job just before each of this many of the endpoint's writes.
    conflicts: usize,
    /// How pod lists and watches go once the job was written.
    pod_reads_after_write: Reads,
    /// How watches on the pods go otherwise.
    watches: Watches,
    /// Writes of the job wait for `release`.
    hold_patches: bool,
}

#[derive(Clone, Copy, Default)]
enum Reads {
    #[default]
    Answered,
    Failing,
    Unanswered,
}

#[derive(Clone, Copy, Default)]
enum Watches {
    #[default]
    Silent,
    EndAtOnce,
    Unanswered,
}

/// A request the fake API server was sent, when (on the test's clock), and its answer's status:
/// none while it is held or never to be answered, or when its client went first.
#[derive(Debug)]
struct Seen {
    method: String,
    path: String,
    watch: bool,
    at: Instant,
    status: Option<u16>,
}

impl Seen {
    fn is_job_patch(&self) -> bool {
        self.method == "PATCH" && self.path.contains("/dijobs/")
    }

    fn is_pod_read(&self) -> bool {
        self.method == "GET" && self.path == "/api/v1/namespaces/ns/pods"
    }

    fn is_pod_watch(&self) -> bool {
        self.is_pod_read() && self.watch
    }
}

fn count(log: &[Seen], what: fn(&Seen) -> bool) -> usize {
    log.iter().filter(|s| what(s)).count()
}

/// A request in the fake API server, with the way to answer it and its place in the log.
struct Call {
    method: String,
    path: String,
    watch: bool,
    bytes: Bytes,
    reply: oneshot::Sender<Response<Body>>,
    index: usize,
}

fn job() -> Value {
    job_named("job", json!({"replicas": 1, "template": {"spec": container()}}))
}

fn container() -> Value {
    json!({"containers": [{"name": "di-container", "image": "ding", "resources": {"requests": {"cpu": "2"}}}]})
}

/// A job with two collectors and the given learner spec.
fn job_named(name: &str, learner: Value) -> Value {
    json!({
        "apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJob",
        "metadata": {"name": name, "namespace": "ns", "uid": "job-uid", "resourceVersion": "1"},
        "spec": {
            "coordinator": {"template": {"spec": container()}},
            "collector": {"replicas": 2, "template": {"spec": container()}},
            "learner": learner,
        }
    })
}

fn pod(name: &str, role: &str, index: Option<u32>, port: i32) -> Value {
    pod_of("job", name, role, index, &[("di-port", port)])
}

/// A pod of `job` as the reconciler labels it, with the named container ports.
fn pod_of(job: &str, name: &str, role: &str, index: Option<u32>, ports: &[(&str, i32)]) -> Value {
    let mut labels = json!({"dijob-name": job, "replica-type": role});
    if let Some(i) = index {
        labels["diengine.opendilab.org/replica-index"] = json!(i.to_string());
    }
    let ports: Vec<Value> = ports.iter().map(|(n, p)| json!({"name": n, "containerPort": p})).collect();
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"), "labels": labels},
        "spec": {"containers": [{"name": "di-container", "image": "ding", "ports": ports}]},
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

/// A failed request's answer, as the API server gives it.
fn status(code: u16, reason: &str) -> Value {
    let mut status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code});
    status["reason"] = json!(reason);
    status["message"] = json!(reason);
    status
}

/// Answers one request from what the world holds; `None` leaves it unanswered for good. A watch
/// gets a body that never ends: no reconciler runs here, so no pod ever comes.
fn answer(w: &mut World, call: &Call) -> Option<(u16, Body)> {
    let (method, path) = (call.method.as_str(), call.path.as_str());
    let name = w.job["metadata"]["name"].as_str().unwrap_or_default();
    let job_path = format!("/apis/diengine.opendilab.org/v1alpha1/namespaces/ns/dijobs/{name}");
    let json = |code: u16, value: Value| Some((code, Body::from(serde_json::to_vec(&value).unwrap())));
    match method {
        "GET" if path == job_path => json(200, w.job.clone()),
        "PATCH" if path == job_path => {
            if w.trouble.conflicts > 0 {
                w.trouble.conflicts -= 1;
                bump_version(&mut w.job);
            }
            let patch: Value = serde_json::from_slice(&call.bytes).unwrap();
            if patch["metadata"]["resourceVersion"] != w.job["metadata"]["resourceVersion"] {
                return json(409, status(409, "Conflict"));
            }
            json_patch::merge(&mut w.job, &patch);
            bump_version(&mut w.job);
            w.patches += 1;
            json(200, w.job.clone())
        }
        "GET" if path == "/api/v1/namespaces/ns/pods" => {
            let reads = if w.patches > 0 { w.trouble.pod_reads_after_write } else { Reads::Answered };
            match (reads, call.watch, w.trouble.watches) {
                (Reads::Failing, ..) => json(500, status(500, "InternalError")),
                (Reads::Unanswered, ..) | (_, true, Watches::Unanswered) => None,
                (_, true, Watches::EndAtOnce) => Some((200, Body::empty())),
                (_, true, Watches::Silent) => {
                    Some((200, Body::from_stream(futures::stream::pending::<Result<Bytes, Infallible>>())))
                }
                (_, false, _) => json(
                    200,
                    json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "1"}, "items": w.pods}),
                ),
            }
        }
        _ => json(404, status(404, "NotFound")),
    }
}

fn bump_version(job: &mut Value) {
    let version = job["metadata"]["resourceVersion"].as_str().unwrap().parse::<u64>().unwrap();
    job["metadata"]["resourceVersion"] = json!((version + 1).to_string());
}

/// Answers `call` now, holds it, or never answers it. A client that has gone gets nothing, and
/// its write is not applied.
fn handle(w: &mut World, call: Call) {
    if call.reply.is_closed() {
        w.abandoned += usize::from(call.method == "PATCH");
        return;
    }
    if w.trouble.hold_patches && call.method == "PATCH" {
        w.held.push(call);
        return;
    }
    let Some((code, body)) = answer(w, &call) else { return w.ignored.push(call) };
    w.seen.send_modify(|seen| seen[call.index].status = Some(code));
    let _ = call.reply.send(Response::builder().status(code).body(body).unwrap());
}

/// Lets the held writes through, in order.
fn release(world: &Mutex<World>) {
    let mut w = world.lock().unwrap();
    w.trouble.hold_patches = false;
    for call in std::mem::take(&mut w.held) {
        handle(&mut w, call);
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A client whose requests the world answers. A request whose caller is dropped is seen as
/// gone by the fake (its reply channel closes), as a closed connection is by the API server.
fn fake_api_server(world: Arc<Mutex<World>>) -> Client {
    let (sender, mut calls) = mpsc::unbounded_channel::<(Request<kube::client::Body>, oneshot::Sender<_>)>();
    let service = tower::service_fn(move |request| {
        let sender = sender.clone();
        async move {
            let (reply, answer) = oneshot::channel::<Response<Body>>();
            sender.send((request, reply)).map_err(|_| "the fake API server stopped")?;
            Ok::<_, BoxError>(answer.await.map_err(|_| "the fake API server dropped the request")?)
        }
    });
    tokio::spawn(async move {
        while let Some((request, reply)) = calls.recv().await {
            let (parts, body) = request.into_parts();
            let bytes = body.collect().await.unwrap().to_bytes();
            let (method, path) = (parts.method.to_string(), parts.uri.path().to_string());
            let watch = parts.uri.query().is_some_and(|q| q.split('&').any(|p| p == "watch=true"));
            let mut w = world.lock().unwrap();
            let index = w.seen.borrow().len();
            let seen = Seen { method: method.clone(), path: path.clone(), watch, at: Instant::now(), status: None };
            w.seen.send_modify(|log| log.push(seen));
            handle(&mut w, Call { method, path, watch, bytes, reply, index });
        }
    });
    Client::new(service, "default")
}

fn setup(peer: [u8; 4]) -> (axum::Router, Arc<Mutex<World>>) {
    serve(job(), pods(), Duration::ZERO, peer)
}

/// The endpoint of `job`'s sidecar, in front of a fake API server holding `job` and `pods`.
fn serve(job: Value, pods: Vec<Value>, wait: Duration, peer: [u8; 4]) -> (axum::Router, Arc<Mutex<World>>) {
    let name = job["metadata"]["name"].as_str().unwrap().to_owned();
    let seen = watch::Sender::new(vec![]);
    let world = Arc::new(Mutex::new(World {
        job,
        pods,
        patches: 0,
        abandoned: 0,
        trouble: Trouble::default(),
        held: vec![],
        ignored: vec![],
        seen,
    }));
    let scope = Scope { namespace: "ns".into(), job: name };
    let endpoint = Endpoint::new(fake_api_server(world.clone()), scope, vec!["10.1.2.3".parse().unwrap()], wait);
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

#[tokio::test(start_paused = true)]
async fn delete_lowers_the_counts_highest_index_first() {
    let (app, world) = serve(job(), pods(), WAIT, LOCAL);
    let body = br#"{"namespace": "ns", "coordinator": "job-coordinator", "collectors": {"replicas": 2}, "learners": {"replicas": 0}}"#;
    let (status, reply) = call(&app, "DELETE", "/v1alpha1/replicas", body).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    assert_eq!(reply["message"].as_str().unwrap().split(';').next(), Some("successfully delete replicas"));
    // No reconciler removes the pods: their URLs, as listed, are the ones going.
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

/// Serde would read a JSON array as a request, field by field; a count near `i64::MAX` must
/// not overflow the new total.
#[tokio::test]
async fn arrays_and_huge_counts_are_refused() {
    let (app, world) = setup(LOCAL);
    for (uri, body) in [
        ("/v1alpha1/replicas", &b"[]"[..]),
        ("/v1alpha1/replicas", br#"["ns", "job-coordinator", {"replicas": 1}]"#),
        ("/v1alpha1/replicas/failed", b"[]"),
    ] {
        let (s, r) = call(&app, "POST", uri, body).await;
        assert_error(s, &r, StatusCode::BAD_REQUEST, "the body is not a JSON object");
    }
    for role in ["collectors", "learners"] {
        let body = json!({"namespace": "ns", "coordinator": "job-coordinator", role: {"replicas": i64::MAX}});
        let (s, r) = call(&app, "POST", "/v1alpha1/replicas", body.to_string().as_bytes()).await;
        assert_error(s, &r, StatusCode::CONFLICT, "is more than the 1000 a job may have");
    }
    assert_eq!(world.lock().unwrap().patches, 0);
}

#[tokio::test]
async fn health() {
    let (app, _) = setup([10, 9, 9, 9]);
    let (status, reply) = call(&app, "GET", "/healthz", b"").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(reply, json!({"success": true, "code": 0, "message": "ok", "data": null}));
}

const SCALE_UP: &[u8] = br#"{"namespace": "ns", "coordinator": "job-coordinator", "collectors": {"replicas": 1}}"#;

/// A request that waits for pods must not keep the next request from writing the job: the
/// second's patch arrives while the first still waits (here for good: no reconciler runs), and
/// the job ends with `collectors`.
async fn second_request_writes_while_the_first_waits(uri: &'static str, body: &'static [u8], collectors: i64) {
    let (app, world) = serve(job(), pods(), Duration::from_secs(3600), LOCAL);
    let mut seen = world.lock().unwrap().seen.subscribe();
    let first = tokio::spawn({
        let app = app.clone();
        async move { call(&app, "POST", uri, body).await }
    });
    // The first has written the job and reads pods to wait on.
    let waiting = seen.wait_for(|log| {
        log.iter().position(Seen::is_job_patch).is_some_and(|p| log[p..].iter().any(Seen::is_pod_read))
    });
    assert!(tokio::time::timeout(Duration::from_secs(10), waiting).await.is_ok(), "the first never waited");
    let second = tokio::spawn({
        let app = app.clone();
        async move { call(&app, "POST", "/v1alpha1/replicas", SCALE_UP).await }
    });
    let two_patches = seen.wait_for(|log| log.iter().filter(|s| s.is_job_patch()).count() == 2);
    let written = tokio::time::timeout(Duration::from_secs(10), two_patches).await.is_ok();
    assert!(written, "the second request's write waited for the first's 3600 s wait");
    assert!(!first.is_finished(), "the first still waits for its pods");
    let w = world.lock().unwrap();
    assert_eq!((w.patches, w.job["spec"]["collector"]["replicas"].clone()), (2, json!(collectors)), "each once");
    drop(w);
    first.abort();
    second.abort();
}

#[tokio::test]
async fn a_scale_waiting_for_pods_does_not_hold_up_the_next_request() {
    second_request_writes_while_the_first_waits("/v1alpha1/replicas", SCALE_UP, 4).await;
}

#[tokio::test]
async fn a_failure_report_waiting_for_pods_does_not_hold_up_the_next_request() {
    let report = br#"{"namespace": "ns", "coordinator": "job-coordinator", "collectors": ["job-collector-0"]}"#;
    second_request_writes_while_the_first_waits("/v1alpha1/replicas/failed", report, 3).await;
}

/// The aggregator of logic learner `i` and its URL, as the reconciler names its Service.
fn aggregator_url(job: &str, index: u32) -> String {
    names::url(&names::replica(job, Role::Aggregator, index), "ns", Role::Aggregator.default_port())
}

/// A job whose learners have two GPUs: each is an aggregator in front of DDP learners.
fn multi_gpu_job(name: &str) -> Value {
    job_named(name, json!({"replicas": 1, "gpus": 2, "template": {"spec": container()}}))
}

/// What the reconciler runs for `multi_gpu_job(name)`: one collector is enough here.
fn multi_gpu_pods(job: &str) -> Vec<Value> {
    let aggregator = names::replica(job, Role::Aggregator, 0);
    let ddp = names::ddp_learner(job, 0, 0);
    vec![
        pod_of(job, &names::coordinator(job), "coordinator", None, &[("di-port", 22273)]),
        pod_of(job, &names::replica(job, Role::Collector, 0), "collector", Some(0), &[("di-port", 22270)]),
        pod_of(job, &aggregator, "aggregator", Some(0), &[("di-port", 22272)]),
        pod_of(job, &ddp, "ddp-learner", Some(0), &[("di-port", 22271), ("gpu-port-1", 22272)]),
    ]
}

/// Job names that contain a role's name, or are one, get the names the reconciler gives.
#[tokio::test(start_paused = true)]
async fn jobs_named_like_roles_get_their_own_replica_names() {
    for job in ["x-learner-y", "a-collector-b", "learner", "x-aggregator-y"] {
        let (app, world) = serve(multi_gpu_job(job), multi_gpu_pods(job), WAIT, LOCAL);
        let coordinator = names::coordinator(job);
        let collector = names::url(&names::replica(job, Role::Collector, 0), "ns", 22270);

        let (s, r) =
            call(&app, "GET", &format!("/v1alpha1/replicas?namespace=ns&coordinator={coordinator}"), b"").await;
        assert_eq!(s, StatusCode::OK, "{job}: {r}");
        assert_eq!(r["data"]["collectors"], json!([collector]), "{job}");
        assert_eq!(r["data"]["learners"], json!([aggregator_url(job, 0)]), "{job}");

        let aggregator = names::replica(job, Role::Aggregator, 0);
        let (s, r) = call(&app, "GET", &format!("/v1alpha1/replicas?namespace=ns&aggregator={aggregator}"), b"").await;
        assert_eq!(s, StatusCode::OK, "{job}: {r}");
        let ddp = names::ddp_learner(job, 0, 0);
        assert_eq!(r["data"]["learners"], json!([format!("{ddp}.ns:22271"), format!("{ddp}.ns:22272")]), "{job}");

        // The aggregator is still there (no reconciler): its URL is the one going, and not gone yet.
        let body = json!({"namespace": "ns", "coordinator": coordinator, "learners": {"replicas": 1}});
        let (s, r) = call(&app, "DELETE", "/v1alpha1/replicas", body.to_string().as_bytes()).await;
        assert_eq!(s, StatusCode::OK, "{job}: {r}");
        assert_eq!(r["data"]["learners"], json!([aggregator_url(job, 0)]), "{job}");
        assert!(r["message"].as_str().unwrap().contains("not every replica was deleted"), "{job}: {r}");

        // Index 0 is the aggregator still running; index 1 is planned.
        let body = json!({"namespace": "ns", "coordinator": coordinator, "learners": {"replicas": 2, "gpus": "2"}});
        let (s, r) = call(&app, "POST", "/v1alpha1/replicas", body.to_string().as_bytes()).await;
        assert_eq!(s, StatusCode::OK, "{job}: {r}");
        assert_eq!(r["data"]["learners"], json!([aggregator_url(job, 0), aggregator_url(job, 1)]), "{job}");
        assert_eq!(world.lock().unwrap().job["spec"]["learner"]["replicas"], 2, "{job}");
    }
}

/// Every learner URL the endpoint plans names the Service the reconciler creates: an
/// aggregator's whenever the learners have more than one GPU, however the job says so.
#[tokio::test]
async fn planned_learner_urls_name_the_reconcilers_services() {
    let learner_gpus = |gpus: &str| {
        let limits = json!({"nvidia.com/gpu": gpus});
        json!({"containers": [{"name": "di-container", "image": "ding", "resources": {"limits": limits}}]})
    };
    let cases = [
        ("the spec's gpus", json!({"replicas": 0, "gpus": 2, "template": {"spec": container()}}), "2"),
        ("the template's GPUs", json!({"replicas": 0, "template": {"spec": learner_gpus("2")}}), "2"),
        ("the request's gpus", json!({"replicas": 0, "template": {"spec": container()}}), "2"),
        ("one GPU", json!({"replicas": 0, "template": {"spec": learner_gpus("1")}}), "1"),
    ];
    let (mut got, mut want) = (vec![], vec![]);
    for (case, learner, gpus) in cases {
        // The reconciler runs no learner yet.
        let (app, _) = serve(job_named("job", learner), pods()[..3].to_vec(), Duration::ZERO, LOCAL);
        let body =
            json!({"namespace": "ns", "coordinator": "job-coordinator", "learners": {"replicas": 2, "gpus": gpus}});
        let (s, r) = call(&app, "POST", "/v1alpha1/replicas", body.to_string().as_bytes()).await;
        assert_eq!(s, StatusCode::OK, "{case}: {r}");
        got.push((case, r["data"]["learners"].clone()));
        let urls: Vec<String> = if gpus == "1" {
            (0..2).map(|i| names::url(&names::replica("job", Role::Learner, i), "ns", 22271)).collect()
        } else {
            (0..2).map(|i| aggregator_url("job", i)).collect()
        };
        want.push((case, json!(urls)));
    }
    assert_eq!(got, want);
}

/// The endpoint's wait for pods in the tests below, as in production; they run on tokio's paused
/// clock, so it passes at once when nothing else can happen.
const WAIT: Duration = Duration::from_secs(30);

/// Another writer keeps changing the job: a few tries, each after a short pause, then a 409
/// that says to retry, and no change.
#[tokio::test(start_paused = true)]
async fn a_job_that_keeps_changing_gets_a_conflict_after_a_few_tries() {
    let (app, world) = setup(LOCAL);
    world.lock().unwrap().trouble.conflicts = usize::MAX;
    let mut seen = world.lock().unwrap().seen.subscribe();
    let (s, r) = tokio::select! {
        answer = call(&app, "POST", "/v1alpha1/replicas", SCALE_UP) => answer,
        _ = seen.wait_for(|log| count(log, Seen::is_job_patch) >= 20) => panic!("20 conflicting writes, still trying"),
    };
    assert_error(s, &r, StatusCode::CONFLICT, "kept changing");
    assert!(r["message"].as_str().unwrap().contains("retry"), "{r}");
    let tries: Vec<Instant> = seen.borrow().iter().filter(|s| s.is_job_patch()).map(|s| s.at).collect();
    assert_eq!(tries.len(), WRITE_ATTEMPTS);
    let pauses: Vec<Duration> = tries.windows(2).map(|t| t[1] - t[0]).collect();
    assert!(pauses.iter().all(|p| !p.is_zero()), "tried again without a pause: {pauses:?}");
    assert!(pauses.iter().sum::<Duration>() < Duration::from_secs(2), "the pauses are not short: {pauses:?}");
    let w = world.lock().unwrap();
    assert_eq!((w.patches, w.job["spec"]["collector"]["replicas"].clone()), (0, json!(2)));
}

#[tokio::test(start_paused = true)]
async fn a_write_that_conflicts_twice_is_decided_again_and_applied_once() {
    let (app, world) = setup(LOCAL);
    world.lock().unwrap().trouble.conflicts = 2;
    let (s, r) = call(&app, "POST", "/v1alpha1/replicas", SCALE_UP).await;
    assert_eq!(s, StatusCode::OK, "{r}");
    let w = world.lock().unwrap();
    assert_eq!(count(&w.seen.borrow(), Seen::is_job_patch), 3);
    assert_eq!((w.patches, w.job["spec"]["collector"]["replicas"].clone()), (1, json!(3)));
}

const SCALE_DOWN: &[u8] = br#"{"namespace": "ns", "coordinator": "job-coordinator", "collectors": {"replicas": 1}}"#;
const REPORT: &[u8] = br#"{"namespace": "ns", "coordinator": "job-coordinator", "collectors": ["job-collector-0"]}"#;

/// Once the job is written the change is in: an error would have the client send it again. So
/// whatever the pod reads do after the write, the answer is a success that says the reconciler
/// has not finished, with the URLs known: planned from the job as written, or as last listed.
#[tokio::test(start_paused = true)]
async fn after_the_write_failing_pod_reads_still_answer_success() {
    let cases = [
        (
            "POST",
            "/v1alpha1/replicas",
            SCALE_UP,
            "job-collector-2.ns:22270",
            "the job is changed, but not every replica was created within 30s",
        ),
        (
            "DELETE",
            "/v1alpha1/replicas",
            SCALE_DOWN,
            "job-collector-1.ns:22270",
            "the job is changed, but not every replica was deleted within 30s",
        ),
        (
            "POST",
            "/v1alpha1/replicas/failed",
            REPORT,
            "job-collector-0.ns:22270",
            "marked for replacement, not every replica was back within 30s",
        ),
    ];
    let (mut got, mut want) = (vec![], vec![]);
    for (method, uri, body, url, message) in cases {
        let (app, world) = serve(job(), pods(), WAIT, LOCAL);
        world.lock().unwrap().trouble.pod_reads_after_write = Reads::Failing;
        let (s, r) = call(&app, method, uri, body).await;
        // The message as wanted when it says that, else as it came.
        let said = r["message"].as_str().unwrap();
        let said = if said.contains(message) { message } else { said };
        got.push((method, uri, s, r["data"]["collectors"].clone(), said.to_owned(), world.lock().unwrap().patches));
        want.push((method, uri, StatusCode::OK, json!([url]), message.to_owned(), 1));
    }
    assert_eq!(got, want);
}

/// A watch the API server ends at once is opened again after a pause, not in a busy loop, and
/// the answer comes at the deadline.
#[tokio::test(start_paused = true)]
async fn a_watch_that_ends_at_once_is_reopened_after_a_pause() {
    let (app, world) = serve(job(), pods(), WAIT, LOCAL);
    world.lock().unwrap().trouble.watches = Watches::EndAtOnce;
    let mut seen = world.lock().unwrap().seen.subscribe();
    let start = Instant::now();
    let (s, r) = tokio::select! {
        answer = call(&app, "POST", "/v1alpha1/replicas", SCALE_UP) => answer,
        _ = seen.wait_for(|log| count(log, Seen::is_pod_watch) >= 100) => panic!("100 watches in {:?}", start.elapsed()),
    };
    assert_eq!(s, StatusCode::OK, "{r}");
    assert!(r["message"].as_str().unwrap().contains("not every replica was created within 30s"), "{r}");
    let elapsed = start.elapsed();
    assert!(elapsed >= WAIT && elapsed < WAIT + Duration::from_secs(1), "answered after {elapsed:?}");
    let watches: Vec<Instant> = seen.borrow().iter().filter(|s| s.is_pod_watch()).map(|s| s.at).collect();
    let pauses: Vec<Duration> = watches.windows(2).map(|t| t[1] - t[0]).collect();
    assert!(watches.len() < 30, "{} watches, pauses {pauses:?}", watches.len());
    assert!(pauses.iter().all(|p| !p.is_zero()), "reopened without a pause: {pauses:?}");
}

/// No step of the wait for pods outlasts the deadline: not the list, not opening the watch.
#[tokio::test(start_paused = true)]
async fn an_unanswered_pod_read_does_not_hold_the_answer_past_the_deadline() {
    let cases = [
        (
            "list",
            "/v1alpha1/replicas",
            SCALE_UP,
            Trouble { pod_reads_after_write: Reads::Unanswered, ..Default::default() },
        ),
        ("watch", "/v1alpha1/replicas", SCALE_UP, Trouble { watches: Watches::Unanswered, ..Default::default() }),
        (
            "report's list",
            "/v1alpha1/replicas/failed",
            REPORT,
            Trouble { pod_reads_after_write: Reads::Unanswered, ..Default::default() },
        ),
    ];
    let (mut got, mut want) = (vec![], vec![]);
    for (case, uri, body, trouble) in cases {
        let (app, world) = serve(job(), pods(), WAIT, LOCAL);
        world.lock().unwrap().trouble = trouble;
        let start = Instant::now();
        let outcome = match tokio::time::timeout(WAIT * 10, call(&app, "POST", uri, body)).await {
            Err(_) => format!("no answer in {:?}", WAIT * 10),
            Ok((s, r)) => format!("{s} after {:?}: {}", start.elapsed(), r["message"]),
        };
        got.push((case, outcome));
        let message = if uri.ends_with("failed") {
            "successfully recreate replicas; marked for replacement, not every replica was back within 30s"
        } else {
            "successfully create replicas; the job is changed, but not every replica was created within 30s"
        };
        want.push((case, format!("200 OK after {WAIT:?}: \"{message}\"")));
        assert_eq!(world.lock().unwrap().patches, 1, "{case}");
    }
    assert_eq!(got, want);
}

/// A missing `namespace` or `coordinator` makes a malformed request (400), not one for another
/// job (403).
#[tokio::test]
async fn a_body_without_namespace_or_coordinator_is_malformed() {
    let (app, world) = setup(LOCAL);
    for (method, uri, body, missing) in [
        (
            "POST",
            "/v1alpha1/replicas",
            &br#"{"coordinator": "job-coordinator", "collectors": {"replicas": 1}}"#[..],
            "namespace",
        ),
        ("POST", "/v1alpha1/replicas", br#"{"namespace": "ns", "collectors": {"replicas": 1}}"#, "coordinator"),
        ("DELETE", "/v1alpha1/replicas", br#"{"collectors": {"replicas": 1}}"#, "namespace"),
        (
            "POST",
            "/v1alpha1/replicas/failed",
            br#"{"namespace": "ns", "collectors": ["job-collector-0"]}"#,
            "coordinator",
        ),
        ("POST", "/v1alpha1/replicas", br#"{"namespace": "", "coordinator": "job-coordinator"}"#, "namespace"),
    ] {
        let (s, r) = call(&app, method, uri, body).await;
        assert_error(s, &r, StatusCode::BAD_REQUEST, &format!("{missing} is missing"));
    }
    assert_eq!(world.lock().unwrap().patches, 0);
}

/// A client that goes while its write is at the API server: axum drops the handler, but the
/// write still finishes, once, and the next request decides on the job as written (its first
/// try does not conflict).
#[tokio::test]
async fn a_write_whose_client_goes_is_applied_once_and_seen_by_the_next_request() {
    let (app, world) = setup(LOCAL);
    world.lock().unwrap().trouble.hold_patches = true;
    let mut seen = world.lock().unwrap().seen.subscribe();
    let first = tokio::spawn({
        let app = app.clone();
        async move { call(&app, "POST", "/v1alpha1/replicas", SCALE_UP).await }
    });
    seen.wait_for(|log| count(log, Seen::is_job_patch) == 1).await.unwrap();
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    let second = tokio::spawn({
        let app = app.clone();
        async move { call(&app, "POST", "/v1alpha1/replicas", SCALE_UP).await }
    });
    release(&world);
    let (s, r) = second.await.unwrap();
    assert_eq!(s, StatusCode::OK, "{r}");
    let w = world.lock().unwrap();
    assert_eq!(w.abandoned, 0, "the first's write was cut off with its client");
    assert_eq!((w.patches, w.job["spec"]["collector"]["replicas"].clone()), (2, json!(4)), "each once");
    let statuses: Vec<Option<u16>> = w.seen.borrow().iter().filter(|s| s.is_job_patch()).map(|s| s.status).collect();
    assert_eq!(statuses, vec![Some(200), Some(200)], "the second decided on the job before the first's write");
}

/// Issue 12's load: 100 concurrent scale requests to one endpoint, a third of the clients going
/// while the first write is at the API server. Each request is applied once or not at all: no
/// write is cut off, every answered request was applied, and the job counts every write.
#[tokio::test]
async fn a_hundred_concurrent_scales_with_clients_going_are_each_applied_once_or_not_at_all() {
    let (app, world) = setup(LOCAL);
    world.lock().unwrap().trouble.hold_patches = true;
    let mut seen = world.lock().unwrap().seen.subscribe();
    let clients: Vec<_> = (0..100)
        .map(|_| {
            let app = app.clone();
            tokio::spawn(async move { call(&app, "POST", "/v1alpha1/replicas", SCALE_UP).await })
        })
        .collect();
    seen.wait_for(|log| count(log, Seen::is_job_patch) == 1).await.unwrap();
    let (going, staying): (Vec<_>, Vec<_>) = clients.into_iter().enumerate().partition(|(i, _)| i % 3 == 0);
    for (_, client) in going {
        client.abort();
        assert!(client.await.unwrap_err().is_cancelled());
    }
    release(&world);
    let answered = staying.len();
    for (_, client) in staying {
        let (s, r) = client.await.unwrap();
        assert_eq!(s, StatusCode::OK, "{r}");
    }
    // The last write goes after every earlier one (one at a time, in turn).
    let (s, r) = call(&app, "POST", "/v1alpha1/replicas", SCALE_UP).await;
    assert_eq!(s, StatusCode::OK, "{r}");
    let w = world.lock().unwrap();
    assert_eq!(w.abandoned, 0, "a write was cut off with its client");
    assert!((answered + 1..=answered + 2).contains(&w.patches), "{answered} answered, {} written", w.patches);
    assert_eq!(w.job["spec"]["collector"]["replicas"], json!(2 + w.patches));
    assert!(w.seen.borrow().iter().all(|s| s.status != Some(409)), "a write was decided on a stale job");
}
