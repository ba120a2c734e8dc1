//! The rules of the collector role's counts and queue fields: `minReplicas`, `maxReplicas` and
//! `workloadPriorityClassName`, which act in a Kueue queue (see `queue::collectors` in the core).

use super::Errors;
use super::naming::dns1123_subdomain_problem;
use crate::contract::kueue::QUEUE_NAME;
use crate::dijob::{CollectorSpec, DIJob, DIJobSpec};

/// `minReplicas <= replicas <= maxReplicas` where set (`replicas` unset is 0); `maxReplicas`
/// needs `minReplicas`, since only collectors above the core can wait for spare room.
pub(super) fn check(collector: &CollectorSpec, errs: &mut Errors) {
    check_class(collector, errs);
    let Some(max) = collector.max_replicas else { return };
    let replicas = collector.replicas.unwrap_or(0);
    match collector.min_replicas {
        None => errs.add(
            "spec.collector.maxReplicas",
            "Required value: spec.collector.minReplicas: collectors beyond replicas run on a queue's spare room, \
             each on a Workload of its own, which only collectors above the job's core have; set minReplicas \
             (how many collectors run with the core) or remove maxReplicas",
        ),
        Some(min) if min > max => errs.add(
            "spec.collector.minReplicas",
            format!(
                "Invalid value: {min}: more than spec.collector.maxReplicas ({max}); lower it or raise maxReplicas"
            ),
        ),
        Some(_) => {}
    }
    if replicas > max {
        errs.add(
            "spec.collector.replicas",
            format!(
                "Invalid value: {replicas}: more than spec.collector.maxReplicas ({max}); ask for at most {max} \
                 collectors or raise maxReplicas"
            ),
        );
    }
}

/// The WorkloadPriorityClass of the collectors above the core: a name, and only with
/// `minReplicas` (no collector has a Workload of its own without it).
fn check_class(collector: &CollectorSpec, errs: &mut Errors) {
    let Some(class) = collector.workload_priority_class_name.as_deref() else { return };
    const PATH: &str = "spec.collector.workloadPriorityClassName";
    if let Some(problem) = dns1123_subdomain_problem(class) {
        errs.add(PATH, format!("Invalid value {class:?}: a WorkloadPriorityClass name {problem}"));
    }
    if collector.min_replicas.is_none() {
        errs.add(
            PATH,
            "Required value: spec.collector.minReplicas: only collectors above the job's core have Workloads of \
             their own to carry a class; set minReplicas or remove workloadPriorityClassName",
        );
    }
}

/// What a job in no queue asks of these fields that will not happen: said back on apply.
pub(super) fn warnings(job: &DIJob, said: &mut Vec<String>) {
    let (spec, queued) = (&job.spec, job.queue_name().is_some());
    let Some(collector) = spec.collector.as_ref().filter(|_| !queued) else { return };
    if collector.min_replicas.is_some() {
        said.push(format!(
            "spec.collector.minReplicas: acts only in a Kueue queue (label {QUEUE_NAME}), where collectors above it \
             are preempted and readmitted on their own; without one every collector runs with the job"
        ));
    }
    if collector.max_replicas.is_some_and(|m| m > spec.collector_replicas()) {
        said.push(format!(
            "spec.collector.maxReplicas: collectors above spec.collector.replicas run only on a Kueue queue's spare \
             room (label {QUEUE_NAME}); without one the job runs spec.collector.replicas"
        ));
    }
}

/// Which collectors run in the core, and at which class the others queue, are fixed with their
/// Workloads; `maxReplicas` may change.
pub(super) fn check_update(old: &DIJobSpec, new: &DIJobSpec, recreate: &str, errs: &mut Errors) {
    let core = |spec: &DIJobSpec| spec.collector.as_ref().and_then(|c| c.min_replicas);
    if core(old) != core(new) {
        errs.add(
            "spec.collector.minReplicas",
            format!(
                "Forbidden: which collectors run in the job's core is fixed when its Workloads are made; {recreate}"
            ),
        );
    }
    let class = |spec: &DIJobSpec| spec.collector.as_ref().and_then(|c| c.workload_priority_class_name.clone());
    if class(old) != class(new) {
        errs.add(
            "spec.collector.workloadPriorityClassName",
            format!("Forbidden: the collectors' class is fixed when their Workloads are made; {recreate}"),
        );
    }
}
