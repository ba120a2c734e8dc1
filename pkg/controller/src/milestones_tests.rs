//! Passes as they time a job's way up (`milestones`): its first Running, once, and not a
//! restart's.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::SignedDuration;

use super::fixtures::*;
use super::*;

/// The pass's count of first runs and their seconds, as `/metrics` shows them.
fn first_runs(ctx: &Context) -> (String, f64) {
    let text = ctx.metrics.encode();
    let value = |name: &str| text.lines().find_map(|l| l.strip_prefix(name)).map(|v| v.trim().to_owned());
    let count = value("di_orchestrator_time_to_running_seconds_count").unwrap_or_default();
    let sum = value("di_orchestrator_time_to_running_seconds_sum").and_then(|v| v.parse().ok()).unwrap_or(0.0);
    (count, sum)
}

#[tokio::test]
async fn a_job_is_timed_from_its_creation_to_its_first_running_once() {
    let mut job = job(1, "Running", Some(Phase::Created));
    job.metadata.creation_timestamp = Some(Time(Timestamp::now() - SignedDuration::from_secs(30)));
    let (pods, services) = world(&job, |_| "Running");
    let (client, recorded) = fake_api_server(&job);
    let ctx = context(client, pods.clone(), services.clone());
    reconcile(view_of(&job), ctx.clone()).await.unwrap();
    let writes = status_writes(&recorded);
    assert_eq!(writes[0]["status"]["phase"], "Running");
    let (count, seconds) = first_runs(&ctx);
    assert_eq!(count, "1");
    assert!((30.0..60.0).contains(&seconds), "from its creation 30 s ago: {seconds}");

    // Written Running: the next pass of the same job adds nothing.
    job.status = Some(serde_json::from_value(writes[0]["status"].clone()).unwrap());
    let (client, _) = fake_api_server(&job);
    let next = context(client, pods, services);
    next.metrics.time_to_running.observe(0.0);
    reconcile(view_of(&job), Arc::clone(&next)).await.unwrap();
    assert_eq!(first_runs(&next).0, "1", "only the one observed by hand");
}

#[tokio::test]
async fn a_coordinator_running_again_is_no_first_run() {
    let mut job = job(1, "Running", None);
    let at = "2026-01-01T00:00:00Z";
    // It ran, and its coordinator came up again: Running is False.
    job.status = Some(
        serde_json::from_value(serde_json::json!({"phase": "Created", "conditions": [
            {"type": "Created", "status": "True", "reason": "JobCreated", "lastTransitionTime": at},
            {"type": "Running", "status": "False", "reason": "CoordinatorNotRunning", "lastTransitionTime": at},
        ]}))
        .unwrap(),
    );
    let (pods, services) = world(&job, |_| "Running");
    let (client, recorded) = fake_api_server(&job);
    let ctx = context(client, pods, services);
    reconcile(view_of(&job), ctx.clone()).await.unwrap();
    assert_eq!(status_writes(&recorded)[0]["status"]["phase"], "Running");
    assert_eq!(first_runs(&ctx).0, "0");
}
