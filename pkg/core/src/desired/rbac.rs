//! The per-job identity of the replica endpoint: a ServiceAccount, a Role that may read and patch
//! only its own DIJob and read the namespace's pods, and the RoleBinding between them.

use di_api::DIJob;
use di_api::contract::{GROUP, names};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role as RbacRole, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use super::identity::coordinator_service_account;
use super::{BuildError, Settings, job_labels, owner_reference};

/// The per-job identity of the replica endpoint sidecar.
#[derive(Clone, Debug, PartialEq)]
pub struct Rbac {
    pub service_account: ServiceAccount,
    pub role: RbacRole,
    pub binding: RoleBinding,
}

/// The ServiceAccount, Role and RoleBinding of the job's replica endpoint: it may read and patch
/// its own DIJob and read the namespace's pods, nothing more.
pub fn rbac(job: &DIJob, settings: &Settings) -> Result<Rbac, BuildError> {
    let owner = owner_reference(job, &settings.owner_version)?;
    let name = names::replicas_identity(&job.name_any());
    let meta = ObjectMeta {
        name: Some(name.clone()),
        namespace: job.namespace(),
        labels: Some(job_labels(&job.name_any(), None)),
        owner_references: Some(vec![owner]),
        ..Default::default()
    };
    // The sidecar runs in the coordinator's pod, so it holds whatever account that pod runs as.
    let subject_account = coordinator_service_account(job).unwrap_or_else(|| name.clone());
    let rule = |groups: &[&str], resources: &[&str], verbs: &[&str], names: Option<Vec<String>>| PolicyRule {
        api_groups: Some(groups.iter().map(|s| s.to_string()).collect()),
        resources: Some(resources.iter().map(|s| s.to_string()).collect()),
        verbs: verbs.iter().map(|s| s.to_string()).collect(),
        resource_names: names,
        ..Default::default()
    };
    Ok(Rbac {
        service_account: ServiceAccount { metadata: meta.clone(), ..Default::default() },
        role: RbacRole {
            metadata: meta.clone(),
            rules: Some(vec![
                rule(&[GROUP], &["dijobs"], &["get", "watch", "patch"], Some(vec![job.name_any()])),
                rule(&[""], &["pods"], &["get", "list", "watch"], None),
                // Its admission, when it waits in a Kueue queue (`queue`).
                rule(&["kueue.x-k8s.io"], &["workloads"], &["get"], Some(vec![crate::queue::workload_name(job)])),
            ]),
        },
        binding: RoleBinding {
            metadata: meta,
            role_ref: RoleRef {
                api_group: Some("rbac.authorization.k8s.io".into()),
                kind: "Role".into(),
                name: name.clone(),
            },
            subjects: Some(vec![Subject {
                kind: "ServiceAccount".into(),
                name: subject_account,
                namespace: job.namespace(),
                ..Default::default()
            }]),
        },
    })
}
