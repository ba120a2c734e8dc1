//! A role job's coordinator that goes away or ends at an awkward moment: lost while the job runs,
//! ended as the job is suspended, ended while the job is held on an invalid spec.

mod common;

use std::time::Duration;

use common::{created, decide, deleted, job, now, with_status, world_of};
use di_api::{DIJob, DIJobStatus, Phase};
use di_core::desired::Settings;
use di_core::plan::{Action, Why, World};
use di_core::restarts::Mark;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use serde_json::json;

#[test]
fn suspend_never_deletes_a_coordinator_that_ended_before_its_end_is_recorded() {
    // The coordinator succeeded, and the job was suspended before any pass recorded it.
    let suspended = with_status(
        job(2, 0, json!({"suspend": true})),
        DIJobStatus { phase: Some(Phase::Running), ..Default::default() },
    );
    let (pods, services) =
        world_of(&suspended, |name| Some(if name == "job-coordinator" { "Succeeded" } else { "Running" }));
    let plan = decide(&suspended, &pods, &services, now());
    assert_eq!(plan.status.phase, Some(Phase::Succeeded));
    // The cleanup of a finished job (cleanPodPolicy Running): the running collectors go, the
    // coordinator that shows the outcome stays.
    let gone: Vec<String> = deleted(&plan.actions).into_iter().map(|(name, _)| name).collect();
    assert_eq!(gone, ["job-collector-0", "job-collector-1"]);
    assert!(deleted(&plan.actions).iter().all(|(_, why)| *why == Why::Cleanup));
}

#[test]
fn a_held_job_still_records_its_coordinators_end_and_is_cleaned_up() {
    // Edited into an invalid spec without the webhook: the job is held, but its coordinator ended.
    let held = with_status(
        job(1, 0, json!({"ttlSecondsAfterFinished": 30})),
        DIJobStatus { phase: Some(Phase::Running), ..Default::default() },
    );
    let (pods, services) = world_of(&held, |name| Some(if name == "job-coordinator" { "Failed" } else { "Running" }));
    let world = common::world(&pods, &services, now());
    let plan = di_core::plan::finish_held(
        &held,
        &world,
        &Settings { identity: di_core::desired::identity::Identity::PerJob, ..Settings::default() },
    )
    .expect("the coordinator's end is recorded");
    assert_eq!(plan.status.phase, Some(Phase::Failed));
    let gone: Vec<String> = deleted(&plan.actions).into_iter().map(|(name, _)| name).collect();
    assert_eq!(gone, ["job-collector-0"], "cleanPodPolicy Running: the failed coordinator stays for its logs");
    assert!(plan.actions.contains(&Action::DeleteRbac));
    assert_eq!(plan.requeue_after, Some(Duration::from_secs(30)), "its TTL counts");

    // While the coordinator runs, the job is held as it is.
    let (pods, _) = world_of(&held, |_| Some("Running"));
    let world = World { pods: pods.iter().collect(), ..world };
    assert!(
        di_core::plan::finish_held(
            &held,
            &world,
            &Settings { identity: di_core::desired::identity::Identity::PerJob, ..Settings::default() }
        )
        .is_none()
    );
}

/// The services, the coordinator's carrying `mark`, as the pass that wrote it left it.
fn coordinator_marked(services: &[Service], mark: &Mark) -> Vec<Service> {
    let mut services = services.to_vec();
    for service in services.iter_mut().filter(|s| s.metadata.name.as_deref() == Some("job-coordinator")) {
        service.annotations_mut().extend(mark.annotations());
    }
    services
}

#[test]
fn a_coordinator_that_vanished_is_counted_against_the_limit_and_shown() {
    let mut running = with_status(
        job(1, 0, json!({"restartLimit": 1})),
        DIJobStatus { phase: Some(Phase::Running), ..Default::default() },
    );
    running.metadata.resource_version = Some("41".into());
    // Preempted: its pod is gone; its Service and the collector are there.
    let (pods, services) = world_of(&running, |name| (name != "job-coordinator").then_some("Running"));
    let plan = decide(&running, &pods, &services, now());
    let mark = plan.actions.iter().find_map(|a| match a {
        Action::MarkRestart { service, mark } if service == "job-coordinator" => Some(mark.clone()),
        _ => None,
    });
    let mark = mark.expect("the loss is counted on the coordinator's Service");
    assert_eq!((mark.restarts, mark.failed_uid.as_str()), (1, "gone-at-41"));
    assert_eq!(created(&plan.actions), vec!["job-coordinator"], "then run again");

    // Counted once: the Service names this loss already.
    let counted = coordinator_marked(&services, &mark);
    let again = decide(&running, &pods, &counted, now());
    assert!(!again.actions.iter().any(|a| matches!(a, Action::MarkRestart { .. })), "{:?}", again.actions);

    // A second loss is past restartLimit 1: the job fails, saying why, and nothing runs again.
    running.metadata.resource_version = Some("57".into());
    let past = decide(&running, &pods, &counted, now());
    assert_eq!(past.status.phase, Some(Phase::Failed));
    let failed = past.status.conditions.iter().find(|c| c.type_ == "Failed").unwrap();
    assert_eq!(failed.reason.as_deref(), Some("CoordinatorLost"));
    assert!(failed.message.as_deref().unwrap().contains("2 time(s); spec.restartLimit is 1"), "{failed:?}");
    assert!(created(&past.actions).is_empty());
}

#[test]
fn one_loss_of_the_coordinator_counts_once_seen_terminating_then_gone() {
    let running_at = |at: Timestamp| {
        let mut status = DIJobStatus { phase: Some(Phase::Running), ..Default::default() };
        di_core::status::set_condition(&mut status.conditions, "Running", true, "CoordinatorRunning", "", at);
        let mut job = with_status(job(1, 0, json!({})), status);
        job.metadata.resource_version = Some("99".into());
        job
    };
    let (pods, services) = world_of(&running_at(now()), |name| (name != "job-coordinator").then_some("Running"));
    // Counted when it was seen terminating, under its pod's UID, after it started running.
    let counted_at = now() + SignedDuration::from_secs(5);
    let mark = Mark { service_uid: None, restarts: 1, failed_uid: "old-pod-uid".into(), restart_after: counted_at };
    let marked = coordinator_marked(&services, &mark);
    let marks =
        |plan: &di_core::plan::Plan| plan.actions.iter().filter(|a| matches!(a, Action::MarkRestart { .. })).count();
    // Gone now, the job edited meanwhile: the same loss, not a second one.
    let gone = decide(&running_at(now()), &pods, &marked, now() + SignedDuration::from_secs(6));
    assert_eq!(marks(&gone), 0, "{:?}", gone.actions);
    // Once it has run again (Running since after the count), a loss is a new one.
    let later = now() + SignedDuration::from_secs(60);
    let again = decide(&running_at(later), &pods, &marked, later);
    assert_eq!(marks(&again), 1, "{:?}", again.actions);
}

/// `pod` ended by its kubelet's eviction under node pressure, as the kubelet reports it.
fn evicted(mut pod: Pod) -> Pod {
    pod.status = Some(
        serde_json::from_value(json!({"phase": "Failed", "reason": "Evicted",
            "message": "The node was low on resource: memory.",
            "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet"}]}))
        .unwrap(),
    );
    pod
}

/// A running job of `collectors` with `restartLimit` `limit`, its pods running but `pod`, which
/// its kubelet evicted.
fn running_with_evicted(collectors: i32, limit: i32, pod: &str) -> (DIJob, Vec<Pod>, Vec<Service>) {
    let running = with_status(
        job(collectors, 0, json!({"restartLimit": limit})),
        DIJobStatus { phase: Some(Phase::Running), ..Default::default() },
    );
    let (mut pods, services) = world_of(&running, |_| Some("Running"));
    for p in pods.iter_mut().filter(|p| p.name_any() == pod) {
        *p = evicted(p.clone());
    }
    (running, pods, services)
}

#[test]
fn a_coordinator_its_kubelet_evicted_is_a_counted_restart_not_the_jobs_failure() {
    let (running, pods, services) = running_with_evicted(1, 1, "job-coordinator");
    let plan = decide(&running, &pods, &services, now());
    assert_ne!(plan.status.phase, Some(Phase::Failed), "{:?}", plan.status);
    let mark = plan.actions.iter().find_map(|a| match a {
        Action::MarkRestart { service, mark } if service == "job-coordinator" => Some(mark.clone()),
        _ => None,
    });
    let mark = mark.expect("the eviction is counted on the coordinator's Service");
    assert_eq!((mark.restarts, mark.failed_uid.as_str()), (1, "uid-job-coordinator"));
    assert_eq!(deleted(&plan.actions), [("job-coordinator".to_owned(), Why::Disrupted)], "then run again");

    // Against its limit like any loss: a second one past restartLimit 1 fails the job.
    let counted = coordinator_marked(&services, &Mark { failed_uid: "an-earlier-loss".into(), ..mark });
    let past = decide(&running, &pods, &counted, now() + SignedDuration::from_secs(60));
    assert_eq!(past.status.phase, Some(Phase::Failed));
    let failed = past.status.conditions.iter().find(|c| c.type_ == "Failed").unwrap();
    assert_eq!(failed.reason.as_deref(), Some("CoordinatorLost"), "{failed:?}");
}

#[test]
fn a_replica_a_disruption_ended_is_replaced_without_counting_against_the_limit() {
    let (running, pods, services) = running_with_evicted(2, 0, "job-collector-1");
    let plan = decide(&running, &pods, &services, now());
    assert_eq!(plan.status.phase, Some(Phase::Running));
    assert_eq!(deleted(&plan.actions), [("job-collector-1".to_owned(), Why::Disrupted)]);
    assert!(!plan.actions.iter().any(|a| matches!(a, Action::MarkRestart { .. })), "{:?}", plan.actions);
    let over = plan.status.conditions.iter().find(|c| c.type_ == "RestartLimitExceeded" && c.status == "True");
    assert!(over.is_none(), "{over:?}");
    // A failure of its own, by contrast, is past restartLimit 0.
    let (mut pods, services) = world_of(&running, |_| Some("Running"));
    for pod in pods.iter_mut().filter(|p| p.name_any() == "job-collector-1") {
        *pod = common::observed(pod.clone(), "Failed");
    }
    let plan = decide(&running, &pods, &services, now());
    assert!(deleted(&plan.actions).is_empty(), "kept, past its limit: {:?}", plan.actions);
}
