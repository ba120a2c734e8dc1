//! Every validation rule, table-driven: each case breaks one thing in a valid job and expects
//! exactly one error, at the right field, with a message that says how to fix it.
//! The coordinator's own rules (what keeps its replica endpoint its own) are `coordinator.rs`.

mod common;

use common::{Mutation, defaulted, each_refused_once, errors, pod, set_json, valid_job};
use di_api::defaults::default_aggregator_config;
use di_api::validation::{validate_aggregator_config, validate_dijob};
use di_api::{AggregatorConfig, CollectorSpec};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use serde_json::json;

#[test]
fn valid_jobs_pass() {
    assert_eq!(errors(valid_job()), vec![]);
    let edge_cases: [(&str, Mutation); 8] = [
        ("43-character name", |j| j.metadata.name = Some("a".repeat(43))),
        ("generateName of 38 characters", |j| {
            j.metadata.name = None;
            j.metadata.generate_name = Some(format!("{}-", "a".repeat(37)));
        }),
        ("coordinator restarting on failure", |j| pod(j, "coordinator").restart_policy = Some("OnFailure".into())),
        ("collectors restarting always", |j| pod(j, "collector").restart_policy = Some("Always".into())),
        ("the most replicas and GPUs", |j| {
            j.spec.collector.as_mut().unwrap().replicas = Some(1000);
            let learner = j.spec.learner.as_mut().unwrap();
            learner.replicas = Some(1000);
            learner.gpus = Some(256);
        }),
        ("whole GPUs written as quantities", |j| {
            pod(j, "learner").containers[0].resources =
                Some(set_json(json!({"limits": {"nvidia.com/gpu": "2000m"}, "requests": {"nvidia.com/gpu": 2}})));
        }),
        ("a serial job with only a coordinator", |j| {
            j.spec.collector = None;
            j.spec.learner = None;
        }),
        ("an aggregatorConfig in another namespace", |j| {
            j.spec.learner.as_mut().unwrap().aggregator_config = Some("di-system/aggregator".into())
        }),
    ];
    for (name, mutate) in edge_cases {
        let mut job = valid_job();
        mutate(&mut job);
        assert_eq!(errors(job), vec![], "{name}");
    }
}

#[test]
fn each_rule_rejects_with_field_and_fix() {
    let cases: Vec<(&str, Mutation, &str, &str)> = vec![
        (
            "unknown clean pod policy",
            |j| j.spec.clean_pod_policy = Some("Sometimes".into()),
            "spec.cleanPodPolicy",
            "Unsupported value \"Sometimes\": use one of \"Running\", \"All\", \"None\"",
        ),
        (
            "no coordinator",
            |j| j.spec.coordinator = None,
            "spec.coordinator",
            "every DIJob needs a coordinator (or, as a task job, spec.tasks); add spec.coordinator.template",
        ),
        (
            "coordinator template without spec",
            |j| j.spec.coordinator.as_mut().unwrap().template = PodTemplateSpec::default(),
            "spec.coordinator.template.spec.containers",
            "the coordinator needs at least one container",
        ),
        (
            "collector without containers",
            |j| pod(j, "collector").containers.clear(),
            "spec.collector.template.spec.containers",
            "the collector needs at least one container; add one with a name and an image",
        ),
        (
            "collector role without a template",
            |j| j.spec.collector = Some(CollectorSpec { replicas: Some(1), ..Default::default() }),
            "spec.collector.template.spec.containers",
            "Required value",
        ),
        (
            "negative collectors",
            |j| j.spec.collector.as_mut().unwrap().replicas = Some(-1),
            "spec.collector.replicas",
            "Invalid value: -1: must be between 0 and 1000",
        ),
        (
            "absurd learners",
            |j| j.spec.learner.as_mut().unwrap().replicas = Some(1_000_000),
            "spec.learner.replicas",
            "Invalid value: 1000000: must be between 0 and 1000",
        ),
        (
            "negative GPUs",
            |j| j.spec.learner.as_mut().unwrap().gpus = Some(-2),
            "spec.learner.gpus",
            "must be between 0 and 256",
        ),
        (
            "absurd GPUs",
            |j| j.spec.learner.as_mut().unwrap().gpus = Some(257),
            "spec.learner.gpus",
            "must be between 0 and 256",
        ),
        (
            "name too long for derived names",
            |j| j.metadata.name = Some("a".repeat(44)),
            "metadata.name",
            "has 44 characters; the job's objects are named <name>-ddp-learner-<index>-<rank>, which must fit in 63 characters, so use at most 43",
        ),
        (
            "name with a dot",
            |j| j.metadata.name = Some("cart.pole".into()),
            "metadata.name",
            "must consist of lowercase letters, digits and '-'",
        ),
        (
            "name starting with a digit",
            |j| j.metadata.name = Some("1cartpole".into()),
            "metadata.name",
            "must start with a lowercase letter, since every pod of the job gets a Service of its own name",
        ),
        (
            "generateName too long",
            |j| {
                j.metadata.name = None;
                j.metadata.generate_name = Some("a".repeat(39));
            },
            "metadata.generateName",
            "use at most 38",
        ),
        (
            "generateName with capitals",
            |j| {
                j.metadata.name = None;
                j.metadata.generate_name = Some("Job-".into());
            },
            "metadata.generateName",
            "must consist of lowercase letters",
        ),
        (
            "duplicate port names",
            |j| {
                pod(j, "collector").containers[0].ports = Some(set_json(json!([
                {"name": "di-port", "containerPort": 22270}, {"name": "di-port", "containerPort": 22280}])));
            },
            "spec.collector.template.spec.containers[0].ports[1].name",
            "Duplicate value \"di-port\": port names must be unique in the pod",
        ),
        (
            "duplicate port numbers across containers",
            |j| {
                let spec = pod(j, "collector");
                spec.containers[0].ports = Some(set_json(json!([{"name": "di-port", "containerPort": 22270}])));
                spec.containers
                    .push(set_json(json!({"name": "sidecar", "image": "s", "ports": [{"containerPort": 22270}]})));
            },
            "spec.collector.template.spec.containers[1].ports[0].containerPort",
            "Duplicate value: 22270/TCP: another port of the pod already uses it",
        ),
        (
            "port number out of range",
            |j| {
                pod(j, "learner").containers[0].ports =
                    Some(set_json(json!([{"name": "di-port", "containerPort": 70000}])));
            },
            "spec.learner.template.spec.containers[0].ports[0].containerPort",
            "Invalid value: 70000: must be between 1 and 65535",
        ),
        (
            "port number zero",
            |j| {
                pod(j, "learner").containers[0].ports =
                    Some(set_json(json!([{"name": "di-port", "containerPort": 0}])));
            },
            "spec.learner.template.spec.containers[0].ports[0].containerPort",
            "must be between 1 and 65535",
        ),
        (
            "invalid port name",
            |j| {
                pod(j, "learner").containers[0].ports = Some(set_json(json!([
                {"name": "di-port", "containerPort": 22271}, {"name": "Metrics_Port", "containerPort": 9090}])));
            },
            "spec.learner.template.spec.containers[0].ports[1].name",
            "a port name must be 1 to 15 lowercase letters",
        ),
        (
            "unknown protocol",
            |j| {
                pod(j, "learner").containers[0].ports =
                    Some(set_json(json!([{"name": "di-port", "containerPort": 22271, "protocol": "HTTP"}])));
            },
            "spec.learner.template.spec.containers[0].ports[0].protocol",
            "Unsupported value \"HTTP\"",
        ),
        (
            "half a GPU",
            |j| {
                pod(j, "learner").containers[0].resources =
                    Some(set_json(json!({"limits": {"nvidia.com/gpu": "0.5"}})));
            },
            "spec.learner.template.spec.containers[0].resources.limits[nvidia.com/gpu]",
            "GPUs are counted in whole devices",
        ),
        (
            "GPUs in milli-units",
            |j| {
                pod(j, "collector").containers[0].resources =
                    Some(set_json(json!({"requests": {"nvidia.com/gpu": "1500m"}})));
            },
            "spec.collector.template.spec.containers[0].resources.requests[nvidia.com/gpu]",
            "GPUs are counted in whole devices",
        ),
        (
            "GPU request differs from limit",
            |j| {
                pod(j, "learner").containers[0].resources =
                    Some(set_json(json!({"limits": {"nvidia.com/gpu": 2}, "requests": {"nvidia.com/gpu": 1}})));
            },
            "spec.learner.template.spec.containers[0].resources.requests[nvidia.com/gpu]",
            "GPU requests must equal GPU limits (2)",
        ),
        (
            "not a quantity",
            |j| {
                pod(j, "learner").containers[0].resources = Some(set_json(json!({"limits": {"memory": "lots"}})));
            },
            "spec.learner.template.spec.containers[0].resources.limits[memory]",
            "not a quantity; write e.g. 2, 500m or 4Gi",
        ),
        (
            "mount of an unknown volume",
            |j| {
                pod(j, "collector").containers[0].volume_mounts =
                    Some(set_json(json!([{"name": "data", "mountPath": "/data"}])));
            },
            "spec.collector.template.spec.containers[0].volumeMounts[0].name",
            "Not found \"data\": no volume of that name in spec.volumes or in the template's volumes; add it to spec.volumes",
        ),
        (
            "duplicate job volumes",
            |j| {
                j.spec.volumes.as_mut().unwrap().push(set_json(json!({"name": "work-dir", "emptyDir": {}})));
            },
            "spec.volumes[1].name",
            "Duplicate value \"work-dir\": volume names must be unique",
        ),
        (
            "invalid volume name",
            |j| {
                j.spec.volumes.as_mut().unwrap().push(set_json(json!({"name": "Work_Dir", "emptyDir": {}})));
            },
            "spec.volumes[1].name",
            "a volume name must consist of lowercase letters",
        ),
        (
            "template volume shadows a job volume",
            |j| {
                pod(j, "learner").volumes = Some(set_json(json!([{"name": "work-dir", "emptyDir": {}}])));
            },
            "spec.learner.template.spec.volumes[0].name",
            "spec.volumes already gives every pod a volume of that name; rename one",
        ),
        (
            "coordinator restarting always",
            |j| pod(j, "coordinator").restart_policy = Some("Always".into()),
            "spec.coordinator.template.spec.restartPolicy",
            "the coordinator's exit decides the job's phase, so use \"Never\" (the default) or \"OnFailure\"",
        ),
        (
            "unknown restart policy",
            |j| pod(j, "collector").restart_policy = Some("Sometimes".into()),
            "spec.collector.template.spec.restartPolicy",
            "Unsupported value \"Sometimes\": use one of \"Always\", \"OnFailure\", \"Never\"",
        ),
        (
            "container without a name",
            |j| pod(j, "collector").containers[0].name = String::new(),
            "spec.collector.template.spec.containers[0].name",
            "Required value: name the container",
        ),
        (
            "container with an invalid name",
            |j| pod(j, "collector").containers[0].name = "DI container".into(),
            "spec.collector.template.spec.containers[0].name",
            "a container name must consist of lowercase letters",
        ),
        (
            "init container named like a container",
            |j| {
                pod(j, "collector").init_containers =
                    Some(set_json(json!([{"name": "di-container", "image": "init"}])));
            },
            "spec.collector.template.spec.containers[0].name",
            "Duplicate value \"di-container\": container names must be unique in the pod",
        ),
        (
            "container without an image",
            |j| pod(j, "learner").containers[0].image = None,
            "spec.learner.template.spec.containers[0].image",
            "Required value: set the container image",
        ),
        (
            "init container without an image",
            |j| {
                pod(j, "learner").init_containers = Some(set_json(json!([{"name": "init"}])));
            },
            "spec.learner.template.spec.initContainers[0].image",
            "Required value: set the container image",
        ),
        (
            "invalid aggregatorConfig",
            |j| j.spec.learner.as_mut().unwrap().aggregator_config = Some("Di_System/ag".into()),
            "spec.learner.aggregatorConfig",
            "the namespace must consist of lowercase letters, digits and '-'",
        ),
        (
            "empty aggregatorConfig name",
            |j| j.spec.learner.as_mut().unwrap().aggregator_config = Some(String::new()),
            "spec.learner.aggregatorConfig",
            "the name must not be empty",
        ),
        (
            "invalid priority class",
            |j| j.spec.priority_class_name = Some("High Priority".into()),
            "spec.priorityClassName",
            "Invalid value \"High Priority\": a PriorityClass name must consist of lowercase letters",
        ),
        (
            "negative restart limit",
            |j| j.spec.restart_limit = Some(-1),
            "spec.restartLimit",
            "Invalid value: -1: must be 0 or more",
        ),
        (
            "negative TTL",
            |j| j.spec.ttl_seconds_after_finished = Some(-5),
            "spec.ttlSecondsAfterFinished",
            "Invalid value: -5: must be 0 or more",
        ),
    ];
    each_refused_once(cases);
}

#[test]
fn errors_are_all_reported_in_one_message() {
    let mut job = valid_job();
    job.spec.clean_pod_policy = Some("x".into());
    job.spec.restart_limit = Some(-1);
    let err = validate_dijob(&defaulted(job)).unwrap_err();
    assert_eq!(err.0.len(), 2);
    assert_eq!(
        err.to_string(),
        "spec.cleanPodPolicy: Unsupported value \"x\": use one of \"Running\", \"All\", \"None\"; \
         spec.restartLimit: Invalid value: -1: must be 0 or more (leave it unset for no limit)"
    );
}

#[test]
fn aggregator_config() {
    let docs = common::example_documents("multi-gpu-learner.yaml");
    let doc = docs.into_iter().find(|d| d["kind"] == "AggregatorConfig").unwrap();
    let mut config: AggregatorConfig = serde_json::from_value(doc).unwrap();
    default_aggregator_config(&mut config);
    assert_eq!(validate_aggregator_config(&config), Ok(()));

    // Mounts may name the job's volumes, which the config cannot know.
    let mut mounting = config.clone();
    mounting.spec.aggregator.template.spec.as_mut().unwrap().containers[0].volume_mounts =
        Some(set_json(json!([{"name": "work-dir", "mountPath": "/ding"}])));
    assert_eq!(validate_aggregator_config(&mounting), Ok(()));

    let mut empty = config.clone();
    empty.spec.aggregator.template.spec.as_mut().unwrap().containers.clear();
    let err = validate_aggregator_config(&empty).unwrap_err();
    assert_eq!(
        err.to_string(),
        "spec.aggregator.template.spec.containers: Required value: the aggregator needs at least one container; add one with a name and an image"
    );
}
