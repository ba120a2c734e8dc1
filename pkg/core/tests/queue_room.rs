//! What an admitted job gives back to its queue and may ask of it (its room), and how its
//! Workload follows the job: suspended, moved to another queue, taken out of it.

mod common;
mod queued;

use common::{BACKOFF, created, now, world_of};
use di_core::desired::Settings;
use di_core::plan::{Action, Plan, plan};
use di_core::queue::{QUEUE_LABEL, beyond_room, workload};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use queued::{admitted, condition, decide_in, kueue, queued_job, written};
use serde_json::{Value, json};

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
