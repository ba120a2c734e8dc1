//! The rules of a job Kueue's MultiKueue runs on a worker cluster (`spec.managedBy`): on the
//! manager it is a queued job with one Workload, whose spec the worker's copy has taken over; on
//! the worker its copy keeps to one Workload too, the one MultiKueue made for it.

use super::Errors;
use super::naming::quoted;
use crate::contract::kueue::{MULTIKUEUE, ORCHESTRATOR, PREBUILT_WORKLOAD, QUEUE_NAME};
use crate::dijob::DIJob;

const PATH: &str = "spec.managedBy";

/// Whom `spec.managedBy` names, and what a job MultiKueue runs must have and must not.
pub(super) fn check(job: &DIJob, errs: &mut Errors) {
    if let Some(by) = job.spec.managed_by.as_deref()
        && by != MULTIKUEUE
        && by != ORCHESTRATOR
    {
        errs.add(
            PATH,
            format!(
                "Unsupported value {by:?}: use one of {} (or leave it unset for this cluster's orchestrator)",
                quoted(&[ORCHESTRATOR, MULTIKUEUE])
            ),
        );
    }
    if job.dispatched() && job.queue_name().is_none() {
        errs.add(
            format!("metadata.labels[{QUEUE_NAME}]"),
            format!(
                "Required value: a job with spec.managedBy {MULTIKUEUE} is dispatched from a Kueue LocalQueue whose \
                 ClusterQueue has a MultiKueue admission check: name that queue, or remove spec.managedBy"
            ),
        );
    }
    if job.dispatched() && job.prebuilt_workload().is_some() {
        errs.add(
            format!("metadata.annotations[{PREBUILT_WORKLOAD}]"),
            "Forbidden: MultiKueue names the Workload of the copy it makes on a worker, which has no \
             spec.managedBy; a job to dispatch has neither the annotation nor the Workload: remove it",
        );
    }
    let one_workload = job.dispatched() || job.prebuilt_workload().is_some();
    if one_workload && job.spec.collector.as_ref().is_some_and(|c| c.min_replicas.is_some()) {
        errs.add(
            "spec.collector.minReplicas",
            "Forbidden: MultiKueue dispatches a job as one Workload, and collectors above minReplicas would each \
             have their own: remove minReplicas (and maxReplicas) to dispatch the job, or run it without \
             spec.managedBy",
        );
    }
}

/// What may not change: who runs the job; and on the manager, the spec of a dispatched job but
/// for `suspend` (the worker's copy is the one that runs and scales, and MultiKueue never copies
/// a change to it).
pub(super) fn check_update(old: &DIJob, new: &DIJob, errs: &mut Errors) {
    let by = |job: &DIJob| job.spec.managed_by.clone().filter(|b| b != ORCHESTRATOR);
    if by(old) != by(new) {
        errs.add(PATH, "Forbidden: who runs the job is fixed when it is made; delete and re-create the DIJob");
        return;
    }
    if old.prebuilt_workload().is_some() && old.spec.is_suspended() != new.spec.is_suspended() {
        errs.add(
            "spec.suspend",
            "Forbidden: this is MultiKueue's copy of a job dispatched from a manager cluster, which would take the \
             Workload back and dispatch it again: suspend the job on the manager",
        );
    }
    if !old.dispatched() {
        return;
    }
    let (mut before, mut after) = (old.spec.clone(), new.spec.clone());
    before.suspend = None;
    after.suspend = None;
    if before != after {
        errs.add(
            "spec",
            "Forbidden: MultiKueue runs this job on a worker cluster from a copy it never updates: change it there \
             (its coordinator scales it there too), or suspend it here (spec.suspend) and delete and re-create it",
        );
    }
}

/// The metadata MultiKueue goes by, which no update may change: the Workload a worker's copy
/// runs on (its annotation, never added to a job or taken off one), and the queue of a
/// dispatched job or of a copy, whose Workload stays in the queue it was made for. Answers
/// whether it ruled on the queue (the ordinary queue rule then has nothing to add).
pub(super) fn check_metadata(old: &DIJob, new: &DIJob, errs: &mut Errors) -> bool {
    if old.prebuilt_workload() != new.prebuilt_workload() {
        errs.add(
            format!("metadata.annotations[{PREBUILT_WORKLOAD}]"),
            "Forbidden: MultiKueue sets it on the copy it makes on a worker, and the copy runs on that Workload \
             alone: leave it as it is",
        );
    }
    if !old.dispatched() && old.prebuilt_workload().is_none() {
        return false;
    }
    if old.queue_name() != new.queue_name() {
        errs.add(
            format!("metadata.labels[{QUEUE_NAME}]"),
            "Forbidden: the job is dispatched by MultiKueue, whose Workload stays in the queue it was made for: \
             delete the job and submit it again to another queue",
        );
    }
    true
}
