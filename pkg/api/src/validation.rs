//! Validation: everything that would make a job fail later is refused when it is applied, each
//! problem with the field's path, what is wrong, and how to fix it.
//!
//! The functions expect a defaulted object (see [`crate::defaults`]); callers default first.

use std::collections::BTreeSet;
use std::fmt;

use k8s_openapi::api::core::v1::{PodTemplateSpec, Volume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::aggregator_config::AggregatorConfig;
use crate::contract::{DNS_LABEL_MAX, MAX_GPUS_PER_LEARNER, MAX_REPLICAS, Role, names};
use crate::defaults::{CleanPodPolicy, default_dijob};
use crate::dijob::DIJob;

mod collectors;
mod multikueue;
mod naming;
mod pod;
mod tasks;

use naming::{dns1035_problem, dns1123_label_problem, dns1123_subdomain_problem, quoted};
use pod::check_template;

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
    check_job_name(&job.metadata, job.spec.is_task_job(), &mut errs);
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

    if spec.is_task_job() {
        tasks::check_task_job(job, &job_volumes, &mut errs);
    } else {
        check_roles(spec, &job_volumes, &mut errs);
    }
    multikueue::check(job, &mut errs);
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

/// Checks a role job's roles (DI-orchestrator 0.2's form).
fn check_roles(spec: &crate::DIJobSpec, job_volumes: &BTreeSet<String>, errs: &mut Errors) {
    tasks::check_role_job_has_no_task_fields(spec, errs);
    if spec.coordinator.is_none() {
        errs.add(
            "spec.coordinator",
            "Required value: every DIJob needs a coordinator (or, as a task job, spec.tasks); add spec.coordinator.template with its container",
        );
    }
    for role in spec.role_templates() {
        let path = format!("{}.template", role.path);
        check_template(&path, role.template, Some(role.role), Some(job_volumes), errs);
    }
    if let Some(collector) = &spec.collector {
        check_replicas("spec.collector.replicas", collector.replicas, errs);
        check_replicas("spec.collector.minReplicas", collector.min_replicas, errs);
        check_replicas("spec.collector.maxReplicas", collector.max_replicas, errs);
        collectors::check(collector, errs);
    }
    if let Some(learner) = &spec.learner {
        check_replicas("spec.learner.replicas", learner.replicas, errs);
        if let Some(gpus) = learner.gpus
            && !(0..=MAX_GPUS_PER_LEARNER).contains(&gpus)
        {
            errs.add(
                "spec.learner.gpus",
                format!("Invalid value: {gpus}: GPUs per learner must be between 0 and {MAX_GPUS_PER_LEARNER}"),
            );
        }
        if let Some(reference) = learner.aggregator_config.as_deref() {
            check_object_reference("spec.learner.aggregatorConfig", reference, errs);
        }
    }
}

/// What a valid, defaulted job asks for that will not happen as it reads: said back on apply as
/// admission warnings (and by `kubectl di create`), never a refusal.
pub fn warnings(job: &DIJob) -> Vec<String> {
    let spec = &job.spec;
    let mut said = vec![];
    collectors::warnings(job, &mut said);
    if spec.restart_limit.is_some() {
        // A failed pod is what restartLimit counts; a pod that restarts its containers in place
        // never fails, so its replacements, and the limit, never come.
        let roles = [
            ("spec.collector", spec.collector.as_ref().map(|c| &c.template)),
            ("spec.learner", spec.learner.as_ref().map(|l| &l.template)),
        ];
        for (path, template) in roles {
            let Some(template) = template else { continue };
            let policy = template.spec.as_ref().and_then(|s| s.restart_policy.as_deref()).unwrap_or("Always");
            if policy != "Never" {
                said.push(format!(
                    "spec.restartLimit: counts pods that fail, and {path}.template.spec.restartPolicy is {policy:?} \
                     (Kubernetes' default when unset), so the kubelet restarts its containers in place and its pods \
                     never fail: set restartPolicy: Never on that template for restartLimit to act"
                ));
            }
        }
    }
    said
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
    if o.is_task_job() != n.is_task_job() {
        errs.add("spec.tasks", format!("Forbidden: a job cannot switch between roles and tasks; {RECREATE}"));
        return errs.into_result();
    }
    tasks::check_task_update(o, n, &mut errs);
    if o.group != n.group {
        errs.add("spec.group", format!("Forbidden: the group is immutable; {RECREATE}"));
    }
    if o.priority_class_name != n.priority_class_name {
        errs.add("spec.priorityClassName", format!("Forbidden: the priority is immutable; {RECREATE}"));
    }
    if o.protect_core.unwrap_or(false) != n.protect_core.unwrap_or(false) {
        errs.add(
            "spec.protectCore",
            format!("Forbidden: whether the core has a disruption budget is fixed when its pods are made; {RECREATE}"),
        );
    }
    if crate::gang::enabled(&old) != crate::gang::enabled(&new) {
        errs.add(
            "spec.gang.enabled",
            format!("Forbidden: whether a job is gang-scheduled is fixed when its pods are made; {RECREATE}"),
        );
    }
    check_queue_update(&old, &new, &mut errs);
    multikueue::check_update(&old, &new, &mut errs);
    collectors::check_update(o, n, RECREATE, &mut errs);
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
        // A template kept as it was was checked when the job was made, perhaps by an older
        // release with fewer rules: refusing it now would leave the job unable to change at all.
        if before.is_some() && before == after {
            let template = format!("{path}.template.");
            errs.0.retain(|e| !e.path.starts_with(&template));
        }
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

/// Validates an update that leaves the spec as it was: only the job's queue, and what MultiKueue
/// goes by, may not change (see [`check_queue_update`]); any other such write (labels, finalizers) is let through, whatever the
/// stored spec, which an older release may have accepted.
pub fn validate_dijob_metadata_update(old: &DIJob, new: &DIJob) -> Result<(), ValidationErrors> {
    let mut errs = Errors(vec![]);
    check_queue_update(old, new, &mut errs);
    errs.into_result()
}

/// A job's Kueue queue (its label) may be set, changed or removed only while no pod of it may
/// run: before the orchestrator has seen it, while its queue holds it, while it is suspended, or
/// once it has finished. A running job put in a queue would lose its pods until admitted; one
/// taken out would keep an admission it no longer needs, or start pods no quota was given for.
fn check_queue_update(old: &DIJob, new: &DIJob, errs: &mut Errors) {
    use crate::contract::kueue::{QUEUE_NAME, QUEUED};
    if multikueue::check_metadata(old, new, errs) {
        return;
    }
    let queue = |job: &DIJob| job.metadata.labels.as_ref().and_then(|l| l.get(QUEUE_NAME)).cloned();
    if queue(old) == queue(new) {
        return;
    }
    let status = old.status.as_ref();
    let phase = status.and_then(|s| s.phase);
    let held = status.is_some_and(|s| s.conditions.iter().any(|c| c.type_ == QUEUED && c.status == "True"));
    // Suspended before and after: a write that resumes the job may not move it too.
    let suspended = old.spec.is_suspended() && new.spec.is_suspended();
    if phase.is_none() || phase.is_some_and(|p| p.is_finished()) || held || suspended {
        return;
    }
    errs.add(
        format!("metadata.labels[{QUEUE_NAME}]"),
        "Forbidden: the queue of a job that may be running cannot change: suspend the job first (spec.suspend: \
         true), or delete and re-create it in the queue it needs"
            .to_string(),
    );
}

/// Validates an AggregatorConfig.
pub fn validate_aggregator_config(config: &AggregatorConfig) -> Result<(), ValidationErrors> {
    let mut errs = Errors::default();
    // The job's volumes join the aggregator's pod, so mounts are checked against each job instead.
    check_template(
        "spec.aggregator.template",
        &config.spec.aggregator.template,
        Some(Role::Aggregator),
        None,
        &mut errs,
    );
    errs.into_result()
}

fn check_job_name(meta: &ObjectMeta, task_job: bool, errs: &mut Errors) {
    // A task job's pods share one Service, `di-<name>`; each task's pod names are checked with
    // the task. A role job's longest derived name is a DDP learner's.
    let max = if task_job { DNS_LABEL_MAX - crate::tasks::subdomain("").len() } else { names::max_job_name_len() };
    let (why, longest) = if task_job {
        ("the job's pods share the Service di-<name>", "di-<name>")
    } else {
        ("every pod of the job gets a Service of its own name", "<name>-ddp-learner-<index>-<rank>")
    };
    match (meta.name.as_deref(), meta.generate_name.as_deref()) {
        (Some(name), _) if !name.is_empty() => {
            if let Some(problem) = dns1035_problem(name) {
                errs.add("metadata.name", format!("Invalid value {name:?}: {problem}, since {why}"));
            } else if name.len() > max {
                errs.add(
                    "metadata.name",
                    format!(
                        "Too long: {name:?} has {} characters; the job's objects are named {longest}, \
                         which must fit in 63 characters, so use at most {max}",
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
