//! Following the job's pods after a write, bounded by the endpoint's wait: the answer to a
//! scale request names the replicas it added or removed, and to a failure report the pods it
//! had replaced, as far as the reconciler got by then. A write is never undone by what a wait
//! finds: the answer is a success either way, saying whether the pods followed. Before its first
//! write, the endpoint waits for the job's status to name its pod (`until_current`).

use std::collections::BTreeMap;
use std::time::Duration;

use backon::{ConstantBuilder, ExponentialBuilder, Retryable, RetryableWithContext};
use di_api::DIJob;
use di_api::contract::Role;
use di_api::pod::url_of;
use di_client::failed::{Marked, replaced};
use di_client::scale::Affected;
use di_client::wire::Replicas;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{ListParams, WatchEvent, WatchParams};
use tokio::time::Instant;
use tracing::{debug, info};

use crate::endpoint::Endpoint;
use crate::scale::{self, ApiError};
use crate::slim::{self, SlimPod};

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
pub(crate) async fn wait_for(endpoint: &Endpoint, job: &DIJob, affected: &Affected, present: bool) -> (Replicas, bool) {
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
            let (listed, version) =
                slim::list(&api, &ListParams::default().labels(&selector).match_any()).await.map_err(again)?;
            let pods = known.pods.insert(listed.into_iter().map(|p| (p.name_any(), p)).collect());
            if done(pods) {
                return Ok(());
            }
            known.version.insert(version).clone()
        }
    };
    // The server ends the watch by the deadline too, so a dropped connection cannot linger.
    let left = deadline.saturating_duration_since(Instant::now());
    let params = WatchParams::default().labels(&selector).timeout(left.as_secs().clamp(1, 290) as u32);
    let mut events = api.watch(&params, &version).await.map_err(again)?.boxed();
    while let Some(event) = events.try_next().await.map_err(again)? {
        let pods = known.pods.get_or_insert_default();
        match event {
            WatchEvent::Added(SlimPod(pod)) | WatchEvent::Modified(SlimPod(pod)) => {
                known.version = pod.resource_version().or(known.version.take());
                pods.insert(pod.name_any(), pod);
            }
            WatchEvent::Deleted(SlimPod(pod)) => {
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
    affected: &Affected,
    present: bool,
    pods: Option<&BTreeMap<String, Pod>>,
) -> (Replicas, bool) {
    let live = |name: &String| pods?.get(name).filter(|p| p.metadata.deletion_timestamp.is_none());
    let all = || affected.collectors.iter().chain(&affected.learners);
    let found = all().filter(|n| live(n).is_some()).count();
    let done = pods.is_some() && if present { found == all().count() } else { found == 0 };
    let url = |name: &String, role: Role| live(name).map_or_else(|| scale::planned_url(job, name, role), url_of);
    let replicas = Replicas {
        namespace: endpoint.scope.namespace.clone(),
        coordinator: endpoint.scope.coordinator(),
        collectors: affected.collectors.iter().map(|n| url(n, Role::Collector)).collect(),
        learners: affected.learners.iter().map(|n| url(n, affected.learner_role)).collect(),
    };
    (replicas, done)
}

/// Waits, bounded, until every reported pod runs a new incarnation (the same name, another
/// UID), polling the job's pods: the pods as last listed (none: no list came back in time),
/// and whether they are replaced. The deadline bounds every list.
pub(crate) async fn wait_for_replacements(endpoint: &Endpoint, old: &[Marked]) -> (Option<Vec<Pod>>, bool) {
    let deadline = Instant::now() + endpoint.wait;
    let poll = |last: Option<Vec<Pod>>| async move {
        if Instant::now() >= deadline {
            return (last, Ok(()));
        }
        match tokio::time::timeout_at(deadline, endpoint.pods()).await {
            Err(_) => (last, Ok(())),
            Ok(Err(e)) => (last, Err(again(e))),
            Ok(Ok(pods)) if replaced(old, &pods) => (Some(pods), Ok(())),
            Ok(Ok(pods)) => (Some(pods), Err(Again("not replaced yet".into()))),
        }
    };
    let polls = ConstantBuilder::default().with_delay(Duration::from_millis(250)).without_max_times();
    let (pods, _) = poll.retry(polls).sleep(until(deadline)).context(None).await;
    let all = pods.as_deref().is_some_and(|pods| replaced(old, pods));
    (pods, all)
}

/// Waits, bounded by the endpoint's wait, until the job's status names this endpoint's pod as
/// the coordinator it runs now (`status.coordinatorUID`): the admission policy refuses a write
/// from any other pod. The orchestrator records it with the job's status, within seconds of the
/// coordinator's start; a predecessor's coordinator of the same name, still terminating after
/// the job was submitted again, never is: it is answered 410 at once, the job of that name being
/// another (its UID). Once named, the pod stays the job's coordinator for as long as it runs, so
/// this is looked up once; every write is still made to this job's UID only.
pub(crate) async fn until_current(endpoint: &Endpoint) -> Result<(), ApiError> {
    use std::sync::atomic::Ordering;
    if endpoint.current.load(Ordering::Relaxed) {
        return Ok(());
    }
    let deadline = Instant::now() + endpoint.wait;
    let look = || async {
        // Every look is answered or given up, even one made at the deadline (a wait of zero).
        let bound = deadline.max(Instant::now() + LOOK);
        let job = tokio::time::timeout_at(bound, endpoint.jobs().get(&endpoint.scope.job)).await;
        let job = job.map_err(|e| Named::Not(again(e)))?.map_err(|e| Named::Not(again(e)))?;
        di_client::same_job(&job, &endpoint.scope.uid).map_err(|gone| Named::Gone(ApiError::from(gone)))?;
        match job.status.and_then(|s| s.coordinator_uid) {
            Some(uid) if uid == endpoint.pod_uid => Ok(()),
            Some(uid) => Err(Named::Not(Again(format!("the job's status names the coordinator pod of UID {uid}")))),
            None => Err(Named::Not(Again("the job's status names no coordinator yet".into()))),
        }
    };
    let looked = look
        .retry(step_pauses())
        .sleep(until(deadline))
        .when(|named| matches!(named, Named::Not(_)) && Instant::now() < deadline)
        .notify(|named, pause| debug!(?named, ?pause, "waiting for the job's status to name this coordinator"))
        .await;
    match looked {
        Ok(()) => {
            endpoint.current.store(true, Ordering::Relaxed);
            info!(pod_uid = %endpoint.pod_uid, "the job's status names this pod as its coordinator");
            Ok(())
        }
        Err(Named::Gone(gone)) => Err(gone),
        Err(Named::Not(Again(why))) => Err(ApiError::Conflict(format!(
            "this pod ({}, UID {}) is not the coordinator job {} runs now: {why} (waited {:?}). A coordinator \
             that just started is named within seconds: ask again",
            endpoint.scope.coordinator(),
            endpoint.pod_uid,
            endpoint.scope.job,
            endpoint.wait
        ))),
    }
}

/// Why the job's status does not name this endpoint's pod: not yet (look again), or never (the
/// job of that name is another).
#[derive(Debug)]
enum Named {
    Not(Again),
    Gone(ApiError),
}

/// The longest one look at the job may take when the wait is over or shorter.
const LOOK: Duration = Duration::from_secs(5);
