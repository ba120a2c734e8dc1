//! What decides the order of a pass's steps (`pass::act`): which plans record their status
//! before their pods, and which must first be checked against a quorum read of the job. Pure.

use di_api::DIJob;
use di_api::contract::names;
use kube::ResourceExt;

use crate::decision::{Action, Plan};

/// Whether the plan creates the first pods of a job its queue has just admitted, while the job's
/// status does not say so yet (it says `Queued=True`, or was never written). The webhook lets a
/// waiting job leave its queue, so the status says admitted before any pod exists: a job with
/// pods is never taken out of its queue on the word of a status that was true only before them.
pub(crate) fn admitted_now(job: &DIJob, plan: &Plan) -> bool {
    use di_api::contract::kueue::QUEUED;
    let says = |conditions: &[di_api::DIJobCondition], status: &str| {
        conditions.iter().any(|c| c.type_ == QUEUED && c.status == status)
    };
    // Recorded as waiting, or not recorded at all (a first status write that failed).
    let recorded_admitted = job.status.as_ref().is_some_and(|s| says(&s.conditions, "False"));
    let admitted = says(&plan.status.conditions, "False");
    admitted && !recorded_admitted && plan.actions.iter().any(|a| matches!(a, Action::CreatePod(_)))
}

/// Whether the plan creates a coordinator for a job that has had one: its status says so.
pub(crate) fn recreates_coordinator(job: &DIJob, plan: &Plan) -> bool {
    let coordinator = names::coordinator(&job.name_any());
    job.status.as_ref().is_some_and(|s| s.phase.is_some())
        && plan.actions.iter().any(|a| matches!(a, Action::CreatePod(pod) if pod.name_any() == coordinator))
}

/// Whether the plan deletes what the job's spec no longer asks for: replicas scaled away, a
/// suspended job's pods, a task job's pods built for an older peer set.
pub(crate) fn deletes_by_spec(plan: &Plan) -> bool {
    use crate::decision::Why;
    plan.actions.iter().any(|a| match a {
        Action::DeletePod { why, .. } => matches!(why, Why::ScaledDown | Why::Suspended | Why::Rebuilt),
        Action::DeleteService { .. } => true,
        _ => false,
    })
}
