//! What can go wrong in a pass: one variant per operation, each with the object and step it was
//! at and the API server's answer. `kind` names the variant in a short stable word, used as the
//! reason of the Warning event on the DIJob (so `kubectl describe dijob` says why a job is
//! stuck), as the metric label and as a log field.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use crate::decision::backoff;
use crate::desired::BuildError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading the stored job: {source}")]
    ReadJob { source: kube::Error },
    #[error("writing the job's status: {source}")]
    WriteStatus { source: kube::Error },
    #[error("creating {kind} {name}: {source}")]
    Create { kind: String, name: String, source: kube::Error },
    #[error("deleting {kind} {name}: {source}")]
    Delete { kind: String, name: String, source: kube::Error },
    #[error("counting the replacement of {service} on its Service: {source}")]
    MarkRestart { service: String, source: kube::Error },
    #[error("deleting the job after ttlSecondsAfterFinished: {source}")]
    DeleteJob { source: kube::Error },
    #[error("reporting the job to Kueue on its Workload {name}: {source}")]
    WriteWorkload { name: String, source: kube::Error },
    #[error("building the job's objects: {0}")]
    Build(#[from] BuildError),
    #[error("{kind} {name} belongs to another owner (a deleted job of the same name?): waiting for it to be deleted")]
    NameTaken { kind: String, name: String },
    /// Not a failure: the pass read an older job than the stored one and leaves it to the next.
    #[error("the cached job is older than the stored one")]
    StaleJob,
}

impl Error {
    /// The short stable category of the error.
    pub fn kind(&self) -> String {
        match self {
            Error::ReadJob { .. } => "ReadJob".into(),
            Error::WriteStatus { .. } => "WriteStatus".into(),
            Error::Create { kind, .. } => format!("Create{kind}"),
            Error::Delete { kind, .. } => format!("Delete{kind}"),
            Error::MarkRestart { .. } => "MarkRestart".into(),
            Error::DeleteJob { .. } => "DeleteJob".into(),
            Error::WriteWorkload { .. } => "WriteWorkload".into(),
            Error::Build(_) => "BuildObjects".into(),
            Error::NameTaken { .. } => "NameTaken".into(),
            Error::StaleJob => "StaleJob".into(),
        }
    }

    /// The API server's answer, where the error is one.
    pub fn answer(&self) -> Option<&kube::Error> {
        match self {
            Error::ReadJob { source }
            | Error::WriteStatus { source }
            | Error::Create { source, .. }
            | Error::Delete { source, .. }
            | Error::MarkRestart { source, .. }
            | Error::DeleteJob { source }
            | Error::WriteWorkload { source, .. } => Some(source),
            Error::Build(_) | Error::NameTaken { .. } | Error::StaleJob => None,
        }
    }

    /// Whether the API server refused this because the job's namespace is being deleted
    /// (`teardown`): not a failure of the job, which goes with its namespace.
    pub fn says_namespace_terminating(&self) -> bool {
        self.answer().is_some_and(crate::refusals::says_namespace_terminating)
    }
}

/// First wait before a failed pass runs again; it doubles with each failure in a row, up to
/// `plan::backoff`'s cap, so a job that keeps failing costs the API server less and less.
pub const RETRY_BASE: Duration = Duration::from_secs(1);

/// Failed passes in a row, per job (by UID).
#[derive(Default)]
pub struct Retries(Mutex<HashMap<String, u32>>);

impl Retries {
    /// Counts a failure; how long to wait before the next pass.
    pub fn failed(&self, uid: &str) -> Duration {
        let mut failures = self.0.lock().expect("retries lock");
        let count = failures.entry(uid.to_owned()).or_default();
        *count = count.saturating_add(1);
        backoff(RETRY_BASE, *count)
    }

    pub fn succeeded(&self, uid: &str) {
        let mut failures = self.0.lock().expect("retries lock");
        if !failures.is_empty() {
            failures.remove(uid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_in_a_row_back_off_until_a_success() {
        let retries = Retries::default();
        let waits: Vec<u64> = (0..11).map(|_| retries.failed("a").as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(retries.failed("b"), RETRY_BASE, "per job");
        retries.succeeded("a");
        assert_eq!(retries.failed("a"), RETRY_BASE);
    }

    #[test]
    fn each_operation_has_its_own_kind() {
        let api = || kube::Error::Api(kube::core::Status::failure("denied", "Forbidden").with_code(403).boxed());
        let create = Error::Create { kind: "Pod".into(), name: "job-coordinator".into(), source: api() };
        assert_eq!(create.kind(), "CreatePod");
        assert!(create.to_string().starts_with("creating Pod job-coordinator: "), "{create}");
        assert_eq!(Error::WriteStatus { source: api() }.kind(), "WriteStatus");
        assert_eq!(Error::NameTaken { kind: "Role".into(), name: "job-replicas".into() }.kind(), "NameTaken");
    }
}
