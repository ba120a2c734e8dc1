//! A coordinator pod that went away while its job ran: evicted by the API or by its kubelet,
//! preempted, deleted by hand. Running it again from scratch is what a job needs, but never
//! silently: each loss is counted on the coordinator's Service like any replica's restart,
//! against `spec.restartLimit`, and shown (the restart's event, `status.restarts`). Past the
//! limit the job fails.

use di_api::contract::annotations;
use di_api::{DIJob, Phase};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::decision::restarts_of;
use crate::disruption::disrupted;
use crate::status::is_terminating;

/// One loss of the job's coordinator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lost {
    /// Recorded with the count: the pod's UID while it terminates, or, once it is gone unseen,
    /// the job's resourceVersion.
    pub key: String,
    /// Losses counted with this one.
    pub restarts: u32,
    /// Whether this loss was counted already: the Service names its key, or a loss was counted
    /// since the coordinator last started running.
    pub counted: bool,
    /// `Some(message)` when this loss is past `spec.restartLimit`.
    pub over_limit: Option<String>,
}

/// The loss of a running job's coordinator, if it went away; `None` when the job was not running
/// (the pod was never up, or suspend deleted it).
pub fn lost(
    job: &DIJob,
    previous: Option<Phase>,
    coordinator: Option<&Pod>,
    service: Option<&Service>,
) -> Option<Lost> {
    if previous != Some(Phase::Running) || job.spec.is_suspended() {
        return None;
    }
    let key = match coordinator {
        // Whatever its phase: the kubelet marks a deleted pod Failed on its way out. One a
        // disruption ended (evicted under node pressure, preempted) went away the same way.
        Some(pod) if is_terminating(pod) || disrupted(pod).is_some() => pod.uid()?,
        Some(_) => return None,
        None => format!("gone-at-{}", job.resource_version().unwrap_or_default()),
    };
    // One loss is seen first terminating, then gone (under another key), and a job edited meanwhile
    // changes the gone key too: a loss counted since the coordinator last started running is this one.
    let annotation = |name: &str| service.and_then(|s| s.annotations().get(name).cloned());
    let counted_at: Option<Timestamp> = annotation(annotations::RESTART_AFTER).and_then(|t| t.parse().ok());
    let running_since = job.status.as_ref().and_then(|s| {
        let running = s.conditions.iter().find(|c| c.type_ == "Running" && c.status == "True")?;
        running.last_transition_time.as_ref().map(|t| t.0)
    });
    let counted = annotation(annotations::LAST_FAILED_UID).as_ref() == Some(&key)
        || counted_at.zip(running_since).is_some_and(|(counted, since)| counted >= since);
    let restarts = service.map_or(0, restarts_of) + u32::from(!counted);
    let over_limit = job.spec.restart_limit.filter(|limit| restarts > (*limit).max(0) as u32).map(|limit| {
        format!(
            "the coordinator pod went away while the job ran (evicted, preempted or deleted) {restarts} time(s); \
             spec.restartLimit is {limit}"
        )
    });
    Some(Lost { key, restarts, counted, over_limit })
}
