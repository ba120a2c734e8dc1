//! The moments of a job's life the orchestrator times, read from the status it writes: the first
//! time the job runs (`time_to_running_seconds`) and its admission from a Kueue queue
//! (`queue_wait_seconds`); and how long the jobs held in a queue now have waited (`gauges`).

use di_api::contract::kueue::QUEUED;
use di_api::{DIJob, DIJobCondition, DIJobStatus, Phase};
use k8s_openapi::jiff::Timestamp;

use crate::metrics::Metrics;
use crate::status::SUSPENDED;

fn condition<'a>(status: Option<&'a DIJobStatus>, type_: &str) -> Option<&'a DIJobCondition> {
    status?.conditions.iter().find(|c| c.type_ == type_)
}

fn is(condition: Option<&DIJobCondition>, status: &str) -> bool {
    condition.is_some_and(|c| c.status == status)
}

fn turned_at(condition: Option<&DIJobCondition>) -> Option<Timestamp> {
    condition?.last_transition_time.as_ref().map(|t| t.0)
}

/// Seconds from `start` to `end`, never below zero (a clock that stepped back).
pub fn seconds(start: Timestamp, end: Timestamp) -> f64 {
    end.duration_since(start).as_secs_f64().max(0.0)
}

/// Whether `new`, written over `old`, says the job runs for the first time. A job that has run
/// has a `Running` condition from then on (False while its coordinator or pods come up again,
/// suspended or not), so a restart, a resumption or another replica taking over never counts.
pub fn runs_first(old: Option<&DIJobStatus>, new: &DIJobStatus) -> bool {
    new.phase == Some(Phase::Running)
        && old.and_then(|s| s.phase) != Some(Phase::Running)
        && condition(old, "Running").is_none()
}

fn says_admitted(condition: Option<&DIJobCondition>) -> bool {
    is(condition, "False") && condition.and_then(|c| c.reason.as_deref()) == Some("Admitted")
}

/// Whether `new`, written over `old`, says Kueue admitted the job: written before its pods are
/// created (`order::admitted_now`), and once per admission, a readmission after an eviction too.
pub fn admitted(old: Option<&DIJobStatus>, new: &DIJobStatus) -> bool {
    says_admitted(condition(Some(new), QUEUED)) && !says_admitted(condition(old, QUEUED))
}

/// When the job's current wait in its queue began, by `status`: the latest of its creation, its
/// `Queued` condition turning True (queued, or evicted back into the queue) and its resumption
/// (a suspended job waits for its user, not for quota).
fn wait_began(status: Option<&DIJobStatus>, created: Option<Timestamp>) -> Option<Timestamp> {
    let queued = condition(status, QUEUED).filter(|c| c.status == "True");
    let resumed = condition(status, SUSPENDED).filter(|c| c.status == "False");
    [created, turned_at(queued), turned_at(resumed)].into_iter().flatten().max()
}

/// Since when a job whose status is `status` has been held in its queue; `None` unless it is held
/// now, not suspended and not finished.
pub fn queued_since(status: Option<&DIJobStatus>, created: Option<Timestamp>) -> Option<Timestamp> {
    let finished = status.and_then(|s| s.phase).is_some_and(Phase::is_finished);
    let held = is(condition(status, QUEUED), "True") && !is(condition(status, SUSPENDED), "True");
    (held && !finished).then(|| wait_began(status, created)).flatten()
}

/// Observes what writing `new` over the job's status `old` marks, at `now`.
pub fn observe(metrics: &Metrics, job: &DIJob, new: &DIJobStatus, now: Timestamp) {
    let old = job.status.as_ref();
    let created = job.metadata.creation_timestamp.as_ref().map(|t| t.0);
    if runs_first(old, new)
        && let Some(created) = created
    {
        metrics.time_to_running.observe(seconds(created, now));
    }
    if admitted(old, new)
        && let Some(began) = wait_began(old, created)
    {
        metrics.queue_wait.observe(seconds(began, now));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn status(value: serde_json::Value) -> DIJobStatus {
        serde_json::from_value(value).unwrap()
    }

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn a_job_runs_for_the_first_time_once() {
        let created = status(json!({"phase": "Created", "conditions": [{"type": "Created", "status": "True"}]}));
        let running = status(json!({"phase": "Running", "conditions": [{"type": "Running", "status": "True"}]}));
        assert!(runs_first(None, &running), "running at its first status");
        assert!(runs_first(Some(&created), &running));
        assert!(!runs_first(Some(&running), &running), "not again on the next pass");
        // Its coordinator came up again: Running is False, and the job has run before.
        let restarting = status(json!({"phase": "Created", "conditions": [{"type": "Running", "status": "False"}]}));
        assert!(!runs_first(Some(&restarting), &running));
        assert!(!runs_first(Some(&created), &created));
    }

    #[test]
    fn an_admission_is_counted_from_the_latest_start_of_its_wait() {
        let held = |since: &str| {
            status(json!({"phase": "Created", "conditions": [
                {"type": "Queued", "status": "True", "reason": "Pending", "lastTransitionTime": since},
                {"type": "Suspended", "status": "False", "reason": "JobResumed", "lastTransitionTime": "2026-01-01T10:30:00Z"},
            ]}))
        };
        let admitted_now = status(json!({"phase": "Created", "conditions": [
            {"type": "Queued", "status": "False", "reason": "Admitted", "lastTransitionTime": "2026-01-01T11:00:00Z"},
        ]}));
        let created = Some(at("2026-01-01T09:00:00Z"));
        assert!(admitted(Some(&held("2026-01-01T10:00:00Z")), &admitted_now));
        assert!(admitted(None, &admitted_now), "a first status that says admitted");
        assert!(!admitted(Some(&admitted_now), &admitted_now), "once");
        // Resumed at 10:30, after it was queued at 10:00: the wait for quota began then.
        assert_eq!(wait_began(Some(&held("2026-01-01T10:00:00Z")), created), Some(at("2026-01-01T10:30:00Z")));
        // Evicted back into the queue at 10:45.
        assert_eq!(wait_began(Some(&held("2026-01-01T10:45:00Z")), created), Some(at("2026-01-01T10:45:00Z")));
        assert_eq!(wait_began(None, created), created, "never written: from its creation");
        let not_admitted =
            status(json!({"conditions": [{"type": "Queued", "status": "False", "reason": "NotQueued"}]}));
        assert!(!admitted(Some(&held("2026-01-01T10:00:00Z")), &not_admitted), "taken out of its queue");
    }

    #[test]
    fn only_a_job_held_now_counts_as_queued() {
        let created = Some(at("2026-01-01T09:00:00Z"));
        let with = |conditions: serde_json::Value| status(json!({"phase": "Created", "conditions": conditions}));
        let queued = json!({"type": "Queued", "status": "True", "lastTransitionTime": "2026-01-01T09:00:05Z"});
        assert_eq!(queued_since(Some(&with(json!([queued]))), created), Some(at("2026-01-01T09:00:05Z")));
        let suspended = json!({"type": "Suspended", "status": "True"});
        assert_eq!(queued_since(Some(&with(json!([queued, suspended]))), created), None, "suspended");
        let admitted = json!({"type": "Queued", "status": "False", "reason": "Admitted"});
        assert_eq!(queued_since(Some(&with(json!([admitted]))), created), None);
        assert_eq!(queued_since(None, created), None, "in no queue");
        let mut finished = with(json!([queued]));
        finished.phase = Some(Phase::Failed);
        assert_eq!(queued_since(Some(&finished), created), None);
    }

    #[test]
    fn seconds_never_go_below_zero() {
        assert_eq!(seconds(at("2026-01-01T09:00:00Z"), at("2026-01-01T09:01:30Z")), 90.0);
        assert_eq!(seconds(at("2026-01-01T09:01:30Z"), at("2026-01-01T09:00:00Z")), 0.0);
    }
}
