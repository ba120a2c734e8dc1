//! The fake API server every handler test runs against, its fixtures, and the endpoint in
//! front of it.
//!
//! Not di-testing's shared fake, on purpose: these tests check what a fake that answers at once
//! through a closure cannot express: writes held and then released in order against the job as
//! it is by then, callers that leave before their answer, requests never answered at all, and a
//! log the tests await under tokio's paused clock.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{Request, Response, StatusCode};
use di_replicas::access::Access;
use di_replicas::scale::Scope;
use di_replicas::server::{Endpoint, router};
use http_body_util::BodyExt;
use kube::Client;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tower::ServiceExt;

/// What the fake API server holds, how it misbehaves, and every request it was sent, in order.
pub struct World {
    pub job: Value,
    pub pods: Vec<Value>,
    /// The job's Kueue Workload, when it has one.
    pub workload: Option<Value>,
    /// Writes of the job applied.
    pub patches: usize,
    /// Writes of the job dropped because their client had gone before the answer, as the API
    /// server drops a request whose connection closed before it committed.
    pub abandoned: usize,
    pub trouble: Trouble,
    /// Requests held back until `release`, and requests never to be answered.
    pub held: Vec<Call>,
    pub ignored: Vec<Call>,
    pub seen: watch::Sender<Vec<Seen>>,
}

/// How the fake API server misbehaves; by default it does not.
#[derive(Default)]
pub struct Trouble {
    /// Another writer changes the job just before each of this many of the endpoint's writes.
    pub conflicts: usize,
    /// How pod lists and watches go once the job was written.
    pub pod_reads_after_write: Reads,
    /// How watches on the pods go otherwise.
    pub watches: Watches,
    /// Writes of the job wait for `release`.
    pub hold_patches: bool,
    /// Reads of Workloads are refused (an identity without `get` on them).
    pub workloads_forbidden: bool,
}

#[derive(Clone, Copy, Default)]
pub enum Reads {
    #[default]
    Answered,
    Failing,
    Unanswered,
}

#[derive(Clone, Copy, Default)]
pub enum Watches {
    #[default]
    Silent,
    EndAtOnce,
    Unanswered,
}

/// A request the fake API server was sent, when (on the test's clock), and its answer's status:
/// none while it is held or never to be answered, or when its client went first.
#[derive(Debug)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub watch: bool,
    pub at: Instant,
    pub status: Option<u16>,
}

impl Seen {
    pub fn is_job_patch(&self) -> bool {
        self.method == "PATCH" && self.path.contains("/dijobs/")
    }

    pub fn is_pod_read(&self) -> bool {
        self.method == "GET" && self.path == "/api/v1/namespaces/ns/pods"
    }

    pub fn is_pod_watch(&self) -> bool {
        self.is_pod_read() && self.watch
    }
}

pub fn count(log: &[Seen], what: fn(&Seen) -> bool) -> usize {
    log.iter().filter(|s| what(s)).count()
}

/// A request in the fake API server, with the way to answer it and its place in the log.
pub struct Call {
    pub method: String,
    pub path: String,
    pub query: String,
    pub watch: bool,
    pub bytes: Bytes,
    pub reply: oneshot::Sender<Response<Body>>,
    pub index: usize,
}

pub fn job() -> Value {
    job_named("job", json!({"replicas": 1, "template": {"spec": container()}}))
}

pub fn container() -> Value {
    json!({"containers": [{"name": "di-container", "image": "ding", "resources": {"requests": {"cpu": "2"}}}]})
}

/// A job with two collectors and the given learner spec.
pub fn job_named(name: &str, learner: Value) -> Value {
    json!({
        "apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJob",
        "metadata": {"name": name, "namespace": "ns", "uid": JOB_UID, "resourceVersion": "1"},
        "spec": {
            "coordinator": {"template": {"spec": container()}},
            "collector": {"replicas": 2, "template": {"spec": container()}},
            "learner": learner,
        },
        "status": {"coordinatorUID": COORDINATOR_UID},
    })
}

/// The endpoint's own pod, which the job's status names as its coordinator.
pub const COORDINATOR_UID: &str = "coordinator-uid";
/// The UID of the job the endpoint serves.
pub const JOB_UID: &str = "job-uid";

pub fn pod(name: &str, role: &str, index: Option<u32>, port: i32) -> Value {
    pod_of("job", name, role, index, &[("di-port", port)])
}

/// A pod of `job` as the reconciler labels it, with the named container ports.
pub fn pod_of(job: &str, name: &str, role: &str, index: Option<u32>, ports: &[(&str, i32)]) -> Value {
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

pub fn pods() -> Vec<Value> {
    vec![
        pod("job-coordinator", "coordinator", None, 22273),
        pod("job-collector-0", "collector", Some(0), 22270),
        pod("job-collector-1", "collector", Some(1), 22270),
        pod("job-learner-0", "learner", Some(0), 22271),
    ]
}

/// A failed request's answer, as the API server gives it.
pub fn status(code: u16, reason: &str) -> Value {
    let mut status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code});
    status["reason"] = json!(reason);
    status["message"] = json!(reason);
    status
}

/// Answers one request from what the world holds; `None` leaves it unanswered for good. A watch
/// gets a body that never ends: no reconciler runs here, so no pod ever comes.
pub fn answer(w: &mut World, call: &Call) -> Option<(u16, Body)> {
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
        "GET" if path.starts_with("/apis/kueue.x-k8s.io/v1beta2/namespaces/ns/workloads/") => {
            let name = path.rsplit('/').next().unwrap_or_default();
            match &w.workload {
                _ if w.trouble.workloads_forbidden => json(403, status(403, "Forbidden")),
                Some(workload) if workload["metadata"]["name"] == name => json(200, workload.clone()),
                _ => json(404, status(404, "NotFound")),
            }
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
                (_, false, _) => json(200, pod_page(&w.pods, &call.query)),
            }
        }
        _ => json(404, status(404, "NotFound")),
    }
}

/// The page of `pods` a list's `limit` and `continue` ask for, as the API server pages (here the
/// token is the offset of the page).
fn pod_page(pods: &[Value], query: &str) -> Value {
    let param = |name: &str| {
        query.split('&').find_map(|p| p.strip_prefix(&format!("{name}="))).and_then(|v| v.parse::<usize>().ok())
    };
    let from = param("continue").unwrap_or(0).min(pods.len());
    let to = param("limit").map_or(pods.len(), |limit| (from + limit).min(pods.len()));
    let mut metadata = json!({"resourceVersion": "1"});
    if to < pods.len() {
        metadata["continue"] = json!(to.to_string());
    }
    json!({"apiVersion": "v1", "kind": "PodList", "metadata": metadata, "items": pods[from..to]})
}

pub fn bump_version(job: &mut Value) {
    let version = job["metadata"]["resourceVersion"].as_str().unwrap().parse::<u64>().unwrap();
    job["metadata"]["resourceVersion"] = json!((version + 1).to_string());
}

/// Answers `call` now, holds it, or never answers it. A client that has gone gets nothing, and
/// its write is not applied.
pub fn handle(w: &mut World, call: Call) {
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
pub fn release(world: &Mutex<World>) {
    let mut w = world.lock().unwrap();
    w.trouble.hold_patches = false;
    for call in std::mem::take(&mut w.held) {
        handle(&mut w, call);
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A client whose requests the world answers. A request whose caller is dropped is seen as
/// gone by the fake (its reply channel closes), as a closed connection is by the API server.
pub fn fake_api_server(world: Arc<Mutex<World>>) -> Client {
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
            let query = parts.uri.query().unwrap_or_default().to_string();
            let watch = query.split('&').any(|p| p == "watch=true");
            let mut w = world.lock().unwrap();
            let index = w.seen.borrow().len();
            let seen = Seen { method: method.clone(), path: path.clone(), watch, at: Instant::now(), status: None };
            w.seen.send_modify(|log| log.push(seen));
            handle(&mut w, Call { method, path, query, watch, bytes, reply, index });
        }
    });
    Client::new(service, "default")
}

pub fn setup(access: Access) -> (axum::Router, Arc<Mutex<World>>) {
    serve(job(), pods(), Duration::ZERO, access)
}

/// The endpoint of `job`'s sidecar, in front of a fake API server holding `job` and `pods`.
pub fn serve(job: Value, pods: Vec<Value>, wait: Duration, access: Access) -> (axum::Router, Arc<Mutex<World>>) {
    let name = job["metadata"]["name"].as_str().unwrap().to_owned();
    let seen = watch::Sender::new(vec![]);
    let world = Arc::new(Mutex::new(World {
        job,
        pods,
        workload: None,
        patches: 0,
        abandoned: 0,
        trouble: Trouble::default(),
        held: vec![],
        ignored: vec![],
        seen,
    }));
    let scope = Scope { namespace: "ns".into(), job: name, uid: JOB_UID.into() };
    let endpoint = Endpoint::new(fake_api_server(world.clone()), scope, wait, COORDINATOR_UID.into());
    let app = router(endpoint, access);
    (app, world)
}

pub async fn call(app: &axum::Router, method: &str, uri: &str, body: &[u8]) -> (StatusCode, Value) {
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

pub fn assert_error(status: StatusCode, reply: &Value, want: StatusCode, message: &str) {
    assert_eq!(status, want, "{reply}");
    assert_eq!(
        (reply["success"].clone(), reply["code"].clone(), reply["data"].clone()),
        (json!(false), json!(1), Value::Null)
    );
    assert!(reply["message"].as_str().unwrap().contains(message), "{:?} lacks {message:?}", reply["message"]);
}

/// The coordinator's own listener.
pub const LOCAL: Access = Access::Coordinator;
/// The pod's network.
pub const NETWORK: Access = Access::Network;

/// Requests as DI-engine sends them: one collector more, one fewer, one reported failed.
pub const SCALE_UP: &[u8] = br#"{"namespace": "ns", "coordinator": "job-coordinator", "collectors": {"replicas": 1}}"#;
pub const SCALE_DOWN: &[u8] =
    br#"{"namespace": "ns", "coordinator": "job-coordinator", "collectors": {"replicas": 1}}"#;
pub const REPORT: &[u8] =
    br#"{"namespace": "ns", "coordinator": "job-coordinator", "collectors": ["job-collector-0"]}"#;

/// The endpoint's wait for pods in the tests that wait, as in production; they run on tokio's
/// paused clock, so it passes at once when nothing else can happen.
pub const WAIT: Duration = Duration::from_secs(30);
