//! Pods ended by a disruption rather than by their own containers: the scheduler preempted them,
//! a taint or the API's eviction removed them, the pod garbage collector or their kubelet ended
//! them (condition `DisruptionTarget`, Kubernetes 1.26+), or the kubelet evicted them under
//! node pressure (phase `Failed`, reason `Evicted`). The replica did nothing wrong: it is replaced
//! without counting against `restartLimit` or `backoffLimit`, and a coordinator ended this way is
//! a loss of the coordinator (`lost`), never the job's failure.

use k8s_openapi::api::core::v1::Pod;

/// The condition Kubernetes sets on a pod a disruption ends.
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";

/// Why a failed pod was ended by a disruption (the condition's reason, or `Evicted`), if it was.
/// A pod still running is not ended, whatever its conditions say: it may yet decide itself.
pub fn disrupted(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    if status.phase.as_deref() != Some("Failed") {
        return None;
    }
    let target = status.conditions.iter().flatten().find(|c| c.type_ == DISRUPTION_TARGET && c.status == "True");
    match target {
        Some(condition) => Some(condition.reason.clone().unwrap_or_else(|| DISRUPTION_TARGET.to_owned())),
        None => (status.reason.as_deref() == Some("Evicted")).then(|| "Evicted".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "status": status})).unwrap()
    }

    #[test]
    fn a_disruption_is_told_by_its_condition_or_the_kubelets_eviction() {
        let preempted = pod(json!({"phase": "Failed", "conditions": [
            {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]}));
        assert_eq!(disrupted(&preempted).as_deref(), Some("PreemptionByScheduler"));
        let evicted =
            pod(json!({"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."}));
        assert_eq!(disrupted(&evicted).as_deref(), Some("Evicted"));
        let crashed = pod(json!({"phase": "Failed", "reason": "Error"}));
        assert_eq!(disrupted(&crashed), None, "its own failure");
        let not_yet = pod(json!({"phase": "Running", "conditions": [
            {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}]}));
        assert_eq!(disrupted(&not_yet), None, "not ended yet");
        let withdrawn = pod(json!({"phase": "Failed", "conditions": [
            {"type": "DisruptionTarget", "status": "False", "reason": "PreemptionByScheduler"}]}));
        assert_eq!(disrupted(&withdrawn), None);
    }
}
