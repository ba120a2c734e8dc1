use serde_json::{Value, json};

use super::*;

fn view(value: Value) -> PodView {
    let mut pod: PodView = serde_json::from_value(value).unwrap();
    pod.slim();
    pod
}

/// Pod `n` of job `job`, at `resource_version`, with `status`.
fn pod_of(job: &str, n: usize, resource_version: &str, status: Value) -> PodView {
    view(json!({
        "metadata": {"name": format!("{job}-collector-{n}"), "namespace": "ns", "uid": format!("{job}-u{n}"),
                     "resourceVersion": resource_version,
                     "labels": {di_api::contract::labels::JOB_NAME: job}},
        "status": status,
    }))
}

fn pod(resource_version: &str, phase: &str) -> PodView {
    pod_of("job", 0, resource_version, json!({"phase": phase}))
}

fn ready() -> Value {
    json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]})
}

#[test]
fn only_a_changed_view_starts_a_pass() {
    let mut changes = PodChanges::default();
    assert_eq!(changes.trigger(&Event::Apply(pod("1", "Pending"))), Trigger::Now, "a new pod");
    assert_eq!(changes.trigger(&Event::Apply(pod("2", "Pending"))), Trigger::None, "bound: nothing a pass reads");
    assert_eq!(changes.trigger(&Event::Apply(pod("3", "Running"))), Trigger::Now, "running");
    assert_eq!(changes.trigger(&Event::Delete(pod("4", "Running"))), Trigger::Now, "gone");
    assert_eq!(changes.trigger(&Event::Apply(pod("5", "Running"))), Trigger::Now, "a pod of that UID seen anew");
}

#[test]
fn a_relist_starts_afresh() {
    let mut changes = PodChanges::default();
    assert_eq!(changes.trigger(&Event::Apply(pod("1", "Running"))), Trigger::Now);
    assert_eq!(changes.trigger(&Event::Init), Trigger::Now);
    assert_eq!(changes.trigger(&Event::InitApply(pod("1", "Running"))), Trigger::Now);
    assert_eq!(changes.trigger(&Event::InitDone), Trigger::Now);
    assert_eq!(changes.trigger(&Event::Apply(pod("2", "Running"))), Trigger::None, "as the list showed it");
}

#[test]
fn a_starting_jobs_progress_waits_until_its_last_pod_runs() {
    let starting = Starting::default();
    let mut changes = PodChanges::new(starting.clone());
    starting.set("ns", "job", Some(3));
    let apply = |changes: &mut PodChanges, n, rv, status| changes.trigger(&Event::Apply(pod_of("job", n, rv, status)));
    for n in 0..3 {
        assert_eq!(apply(&mut changes, n, "1", json!({"phase": "Pending"})), Trigger::Later, "pod {n} appears");
    }
    assert_eq!(apply(&mut changes, 0, "2", json!({"phase": "Running"})), Trigger::Later, "one of three runs");
    assert_eq!(apply(&mut changes, 0, "3", ready()), Trigger::Later, "and is ready");
    assert_eq!(apply(&mut changes, 1, "2", ready()), Trigger::Later, "two of three");
    assert!(!starting.arrived("ns", "job"), "not before its last pod runs");
    assert_eq!(apply(&mut changes, 2, "2", ready()), Trigger::Now, "the last one: the job may be running");
    assert!(starting.arrived("ns", "job"), "its pass goes first");
    starting.set("ns", "job", Some(3));
    assert!(starting.arrived("ns", "job"), "a pass that found them not all ready keeps it first");
    // Another job's pods, and pods of a job no pass called starting, never wait.
    assert_eq!(changes.trigger(&Event::Apply(pod_of("other", 0, "1", json!({"phase": "Pending"})))), Trigger::Now);
    starting.set("ns", "job", None);
    assert!(!starting.arrived("ns", "job"), "running: nothing to go first for");
    assert_eq!(apply(&mut changes, 3, "1", json!({"phase": "Pending"})), Trigger::Now, "the job runs");
    starting.set("ns", "job", Some(4));
    assert!(!starting.arrived("ns", "job"), "starting again, for more pods");
}

#[test]
fn what_is_not_a_step_up_starts_a_pass_at_once() {
    let starting = Starting::default();
    let mut changes = PodChanges::new(starting.clone());
    starting.set("ns", "job", Some(5));
    let mut apply = |n, rv, status| changes.trigger(&Event::Apply(pod_of("job", n, rv, status)));
    assert_eq!(apply(0, "1", ready()), Trigger::Later);
    assert_eq!(apply(0, "2", json!({"phase": "Running"})), Trigger::Now, "no longer ready");
    assert_eq!(apply(0, "3", json!({"phase": "Failed"})), Trigger::Now, "failed");
    assert_eq!(apply(1, "1", json!({"phase": "Succeeded"})), Trigger::Now, "ended");
    let unplaceable = json!({"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/1 nodes"}]});
    assert_eq!(apply(2, "1", unplaceable), Trigger::Now, "cannot be placed");
    let marked = view(json!({
        "metadata": {"name": "job-collector-3", "namespace": "ns", "uid": "job-u3", "resourceVersion": "1",
                     "deletionTimestamp": "2026-11-25T00:00:00Z",
                     "labels": {di_api::contract::labels::JOB_NAME: "job"}},
        "status": {"phase": "Running"},
    }));
    assert_eq!(changes.trigger(&Event::Apply(marked)), Trigger::Now, "on its way out");
}

#[test]
fn running_pods_are_counted_through_every_change() {
    let starting = Starting::default();
    let mut changes = PodChanges::new(starting.clone());
    starting.set("ns", "job", Some(2));
    let apply = |changes: &mut PodChanges, n, rv, status| changes.trigger(&Event::Apply(pod_of("job", n, rv, status)));
    assert_eq!(apply(&mut changes, 0, "1", ready()), Trigger::Later);
    assert_eq!(changes.trigger(&Event::Delete(pod_of("job", 0, "2", ready()))), Trigger::Now);
    assert_eq!(apply(&mut changes, 1, "1", ready()), Trigger::Later, "the deleted pod no longer counts");
    // A relist counts again from what it lists.
    changes.trigger(&Event::Init);
    changes.trigger(&Event::InitApply(pod_of("job", 1, "1", ready())));
    changes.trigger(&Event::InitDone);
    assert_eq!(apply(&mut changes, 2, "1", json!({"phase": "Pending"})), Trigger::Later);
    assert_eq!(apply(&mut changes, 2, "2", ready()), Trigger::Now, "two of two");
}

fn service(job: &str, n: usize, resource_version: &str, annotations: Value) -> ServiceView {
    let mut service: ServiceView = serde_json::from_value(json!({
        "metadata": {"name": format!("{job}-collector-{n}"), "namespace": "ns", "uid": format!("{job}-s{n}"),
                     "resourceVersion": resource_version, "annotations": annotations,
                     "labels": {di_api::contract::labels::JOB_NAME: job}},
    }))
    .unwrap();
    service.slim();
    service
}

#[test]
fn a_service_that_appears_while_its_job_starts_waits() {
    let starting = Starting::default();
    let mut changes = ServiceChanges::new(starting.clone());
    assert_eq!(changes.trigger(&Event::Apply(service("job", 0, "1", json!({})))), Trigger::Now, "not starting");
    starting.set("ns", "job", Some(3));
    assert_eq!(changes.trigger(&Event::Apply(service("job", 1, "1", json!({})))), Trigger::Later, "appears");
    assert_eq!(changes.trigger(&Event::Apply(service("job", 1, "2", json!({})))), Trigger::None, "unchanged");
    let marked = json!({di_api::contract::annotations::RESTARTS: "1"});
    assert_eq!(changes.trigger(&Event::Apply(service("job", 1, "3", marked))), Trigger::Now, "a restart mark");
    assert_eq!(changes.trigger(&Event::Delete(service("job", 1, "4", json!({})))), Trigger::Now, "gone");
    assert_eq!(changes.trigger(&Event::Apply(service("other", 0, "1", json!({})))), Trigger::Now, "another job");
}
