//! The replica endpoint of a local run, at `127.0.0.1:22280`: the same routes, request rules and
//! envelope as the cluster's sidecar (`di_replicas`), over the job held in memory. A scale request
//! changes the job with `di_client::scale`'s rules; the supervisor starts or stops the processes
//! before the answer, which names them by their local URLs.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::response::Response;
use axum::routing::{get, post};
use di_api::DIJob;
use di_api::contract::{REPLICAS_PORT, Role};
use di_client::failed::pod_name_of;
use di_client::scale::{Affected, scale_down, scale_up};
use di_client::wire::{ReplicaRequest, Replicas};
use di_replicas::scale::{ApiError, Scope};
use di_replicas::server::{Outcome, answers_every_route, body, envelope};
use tokio::sync::{Mutex, mpsc, oneshot};

use super::plan::{LocalReplica, Part};
use super::supervise::Request;

struct Local {
    scope: Scope,
    /// The job as the run has it; one change at a time.
    job: Mutex<DIJob>,
    supervisor: mpsc::UnboundedSender<Request>,
}

/// Serves the endpoint for `job` until the run ends.
pub async fn serve(job: DIJob, supervisor: mpsc::UnboundedSender<Request>) -> anyhow::Result<()> {
    let scope = Scope {
        namespace: job.metadata.namespace.clone().unwrap_or_default(),
        job: job.metadata.name.clone().unwrap_or_default(),
        uid: job.metadata.uid.clone().unwrap_or_default(),
    };
    let state = Arc::new(Local { scope, job: Mutex::new(job), supervisor });
    let mut router = Router::new().route("/healthz", get(|| async { envelope::<()>(Ok((None, "ok".into()))) }));
    for version in ["/v1alpha1", "/v1alpha2"] {
        router = router
            .route(&format!("{version}/replicas"), get(list).post(add).delete(remove))
            .route(&format!("{version}/replicas/failed"), post(failed));
    }
    let app = answers_every_route(router).with_state(state);
    let address = SocketAddr::from(([127, 0, 0, 1], REPLICAS_PORT as u16));
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("serving the run's replica endpoint at {address} (is another program using it?)"))?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(())
}

/// `<address>:<port>`: what the contract's `<pod>.<namespace>:<port>` is in a local run.
fn url(replica: &LocalReplica) -> String {
    format!("{}:{}", replica.address, replica.port.unwrap_or_default())
}

fn role(replica: &LocalReplica) -> Option<Role> {
    match replica.part {
        Part::Role { role, .. } => Some(role),
        Part::Task { .. } => None,
    }
}

/// Collectors and learners by index, as URLs.
fn replicas_of(scope: &Scope, live: &[LocalReplica], names: Option<&[String]>) -> Replicas {
    let mut out =
        Replicas { namespace: scope.namespace.clone(), coordinator: scope.coordinator(), ..Default::default() };
    let mut sorted: Vec<&LocalReplica> = live.iter().filter(|r| names.is_none_or(|n| n.contains(&r.name))).collect();
    sorted.sort_by_key(|r| match r.part {
        Part::Role { index, .. } => (index.unwrap_or(u32::MAX), r.name.clone()),
        Part::Task { .. } => (u32::MAX, r.name.clone()),
    });
    for r in sorted {
        match role(r) {
            Some(Role::Collector) => out.collectors.push(url(r)),
            Some(Role::Learner) => out.learners.push(url(r)),
            _ => {}
        }
    }
    out
}

async fn ask<T>(local: &Local, request: impl FnOnce(oneshot::Sender<T>) -> Request) -> Result<T, ApiError> {
    let (reply, answer) = oneshot::channel();
    local.supervisor.send(request(reply)).map_err(|_| ApiError::Internal("the run is ending".into()))?;
    answer.await.map_err(|_| ApiError::Internal("the run is ending".into()))
}

#[derive(serde::Deserialize)]
struct ListQuery {
    namespace: Option<String>,
    coordinator: Option<String>,
}

async fn list(State(local): State<Arc<Local>>, query: Result<Query<ListQuery>, QueryRejection>) -> Response {
    let outcome: Outcome<Replicas> = async {
        let Query(query) = query.map_err(|e| ApiError::BadRequest(format!("bad query parameters: {e}")))?;
        let namespace = query.namespace.unwrap_or_default();
        local.scope.check(&namespace, &query.coordinator.unwrap_or_default())?;
        let live = ask(&local, Request::List).await?;
        Ok((Some(replicas_of(&local.scope, &live, None)), "successfully get replicas".into()))
    }
    .await;
    envelope(outcome)
}

async fn add(State(local): State<Arc<Local>>, bytes: Result<Bytes, BytesRejection>) -> Response {
    envelope(scale(&local, bytes, true).await)
}

async fn remove(State(local): State<Arc<Local>>, bytes: Result<Bytes, BytesRejection>) -> Response {
    envelope(scale(&local, bytes, false).await)
}

async fn scale(local: &Local, bytes: Result<Bytes, BytesRejection>, up: bool) -> Outcome<Replicas> {
    let request: ReplicaRequest = body(bytes)?;
    local.scope.check(&request.namespace, &request.coordinator)?;
    let mut job = local.job.lock().await;
    let change = if up { scale_up(&job, &request)? } else { scale_down(&job, &request)? };
    let mut value = serde_json::to_value(&*job).map_err(|e| ApiError::Internal(e.to_string()))?;
    json_patch::merge(&mut value, &change.patch(&job));
    let after: DIJob = serde_json::from_value(value).map_err(|e| ApiError::Internal(e.to_string()))?;
    // What the webhook refuses on a cluster is refused here too, with nothing changed.
    di_api::validation::validate_dijob_update(&job, &after).map_err(|e| ApiError::Conflict(e.to_string()))?;
    let before = job.clone();
    // Removed replicas are named by the URLs they had.
    let before_live = ask(local, Request::List).await?;
    let live = ask(local, |reply| Request::Job(Box::new(after.clone()), reply))
        .await?
        .map_err(|e| ApiError::Internal(format!("{e:#}")))?;
    *job = after;
    let affected = Affected::between(&before, &job);
    let names: Vec<String> = [affected.collectors, affected.learners].concat();
    let answer = replicas_of(&local.scope, if up { &live } else { &before_live }, Some(&names));
    let verb = if up { "create" } else { "delete" };
    let mut message = format!("successfully {verb} replicas");
    for note in &change.notes {
        message.push_str(&format!("; {note}"));
    }
    Ok((Some(answer), message))
}

async fn failed(State(local): State<Arc<Local>>, bytes: Result<Bytes, BytesRejection>) -> Response {
    let outcome: Outcome<Replicas> = async {
        let report: Replicas = body(bytes)?;
        local.scope.check(&report.namespace, &report.coordinator)?;
        // Reported by the URLs the coordinator knows (local addresses), or by pod names.
        let live = ask(&local, Request::List).await?;
        let name_of = |entry: &String| {
            live.iter().find(|r| url(r) == *entry).map_or_else(|| pod_name_of(entry), |r| r.name.clone())
        };
        let names: Vec<String> = report.collectors.iter().chain(&report.learners).map(name_of).collect();
        let replaced = ask(&local, |reply| Request::Replace(names, reply)).await?;
        Ok((Some(replicas_of(&local.scope, &replaced, None)), "successfully recreate replicas".into()))
    }
    .await;
    envelope(outcome)
}
