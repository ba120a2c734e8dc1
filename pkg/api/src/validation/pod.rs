//! The checks of a role's pod template: its volumes, containers, ports, GPUs, the sidecar's
//! reserved name and ports, and what would open the coordinator's writes to others.

use std::collections::{BTreeSet, HashSet};

use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};

use super::naming::{dns1123_label_problem, port_name_problem};
use super::{Errors, check_volumes};
use crate::contract::{COORDINATOR_ENDPOINT_PORT, GPU_RESOURCE, REPLICAS_CONTAINER_NAME, REPLICAS_PORT, Role};
use crate::resources::{parse_quantity, whole_number};

/// Checks a role's pod template, or a task's (`role` is `None`). `job_volumes` are the volumes
/// every pod of the job gets, or `None` when they are not known (an AggregatorConfig is shared by
/// many jobs).
pub(super) fn check_template(
    path: &str,
    template: &PodTemplateSpec,
    role: Option<Role>,
    job_volumes: Option<&BTreeSet<String>>,
    errs: &mut Errors,
) {
    let Some(spec) = template.spec.as_ref().filter(|s| !s.containers.is_empty()) else {
        errs.add(
            format!("{path}.spec.containers"),
            format!(
                "Required value: the {} needs at least one container; add one with a name and an image",
                role.map_or("task", Role::label)
            ),
        );
        return;
    };

    let own_volumes = check_volumes(&format!("{path}.spec.volumes"), spec.volumes.as_deref().unwrap_or_default(), errs);
    if let Some(job_volumes) = job_volumes {
        for (i, volume) in spec.volumes.iter().flatten().enumerate() {
            if job_volumes.contains(&volume.name) {
                errs.add(
                    format!("{path}.spec.volumes[{i}].name"),
                    format!(
                        "Duplicate value {:?}: spec.volumes already gives every pod a volume of that name; rename one",
                        volume.name
                    ),
                );
            }
        }
    }

    match (spec.restart_policy.as_deref(), role) {
        (None | Some("Never" | "OnFailure"), _) => {}
        (Some("Always"), Some(Role::Coordinator)) => errs.add(
            format!("{path}.spec.restartPolicy"),
            "Unsupported value \"Always\": the coordinator's exit decides the job's phase, so use \"Never\" (the default) or \"OnFailure\"",
        ),
        (Some("Always"), _) => {}
        (Some(other), _) => errs.add(
            format!("{path}.spec.restartPolicy"),
            format!("Unsupported value {other:?}: use one of \"Always\", \"OnFailure\", \"Never\""),
        ),
    }

    if role == Some(Role::Coordinator) {
        check_sidecar_reservations(path, spec.init_containers.as_deref().unwrap_or_default(), &spec.containers, errs);
        check_coordinator_identity(path, spec, errs);
    }

    let mut names = HashSet::new();
    let mut port_names = HashSet::new();
    let mut port_numbers = HashSet::new();
    let groups =
        [("initContainers", spec.init_containers.as_deref().unwrap_or_default()), ("containers", &spec.containers[..])];
    for (group, containers) in groups {
        for (i, container) in containers.iter().enumerate() {
            let at = format!("{path}.spec.{group}[{i}]");
            check_container(&at, container, &mut names, errs);
            // Init containers run before the others, so only the long-running ones share ports.
            if group == "containers" {
                check_ports(&at, container, &mut port_names, &mut port_numbers, errs);
            }
            for (j, mount) in container.volume_mounts.iter().flatten().enumerate() {
                let known = own_volumes.contains(&mount.name) || job_volumes.is_none_or(|v| v.contains(&mount.name));
                if !known {
                    errs.add(
                        format!("{at}.volumeMounts[{j}].name"),
                        format!("Not found {:?}: no volume of that name in spec.volumes or in the template's volumes; add it to spec.volumes", mount.name),
                    );
                }
            }
        }
    }
}

/// The orchestrator adds the replica endpoint to the coordinator's pod (as its first init
/// container, a native sidecar): its name is taken among all the pod's containers, and its port
/// among those that run beside it.
fn check_sidecar_reservations(path: &str, init_containers: &[Container], containers: &[Container], errs: &mut Errors) {
    for (group, list) in [("initContainers", init_containers), ("containers", containers)] {
        for (i, container) in list.iter().enumerate() {
            if container.name == REPLICAS_CONTAINER_NAME {
                errs.add(
                    format!("{path}.spec.{group}[{i}].name"),
                    format!("Invalid value {REPLICAS_CONTAINER_NAME:?}: the name is reserved for the replica endpoint sidecar the orchestrator adds; rename the container"),
                );
            }
        }
    }
    for (i, container) in containers.iter().enumerate() {
        for (j, port) in container.ports.iter().flatten().enumerate() {
            let port_number = port.container_port;
            if port_number == REPLICAS_PORT || port_number == i32::from(COORDINATOR_ENDPOINT_PORT) {
                errs.add(
                    format!("{path}.spec.containers[{i}].ports[{j}].containerPort"),
                    format!("Invalid value: {port_number}: the port is reserved for the replica endpoint sidecar in the coordinator's pod; pick another"),
                );
            }
        }
    }
}

/// What would let others than the coordinator's own containers change the job: the node's
/// network, where the replica endpoint's address for writes would be on the node's loopback; and
/// the namespace's `default` account, which the job's Role would then grant to every pod that
/// names no account of its own.
fn check_coordinator_identity(path: &str, spec: &PodSpec, errs: &mut Errors) {
    if spec.host_network == Some(true) {
        errs.add(
            format!("{path}.spec.hostNetwork"),
            "Forbidden: the coordinator's replica endpoint takes writes on a loopback address of its pod, which on \
             the node's network every process of the node reaches; remove hostNetwork from the coordinator (its \
             collectors and learners may keep it)",
        );
    }
    if spec.service_account_name.as_deref() == Some("default") {
        errs.add(
            format!("{path}.spec.serviceAccountName"),
            "Forbidden: \"default\": the job grants its coordinator's account the right to change the job, and every \
             pod of the namespace that names no account runs as \"default\"; name an account of the coordinator's own, \
             or leave it unset for the orchestrator's",
        );
    }
}

fn check_container(at: &str, container: &Container, names: &mut HashSet<String>, errs: &mut Errors) {
    if container.name.is_empty() {
        errs.add(
            format!("{at}.name"),
            "Required value: name the container (the replica's own is usually \"di-container\")",
        );
    } else if let Some(problem) = dns1123_label_problem(&container.name) {
        errs.add(format!("{at}.name"), format!("Invalid value {:?}: a container name {problem}", container.name));
    } else if !names.insert(container.name.clone()) {
        errs.add(
            format!("{at}.name"),
            format!("Duplicate value {:?}: container names must be unique in the pod", container.name),
        );
    }
    if container.image.as_deref().is_none_or(|i| i.trim().is_empty()) {
        errs.add(format!("{at}.image"), "Required value: set the container image, e.g. opendilab/ding:latest");
    }
    let Some(resources) = &container.resources else { return };
    for (kind, list) in [("limits", &resources.limits), ("requests", &resources.requests)] {
        for (name, quantity) in list.iter().flatten() {
            let field = format!("{at}.resources.{kind}[{name}]");
            if parse_quantity(quantity).is_none() {
                errs.add(field, format!("Invalid value {:?}: not a quantity; write e.g. 2, 500m or 4Gi", quantity.0));
            } else if name == GPU_RESOURCE && whole_number(quantity).is_none_or(|n| n < 0) {
                errs.add(
                    field,
                    format!("Invalid value {:?}: GPUs are counted in whole devices; use 0, 1, 2, ...", quantity.0),
                );
            }
        }
    }
    let gpu = |list: &Option<std::collections::BTreeMap<String, _>>| {
        list.as_ref().and_then(|l| l.get(GPU_RESOURCE)).and_then(whole_number)
    };
    if let (Some(limit), Some(request)) = (gpu(&resources.limits), gpu(&resources.requests))
        && limit != request
    {
        errs.add(
            format!("{at}.resources.requests[{GPU_RESOURCE}]"),
            format!("Invalid value: {request}: GPU requests must equal GPU limits ({limit}); set only the limit"),
        );
    }
}

fn check_ports(
    at: &str,
    container: &Container,
    names: &mut HashSet<String>,
    numbers: &mut HashSet<(i32, String)>,
    errs: &mut Errors,
) {
    for (i, port) in container.ports.iter().flatten().enumerate() {
        let field = format!("{at}.ports[{i}]");
        let number = port.container_port;
        if !(1..=65535).contains(&number) {
            errs.add(format!("{field}.containerPort"), format!("Invalid value: {number}: must be between 1 and 65535"));
        }
        let protocol = port.protocol.clone().unwrap_or_else(|| "TCP".into());
        if !["TCP", "UDP", "SCTP"].contains(&protocol.as_str()) {
            errs.add(
                format!("{field}.protocol"),
                format!("Unsupported value {protocol:?}: use one of \"TCP\", \"UDP\", \"SCTP\""),
            );
        } else if !numbers.insert((number, protocol.clone())) {
            errs.add(
                format!("{field}.containerPort"),
                format!(
                    "Duplicate value: {number}/{protocol}: another port of the pod already uses it; pick another number"
                ),
            );
        }
        if let Some(name) = port.name.as_deref() {
            if let Some(problem) = port_name_problem(name) {
                errs.add(format!("{field}.name"), format!("Invalid value {name:?}: a port name {problem}"));
            } else if !names.insert(name.to_owned()) {
                errs.add(
                    format!("{field}.name"),
                    format!("Duplicate value {name:?}: port names must be unique in the pod"),
                );
            }
        }
    }
}
