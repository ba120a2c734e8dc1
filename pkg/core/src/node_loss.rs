//! What a lost node is, and how long a collector stays on one: the pure rules behind
//! `stranded` (which releases collectors stuck on a lost node) and the pods `desired` builds.

use k8s_openapi::api::core::v1::{Node, PodSpec, Toleration};

/// How long a collector stays on a node that has stopped answering (Kubernetes' default: 300 s).
pub const TOLERATION_SECONDS: i64 = 30;

/// The taints a node gets when it stops answering (`unreachable`) or reports it is not ready.
pub const NODE_LOST_TAINTS: [&str; 2] = ["node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"];

/// Gives a collector's pod spec its short tolerations of a lost node, for each taint whose
/// eviction the spec does not tolerate already (its own, of the key or of every key, wins).
pub fn tolerate(spec: &mut PodSpec) {
    let tolerations = spec.tolerations.get_or_insert_default();
    for key in NODE_LOST_TAINTS {
        if tolerations.iter().any(|t| tolerates_eviction(t, key)) {
            continue;
        }
        tolerations.push(Toleration {
            key: Some(key.to_owned()),
            operator: Some("Exists".into()),
            effect: Some("NoExecute".into()),
            toleration_seconds: Some(TOLERATION_SECONDS),
            ..Default::default()
        });
    }
}

/// Whether `toleration` tolerates the NoExecute taint `key` (of any value), as the taint manager
/// reads it: a NoSchedule-only toleration does not keep a pod on a node that stopped answering.
fn tolerates_eviction(toleration: &Toleration, key: &str) -> bool {
    let keys = match toleration.key.as_deref().unwrap_or_default() {
        "" => toleration.operator.as_deref() == Some("Exists"),
        own => own == key,
    };
    keys && matches!(toleration.effect.as_deref().unwrap_or_default(), "" | "NoExecute")
}

/// Whether a pod's node is lost: gone, or no longer reporting (its Ready condition `Unknown`,
/// which the node controller sets when the kubelet's heartbeats stop). A node that reports
/// NotReady still has a kubelet that answers, and stops its pods itself.
pub fn node_lost(node: Option<&Node>) -> bool {
    let Some(node) = node else { return true };
    let conditions = node.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or_default();
    conditions.iter().any(|c| c.type_ == "Ready" && c.status == "Unknown")
}
