//! One pass decided from the job and the world: phases (every transition, pods that vanish),
//! replacement with backoff and limit, scaling, cleanup policies, suspension, TTL.

mod common;

use std::time::Duration;

use common::{BACKOFF, created, decide, deleted, job, now, observed, with_status, world_of};
use di_api::contract::{annotations, labels};
use di_api::{DIJobStatus, Phase};
use di_core::desired::{self, Settings};
use di_core::plan::{Action, Why, World, backoff, plan};
use di_core::restarts::Mark;
use di_core::status::job_phase;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use serde_json::json;

#[test]
fn phase_follows_the_coordinator_and_terminal_phases_stick() {
    let pod = |phase: &str| observed(Pod::default(), phase);
    let cases: Vec<(Option<Phase>, Option<Pod>, Phase)> = vec![
        (None, None, Phase::Created),
        (None, Some(pod("Pending")), Phase::Created),
        (Some(Phase::Created), Some(pod("Running")), Phase::Running),
        (Some(Phase::Running), Some(pod("Succeeded")), Phase::Succeeded),
        (Some(Phase::Running), Some(pod("Failed")), Phase::Failed),
        (Some(Phase::Running), Some(pod("Unknown")), Phase::Unknown),
        (Some(Phase::Unknown), Some(pod("Running")), Phase::Running),
        // A coordinator that vanished while running is recreated: the job is Created again.
        (Some(Phase::Running), None, Phase::Created),
        // Finished is final, whatever happens to the pods afterwards.
        (Some(Phase::Succeeded), None, Phase::Succeeded),
        (Some(Phase::Failed), Some(pod("Running")), Phase::Failed),
        (Some(Phase::Succeeded), Some(pod("Failed")), Phase::Succeeded),
    ];
    for (previous, coordinator, want) in cases {
        assert_eq!(
            job_phase(previous, coordinator.as_ref()),
            want,
            "{previous:?} with {:?}",
            coordinator.as_ref().map(|p| p.status.clone())
        );
    }
    let mut terminating = pod("Running");
    terminating.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()));
    assert_eq!(job_phase(Some(Phase::Running), Some(&terminating)), Phase::Created);
}

#[test]
fn first_pass_creates_the_coordinator_its_service_and_identity() {
    let job = job(0, 0, json!({}));
    let plan = decide(&job, &[], &[], now());
    assert!(matches!(&plan.actions[0], Action::CreateService(s) if s.name_any() == "job-coordinator"));
    assert!(matches!(&plan.actions[1], Action::CreateRbac(_)));
    assert_eq!(created(&plan.actions), vec!["job-coordinator"]);
    assert_eq!(plan.actions.len(), 3);
    let status = plan.status;
    assert_eq!(status.phase, Some(Phase::Created));
    assert_eq!(status.observed_generation, Some(3));
    assert!(status.conditions.iter().any(|c| c.type_ == "Created" && c.status == "True"));
}

#[test]
fn a_pass_over_a_converged_world_does_nothing_and_keeps_the_status() {
    let job = job(2, 1, json!({}));
    let (pods, services) = world_of(&job, |_| Some("Running"));
    let first = decide(&job, &pods, &services, now());
    assert_eq!(first.actions, vec![], "nothing to do when everything exists");
    assert_eq!(first.status.phase, Some(Phase::Running));
    assert_eq!(first.status.collectors.as_deref(), Some("2/2"));
    assert_eq!(first.status.learners.as_deref(), Some("1/1"));
    assert_eq!(first.status.replica_status["Collector"].active, 2);
    // Recomputed later from the same world: equal, so no status write.
    let job = with_status(job, first.status.clone());
    let again = decide(&job, &pods, &services, now() + SignedDuration::from_secs(60));
    assert_eq!(again.status, first.status);
}

#[test]
fn after_a_crash_only_what_is_missing_is_created() {
    let job = job(3, 1, json!({}));
    let (pods, services) = world_of(&job, |n| (n != "job-collector-2").then_some("Running"));
    let plan = decide(&job, &pods, &services, now());
    assert_eq!(created(&plan.actions), vec!["job-collector-2"]);
    assert_eq!(plan.actions.len(), 1, "the service exists already: {:?}", plan.actions);
}

#[test]
fn scaling_down_deletes_the_highest_index_first() {
    let big = job(4, 2, json!({}));
    let (mut pods, services) = world_of(&big, |_| Some("Running"));
    // A pod of the job without an index (left by an older build, say) goes after every indexed one.
    let mut unindexed = pods[1].clone();
    (unindexed.metadata.name, unindexed.status) = (Some("job-collector-x".into()), None);
    unindexed.labels_mut().remove(labels::REPLICA_INDEX);
    pods.push(unindexed);
    let small = job(1, 1, json!({}));
    let plan = decide(&small, &pods, &services, now());
    assert_eq!(
        deleted(&plan.actions),
        vec![
            ("job-collector-3".to_string(), Why::ScaledDown),
            ("job-collector-2".into(), Why::ScaledDown),
            ("job-learner-1".into(), Why::ScaledDown),
            ("job-collector-1".into(), Why::ScaledDown),
            ("job-collector-x".into(), Why::ScaledDown),
        ]
    );
    let services_deleted: Vec<_> = plan
        .actions
        .iter()
        .filter_map(|a| if let Action::DeleteService { name, .. } = a { Some(name.as_str()) } else { None })
        .collect();
    assert_eq!(services_deleted, vec!["job-collector-1", "job-collector-2", "job-collector-3", "job-learner-1"]);
    assert_eq!(plan.status.collectors.as_deref(), Some("4/1"), "status counts what exists");
}

#[test]
fn a_failed_collector_is_counted_deleted_and_recreated_after_backoff() {
    let job = job(1, 0, json!({}));
    let (pods, mut services) = world_of(&job, |n| Some(if n == "job-collector-0" { "Failed" } else { "Running" }));
    let plan = decide(&job, &pods, &services, now());
    let restart_after = now() + SignedDuration::from_secs(10);
    assert_eq!(
        plan.actions,
        vec![
            Action::MarkRestart {
                service: "job-collector-0".into(),
                mark: Mark {
                    service_uid: services[1].uid(),
                    restarts: 1,
                    failed_uid: "uid-job-collector-0".into(),
                    restart_after
                },
            },
            Action::DeletePod { name: "job-collector-0".into(), uid: "uid-job-collector-0".into(), why: Why::Failed },
        ]
    );
    assert_eq!(plan.requeue_after, Some(BACKOFF));
    assert_eq!(plan.status.phase, Some(Phase::Running), "a collector's failure does not change the phase");

    // The mark landed on the service; the pod is gone. Before the backoff: wait.
    let annotations = services[1].annotations_mut();
    annotations.insert(annotations::RESTARTS.into(), "1".into());
    annotations.insert(annotations::LAST_FAILED_UID.into(), "uid-job-collector-0".into());
    annotations.insert(annotations::RESTART_AFTER.into(), restart_after.to_string());
    let pods: Vec<Pod> = pods.into_iter().filter(|p| p.name_any() != "job-collector-0").collect();
    let early = decide(&job, &pods, &services, now() + SignedDuration::from_secs(4));
    assert_eq!(early.actions, vec![]);
    assert_eq!(early.requeue_after, Some(Duration::from_secs(6)));
    // After it: recreated, carrying its restart count.
    let late = decide(&job, &pods, &services, now() + SignedDuration::from_secs(11));
    assert_eq!(created(&late.actions), vec!["job-collector-0"]);
    let Action::CreatePod(pod) = &late.actions[0] else { panic!() };
    assert_eq!(pod.annotations()[annotations::RESTARTS], "1");
}

#[test]
fn a_failure_already_counted_is_not_counted_twice() {
    let job = job(1, 0, json!({}));
    let (pods, mut services) = world_of(&job, |n| Some(if n == "job-collector-0" { "Failed" } else { "Running" }));
    // The pass that counted it crashed before deleting the pod.
    services[1].annotations_mut().insert(annotations::RESTARTS.into(), "1".into());
    services[1].annotations_mut().insert(annotations::LAST_FAILED_UID.into(), "uid-job-collector-0".into());
    let plan = decide(&job, &pods, &services, now());
    assert_eq!(
        plan.actions,
        vec![Action::DeletePod { name: "job-collector-0".into(), uid: "uid-job-collector-0".into(), why: Why::Failed }]
    );
}

#[test]
fn pods_the_coordinator_reports_are_replaced_once() {
    let mut job = job(2, 1, json!({}));
    let (pods, services) = world_of(&job, |_| Some("Running"));
    job.annotations_mut().insert(
        annotations::REPLACE.into(),
        "job-collector-1=uid-job-collector-1,job-learner-0=uid-job-learner-0,job-collector-0=an-older-uid".into(),
    );
    let plan = decide(&job, &pods, &services, now());
    assert_eq!(
        deleted(&plan.actions),
        vec![("job-collector-1".to_string(), Why::Reported), ("job-learner-0".into(), Why::Reported)],
        "only the reported incarnations go"
    );
    // Their replacements carry new UIDs: the same annotation replaces nothing more.
    let (mut fresh, services) = world_of(&job, |_| Some("Running"));
    fresh.iter_mut().for_each(|p| p.metadata.uid = Some(format!("new-{}", p.name_any())));
    assert_eq!(decide(&job, &fresh, &services, now()).actions, vec![]);
}

#[test]
fn past_the_restart_limit_the_replica_stays_failed() {
    let job = job(1, 0, json!({"restartLimit": 2}));
    let (pods, mut services) = world_of(&job, |n| Some(if n == "job-collector-0" { "Failed" } else { "Running" }));
    services[1].annotations_mut().insert(annotations::RESTARTS.into(), "2".into());
    let plan = decide(&job, &pods, &services, now());
    assert_eq!(plan.actions, vec![]);
    let condition = plan.status.conditions.iter().find(|c| c.type_ == "RestartLimitExceeded").unwrap();
    assert_eq!(condition.status, "True");
    assert!(condition.message.as_deref().unwrap().contains("job-collector-0"));
}

#[test]
fn backoff_doubles_up_to_a_cap() {
    let got: Vec<u64> = (1..=7).map(|n| backoff(BACKOFF, n).as_secs()).collect();
    assert_eq!(got, vec![10, 20, 40, 80, 160, 300, 300]);
    assert_eq!(backoff(BACKOFF, 1000), Duration::from_secs(300));
}

#[test]
fn coordinator_success_cleans_up_by_policy() {
    let running_job = |policy: &str| {
        with_status(
            job(2, 1, json!({"cleanPodPolicy": policy})),
            DIJobStatus { phase: Some(Phase::Running), ..Default::default() },
        )
    };
    let phases = |n: &str| {
        Some(match n {
            "job-coordinator" => "Succeeded",
            "job-collector-1" => "Failed",
            _ => "Running",
        })
    };
    let cases = [
        ("Running", vec!["job-collector-0", "job-learner-0"]),
        ("All", vec!["job-coordinator", "job-collector-0", "job-collector-1", "job-learner-0"]),
        ("None", vec![]),
    ];
    for (policy, want) in cases {
        let job = running_job(policy);
        let (pods, services) = world_of(&job, phases);
        let plan = decide(&job, &pods, &services, now());
        assert_eq!(plan.status.phase, Some(Phase::Succeeded), "{policy}");
        let got: Vec<String> = deleted(&plan.actions)
            .into_iter()
            .map(|(n, why)| {
                assert_eq!(why, Why::Cleanup);
                n
            })
            .collect();
        let mut got_sorted = got.clone();
        got_sorted.sort();
        let mut want_sorted: Vec<String> = want.iter().map(|s| s.to_string()).collect();
        want_sorted.sort();
        assert_eq!(got_sorted, want_sorted, "policy {policy}");
        assert_eq!(
            plan.actions.iter().filter(|a| matches!(a, Action::DeleteService { .. })).count(),
            4,
            "{policy}: services go"
        );
        assert!(plan.actions.contains(&Action::DeleteRbac), "{policy}: the sidecar's identity goes");
        assert!(created(&plan.actions).is_empty(), "{policy}: nothing is created for a finished job");
    }
}

#[test]
fn coordinator_failure_fails_the_job_with_its_message() {
    let job = with_status(job(1, 0, json!({})), DIJobStatus { phase: Some(Phase::Running), ..Default::default() });
    let (mut pods, services) = world_of(&job, |n| Some(if n == "job-coordinator" { "Failed" } else { "Running" }));
    pods[0].status.as_mut().unwrap().message = Some("OOMKilled".into());
    let plan = decide(&job, &pods, &services, now());
    assert_eq!(plan.status.phase, Some(Phase::Failed));
    let failed = plan.status.conditions.iter().find(|c| c.type_ == "Failed").unwrap();
    assert_eq!(failed.reason.as_deref(), Some("CoordinatorFailed"));
    assert_eq!(failed.message.as_deref(), Some("the coordinator failed: OOMKilled"));
    let running = plan.status.conditions.iter().find(|c| c.type_ == "Running");
    assert!(running.is_none() || running.unwrap().status == "False");
}

#[test]
fn a_finished_job_with_a_ttl_is_deleted_when_it_expires() {
    let finished = |at: Timestamp| {
        let mut j = job(0, 0, json!({"ttlSecondsAfterFinished": 60}));
        let mut status = DIJobStatus { phase: Some(Phase::Succeeded), ..Default::default() };
        di_core::status::set_condition(&mut status.conditions, "Succeeded", true, "CoordinatorSucceeded", "", at);
        j.status = Some(status);
        j
    };
    let job = finished(now());
    let early = decide(&job, &[], &[], now() + SignedDuration::from_secs(20));
    assert!(!early.actions.contains(&Action::DeleteJob));
    assert_eq!(early.requeue_after, Some(Duration::from_secs(40)));
    let late = decide(&job, &[], &[], now() + SignedDuration::from_secs(61));
    assert!(late.actions.contains(&Action::DeleteJob));
}

#[test]
fn suspend_deletes_everything_and_resume_recreates() {
    let running = job(2, 0, json!({}));
    let (pods, services) = world_of(&running, |_| Some("Running"));
    let suspended = with_status(
        job(2, 0, json!({"suspend": true})),
        DIJobStatus { phase: Some(Phase::Running), ..Default::default() },
    );
    let plan = decide(&suspended, &pods, &services, now());
    assert_eq!(deleted(&plan.actions).len(), 3);
    assert!(deleted(&plan.actions).iter().all(|(_, why)| *why == Why::Suspended));
    assert_eq!(plan.actions.iter().filter(|a| matches!(a, Action::DeleteService { .. })).count(), 3);
    assert!(created(&plan.actions).is_empty());
    let condition = plan.status.conditions.iter().find(|c| c.type_ == "Suspended").unwrap();
    assert_eq!(condition.status, "True");

    let resumed = with_status(job(2, 0, json!({"suspend": false})), plan.status);
    let plan = decide(&resumed, &[], &[], now());
    assert_eq!(created(&plan.actions), vec!["job-coordinator", "job-collector-0", "job-collector-1"]);
    let condition = plan.status.conditions.iter().find(|c| c.type_ == "Suspended").unwrap();
    assert_eq!((condition.status.as_str(), condition.reason.as_deref()), ("False", Some("JobResumed")));
}

#[test]
fn an_aggregator_failure_replaces_its_ddp_learners_too() {
    let settings = Settings { max_gpus_per_pod: 2, ..Settings::default() };
    let job = job(0, 1, json!({"learner": {"gpus": 4}}));
    let config: di_api::AggregatorConfig = serde_json::from_value(json!({
        "apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "AggregatorConfig",
        "metadata": {"name": "aggregator-config", "namespace": "di-system"},
        "spec": {"aggregator": {"template": {"spec": {"containers": [{"name": "di-container", "image": "agg"}]}}}}
    }))
    .unwrap();
    let replicas = desired::replicas(&job, Some(&config), &settings).unwrap();
    let pods: Vec<Pod> = replicas
        .iter()
        .map(|r| observed(r.pod.clone(), if r.name() == "job-aggregator-0" { "Failed" } else { "Running" }))
        .collect();
    let services: Vec<Service> = replicas.iter().map(|r| r.service.clone()).collect();
    let world = World {
        pods: pods.iter().collect(),
        services: services.iter().collect(),
        taken: Default::default(),
        aggregator_config: Some(&config),
        missing_aggregator_config: None,
        queue: None,
        now: now(),
    };
    let first = plan(&job, &world, &settings, BACKOFF).unwrap();
    assert_eq!(
        deleted(&first.actions),
        vec![
            ("job-aggregator-0".to_string(), Why::Failed),
            ("job-ddp-learner-0-0".into(), Why::AggregatorFailed),
            ("job-ddp-learner-0-1".into(), Why::AggregatorFailed),
        ]
    );

    // While the AggregatorConfig is missing, existing learners are kept and the job says why.
    let world = World {
        pods: pods.iter().collect(),
        services: services.iter().collect(),
        taken: Default::default(),
        aggregator_config: None,
        missing_aggregator_config: Some("di-system/aggregator-config".into()),
        queue: None,
        now: now(),
    };
    let waiting = plan(&job, &world, &settings, BACKOFF).unwrap();
    assert!(deleted(&waiting.actions).is_empty(), "{:?}", waiting.actions);
    let condition = waiting.status.conditions.iter().find(|c| c.type_ == "AggregatorConfigNotFound").unwrap();
    assert_eq!(condition.status, "True");
}
