//! The replica endpoint's HTTP API (`/v1alpha1` and `/v1alpha2`), the I/O edge of `scale`.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{ConnectInfo, DefaultBodyLimit, Query, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use backon::{ConstantBuilder, ExponentialBuilder, RetryableWithContext};
use di_api::DIJob;
use di_api::contract::{Role, annotations, labels};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::{Api, Client, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use tokio::sync::{Mutex, OwnedMutexGuard};
use tokio::time::Instant;
use tracing::{debug, info};

use crate::scale::{self, ApiError, Scope};
use crate::update::{Written, internal, update_job};
use crate::wire::{Envelope, ReplicaRequest, Replicas};

/// Largest request body; DI-engine's are a few hundred bytes.
pub const MAX_BODY: usize = 64 * 1024;

pub struct Endpoint {
    pub client: Client,
    pub scope: Scope,
    /// Addresses writes may come from besides loopback: the pod's own IPs.
    pub own_ips: Vec<IpAddr>,
    /// How long an answer waits for the reconciler to create or remove the replicas.
    pub wait: Duration,
    /// One write at a time from this endpoint; optimistic concurrency covers other writers. Held
    /// for the write only, never while a request waits for pods.
    writing: Arc<Mutex<()>>,
}

impl Endpoint {
    pub fn new(client: Client, scope: Scope, own_ips: Vec<IpAddr>, wait: Duration) -> Arc<Endpoint> {
        Arc::new(Endpoint { client, scope, own_ips, wait, writing: Arc::default() })
    }

    fn jobs(&self) -> Api<DIJob> {
        Api::namespaced(self.client.clone(), &self.scope.namespace)
    }

    /// The namespace's pods, and the selector of this job's.
    fn pod_api(&self) -> (Api<Pod>, String) {
        let api = Api::namespaced(self.client.clone(), &self.scope.namespace);
        (api, format!("{}={}", labels::JOB_NAME, self.scope.job))
    }

    /// This request's turn to write, once the writes before it are in. Waiting for it is
    /// cancellable: a request whose client goes meanwhile writes nothing.
    async fn turn(&self) -> OwnedMutexGuard<()> {
        self.writing.clone().lock_owned().await
    }

    async fn pods(&self) -> Result<Vec<Pod>, ApiError> {
        let (api, selector) = self.pod_api();
        Ok(api.list(&ListParams::default().labels(&selector)).await.map_err(internal)?.items)
    }
}

pub fn router(endpoint: Arc<Endpoint>) -> Router {
    let mut router = Router::new().route("/healthz", get(|| async { envelope::<()>(Ok((None, "ok".into()))) }));
    for version in ["/v1alpha1", "/v1alpha2"] {
        router = router
            .route(&format!("{version}/replicas"), get(list).post(add).delete(remove))
            .route(&format!("{version}/replicas/failed"), post(failed));
    }
    router
        .fallback(|method: Method| async move {
            let (status, message) = match method {
                Method::GET | Method::POST | Method::DELETE => (StatusCode::NOT_FOUND, "no such route"),
                _ => (StatusCode::METHOD_NOT_ALLOWED, "method not allowed"),
            };
            (status, axum::Json(Envelope::<()> { success: false, code: 1, message: message.into(), data: None }))
        })
        .method_not_allowed_fallback(|| async {
            let body = Envelope::<()> { success: false, code: 1, message: "method not allowed".into(), data: None };
            (StatusCode::METHOD_NOT_ALLOWED, axum::Json(body))
        })
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(endpoint)
}

type Outcome<T> = Result<(Option<T>, String), ApiError>;

fn envelope<T: Serialize>(outcome: Outcome<T>) -> Response {
    match outcome {
        Ok((data, message)) => {
            (StatusCode::OK, axum::Json(Envelope { success: true, code: 0, message, data })).into_response()
        }
        Err(e) => {
            let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            (status, axum::Json(Envelope::<T> { success: false, code: 1, message: e.to_string(), data: None }))
                .into_response()
        }
    }
}

/// A JSON object whatever the Content-Type (DI-engine sends none). Serde would also read an
/// array, field by field, which no client means.
fn body<T: DeserializeOwned>(bytes: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    let bytes = bytes.map_err(|rejection| match rejection.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::TooLarge(format!("the body is larger than {MAX_BODY} bytes")),
        _ => ApiError::BadRequest(format!("the body cannot be read: {rejection}")),
    })?;
    let value = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::BadRequest(format!("the body is not a valid request: {e}")))?;
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(ApiError::BadRequest("the body is not a JSON object".into()));
    }
    Ok(value)
}

/// Writes come from the coordinator's own pod: loopback or the pod's own address.
fn check_writer(endpoint: &Endpoint, peer: SocketAddr) -> Result<(), ApiError> {
    let ip = peer.ip().to_canonical();
    if ip.is_loopback() || endpoint.own_ips.contains(&ip) {
        return Ok(());
    }
    Err(ApiError::Forbidden(format!("only the coordinator's own pod may change the job's replicas, not {ip}")))
}

#[derive(serde::Deserialize)]
struct ListQuery {
    namespace: Option<String>,
    coordinator: Option<String>,
    aggregator: Option<String>,
    name: Option<String>,
}

async fn list(State(endpoint): State<Arc<Endpoint>>, query: Result<Query<ListQuery>, QueryRejection>) -> Response {
    match query {
        Ok(Query(query)) => envelope(list_outcome(&endpoint, query).await),
        Err(e) => envelope::<Replicas>(Err(ApiError::BadRequest(format!("bad query parameters: {e}")))),
    }
}

async fn list_outcome(endpoint: &Endpoint, query: ListQuery) -> Outcome<Replicas> {
    let scope = &endpoint.scope;
    let namespace =
        query.namespace.ok_or_else(|| ApiError::BadRequest("the namespace parameter is required".into()))?;
    match (query.coordinator, query.aggregator, query.name) {
        (Some(coordinator), None, None) => {
            scope.check(&namespace, &coordinator)?;
            Ok((Some(scale::listing(scope, &endpoint.pods().await?)), "successfully get replicas".into()))
        }
        (None, Some(aggregator), None) => {
            scope.check(&namespace, &scope.coordinator())?;
            Ok((
                Some(scale::ddp_listing(scope, &endpoint.pods().await?, &aggregator)?),
                "successfully get replicas".into(),
            ))
        }
        (None, None, Some(name)) => {
            scope.check(&namespace, &scope.coordinator())?;
            let pods = endpoint.pods().await?;
            let pod = pods
                .iter()
                .find(|p| p.name_any() == name)
                .ok_or_else(|| ApiError::NotFound(format!("no pod {name:?} in job {}", scope.job)))?;
            let mut replicas = Replicas { namespace, coordinator: scope.coordinator(), ..Default::default() };
            match scale::role_of(pod) {
                Some(Role::Collector) => replicas.collectors.push(scale::url_of(pod)),
                Some(_) => replicas.learners.push(scale::url_of(pod)),
                None => return Err(ApiError::NotFound(format!("{name:?} is not a replica of job {}", scope.job))),
            }
            Ok((Some(replicas), "successfully get replicas".into()))
        }
        _ => Err(ApiError::BadRequest("give exactly one of coordinator, aggregator or name".into())),
    }
}

async fn add(
    State(endpoint): State<Arc<Endpoint>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    envelope(scale_outcome(&endpoint, peer, bytes, true).await)
}

async fn remove(
    State(endpoint): State<Arc<Endpoint>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    envelope(scale_outcome(&endpoint, peer, bytes, false).await)
}

async fn scale_outcome(
    endpoint: &Arc<Endpoint>,
    peer: SocketAddr,
    bytes: Result<Bytes, BytesRejection>,
    up: bool,
) -> Outcome<Replicas> {
    check_writer(endpoint, peer)?;
    let request: ReplicaRequest = body(bytes)?;
    endpoint.scope.check(&request.namespace, &request.coordinator)?;
    let turn = endpoint.turn().await;
    let written = write(endpoint, turn, move |job: &DIJob| {
        let change = if up { scale::scale_up(job, &request)? } else { scale::scale_down(job, &request)? };
        Ok((change.patch(job), change))
    })
    .await?;
    // Written: from here on the answer is a success, whatever the wait for pods finds. An error
    // would have the client send the change again.
    let (job, change) = (&written.after, &written.result);
    let affected = scale::Affected::between(&written.before, job);
    info!(up, ?affected, "changed the job's desired replicas");
    let (replicas, converged) = wait_for(endpoint, job, &affected, up).await;
    let verb = if up { "create" } else { "delete" };
    let mut message = format!("successfully {verb} replicas");
    if !converged {
        message
            .push_str(&format!("; the job is changed, but not every replica was {verb}d within {:?}", endpoint.wait));
    }
    for note in &change.notes {
        message.push_str(&format!("; {note}"));
    }
    Ok((Some(replicas), message))
}

/// Writes the job in a task of its own, holding `turn` until the write is in. axum drops the
/// handler of a client that goes; the write still runs to its end, so that a request is applied
/// once or not at all, and the next request decides on the job as written.
async fn write<T, D>(endpoint: &Arc<Endpoint>, turn: OwnedMutexGuard<()>, decide: D) -> Result<Written<T>, ApiError>
where
    T: Send + 'static,
    D: FnMut(&DIJob) -> Result<(serde_json::Value, T), ApiError> + Send + 'static,
{
    let endpoint = endpoint.clone();
    let task = tokio::spawn(async move {
        let written = update_job(&endpoint.jobs(), &endpoint.scope.job, decide).await;
        drop(turn);
        written
    });
    task.await.map_err(|e| ApiError::Internal(format!("writing the DIJob: {e}")))?
}

/// Why a step of a wait ended before the wait was over: the next step comes after a pause.
#[derive(Debug)]
struct Again(String);

fn again(e: impl std::fmt::Display) -> Again {
    Again(e.to_string())
}

/// The pauses between steps of a wait for pods: growing, so that an API server that fails, or
/// ends a watch at once, is not asked again in a busy loop.
fn step_pauses() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_secs(2))
        .with_jitter()
        .without_max_times()
}

/// A sleeper for backon that never sleeps past `deadline`.
fn until(deadline: Instant) -> impl Fn(Duration) -> tokio::time::Sleep + 'static {
    move |pause| tokio::time::sleep_until((Instant::now() + pause).min(deadline))
}

/// The job's pods as far as they are known: as last listed and watched (none: never listed),
/// and the version to watch from (none: list first).
#[derive(Default)]
struct Known {
    pods: Option<BTreeMap<String, Pod>>,
    version: Option<String>,
}

/// Waits, bounded, until the affected replicas exist (`present`) or are gone, and answers with
/// their URLs. The job's pods are listed once and then followed on a watch, so the answer comes
/// as soon as the reconciler's pods do. A failed list or watch is tried again after a pause;
/// the deadline bounds every step, so the answer comes by then whatever the API server does.
async fn wait_for(endpoint: &Endpoint, job: &DIJob, affected: &scale::Affected, present: bool) -> (Replicas, bool) {
    let deadline = Instant::now() + endpoint.wait;
    let done = |pods: &BTreeMap<String, Pod>| answer(endpoint, job, affected, present, Some(pods)).1;
    let step = |known| follow(endpoint, known, deadline, &done);
    let (known, _) = step
        .retry(step_pauses())
        .sleep(until(deadline))
        .context(Known::default())
        .notify(|Again(why), pause| debug!(why, ?pause, "following the job's pods again after a pause"))
        .await;
    answer(endpoint, job, affected, present, known.pods.as_ref())
}

/// One step of following the job's pods, bounded by the deadline: done (or out of time), or
/// interrupted.
async fn follow(
    endpoint: &Endpoint,
    mut known: Known,
    deadline: Instant,
    done: &impl Fn(&BTreeMap<String, Pod>) -> bool,
) -> (Known, Result<(), Again>) {
    if Instant::now() >= deadline {
        return (known, Ok(()));
    }
    let outcome = tokio::time::timeout_at(deadline, watch_pods(endpoint, &mut known, deadline, done)).await;
    (known, outcome.unwrap_or(Ok(())))
}

/// Lists the job's pods when there is no version to watch from, then watches them until `done`.
async fn watch_pods(
    endpoint: &Endpoint,
    known: &mut Known,
    deadline: Instant,
    done: &impl Fn(&BTreeMap<String, Pod>) -> bool,
) -> Result<(), Again> {
    let (api, selector) = endpoint.pod_api();
    let version = match known.version.clone() {
        Some(version) => version,
        None => {
            // From the API server's cache as it is: a consistent list would wait for the cache to
            // catch up with the job write just made, and the watch from this version misses nothing.
            let list = api.list(&ListParams::default().labels(&selector).match_any()).await.map_err(again)?;
            let pods = known.pods.insert(list.items.into_iter().map(|p| (p.name_any(), p)).collect());
            if done(pods) {
                return Ok(());
            }
            known.version.insert(list.metadata.resource_version.unwrap_or_default()).clone()
        }
    };
    // The server ends the watch by the deadline too, so a dropped connection cannot linger.
    let left = deadline.saturating_duration_since(Instant::now());
    let params = WatchParams::default().labels(&selector).timeout(left.as_secs().clamp(1, 290) as u32);
    let mut events = api.watch(&params, &version).await.map_err(again)?.boxed();
    while let Some(event) = events.try_next().await.map_err(again)? {
        let pods = known.pods.get_or_insert_default();
        match event {
            WatchEvent::Added(pod) | WatchEvent::Modified(pod) => {
                known.version = pod.resource_version().or(known.version.take());
                pods.insert(pod.name_any(), pod);
            }
            WatchEvent::Deleted(pod) => {
                known.version = pod.resource_version().or(known.version.take());
                pods.remove(&pod.name_any());
            }
            WatchEvent::Bookmark(mark) => known.version = Some(mark.metadata.resource_version),
            // Most likely the version is too old to watch from: list again.
            WatchEvent::Error(status) => {
                known.version = None;
                return Err(Again(format!("the watch failed: {}", status.message)));
            }
        }
        if done(pods) {
            return Ok(());
        }
    }
    Err(Again("the watch ended".into()))
}

/// The URLs of the affected replicas, found among `pods` or planned in `job` (as written), and
/// whether every one of them exists (`present`) or none does; not known without `pods`.
fn answer(
    endpoint: &Endpoint,
    job: &DIJob,
    affected: &scale::Affected,
    present: bool,
    pods: Option<&BTreeMap<String, Pod>>,
) -> (Replicas, bool) {
    let live = |name: &String| pods?.get(name).filter(|p| p.metadata.deletion_timestamp.is_none());
    let all = || affected.collectors.iter().chain(&affected.learners);
    let found = all().filter(|n| live(n).is_some()).count();
    let done = pods.is_some() && if present { found == all().count() } else { found == 0 };
    let url = |name: &String, role: Role| live(name).map_or_else(|| scale::planned_url(job, name, role), scale::url_of);
    let replicas = Replicas {
        namespace: endpoint.scope.namespace.clone(),
        coordinator: endpoint.scope.coordinator(),
        collectors: affected.collectors.iter().map(|n| url(n, Role::Collector)).collect(),
        learners: affected.learners.iter().map(|n| url(n, affected.learner_role)).collect(),
    };
    (replicas, done)
}

async fn failed(
    State(endpoint): State<Arc<Endpoint>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    envelope(failed_outcome(&endpoint, peer, bytes).await)
}

async fn failed_outcome(
    endpoint: &Arc<Endpoint>,
    peer: SocketAddr,
    bytes: Result<Bytes, BytesRejection>,
) -> Outcome<Replicas> {
    check_writer(endpoint, peer)?;
    let report: Replicas = body(bytes)?;
    endpoint.scope.check(&report.namespace, &report.coordinator)?;
    let turn = endpoint.turn().await;
    // The pods as reported on; a retry after a conflicting write decides on the same ones.
    let pods = Arc::new(endpoint.pods().await?);
    let decide = {
        let (pods, report) = (pods.clone(), report.clone());
        move |job: &DIJob| {
            let (value, names) = scale::report_failed(job, &pods, &report)?;
            let uids: Vec<(String, Option<String>)> = names
                .iter()
                .map(|n| (n.clone(), pods.iter().find(|p| &p.name_any() == n).and_then(|p| p.uid())))
                .collect();
            Ok((json!({"metadata": {"annotations": {annotations::REPLACE: value}}}), (uids, names)))
        }
    };
    let (old_uids, names) = write(endpoint, turn, decide).await?.result;
    // Written: from here on the answer is a success, whatever the wait for pods finds.
    let (now, converged) = wait_for_replacements(endpoint, &old_uids).await;
    let pods = now.as_deref().unwrap_or(&pods);
    let mut replaced = Replicas {
        namespace: endpoint.scope.namespace.clone(),
        coordinator: endpoint.scope.coordinator(),
        ..Default::default()
    };
    for name in names {
        let url = pods.iter().find(|p| p.name_any() == name).map_or_else(|| name.clone(), scale::url_of);
        if report.collectors.iter().any(|c| scale::pod_name_of(c) == name) {
            replaced.collectors.push(url);
        } else {
            replaced.learners.push(url);
        }
    }
    let mut message = "successfully recreate replicas".to_string();
    if !converged {
        message.push_str(&format!("; marked for replacement, not every replica was back within {:?}", endpoint.wait));
    }
    Ok((Some(replaced), message))
}

/// Waits, bounded, until every reported pod runs a new incarnation (the same name, another
/// UID), polling the job's pods: the pods as last listed (none: no list came back in time),
/// and whether they are replaced. The deadline bounds every list.
async fn wait_for_replacements(endpoint: &Endpoint, old: &[(String, Option<String>)]) -> (Option<Vec<Pod>>, bool) {
    let deadline = Instant::now() + endpoint.wait;
    let poll = |last: Option<Vec<Pod>>| async move {
        if Instant::now() >= deadline {
            return (last, Ok(()));
        }
        match tokio::time::timeout_at(deadline, endpoint.pods()).await {
            Err(_) => (last, Ok(())),
            Ok(Err(e)) => (last, Err(again(e))),
            Ok(Ok(pods)) if scale::replaced(old, &pods) => (Some(pods), Ok(())),
            Ok(Ok(pods)) => (Some(pods), Err(Again("not replaced yet".into()))),
        }
    };
    let polls = ConstantBuilder::default().with_delay(Duration::from_millis(250)).without_max_times();
    let (pods, _) = poll.retry(polls).sleep(until(deadline)).context(None).await;
    let replaced = pods.as_deref().is_some_and(|pods| scale::replaced(old, pods));
    (pods, replaced)
}
