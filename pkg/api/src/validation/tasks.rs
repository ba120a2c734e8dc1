//! The checks of a task job (DI-orchestrator 1.x's form): its tasks' names, types, counts and
//! templates, and the fields that belong to one form of job only.

use std::collections::{BTreeMap, BTreeSet};

use super::naming::dns1035_problem;
use super::pod::check_template;
use super::{Errors, quoted};
use crate::contract::{DNS_LABEL_MAX, MAX_REPLICAS};
use crate::dijob::{DIJob, DIJobSpec};
use crate::task::TaskType;
use crate::tasks;

const RECREATE: &str = "delete and re-create the DIJob to change it";

/// Checks a (defaulted) task job's tasks and the fields around them.
pub(super) fn check_task_job(job: &DIJob, job_volumes: &BTreeSet<String>, errs: &mut Errors) {
    let spec = &job.spec;
    for (field, present) in [
        ("spec.coordinator", spec.coordinator.is_some()),
        ("spec.collector", spec.collector.is_some()),
        ("spec.learner", spec.learner.is_some()),
    ] {
        if present {
            errs.add(
                field,
                "Forbidden: a job has either roles (coordinator, collector, learner) or spec.tasks, not both; \
                 move this role into a task, or remove spec.tasks",
            );
        }
    }
    if spec.restart_limit.is_some() {
        errs.add("spec.restartLimit", "Forbidden: a task job counts its restarts against spec.backoffLimit; use that");
    }
    if let Some(limit) = spec.backoff_limit.filter(|l| *l < 0) {
        errs.add("spec.backoffLimit", format!("Invalid value: {limit}: must be 0 or more"));
    }
    let specs = spec.tasks.as_deref().unwrap_or_default();
    if specs.is_empty() {
        errs.add(
            "spec.tasks",
            "Required value: a task job needs at least one task, e.g. {name: learner, type: learner, template: ...}",
        );
        return;
    }

    let job_name = job.metadata.name.clone().unwrap_or_default();
    // A job name that is itself too long is reported once, for the name.
    let name_fits = !job_name.is_empty() && job_name.len() <= DNS_LABEL_MAX - tasks::subdomain("").len();
    let mut names: BTreeMap<String, usize> = BTreeMap::new();
    let mut types: BTreeMap<TaskType, usize> = BTreeMap::new();
    let resolved = tasks::tasks(job);
    for (i, (task, spec)) in resolved.iter().zip(specs).enumerate() {
        let at = format!("spec.tasks[{i}]");
        match spec.name.as_deref().filter(|n| !n.is_empty()) {
            None if task.type_ == TaskType::None => errs.add(
                format!("{at}.name"),
                "Required value: a task of type none (or without a type) needs a name, e.g. \"actor\"",
            ),
            None => {}
            Some(name) => {
                if let Some(problem) = dns1035_problem(name) {
                    errs.add(
                        format!("{at}.name"),
                        format!(
                            "Invalid value {name:?}: a task name {problem}, since it is part of its pods' host names"
                        ),
                    );
                }
            }
        }
        if let Some(first) = names.insert(task.name.clone(), i) {
            errs.add(
                format!("{at}.name"),
                format!(
                    "Duplicate value {:?}: spec.tasks[{first}] has that name; task names must be unique",
                    task.name
                ),
            );
        }
        if task.type_ != TaskType::None
            && let Some(first) = types.insert(task.type_, i)
        {
            errs.add(
                format!("{at}.type"),
                format!(
                    "Duplicate value {:?}: spec.tasks[{first}] has that type; a job has at most one task of each \
                     type but none; give this one type none and a name",
                    task.type_.as_str()
                ),
            );
        }
        match spec.replicas {
            Some(n) if !(1..=MAX_REPLICAS).contains(&n) => errs.add(
                format!("{at}.replicas"),
                format!(
                    "Invalid value: {n}: a task has between 1 and {MAX_REPLICAS} pods; remove the task instead of 0"
                ),
            ),
            _ => {
                let longest = tasks::pod_name(&job_name, &task.name, task.replicas.saturating_sub(1));
                if name_fits && longest.len() > DNS_LABEL_MAX {
                    errs.add(
                        format!("{at}.name"),
                        format!(
                            "Too long: the task's last pod would be {longest:?} ({} characters), over the 63 a host \
                             name may have; shorten the task's or the job's name",
                            longest.len()
                        ),
                    );
                }
            }
        }
        check_task_minimum(job, &at, spec.min_available, task.replicas, errs);
        check_template(&format!("{at}.template"), task.template, None, Some(job_volumes), errs);
        if task.completion
            && let Some(policy) =
                task.template.spec.as_ref().and_then(|s| s.restart_policy.as_deref()).filter(|p| *p == "Always")
        {
            errs.add(
                format!("{at}.template.spec.restartPolicy"),
                format!(
                    "Unsupported value {policy:?}: this task decides the job's success, so its pods must be able \
                     to finish; use {}",
                    quoted(&["Never", "OnFailure"])
                ),
            );
        }
    }
}

/// A task's `minAvailable`: between 0 (out of the gang) and its replicas, on a gang job.
fn check_task_minimum(job: &DIJob, at: &str, minimum: Option<i32>, replicas: u32, errs: &mut Errors) {
    let Some(minimum) = minimum else { return };
    let field = format!("{at}.minAvailable");
    if !crate::gang::enabled(job) {
        errs.add(
            field,
            "Forbidden: spec.gang.enabled is false, so there is no gang to need this task's pods; remove it, or \
             remove spec.gang.enabled",
        );
    } else if minimum < 0 {
        errs.add(field, format!("Invalid value: {minimum}: must be 0 (outside the gang) or more"));
    } else if minimum as u32 > replicas {
        errs.add(
            field,
            format!(
                "Invalid value: {minimum}: more than the task's {replicas} pods; give at most {replicas}, or 0 to \
                 place the task's pods outside the gang"
            ),
        );
    }
}

/// A role job has no use for the fields of a task job: refused rather than silently ignored.
pub(super) fn check_role_job_has_no_task_fields(spec: &DIJobSpec, errs: &mut Errors) {
    let why = "applies to task jobs (spec.tasks) only";
    if spec.backoff_limit.is_some() {
        errs.add("spec.backoffLimit", format!("Forbidden: {why}; a role job limits restarts with spec.restartLimit"));
    }
    if spec.restart_policy.is_some() {
        errs.add("spec.restartPolicy", format!("Forbidden: {why}; remove it"));
    }
    if spec.priority.is_some() {
        errs.add("spec.priority", format!("Forbidden: {why}; a role job uses spec.priorityClassName"));
    }
    if spec.preemptible.is_some() {
        errs.add("spec.preemptible", format!("Forbidden: {why}; remove it"));
    }
}

/// What a live task job may change: the tasks' replicas (which rebuilds its pods), its backoff
/// limit, restart policy and suspension. Its tasks themselves stay as they were created.
pub(super) fn check_task_update(old: &DIJobSpec, new: &DIJobSpec, errs: &mut Errors) {
    let (o, n) = (old.tasks.as_deref().unwrap_or_default(), new.tasks.as_deref().unwrap_or_default());
    if o.len() != n.len() {
        errs.add(
            "spec.tasks",
            format!(
                "Forbidden: tasks cannot be added to or removed from a job ({} before, {} now); {RECREATE}",
                o.len(),
                n.len()
            ),
        );
        return;
    }
    for (i, (before, after)) in o.iter().zip(n).enumerate() {
        let at = format!("spec.tasks[{i}]");
        if before.name != after.name || before.type_ != after.type_ {
            errs.add(format!("{at}.name"), format!("Forbidden: a task's name and type are immutable; {RECREATE}"));
        }
        if before.template != after.template {
            errs.add(format!("{at}.template"), format!("Forbidden: a task's pod template is immutable; {RECREATE}"));
        }
        if before.completion != after.completion {
            errs.add(format!("{at}.completion"), format!("Forbidden: which task decides is immutable; {RECREATE}"));
        }
    }
    if old.priority != new.priority || old.preemptible != new.preemptible {
        errs.add("spec.priority", format!("Forbidden: priority and preemptible are immutable; {RECREATE}"));
    }
}
