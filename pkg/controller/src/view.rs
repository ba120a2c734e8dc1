//! What the caches keep of the pods and services the orchestrator manages. A `Pod` struct is
//! about 2.5 KiB before any of its fields is set, so caching thousands of them, even emptied,
//! costs tens of MiB; these views are read straight from the watch's JSON (everything else is
//! skipped while parsing) and hold only what a pass reads. A pass turns its own job's few views
//! back into `Pod`s and `Service`s for the pure code.

use std::borrow::Cow;
use std::collections::BTreeMap;

use di_api::contract::{annotations, labels};
use di_api::tasks::{self, TASK_LABEL};
use di_api::{DIJob, DIJobStatus};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::Resource;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;

/// A DIJob as cached: its spec kept as the JSON text it arrived as. Typed, a job is about 11 KiB
/// before its strings (a `PodTemplateSpec` is 1.8 KiB and a `Container` 2.1 KiB with no field
/// set); as text a typical one is a few hundred bytes. A pass parses its own job's spec.
///
/// Reading a view never fails for an object the API server returns: one job stored by another
/// controller (DI-orchestrator 1.x's `Rescheduling`, a field of another shape) would otherwise
/// fail the whole list, and no job would be reconciled. A status the types cannot read is kept
/// aside as its error (`unreadable_status`), and the pass names it.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(from = "StoredJob")]
pub struct JobView {
    pub metadata: ObjectMeta,
    pub spec: Box<RawValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<DIJobStatus>,
    /// Why the stored status could not be read, when it could not.
    #[serde(skip)]
    pub unreadable_status: Option<String>,
    /// Whether a status write of this orchestrator's is on record (`managedFields`), read before
    /// `slim` drops them: a status it never wrote was left by another controller.
    #[serde(skip)]
    pub status_written_by_us: bool,
}

/// A DIJob as the API server sends it, before its status is read.
#[derive(Deserialize)]
struct StoredJob {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default = "empty_spec")]
    spec: Box<RawValue>,
    #[serde(default)]
    status: Option<Box<RawValue>>,
}

fn empty_spec() -> Box<RawValue> {
    RawValue::from_string("{}".into()).expect("an empty object is JSON")
}

impl From<StoredJob> for JobView {
    fn from(stored: StoredJob) -> Self {
        let (status, unreadable_status) = match stored.status.as_deref().map(|raw| serde_json::from_str(raw.get())) {
            None => (None, None),
            Some(Ok(status)) => (status, None),
            Some(Err(e)) => (None, Some(e.to_string())),
        };
        let status_written_by_us = wrote_status(&stored.metadata);
        JobView { metadata: stored.metadata, spec: stored.spec, status, unreadable_status, status_written_by_us }
    }
}

/// Whether `MANAGER` applied the status: the one way this orchestrator writes it. Other
/// controllers' writes (DI-orchestrator 0.2's and 1.x's, by update) are recorded under theirs.
fn wrote_status(meta: &ObjectMeta) -> bool {
    meta.managed_fields.iter().flatten().any(|entry| {
        entry.manager.as_deref() == Some(crate::reconciler::MANAGER)
            && entry.operation.as_deref() == Some("Apply")
            && entry.subresource.as_deref() == Some("status")
    })
}

impl Resource for JobView {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        DIJob::kind(&())
    }
    fn group(_: &()) -> Cow<'_, str> {
        DIJob::group(&())
    }
    fn version(_: &()) -> Cow<'_, str> {
        DIJob::version(&())
    }
    fn api_version(_: &()) -> Cow<'_, str> {
        DIJob::api_version(&())
    }
    fn plural(_: &()) -> Cow<'_, str> {
        DIJob::plural(&())
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl JobView {
    /// Drops what no pass reads.
    pub fn slim(&mut self) {
        self.metadata.managed_fields = None;
    }

    /// The typed job; a spec the types cannot read is an error that names the field.
    pub fn to_job(&self) -> Result<DIJob, serde_json::Error> {
        let spec = serde_json::from_str(self.spec.get())?;
        Ok(DIJob { metadata: self.metadata.clone(), spec, status: self.status.clone() })
    }

    /// Why the orchestrator leaves this job alone, if it does: a status it cannot read, or one
    /// another controller wrote (a job DI-orchestrator 0.2 or 1.x started, still in the cluster
    /// after the upgrade). Such a job's pods are that controller's: taking them over could
    /// replace or delete them, so the job is only named (a Warning event, a log line, a metric).
    pub fn left_alone(&self) -> Option<String> {
        if let Some(error) = &self.unreadable_status {
            return Some(format!("its status cannot be read ({error})"));
        }
        let phase = self.status.as_ref().and_then(|s| s.phase)?;
        (!self.status_written_by_us).then(|| {
            format!(
                "its status (phase {phase:?}) was written by another controller, such as DI-orchestrator 0.2 or 1.x"
            )
        })
    }
}

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
    /// The values of `POD_LABELS`, moved out of `metadata` by `slim`: a map of three costs
    /// about 700 bytes, more than the rest of the view.
    #[serde(skip)]
    pub kept_labels: [Option<String>; 4],
    /// The UID in its controller reference, moved out of `metadata` by `slim`.
    #[serde(skip)]
    pub owner: Option<String>,
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
    /// Keeps only the Ready condition and the metadata a pass reads.
    pub fn slim(&mut self) {
        self.owner = controller_uid(&self.metadata).map(str::to_owned);
        let mut labels = slim_metadata(&mut self.metadata, &POD_ANNOTATIONS);
        self.kept_labels = POD_LABELS.map(|key| labels.remove(key));
        if let Some(status) = &mut self.status {
            status.conditions.retain(|c| c.type_ == "Ready");
        }
    }

    pub fn to_pod(&self) -> Pod {
        let labels = POD_LABELS.iter().zip(&self.kept_labels);
        let labels: BTreeMap<String, String> = labels.filter_map(|(k, v)| Some((k.to_string(), v.clone()?))).collect();
        Pod {
            metadata: ObjectMeta { labels: Some(labels), ..self.metadata.clone() },
            spec: None,
            status: self.status.as_ref().map(|s| PodStatus {
                phase: s.phase.clone(),
                conditions: Some(
                    s.conditions
                        .iter()
                        .map(|c| PodCondition {
                            type_: c.type_.clone(),
                            status: c.status.clone(),
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

    /// A list holding one job whose status no type of ours can read (another controller's
    /// phase, a field of another shape) still reads whole; that job is left alone, named.
    #[test]
    fn one_unreadable_job_never_fails_the_list() {
        let ours = json!({"manager": "di-orchestrator", "operation": "Apply", "subresource": "status",
                          "apiVersion": "diengine.opendilab.org/v1alpha1"});
        let theirs = json!({"manager": "di-orchestrator", "operation": "Update", "subresource": "status",
                            "apiVersion": "diengine.opendilab.org/v2alpha1"});
        let list = json!({
            "apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJobList", "metadata": {"resourceVersion": "9"},
            "items": [
                {"metadata": {"name": "garbled", "namespace": "ns", "managedFields": [ours]},
                 "spec": {"tasks": []}, "status": {"phase": "Running", "replicaStatus": "not a map"}},
                {"metadata": {"name": "one-x", "namespace": "ns", "managedFields": [theirs]},
                 "spec": {"tasks": []}, "status": {"phase": "Running", "reschedules": 2}},
                {"metadata": {"name": "mine", "namespace": "ns", "managedFields": [ours]},
                 "spec": {"tasks": []}, "status": {"phase": "Running"}},
                {"metadata": {"name": "new", "namespace": "ns"}, "spec": {"tasks": []}},
            ],
        });
        let list: kube::core::ObjectList<JobView> = serde_json::from_value(list).expect("the list reads whole");
        let why: Vec<Option<String>> = list.items.iter().map(JobView::left_alone).collect();
        assert!(why[0].as_deref().unwrap().starts_with("its status cannot be read"), "{why:?}");
        assert!(why[1].as_deref().unwrap().contains("another controller"), "{why:?}");
        assert_eq!(why[2..], [None, None]);
        // What was read of the readable ones is kept.
        assert_eq!(list.items[2].status.as_ref().unwrap().phase, Some(di_api::Phase::Running));
        assert!(list.items[0].status.is_none());
    }

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
    }

    #[test]
    fn a_job_view_reads_back_as_the_job() {
        let text = r#"{"apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJob",
            "metadata": {"name": "job", "namespace": "ns", "managedFields": [{"manager": "kubectl"}]},
            "spec": {"coordinator": {"template": {"spec": {"containers": [{"name": "di-container", "image": "ding"}]}}},
                     "collector": {"replicas": 3, "template": {"spec": {"containers": [{"name": "di-container", "image": "ding"}]}}}},
            "status": {"phase": "Running"}}"#;
        let mut view: JobView = serde_json::from_str(text).unwrap();
        view.slim();
        let job = view.to_job().unwrap();
        let mut typed: DIJob = serde_json::from_str(text).unwrap();
        typed.metadata.managed_fields = None;
        assert_eq!(job, typed);

        let bad: JobView =
            serde_json::from_str(r#"{"metadata": {"name": "job"}, "spec": {"collector": {"replicas": "many"}}}"#)
                .unwrap();
        assert!(bad.to_job().unwrap_err().to_string().contains("invalid type"));
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
