//! A queued job's Workload as Kueue reads it: its pods grouped into podSets, the Workload made
//! of them, and, once admitted, its pods held to the admitted counts and placed by the flavors.

use std::collections::BTreeMap;

use di_api::DIJob;
pub(super) use di_api::contract::kueue::API_VERSION;
use di_api::contract::labels;
use di_api::tasks::TASK_LABEL;
use k8s_openapi::api::core::v1::{Pod, PodSpec};
use kube::ResourceExt;
use serde_json::{Value, json};

use super::topology;
use crate::decision::Action;
use crate::desired::{self, BuildError, Settings, job_labels};

/// The label Kueue finds a Workload's job by.
pub const JOB_UID_LABEL: &str = "kueue.x-k8s.io/job-uid";

/// The name of a job's Workload: its UID's start keeps a job submitted again under the same
/// name from finding its predecessor's. A job MultiKueue copied to this cluster has the one
/// MultiKueue made for it.
pub fn workload_name(job: &DIJob) -> String {
    if let Some(prebuilt) = job.prebuilt_workload() {
        return prebuilt.to_owned();
    }
    let uid = job.uid().unwrap_or_default();
    format!("dijob-{}-{}", job.name_any(), uid.chars().filter(char::is_ascii_alphanumeric).take(8).collect::<String>())
}

/// One podSet of the Workload: pods of one role (or task) and one shape.
pub(super) struct PodSet {
    pub(super) name: String,
    template: Value,
    pub(super) members: Vec<String>,
}

/// The job's pods grouped into podSets: by task, or by role; a role whose pods differ in
/// resources (DDP learners splitting a learner's GPUs unevenly) is one podSet per shape, so the
/// quota Kueue counts is what the pods request.
pub(super) fn pod_sets(pods: &[Pod]) -> Vec<PodSet> {
    let mut sets: Vec<PodSet> = vec![];
    let mut shapes: BTreeMap<String, usize> = BTreeMap::new();
    for pod in pods {
        let group = pod
            .labels()
            .get(TASK_LABEL)
            .or_else(|| pod.labels().get(labels::REPLICA_TYPE))
            .cloned()
            .unwrap_or_else(|| "main".into());
        let spec = pod.spec.clone().unwrap_or_default();
        let resources: Vec<_> = spec.containers.iter().map(|c| c.resources.clone()).collect();
        let shape = serde_json::to_string(&(&group, resources)).unwrap_or_default();
        match shapes.get(&shape) {
            Some(&i) => sets[i].members.push(pod.name_any()),
            None => {
                // A second shape of one group is `<group>-2`, and so on, skipping any name a
                // task already has (tasks `a` and `a-2`).
                let taken = |n: &str| sets.iter().any(|s| s.name == n);
                let mut name = group.clone();
                let mut n = 1;
                while taken(&name) {
                    n += 1;
                    name = format!("{group}-{n}");
                }
                let metadata = json!({"labels": pod.labels(), "annotations": pod.annotations()});
                let template = json!({"metadata": metadata, "spec": spec});
                shapes.insert(shape, sets.len());
                sets.push(PodSet { name, template, members: vec![pod.name_any()] });
            }
        }
    }
    sets
}

/// Every pod the job asks for, as built for it (the pods' names, labels and resources are all
/// the Workload needs).
pub(super) fn wanted_pods(
    job: &DIJob,
    aggregator: Option<&di_api::AggregatorConfig>,
    settings: &Settings,
) -> Result<Vec<Pod>, BuildError> {
    if job.spec.is_task_job() {
        return Ok(desired::task_objects(job, settings)?.pods.into_iter().map(|p| p.pod).collect());
    }
    Ok(desired::replicas(job, aggregator, settings)?.into_iter().map(|r| r.pod).collect())
}

/// The job's Workload: owned by the job, in its queue, one podSet per role or task, with its
/// priority when its PriorityClass exists.
pub fn workload(
    job: &DIJob,
    queue: &str,
    priority: Option<&(String, i32)>,
    aggregator: Option<&di_api::AggregatorConfig>,
    settings: &Settings,
) -> Result<Value, BuildError> {
    made_of(job, queue, priority, &pod_sets(&super::core_pods(job, wanted_pods(job, aggregator, settings)?)), settings)
}

/// As [`workload`], of the podSets a pass has grouped already.
pub(super) fn made_of(
    job: &DIJob,
    queue: &str,
    priority: Option<&(String, i32)>,
    sets: &[PodSet],
    settings: &Settings,
) -> Result<Value, BuildError> {
    let owner = desired::owner_reference(job, &settings.owner_version)?;
    let mut labels = job_labels(&job.name_any(), None);
    labels.insert(JOB_UID_LABEL.into(), job.uid().unwrap_or_default());
    let pod_sets: Vec<Value> = sets
        .iter()
        .map(|s| {
            let mut set = json!({"name": s.name, "count": s.members.len(), "template": s.template});
            let annotations = serde_json::from_value(s.template["metadata"]["annotations"].clone()).unwrap_or_default();
            if let Some(request) = topology::request(&annotations) {
                set["topologyRequest"] = request;
            }
            set
        })
        .collect();
    // A job suspended from the start, or made anew while suspended, waits for no quota.
    let mut spec = json!({"queueName": queue, "podSets": pod_sets, "active": !job.spec.is_suspended()});
    if let Some((class, value)) = priority {
        spec["priorityClassRef"] = json!({"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": class});
        spec["priority"] = json!(value);
    }
    Ok(json!({
        "apiVersion": API_VERSION, "kind": "Workload",
        "metadata": {
            "name": workload_name(job), "namespace": job.namespace(), "labels": labels,
            "ownerReferences": [owner],
        },
        "spec": spec,
    }))
}

/// Applies one admission check's `podSetUpdate` to a pod of its podSet, as Kueue's own
/// integrations do: its labels, annotations and node selector added (the pod's own contract
/// labels kept), its tolerations appended.
fn apply_update(pod: &mut Pod, update: &Value) {
    let strings = |field: &str| -> Vec<(String, String)> {
        update[field]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
            .collect()
    };
    for (k, v) in strings("labels") {
        pod.labels_mut().entry(k).or_insert(v);
    }
    for (k, v) in strings("annotations") {
        pod.annotations_mut().entry(k).or_insert(v);
    }
    let spec = pod.spec.get_or_insert_default();
    add_node_selector(spec, &update["nodeSelector"]);
    add_tolerations(spec, &update["tolerations"]);
}

/// Adds `labels` (a JSON map of strings) to the pod's node selector.
fn add_node_selector(spec: &mut PodSpec, labels: &Value) {
    if let Some(labels) = labels.as_object() {
        let selector = spec.node_selector.get_or_insert_default();
        for (k, v) in labels {
            selector.insert(k.clone(), v.as_str().unwrap_or_default().to_owned());
        }
    }
}

/// Appends `tolerations` (a JSON list) to the pod's, each once.
fn add_tolerations(spec: &mut PodSpec, tolerations: &Value) {
    for toleration in tolerations.as_array().into_iter().flatten() {
        if let Ok(toleration) = serde_json::from_value(toleration.clone()) {
            let tolerations = spec.tolerations.get_or_insert_default();
            if !tolerations.contains(&toleration) {
                tolerations.push(toleration);
            }
        }
    }
}

/// Puts each created pod where its podSet (of `sets`) was admitted: the node labels and
/// tolerations of the flavors Kueue assigned it, what its admission checks' `podSetUpdates` ask
/// (a ProvisioningRequest's node selector, ...), and, where Kueue assigned topology domains, the
/// gate and marks by which Kueue places it in its domain (`topology`).
pub(super) fn place(sets: &[PodSet], workload: &Value, flavors: &BTreeMap<String, Value>, actions: &mut [Action]) {
    let set_of: BTreeMap<&str, &str> =
        sets.iter().flat_map(|s| s.members.iter().map(move |m| (m.as_str(), s.name.as_str()))).collect();
    let assignments = workload["status"]["admission"]["podSetAssignments"].as_array().cloned().unwrap_or_default();
    // What admission checks (a ProvisioningRequest, ...) ask of each podSet's pods.
    let checks = workload["status"]["admissionChecks"].as_array().cloned().unwrap_or_default();
    let updates: Vec<&Value> =
        checks.iter().flat_map(|c| c["podSetUpdates"].as_array().into_iter().flatten()).collect();
    for action in actions.iter_mut() {
        let Action::CreatePod(pod) = action else { continue };
        let Some(set) = set_of.get(pod.name_any().as_str()) else { continue };
        for update in updates.iter().filter(|u| u["name"] == *set) {
            apply_update(pod, update);
        }
        let Some(assignment) = assignments.iter().find(|a| a["name"] == *set) else { continue };
        if topology::assigned(assignment) {
            topology::gate(pod, workload["metadata"]["name"].as_str().unwrap_or_default(), set);
        }
        let names = assignment["flavors"].as_object().map(|f| f.values().filter_map(Value::as_str).collect::<Vec<_>>());
        let spec = pod.spec.get_or_insert_default();
        for flavor in names.unwrap_or_default().into_iter().filter_map(|n| flavors.get(n)) {
            add_node_selector(spec, &flavor["nodeLabels"]);
            add_tolerations(spec, &flavor["tolerations"]);
        }
    }
}
