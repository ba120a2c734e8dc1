//! Who a job's replica endpoint is to the API server, as objects (no I/O).
//!
//! Where the API server has ValidatingAdmissionPolicy (GA in 1.30), every coordinator of a
//! namespace runs as one ServiceAccount, `di-replicas`, bound once per namespace to the ClusterRole
//! of the same name; the policy lets that identity change only the DIJob whose current coordinator
//! pod it is (the API server names the pod and its UID in a bound token's user info; the job's
//! status names the UID of the coordinator it runs now) and only what the endpoint changes: desired counts, learner GPUs and the replace annotation. A job then costs no RBAC
//! write. Elsewhere, and for a coordinator whose template names its own ServiceAccount (the
//! policy cannot tell that account's other pods apart), each job gets its own ServiceAccount,
//! Role and RoleBinding (`rbac`); where the policy is in force it still refuses a token bound to
//! a coordinator pod the job's status does not name, whatever its account, so a predecessor's
//! coordinator never changes the job submitted again under its name.

use di_api::DIJob;
use di_api::contract::{GROUP, annotations, names};
use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::RoleBinding;
use serde_json::json;

/// The shared identity's name: its ServiceAccount, RoleBinding and ClusterRole, and the policy.
pub const SHARED: &str = "di-replicas";

/// Which identity the replica endpoints of this orchestrator get.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Identity {
    /// A ServiceAccount, Role and RoleBinding per job.
    #[default]
    PerJob,
    /// The namespace's `di-replicas`, held to its own job by the admission policy.
    Policy,
}

/// Whether `job`'s coordinator runs as the namespace's shared identity under `identity`.
pub fn uses_shared(job: &DIJob, identity: Identity) -> bool {
    identity == Identity::Policy && coordinator_service_account(job).is_none()
}

/// The ServiceAccount the coordinator of job `job` runs as when its template names none.
pub fn default_account(job: &str, identity: Identity) -> String {
    match identity {
        Identity::Policy => SHARED.into(),
        Identity::PerJob => names::replicas_identity(job),
    }
}

/// The ServiceAccount the coordinator's template asks for, if any.
pub(super) fn coordinator_service_account(job: &DIJob) -> Option<String> {
    let spec = job.spec.coordinator.as_ref()?.template.spec.as_ref()?;
    spec.service_account_name.clone().filter(|s| !s.is_empty())
}

/// The namespace's shared identity: its ServiceAccount and the RoleBinding to the ClusterRole the
/// install ships. Owned by no job: they serve every job of the namespace, and stay.
pub fn namespace_identity(namespace: &str) -> (ServiceAccount, RoleBinding) {
    let meta = json!({"name": SHARED, "namespace": namespace,
                      "labels": {"app.kubernetes.io/managed-by": "di-orchestrator"}});
    let account = json!({"metadata": meta});
    let binding = json!({
        "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": SHARED},
        "subjects": [{"kind": "ServiceAccount", "name": SHARED, "namespace": namespace}],
    });
    (
        serde_json::from_value(account).expect("a ServiceAccount"),
        serde_json::from_value(binding).expect("a RoleBinding"),
    )
}

/// The pod name and UID a bound ServiceAccount token carries in the request's user info.
const POD_NAME: &str = "authentication.kubernetes.io/pod-name";
const POD_UID: &str = "authentication.kubernetes.io/pod-uid";

/// What the policy answers a coordinator pod of the right name that the job's status does not
/// name (yet): the replica endpoint waits for the status rather than send a write refused so.
const NOT_CURRENT: &str = "is not the coordinator this DIJob runs now (status.coordinatorUID)";

/// `new` and `old` (CEL maps) hold the same keys with the same values, `allowed` keys aside.
/// Written with `all` over keys, which every API server with the policy API (1.30+) evaluates.
fn unchanged_except(new: &str, old: &str, allowed: &[&str]) -> String {
    let keys = format!("[{}]", allowed.iter().map(|k| format!("'{k}'")).collect::<Vec<_>>().join(", "));
    format!(
        "{new}.all(k, k in {keys} || (k in {old} && {new}[k] == {old}[k])) && {old}.all(k, k in {keys} || k in {new})"
    )
}

/// The policy holding the shared identity to its own job and to what the endpoint changes, and
/// any coordinator pod's token (whatever its account) to the job whose current coordinator it is.
pub fn policy() -> ValidatingAdmissionPolicy {
    let coordinator_suffix = names::coordinator("");
    let validations = json!([
        {
            "expression": format!("!variables.shared || (size(variables.pods) == 1 && variables.pods[0] == request.name + '{coordinator_suffix}')"),
            "messageExpression": format!(
                "'only the coordinator pod ' + request.name + '{coordinator_suffix} of this DIJob may change it as {SHARED}, \
                 not ' + (size(variables.pods) == 0 ? 'a token bound to no pod' : 'pod ' + variables.pods[0])"
            ),
            "reason": "Forbidden",
        },
        {
            // The name alone would let a predecessor's coordinator, still terminating after the
            // job was deleted and submitted again, scale the new job: its pod has the same name.
            "expression": "size(variables.podUIDs) == 1 && variables.podUIDs[0] == oldObject.?status.?coordinatorUID.orValue('')",
            "messageExpression": format!(
                "'pod ' + (size(variables.pods) == 0 ? '' : variables.pods[0]) + ' ' + \
                 (size(variables.podUIDs) == 0 ? '' : variables.podUIDs[0]) + ' {NOT_CURRENT}'"
            ),
            "reason": "Forbidden",
        },
        {
            "expression": format!("!variables.shared || ({})", unchanged_except("variables.spec", "variables.oldSpec", &["collector", "learner"])),
            "message": format!("{SHARED} may change only spec.collector.replicas, spec.learner.replicas and spec.learner.gpus"),
            "reason": "Forbidden",
        },
        {
            "expression": format!(
                "!variables.shared || ({} && {})",
                unchanged_except("variables.spec.?collector.orValue({})", "variables.oldSpec.?collector.orValue({})", &["replicas"]),
                unchanged_except("variables.spec.?learner.orValue({})", "variables.oldSpec.?learner.orValue({})", &["replicas", "gpus"]),
            ),
            "message": format!("{SHARED} may change only spec.collector.replicas, spec.learner.replicas and spec.learner.gpus"),
            "reason": "Forbidden",
        },
        {
            "expression": format!(
                "!variables.shared || ({} && {})",
                unchanged_except(
                    "object.metadata.?annotations.orValue({})",
                    "oldObject.metadata.?annotations.orValue({})",
                    &[annotations::REPLACE],
                ),
                [("labels", "{}"), ("finalizers", "[]"), ("ownerReferences", "[]")]
                    .map(|(f, none)| format!("object.metadata.?{f}.orValue({none}) == oldObject.metadata.?{f}.orValue({none})"))
                    .join(" && "),
            ),
            "message": format!("{SHARED} may change only the annotation {} of the metadata", annotations::REPLACE),
            "reason": "Forbidden",
        },
    ]);
    let policy = json!({
        "metadata": {"name": SHARED, "labels": {"app.kubernetes.io/managed-by": "di-orchestrator"}},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [GROUP], "apiVersions": ["*"], "operations": ["UPDATE"],
                "resources": ["dijobs"], "scope": "Namespaced",
            }]},
            // The shared identity, and any token bound to a pod of the job's coordinator's name
            // (a template's own account): users, the orchestrator and other pods are untouched.
            // The shared identity is also held to what the endpoint changes; a template's own
            // account keeps what its grants allow, but only while its pod is the current one.
            "matchConditions": [{
                "name": "replica-identity-or-coordinator-pod",
                "expression": format!(
                    "request.userInfo.username == 'system:serviceaccount:' + request.namespace + ':{SHARED}' || \
                     request.userInfo.?extra[?'{POD_NAME}'].orValue([]) == [request.name + '{coordinator_suffix}']"
                ),
            }],
            "variables": [
                {"name": "shared", "expression": format!("request.userInfo.username == 'system:serviceaccount:' + request.namespace + ':{SHARED}'")},
                {"name": "pods", "expression": format!("request.userInfo.?extra[?'{POD_NAME}'].orValue([])")},
                {"name": "podUIDs", "expression": format!("request.userInfo.?extra[?'{POD_UID}'].orValue([])")},
                {"name": "spec", "expression": "object.?spec.orValue({})"},
                {"name": "oldSpec", "expression": "oldObject.?spec.orValue({})"},
            ],
            "validations": validations,
        },
    });
    serde_json::from_value(policy).expect("a ValidatingAdmissionPolicy")
}

/// Puts [`policy`] in force everywhere.
pub fn policy_binding() -> ValidatingAdmissionPolicyBinding {
    let binding = json!({
        "metadata": {"name": SHARED, "labels": {"app.kubernetes.io/managed-by": "di-orchestrator"}},
        "spec": {"policyName": SHARED, "validationActions": ["Deny"]},
    });
    serde_json::from_value(binding).expect("a ValidatingAdmissionPolicyBinding")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unchanged_except_checks_both_ways() {
        assert_eq!(
            unchanged_except("n", "o", &["replicas"]),
            "n.all(k, k in ['replicas'] || (k in o && n[k] == o[k])) && o.all(k, k in ['replicas'] || k in n)"
        );
    }

    #[test]
    fn the_policy_names_the_coordinator_as_the_contract_does() {
        let text = serde_json::to_string(&policy()).unwrap();
        assert_eq!(names::coordinator("job"), format!("job{}", names::coordinator("")));
        assert!(text.contains("request.name + '-coordinator'"), "{text}");
        assert!(text.contains(annotations::REPLACE));
    }
}
