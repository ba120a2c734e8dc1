//! A job's core PodDisruptionBudget (`spec.protectCore`): which pods it covers, that it allows
//! none of them to go, and which passes apply it.

mod common;

use common::{decide, job, now, world_of};
use di_api::DIJob;
use di_core::plan::Action;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::json;

fn budget(actions: &[Action]) -> Option<&PodDisruptionBudget> {
    actions.iter().find_map(|a| if let Action::ApplyDisruptionBudget(b) = a { Some(&**b) } else { None })
}

#[test]
fn a_protected_role_job_covers_its_core_and_not_its_collectors() {
    let protected = job(2, 1, json!({"protectCore": true}));
    let plan = decide(&protected, &[], &[], now());
    assert!(matches!(plan.actions[0], Action::ApplyDisruptionBudget(_)), "before any pod: {:?}", plan.actions[0]);
    let budget = budget(&plan.actions).unwrap();
    assert_eq!(budget.metadata.name.as_deref(), Some("job-core"));
    let owner = &budget.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!((owner.uid.as_str(), owner.controller), ("job-uid", Some(true)));
    let spec = budget.spec.as_ref().unwrap();
    assert_eq!(spec.min_available, Some(IntOrString::Int(2)), "every core pod: the coordinator and the learner");
    assert_eq!(spec.max_unavailable, None);
    assert_eq!(spec.unhealthy_pod_eviction_policy.as_deref(), Some("AlwaysAllow"));
    let selector = serde_json::to_value(spec.selector.as_ref().unwrap()).unwrap();
    assert_eq!(
        selector,
        json!({"matchLabels": {"dijob-name": "job"}, "matchExpressions": [
            {"key": "replica-type", "operator": "In", "values": ["coordinator", "learner", "aggregator", "ddp-learner"]}
        ]})
    );
}

#[test]
fn only_a_pass_that_creates_a_core_pod_applies_it() {
    let protected = job(2, 1, json!({"protectCore": true}));
    assert!(budget(&decide(&job(2, 1, json!({})), &[], &[], now()).actions).is_none(), "not asked for");
    // Everything runs but a collector: its replacement needs no budget.
    let (pods, services) = world_of(&protected, |name| (name != "job-collector-1").then_some("Running"));
    let plan = decide(&protected, &pods, &services, now());
    assert_eq!(common::created(&plan.actions), ["job-collector-1"]);
    assert!(budget(&plan.actions).is_none(), "{:?}", plan.actions);
    // A learner's replacement applies it again (one deleted by hand comes back).
    let (pods, services) = world_of(&protected, |name| (name != "job-learner-0").then_some("Running"));
    assert!(budget(&decide(&protected, &pods, &services, now()).actions).is_some());
}

fn task_job(tasks: serde_json::Value) -> DIJob {
    let mut job: DIJob = serde_json::from_value(json!({
        "apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob",
        "metadata": {"name": "mesh", "namespace": "ns", "uid": "u"},
        "spec": {"protectCore": true, "tasks": tasks},
    }))
    .unwrap();
    di_api::defaults::default_dijob(&mut job);
    job
}

#[test]
fn a_task_job_covers_its_tasks_but_the_collectors() {
    let template = json!({"spec": {"containers": [{"name": "di-container", "image": "ding"}]}});
    let mesh = task_job(json!([
        {"name": "learner", "type": "learner", "template": template},
        {"name": "evaluator", "type": "evaluator", "template": template},
        {"name": "collector", "type": "collector", "replicas": 2, "template": template},
    ]));
    let plan = decide(&mesh, &[], &[], now());
    let selector =
        serde_json::to_value(budget(&plan.actions).unwrap().spec.as_ref().unwrap().selector.as_ref().unwrap()).unwrap();
    assert_eq!(
        selector["matchExpressions"][0],
        json!({"key": "diengine.opendilab.org/task", "operator": "In", "values": ["learner", "evaluator"]})
    );
    let collectors = task_job(json!([{"name": "collector", "type": "collector", "replicas": 2, "template": template}]));
    assert!(budget(&decide(&collectors, &[], &[], now()).actions).is_none(), "no core to cover");
}

#[test]
fn a_finished_job_gives_its_budget_up_once() {
    let protected = job(2, 1, json!({"protectCore": true, "cleanPodPolicy": "None"}));
    let running = common::with_status(protected.clone(), serde_json::from_value(json!({"phase": "Running"})).unwrap());
    let (pods, services) =
        world_of(&running, |name| Some(if name == "job-coordinator" { "Succeeded" } else { "Running" }));
    let plan = decide(&running, &pods, &services, now());
    assert_eq!(plan.status.phase, Some(di_api::Phase::Succeeded));
    assert!(plan.actions.contains(&Action::DeleteDisruptionBudget { name: "job-core".into() }), "{:?}", plan.actions);
    // Once the finish is recorded, no pass asks again.
    let finished = common::with_status(protected, plan.status.clone());
    let again = decide(&finished, &pods, &services, now());
    assert!(!again.actions.iter().any(|a| matches!(a, Action::DeleteDisruptionBudget { .. })), "{:?}", again.actions);
}

#[test]
fn its_minimum_counts_every_live_core_pod() {
    // Scaled down to no learner while two still run (their deletion is this pass's): the budget
    // the coordinator's replacement applies still covers them.
    let before = job(1, 2, json!({"protectCore": true}));
    let (pods, services) = world_of(&before, |name| (name != "job-coordinator").then_some("Running"));
    let after = job(1, 0, json!({"protectCore": true}));
    let plan = decide(&after, &pods, &services, now());
    let min = budget(&plan.actions).unwrap().spec.as_ref().unwrap().min_available.clone();
    assert_eq!(min, Some(IntOrString::Int(3)), "the coordinator wanted and two learners alive");
    // Everything alive is also wanted: counted once.
    let (pods, services) = world_of(&before, |name| (name != "job-coordinator").then_some("Running"));
    let plan = decide(&before, &pods, &services, now());
    let min = budget(&plan.actions).unwrap().spec.as_ref().unwrap().min_available.clone();
    assert_eq!(min, Some(IntOrString::Int(3)));
}
