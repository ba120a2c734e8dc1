//! Interruptible collectors (`spec.collector.minReplicas` in a queue): the core's Workload holds
//! the first collectors; each above is a Workload of its own, run while admitted, its pod alone
//! given back when Kueue preempts it, and back when readmitted.

mod common;
mod queued;

use std::collections::BTreeMap;

use common::{BACKOFF, created, now, world, world_of};
use di_api::DIJob;
use di_core::desired::Settings;
use di_core::plan::{Action, Plan, Why, plan};
use di_core::queue::collectors::workload_name;
use di_core::queue::{QUEUE_LABEL, Queue, workload};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::ResourceExt;
use queued::condition;
use serde_json::{Value, json};

/// A queued job of `collectors` collectors, the first one in its core.
fn elastic(collectors: i32) -> DIJob {
    let mut job = common::job(collectors, 1, json!({"collector": {"minReplicas": 1}}));
    job.labels_mut().insert(QUEUE_LABEL.into(), "team".into());
    job
}

/// `workload` admitted by a ClusterQueue, its one podSet (`set`) on flavor a100.
fn admit(mut workload: Value, sets: &[(&str, u64)]) -> Value {
    let assignments: Vec<Value> =
        sets.iter().map(|(name, count)| json!({"name": name, "flavors": {"cpu": "a100"}, "count": count})).collect();
    workload["metadata"]["resourceVersion"] = json!("3");
    workload["status"] = json!({
        "conditions": [
            {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "", "lastTransitionTime": "2026-11-28T09:00:00Z"},
            {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "", "lastTransitionTime": "2026-11-28T09:00:00Z"},
        ],
        "admission": {"clusterQueue": "team", "podSetAssignments": assignments},
    });
    workload
}

fn evict(mut workload: Value) -> Value {
    let evicted = json!({"type": "Evicted", "status": "True", "reason": "Preempted",
        "message": "Preempted to accommodate a workload (UID: b) due to reclamation within the cohort",
        "lastTransitionTime": "2026-11-28T09:01:00Z"});
    workload["status"]["conditions"].as_array_mut().unwrap().push(evicted);
    workload
}

fn decide(job: &DIJob, pods: &[Pod], services: &[Service], core: Value, collectors: BTreeMap<u32, Value>) -> Plan {
    decide_with_class(job, (pods, services), core, collectors, None)
}

/// As [`decide`], the job's WorkloadPriorityClass for its collectors found with `class`'s value.
fn decide_with_class(
    job: &DIJob,
    (pods, services): (&[Pod], &[Service]),
    core: Value,
    collectors: BTreeMap<u32, Value>,
    collector_class: Option<i32>,
) -> Plan {
    let mut world = world(pods, services, now());
    let flavors = BTreeMap::from([("a100".to_string(), json!({"nodeLabels": {"gpu": "a100"}}))]);
    world.queue = Some(Queue::Kueue { workload: Some(core), flavors, priority: None, collectors, collector_class });
    plan(job, &world, &Settings::default(), BACKOFF).unwrap()
}

fn made(plan: &Plan) -> Vec<String> {
    plan.actions
        .iter()
        .filter_map(|a| match a {
            Action::CreateWorkload(w) => Some(w["metadata"]["name"].as_str().unwrap().to_owned()),
            _ => None,
        })
        .collect()
}

fn core_of(job: &DIJob) -> Value {
    admit(
        workload(job, "team", None, None, &Settings::default()).unwrap(),
        &[("coordinator", 1), ("collector", 1), ("learner", 1)],
    )
}

#[test]
fn the_core_holds_the_first_collectors_and_each_above_waits_for_its_own_admission() {
    let job = elastic(3);
    let core = workload(&job, "team", None, None, &Settings::default()).unwrap();
    let collectors = core["spec"]["podSets"].as_array().unwrap().iter().find(|s| s["name"] == "collector").unwrap();
    assert_eq!(collectors["count"], 1, "the core counts minReplicas collectors");

    // Admitted core: its pods, and a Workload for each collector above it, one below its priority.
    let first = decide(&job, &[], &[], core_of(&job), BTreeMap::new());
    let mut pods = created(&first.actions);
    pods.sort();
    assert_eq!(pods, ["job-collector-0", "job-coordinator", "job-learner-0"]);
    assert_eq!(made(&first), [workload_name(&job, 1), workload_name(&job, 2)]);
    let collector_workload = first.actions.iter().find_map(|a| match a {
        Action::CreateWorkload(w) => Some(w.clone()),
        _ => None,
    });
    assert_eq!(collector_workload.unwrap()["spec"]["priority"], -1);
    let waiting = condition(&first, "CollectorsQueued");
    assert_eq!(waiting.status, "True");
    assert!(waiting.message.as_deref().unwrap().contains("2 of the 2 collector(s)"), "{waiting:?}");

    // Collector 1 admitted, collector 2 not yet: collector 1 runs where it was admitted.
    let one = admit(workload_of(&first, 1), &[("collector", 1)]);
    let two = workload_of(&first, 2);
    let (pods, services) = world_of(&job_with(&job, 1), |_| Some("Running"));
    let second = decide(&job, &pods, &services, core_of(&job), BTreeMap::from([(1, one), (2, two)]));
    assert_eq!(created(&second.actions), ["job-collector-1"]);
    let pod = second.actions.iter().find_map(|a| match a {
        Action::CreatePod(p) => Some(p.clone()),
        _ => None,
    });
    assert_eq!(pod.unwrap().spec.unwrap().node_selector.unwrap()["gpu"], "a100");
    assert!(made(&second).is_empty());
}

#[test]
fn a_preempted_collector_loses_its_pod_alone_and_gives_its_quota_back_once_it_is_gone() {
    let job = elastic(2);
    let one = admit(workload_of(&decide(&job, &[], &[], core_of(&job), BTreeMap::new()), 1), &[("collector", 1)]);
    let (pods, services) = world_of(&job, |_| Some("Running"));
    let reclaimed = decide(&job, &pods, &services, core_of(&job), BTreeMap::from([(1, evict(one.clone()))]));
    let deleted: Vec<(&str, &Why)> = reclaimed
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::DeletePod { name, why, .. } => Some((name.as_str(), why)),
            _ => None,
        })
        .collect();
    assert_eq!(deleted, [("job-collector-1", &Why::Reclaimed)], "the coordinator and learner stay");
    assert!(created(&reclaimed.actions).is_empty());
    let marks = reclaimed.actions.iter().filter(|a| matches!(a, Action::MarkRestart { .. })).count();
    assert_eq!(marks, 0, "no restart counted");
    assert_eq!(condition(&reclaimed, "CollectorsQueued").reason.as_deref(), Some("Preempted"));
    assert!(!written_to(&reclaimed, 1), "no acknowledgement while its pod may run");

    // Its pod gone: the eviction is acknowledged, and nothing is created until readmission.
    let rest: Vec<Pod> = pods.iter().filter(|p| p.name_any() != "job-collector-1").cloned().collect();
    let gone = decide(&job, &rest, &services, core_of(&job), BTreeMap::from([(1, evict(one))]));
    assert!(written_to(&gone, 1), "{:?}", gone.actions);
    assert!(created(&gone.actions).is_empty());
}

#[test]
fn a_collector_scaled_away_gives_its_workload_back_once_its_pod_has_gone() {
    let job = elastic(2);
    let one = admit(workload_of(&decide(&job, &[], &[], core_of(&job), BTreeMap::new()), 1), &[("collector", 1)]);
    let (pods, services) = world_of(&job, |_| Some("Running"));
    let smaller = elastic(1);
    let shrinking = decide(&smaller, &pods, &services, core_of(&smaller), BTreeMap::from([(1, one.clone())]));
    assert!(!deletes_workload(&shrinking), "its pod still runs");
    let rest: Vec<Pod> = pods.iter().filter(|p| p.name_any() != "job-collector-1").cloned().collect();
    let shrunk = decide(&smaller, &rest, &services, core_of(&smaller), BTreeMap::from([(1, one)]));
    assert!(deletes_workload(&shrunk), "{:?}", shrunk.actions);
}

fn job_with(job: &DIJob, collectors: i32) -> DIJob {
    let mut job = job.clone();
    job.spec.collector.as_mut().unwrap().replicas = Some(collectors);
    job
}

fn workload_of(plan: &Plan, index: u32) -> Value {
    plan.actions
        .iter()
        .find_map(|a| match a {
            Action::CreateWorkload(w) if w["metadata"]["name"].as_str().unwrap().ends_with(&format!("-{index}")) => {
                Some((**w).clone())
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("no Workload of collector {index}: {:?}", plan.actions))
}

fn written_to(plan: &Plan, index: u32) -> bool {
    plan.actions.iter().any(|a| {
        matches!(a, Action::WriteWorkloadStatus(w) if w["metadata"]["name"].as_str().unwrap().ends_with(&format!("collector-{index}"))
            && w["status"]["admission"].is_null())
    })
}

fn deletes_workload(plan: &Plan) -> bool {
    gives_back(&plan.actions)
}

fn gives_back(actions: &[Action]) -> bool {
    actions.iter().any(|a| matches!(a, Action::DeleteWorkload { name, .. } if name.ends_with("collector-1")))
}

/// A collector whose Workload is gone (deleted by hand, or by Kueue's retention) runs on no
/// admission: its pod goes while a new Workload is made, and comes back once that one is admitted.
#[test]
fn a_collector_whose_workload_is_gone_stops_until_its_new_one_is_admitted() {
    let job = elastic(2);
    let (pods, services) = world_of(&job, |_| Some("Running"));
    let plan = decide(&job, &pods, &services, core_of(&job), BTreeMap::new());
    let deleted: Vec<&str> = plan
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::DeletePod { name, why: Why::Reclaimed, .. } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deleted, ["job-collector-1"]);
    assert_eq!(made(&plan), [workload_name(&job, 1)]);
}

/// A collector above the core that has succeeded gives its quota back (its Workload says
/// Finished) and is neither deleted nor made again.
#[test]
fn a_succeeded_collector_above_the_core_finishes_its_workload() {
    let job = elastic(2);
    let one = admit(workload_of(&decide(&job, &[], &[], core_of(&job), BTreeMap::new()), 1), &[("collector", 1)]);
    let phase = |name: &str| Some(if name.ends_with("collector-1") { "Succeeded" } else { "Running" });
    let (pods, services) = world_of(&job, phase);
    let plan = decide(&job, &pods, &services, core_of(&job), BTreeMap::from([(1, evict(one))]));
    assert!(created(&plan.actions).is_empty());
    assert!(!plan.actions.iter().any(|a| matches!(a, Action::DeletePod { .. })), "{:?}", plan.actions);
    let finished = plan.actions.iter().any(|a| {
        matches!(a, Action::WriteWorkloadStatus(w) if w["status"]["conditions"].as_array().unwrap().iter()
            .any(|c| c["type"] == "Finished" && c["status"] == "True"))
    });
    assert!(finished, "{:?}", plan.actions);
}

/// A queued job of 2 collectors, 1 in its core, that runs up to `max` while its queue has room.
fn up_to(max: i32) -> DIJob {
    let mut job = elastic(2);
    job.spec.collector.as_mut().unwrap().max_replicas = Some(max);
    job
}

fn priorities(plan: &Plan) -> Vec<(String, i64)> {
    let mut said: Vec<(String, i64)> = plan
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::CreateWorkload(w) => {
                Some((w["metadata"]["name"].as_str()?.to_owned(), w["spec"]["priority"].as_i64()?))
            }
            Action::SetWorkloadPriority { name, priority, .. } => Some((name.clone(), *priority)),
            _ => None,
        })
        .collect();
    said.sort();
    said
}

/// With `maxReplicas`, collectors above `replicas` wait for spare room on Workloads two below the
/// core (taken back before the asked-for ones, one below); their waiting is no want of quota.
#[test]
fn collectors_up_to_max_wait_for_spare_room_below_the_asked_for_ones() {
    let job = up_to(4);
    let first = decide(&job, &[], &[], core_of(&job), BTreeMap::new());
    let names: Vec<String> = (1..4).map(|i| workload_name(&job, i)).collect();
    assert_eq!(priorities(&first), [(names[0].clone(), -1), (names[1].clone(), -2), (names[2].clone(), -2)]);
    let waiting = condition(&first, "CollectorsQueued");
    assert!(waiting.message.as_deref().unwrap().contains("1 of the 1 collector(s)"), "{waiting:?}");
    let counts = first.status.collectors_above_core.clone().unwrap();
    assert_eq!((counts.admitted, counts.waiting, counts.spare), (0, 1, 0));

    // Every one admitted: the spare ones run too and are said to; nothing waits for quota.
    let all: BTreeMap<u32, Value> = (1..4).map(|i| (i, admit(workload_of(&first, i), &[("collector", 1)]))).collect();
    let (pods, services) = world_of(&elastic(2), |_| Some("Running"));
    let second = decide(&job, &pods, &services, core_of(&job), all.clone());
    let mut pods_made = created(&second.actions);
    pods_made.sort();
    assert_eq!(pods_made, ["job-collector-2", "job-collector-3"]);
    let counts = second.status.collectors_above_core.clone().unwrap();
    assert_eq!((counts.admitted, counts.waiting, counts.spare), (3, 0, 2));
    assert_eq!(condition(&second, "CollectorsQueued").status, "False");

    // Asked for 3: collector 2 is no longer spare, and its Workload's priority says so.
    let (pods, services) = world_of(&job, |_| Some("Running"));
    let raised = decide(&job_with(&job, 3), &pods, &services, core_of(&job), all);
    assert_eq!(priorities(&raised), [(names[1].clone(), -1)]);
    assert!(!raised.actions.iter().any(|a| matches!(a, Action::DeletePod { .. })), "{:?}", raised.actions);
}

/// Outside a queue `maxReplicas` adds nothing: the job runs `replicas`.
#[test]
fn max_replicas_outside_a_queue_runs_replicas() {
    let mut job = up_to(4);
    job.labels_mut().remove(QUEUE_LABEL);
    assert_eq!(job.collector_slots(), 2);
    let plan = plan(&job, &world(&[], &[], now()), &Settings::default(), BACKOFF).unwrap();
    let mut pods = created(&plan.actions);
    pods.sort();
    assert_eq!(pods, ["job-collector-0", "job-collector-1", "job-coordinator", "job-learner-0"]);
}

/// A job naming a WorkloadPriorityClass for its collectors: their Workloads carry it and its
/// value (one below on spare room); while it does not exist, none is made and the job says why.
#[test]
fn collectors_take_the_workload_priority_class_the_job_names() {
    let mut job = up_to(3);
    job.spec.collector.as_mut().unwrap().workload_priority_class_name = Some("spare".into());
    let plan = decide_with_class(&job, (&[], &[]), core_of(&job), BTreeMap::new(), Some(50));
    let names: Vec<String> = (1..3).map(|i| workload_name(&job, i)).collect();
    assert_eq!(priorities(&plan), [(names[0].clone(), 50), (names[1].clone(), 49)]);
    let class = &workload_of(&plan, 1)["spec"]["priorityClassRef"];
    assert_eq!(class, &json!({"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "spare"}));

    let missing = decide_with_class(&job, (&[], &[]), core_of(&job), BTreeMap::new(), None);
    assert!(made(&missing).is_empty(), "{:?}", missing.actions);
    let said = condition(&missing, "CollectorsQueued");
    assert_eq!((said.status.as_str(), said.reason.as_deref()), ("True", Some("WorkloadPriorityClassNotFound")));
    assert!(said.message.as_deref().unwrap().contains("WorkloadPriorityClass spare"), "{said:?}");
}

/// A job held on a spec it cannot act on still obeys its collectors' Workloads: one Kueue
/// evicted loses its pod and is given back once the pod has gone.
#[test]
fn a_held_job_gives_an_evicted_collectors_quota_back() {
    let job = elastic(2);
    let one = admit(workload_of(&decide(&job, &[], &[], core_of(&job), BTreeMap::new()), 1), &[("collector", 1)]);
    let held = |pods: &[Pod], services: &[Service]| {
        let mut world = world(pods, services, now());
        let collectors = BTreeMap::from([(1, evict(one.clone()))]);
        let flavors = BTreeMap::new();
        world.queue = Some(Queue::Kueue {
            workload: Some(core_of(&job)),
            flavors,
            priority: None,
            collectors,
            collector_class: None,
        });
        di_core::queue::obey(&job, &world, None)
    };
    let (pods, services) = world_of(&job, |_| Some("Running"));
    let running = held(&pods, &services);
    assert!(
        running
            .iter()
            .any(|a| matches!(a, Action::DeletePod { name, why: Why::Reclaimed, .. } if name == "job-collector-1")),
        "{running:?}"
    );
    assert!(!gives_back(&running), "not while its pod runs");
    let rest: Vec<Pod> = pods.iter().filter(|p| p.name_any() != "job-collector-1").cloned().collect();
    let gone = held(&rest, &services);
    assert!(gives_back(&gone), "{gone:?}");
    assert!(!gone.iter().any(|a| matches!(a, Action::DeletePod { .. })), "the core stays: {gone:?}");
}
