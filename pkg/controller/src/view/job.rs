//! What the cache keeps of a DIJob, and when the orchestrator leaves one alone.

use std::borrow::Cow;

use di_api::{DIJob, DIJobStatus};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::{Deserialize, Serialize};
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
        let status_written_by_us = wrote_status(&stored.metadata) || ours(status.as_ref());
        JobView { metadata: stored.metadata, spec: stored.spec, status, unreadable_status, status_written_by_us }
    }
}

/// Whether the status is of a kind only this orchestrator writes: it always says which
/// generation it was computed for, which DI-orchestrator 0.2 and 1.x never did. Unlike
/// `managedFields`, which any writer of the job may reset (`metadata.managedFields: [{}]`),
/// only a writer of the status subresource can change it.
fn ours(status: Option<&DIJobStatus>) -> bool {
    status.is_some_and(|s| s.observed_generation.is_some())
}

/// Whether `MANAGER` applied the status: the one way this orchestrator writes it. Other
/// controllers' writes (DI-orchestrator 0.2's and 1.x's, by update) are recorded under theirs.
fn wrote_status(meta: &ObjectMeta) -> bool {
    meta.managed_fields.iter().flatten().any(|entry| {
        entry.manager.as_deref() == Some(crate::context::MANAGER)
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

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

    /// Any writer of the job may reset its `managedFields`; the status, which only writers of
    /// the status subresource change, still says whose it is.
    #[test]
    fn a_job_whose_managed_fields_were_reset_is_not_left_alone() {
        let reset = json!({"metadata": {"name": "mine", "namespace": "ns", "managedFields": []}, "spec": {"tasks": []},
                           "status": {"phase": "Running", "observedGeneration": 3}});
        let view: JobView = serde_json::from_value(reset).unwrap();
        assert_eq!(view.left_alone(), None);
        let theirs = json!({"metadata": {"name": "old", "namespace": "ns", "managedFields": []}, "spec": {"tasks": []},
                            "status": {"phase": "Running", "restarts": 1}});
        let view: JobView = serde_json::from_value(theirs).unwrap();
        assert!(view.left_alone().unwrap().contains("another controller"));
    }
}
