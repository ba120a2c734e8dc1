//! The replica endpoint's HTTP API (`/v1alpha1` and `/v1alpha2`): requests checked, decided with
//! `di_client`'s rules, written one at a time, and answered once the pods followed (`follow`).

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Extension, Query, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use di_api::DIJob;
use di_api::contract::Role;
use di_api::pod::{role_of, url_of};
use di_client::failed::{mark_failed, pod_name_of};
use di_client::scale::{Affected, scale_down, scale_up};
use di_client::update::{UpdateError, Written, update_job};
use di_client::wire::{Envelope, ReplicaRequest, Replicas};
use di_client::{Refusal, same_job};
use di_core::queue::collectors::above_core;
use kube::ResourceExt;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::OwnedMutexGuard;
use tracing::info;

use crate::access::Access;
pub use crate::endpoint::Endpoint;
use crate::follow::{until_current, wait_for, wait_for_replacements};
use crate::quota::{self, Admission};
use crate::scale::{self, ApiError};

/// Largest request body; DI-engine's are a few hundred bytes.
pub const MAX_BODY: usize = 64 * 1024;

/// The endpoint's routes as one of its listeners serves them (`access`).
pub fn router(endpoint: Arc<Endpoint>, access: Access) -> Router {
    let mut router = Router::new().route("/healthz", get(|| async { envelope::<()>(Ok((None, "ok".into()))) }));
    for version in ["/v1alpha1", "/v1alpha2"] {
        router = router
            .route(&format!("{version}/replicas"), get(list).post(add).delete(remove))
            .route(&format!("{version}/replicas/failed"), post(failed));
    }
    answers_every_route(router).layer(Extension(access)).with_state(endpoint)
}

/// What every replica endpoint (this one, and a local run's) answers besides its routes: the
/// envelope for an unknown route or method, and the body limit.
pub fn answers_every_route<S: Clone + Send + Sync + 'static>(router: Router<S>) -> Router<S> {
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
}

/// An answer's data and message, or the error it answers with.
pub type Outcome<T> = Result<(Option<T>, String), ApiError>;

/// The envelope DI-engine reads, with the error's HTTP status.
pub fn envelope<T: Serialize>(outcome: Outcome<T>) -> Response {
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
pub fn body<T: DeserializeOwned>(bytes: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
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

#[derive(serde::Deserialize)]
struct ListQuery {
    namespace: Option<String>,
    coordinator: Option<String>,
    aggregator: Option<String>,
    name: Option<String>,
}

async fn list(
    State(endpoint): State<Arc<Endpoint>>,
    Extension(access): Extension<Access>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Response {
    match query {
        Ok(Query(query)) => envelope(list_outcome(&endpoint, access, query).await),
        Err(e) => envelope::<Replicas>(Err(ApiError::BadRequest(format!("bad query parameters: {e}")))),
    }
}

async fn list_outcome(endpoint: &Endpoint, access: Access, query: ListQuery) -> Outcome<Replicas> {
    let scope = &endpoint.scope;
    let namespace =
        query.namespace.ok_or_else(|| ApiError::BadRequest("the namespace parameter is required".into()))?;
    match (query.coordinator, query.aggregator, query.name) {
        (Some(coordinator), None, None) => {
            scope.check(&namespace, &coordinator)?;
            Ok((Some(scale::listing(scope, &endpoint.pods_for(access).await?)), "successfully get replicas".into()))
        }
        (None, Some(aggregator), None) => {
            scope.check(&namespace, &scope.coordinator())?;
            Ok((
                Some(scale::ddp_listing(scope, &endpoint.pods_for(access).await?, &aggregator)?),
                "successfully get replicas".into(),
            ))
        }
        (None, None, Some(name)) => {
            scope.check(&namespace, &scope.coordinator())?;
            let pods = endpoint.pods_for(access).await?;
            let pod = pods
                .iter()
                .find(|p| p.name_any() == name)
                .ok_or_else(|| ApiError::NotFound(format!("no pod {name:?} in job {}", scope.job)))?;
            let mut replicas = Replicas { namespace, coordinator: scope.coordinator(), ..Default::default() };
            match role_of(pod) {
                Some(Role::Collector) => replicas.collectors.push(url_of(pod)),
                Some(_) => replicas.learners.push(url_of(pod)),
                None => return Err(ApiError::NotFound(format!("{name:?} is not a replica of job {}", scope.job))),
            }
            Ok((Some(replicas), "successfully get replicas".into()))
        }
        _ => Err(ApiError::BadRequest("give exactly one of coordinator, aggregator or name".into())),
    }
}

async fn add(
    State(endpoint): State<Arc<Endpoint>>,
    Extension(access): Extension<Access>,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    envelope(scale_outcome(&endpoint, access, bytes, true).await)
}

async fn remove(
    State(endpoint): State<Arc<Endpoint>>,
    Extension(access): Extension<Access>,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    envelope(scale_outcome(&endpoint, access, bytes, false).await)
}

async fn scale_outcome(
    endpoint: &Arc<Endpoint>,
    access: Access,
    bytes: Result<Bytes, BytesRejection>,
    up: bool,
) -> Outcome<Replicas> {
    access.check_write()?;
    let request: ReplicaRequest = body(bytes)?;
    endpoint.scope.check(&request.namespace, &request.coordinator)?;
    until_current(endpoint).await?;
    // Only more replicas can outgrow a queued job's admission.
    let admission = match up {
        true => quota::read(endpoint).await,
        false => Admission::Free,
    };
    let turn = endpoint.turn().await;
    let (jobs, name, uid) = (endpoint.jobs(), endpoint.scope.job.clone(), endpoint.scope.uid.clone());
    let written = write(turn, async move {
        update_job(&jobs, &name, |job: &DIJob| {
            same_job(job, &uid)?;
            let mut change = if up { scale_up(job, &request)? } else { scale_down(job, &request)? };
            change.notes.extend(quota::check(&admission, job, &change.apply(job))?);
            Ok((change.patch(job), change))
        })
        .await
    })
    .await?;
    // Written: from here on the answer is a success, whatever the wait for pods finds. An error
    // would have the client send the change again.
    let (job, change) = (&written.after, &written.result);
    let mut affected = Affected::between(&written.before, job);
    info!(up, ?affected, "changed the job's desired replicas");
    // Collectors above a queued job's core wait for their own Workloads' admission, which may
    // take any time: the answer names them at once and waits only for the others.
    let for_quota: Vec<String> = match up && di_core::queue::queue_name(job).is_some() {
        true => affected.collectors.iter().filter(|n| above_core(job, n).is_some()).cloned().collect(),
        false => vec![],
    };
    affected.collectors.retain(|n| !for_quota.contains(n));
    let (mut replicas, converged) = wait_for(endpoint, job, &affected, up).await;
    replicas.collectors.extend(for_quota.iter().map(|n| scale::planned_url(job, n, Role::Collector)));
    let verb = if up { "create" } else { "delete" };
    let mut message = format!("successfully {verb} replicas");
    if !converged {
        message
            .push_str(&format!("; the job is changed, but not every replica was {verb}d within {:?}", endpoint.wait));
    }
    if !for_quota.is_empty() {
        message.push_str(&format!(
            "; {} collector(s) above the job's core (spec.collector.minReplicas) wait for their queue's quota and \
             start as Kueue admits them",
            for_quota.len()
        ));
    }
    let spare = job.collector_slots() - job.spec.collector_replicas();
    if !up && spare > 0 {
        message.push_str(&format!(
            "; up to {spare} collector(s) above spec.collector.replicas keep running while the queue has spare \
             room (spec.collector.maxReplicas); lower maxReplicas to run fewer"
        ));
    }
    for note in &change.notes {
        message.push_str(&format!("; {note}"));
    }
    Ok((Some(replicas), message))
}

/// Runs `writing` (a write of the job) in a task of its own, holding `turn` until the write is
/// in. axum drops the handler of a client that goes; the write still runs to its end, so that a
/// request is applied once or not at all, and the next request decides on the job as written.
async fn write<T: Send + 'static>(
    turn: OwnedMutexGuard<()>,
    writing: impl Future<Output = Result<Written<T>, UpdateError<Refusal>>> + Send + 'static,
) -> Result<Written<T>, ApiError> {
    let task = tokio::spawn(async move {
        let written = writing.await;
        drop(turn);
        written
    });
    Ok(task.await.map_err(|e| ApiError::Internal(format!("writing the DIJob: {e}")))??)
}

async fn failed(
    State(endpoint): State<Arc<Endpoint>>,
    Extension(access): Extension<Access>,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    envelope(failed_outcome(&endpoint, access, bytes).await)
}

async fn failed_outcome(
    endpoint: &Arc<Endpoint>,
    access: Access,
    bytes: Result<Bytes, BytesRejection>,
) -> Outcome<Replicas> {
    access.check_write()?;
    let report: Replicas = body(bytes)?;
    endpoint.scope.check(&report.namespace, &report.coordinator)?;
    until_current(endpoint).await?;
    let turn = endpoint.turn().await;
    // The pods as reported on; a retry after a conflicting write decides on the same ones.
    let pods = Arc::new(endpoint.pods().await?);
    let marking = {
        let (jobs, scope, pods, report) = (endpoint.jobs(), endpoint.scope.clone(), pods.clone(), report.clone());
        async move { mark_failed(&jobs, &scope.job, Some(&scope.uid), &pods, &report).await }
    };
    let marked = write(turn, marking).await?.result;
    // Written: from here on the answer is a success, whatever the wait for pods finds.
    let (now, converged) = wait_for_replacements(endpoint, &marked).await;
    let pods = now.as_deref().unwrap_or(&pods);
    let mut replaced = Replicas {
        namespace: endpoint.scope.namespace.clone(),
        coordinator: endpoint.scope.coordinator(),
        ..Default::default()
    };
    for (name, _) in marked {
        let url = pods.iter().find(|p| p.name_any() == name).map_or_else(|| name.clone(), url_of);
        if report.collectors.iter().any(|c| pod_name_of(c) == name) {
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
