//! Changing a DIJob with optimistic concurrency: every write carries the resourceVersion it was
//! decided on, and a conflicting write is decided again on what is there now. Concurrent
//! requests never lose an update.

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

/// Reads the job, lets `decide` turn it into a merge patch (and a result), and writes the patch
/// conditional on the version read; retries on conflict.
pub async fn update_job<T>(
    api: &Api<DIJob>,
    name: &str,
    mut decide: impl FnMut(&DIJob) -> Result<(serde_json::Value, T), ApiError>,
) -> Result<Written<T>, ApiError> {
    loop {
        let job = api
            .get_opt(name)
            .await
            .map_err(internal)?
            .ok_or_else(|| ApiError::NotFound(format!("DIJob {name} does not exist")))?;
        let (mut patch, result) = decide(&job)?;
        patch["metadata"]["resourceVersion"] = serde_json::json!(job.resource_version());
        match api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(after) => return Ok(Written { before: job, after, result }),
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            // Refused by validation (the webhook): the job's own rules say no.
            Err(kube::Error::Api(s)) if s.code == 422 || s.code == 400 => return Err(ApiError::Conflict(s.message)),
            Err(e) => return Err(internal(e)),
        }
    }
}

pub fn internal(e: kube::Error) -> ApiError {
    ApiError::Internal(format!("kubernetes API: {e}"))
}
