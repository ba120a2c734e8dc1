//! Jobs MultiKueue runs on worker clusters: on the manager only the Workload, made, activated
//! and given back after an eviction; on a worker the copy adopts the Workload MultiKueue made.

mod common;
mod queued;

use common::{created, now, world};
use di_api::Phase;
use di_api::contract::kueue::{MULTIKUEUE, PREBUILT_WORKLOAD};
use di_core::desired::Settings;
use di_core::plan::Action;
use di_core::queue::multikueue::{cluster, dispatch, made_for, owned_by};
use di_core::queue::{Queue, workload_name};
use kube::ResourceExt;
use queued::{admitted, decide_in, kueue, queued_job};
use serde_json::json;

fn dispatched_job() -> di_api::DIJob {
    let mut job = queued_job(2);
    job.spec.managed_by = Some(MULTIKUEUE.into());
    job
}

fn dispatched(job: &di_api::DIJob, queue: Queue) -> di_core::queue::multikueue::Dispatch {
    let mut world = world(&[], &[], now());
    world.queue = Some(queue);
    dispatch(job, &world, &Settings::default()).unwrap()
}

#[test]
fn on_the_manager_a_dispatched_job_is_its_workload_and_nothing_else() {
    let job = dispatched_job();
    assert!(job.dispatched());
    let made = dispatched(&job, kueue(None));
    let [Action::CreateWorkload(w)] = &made.actions[..] else { panic!("{:?}", made.actions) };
    assert_eq!(w["metadata"]["ownerReferences"][0]["uid"], "job-uid", "MultiKueue finds the job by it");
    assert_eq!(w["metadata"]["ownerReferences"][0]["apiVersion"], "diengine.opendilab.org/v2alpha1");
    assert_eq!(w["spec"]["queueName"], "team");

    // Admitted, on a worker or not: no pod, no Service, no status of its own.
    let mut on_worker = admitted(&job);
    on_worker["status"]["clusterName"] = json!("worker-1");
    let running = dispatched(&job, kueue(Some(on_worker.clone())));
    assert!(running.actions.is_empty(), "{:?}", running.actions);
    assert_eq!(cluster(&on_worker), Some("worker-1"));

    // Finished there (the status MultiKueue copied): no Workload made again once Kueue drops it.
    let mut done = job.clone();
    done.status = Some(di_api::DIJobStatus { phase: Some(Phase::Succeeded), ..Default::default() });
    assert!(dispatched(&done, kueue(None)).actions.is_empty());
}

#[test]
fn suspended_on_the_manager_its_workload_is_deactivated_and_its_quota_given_back() {
    let mut job = dispatched_job();
    job.spec.suspend = Some(true);
    let mut running = admitted(&job);
    running["spec"]["active"] = json!(true);
    let made = dispatched(&job, kueue(Some(running)));
    assert!(
        made.actions.iter().any(|a| matches!(a, Action::SetWorkloadActive { active: false, .. })),
        "{:?}",
        made.actions
    );
    // Evicted (so, or sent back by a worker): no pod to wait for, the quota goes back at once.
    let mut evicted = admitted(&job);
    evicted["spec"]["active"] = json!(false);
    let conditions = evicted["status"]["conditions"].as_array_mut().unwrap();
    conditions.push(json!({"type": "Evicted", "status": "True", "reason": "AdmissionCheck",
        "message": "Workload evicted on worker cluster", "lastTransitionTime": "2026-11-22T09:05:00Z"}));
    let acked = dispatched(&job, kueue(Some(evicted)));
    let written = acked.actions.iter().find_map(|a| match a {
        Action::WriteWorkloadStatus(w) => Some(w["status"].clone()),
        _ => None,
    });
    let written = written.expect("the admission given back");
    assert!(written["admission"].is_null());
    let reserved = written["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "QuotaReserved").unwrap();
    assert_eq!(reserved["status"], "False");
}

#[test]
fn without_kueue_a_dispatched_job_says_why_as_an_event() {
    let made = dispatched(&dispatched_job(), Queue::NoKueue);
    assert!(made.actions.is_empty());
    assert!(made.note.unwrap().contains("serves no Kueue Workloads"));
}

/// The copy MultiKueue made on a worker: the manager's spec without managedBy, the annotation
/// naming the Workload it made.
fn worker_copy() -> di_api::DIJob {
    let mut job = queued_job(2);
    job.annotations_mut().insert(PREBUILT_WORKLOAD.into(), "dijob-j-managerx".into());
    job
}

#[test]
fn on_a_worker_the_copy_adopts_the_workload_multikueue_made_and_runs_as_admitted() {
    let job = worker_copy();
    assert_eq!(workload_name(&job), "dijob-j-managerx");
    // MultiKueue's copy: no owner; the manager's job-uid label gone.
    let mut prebuilt = admitted(&job);
    prebuilt["metadata"]["name"] = json!("dijob-j-managerx");
    prebuilt["metadata"]["ownerReferences"] = json!(null);
    prebuilt["metadata"]["labels"]["kueue.x-k8s.io/multikueue-origin"] = json!("multikueue");
    assert!(!owned_by(&prebuilt, "job-uid"));
    assert!(made_for(&prebuilt, &job));
    // Not one MultiKueue made for this job: none is taken, whatever its name.
    for (field, value) in [
        ("origin", json!(null)),
        ("job", json!("other")),
        ("queue", json!("elsewhere")),
        ("owner", json!([{"controller": true, "uid": "x"}])),
    ] {
        let mut other = prebuilt.clone();
        match field {
            "origin" => other["metadata"]["labels"]["kueue.x-k8s.io/multikueue-origin"] = value,
            "job" => other["metadata"]["labels"]["dijob-name"] = value,
            "queue" => other["spec"]["queueName"] = value,
            _ => other["metadata"]["ownerReferences"] = value,
        }
        assert!(!made_for(&other, &job), "{field}");
    }
    let plan = decide_in(&job, &[], &[], kueue(Some(prebuilt.clone())));
    let adopt = plan.actions.iter().find_map(|a| match a {
        Action::AdoptWorkload { name, resource_version, owner } => Some((name, resource_version, owner)),
        _ => None,
    });
    let (name, version, owner) = adopt.expect("adopted");
    assert_eq!((name.as_str(), version.as_str()), ("dijob-j-managerx", "7"));
    assert_eq!((owner.uid.as_str(), owner.controller), ("job-uid", Some(true)));
    let ordinary = decide_in(&queued_job(2), &[], &[], kueue(Some(admitted(&queued_job(2)))));
    assert_eq!(created(&plan.actions), created(&ordinary.actions), "admitted: run as any queued job");
    assert!(!created(&plan.actions).is_empty());

    // Adopted: nothing more to take.
    prebuilt["metadata"]["ownerReferences"] = json!([owner]);
    let again = decide_in(&job, &[], &[], kueue(Some(prebuilt)));
    assert!(!again.actions.iter().any(|a| matches!(a, Action::AdoptWorkload { .. })));
}

#[test]
fn on_a_worker_the_copy_never_makes_or_remakes_a_workload() {
    let job = worker_copy();
    let waiting = decide_in(&job, &[], &[], kueue(None));
    assert!(!waiting.actions.iter().any(|a| matches!(a, Action::CreateWorkload(_))), "{:?}", waiting.actions);
    // Made for another size, not admitted: kept (it is MultiKueue's to take back).
    let mut other = admitted(&job);
    other["metadata"]["name"] = json!("dijob-j-managerx");
    other["spec"]["podSets"][0]["count"] = json!(9);
    other["status"] = json!({});
    let held = decide_in(&job, &[], &[], kueue(Some(other)));
    assert!(!held.actions.iter().any(|a| matches!(a, Action::DeleteWorkload { .. })), "{:?}", held.actions);
}

/// A task job (DI-orchestrator 1.x's) takes the same road: a Workload of one podSet per task on
/// the manager, and on a worker its copy's pods once MultiKueue's Workload is adopted.
#[test]
fn task_jobs_are_dispatched_and_run_alike() {
    let template = json!({"spec": {"containers": [{"name": "di-container", "image": "ding"}]}});
    let mut job: di_api::DIJob = serde_json::from_value(json!({
        "apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob",
        "metadata": {"name": "cp", "namespace": "ns", "uid": "job-uid", "labels": {"kueue.x-k8s.io/queue-name": "team"}},
        "spec": {"managedBy": MULTIKUEUE, "tasks": [
            {"type": "learner", "template": template},
            {"type": "collector", "replicas": 2, "template": template},
        ]},
    }))
    .unwrap();
    di_api::defaults::default_dijob(&mut job);
    let made = dispatched(&job, kueue(None));
    let [Action::CreateWorkload(w)] = &made.actions[..] else { panic!("{:?}", made.actions) };
    let sets: Vec<(&str, u64)> = w["spec"]["podSets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["name"].as_str().unwrap(), s["count"].as_u64().unwrap()))
        .collect();
    assert_eq!(sets, [("learner", 1), ("collector", 2)]);

    // Its copy on a worker: managedBy gone, MultiKueue's Workload (the manager's, admitted).
    let mut copy = job.clone();
    copy.spec.managed_by = None;
    copy.annotations_mut().insert(PREBUILT_WORKLOAD.into(), w["metadata"]["name"].as_str().unwrap().into());
    let mut prebuilt = (**w).clone();
    prebuilt["metadata"]["ownerReferences"] = json!(null);
    prebuilt["metadata"]["labels"]["kueue.x-k8s.io/multikueue-origin"] = json!("multikueue");
    prebuilt["metadata"]["resourceVersion"] = json!("3");
    prebuilt["status"] = json!({"conditions": [
        {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "", "lastTransitionTime": "2026-11-22T09:00:00Z"},
        {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "", "lastTransitionTime": "2026-11-22T09:00:00Z"},
    ], "admission": {"clusterQueue": "gpus", "podSetAssignments": [
        {"name": "learner", "count": 1}, {"name": "collector", "count": 2},
    ]}});
    assert!(made_for(&prebuilt, &copy));
    let plan = decide_in(&copy, &[], &[], kueue(Some(prebuilt)));
    assert!(plan.actions.iter().any(|a| matches!(a, Action::AdoptWorkload { .. })), "{:?}", plan.actions);
    let pods = plan.actions.iter().filter(|a| matches!(a, Action::CreatePod(_))).count();
    assert_eq!(pods, 3, "its learner and two collectors: {:?}", created(&plan.actions));
}

/// On the manager a dispatched job's TTL runs from the end its worker's copy reported: looked at
/// again when it will pass, deleted once it has (MultiKueue then removes the worker's copy).
#[test]
fn a_dispatched_job_goes_after_its_ttl_from_the_end_its_worker_reported() {
    let mut job = dispatched_job();
    job.spec.ttl_seconds_after_finished = Some(600);
    job.status = Some(
        serde_json::from_value(json!({"phase": "Succeeded", "conditions": [
            {"type": "Succeeded", "status": "True", "lastTransitionTime": now().to_string()},
        ]}))
        .unwrap(),
    );
    let waiting = dispatched(&job, kueue(None));
    assert!(waiting.actions.is_empty(), "{:?}", waiting.actions);
    assert_eq!(waiting.requeue_after, Some(std::time::Duration::from_secs(600)));
    let mut later = world(&[], &[], now() + k8s_openapi::jiff::SignedDuration::from_secs(601));
    later.queue = Some(kueue(None));
    let due = dispatch(&job, &later, &Settings::default()).unwrap();
    assert!(matches!(&due.actions[..], [Action::DeleteJob]), "{:?}", due.actions);
}
