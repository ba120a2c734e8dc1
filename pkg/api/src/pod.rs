//! Reading one of a job's pods the way the reconciler labelled it: its role, its index, and the
//! port and URL it serves at. The reconciler, the replica endpoint and the CLI all read pods through
//! these, so they never disagree about which pod is which.

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use crate::contract::{Role, labels, names};
use crate::resources::di_port;

/// The pod's role, from its `replica-type` label. `None` when the label is missing or names no
/// role we know (a pod that is not a replica, or one from a newer orchestrator): callers skip
/// such a pod rather than guess what it is.
pub fn role_of(pod: &Pod) -> Option<Role> {
    pod.metadata.labels.as_ref()?.get(labels::REPLICA_TYPE).and_then(|l| Role::from_label(l))
}

/// The pod's index, from its replica-index label: a collector's, logic learner's or aggregator's
/// own, and for a DDP learner its logic learner's. `None` for the coordinator and for a label that
/// is not a number.
///
/// There is deliberately no default: where an unindexed pod goes is the caller's decision (last
/// when listing by index, last when scaling down highest first), and any number chosen here
/// would be a real index of some job. Note that `None` orders before every `Some`.
pub fn index_of(pod: &Pod) -> Option<u32> {
    pod.metadata.labels.as_ref()?.get(labels::REPLICA_INDEX)?.parse().ok()
}

/// The port the pod serves DI-engine on: its `di-port` (see [`di_port`]), else its role's
/// default, which is what the reconciler gave a template without one. `None` for a pod with
/// neither a `di-port` nor a role.
pub fn port_of(pod: &Pod) -> Option<i32> {
    pod.spec.as_ref().and_then(di_port).or_else(|| role_of(pod).map(Role::default_port))
}

/// The pod's URL as DI-engine's client expects it, `<pod>.<namespace>:<port>` (see [`port_of`]).
/// A pod with neither a `di-port` nor a role gets the collector's default port, as the replica
/// endpoint has always answered for such a pod.
pub fn url_of(pod: &Pod) -> String {
    let port = port_of(pod).unwrap_or(Role::Collector.default_port());
    names::url(&pod.name_any(), &pod.namespace().unwrap_or_default(), port)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn pod(labels: Value, containers: Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "labels": labels},
            "spec": {"containers": containers},
        }))
        .unwrap()
    }

    #[test]
    fn role_from_the_replica_type_label() {
        for role in Role::ALL {
            assert_eq!(role_of(&pod(json!({labels::REPLICA_TYPE: role.label()}), json!([]))), Some(role));
        }
        assert_eq!(role_of(&pod(json!({labels::REPLICA_TYPE: "actor"}), json!([]))), None);
        assert_eq!(role_of(&pod(json!({}), json!([]))), None);
        assert_eq!(role_of(&Pod::default()), None, "no labels at all");
    }

    #[test]
    fn index_from_the_replica_index_label() {
        let index = |value: &str| index_of(&pod(json!({labels::REPLICA_INDEX: value}), json!([])));
        assert_eq!(index("0"), Some(0));
        assert_eq!(index("999"), Some(999));
        for bad in ["", "-1", "x", "1.5", "99999999999"] {
            assert_eq!(index(bad), None, "{bad:?}");
        }
        assert_eq!(index_of(&pod(json!({}), json!([]))), None);
        assert_eq!(index_of(&Pod::default()), None);
        assert!(None < Some(0), "unindexed pods order first unless the caller says otherwise");
    }

    #[test]
    fn port_from_di_port_else_the_roles_default() {
        let collector = json!({labels::REPLICA_TYPE: "collector"});
        let named = json!([{"name": "c", "ports": [{"name": "di-port", "containerPort": 8000}]}]);
        assert_eq!(port_of(&pod(collector.clone(), named.clone())), Some(8000));
        assert_eq!(port_of(&pod(json!({}), named)), Some(8000), "the port needs no role");
        assert_eq!(port_of(&pod(collector, json!([{"name": "c"}]))), Some(22270));
        assert_eq!(port_of(&pod(json!({labels::REPLICA_TYPE: "aggregator"}), json!([]))), Some(22272));
        assert_eq!(port_of(&pod(json!({}), json!([{"name": "c"}]))), None);
        assert_eq!(port_of(&Pod::default()), None);
    }

    #[test]
    fn url_with_the_pods_port() {
        let mut learner = pod(json!({labels::REPLICA_TYPE: "learner"}), json!([{"name": "c"}]));
        learner.metadata.namespace = Some("ns".into());
        assert_eq!(url_of(&learner), "p.ns:22271");
        assert_eq!(url_of(&pod(json!({}), json!([]))), "p.:22270", "not a replica: the collector's port");
    }
}
