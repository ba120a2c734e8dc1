//! The coordinator's validation rules, table-driven as `validation.rs`: what keeps its replica
//! endpoint its own (the sidecar's reserved name and ports; no node network, no `default`
//! account).

mod common;

use common::{Mutation, each_refused_once, pod, set_json};
use serde_json::json;

#[test]
fn each_coordinator_rule_rejects_with_field_and_fix() {
    let cases: Vec<(&str, Mutation, &str, &str)> = vec![
        (
            "coordinator container named like the sidecar",
            |j| pod(j, "coordinator").containers[0].name = "di-replicas".into(),
            "spec.coordinator.template.spec.containers[0].name",
            "the name is reserved for the replica endpoint sidecar the orchestrator adds; rename the container",
        ),
        (
            "coordinator init container named like the sidecar",
            |j| {
                pod(j, "coordinator").init_containers =
                    Some(set_json(json!([{"name": "di-replicas", "image": "busybox"}])))
            },
            "spec.coordinator.template.spec.initContainers[0].name",
            "the name is reserved for the replica endpoint sidecar the orchestrator adds; rename the container",
        ),
        (
            "coordinator port of the sidecar",
            |j| {
                pod(j, "coordinator").containers[0].ports =
                    Some(set_json(json!([{"name": "di-port", "containerPort": 22280}])));
            },
            "spec.coordinator.template.spec.containers[0].ports[0].containerPort",
            "Invalid value: 22280: the port is reserved for the replica endpoint sidecar",
        ),
        (
            "coordinator port of the sidecar's own address",
            |j| {
                pod(j, "coordinator").containers[0].ports =
                    Some(set_json(json!([{"name": "di-port", "containerPort": 22273}, {"containerPort": 22281}])));
            },
            "spec.coordinator.template.spec.containers[0].ports[1].containerPort",
            "Invalid value: 22281: the port is reserved for the replica endpoint sidecar",
        ),
        (
            "coordinator on the node's network",
            |j| pod(j, "coordinator").host_network = Some(true),
            "spec.coordinator.template.spec.hostNetwork",
            "every process of the node reaches; remove hostNetwork from the coordinator",
        ),
        (
            "coordinator as the namespace's default account",
            |j| pod(j, "coordinator").service_account_name = Some("default".into()),
            "spec.coordinator.template.spec.serviceAccountName",
            "name an account of the coordinator's own, or leave it unset",
        ),
    ];
    each_refused_once(cases);
}
