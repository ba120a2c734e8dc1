//! Jobs and pods for the reconciler's tests.
#![allow(dead_code)]

use std::time::Duration;

use di_api::defaults::default_dijob;
use di_api::{AggregatorConfig, DIJob, DIJobStatus};
use di_core::desired::{self, Settings};
use di_core::plan::{Action, Plan, Why, World, plan};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use serde_json::json;

/// A defaulted, stored-looking job with `collectors` and `learners`, plus `extra` spec fields.
pub fn job(collectors: i32, learners: i32, extra: serde_json::Value) -> DIJob {
    let container = json!({"containers": [{"name": "di-container", "image": "ding"}]});
    let mut spec = json!({
        "volumes": [{"name": "data", "emptyDir": {}}],
        "coordinator": {"template": {"spec": container}},
        "collector": {"replicas": collectors, "template": {"spec": container}},
        "learner": {"replicas": learners, "template": {"spec": container}},
    });
    for (k, v) in extra.as_object().cloned().unwrap_or_default() {
        if let (Some(existing), Some(add)) = (spec.get_mut(&k).and_then(|e| e.as_object_mut()), v.as_object()) {
            existing.extend(add.clone());
        } else {
            spec[&k] = v;
        }
    }
    let mut job: DIJob = serde_json::from_value(json!({
        "apiVersion": "diengine.opendilab.org/v1alpha1",
        "kind": "DIJob",
        "metadata": {"name": "job", "namespace": "ns", "uid": "job-uid", "generation": 3},
        "spec": spec,
    }))
    .unwrap();
    default_dijob(&mut job);
    job
}

/// `pod` as the cluster would report it in `phase` (Ready when Running).
pub fn observed(mut pod: Pod, phase: &str) -> Pod {
    pod.metadata.uid = Some(format!("uid-{}", pod.name_any()));
    let ready = if phase == "Running" { "True" } else { "False" };
    pod.status = Some(
        serde_json::from_value(json!({"phase": phase, "conditions": [{"type": "Ready", "status": ready}]})).unwrap(),
    );
    pod
}

pub fn now() -> Timestamp {
    "2026-11-22T10:00:00Z".parse().unwrap()
}

/// First delay before a failed replica is replaced, in the tests' passes.
pub const BACKOFF: Duration = Duration::from_secs(10);

/// These pods and services as a pass sees them at `at`, with nothing taken and no AggregatorConfig.
pub fn world<'a>(pods: &'a [Pod], services: &'a [Service], at: Timestamp) -> World<'a> {
    World {
        pods: pods.iter().collect(),
        services: services.iter().collect(),
        taken: Default::default(),
        aggregator_config: None,
        missing_aggregator_config: None,
        queue: None,
        now: at,
    }
}

/// One pass of `job` (a role or a task job) over these pods and services, at `at`.
pub fn decide(job: &DIJob, pods: &[Pod], services: &[Service], at: Timestamp) -> Plan {
    plan(job, &world(pods, services, at), &Settings::default(), BACKOFF).unwrap()
}

/// The job's pods and services as they would exist, each pod in the phase `phase_of` says.
pub fn world_of(job: &DIJob, phase_of: impl Fn(&str) -> Option<&'static str>) -> (Vec<Pod>, Vec<Service>) {
    let replicas = desired::replicas(job, None, &Settings::default()).unwrap();
    let pods = replicas.iter().filter_map(|r| phase_of(&r.name()).map(|p| observed(r.pod.clone(), p))).collect();
    let services = replicas.iter().map(|r| r.service.clone()).collect();
    (pods, services)
}

pub fn with_status(mut job: DIJob, status: DIJobStatus) -> DIJob {
    job.status = Some(status);
    job
}

pub fn created(actions: &[Action]) -> Vec<String> {
    actions.iter().filter_map(|a| if let Action::CreatePod(p) = a { Some(p.name_any()) } else { None }).collect()
}

pub fn deleted(actions: &[Action]) -> Vec<(String, Why)> {
    actions
        .iter()
        .filter_map(|a| if let Action::DeletePod { name, why, .. } = a { Some((name.clone(), *why)) } else { None })
        .collect()
}

/// The AggregatorConfig multi-GPU learners are built from, defaulted.
pub fn agconfig() -> AggregatorConfig {
    let mut config: AggregatorConfig = serde_json::from_value(json!({
        "apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "AggregatorConfig",
        "metadata": {"name": "aggregator-config", "namespace": "di-system"},
        "spec": {"aggregator": {"template": {"spec": {"containers": [{"name": "di-container", "image": "agg"}]}}}}
    }))
    .unwrap();
    di_api::defaults::default_aggregator_config(&mut config);
    config
}
