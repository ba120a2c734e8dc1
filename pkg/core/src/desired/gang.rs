//! A job's gangs as the objects its gang scheduler reads: which PodGroup each pod joins, and the
//! PodGroups themselves, for the backend the orchestrator runs with. Which pods form a gang is
//! di-api's rule for task jobs (`di_api::gang`); a role job's gangs are its multi-GPU logic
//! learners, each an aggregator with its DDP learners. Pure: the reconciler creates what this
//! builds, PodGroups before the pods that join them.

use std::collections::BTreeMap;

use di_api::DIJob;
use di_api::contract::{Role, names};
use k8s_openapi::api::core::v1::{Pod, PodSchedulingGroup};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use serde_json::{Value, json};

use super::{Wanted, job_labels};

/// The gang scheduler the orchestrator creates PodGroups for (`--gang-scheduler`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    /// No gangs: every pod is placed on its own.
    #[default]
    None,
    /// Kubernetes 1.37's own (`scheduling.k8s.io/v1beta1` PodGroup, `spec.schedulingGroup`).
    Native,
    /// scheduler-plugins' coscheduling (`scheduling.x-k8s.io/v1alpha1` PodGroup, a pod label),
    /// run as its own scheduler under this name.
    Coscheduling { scheduler: String },
    /// Volcano (`scheduling.volcano.sh/v1beta1` PodGroup, a pod annotation), run as its own
    /// scheduler under this name.
    Volcano { scheduler: String },
}

/// The pod label coscheduling reads a pod's PodGroup from.
pub const COSCHEDULING_LABEL: &str = "scheduling.x-k8s.io/pod-group";
/// The pod annotation Volcano reads a pod's PodGroup from.
pub const VOLCANO_ANNOTATION: &str = "scheduling.k8s.io/group-name";

impl Backend {
    /// The PodGroup kind's `apiVersion`, or none without gangs.
    pub fn api_version(&self) -> Option<&'static str> {
        match self {
            Backend::None => None,
            Backend::Native => Some("scheduling.k8s.io/v1beta1"),
            Backend::Coscheduling { .. } => Some("scheduling.x-k8s.io/v1alpha1"),
            Backend::Volcano { .. } => Some("scheduling.volcano.sh/v1beta1"),
        }
    }
}

/// One gang of a job: its PodGroup's name, its pods, and how many must be placed at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gang {
    pub name: String,
    pub pods: Vec<String>,
    pub min_count: u32,
}

/// A role job's gangs: each logic learner with an aggregator, named `<job>-learner-<i>` after it,
/// of its aggregator and DDP learners, all needed at once. The coordinator, collectors and
/// single-GPU learners are in none. Nothing when the job asks for no gangs.
pub fn role_gangs(job: &DIJob, replicas: &[Wanted]) -> Vec<Gang> {
    if !di_api::gang::enabled(job) {
        return vec![];
    }
    let mut by_learner: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for replica in replicas {
        if let (Role::Aggregator | Role::DdpLearner, Some(index)) = (replica.role, replica.index) {
            by_learner.entry(index).or_default().push(replica.name.clone());
        }
    }
    let job_name = job.name_any();
    by_learner
        .into_iter()
        .map(|(index, pods)| Gang {
            name: names::replica(&job_name, Role::Learner, index),
            min_count: pods.len() as u32,
            pods,
        })
        .collect()
}

/// A task job's gang, named after the job (see `di_api::gang::task_gang`).
pub fn task_gangs(job: &DIJob) -> Vec<Gang> {
    di_api::gang::task_gang(job)
        .map(|g| Gang { name: job.name_any(), pods: g.pods, min_count: g.min_count })
        .into_iter()
        .collect()
}

/// Makes `pod` a member of the gang `gang` as `backend`'s scheduler reads it. Only at creation:
/// a pod's scheduling group and scheduler are immutable.
pub fn join(pod: &mut Pod, gang: &str, backend: &Backend) {
    let spec = pod.spec.get_or_insert_default();
    match backend {
        Backend::None => {}
        Backend::Native => {
            spec.scheduling_group = Some(PodSchedulingGroup { pod_group_name: Some(gang.into()) });
        }
        Backend::Coscheduling { scheduler } => {
            spec.scheduler_name = Some(scheduler.clone());
            pod.metadata.labels.get_or_insert_default().insert(COSCHEDULING_LABEL.into(), gang.into());
        }
        Backend::Volcano { scheduler } => {
            spec.scheduler_name = Some(scheduler.clone());
            pod.metadata.annotations.get_or_insert_default().insert(VOLCANO_ANNOTATION.into(), gang.into());
        }
    }
}

/// The PodGroup of `gang` for `backend`, owned by the job (so deleted with it), or none without
/// gangs. `priority_class` is the job's, which Volcano orders its queue by.
pub fn pod_group(
    job: &DIJob,
    gang: &Gang,
    backend: &Backend,
    owner: &OwnerReference,
    priority_class: Option<&str>,
) -> Option<Value> {
    let api_version = backend.api_version()?;
    let spec = match backend {
        Backend::None => return None,
        Backend::Native => json!({"schedulingPolicy": {"gang": {"minCount": gang.min_count}}}),
        Backend::Coscheduling { .. } => json!({"minMember": gang.min_count}),
        Backend::Volcano { .. } => {
            let mut spec = json!({"minMember": gang.min_count});
            if let Some(class) = priority_class {
                spec["priorityClassName"] = json!(class);
            }
            spec
        }
    };
    Some(json!({
        "apiVersion": api_version,
        "kind": "PodGroup",
        "metadata": {
            "name": gang.name,
            "namespace": job.namespace(),
            "labels": job_labels(&job.name_any(), None),
            "ownerReferences": [owner],
        },
        "spec": spec,
    }))
}

/// The PodGroup kind of `backend`, for a dynamic client; none without gangs.
pub fn api_resource(backend: &Backend) -> Option<kube::core::ApiResource> {
    let api_version = backend.api_version()?;
    let (group, version) = api_version.split_once('/').expect("a group's apiVersion");
    Some(kube::core::ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.into(),
        kind: "PodGroup".into(),
        plural: "podgroups".into(),
    })
}
