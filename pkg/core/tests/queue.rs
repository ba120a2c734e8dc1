//! A job in a Kueue queue: held with no pod until its Workload is admitted, its Workload's
//! podSets, the admitted flavors on its pods, and what it reports to Kueue.

mod common;

use std::collections::BTreeMap;

use common::{BACKOFF, created, job, now, world, world_of};
use di_api::{DIJob, Phase};
use di_core::desired::Settings;
use di_core::plan::{Action, Plan, plan};
use di_core::queue::{QUEUE_LABEL, Queue, Report, beyond_room, report, workload, workload_name};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::ResourceExt;
use serde_json::{Value, json};

fn queued_job(collectors: i32) -> DIJob {
    let mut job = job(collectors, 1, json!({}));
    job.labels_mut().insert(QUEUE_LABEL.into(), "team".into());
    job
}

fn decide_in(job: &DIJob, pods: &[Pod], services: &[Service], queue: Queue) -> Plan {
    let mut world = world(pods, services, now());
    world.queue = Some(queue);
    plan(job, &world, &Settings::default(), BACKOFF).unwrap()
}

fn condition<'a>(plan: &'a Plan, type_: &str) -> &'a di_api::DIJobCondition {
    plan.status.conditions.iter().find(|c| c.type_ == type_).unwrap_or_else(|| panic!("no {type_} condition"))
}

fn kueue(workload: Option<Value>) -> Queue {
    let flavors = BTreeMap::from([(
        "a100".to_string(),
        json!({"nodeLabels": {"gpu": "a100"}, "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]}),
    )]);
    Queue::Kueue { workload, flavors, priority: None }
}

/// What the orchestrator would report of a job seen so, giving nothing back.
fn said(workload: &Value, ready: bool, finished: Option<bool>, pods_active: bool) -> Option<Value> {
    report(workload, &Report { ready, finished, pods_active, reclaimable: None }, now())
}

/// The status a plan writes to the Workload, if it writes one.
fn written(plan: &Plan) -> Option<Value> {
    plan.actions.iter().find_map(|a| match a {
        Action::WriteWorkloadStatus(w) => Some(w["status"].clone()),
        _ => None,
    })
}

fn admitted(job: &DIJob) -> Value {
    let mut w = workload(job, "team", None, None, &Settings::default()).unwrap();
    w["metadata"]["resourceVersion"] = json!("7");
    w["status"] = json!({
        "conditions": [
            {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "", "lastTransitionTime": "2026-11-22T09:00:00Z"},
            {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "", "lastTransitionTime": "2026-11-22T09:00:00Z"},
        ],
        "admission": {"clusterQueue": "gpus", "podSetAssignments": [
            {"name": "collector", "flavors": {"cpu": "a100"}, "count": 2},
        ]},
    });
    w
}

#[test]
fn a_job_waits_with_no_pod_until_its_workload_is_made_and_admitted() {
    let job = queued_job(2);
    let first = decide_in(&job, &[], &[], kueue(None));
    assert!(matches!(&first.actions[..], [Action::CreateWorkload(_)]), "{:?}", first.actions);
    assert_eq!(condition(&first, "Queued").status, "True");

    let mut pending = workload(&job, "team", None, None, &Settings::default()).unwrap();
    pending["status"] = json!({"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
        "message": "couldn't assign flavors to pod set collector: insufficient quota", "lastTransitionTime": "2026-11-22T09:00:00Z"}]});
    let waiting = decide_in(&job, &[], &[], kueue(Some(pending)));
    assert!(created(&waiting.actions).is_empty(), "{:?}", waiting.actions);
    let queued = condition(&waiting, "Queued");
    assert_eq!((queued.status.as_str(), queued.reason.as_deref()), ("True", Some("Pending")));
    assert!(queued.message.as_deref().unwrap().contains("insufficient quota"), "Kueue's words: {queued:?}");
    assert_eq!(waiting.status.phase, Some(Phase::Created));
}

#[test]
fn the_workload_has_a_pod_set_per_role_owned_by_the_job() {
    let job = queued_job(3);
    let w = workload(&job, "team", None, None, &Settings::default()).unwrap();
    assert_eq!(w["metadata"]["name"], workload_name(&job));
    assert_eq!(w["metadata"]["ownerReferences"][0]["uid"], "job-uid");
    assert_eq!(w["metadata"]["ownerReferences"][0]["controller"], true);
    assert_eq!(w["metadata"]["labels"]["kueue.x-k8s.io/job-uid"], "job-uid");
    assert_eq!(w["spec"]["queueName"], "team");
    assert!(w["spec"]["priorityClassRef"].is_null(), "no class, no priority");
    let ranked = workload(&job, "team", Some(&("high".into(), 1000)), None, &Settings::default()).unwrap();
    assert_eq!(
        ranked["spec"]["priorityClassRef"],
        json!({"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": "high"})
    );
    assert_eq!(ranked["spec"]["priority"], 1000);
    let sets: Vec<(String, u64)> = w["spec"]["podSets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["name"].as_str().unwrap().to_owned(), s["count"].as_u64().unwrap()))
        .collect();
    assert_eq!(sets, [("coordinator".into(), 1), ("collector".into(), 3), ("learner".into(), 1)]);
    // The coordinator's template is its pod, the replica endpoint beside it counted.
    let coordinator = &w["spec"]["podSets"][0]["template"]["spec"];
    assert!(coordinator["initContainers"].as_array().is_some_and(|c| !c.is_empty()));
}

#[test]
fn an_admitted_job_runs_with_its_flavors_on_its_pods_and_says_when_they_are_ready() {
    let job = queued_job(2);
    let w = admitted(&job);
    let start = decide_in(&job, &[], &[], kueue(Some(w.clone())));
    let queued = condition(&start, "Queued");
    assert_eq!((queued.status.as_str(), queued.reason.as_deref()), ("False", Some("Admitted")));
    let pods: Vec<&Pod> = start
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::CreatePod(p) => Some(&**p),
            _ => None,
        })
        .collect();
    assert_eq!(pods.len(), 4);
    for pod in pods {
        let spec = pod.spec.as_ref().unwrap();
        let placed = spec.node_selector.as_ref().is_some_and(|s| s.get("gpu").map(String::as_str) == Some("a100"));
        // Only the collectors' podSet was assigned the flavor.
        assert_eq!(placed, pod.name_any().contains("collector"), "{}", pod.name_any());
        assert_eq!(spec.tolerations.is_some(), placed);
    }
    // Starting: Kueue hears the pods are not ready yet; once every pod runs, that they are.
    let told = |plan: &Plan| {
        plan.actions.iter().find_map(|a| match a {
            Action::WriteWorkloadStatus(w) => Some(w["status"]["conditions"].clone()),
            _ => None,
        })
    };
    let starting = told(&start).expect("PodsReady reported");
    assert!(starting.as_array().unwrap().iter().any(|c| c["type"] == "PodsReady" && c["status"] == "False"));
    let (pods, services) = world_of(&job, |_| Some("Running"));
    let running = decide_in(&job, &pods, &services, kueue(Some(w)));
    assert_eq!(running.status.phase, Some(Phase::Running));
    let ready = told(&running).expect("PodsReady reported");
    assert!(ready.as_array().unwrap().iter().any(|c| c["type"] == "PodsReady" && c["status"] == "True"));
}

#[test]
fn a_finished_job_finishes_its_workload_and_an_unchanged_report_writes_nothing() {
    let job = queued_job(1);
    let w = admitted(&job);
    let finished = said(&w, false, Some(true), false).expect("Finished reported");
    let condition = finished["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Finished").unwrap();
    assert_eq!((condition["status"].as_str(), condition["reason"].as_str()), (Some("True"), Some("Succeeded")));
    let mut written = w.clone();
    written["status"] = finished;
    assert_eq!(said(&written, false, Some(true), false), None, "said once");
}

#[test]
fn an_evicted_job_loses_its_pods_then_gives_its_admission_back() {
    let job = queued_job(1);
    let mut w = admitted(&job);
    w["status"]["conditions"].as_array_mut().unwrap().push(json!({"type": "Evicted", "status": "True",
        "reason": "Preempted", "message": "Preempted to accommodate a higher priority Workload", "lastTransitionTime": "2026-11-22T09:30:00Z"}));
    w["status"]["reclaimablePods"] = json!([{"name": "collector", "count": 1}]);
    let (pods, services) = world_of(&job, |_| Some("Running"));
    let evicting = decide_in(&job, &pods, &services, kueue(Some(w.clone())));
    let queued = condition(&evicting, "Queued");
    assert_eq!((queued.status.as_str(), queued.reason.as_deref()), ("True", Some("Evicted")));
    let deleted = evicting.actions.iter().filter(|a| matches!(a, Action::DeletePod { .. })).count();
    assert_eq!(deleted, pods.len(), "every pod goes");
    assert!(
        !evicting.actions.iter().any(|a| matches!(a, Action::DeleteService { .. })),
        "the Services stay, with the restart counts they hold"
    );
    // Nothing is given back while a pod still runs.
    assert!(!evicting.actions.iter().any(|a| matches!(a, Action::WriteWorkloadStatus(_))));

    let gone = decide_in(&job, &[], &[], kueue(Some(w)));
    let released = gone
        .actions
        .iter()
        .find_map(|a| match a {
            Action::WriteWorkloadStatus(w) => Some(w.clone()),
            _ => None,
        })
        .expect("the admission given back");
    assert_eq!(released["status"]["admission"], Value::Null);
    assert_eq!(released["status"].get("reclaimablePods"), None, "the next admission takes the pods whole");
    assert_eq!(released["metadata"]["resourceVersion"], "7", "written over what was read");
    let status_of = |t: &str| {
        released["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == t).unwrap()["status"].clone()
    };
    assert_eq!(
        (status_of("QuotaReserved"), status_of("Admitted"), status_of("Requeued")),
        (json!("False"), json!("False"), json!("True"))
    );
}

#[test]
fn without_kueue_a_queued_job_waits_and_says_why() {
    let job = queued_job(1);
    let plan = decide_in(&job, &[], &[], Queue::NoKueue);
    assert!(plan.actions.is_empty(), "{:?}", plan.actions);
    let queued = condition(&plan, "Queued");
    assert_eq!(queued.reason.as_deref(), Some("NoKueue"));
    assert!(queued.message.as_deref().unwrap().contains("install Kueue"));
}

#[test]
fn collectors_scaled_past_the_admission_wait_and_say_so() {
    // Admitted with 2 collectors; the job now asks for 4.
    let admitted_job = queued_job(2);
    let w = admitted(&admitted_job);
    let grown = queued_job(4);
    let (pods, services) = world_of(&admitted_job, |_| Some("Running"));
    let plan = decide_in(&grown, &pods, &services, kueue(Some(w)));
    assert!(created(&plan.actions).is_empty(), "no pod past the admission: {:?}", plan.actions);
    let queued = condition(&plan, "Queued");
    assert_eq!((queued.status.as_str(), queued.reason.as_deref()), ("False", Some("Admitted")));
    assert!(queued.message.as_deref().unwrap().contains("2 pod(s)"), "{queued:?}");
}

#[test]
fn a_waiting_job_scaled_gets_its_workload_made_anew() {
    let made_for = queued_job(2);
    let mut w = workload(&made_for, "team", None, None, &Settings::default()).unwrap();
    w["metadata"]["uid"] = json!("workload-uid");
    let plan = decide_in(&queued_job(5), &[], &[], kueue(Some(w.clone())));
    let deleted = plan.actions.iter().any(
        |a| matches!(a, Action::DeleteWorkload { name, uid, .. } if *name == workload_name(&made_for) && uid == "workload-uid"),
    );
    assert!(deleted, "{:?}", plan.actions);
    // The same size keeps it.
    let same = decide_in(&made_for, &[], &[], kueue(Some(w)));
    assert!(!same.actions.iter().any(|a| matches!(a, Action::DeleteWorkload { .. })), "{:?}", same.actions);
}

#[test]
fn a_ready_job_that_loses_a_pod_waits_for_recovery_not_for_its_start() {
    let job = queued_job(1);
    let mut w = admitted(&job);
    w["status"]["conditions"].as_array_mut().unwrap().push(json!({"type": "PodsReady", "status": "True",
        "reason": "Started", "message": "every pod of the job is ready", "lastTransitionTime": "2026-11-22T09:10:00Z"}));
    let lost = said(&w, false, None, true).expect("reported");
    let pods_ready = lost["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "PodsReady").unwrap().clone();
    assert_eq!(
        (pods_ready["status"].as_str(), pods_ready["reason"].as_str()),
        (Some("False"), Some("WaitForRecovery"))
    );
    let mut written = w.clone();
    written["status"] = lost;
    let back = said(&written, true, None, true).expect("reported");
    let pods_ready = back["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "PodsReady").unwrap().clone();
    assert_eq!((pods_ready["status"].as_str(), pods_ready["reason"].as_str()), (Some("True"), Some("Recovered")));
    // A Workload with no status yet gets none written for nothing.
    let mut bare = w.clone();
    bare["status"] = Value::Null;
    assert_eq!(said(&bare, false, None, false), None);
}

#[test]
fn task_names_never_collide_with_a_second_shape_and_too_many_pod_sets_are_refused_by_name() {
    let task = |name: &str, cpu: &str| {
        json!({"name": name, "type": "learner", "replicas": 1, "template": {"spec":
        {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu}}}]}}})
    };
    let mesh = |tasks: Vec<Value>| {
        let mut job: DIJob = serde_json::from_value(json!({
            "apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob",
            "metadata": {"name": "mesh", "namespace": "ns", "uid": "mesh-uid", "labels": {QUEUE_LABEL: "team"}},
            "spec": {"tasks": tasks},
        }))
        .unwrap();
        di_api::defaults::default_dijob(&mut job);
        job
    };
    let job = mesh(vec![task("a-2", "1"), task("a", "1")]);
    let w = workload(&job, "team", None, None, &Settings::default()).unwrap();
    let names: Vec<&str> =
        w["spec"]["podSets"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["a-2", "a"]);

    let nine = mesh((0..9).map(|i| task(&format!("t{i}"), "1")).collect());
    let plan = decide_in(&nine, &[], &[], kueue(None));
    assert!(!plan.actions.iter().any(|a| matches!(a, Action::CreateWorkload(_))), "{:?}", plan.actions);
    assert_eq!(condition(&plan, "Queued").reason.as_deref(), Some("TooManyPodSets"));
}

#[test]
fn a_job_scaled_down_gives_its_room_back_and_never_takes_it_again() {
    // Admitted with 2 collectors; the job now asks for 1.
    let admitted_job = queued_job(2);
    let w = admitted(&admitted_job);
    let (pods, services) = world_of(&admitted_job, |_| Some("Running"));
    let shrunk = decide_in(&queued_job(1), &pods, &services, kueue(Some(w.clone())));
    let status = written(&shrunk).expect("a report");
    assert_eq!(status["reclaimablePods"], json!([{"name": "collector", "count": 1}]));

    // Scaled back to 2 while the room is given back: the second collector waits.
    let mut given = w.clone();
    given["status"] = status;
    let (pods, services) = world_of(&queued_job(1), |_| Some("Running"));
    let grown = decide_in(&queued_job(2), &pods, &services, kueue(Some(given.clone())));
    assert!(created(&grown.actions).is_empty(), "no room for it: {:?}", grown.actions);
    assert!(condition(&grown, "Queued").message.as_deref().unwrap().contains("1 pod(s)"));
    let kept = written(&grown).unwrap_or(given["status"].clone())["reclaimablePods"].clone();
    assert_eq!(kept, json!([{"name": "collector", "count": 1}]), "the count never goes down");
    assert_eq!(
        beyond_room(&queued_job(2), &given, &pods.iter().collect::<Vec<_>>(), None, &Settings::default()).unwrap(),
        [("collector".to_string(), 1)]
    );
}

#[test]
fn a_succeeded_collector_gives_its_room_back_and_the_others_keep_theirs() {
    let job = queued_job(2);
    let w = admitted(&job);
    let (pods, services) =
        world_of(&job, |name| Some(if name.ends_with("collector-0") { "Succeeded" } else { "Running" }));
    let plan = decide_in(&job, &pods, &services, kueue(Some(w)));
    assert!(created(&plan.actions).is_empty(), "a succeeded collector is not made again: {:?}", plan.actions);
    let status = written(&plan).expect("a report");
    assert_eq!(status["reclaimablePods"], json!([{"name": "collector", "count": 1}]));
}

#[test]
fn a_scale_up_past_the_admission_is_beyond_its_room_and_a_waiting_one_is_not() {
    let job = queued_job(2);
    let w = admitted(&job);
    let (pods, _) = world_of(&job, |_| Some("Running"));
    let pods: Vec<&Pod> = pods.iter().collect();
    let beyond = |asked: i32, w: &Value| beyond_room(&queued_job(asked), w, &pods, None, &Settings::default()).unwrap();
    assert_eq!(beyond(5, &w), [("collector".to_string(), 3)]);
    assert_eq!(beyond(2, &w), []);
    assert_eq!(beyond(1, &w), []);
    let waiting = workload(&job, "team", None, None, &Settings::default()).unwrap();
    assert_eq!(beyond(5, &waiting), [], "a waiting job's Workload is made anew at its new size");
}

#[test]
fn a_job_taken_out_of_its_queue_loses_its_workload_and_says_so_and_one_moved_gets_a_new_one() {
    let mut job = queued_job(1);
    let mut w = workload(&job, "team", None, None, &Settings::default()).unwrap();
    w["metadata"]["uid"] = json!("workload-uid");
    let deletes = |plan: &Plan| {
        plan.actions.iter().any(|a| matches!(a, Action::DeleteWorkload { uid, .. } if uid == "workload-uid"))
    };

    // Moved to another queue while it waited: made anew in the new one.
    let mut moved = job.clone();
    moved.labels_mut().insert(QUEUE_LABEL.into(), "other".into());
    assert!(deletes(&decide_in(&moved, &[], &[], kueue(Some(w.clone())))));
    assert!(!deletes(&decide_in(&job, &[], &[], kueue(Some(w.clone())))), "same queue, same size: kept");

    // Taken out: its Workload goes, its pods are made, and Queued turns False.
    job.labels_mut().remove(QUEUE_LABEL);
    job.status = Some(
        serde_json::from_value(json!({"phase": "Created",
        "conditions": [{"type": "Queued", "status": "True", "reason": "Pending", "message": "waiting"}]}))
        .unwrap(),
    );
    let out = decide_in(&job, &[], &[], kueue(Some(w)));
    assert!(deletes(&out), "{:?}", out.actions);
    assert!(!created(&out.actions).is_empty(), "it runs without a queue");
    let queued = condition(&out, "Queued");
    assert_eq!((queued.status.as_str(), queued.reason.as_deref()), ("False", Some("NotQueued")));
}

#[test]
fn a_suspended_job_makes_its_workload_inactive_and_active_again_when_resumed() {
    let mut job = queued_job(1);
    let w = admitted(&job);
    let activation = |plan: &Plan| {
        plan.actions.iter().find_map(|a| match a {
            Action::SetWorkloadActive { active, resource_version, .. } => Some((*active, resource_version.clone())),
            _ => None,
        })
    };
    assert_eq!(activation(&decide_in(&job, &[], &[], kueue(Some(w.clone())))), None, "active as made");
    job.spec.suspend = Some(true);
    let (pods, services) = world_of(&job, |_| Some("Running"));
    let suspended = decide_in(&job, &pods, &services, kueue(Some(w.clone())));
    assert_eq!(activation(&suspended), Some((false, "7".to_string())), "its quota goes back to the queue");
    assert!(suspended.actions.iter().any(|a| matches!(a, Action::DeletePod { .. })), "and its pods go");

    let mut inactive = w.clone();
    inactive["spec"]["active"] = json!(false);
    assert_eq!(activation(&decide_in(&job, &[], &[], kueue(Some(inactive.clone())))), None, "said once");
    job.spec.suspend = Some(false);
    assert_eq!(activation(&decide_in(&job, &[], &[], kueue(Some(inactive)))), Some((true, "7".to_string())));
}

#[test]
fn a_job_suspended_from_the_start_waits_for_no_quota() {
    let mut job = queued_job(1);
    job.spec.suspend = Some(true);
    let w = workload(&job, "team", None, None, &Settings::default()).unwrap();
    assert_eq!(w["spec"]["active"], json!(false));
    job.spec.suspend = Some(false);
    assert_eq!(workload(&job, "team", None, None, &Settings::default()).unwrap()["spec"]["active"], json!(true));
}

#[test]
fn a_job_admitted_from_a_queue_it_has_left_is_made_inactive_to_be_evicted() {
    let mut job = queued_job(1);
    let w = admitted(&job);
    job.labels_mut().insert(QUEUE_LABEL.into(), "other".into());
    let (pods, services) = world_of(&job, |_| Some("Running"));
    let plan = decide_in(&job, &pods, &services, kueue(Some(w)));
    assert!(
        plan.actions.iter().any(|a| matches!(a, Action::SetWorkloadActive { active: false, .. })),
        "{:?}",
        plan.actions
    );
}

#[test]
fn learners_without_their_aggregator_config_give_nothing_back() {
    let job = queued_job(2);
    let w = admitted(&job);
    let (pods, services) = world_of(&job, |_| Some("Running"));
    let mut world = common::world(&pods, &services, now());
    world.queue = Some(kueue(Some(w)));
    world.missing_aggregator_config = Some("di-system/aggregator-config".into());
    let plan = plan(&job, &world, &Settings::default(), BACKOFF).unwrap();
    assert!(written(&plan).is_none_or(|s| s.get("reclaimablePods").is_none()), "{:?}", written(&plan));
}

#[test]
fn pods_held_back_by_the_room_leave_the_job_ready() {
    // Admitted for 2 collectors, one given back; asked for 2 again: one runs, one waits.
    let job = queued_job(2);
    let mut w = admitted(&job);
    w["status"]["reclaimablePods"] = json!([{"name": "collector", "count": 1}]);
    let (pods, services) = world_of(&job, |name| (!name.ends_with("collector-1")).then_some("Running"));
    let plan = decide_in(&job, &pods, &services, kueue(Some(w)));
    assert!(created(&plan.actions).is_empty(), "{:?}", plan.actions);
    let status = written(&plan).expect("a report");
    let ready = status["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "PodsReady").unwrap().clone();
    assert_eq!(ready["status"], "True", "{ready}");
}
