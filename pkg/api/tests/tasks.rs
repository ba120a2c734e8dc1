//! Task jobs (DI-orchestrator 1.x's form): each rule breaks one thing in a valid task job and
//! expects exactly one error at the right field; defaults; the version rule; the examples.

mod common;

use di_api::defaults::default_dijob;
use di_api::validation::{validate_dijob, validate_dijob_update};
use di_api::{DIJob, JobRestartPolicy, TaskType};
use serde_json::json;

fn task_job() -> DIJob {
    let template = json!({"spec": {"containers": [{"name": "di-container", "image": "ding"}]}});
    serde_json::from_value(json!({
        "apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob",
        "metadata": {"name": "cartpole", "namespace": "default"},
        "spec": {"tasks": [
            {"type": "learner", "template": template},
            {"name": "collector", "type": "collector", "replicas": 4, "template": template},
        ]},
    }))
    .unwrap()
}

fn errors(mut job: DIJob) -> Vec<(String, String)> {
    default_dijob(&mut job);
    match validate_dijob(&job) {
        Ok(()) => vec![],
        Err(e) => e.0.into_iter().map(|e| (e.path, e.message)).collect(),
    }
}

#[test]
fn defaults_follow_1_x() {
    let mut job = task_job();
    default_dijob(&mut job);
    let tasks = job.spec.tasks.as_ref().unwrap();
    assert_eq!(tasks[0].name.as_deref(), Some("learner"), "a task without a name takes its type's");
    assert_eq!(tasks[0].replicas, Some(1));
    assert_eq!(tasks[0].template.spec.as_ref().unwrap().restart_policy.as_deref(), Some("Never"));
    assert_eq!((job.spec.backoff_limit, job.spec.restart_policy), (Some(3), Some(JobRestartPolicy::Pod)));
    assert_eq!(job.spec.clean_pod_policy.as_deref(), Some("Running"));
    let again = {
        let mut j = job.clone();
        default_dijob(&mut j);
        j
    };
    assert_eq!(again, job, "defaulting twice changes nothing");
    assert_eq!(errors(task_job()), vec![]);
}

#[test]
fn each_task_rule_names_its_field() {
    type Mutate = fn(&mut DIJob);
    let cases: Vec<(&str, Mutate, &str, &str)> = vec![
        (
            "no tasks",
            |j| j.spec.tasks = Some(vec![]),
            "spec.tasks",
            "Required value: a task job needs at least one task",
        ),
        (
            "mixed with roles",
            |j| j.spec.coordinator = Some(Default::default()),
            "spec.coordinator",
            "Forbidden: a job has either roles",
        ),
        (
            "duplicate name",
            |j| j.spec.tasks.as_mut().unwrap()[1].name = Some("learner".into()),
            "spec.tasks[1].name",
            "Duplicate value \"learner\"",
        ),
        (
            "bad name",
            |j| j.spec.tasks.as_mut().unwrap()[1].name = Some("Collector_1".into()),
            "spec.tasks[1].name",
            "Invalid value \"Collector_1\": a task name",
        ),
        (
            "duplicate type",
            |j| j.spec.tasks.as_mut().unwrap()[1].type_ = Some(TaskType::Learner),
            "spec.tasks[1].type",
            "Duplicate value \"learner\": spec.tasks[0] has that type",
        ),
        (
            "a none task without a name",
            |j| {
                let t = &mut j.spec.tasks.as_mut().unwrap()[1];
                t.name = None;
                t.type_ = Some(TaskType::None);
            },
            "spec.tasks[1].name",
            "Required value: a task of type none",
        ),
        (
            "zero replicas",
            |j| j.spec.tasks.as_mut().unwrap()[1].replicas = Some(0),
            "spec.tasks[1].replicas",
            "Invalid value: 0: a task has between 1 and 1000 pods",
        ),
        (
            "too many replicas",
            |j| j.spec.tasks.as_mut().unwrap()[1].replicas = Some(1001),
            "spec.tasks[1].replicas",
            "between 1 and 1000",
        ),
        (
            "pod names too long",
            |j| j.spec.tasks.as_mut().unwrap()[1].name = Some("c".repeat(55)),
            "spec.tasks[1].name",
            "Too long: the task's last pod would be",
        ),
        (
            "no container",
            |j| j.spec.tasks.as_mut().unwrap()[0].template = Default::default(),
            "spec.tasks[0].template.spec.containers",
            "Required value: the task needs at least one container",
        ),
        (
            "the deciding task restarts forever",
            |j| {
                j.spec.tasks.as_mut().unwrap()[0].template.spec.as_mut().unwrap().restart_policy = Some("Always".into())
            },
            "spec.tasks[0].template.spec.restartPolicy",
            "Unsupported value \"Always\": this task decides the job's success",
        ),
        ("restartLimit on a task job", |j| j.spec.restart_limit = Some(2), "spec.restartLimit", "use that"),
        ("negative backoff limit", |j| j.spec.backoff_limit = Some(-1), "spec.backoffLimit", "Invalid value: -1"),
        ("job name too long", |j| j.metadata.name = Some("j".repeat(61)), "metadata.name", "use at most 60"),
        (
            "a minimum above the task's pods",
            |j| j.spec.tasks.as_mut().unwrap()[1].min_available = Some(5),
            "spec.tasks[1].minAvailable",
            "Invalid value: 5: more than the task's 4 pods; give at most 4, or 0",
        ),
        (
            "a negative minimum",
            |j| j.spec.tasks.as_mut().unwrap()[1].min_available = Some(-1),
            "spec.tasks[1].minAvailable",
            "Invalid value: -1: must be 0",
        ),
        (
            "a minimum without a gang",
            |j| {
                j.spec.gang = Some(di_api::GangSpec { enabled: Some(false) });
                j.spec.tasks.as_mut().unwrap()[1].min_available = Some(2);
            },
            "spec.tasks[1].minAvailable",
            "Forbidden: spec.gang.enabled is false",
        ),
    ];
    for (name, mutate, path, message) in cases {
        let mut job = task_job();
        mutate(&mut job);
        let got = errors(job);
        assert_eq!(got.len(), 1, "{name}: want exactly one error, got {got:#?}");
        assert_eq!(got[0].0, path, "{name}");
        assert!(got[0].1.contains(message), "{name}: {:?} lacks {message:?}", got[0].1);
    }

    // Task-job fields on a role job are refused, not ignored.
    let mut role_job = common::valid_job();
    role_job.spec.backoff_limit = Some(3);
    let got = errors(role_job);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0, "spec.backoffLimit");
}

#[test]
fn a_live_task_job_may_scale_but_not_reshape() {
    let old = task_job();
    let update = |change: fn(&mut DIJob)| {
        let mut new = old.clone();
        change(&mut new);
        validate_dijob_update(&old, &new).err().map(|e| e.0.into_iter().map(|e| e.path).collect::<Vec<_>>())
    };
    assert_eq!(update(|j| j.spec.tasks.as_mut().unwrap()[1].replicas = Some(8)), None);
    assert_eq!(update(|j| j.spec.restart_policy = Some(JobRestartPolicy::Job)), None);
    assert_eq!(update(|j| j.spec.tasks.as_mut().unwrap()[1].min_available = Some(2)), None, "a gang's minimum scales");
    assert_eq!(
        update(|j| j.spec.gang = Some(di_api::GangSpec { enabled: Some(false) })),
        Some(vec!["spec.gang.enabled".into()])
    );
    assert_eq!(update(|j| j.spec.gang = Some(di_api::GangSpec { enabled: Some(true) })), None, "the default, said");
    assert_eq!(
        update(|j| j.spec.tasks.as_mut().unwrap().pop().map(drop).unwrap_or(())),
        Some(vec!["spec.tasks".into()])
    );
    assert_eq!(
        update(|j| j.spec.tasks.as_mut().unwrap()[1].template.spec.as_mut().unwrap().containers[0].image =
            Some("x".into())),
        Some(vec!["spec.tasks[1].template".into()])
    );
    assert_eq!(
        update(|j| {
            j.spec.tasks = None;
            *j = common::valid_job();
        }),
        Some(vec!["spec.tasks".into()])
    );
}

#[test]
fn the_task_examples_are_valid() {
    for name in ["ditask-cartpole.yaml", "sample-factory.yaml", "srl.yaml"] {
        let mut job = common::example_job(name);
        default_dijob(&mut job);
        assert_eq!(validate_dijob(&job), Ok(()), "{name}");
        assert!(job.spec.is_task_job(), "{name}");
    }
}
