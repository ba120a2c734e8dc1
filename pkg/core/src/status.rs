//! The job's status, recomputed from its pods on every pass: phase, conditions, counts. What
//! differs for a task job is in `status/tasks.rs`.

mod conditions;
mod tasks;

use std::collections::BTreeMap;

use di_api::contract::{Role, labels};
use di_api::pod::index_of;
use di_api::{DIJob, DIJobCondition, DIJobStatus, Phase, ReplicaStatus};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

pub use conditions::{set_condition, set_condition_as_said};

/// Condition types besides the phases.
pub const SUSPENDED: &str = "Suspended";
/// True while the job's Kueue queue holds it (its Workload not admitted), False once admitted.
pub use di_api::contract::kueue::QUEUED;
pub const RESTART_LIMIT_EXCEEDED: &str = "RestartLimitExceeded";
pub const AGGREGATOR_CONFIG_NOT_FOUND: &str = "AggregatorConfigNotFound";
pub const NAMES_TAKEN: &str = "NamesTaken";
/// Pods of the job that the scheduler cannot place (a gang that does not fit, a quota, no node
/// with the resources): the job waits for capacity, and says why.
pub const WAITING_FOR_CAPACITY: &str = "WaitingForCapacity";
/// A started job whose spec changed into one the reconciler cannot act on.
pub const INVALID_SPEC: &str = "InvalidSpec";

// How a pod's role is read is di-api's rule; re-exported for this crate's callers.
use di_api::pod::role_of;

pub fn pod_phase(pod: &Pod) -> &str {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Pending")
}

pub fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// Pending or running, and not on its way out.
pub fn is_active(pod: &Pod) -> bool {
    !is_terminating(pod) && matches!(pod_phase(pod), "Pending" | "Running" | "Unknown")
}

pub fn is_ready(pod: &Pod) -> bool {
    !is_terminating(pod)
        && pod_phase(pod) == "Running"
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The job's phase: terminal phases stick; otherwise it follows the coordinator pod.
pub fn job_phase(previous: Option<Phase>, coordinator: Option<&Pod>) -> Phase {
    if let Some(p) = previous.filter(|p| p.is_finished()) {
        return p;
    }
    // A coordinator a disruption ended is lost, not failed (`lost`).
    let deciding = |p: &&Pod| !is_terminating(p) && crate::disruption::disrupted(p).is_none();
    match coordinator.filter(deciding).map(pod_phase) {
        None | Some("Pending") => Phase::Created,
        Some("Running") => Phase::Running,
        Some("Succeeded") => Phase::Succeeded,
        Some("Failed") => Phase::Failed,
        Some(_) => Phase::Unknown,
    }
}

/// What the status says beyond the counts, decided by the pass.
#[derive(Clone, Debug, Default)]
pub struct Facts {
    pub phase: Option<Phase>,
    /// `(reason, message)` of the phase's transition.
    pub phase_reason: (String, String),
    pub suspended: bool,
    /// Replicas past the restart limit.
    pub over_restart_limit: Vec<String>,
    /// The AggregatorConfig the learners need but cannot be found.
    pub missing_aggregator_config: Option<String>,
    /// Names the job wants that objects of another owner hold, each with who holds it.
    pub names_taken: Vec<(String, String)>,
    /// Pods the job wants now.
    pub replicas: usize,
    /// Failed pods replaced so far.
    pub restarts: u32,
    /// Task jobs: the peer set pods are built for now; a pod built for another counts as not
    /// ready.
    pub peers: Option<String>,
    /// A job in a Kueue queue: whether the queue holds it, and why (`queue`).
    pub queued: Option<(bool, String, String)>,
}

/// Computes the status from the job's pods and the facts of this pass. Transition times move only
/// when a condition's status changes, so recomputing an unchanged world gives an equal status.
pub fn compute(job: &DIJob, pods: &[&Pod], facts: &Facts, now: Timestamp) -> DIJobStatus {
    let previous = job.status.clone().unwrap_or_default();
    let mut conditions = previous.conditions.clone();
    let phase = facts.phase.or(previous.phase).unwrap_or(Phase::Created);
    let (reason, message) = &facts.phase_reason;
    if job.spec.is_task_job() {
        tasks::phase_conditions(&mut conditions, phase, reason, message, now);
    } else {
        role_phase_conditions(&mut conditions, phase, reason, message, now);
    }
    if facts.suspended || conditions.iter().any(|c| c.type_ == SUSPENDED) {
        let (r, m) = if facts.suspended {
            ("JobSuspended", "spec.suspend is true: the job's pods are deleted until it is resumed")
        } else {
            ("JobResumed", "the job was resumed")
        };
        set_condition(&mut conditions, SUSPENDED, facts.suspended, r, m, now);
    }
    if let Some((held, reason, message)) = &facts.queued {
        set_condition_as_said(&mut conditions, QUEUED, *held, reason, message, now);
    }
    if !facts.over_restart_limit.is_empty() || conditions.iter().any(|c| c.type_ == RESTART_LIMIT_EXCEEDED) {
        let limit = job.spec.restart_limit.unwrap_or_default();
        let message = format!("replaced {limit} times already, left failed: {}", facts.over_restart_limit.join(", "));
        let exceeded = !facts.over_restart_limit.is_empty();
        let (r, m) = if exceeded { ("RestartLimitReached", message.as_str()) } else { ("WithinRestartLimit", "") };
        set_condition(&mut conditions, RESTART_LIMIT_EXCEEDED, exceeded, r, m, now);
    }
    if facts.missing_aggregator_config.is_some() || conditions.iter().any(|c| c.type_ == AGGREGATOR_CONFIG_NOT_FOUND) {
        let missing = facts.missing_aggregator_config.as_deref();
        let message = missing.map(|c| format!("AggregatorConfig {c} not found: multi-GPU learners wait for it"));
        let (r, m) = match &message {
            Some(m) => ("NotFound", m.as_str()),
            None => ("Found", ""),
        };
        set_condition(&mut conditions, AGGREGATOR_CONFIG_NOT_FOUND, missing.is_some(), r, m, now);
    }

    if !facts.names_taken.is_empty() || conditions.iter().any(|c| c.type_ == NAMES_TAKEN) {
        let message = format!(
            "waiting for names another owner holds to be free (that owner's objects deleted): {}",
            facts.names_taken.iter().map(|(name, holder)| format!("{name} ({holder})")).collect::<Vec<_>>().join(", ")
        );
        let taken = !facts.names_taken.is_empty();
        let (r, m) = if taken { ("NotOwned", message.as_str()) } else { ("Released", "") };
        set_condition(&mut conditions, NAMES_TAKEN, taken, r, m, now);
    }

    let unplaced = unschedulable(pods);
    if !unplaced.is_empty() || conditions.iter().any(|c| c.type_ == WAITING_FOR_CAPACITY) {
        let message =
            unplaced.first().map(|(pod, why)| format!("{} pod(s) cannot be placed yet; {pod}: {why}", unplaced.len()));
        let (r, m) = match &message {
            Some(m) => ("Unschedulable", m.as_str()),
            None => ("Placed", ""),
        };
        set_condition(&mut conditions, WAITING_FOR_CAPACITY, message.is_some(), r, m, now);
    }

    if conditions.iter().any(|c| c.type_ == INVALID_SPEC) {
        // Computed at all: the spec is valid again.
        set_condition(&mut conditions, INVALID_SPEC, false, "SpecValid", "", now);
    }

    let mut status = DIJobStatus {
        phase: Some(phase),
        conditions,
        observed_generation: job.metadata.generation,
        replicas: Some(facts.replicas as i32),
        restarts: Some(facts.restarts as i32),
        ..DIJobStatus::default()
    };
    if job.spec.is_task_job() {
        tasks::counts(&mut status, pods, facts);
    } else {
        role_counts(&mut status, job, pods);
    }
    status
}

/// The live pods the scheduler has found no place for, each with its message (for a gang:
/// "pod group is unschedulable, minCount (6) cannot be satisfied ..."), in name order.
fn unschedulable(pods: &[&Pod]) -> Vec<(String, String)> {
    let mut unplaced: Vec<(String, String)> = pods
        .iter()
        .filter(|p| !is_terminating(p))
        .filter_map(|p| {
            let conditions = p.status.as_ref()?.conditions.as_ref()?;
            let c = conditions.iter().find(|c| c.type_ == "PodScheduled" && c.status == "False")?;
            (c.reason.as_deref() == Some("Unschedulable"))
                .then(|| (p.name_any(), c.message.clone().unwrap_or_default()))
        })
        .collect();
    unplaced.sort();
    unplaced
}

/// A role job's conditions follow its coordinator.
fn role_phase_conditions(
    conditions: &mut Vec<DIJobCondition>,
    phase: Phase,
    reason: &str,
    message: &str,
    now: Timestamp,
) {
    set_condition(conditions, "Created", true, "JobCreated", "the job's coordinator is created", now);
    match phase {
        Phase::Running => set_condition(conditions, "Running", true, reason, message, now),
        Phase::Succeeded | Phase::Failed => {
            if conditions.iter().any(|c| c.type_ == "Running") {
                set_condition(conditions, "Running", false, "JobFinished", "the job has finished", now);
            }
            let kind = if phase == Phase::Succeeded { "Succeeded" } else { "Failed" };
            set_condition(conditions, kind, true, reason, message, now);
        }
        // A coordinator that ran and is coming up again: Running turns False, so its next start
        // is a new transition (what `lost` counts a coordinator's losses from).
        Phase::Created | Phase::Unknown => {
            if conditions.iter().any(|c| c.type_ == "Running" && c.status == "True") {
                set_condition(
                    conditions,
                    "Running",
                    false,
                    "CoordinatorNotRunning",
                    "the coordinator is not running",
                    now,
                );
            }
        }
        Phase::Pending | Phase::Starting | Phase::Restarting | Phase::Rescheduling => {}
    }
}

/// A role job's pod counts: per replica type, ready collectors and learners, ready pods.
fn role_counts(status: &mut DIJobStatus, job: &DIJob, pods: &[&Pod]) {
    let mut replica_status: BTreeMap<String, ReplicaStatus> = BTreeMap::new();
    for pod in pods {
        let Some(role) = role_of(pod) else { continue };
        // A pod that counts nothing (terminating) makes no entry: an all-zero entry is an empty
        // object, which server-side apply stores as null, and the schema refuses null.
        let (active, succeeded, failed) = match pod_phase(pod) {
            "Succeeded" => (0, 1, 0),
            "Failed" => (0, 0, 1),
            _ if is_active(pod) => (1, 0, 0),
            _ => continue,
        };
        let entry = replica_status.entry(role.replica_type().to_string()).or_default();
        entry.active += active;
        entry.succeeded += succeeded;
        entry.failed += failed;
    }

    status.replica_status = replica_status;
    status.collectors =
        job.spec.collector.as_ref().map(|_| format!("{}/{}", ready_collectors(pods), job.spec.collector_replicas()));
    if job.spec.collector.is_some() {
        let collectors = pods.iter().filter(|p| role_of(p) == Some(Role::Collector) && is_active(p)).count();
        status.collector_replicas = Some(collectors as i32);
        status.collector_selector = Some(collector_selector(&job.name_any()));
    }
    status.learners =
        job.spec.learner.as_ref().map(|_| format!("{}/{}", ready_learners(pods), job.spec.learner_replicas()));
    status.ready_replicas = Some(pods.iter().filter(|p| is_ready(p)).count() as i32);
    // The policy lets only this pod's replica endpoint scale the job: not a terminating one's,
    // nor a predecessor's of the same name (it is no pod of this job).
    let current = pods.iter().find(|p| role_of(p) == Some(Role::Coordinator) && !is_terminating(p));
    status.coordinator_uid = current.and_then(|p| p.metadata.uid.clone());
}

/// The label selector of job `name`'s collector pods, as the scale subresource gives it.
pub fn collector_selector(name: &str) -> String {
    format!("{}={name},{}={}", labels::JOB_NAME, labels::REPLICA_TYPE, Role::Collector.label())
}

fn ready_collectors(pods: &[&Pod]) -> usize {
    pods.iter().filter(|p| role_of(p) == Some(Role::Collector) && is_ready(p)).count()
}

/// Logic learners ready: single learners, and aggregators whose DDP learners are all ready.
fn ready_learners(pods: &[&Pod]) -> usize {
    let single = pods.iter().filter(|p| role_of(p) == Some(Role::Learner) && is_ready(p)).count();
    let aggregated = pods
        .iter()
        .filter(|p| role_of(p) == Some(Role::Aggregator) && is_ready(p))
        .filter(|agg| {
            let mut ddp =
                pods.iter().filter(|p| role_of(p) == Some(Role::DdpLearner) && index_of(p) == index_of(agg)).peekable();
            ddp.peek().is_some() && ddp.all(|p| is_ready(p))
        })
        .count();
    single + aggregated
}

/// When the job finished, from its terminal condition.
pub fn finished_at(job: &DIJob) -> Option<Timestamp> {
    let status = job.status.as_ref()?;
    let kind = match status.phase? {
        Phase::Succeeded => "Succeeded",
        Phase::Failed => "Failed",
        _ => return None,
    };
    status.conditions.iter().find(|c| c.type_ == kind && c.status == "True")?.last_transition_time.as_ref().map(|t| t.0)
}

#[cfg(test)]
mod tests {
    use di_api::contract::labels;
    use serde_json::json;

    use super::*;

    #[test]
    fn a_terminating_pod_counts_nothing_and_makes_no_entry() {
        let pod = |name: &str, phase: &str, terminating: bool| -> Pod {
            let deleted = terminating.then_some("2026-01-01T00:00:00Z");
            serde_json::from_value(json!({
                "metadata": {"name": name, "deletionTimestamp": deleted,
                             "labels": {labels::REPLICA_TYPE: if name.contains("coordinator") { "coordinator" } else { "collector" }}},
                "status": {"phase": phase},
            }))
            .unwrap()
        };
        let pods = [pod("job-coordinator", "Running", true), pod("job-collector-0", "Running", false)];
        let status = compute(&DIJob::default(), &pods.iter().collect::<Vec<_>>(), &Facts::default(), Timestamp::now());
        let types: Vec<&String> = status.replica_status.keys().collect();
        assert_eq!(types, ["Collector"], "{:?}", status.replica_status);
        assert_eq!(status.replica_status["Collector"].active, 1);
        assert_eq!(status.coordinator_uid, None, "a terminating coordinator is not the current one");
    }

    #[test]
    fn the_status_names_the_coordinator_that_runs_now() {
        let pod = |name: &str, uid: &str, role: &str, terminating: bool| -> Pod {
            let deleted = terminating.then_some("2026-01-01T00:00:00Z");
            serde_json::from_value(json!({
                "metadata": {"name": name, "uid": uid, "deletionTimestamp": deleted,
                             "labels": {labels::REPLICA_TYPE: role}},
                "status": {"phase": "Running"},
            }))
            .unwrap()
        };
        let pods = [
            pod("job-collector-0", "c0", "collector", false),
            pod("job-coordinator", "old", "coordinator", true),
            pod("job-coordinator", "new", "coordinator", false),
        ];
        let status = compute(&DIJob::default(), &pods.iter().collect::<Vec<_>>(), &Facts::default(), Timestamp::now());
        assert_eq!(status.coordinator_uid.as_deref(), Some("new"));
    }
}
