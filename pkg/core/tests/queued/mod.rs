//! Jobs in a Kueue queue and their Workloads, for the queue tests.
#![allow(dead_code)]

use std::collections::BTreeMap;

use di_api::DIJob;
use di_core::desired::Settings;
use di_core::plan::{Action, Plan, plan};
use di_core::queue::{QUEUE_LABEL, Queue, Report, report, workload};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::ResourceExt;
use serde_json::{Value, json};

use crate::common::{BACKOFF, job, now, world};

pub fn queued_job(collectors: i32) -> DIJob {
    let mut job = job(collectors, 1, json!({}));
    job.labels_mut().insert(QUEUE_LABEL.into(), "team".into());
    job
}

pub fn decide_in(job: &DIJob, pods: &[Pod], services: &[Service], queue: Queue) -> Plan {
    let mut world = world(pods, services, now());
    world.queue = Some(queue);
    plan(job, &world, &Settings::default(), BACKOFF).unwrap()
}

pub fn condition<'a>(plan: &'a Plan, type_: &str) -> &'a di_api::DIJobCondition {
    plan.status.conditions.iter().find(|c| c.type_ == type_).unwrap_or_else(|| panic!("no {type_} condition"))
}

pub fn kueue(workload: Option<Value>) -> Queue {
    let flavors = BTreeMap::from([(
        "a100".to_string(),
        json!({"nodeLabels": {"gpu": "a100"}, "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]}),
    )]);
    Queue::Kueue { workload, flavors, priority: None, collectors: Default::default(), collector_class: None }
}

/// What the orchestrator would report of a job seen so, giving nothing back.
pub fn said(workload: &Value, ready: bool, finished: Option<bool>, pods_active: bool) -> Option<Value> {
    report(workload, &Report { ready, finished, pods_active, reclaimable: None }, now())
}

/// The status a plan writes to the Workload, if it writes one.
pub fn written(plan: &Plan) -> Option<Value> {
    plan.actions.iter().find_map(|a| match a {
        Action::WriteWorkloadStatus(w) => Some(w["status"].clone()),
        _ => None,
    })
}

pub fn admitted(job: &DIJob) -> Value {
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
