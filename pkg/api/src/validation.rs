//! Validation: everything that would make a job fail later is refused when it is applied, each
//! problem with the field's path, what is wrong, and how to fix it.
//!
//! The functions expect a defaulted object (see [`crate::defaults`]); callers default first.

use std::collections::{BTreeSet, HashSet};
use std::fmt;

use k8s_openapi::api::core::v1::{Container, PodTemplateSpec, Volume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::aggregator_config::AggregatorConfig;
use crate::contract::{
    GPU_RESOURCE, MAX_GPUS_PER_LEARNER, MAX_REPLICAS, REPLICAS_CONTAINER_NAME, REPLICAS_PORT, Role, names,
};
use crate::defaults::{CleanPodPolicy, default_dijob};
use crate::dijob::DIJob;
use crate::resources::{parse_quantity, whole_number};

/// One problem with one field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// Path of the field, as `kubectl explain` spells it: `spec.collector.replicas`.
    pub path: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Every problem found in an object, in the order of its fields.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ValidationErrors(pub Vec<FieldError>);

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

#[derive(Default)]
struct Errors(Vec<FieldError>);

impl Errors {
    fn add(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError { path: path.into(), message: message.into() });
    }

    fn into_result(self) -> Result<(), ValidationErrors> {
        if self.0.is_empty() { Ok(()) } else { Err(ValidationErrors(self.0)) }
    }
}

/// Validates a DIJob on create (and the new object on update).
pub fn validate_dijob(job: &DIJob) -> Result<(), ValidationErrors> {
    let mut errs = Errors::default();
    check_job_name(&job.metadata, &mut errs);
    let spec = &job.spec;

    if let Some(policy) = spec.clean_pod_policy.as_deref()
        && !policy.is_empty()
        && CleanPodPolicy::parse(policy).is_none()
    {
        errs.add(
            "spec.cleanPodPolicy",
            format!("Unsupported value {policy:?}: use one of {}", quoted(&CleanPodPolicy::VALUES)),
        );
    }

    if let Some(class) = spec.priority_class_name.as_deref().filter(|c| !c.is_empty())
        && let Some(problem) = dns1123_subdomain_problem(class)
    {
        errs.add("spec.priorityClassName", format!("Invalid value {class:?}: a PriorityClass name {problem}"));
    }

    let job_volumes = check_volumes("spec.volumes", spec.volumes.as_deref().unwrap_or_default(), &mut errs);

    if spec.coordinator.is_none() {
        errs.add(
            "spec.coordinator",
            "Required value: every DIJob needs a coordinator; add spec.coordinator.template with its container",
        );
    }
    for role in spec.role_templates() {
        check_template(&format!("{}.template", role.path), role.template, role.role, Some(&job_volumes), &mut errs);
    }
    if let Some(collector) = &spec.collector {
        check_replicas("spec.collector.replicas", collector.replicas, &mut errs);
    }
    if let Some(learner) = &spec.learner {
        check_replicas("spec.learner.replicas", learner.replicas, &mut errs);
        if let Some(gpus) = learner.gpus
            && !(0..=MAX_GPUS_PER_LEARNER).contains(&gpus)
        {
            errs.add(
                "spec.learner.gpus",
                format!("Invalid value: {gpus}: GPUs per learner must be between 0 and {MAX_GPUS_PER_LEARNER}"),
            );
        }
        if let Some(reference) = learner.aggregator_config.as_deref() {
            check_object_reference("spec.learner.aggregatorConfig", reference, &mut errs);
        }
    }
    for (path, value) in
        [("spec.restartLimit", spec.restart_limit), ("spec.ttlSecondsAfterFinished", spec.ttl_seconds_after_finished)]
    {
        if let Some(v) = value
            && v < 0
        {
            errs.add(path, format!("Invalid value: {v}: must be 0 or more (leave it unset for no limit)"));
        }
    }
    errs.into_result()
}

/// Validates an update: the new object as on create, plus what may not change on a live job.
pub fn validate_dijob_update(old: &DIJob, new: &DIJob) -> Result<(), ValidationErrors> {
    let mut errs = Errors(validate_dijob(new).err().map(|e| e.0).unwrap_or_default());
    // Compare what the pods were built from, so filling in a default never reads as a change.
    let (mut old, mut new) = (old.clone(), new.clone());
    default_dijob(&mut old);
    default_dijob(&mut new);
    let (o, n) = (&old.spec, &new.spec);

    const RECREATE: &str = "delete and re-create the DIJob to change it";
    if o.group != n.group {
        errs.add("spec.group", format!("Forbidden: the group is immutable; {RECREATE}"));
    }
    if o.priority_class_name != n.priority_class_name {
        errs.add("spec.priorityClassName", format!("Forbidden: the priority is immutable; {RECREATE}"));
    }
    if o.volumes != n.volumes {
        errs.add("spec.volumes", format!("Forbidden: volumes are immutable, running pods mount them; {RECREATE}"));
    }
    let templates = |spec: &crate::DIJobSpec| -> Vec<(&'static str, Option<PodTemplateSpec>)> {
        vec![
            ("spec.coordinator", spec.coordinator.as_ref().map(|c| c.template.clone())),
            ("spec.collector", spec.collector.as_ref().map(|c| c.template.clone())),
            ("spec.learner", spec.learner.as_ref().map(|l| l.template.clone())),
        ]
    };
    for ((path, before), (_, after)) in templates(o).into_iter().zip(templates(n)) {
        // A role may be added to a running job; an existing one keeps its template, so every
        // replica of a role is built alike.
        match (before, after) {
            (Some(_), None) => errs.add(
                path,
                format!("Forbidden: a role cannot be removed from a job; set its replicas to 0 instead, or {RECREATE}"),
            ),
            (Some(b), Some(a)) if b != a => errs.add(
                format!("{path}.template"),
                format!("Forbidden: a role's pod template is immutable once the job exists; {RECREATE}"),
            ),
            _ => {}
        }
    }
    let learner_field = |spec: &crate::DIJobSpec| spec.learner.as_ref().map(|l| (l.gpus, l.aggregator_config.clone()));
    if let (Some((old_gpus, old_ag)), Some((new_gpus, new_ag))) = (learner_field(o), learner_field(n)) {
        let learners = o.learner_replicas();
        if old_gpus != new_gpus && learners > 0 {
            errs.add(
                "spec.learner.gpus",
                format!("Forbidden: cannot change while the job has {learners} learners; set spec.learner.replicas to 0 first"),
            );
        }
        if old_ag != new_ag && learners > 0 {
            errs.add(
                "spec.learner.aggregatorConfig",
                format!("Forbidden: cannot change while the job has {learners} learners; set spec.learner.replicas to 0 first"),
            );
        }
    }
    errs.into_result()
}

/// Validates an AggregatorConfig.
pub fn validate_aggregator_config(config: &AggregatorConfig) -> Result<(), ValidationErrors> {
    let mut errs = Errors::default();
    // The job's volumes join the aggregator's pod, so mounts are checked against each job instead.
    check_template("spec.aggregator.template", &config.spec.aggregator.template, Role::Aggregator, None, &mut errs);
    errs.into_result()
}

fn check_job_name(meta: &ObjectMeta, errs: &mut Errors) {
    let max = names::max_job_name_len();
    let why = "every pod of the job gets a Service of its own name";
    match (meta.name.as_deref(), meta.generate_name.as_deref()) {
        (Some(name), _) if !name.is_empty() => {
            if let Some(problem) = dns1035_problem(name) {
                errs.add("metadata.name", format!("Invalid value {name:?}: {problem}, since {why}"));
            } else if name.len() > max {
                errs.add(
                    "metadata.name",
                    format!(
                        "Too long: {name:?} has {} characters; the job's pods and Services are named \
                         <name>-ddp-learner-<index>-<rank>, which must fit in 63 characters, so use at most {max}",
                        name.len()
                    ),
                );
            }
        }
        (_, Some(prefix)) if !prefix.is_empty() => {
            // The API server appends 5 random characters.
            let max_prefix = max - 5;
            let probe = format!("{prefix}x");
            if let Some(problem) = dns1035_problem(&probe) {
                errs.add("metadata.generateName", format!("Invalid value {prefix:?}: {problem}, since {why}"));
            } else if prefix.len() > max_prefix {
                errs.add(
                    "metadata.generateName",
                    format!("Too long: {prefix:?} has {} characters; use at most {max_prefix} so the generated name fits in {max}", prefix.len()),
                );
            }
        }
        _ => {}
    }
}

fn check_replicas(path: &str, replicas: Option<i32>, errs: &mut Errors) {
    if let Some(n) = replicas
        && !(0..=MAX_REPLICAS).contains(&n)
    {
        errs.add(path, format!("Invalid value: {n}: must be between 0 and {MAX_REPLICAS}"));
    }
}

fn check_object_reference(path: &str, reference: &str, errs: &mut Errors) {
    let (namespace, name) = reference.split_once('/').map_or((None, reference), |(ns, n)| (Some(ns), n));
    if let Some(ns) = namespace
        && let Some(problem) = dns1123_label_problem(ns)
    {
        errs.add(path, format!("Invalid value {reference:?}: the namespace {problem}; use `name` or `namespace/name`"));
    }
    if let Some(problem) = dns1123_subdomain_problem(name) {
        errs.add(path, format!("Invalid value {reference:?}: the name {problem}; use `name` or `namespace/name`"));
    }
}

/// Checks volume names and returns them.
fn check_volumes(path: &str, volumes: &[Volume], errs: &mut Errors) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for (i, volume) in volumes.iter().enumerate() {
        let field = format!("{path}[{i}].name");
        if let Some(problem) = dns1123_label_problem(&volume.name) {
            errs.add(field, format!("Invalid value {:?}: a volume name {problem}", volume.name));
        } else if !seen.insert(volume.name.clone()) {
            errs.add(field, format!("Duplicate value {:?}: volume names must be unique", volume.name));
        }
    }
    seen
}

/// Checks a role's pod template. `job_volumes` are the volumes every pod of the job gets, or
/// `None` when they are not known (an AggregatorConfig is shared by many jobs).
fn check_template(
    path: &str,
    template: &PodTemplateSpec,
    role: Role,
    job_volumes: Option<&BTreeSet<String>>,
    errs: &mut Errors,
) {
    let Some(spec) = template.spec.as_ref().filter(|s| !s.containers.is_empty()) else {
        errs.add(
            format!("{path}.spec.containers"),
            format!("Required value: the {role} needs at least one container; add one with a name and an image"),
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
        (Some("Always"), Role::Coordinator) => errs.add(
            format!("{path}.spec.restartPolicy"),
            "Unsupported value \"Always\": the coordinator's exit decides the job's phase, so use \"Never\" (the default) or \"OnFailure\"",
        ),
        (Some("Always"), _) => {}
        (Some(other), _) => errs.add(
            format!("{path}.spec.restartPolicy"),
            format!("Unsupported value {other:?}: use one of \"Always\", \"OnFailure\", \"Never\""),
        ),
    }

    if role == Role::Coordinator {
        check_sidecar_reservations(path, &spec.containers, errs);
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

/// The orchestrator adds the replica endpoint to the coordinator's pod: its name and port are taken.
fn check_sidecar_reservations(path: &str, containers: &[Container], errs: &mut Errors) {
    for (i, container) in containers.iter().enumerate() {
        if container.name == REPLICAS_CONTAINER_NAME {
            errs.add(
                format!("{path}.spec.containers[{i}].name"),
                format!("Invalid value {REPLICAS_CONTAINER_NAME:?}: the name is reserved for the replica endpoint sidecar the orchestrator adds; rename the container"),
            );
        }
        for (j, port) in container.ports.iter().flatten().enumerate() {
            if port.container_port == REPLICAS_PORT {
                errs.add(
                    format!("{path}.spec.containers[{i}].ports[{j}].containerPort"),
                    format!("Invalid value: {REPLICAS_PORT}: the port is reserved for the replica endpoint sidecar in the coordinator's pod; pick another"),
                );
            }
        }
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

/// Why `s` is not a DNS-1123 label (what container, volume and namespace names must be).
fn dns1123_label_problem(s: &str) -> Option<String> {
    if s.is_empty() {
        return Some("must not be empty".into());
    }
    if s.len() > 63 {
        return Some(format!("must be at most 63 characters (it has {})", s.len()));
    }
    let ok_chars = s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !ok_chars || s.starts_with('-') || s.ends_with('-') {
        return Some(
            "must consist of lowercase letters, digits and '-', and start and end with a letter or digit".into(),
        );
    }
    None
}

/// Why `s` is not a DNS-1035 label (what a Service name must be).
fn dns1035_problem(s: &str) -> Option<String> {
    dns1123_label_problem(s)
        .or_else(|| (!s.as_bytes()[0].is_ascii_lowercase()).then(|| "must start with a lowercase letter".to_owned()))
}

/// Why `s` is not a DNS-1123 subdomain (what most object names must be).
fn dns1123_subdomain_problem(s: &str) -> Option<String> {
    if s.len() > 253 {
        return Some(format!("must be at most 253 characters (it has {})", s.len()));
    }
    s.split('.').find_map(dns1123_label_problem).map(|p| format!("{p} in every dot-separated part"))
}

/// Why `s` is not an IANA service name (what a port name must be).
fn port_name_problem(s: &str) -> Option<String> {
    let valid = (1..=15).contains(&s.len())
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && s.bytes().any(|b| b.is_ascii_lowercase())
        && !s.starts_with('-')
        && !s.ends_with('-')
        && !s.contains("--");
    (!valid).then(|| {
        "must be 1 to 15 lowercase letters, digits and single '-', with at least one letter, e.g. \"di-port\"".into()
    })
}

fn quoted(values: &[&str]) -> String {
    values.iter().map(|v| format!("{v:?}")).collect::<Vec<_>>().join(", ")
}
