//! Changing a DIJob with optimistic concurrency: every write carries the resourceVersion it was
//! decided on, and a conflicting write is decided again on what is there now. Concurrent
//! requests never lose an update; a job that keeps changing gets a conflict after a few tries.

use std::time::Duration;

use backon::{ExponentialBuilder, RetryableWithContext};
use di_api::DIJob;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};

use crate::scale::ApiError;

/// What a write did: the job as read, the job as written, and what `decide` returned.
pub struct Written<T> {
    pub before: DIJob,
    pub after: DIJob,
    pub result: T,
}

/// Tries at a write before giving up on a job that keeps changing.
pub const WRITE_ATTEMPTS: usize = 5;

/// The pauses between tries: short, as a client waits for the answer, and jittered, so that
/// writers that collided do not collide again in step.
fn pauses() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(20))
        .with_max_times(WRITE_ATTEMPTS - 1)
        .with_jitter()
}

/// Why one try did not write.
enum Failure {
    /// The job changed since it was read: decide again.
    Conflict,
    Refused(ApiError),
}

impl From<ApiError> for Failure {
    fn from(e: ApiError) -> Failure {
        Failure::Refused(e)
    }
}

/// Reads the job, lets `decide` turn it into a merge patch (and a result), and writes the patch
/// conditional on the version read; decides again on conflict, a few times.
pub async fn update_job<T, D>(api: &Api<DIJob>, name: &str, decide: D) -> Result<Written<T>, ApiError>
where
    D: FnMut(&DIJob) -> Result<(serde_json::Value, T), ApiError>,
{
    let attempt = |mut decide: D| async move {
        let outcome = write_once(api, name, &mut decide).await;
        (decide, outcome)
    };
    let (_, outcome) =
        attempt.retry(pauses()).context(decide).when(|failure| matches!(failure, Failure::Conflict)).await;
    outcome.map_err(|failure| match failure {
        Failure::Conflict => ApiError::Conflict(format!(
            "DIJob {name} kept changing while this request was decided ({WRITE_ATTEMPTS} tries): nothing was changed; retry"
        )),
        Failure::Refused(e) => e,
    })
}

async fn write_once<T>(
    api: &Api<DIJob>,
    name: &str,
    decide: &mut impl FnMut(&DIJob) -> Result<(serde_json::Value, T), ApiError>,
) -> Result<Written<T>, Failure> {
    let job = api
        .get_opt(name)
        .await
        .map_err(internal)?
        .ok_or_else(|| ApiError::NotFound(format!("DIJob {name} does not exist")))?;
    let (mut patch, result) = decide(&job)?;
    patch["metadata"]["resourceVersion"] = serde_json::json!(job.resource_version());
    match api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(after) => Ok(Written { before: job, after, result }),
        Err(kube::Error::Api(s)) if s.code == 409 => Err(Failure::Conflict),
        // Refused by validation (the webhook): the job's own rules say no.
        Err(kube::Error::Api(s)) if s.code == 422 || s.code == 400 => Err(ApiError::Conflict(s.message).into()),
        Err(e) => Err(internal(e).into()),
    }
}

pub fn internal(e: kube::Error) -> ApiError {
    ApiError::Internal(format!("kubernetes API: {e}"))
}
