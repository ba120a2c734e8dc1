//! Wire compatibility with DI-orchestrator 0.2 and the checked-in examples.

mod common;

use common::{example_documents, example_job};
use di_api::defaults::default_dijob;
use di_api::validation::validate_dijob;
use di_api::{DIJob, Phase};
use serde_json::{Value, json};

/// The API server keeps a template's quantities as written; our typed view writes them as
/// strings. Make the raw document say what the typed one will.
fn quantities_as_strings(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                if (key == "limits" || key == "requests") && child.is_object() {
                    for q in child.as_object_mut().unwrap().values_mut() {
                        if q.is_number() {
                            *q = Value::String(q.to_string());
                        }
                    }
                } else {
                    quantities_as_strings(child);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(quantities_as_strings),
        _ => {}
    }
}

#[test]
fn a_0_2_job_round_trips_unchanged() {
    let mut raw = example_documents("cartpole-dqn.yaml").remove(0);
    let job: DIJob = serde_json::from_value(raw.clone()).expect("0.2 job parses");
    quantities_as_strings(&mut raw);
    assert_eq!(serde_json::to_value(&job).unwrap(), raw);

    // Every 0.2 field means what it meant.
    assert_eq!(job.spec.group.as_deref(), Some("cartpole"));
    assert_eq!(job.spec.priority_class_name.as_deref(), Some(""));
    assert_eq!(job.spec.clean_pod_policy.as_deref(), Some("Running"));
    assert_eq!(job.spec.volumes.as_ref().map(Vec::len), Some(2));
    for role in job.spec.role_templates() {
        assert_eq!(role.template.spec.as_ref().unwrap().containers[0].name, "di-container", "{}", role.path);
    }
    // And it is a valid job as it stands.
    let mut defaulted = job.clone();
    default_dijob(&mut defaulted);
    assert_eq!(validate_dijob(&defaulted), Ok(()));
}

#[test]
fn legacy_all_policy_is_accepted_and_normalised() {
    let mut job = example_job("cartpole-dqn.yaml");
    job.spec.clean_pod_policy = Some("ALL".into());
    default_dijob(&mut job);
    assert_eq!(job.spec.clean_pod_policy.as_deref(), Some("All"));
    assert_eq!(validate_dijob(&job), Ok(()));
}

#[test]
fn a_0_2_status_parses() {
    let job: DIJob = serde_json::from_value(json!({
        "apiVersion": "diengine.opendilab.org/v1alpha1",
        "kind": "DIJob",
        "metadata": {"name": "cartpole-dqn"},
        "spec": {"coordinator": {"template": {"spec": {"containers": [{"name": "di-container", "image": "ding"}]}}}},
        "status": {
            "phase": "Running",
            "conditions": [{
                "type": "Running", "status": "True", "reason": "JobRunning", "message": "coordinator is running",
                "lastUpdateTime": "2021-09-26T10:00:00Z", "lastTransitionTime": "2021-09-26T10:00:00Z"
            }],
            "replicaStatus": {"Coordinator": {"active": 1}, "Collector": {"active": 2, "failed": 1}, "Learner": {}}
        }
    }))
    .expect("0.2 status parses");
    let status = job.status.unwrap();
    assert_eq!(status.phase, Some(Phase::Running));
    assert_eq!(status.conditions[0].type_, "Running");
    assert_eq!(status.replica_status["Collector"].failed, 1);
    assert_eq!(status.replica_status["Learner"].active, 0);
}

/// What DI-orchestrator 1.1 stores of a task job: every status field it writes, the phase it
/// writes while pods move (`Rescheduling`), its condition reasons.
#[test]
fn a_1_x_status_parses_with_every_phase_it_writes() {
    for phase in ["Pending", "Starting", "Running", "Restarting", "Rescheduling", "Succeeded", "Failed"] {
        let at = "2022-06-01T10:00:00Z";
        let job: DIJob = serde_json::from_value(json!({
            "apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob",
            "metadata": {"name": "gobang"},
            "spec": {"priority": "normal", "cleanPodPolicy": "Running", "preemptible": false, "backoffLimit": 3,
                     "tasks": [{"replicas": 1, "type": "learner", "name": "learner",
                                "template": {"spec": {"containers": [{"name": "di-container", "image": "ding"}]}}}]},
            "status": {
                "completionTimestamp": at, "restarts": 1, "reschedules": 2, "phase": phase, "replicas": 1,
                "readyReplicas": 1, "taskStatus": {"learner": {"Running": 1}}, "allocation": ["node-a"],
                "profilings": {},
                "conditions": [{"type": phase, "status": "True", "reason": format!("Job{phase}"),
                                "message": "", "lastUpdateTime": at, "lastTransitionTime": at}]
            }
        }))
        .unwrap_or_else(|e| panic!("a 1.x job in {phase} parses: {e}"));
        let status = job.status.unwrap();
        assert_eq!(serde_json::to_value(status.phase).unwrap(), phase);
        assert_eq!((status.restarts, status.task_status["learner"]["Running"]), (Some(1), 1));
    }
}

/// A phase no version wrote (a future one, a hand edit) is not fatal: it reads as Unknown.
#[test]
fn an_unheard_of_phase_reads_as_unknown() {
    let status: di_api::DIJobStatus = serde_json::from_value(json!({"phase": "Migrating"})).unwrap();
    assert_eq!(status.phase, Some(Phase::Unknown));
}

#[test]
fn integer_quantities_parse() {
    let job = example_job("cartpole-dqn.yaml");
    let coordinator = &job.spec.coordinator.unwrap().template.spec.unwrap().containers[0];
    let requests = coordinator.resources.as_ref().unwrap().requests.as_ref().unwrap();
    assert_eq!(requests["cpu"].0, "1");
    assert_eq!(requests["memory"].0, "2Gi");
}

#[test]
fn multi_gpu_example_is_valid() {
    let mut job = example_job("multi-gpu-learner.yaml");
    default_dijob(&mut job);
    assert_eq!(validate_dijob(&job), Ok(()));
    let learner = job.spec.learner.unwrap();
    assert_eq!((learner.replicas, learner.gpus), (Some(1), Some(4)));
}

#[test]
fn invalid_example_names_every_problem() {
    let mut job = example_job("invalid.yaml");
    default_dijob(&mut job);
    let got: Vec<String> = validate_dijob(&job).unwrap_err().0.into_iter().map(|e| e.path).collect();
    assert_eq!(
        got,
        vec![
            "spec.cleanPodPolicy",
            "spec.coordinator.template.spec.restartPolicy",
            "spec.coordinator.template.spec.containers[0].ports[1].containerPort",
            "spec.coordinator.template.spec.containers[0].ports[1].name",
            "spec.collector.template.spec.containers",
            "spec.learner.template.spec.containers[0].resources.limits[nvidia.com/gpu]",
            "spec.collector.replicas",
        ]
    );
}

/// restartLimit counts failed pods; a template that restarts in place never fails one, and the
/// webhook says so (a warning, not a refusal). The examples heed their own advice.
#[test]
fn a_restart_limit_over_pods_that_restart_in_place_is_warned_about() {
    let mut job = common::valid_job();
    job.spec.restart_limit = Some(3);
    default_dijob(&mut job);
    let said = di_api::validation::warnings(&job);
    assert!(!said.is_empty(), "the collectors' pods default to restartPolicy Always");
    assert!(
        said.iter().all(|w| w.starts_with("spec.restartLimit: ") && w.contains("restartPolicy: Never")),
        "{said:?}"
    );
    let (collector, learner) = (job.spec.collector.as_mut().unwrap(), job.spec.learner.as_mut().unwrap());
    for template in [&mut collector.template, &mut learner.template] {
        template.spec.as_mut().unwrap().restart_policy = Some("Never".into());
    }
    assert_eq!(di_api::validation::warnings(&job), Vec::<String>::new());
    for name in ["cartpole-dqn.yaml", "demo.yaml", "multi-gpu-learner.yaml", "ditask-cartpole.yaml"] {
        let mut job = example_job(name);
        default_dijob(&mut job);
        assert_eq!(di_api::validation::warnings(&job), Vec::<String>::new(), "{name}");
    }
}
