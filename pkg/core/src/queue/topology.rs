//! Topology-aware scheduling (Kueue's TAS): a podSet asks for a topology domain with the same
//! annotations as in Kueue's own integrations, and Kueue admits it with a `topologyAssignment`
//! (how many pods in which domain). Kueue's topology ungater places each pod: it finds the
//! Workload's pods by their annotation and podSet label, sets each one's node selector to its
//! domain and lifts the scheduling gate the pod was created with. So a pod of a podSet admitted
//! so is created gated and marked; the rest is Kueue's.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, PodSchedulingGate};
use kube::ResourceExt;
use serde_json::{Map, Value};

/// The gate Kueue's topology ungater lifts once it has set the pod's domain.
pub const GATE: &str = "kueue.x-k8s.io/topology";
/// The pod's Workload, by name: how the ungater finds it.
pub const WORKLOAD_ANNOTATION: &str = "kueue.x-k8s.io/workload";
/// The pod's podSet in its Workload.
pub const POD_SET_LABEL: &str = "kueue.x-k8s.io/podset";

const REQUIRED: &str = "kueue.x-k8s.io/podset-required-topology";
const PREFERRED: &str = "kueue.x-k8s.io/podset-preferred-topology";
const UNCONSTRAINED: &str = "kueue.x-k8s.io/podset-unconstrained-topology";

/// A podSet's `topologyRequest` from its pod template's annotations, as Kueue's integrations read
/// them: a level the pods must (or should) share, or any placement Kueue finds. None: no request.
pub(super) fn request(annotations: &BTreeMap<String, String>) -> Option<Value> {
    let mut request = Map::new();
    if let Some(level) = annotations.get(REQUIRED) {
        request.insert("required".into(), Value::from(level.as_str()));
    } else if let Some(level) = annotations.get(PREFERRED) {
        request.insert("preferred".into(), Value::from(level.as_str()));
    } else if annotations.get(UNCONSTRAINED).is_some_and(|v| v == "true") {
        request.insert("unconstrained".into(), Value::Bool(true));
    } else {
        return None;
    }
    Some(Value::Object(request))
}

/// Whether a podSet's assignment places its pods by topology.
pub(super) fn assigned(assignment: &Value) -> bool {
    !assignment["topologyAssignment"].is_null()
}

/// Marks `pod` of podSet `set` for the ungater and gates it until its domain is set. A pod of a
/// podSet that asked for nothing (the flavor places every pod by topology) is marked as
/// unconstrained, which is how the ungater tells its pods.
pub(super) fn gate(pod: &mut Pod, workload: &str, set: &str) {
    pod.annotations_mut().insert(WORKLOAD_ANNOTATION.into(), workload.into());
    if ![REQUIRED, PREFERRED, UNCONSTRAINED].iter().any(|a| pod.annotations().contains_key(*a)) {
        pod.annotations_mut().insert(UNCONSTRAINED.into(), "true".into());
    }
    pod.labels_mut().insert(POD_SET_LABEL.into(), set.into());
    let gates = pod.spec.get_or_insert_default().scheduling_gates.get_or_insert_default();
    if !gates.iter().any(|g| g.name == GATE) {
        gates.push(PodSchedulingGate { name: GATE.into() });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_template_asks_as_in_kueues_integrations() {
        let of = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        };
        assert_eq!(request(&of(&[(REQUIRED, "rack")])), Some(json!({"required": "rack"})));
        assert_eq!(request(&of(&[(PREFERRED, "block")])), Some(json!({"preferred": "block"})));
        assert_eq!(request(&of(&[(UNCONSTRAINED, "true")])), Some(json!({"unconstrained": true})));
        assert_eq!(request(&of(&[("other", "x")])), None);
    }

    #[test]
    fn a_pod_is_gated_and_marked_once() {
        let mut pod = Pod::default();
        gate(&mut pod, "dijob-j-1234", "collector");
        gate(&mut pod, "dijob-j-1234", "collector");
        assert_eq!(pod.annotations()[WORKLOAD_ANNOTATION], "dijob-j-1234");
        assert_eq!(pod.annotations()[UNCONSTRAINED], "true");
        assert_eq!(pod.labels()[POD_SET_LABEL], "collector");
        assert_eq!(pod.spec.unwrap().scheduling_gates.unwrap(), [PodSchedulingGate { name: GATE.into() }]);

        let mut asked = Pod::default();
        asked.annotations_mut().insert(REQUIRED.into(), "rack".into());
        gate(&mut asked, "w", "learner");
        assert!(!asked.annotations().contains_key(UNCONSTRAINED), "its own request stands");
    }
}
