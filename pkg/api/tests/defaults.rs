//! Every defaulting rule, table-driven.

mod common;

use common::valid_job;
use di_api::contract::PORT_NAME;
use di_api::defaults::{default_aggregator_config, default_dijob};
use di_api::{AggregatorConfig, DIJob};
use k8s_openapi::api::core::v1::{Container, ContainerPort, PodTemplateSpec};
use serde_json::json;

fn defaulted(mut job: DIJob) -> DIJob {
    default_dijob(&mut job);
    job
}

fn template(spec: serde_json::Value) -> PodTemplateSpec {
    serde_json::from_value(json!({ "spec": spec })).unwrap()
}

fn ports(c: &Container) -> Vec<(Option<String>, i32)> {
    c.ports.iter().flatten().map(|p| (p.name.clone(), p.container_port)).collect()
}

fn di_port(n: i32) -> (Option<String>, i32) {
    (Some(PORT_NAME.into()), n)
}

#[test]
fn clean_pod_policy() {
    let cases: [(Option<&str>, &str); 7] = [
        (None, "Running"),
        (Some(""), "Running"),
        (Some("ALL"), "All"),
        (Some("All"), "All"),
        (Some("None"), "None"),
        (Some("Running"), "Running"),
        // Left for validation to reject, with the value the user wrote.
        (Some("Sometimes"), "Sometimes"),
    ];
    for (given, want) in cases {
        let mut job = valid_job();
        job.spec.clean_pod_policy = given.map(Into::into);
        assert_eq!(defaulted(job).spec.clean_pod_policy.as_deref(), Some(want), "cleanPodPolicy {given:?}");
    }
}

#[test]
fn coordinator_restart_policy() {
    let cases = [(None, Some("Never")), (Some("OnFailure"), Some("OnFailure")), (Some("Never"), Some("Never"))];
    for (given, want) in cases {
        let mut job = valid_job();
        let pod = job.spec.coordinator.as_mut().unwrap().template.spec.as_mut().unwrap();
        pod.restart_policy = given.map(Into::into);
        let job = defaulted(job);
        let got = job.spec.coordinator.unwrap().template.spec.unwrap().restart_policy;
        assert_eq!(got.as_deref(), want, "coordinator restartPolicy {given:?}");
    }
    // Other roles keep Kubernetes' own default.
    let job = defaulted(valid_job());
    assert_eq!(job.spec.collector.unwrap().template.spec.unwrap().restart_policy, None);
}

#[test]
fn role_ports() {
    let job = defaulted(valid_job());
    let main = |t: &PodTemplateSpec| ports(&t.spec.as_ref().unwrap().containers[0]);
    assert_eq!(main(&job.spec.coordinator.unwrap().template), vec![di_port(22273)]);
    assert_eq!(main(&job.spec.collector.unwrap().template), vec![di_port(22270)]);
    assert_eq!(main(&job.spec.learner.unwrap().template), vec![di_port(22271)]);

    let mut config = AggregatorConfig::new("ag", Default::default());
    config.spec.aggregator.template = template(json!({"containers": [{"name": "di-container", "image": "ding"}]}));
    default_aggregator_config(&mut config);
    assert_eq!(ports(&config.spec.aggregator.template.spec.unwrap().containers[0]), vec![di_port(22272)]);
}

#[test]
fn template_port_cases() {
    struct Case {
        name: &'static str,
        spec: serde_json::Value,
        want: Vec<Vec<(Option<String>, i32)>>,
    }
    let cases = [
        Case {
            name: "a user's di-port is kept as written",
            spec: json!({"containers": [{"name": "c", "image": "i", "ports": [{"name": "di-port", "containerPort": 22270}]}]}),
            want: vec![vec![di_port(22270)]],
        },
        Case {
            name: "other ports are kept and di-port is added",
            spec: json!({"containers": [{"name": "c", "image": "i", "ports": [{"name": "metrics", "containerPort": 9090}]}]}),
            want: vec![vec![(Some("metrics".into()), 9090), di_port(22270)]],
        },
        Case {
            name: "the container named di-container is the main one",
            spec: json!({"containers": [{"name": "sidecar", "image": "i"}, {"name": "di-container", "image": "i"}]}),
            want: vec![vec![], vec![di_port(22270)]],
        },
        Case {
            name: "without di-container the first container is the main one",
            spec: json!({"containers": [{"name": "a", "image": "i"}, {"name": "b", "image": "i"}]}),
            want: vec![vec![di_port(22270)], vec![]],
        },
        Case {
            name: "a di-port on any container is enough",
            spec: json!({"containers": [{"name": "a", "image": "i"}, {"name": "b", "image": "i", "ports": [{"name": "di-port", "containerPort": 5000}]}]}),
            want: vec![vec![], vec![di_port(5000)]],
        },
        Case {
            name: "an unnamed port on the default number is named rather than declared twice",
            spec: json!({"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 22270}]}]}),
            want: vec![vec![di_port(22270)]],
        },
        Case { name: "no containers: nothing to default", spec: json!({"containers": []}), want: vec![] },
    ];
    for case in cases {
        let mut job = valid_job();
        job.spec.collector.as_mut().unwrap().template = template(case.spec);
        let job = defaulted(job);
        let got: Vec<_> = job.spec.collector.unwrap().template.spec.unwrap().containers.iter().map(ports).collect();
        assert_eq!(got, case.want, "{}", case.name);
    }
}

#[test]
fn added_port_is_tcp() {
    let job = defaulted(valid_job());
    let port: &ContainerPort =
        &job.spec.collector.as_ref().unwrap().template.spec.as_ref().unwrap().containers[0].ports.as_ref().unwrap()[0];
    assert_eq!(port.protocol.as_deref(), Some("TCP"));
}

#[test]
fn template_without_spec_is_left_alone() {
    let mut job = valid_job();
    job.spec.learner.as_mut().unwrap().template = PodTemplateSpec::default();
    assert_eq!(defaulted(job).spec.learner.unwrap().template, PodTemplateSpec::default());
}

#[test]
fn defaulting_is_idempotent() {
    for name in ["cartpole-dqn.yaml", "multi-gpu-learner.yaml", "invalid.yaml"] {
        let once = defaulted(common::example_job(name));
        assert_eq!(defaulted(once.clone()), once, "{name}");
    }
}
