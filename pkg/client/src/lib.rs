//! What `kubectl di`, the replica endpoint and the end-to-end suite share about talking to a
//! cluster: changing a DIJob with optimistic concurrency (`update`), the scale rules and the
//! failure report both the endpoint and the plugin apply (`scale`, `failed`, over the di-server
//! wire types in `wire`), manifests applied through discovery (`apply`), and waits on watched
//! objects (`wait`). No HTTP server here: the plugin links this without the endpoint's.

pub mod apply;
pub mod failed;
pub mod scale;
pub mod scale_task;
pub mod update;
pub mod wait;
pub mod wire;

use di_api::DIJob;

/// Why a request about a job's replicas is refused, by what is wrong with it. The endpoint
/// answers each with its HTTP status; the plugin prints the message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The request itself is malformed.
    #[error("{0}")]
    BadRequest(String),
    /// It names a replica the job does not have.
    #[error("{0}")]
    NotFound(String),
    /// It is well-formed but the job, as it is, cannot do it.
    #[error("{0}")]
    Conflict(String),
    /// The job it was meant for is gone: the job of that name now is another.
    #[error("{0}")]
    Gone(String),
}

/// Whether `job` is the job of UID `uid`, the one its writer was made for: a job deleted and
/// submitted again under the same name is another job.
pub fn same_job(job: &DIJob, uid: &str) -> Result<(), Refusal> {
    match job.metadata.uid.as_deref() {
        Some(found) if found == uid => Ok(()),
        found => Err(Refusal::Gone(format!(
            "DIJob {} of UID {uid} is gone: the job of that name now is another (UID {}), which only its own \
             coordinator changes",
            job.metadata.name.as_deref().unwrap_or_default(),
            found.unwrap_or("unknown"),
        ))),
    }
}

/// Whether `error` is the API server answering with `code`: 404 (not found), 409 (conflict), ...
pub fn is_status(error: &kube::Error, code: u16) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_match_by_code() {
        let status = kube::core::Status::failure("gone", "NotFound").with_code(404);
        let error = kube::Error::Api(Box::new(status));
        assert!(is_status(&error, 404));
        assert!(!is_status(&error, 409));
        assert!(!is_status(&kube::Error::LinesCodecMaxLineLengthExceeded, 404));
    }
}
