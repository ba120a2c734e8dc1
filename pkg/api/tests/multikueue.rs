//! A job Kueue's MultiKueue runs on a worker cluster: who may run a job, what a dispatched job
//! must have, and what of it may change on the manager.

mod common;

use common::{errors, update_errors, valid_job};
use di_api::DIJob;
use di_api::contract::kueue::{MULTIKUEUE, ORCHESTRATOR, PREBUILT_WORKLOAD, QUEUE_NAME};
use di_api::validation::validate_dijob_metadata_update;
use kube::ResourceExt;

fn dispatched() -> DIJob {
    let mut job = valid_job();
    job.labels_mut().insert(QUEUE_NAME.into(), "team".into());
    job.spec.managed_by = Some(MULTIKUEUE.into());
    job
}

fn paths(job: DIJob) -> Vec<String> {
    errors(job).into_iter().map(|(path, _)| path).collect()
}

#[test]
fn managed_by_names_the_orchestrator_or_multikueue() {
    assert!(paths(dispatched()).is_empty(), "{:?}", errors(dispatched()));
    let mut ours = valid_job();
    ours.spec.managed_by = Some(ORCHESTRATOR.into());
    assert!(paths(ours).is_empty());
    let mut other = valid_job();
    other.spec.managed_by = Some("example.com/elsewhere".into());
    let said = errors(other);
    assert_eq!(said.len(), 1, "{said:?}");
    assert_eq!(said[0].0, "spec.managedBy");
    assert!(said[0].1.contains(MULTIKUEUE) && said[0].1.contains(ORCHESTRATOR), "names the values: {}", said[0].1);
}

#[test]
fn a_dispatched_job_has_a_queue_and_one_workload() {
    let mut no_queue = dispatched();
    no_queue.labels_mut().remove(QUEUE_NAME);
    assert_eq!(paths(no_queue), [format!("metadata.labels[{QUEUE_NAME}]")]);

    let mut split = dispatched();
    split.spec.collector.as_mut().unwrap().min_replicas = Some(1);
    assert_eq!(paths(split), ["spec.collector.minReplicas"]);
    // Its copy on a worker, managedBy removed, keeps to one Workload too.
    let mut copy = valid_job();
    copy.labels_mut().insert(QUEUE_NAME.into(), "team".into());
    copy.annotations_mut().insert(PREBUILT_WORKLOAD.into(), "dijob-j-1234abcd".into());
    copy.spec.collector.as_mut().unwrap().min_replicas = Some(1);
    assert_eq!(paths(copy), ["spec.collector.minReplicas"]);
}

#[test]
fn on_the_manager_only_suspend_changes_and_no_one_else_takes_the_job() {
    let old = dispatched();
    let mut suspended = old.clone();
    suspended.spec.suspend = Some(true);
    assert!(update_errors(old.clone(), suspended).is_empty());

    let mut scaled = old.clone();
    scaled.spec.collector.as_mut().unwrap().replicas = Some(7);
    let said = update_errors(old.clone(), scaled);
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].contains("worker cluster"), "{}", said[0]);

    let mut taken = old.clone();
    taken.spec.managed_by = None;
    assert!(update_errors(old.clone(), taken).iter().any(|e| e.contains("spec.managedBy")));
    let mut given = valid_job();
    given.labels_mut().insert(QUEUE_NAME.into(), "team".into());
    assert!(update_errors(given, old.clone()).iter().any(|e| e.contains("spec.managedBy")));
    // Unset and the orchestrator's own name are one and the same.
    let mut named = valid_job();
    named.spec.managed_by = Some(ORCHESTRATOR.into());
    assert!(update_errors(valid_job(), named).is_empty());

    let mut unqueued = old.clone();
    unqueued.labels_mut().remove(QUEUE_NAME);
    assert!(validate_dijob_metadata_update(&old, &unqueued).is_err(), "its queue label stays");
    let mut moved = old.clone();
    moved.labels_mut().insert(QUEUE_NAME.into(), "other".into());
    assert!(validate_dijob_metadata_update(&old, &moved).is_err(), "nor moves, even before it runs");
}

/// A worker's copy keeps the Workload MultiKueue made: its annotation, its queue, and it is
/// suspended on the manager, not here; no job gains or loses the annotation.
#[test]
fn a_copy_on_a_worker_keeps_to_the_workload_multikueue_made() {
    let mut copy = valid_job();
    copy.labels_mut().insert(QUEUE_NAME.into(), "team".into());
    copy.annotations_mut().insert(PREBUILT_WORKLOAD.into(), "dijob-j-1234abcd".into());
    let mut scaled = copy.clone();
    scaled.spec.collector.as_mut().unwrap().replicas = Some(5);
    assert!(update_errors(copy.clone(), scaled).is_empty(), "its coordinator scales it here");
    let mut suspended = copy.clone();
    suspended.spec.suspend = Some(true);
    assert!(update_errors(copy.clone(), suspended).iter().any(|e| e.contains("spec.suspend") && e.contains("manager")));
    let mut unqueued = copy.clone();
    unqueued.labels_mut().remove(QUEUE_NAME);
    assert!(validate_dijob_metadata_update(&copy, &unqueued).is_err());
    let mut renamed = copy.clone();
    renamed.annotations_mut().insert(PREBUILT_WORKLOAD.into(), "another".into());
    assert!(validate_dijob_metadata_update(&copy, &renamed).is_err());
    let mut gained = valid_job();
    let before = gained.clone();
    gained.annotations_mut().insert(PREBUILT_WORKLOAD.into(), "dijob-j-1234abcd".into());
    assert!(validate_dijob_metadata_update(&before, &gained).is_err(), "an ordinary job never gains it");
    let mut both = dispatched();
    both.annotations_mut().insert(PREBUILT_WORKLOAD.into(), "dijob-j-1234abcd".into());
    assert_eq!(paths(both), [format!("metadata.annotations[{PREBUILT_WORKLOAD}]")]);
}
