//! What the caches keep of the pods and services the orchestrator manages. A `Pod` struct is
//! about 2.5 KiB before any of its fields is set, so caching thousands of them, even emptied,
//! costs tens of MiB; these views are read straight from the watch's JSON (everything else is
//! skipped while parsing) and hold only what a pass reads. A pass turns its own job's few views
//! back into `Pod`s and `Service`s for the pure code. A job's own view is in `view/job.rs`.

use std::borrow::Cow;
use std::collections::BTreeMap;

use di_api::contract::{annotations, labels};
use di_api::tasks::{self, TASK_LABEL};
use di_core::disruption::DISRUPTION_TARGET;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{Pod, PodCondition, PodSpec, PodStatus, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::Resource;
use serde::{Deserialize, Deserializer, Serialize};

mod job;
pub use job::JobView;

/// The labels a pass reads of a pod: job, role (or task) and replica index.
const POD_LABELS: [&str; 4] = [labels::JOB_NAME, labels::REPLICA_TYPE, labels::REPLICA_INDEX, TASK_LABEL];
/// The annotation a pass reads of a pod: a task pod's peer set.
const POD_ANNOTATIONS: [&str; 1] = [tasks::annotations::PEERS];

/// A managed pod: identity, whose it is, how it runs, and (a task pod) which peers it knows.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct PodView {
    #[serde(deserialize_with = "member_metadata")]
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PodViewStatus>,
    /// The node of a pod that is terminating, which a pass asks about when the pod is stuck there
    /// (`di_core::stranded`); dropped by `slim` from every other pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<PodViewSpec>,
    /// The values of `POD_LABELS`, moved out of `metadata` by `slim`: a map of three costs
    /// about 700 bytes, more than the rest of the view.
    #[serde(skip)]
    pub kept_labels: [Option<String>; 4],
    /// The UID in its controller reference, moved out of `metadata` by `slim`.
    #[serde(skip)]
    pub owner: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct PodViewSpec {
    #[serde(default, rename = "nodeName", skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct PodViewStatus {
    #[serde(default)]
    pub phase: Option<String>,
    #[serde(default)]
    pub conditions: Vec<ConditionView>,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub reason: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct ConditionView {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    /// Kept for a pod the scheduler cannot place (why, for the job's status), and DisruptionTarget's
    /// reason (what ended the pod, for its event); the message only for the former.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A managed service: only its metadata is read.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct ServiceView {
    #[serde(deserialize_with = "member_metadata")]
    pub metadata: ObjectMeta,
    /// Its job label, moved out of `metadata` by `slim`.
    #[serde(skip)]
    pub job: Option<String>,
    /// The UID in its controller reference, moved out of `metadata` by `slim`.
    #[serde(skip)]
    pub owner: Option<String>,
}

/// An object that names a job in its label, and is that job's only if its controller reference
/// carries the job's UID: a job deleted and submitted again under the same name must not take
/// its predecessor's pods, still being collected, for its own.
pub trait JobMember: Resource {
    fn job(&self) -> Option<&str> {
        self.meta().labels.as_ref()?.get(labels::JOB_NAME).map(String::as_str)
    }

    /// The UID of the object's controller.
    fn owner(&self) -> Option<&str> {
        controller_uid(self.meta())
    }
}

/// The UID in `meta`'s controller reference, if it has one.
pub fn controller_uid(meta: &ObjectMeta) -> Option<&str> {
    let references = meta.owner_references.as_ref()?;
    references.iter().find(|r| r.controller == Some(true)).map(|r| r.uid.as_str())
}

impl JobMember for Pod {}
impl JobMember for Service {}

impl JobMember for PodView {
    fn job(&self) -> Option<&str> {
        self.kept_labels[0].as_deref()
    }
    fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }
}

impl JobMember for ServiceView {
    fn job(&self) -> Option<&str> {
        self.job.as_deref()
    }
    fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }
}

macro_rules! core_v1_resource {
    ($view:ty, $kind:literal, $plural:literal) => {
        impl Resource for $view {
            type DynamicType = ();
            type Scope = NamespaceResourceScope;

            fn kind(_: &()) -> Cow<'_, str> {
                $kind.into()
            }
            fn group(_: &()) -> Cow<'_, str> {
                "".into()
            }
            fn version(_: &()) -> Cow<'_, str> {
                "v1".into()
            }
            fn api_version(_: &()) -> Cow<'_, str> {
                "v1".into()
            }
            fn plural(_: &()) -> Cow<'_, str> {
                $plural.into()
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

core_v1_resource!(PodView, "Pod", "pods");
core_v1_resource!(ServiceView, "Service", "services");

impl PodView {
    /// Keeps only the metadata a pass reads, the Ready condition, PodScheduled while the
    /// scheduler cannot place the pod (with its reason and message: why a job waits),
    /// DisruptionTarget when set, and the node of a pod that is terminating.
    pub fn slim(&mut self) {
        self.owner = controller_uid(&self.metadata).map(str::to_owned);
        if self.metadata.deletion_timestamp.is_none() {
            self.spec = None;
        }
        let mut labels = slim_metadata(&mut self.metadata, &POD_ANNOTATIONS);
        self.kept_labels = POD_LABELS.map(|key| labels.remove(key));
        if let Some(status) = &mut self.status {
            // DisruptionTarget says a failed pod was ended by a disruption (pod GC of a deleted
            // node, the taint manager, a preemption): replaced, not counted (`di_core::disruption`).
            status.conditions.retain(|c| {
                c.type_ == "Ready"
                    || (c.type_ == "PodScheduled" && c.status == "False")
                    || (c.type_ == DISRUPTION_TARGET && c.status == "True")
            });
            for condition in status.conditions.iter_mut().filter(|c| c.type_ == "Ready") {
                (condition.reason, condition.message) = (None, None);
            }
            for condition in status.conditions.iter_mut().filter(|c| c.type_ == DISRUPTION_TARGET) {
                condition.message = None;
            }
        }
    }

    pub fn to_pod(&self) -> Pod {
        let labels = POD_LABELS.iter().zip(&self.kept_labels);
        let labels: BTreeMap<String, String> = labels.filter_map(|(k, v)| Some((k.to_string(), v.clone()?))).collect();
        Pod {
            metadata: ObjectMeta { labels: Some(labels), ..self.metadata.clone() },
            spec: self.spec.as_ref().map(|s| PodSpec { node_name: s.node_name.clone(), ..Default::default() }),
            status: self.status.as_ref().map(|s| PodStatus {
                phase: s.phase.clone(),
                conditions: Some(
                    s.conditions
                        .iter()
                        .map(|c| PodCondition {
                            type_: c.type_.clone(),
                            status: c.status.clone(),
                            reason: c.reason.clone(),
                            message: c.message.clone(),
                            ..Default::default()
                        })
                        .collect(),
                ),
                message: s.message.clone(),
                reason: s.reason.clone(),
                ..Default::default()
            }),
        }
    }
}

impl ServiceView {
    /// Keeps the job label and the restart annotations.
    pub fn slim(&mut self) {
        let kept = [annotations::RESTARTS, annotations::LAST_FAILED_UID, annotations::RESTART_AFTER];
        self.owner = controller_uid(&self.metadata).map(str::to_owned);
        self.job = slim_metadata(&mut self.metadata, &kept).remove(labels::JOB_NAME);
    }

    pub fn to_service(&self) -> Service {
        let labels = self.job.iter().map(|job| (labels::JOB_NAME.to_string(), job.clone())).collect();
        Service { metadata: ObjectMeta { labels: Some(labels), ..self.metadata.clone() }, ..Default::default() }
    }
}

/// The metadata of a pod or Service that `slim_metadata` may keep, read straight from the JSON.
/// Everything else is skipped while parsing, not built and dropped: above all `managedFields`,
/// larger than the rest of a pod's metadata together: parsing metadata was 13 % of the
/// orchestrator's CPU while jobs started, most of it on managed fields dropped right after.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MemberMetadata {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    deletion_timestamp: Option<Time>,
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<BTreeMap<String, String>>,
    owner_references: Option<Vec<OwnerReference>>,
}

fn member_metadata<'de, D: Deserializer<'de>>(from: D) -> Result<ObjectMeta, D::Error> {
    let m = MemberMetadata::deserialize(from)?;
    Ok(ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        uid: m.uid,
        resource_version: m.resource_version,
        deletion_timestamp: m.deletion_timestamp,
        labels: m.labels,
        annotations: m.annotations,
        owner_references: m.owner_references,
        ..Default::default()
    })
}

/// Keeps an object's identity and the named annotations; returns its labels, taken out.
fn slim_metadata(meta: &mut ObjectMeta, keep_annotations: &[&str]) -> BTreeMap<String, String> {
    let annotations: BTreeMap<String, String> =
        meta.annotations.take().into_iter().flatten().filter(|(k, _)| keep_annotations.contains(&k.as_str())).collect();
    let labels = meta.labels.take().unwrap_or_default();
    *meta = ObjectMeta {
        name: meta.name.take(),
        namespace: meta.namespace.take(),
        uid: meta.uid.take(),
        resource_version: meta.resource_version.take(),
        deletion_timestamp: meta.deletion_timestamp.take(),
        annotations: (!annotations.is_empty()).then_some(annotations),
        ..Default::default()
    };
    labels
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::status;

    #[test]
    fn a_pod_view_reads_what_a_pass_needs_from_the_full_object() {
        let full = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "job-collector-0", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                         "labels": {labels::JOB_NAME: "job", labels::REPLICA_TYPE: "collector", labels::REPLICA_INDEX: "0", "team": "rl"},
                         "annotations": {"note": "x"},
                         "managedFields": [{"manager": "di-orchestrator", "operation": "Update",
                                            "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}],
                         "ownerReferences": [{"apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJob", "name": "job", "uid": "j"}]},
            "spec": {"containers": [{"name": "di-container", "image": "ding"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1", "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "PodScheduled", "status": "True"}]},
        });
        let mut view: PodView = serde_json::from_value(full.clone()).unwrap();
        view.slim();
        assert!(view.metadata.labels.is_none(), "the labels are kept outside the map");
        assert_eq!(view.job(), Some("job"));
        assert_eq!(view.owner(), None, "a reference that is not the controller's owns nothing");
        let pod = view.to_pod();
        let original: Pod = serde_json::from_value(full).unwrap();
        assert_eq!(di_api::pod::role_of(&pod), di_api::pod::role_of(&original));
        assert!(status::is_ready(&pod) && status::is_ready(&original));
        assert_eq!(pod.metadata.labels.as_ref().map(BTreeMap::len), Some(3));
        assert!(pod.metadata.annotations.is_none() && pod.metadata.owner_references.is_none());
        assert_eq!(pod.status.as_ref().and_then(|s| s.conditions.as_ref()).map(Vec::len), Some(1));
        assert_eq!(pod.metadata.uid.as_deref(), Some("u1"));
        assert!(pod.spec.is_none(), "a running pod's node is not kept");
    }

    #[test]
    fn a_pod_view_keeps_what_says_a_disruption_ended_it() {
        let mut view: PodView = serde_json::from_value(json!({
            "metadata": {"name": "job-collector-0", "namespace": "ns"},
            "status": {"phase": "Failed", "conditions": [
                {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC"},
                {"type": "Ready", "status": "False"}]},
        }))
        .unwrap();
        view.slim();
        let pod = view.to_pod();
        assert_eq!(di_core::disruption::disrupted(&pod).as_deref(), Some("DeletionByPodGC"));
    }

    #[test]
    fn a_terminating_pod_view_keeps_its_node() {
        let mut view: PodView = serde_json::from_value(json!({
            "metadata": {"name": "job-collector-0", "namespace": "ns", "deletionTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"nodeName": "worker-a", "containers": [{"name": "di-container", "image": "ding"}]},
        }))
        .unwrap();
        view.slim();
        let pod = view.to_pod();
        assert_eq!(pod.spec.and_then(|s| s.node_name).as_deref(), Some("worker-a"));
    }

    #[test]
    fn a_service_view_keeps_the_restart_annotations_and_its_controller() {
        let mut view: ServiceView = serde_json::from_value(json!({
            "metadata": {"name": "job-collector-0", "namespace": "ns",
                         "labels": {labels::JOB_NAME: "job", "other": "x"},
                         "ownerReferences": [
                             {"apiVersion": "v1", "kind": "ConfigMap", "name": "other", "uid": "o"},
                             {"apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJob", "name": "job",
                              "uid": "j", "controller": true}],
                         "annotations": {annotations::RESTARTS: "2", "other": "y"}},
            "spec": {"clusterIP": "None"},
        }))
        .unwrap();
        view.slim();
        assert_eq!(view.job(), Some("job"));
        assert_eq!(view.owner(), Some("j"));
        assert!(view.metadata.owner_references.is_none(), "kept outside the metadata");
        let service = view.to_service();
        let annotations = service.metadata.annotations.unwrap_or_default();
        assert_eq!(annotations.keys().collect::<Vec<_>>(), [annotations::RESTARTS]);
        assert_eq!(service.metadata.labels.unwrap_or_default().len(), 1);
    }
}
