//! Changing a DIJob with optimistic concurrency: every write carries the resourceVersion it was
//! decided on, and a conflicting write is decided again on what is there now. Concurrent
//! writers never lose an update; a job that keeps changing gets a conflict after a few tries.

use std::time::Duration;

use backon::{ExponentialBuilder, RetryableWithContext};
use di_api::DIJob;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};

use crate::is_status;

/// What a write did: the job as read, the job as written, and what `decide` returned.
pub struct Written<T> {
    pub before: DIJob,
    pub after: DIJob,
    pub result: T,
}

/// Tries at a write before giving up on a job that keeps changing.
pub const WRITE_ATTEMPTS: usize = 5;

/// Why a job was not written. `E` is why `decide` refused.
#[derive(Debug, thiserror::Error)]
pub enum UpdateError<E> {
    #[error("{0}")]
    Refused(E),
    /// The job named does not exist.
    #[error("DIJob {0} does not exist")]
    NotFound(String),
    /// Every try met a newer job than it had decided on; nothing was written.
    #[error(
        "DIJob {0} kept changing while this request was decided ({WRITE_ATTEMPTS} tries): nothing was changed; retry"
    )]
    KeptChanging(String),
    /// The API server (its validation, the webhook) refused the job as changed: its message.
    #[error("{0}")]
    Invalid(String),
    /// The API server could not be asked, or failed otherwise.
    #[error("kubernetes API: {0}")]
    Kube(kube::Error),
}

/// The pauses between tries: short, as a client waits for the answer, and jittered, so that
/// writers that collided do not collide again in step.
fn pauses() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(20))
        .with_max_times(WRITE_ATTEMPTS - 1)
        .with_jitter()
}

/// Reads the job, lets `decide` turn it into a merge patch (and a result), and writes the patch
/// conditional on the version read; decides again on conflict, a few times.
pub async fn update_job<T, E, D>(api: &Api<DIJob>, name: &str, decide: D) -> Result<Written<T>, UpdateError<E>>
where
    D: FnMut(&DIJob) -> Result<(serde_json::Value, T), E>,
{
    let attempt = |mut decide: D| async move {
        let outcome = write_once(api, name, &mut decide).await;
        (decide, outcome)
    };
    let conflict = |e: &UpdateError<E>| matches!(e, UpdateError::KeptChanging(_));
    let (_, outcome) = attempt.retry(pauses()).context(decide).when(conflict).await;
    outcome
}

/// One try; a conflict is `KeptChanging`, which the caller retries while it has tries left.
async fn write_once<T, E>(
    api: &Api<DIJob>,
    name: &str,
    decide: &mut impl FnMut(&DIJob) -> Result<(serde_json::Value, T), E>,
) -> Result<Written<T>, UpdateError<E>> {
    let job = api.get_opt(name).await.map_err(UpdateError::Kube)?.ok_or_else(|| UpdateError::NotFound(name.into()))?;
    let (mut patch, result) = decide(&job).map_err(UpdateError::Refused)?;
    patch["metadata"]["resourceVersion"] = serde_json::json!(job.resource_version());
    match api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(after) => Ok(Written { before: job, after, result }),
        Err(e) if is_status(&e, 409) => Err(UpdateError::KeptChanging(name.into())),
        // Refused by validation (the webhook): the job's own rules say no.
        Err(kube::Error::Api(s)) if s.code == 422 || s.code == 400 => Err(UpdateError::Invalid(s.message)),
        Err(e) => Err(UpdateError::Kube(e)),
    }
}
