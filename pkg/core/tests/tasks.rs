//! A task job's passes, decided from the job and the world: creation with the contract, phases,
//! a failed pod replaced alone or with the whole job, the backoff limit, scaling that rebuilds
//! every pod, success decided by the deciding task, suspension.

mod common;

use std::time::Duration;

use common::{decide, now, observed};
use di_api::contract::annotations as marks;
use di_api::defaults::default_dijob;
use di_api::tasks::annotations;
use di_api::{DIJob, DIJobStatus, Phase};
use di_core::desired::{Settings, task_objects};
use di_core::plan::{Action, Plan, Why};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::jiff::SignedDuration;
use kube::ResourceExt;
use serde_json::{Value, json};

/// A defaulted ditask-style job: learner, evaluator, `collectors` collectors, plus `extra` fields.
fn job(collectors: i32, extra: Value) -> DIJob {
    let template = json!({"spec": {"containers": [{"name": "di-container", "image": "ding"}]}});
    let mut spec = json!({"tasks": [
        {"type": "learner", "template": template},
        {"type": "evaluator", "template": template},
        {"type": "collector", "replicas": collectors, "template": template},
    ]});
    for (k, v) in extra.as_object().cloned().unwrap_or_default() {
        spec[&k] = v;
    }
    let mut job: DIJob = serde_json::from_value(json!({
        "apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob",
        "metadata": {"name": "cp", "namespace": "ns", "uid": "job-uid", "generation": 1},
        "spec": spec,
    }))
    .unwrap();
    default_dijob(&mut job);
    job
}

/// The job's pods as built, each in the phase `phase_of` gives (none: absent), and its Service
/// with the restart `mark` annotations.
fn world_of(
    job: &DIJob,
    phase_of: impl Fn(&str) -> Option<&'static str>,
    mark: &[(&str, &str)],
) -> (Vec<Pod>, Service) {
    let objects = task_objects(job, &Settings::default()).unwrap();
    let pods =
        objects.pods.iter().filter_map(|p| phase_of(&p.member.pod).map(|ph| observed(p.pod.clone(), ph))).collect();
    let mut service = objects.service;
    service.metadata.uid = Some("svc-uid".into());
    service.annotations_mut().extend(mark.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    (pods, service)
}

fn with_phase(mut job: DIJob, phase: Phase) -> DIJob {
    job.status = Some(DIJobStatus { phase: Some(phase), ..Default::default() });
    job
}

fn created(plan: &Plan) -> Vec<String> {
    plan.actions.iter().filter_map(|a| if let Action::CreatePod(p) = a { Some(p.name_any()) } else { None }).collect()
}

fn deleted(plan: &Plan) -> Vec<(String, Why)> {
    let deletes = plan.actions.iter().filter_map(|a| match a {
        Action::DeletePod { name, why, .. } => Some((name.clone(), *why)),
        _ => None,
    });
    deletes.collect()
}

fn marked(plan: &Plan) -> Option<u32> {
    plan.actions.iter().find_map(|a| if let Action::MarkRestart { mark, .. } = a { Some(mark.restarts) } else { None })
}

const ALL: [&str; 4] = ["cp-learner-0", "cp-evaluator-0", "cp-collector-0", "cp-collector-1"];

#[test]
fn a_new_job_gets_its_service_and_every_pod_in_rank_order() {
    let plan = decide(&job(2, json!({})), &[], &[], now());
    assert_eq!(created(&plan), ALL);
    let service = plan.actions.iter().find_map(|a| if let Action::CreateService(s) = a { Some(s) } else { None });
    let spec = service.unwrap().spec.clone().unwrap();
    assert_eq!((service.unwrap().name_any().as_str(), spec.cluster_ip.as_deref()), ("di-cp", Some("None")));
    assert_eq!(spec.publish_not_ready_addresses, Some(true));
    let Some(Action::CreatePod(pod)) =
        plan.actions.iter().find(|a| matches!(a, Action::CreatePod(p) if p.name_any() == "cp-collector-1"))
    else {
        panic!("no collector-1")
    };
    let pod_spec = pod.spec.as_ref().unwrap();
    assert_eq!((pod_spec.hostname.as_deref(), pod_spec.subdomain.as_deref()), (Some("cp-collector-1"), Some("di-cp")));
    assert_eq!(pod_spec.restart_policy.as_deref(), Some("Never"));
    let env: Vec<(String, String)> = pod_spec.containers[0]
        .env
        .iter()
        .flatten()
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect();
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(get("DI_RANK"), Some("3"));
    assert_eq!(get("DI_JOB_ID"), Some("ns/cp"));
    assert_eq!(get("DI_NODES").map(|n| n.split(',').count()), Some(4));
    assert_eq!(
        get("DI_COLLECTOR_NODES"),
        Some("cp-collector-0.di-cp.ns.svc.cluster.local,cp-collector-1.di-cp.ns.svc.cluster.local")
    );
    assert_eq!(get("KUBERNETES_POD_NAME"), Some("cp-collector-1"));
    let a = pod.annotations();
    assert_eq!(
        (a[annotations::RANK].as_str(), a[annotations::TASK_RANK].as_str(), a[annotations::REPLICAS].as_str()),
        ("3", "1", "4")
    );
    assert_eq!(plan.status.phase, Some(Phase::Pending));
    assert_eq!(plan.status.replicas, Some(4));
}

#[test]
fn phases_follow_every_pod() {
    type PhaseOf<'a> = &'a dyn Fn(&str) -> Option<&'static str>;
    let cases: Vec<(Option<Phase>, PhaseOf, Phase)> = vec![
        (None, &|p| (p != "cp-collector-1").then_some("Running"), Phase::Pending),
        (Some(Phase::Pending), &|_| Some("Pending"), Phase::Starting),
        (Some(Phase::Starting), &|p| Some(if p == "cp-learner-0" { "Pending" } else { "Running" }), Phase::Starting),
        (Some(Phase::Starting), &|_| Some("Running"), Phase::Running),
        // A pod that vanished from a running job is replaced: the job restarts.
        (Some(Phase::Running), &|p| (p != "cp-evaluator-0").then_some("Running"), Phase::Restarting),
        (
            Some(Phase::Restarting),
            &|p| Some(if p == "cp-evaluator-0" { "Pending" } else { "Running" }),
            Phase::Restarting,
        ),
        (Some(Phase::Restarting), &|_| Some("Running"), Phase::Running),
        // A collector that finished early still counts as done running.
        (Some(Phase::Running), &|p| Some(if p == "cp-collector-0" { "Succeeded" } else { "Running" }), Phase::Running),
        (Some(Phase::Running), &|p| Some(if p == "cp-learner-0" { "Succeeded" } else { "Running" }), Phase::Succeeded),
        (Some(Phase::Succeeded), &|_| None, Phase::Succeeded),
    ];
    for (previous, phase_of, want) in cases {
        let job = match previous {
            Some(p) => with_phase(job(2, json!({})), p),
            None => job(2, json!({})),
        };
        let (pods, service) = world_of(&job, phase_of, &[]);
        let plan = decide(&job, &pods, &[service], now());
        assert_eq!(plan.status.phase, Some(want), "from {previous:?}");
        let condition = plan.status.conditions.iter().find(|c| c.type_ == format!("{want:?}")).unwrap();
        assert_eq!(condition.status, "True");
    }
}

#[test]
fn a_failed_pod_is_replaced_alone_under_its_name_after_backoff() {
    let job = with_phase(job(2, json!({})), Phase::Running);
    let failing = |p: &str| Some(if p == "cp-collector-1" { "Failed" } else { "Running" });
    let (pods, service) = world_of(&job, failing, &[]);
    let plan = decide(&job, &pods, std::slice::from_ref(&service), now());
    assert_eq!(marked(&plan), Some(1));
    assert_eq!(deleted(&plan), [("cp-collector-1".to_string(), Why::Failed)], "the other pods are untouched");
    assert!(created(&plan).is_empty());
    assert_eq!((plan.status.phase, plan.status.restarts), (Some(Phase::Restarting), Some(1)));
    assert_eq!(plan.status.task_status["collector"]["Failed"], 1);

    // Counted once: the Service shows the mark, the pod is gone; the name comes back after the backoff.
    let after = (now() + SignedDuration::from_secs(10)).to_string();
    let mark = [
        (marks::RESTARTS, "1"),
        (marks::LAST_FAILED_UID, "uid-cp-collector-1"),
        (marks::RESTART_AFTER, after.as_str()),
    ];
    let (pods, service) = world_of(&job, |p| (p != "cp-collector-1").then_some("Running"), &mark);
    let job = with_phase(job, Phase::Restarting);
    let early = decide(&job, &pods, std::slice::from_ref(&service), now());
    assert!(created(&early).is_empty() && marked(&early).is_none());
    assert_eq!(early.requeue_after, Some(Duration::from_secs(10)));
    let late = decide(&job, &pods, &[service], now() + SignedDuration::from_secs(11));
    assert_eq!(created(&late), ["cp-collector-1"]);
    assert_eq!((late.status.phase, late.status.restarts), (Some(Phase::Restarting), Some(1)));
}

#[test]
fn restart_policy_job_replaces_every_pod_in_one_step() {
    let job = with_phase(job(2, json!({"restartPolicy": "Job"})), Phase::Running);
    let (pods, service) = world_of(&job, |p| Some(if p == "cp-learner-0" { "Failed" } else { "Running" }), &[]);
    let plan = decide(&job, &pods, std::slice::from_ref(&service), now());
    assert_eq!(marked(&plan), Some(1));
    let gone: Vec<(String, Why)> = deleted(&plan);
    assert_eq!(gone.len(), 4);
    assert!(gone.iter().all(|(_, why)| *why == Why::JobRestart), "{gone:?}");

    // While one pod of the last round is still terminating, none is created.
    let mark = [(marks::RESTARTS, "1"), (marks::LAST_FAILED_UID, "uid-cp-learner-0")];
    let (mut pods, service) = world_of(&job, |p| (p == "cp-collector-0").then_some("Running"), &mark);
    pods[0].metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()));
    let waiting = decide(&job, &pods, std::slice::from_ref(&service), now());
    assert!(created(&waiting).is_empty(), "{:?}", created(&waiting));
    let fresh = decide(&job, &[], &[service], now());
    assert_eq!(created(&fresh), ALL);
}

#[test]
fn past_the_backoff_limit_the_job_fails_and_is_cleaned_up() {
    let job = with_phase(job(2, json!({"backoffLimit": 1})), Phase::Running);
    let mark = [(marks::RESTARTS, "1"), (marks::LAST_FAILED_UID, "uid-old")];
    let (pods, service) = world_of(&job, |p| Some(if p == "cp-collector-0" { "Failed" } else { "Running" }), &mark);
    let plan = decide(&job, &pods, &[service], now());
    assert_eq!(plan.status.phase, Some(Phase::Failed));
    let failed = plan.status.conditions.iter().find(|c| c.type_ == "Failed").unwrap();
    assert_eq!(failed.reason.as_deref(), Some("BackoffLimitExceeded"));
    assert!(marked(&plan).is_none());
    // cleanPodPolicy Running: the running pods go, the failed one stays for its logs.
    let gone: Vec<String> = deleted(&plan).into_iter().map(|(n, _)| n).collect();
    assert_eq!(gone, ["cp-learner-0", "cp-evaluator-0", "cp-collector-1"]);
    assert!(plan.actions.iter().any(|a| matches!(a, Action::DeleteService { name, .. } if name == "di-cp")));
}

#[test]
fn scaling_a_task_rebuilds_every_pod_before_any_new_one_starts() {
    let before = with_phase(job(2, json!({})), Phase::Running);
    let (pods, service) = world_of(&before, |_| Some("Running"), &[]);
    let after = with_phase(job(3, json!({})), Phase::Running);
    let plan = decide(&after, &pods, std::slice::from_ref(&service), now());
    assert!(created(&plan).is_empty(), "no pod of the new peer set beside an old one");
    assert!(deleted(&plan).iter().all(|(_, why)| *why == Why::Rebuilt));
    assert_eq!(deleted(&plan).len(), 4);
    assert_eq!(plan.status.phase, Some(Phase::Restarting));
    assert_eq!((plan.status.replicas, plan.status.ready_replicas), (Some(5), Some(0)));

    let rebuilt = decide(&after, &[], &[service], now());
    assert_eq!(created(&rebuilt).len(), 5);
    assert!(rebuilt.actions.iter().all(|a| match a {
        Action::CreatePod(p) => p.annotations()[annotations::PEERS] == "learner=1,evaluator=1,collector=3",
        _ => true,
    }));
}

#[test]
fn a_marked_task_decides_success_and_suspension_empties_the_job() {
    let mut marked_job = job(1, json!({}));
    marked_job.spec.tasks.as_mut().unwrap()[1].completion = Some(true);
    let job = with_phase(marked_job, Phase::Running);
    let (pods, service) = world_of(&job, |p| Some(if p == "cp-learner-0" { "Succeeded" } else { "Running" }), &[]);
    assert_eq!(decide(&job, &pods, std::slice::from_ref(&service), now()).status.phase, Some(Phase::Running));
    let (pods, _) = world_of(&job, |p| Some(if p == "cp-evaluator-0" { "Succeeded" } else { "Running" }), &[]);
    assert_eq!(decide(&job, &pods, std::slice::from_ref(&service), now()).status.phase, Some(Phase::Succeeded));

    let mut suspended = job.clone();
    suspended.spec.suspend = Some(true);
    let (pods, service) = world_of(&suspended, |_| Some("Running"), &[]);
    let plan = decide(&suspended, &pods, &[service], now());
    assert_eq!(deleted(&plan).len(), 3);
    assert!(deleted(&plan).iter().all(|(_, why)| *why == Why::Suspended));
    assert!(plan.status.conditions.iter().any(|c| c.type_ == "Suspended" && c.status == "True"));
}

#[test]
fn a_finished_task_job_with_a_ttl_is_deleted_when_it_expires() {
    // The pass that sees every deciding pod succeed records when; the TTL counts from then.
    let running = with_phase(job(1, json!({"ttlSecondsAfterFinished": 2})), Phase::Running);
    let (pods, service) = world_of(&running, |_| Some("Succeeded"), &[]);
    let done = decide(&running, &pods, std::slice::from_ref(&service), now());
    assert_eq!(done.status.phase, Some(Phase::Succeeded));
    assert!(!done.actions.contains(&Action::DeleteJob));
    assert_eq!(done.requeue_after, Some(Duration::from_secs(2)));

    let finished = DIJob { status: Some(done.status), ..running };
    let early = decide(&finished, &pods, &[], now() + SignedDuration::from_secs(1));
    assert!(!early.actions.contains(&Action::DeleteJob));
    assert_eq!(early.requeue_after, Some(Duration::from_secs(1)));
    let late = decide(&finished, &pods, &[], now() + SignedDuration::from_secs(3));
    assert!(late.actions.contains(&Action::DeleteJob), "{:?}", late.actions);
}

#[test]
fn a_pod_a_disruption_ended_is_replaced_without_counting_against_the_backoff_limit() {
    let job = with_phase(job(2, json!({"backoffLimit": 0})), Phase::Running);
    let (mut pods, service) = world_of(&job, |_| Some("Running"), &[]);
    for pod in pods.iter_mut().filter(|p| p.name_any() == "cp-collector-1") {
        let preempted = json!({"phase": "Failed", "conditions": [
            {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]});
        pod.status = Some(serde_json::from_value(preempted).unwrap());
    }
    let plan = decide(&job, &pods, std::slice::from_ref(&service), now());
    assert_ne!(plan.status.phase, Some(Phase::Failed), "{:?}", plan.status.conditions);
    assert_eq!(marked(&plan), None, "not counted");
    assert_eq!(deleted(&plan), [("cp-collector-1".to_string(), Why::Disrupted)]);
    // Once it is gone, it comes back under its name at once.
    let (pods, service) = world_of(&job, |p| (p != "cp-collector-1").then_some("Running"), &[]);
    assert_eq!(created(&decide(&job, &pods, &[service], now())), ["cp-collector-1"]);
}
