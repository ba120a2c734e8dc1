//! Refusals that say every further create of a pass would be refused the same way, so the pass
//! sends no more of them: a namespace being deleted refuses every create in it, and a quota whose
//! count of pods (or Services) is used up refuses every further one of that kind. A quota on cpu
//! or memory is not one: a smaller pod of the same pass may still fit.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::created::Kind;

/// The cause the API server gives a create refused in a namespace being deleted.
pub const NAMESPACE_TERMINATING: &str = "NamespaceTerminating";

/// Whether the API server refused a request because its namespace is being deleted.
pub fn says_namespace_terminating(error: &kube::Error) -> bool {
    let kube::Error::Api(status) = error else { return false };
    status.code == 403
        && status.details.as_ref().is_some_and(|d| d.causes.iter().any(|c| c.reason == NAMESPACE_TERMINATING))
}

/// Whether the API server refused a create because a ResourceQuota's count of `resource`
/// (`pods`, `services`) is used up. The quota admission names only what was exceeded:
/// `exceeded quota: q, requested: pods=1, used: pods=4, limited: pods=4`.
pub fn says_count_used_up(error: &kube::Error, resource: &str) -> bool {
    let kube::Error::Api(status) = error else { return false };
    let Some((_, after)) = status.message.split_once("exceeded quota: ") else { return false };
    let Some((_, requested)) = after.split_once("requested: ") else { return false };
    let requested = requested.split(", used: ").next().unwrap_or_default();
    let counted = format!("count/{resource}");
    status.code == 403
        && requested.split(',').filter_map(|r| r.split_once('=')).any(|(name, _)| name == resource || name == counted)
}

/// Which of a pass's creates are not sent: once the API server refused one in a way that says it
/// refuses every further one the same way (the namespace is being deleted: all of them; a
/// quota's count used up: those of its kind), the rest would only be refused in turn.
#[derive(Default)]
pub(crate) struct Stop {
    all: AtomicBool,
    pods: AtomicBool,
    services: AtomicBool,
}

impl Stop {
    fn flag(&self, kind: Kind) -> &AtomicBool {
        match kind {
            Kind::Pod => &self.pods,
            Kind::Service => &self.services,
        }
    }

    pub(crate) fn skips(&self, kind: Kind) -> bool {
        self.all.load(Ordering::Relaxed) || self.flag(kind).load(Ordering::Relaxed)
    }

    /// Takes in the API server's answer to a create of `kind` that failed.
    pub(crate) fn after(&self, kind: Kind, answer: &kube::Error) {
        if says_namespace_terminating(answer) {
            self.all.store(true, Ordering::Relaxed);
        } else if says_count_used_up(answer, kind.resource()) {
            self.flag(kind).store(true, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use kube::core::Status;
    use kube::core::response::{StatusCause, StatusDetails};

    use super::*;

    fn refused(code: u16, message: &str, cause: Option<&str>) -> kube::Error {
        let mut status = Status::failure(message, "Forbidden").with_code(code);
        // As the API server sends it, since the type has no constructor.
        status.details = cause.map(|reason| {
            let cause =
                StatusCause { reason: reason.into(), message: message.into(), field: "metadata.namespace".into() };
            let details = serde_json::json!({"kind": "pods", "causes": [cause]});
            serde_json::from_value::<StatusDetails>(details).unwrap()
        });
        kube::Error::Api(status.boxed())
    }

    #[test]
    fn a_namespace_being_deleted_is_told_by_its_cause() {
        let message = "unable to create new content in namespace a because it is being terminated";
        assert!(says_namespace_terminating(&refused(403, message, Some(NAMESPACE_TERMINATING))));
        assert!(!says_namespace_terminating(&refused(403, message, None)), "the cause, not the words");
        assert!(!says_namespace_terminating(&refused(409, message, Some(NAMESPACE_TERMINATING))));
        assert!(!says_count_used_up(&refused(403, message, Some(NAMESPACE_TERMINATING)), "pods"));
    }

    #[test]
    fn a_count_used_up_is_told_by_what_was_requested() {
        let quota = |requested: &str| {
            let message = format!(
                "pods \"j-collector-3\" is forbidden: exceeded quota: q, requested: {requested}, used: pods=4, limited: pods=4"
            );
            refused(403, &message, None)
        };
        assert!(says_count_used_up(&quota("pods=1"), "pods"));
        assert!(says_count_used_up(&quota("count/pods=1,requests.cpu=2"), "pods"));
        assert!(!says_count_used_up(&quota("pods=1"), "services"));
        assert!(!says_count_used_up(&quota("requests.cpu=2"), "pods"), "a smaller pod may still fit");
        assert!(!says_count_used_up(&refused(403, "pods is forbidden: exceeded quota", None), "pods"));
        assert!(!says_count_used_up(&refused(403, "pods is forbidden: violates PodSecurity", None), "pods"));
    }
}
