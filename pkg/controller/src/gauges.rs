//! The gauges read from the reconciler's own cache of DIJobs every few seconds, so a scrape costs
//! no pass: jobs by phase, jobs left alone, and the jobs held in a Kueue queue now.

use std::sync::Arc;
use std::time::Duration;

use di_api::Phase;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::Store;

use crate::metrics::{Metrics, PhaseLabel};
use crate::milestones::{queued_since, seconds};
use crate::view::JobView;

/// What the gauges show, counted from the cached jobs at `now`.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Counts {
    pub by_phase: Vec<(Phase, i64)>,
    pub left_alone: i64,
    pub queued: i64,
    /// Seconds the job held longest in a queue has waited.
    pub longest_wait: i64,
}

pub(crate) fn count(jobs: &[Arc<JobView>], now: Timestamp) -> Counts {
    let phase = |j: &JobView| j.status.as_ref().and_then(|s| s.phase).unwrap_or(Phase::Created);
    // Every phase, so that their counts add up to every job cached.
    let by_phase = Phase::ALL.iter().map(|&p| (p, jobs.iter().filter(|j| phase(j) == p).count() as i64)).collect();
    let left_alone = jobs.iter().filter(|j| j.left_alone().is_some()).count() as i64;
    let waits: Vec<f64> = jobs
        .iter()
        .filter(|j| j.left_alone().is_none())
        .filter_map(|j| queued_since(j.status.as_ref(), j.metadata.creation_timestamp.as_ref().map(|t| t.0)))
        .map(|since| seconds(since, now))
        .collect();
    let longest_wait = waits.iter().copied().fold(0.0, f64::max) as i64;
    Counts { by_phase, left_alone, queued: waits.len() as i64, longest_wait }
}

/// Keeps the gauges current while the reconciler runs.
pub(crate) async fn keep_current(jobs: Store<JobView>, metrics: Arc<Metrics>) {
    // Not from a cache that is still being listed: that would say 0 jobs for a moment.
    if jobs.wait_until_ready().await.is_err() {
        return;
    }
    loop {
        let counts = count(&jobs.state(), Timestamp::now());
        for (phase, n) in counts.by_phase {
            metrics.jobs.get_or_create(&PhaseLabel { phase: format!("{phase:?}") }).set(n);
        }
        metrics.jobs_left_alone.set(counts.left_alone);
        metrics.jobs_queued.set(counts.queued);
        metrics.queue_longest_wait.set(counts.longest_wait);
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn job(status: serde_json::Value) -> Arc<JobView> {
        let job = json!({
            "metadata": {"name": "j", "namespace": "a", "creationTimestamp": "2026-01-01T09:00:00Z",
                "managedFields": [{"manager": "di-orchestrator", "operation": "Apply", "subresource": "status"}]},
            "spec": {},
            "status": status,
        });
        Arc::new(serde_json::from_value(job).unwrap())
    }

    #[test]
    fn counts_every_phase_and_the_jobs_waiting_in_queues() {
        let queued = |since: &str| {
            job(json!({"phase": "Created", "conditions": [
                {"type": "Queued", "status": "True", "reason": "Pending", "lastTransitionTime": since}]}))
        };
        let jobs = vec![
            queued("2026-01-01T09:00:10Z"),
            queued("2026-01-01T09:30:00Z"),
            job(json!({"phase": "Running"})),
            job(json!({"phase": "Pending"})),
            job(json!({"phase": "Starting"})),
        ];
        let counts = count(&jobs, "2026-01-01T10:00:00Z".parse().unwrap());
        let of = |p: Phase| counts.by_phase.iter().find(|(q, _)| *q == p).map(|(_, n)| *n);
        assert_eq!((of(Phase::Created), of(Phase::Running)), (Some(2), Some(1)));
        assert_eq!((of(Phase::Pending), of(Phase::Starting)), (Some(1), Some(1)), "task jobs' phases too");
        assert_eq!(counts.by_phase.iter().map(|(_, n)| n).sum::<i64>(), 5);
        assert_eq!((counts.queued, counts.longest_wait), (2, 3590));
        assert_eq!(count(&[], Timestamp::now()).longest_wait, 0);
    }
}
