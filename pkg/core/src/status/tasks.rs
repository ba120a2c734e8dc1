//! A task job's status beyond what every job has: one condition per phase of DI-orchestrator 1.x,
//! and pod counts per task by pod phase.

use std::collections::BTreeMap;

use di_api::tasks::{TASK_LABEL, annotations};
use di_api::{DIJobCondition, DIJobStatus, Phase};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use super::{Facts, is_ready, is_terminating, pod_phase, set_condition};

/// The phases a task job moves through; each has a condition of its name.
const PHASES: [Phase; 6] =
    [Phase::Pending, Phase::Starting, Phase::Running, Phase::Restarting, Phase::Succeeded, Phase::Failed];

/// The current phase's condition is True; every other phase's the job has passed through turns
/// False, with the reason of the phase that replaced it.
pub(super) fn phase_conditions(
    conditions: &mut Vec<DIJobCondition>,
    phase: Phase,
    reason: &str,
    message: &str,
    now: Timestamp,
) {
    for other in PHASES {
        let kind = format!("{other:?}");
        if other == phase {
            set_condition(conditions, &kind, true, reason, message, now);
        } else if conditions.iter().any(|c| c.type_ == kind) {
            set_condition(conditions, &kind, false, reason, &format!("the job is {phase:?}"), now);
        }
    }
}

/// Per task, its pods by phase (terminating pods count nowhere); ready pods of the current peer
/// set.
pub(super) fn counts(status: &mut DIJobStatus, pods: &[&Pod], facts: &Facts) {
    let mut by_task: BTreeMap<String, BTreeMap<String, i32>> = BTreeMap::new();
    for pod in pods.iter().filter(|p| !is_terminating(p)) {
        let Some(task) = pod.labels().get(TASK_LABEL) else { continue };
        *by_task.entry(task.clone()).or_default().entry(pod_phase(pod).to_owned()).or_default() += 1;
    }
    status.task_status = by_task;
    let current = |p: &Pod| p.annotations().get(annotations::PEERS) == facts.peers.as_ref();
    status.ready_replicas = Some(pods.iter().filter(|p| current(p) && is_ready(p)).count() as i32);
}
