//! Defaulting: what the mutating webhook fills in on apply, and what the reconciler and the CLI
//! assume when it has not run. Each function is idempotent: defaulting twice changes nothing.

use k8s_openapi::api::core::v1::{ContainerPort, PodTemplateSpec};

use crate::aggregator_config::AggregatorConfig;
use crate::contract::{PORT_NAME, Role};
use crate::dijob::DIJob;
use crate::resources::{di_port, main_container_index};
use crate::task::{JobRestartPolicy, Priority, TaskSpec, TaskType};
use crate::tasks::DEFAULT_BACKOFF_LIMIT;

/// How a finished job's pods are cleaned up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CleanPodPolicy {
    /// Delete the pods still running or pending.
    Running,
    /// Delete every pod.
    All,
    /// Keep every pod.
    None,
}

impl CleanPodPolicy {
    pub const VALUES: [&'static str; 3] = ["Running", "All", "None"];

    /// Parses a spec value; accepts 0.2's legacy `ALL`.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "Running" => Some(Self::Running),
            "All" | "ALL" => Some(Self::All),
            "None" => Some(Self::None),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "Running",
            Self::All => "All",
            Self::None => "None",
        }
    }
}

/// The job's clean pod policy; unset (or, for an unvalidated job, unknown) means `Running`.
pub fn clean_pod_policy(job: &DIJob) -> CleanPodPolicy {
    job.spec.clean_pod_policy.as_deref().and_then(CleanPodPolicy::parse).unwrap_or(CleanPodPolicy::Running)
}

/// Fills in a DIJob's defaults in place.
pub fn default_dijob(job: &mut DIJob) {
    let spec = &mut job.spec;
    match spec.clean_pod_policy.as_deref() {
        None | Some("") => spec.clean_pod_policy = Some(CleanPodPolicy::Running.as_str().into()),
        Some(legacy) => {
            if let Some(policy) = CleanPodPolicy::parse(legacy) {
                spec.clean_pod_policy = Some(policy.as_str().into());
            }
        }
    }
    if let Some(coordinator) = spec.coordinator.as_mut() {
        default_template(&mut coordinator.template, Role::Coordinator);
        if let Some(pod) = coordinator.template.spec.as_mut()
            && pod.restart_policy.is_none()
        {
            // The coordinator's exit is the job's outcome: a restart in place would hide it.
            pod.restart_policy = Some("Never".into());
        }
    }
    if let Some(collector) = spec.collector.as_mut() {
        default_template(&mut collector.template, Role::Collector);
    }
    if let Some(learner) = spec.learner.as_mut() {
        default_template(&mut learner.template, Role::Learner);
    }
    if let Some(tasks) = spec.tasks.as_mut() {
        default_tasks(tasks);
        spec.backoff_limit.get_or_insert(DEFAULT_BACKOFF_LIMIT);
        spec.restart_policy.get_or_insert(JobRestartPolicy::Pod);
        spec.priority.get_or_insert(Priority::Normal);
    }
}

/// A task without a name takes its type's (as in DI-orchestrator 1.x), replicas default to 1,
/// and pods to `restartPolicy: Never`: the orchestrator replaces a failed pod itself, under the
/// same name, and counts it; a restart in place would hide the failure.
fn default_tasks(tasks: &mut [TaskSpec]) {
    for task in tasks {
        if task.name.as_deref().is_none_or(str::is_empty)
            && let Some(type_) = task.type_.filter(|t| *t != TaskType::None)
        {
            task.name = Some(type_.as_str().to_owned());
        }
        task.replicas.get_or_insert(1);
        if let Some(pod) = task.template.spec.as_mut()
            && pod.restart_policy.is_none()
        {
            pod.restart_policy = Some("Never".into());
        }
    }
}

/// Fills in an AggregatorConfig's defaults in place.
pub fn default_aggregator_config(config: &mut AggregatorConfig) {
    default_template(&mut config.spec.aggregator.template, Role::Aggregator);
}

/// Gives the main container a `di-port` with the role's default port unless some container of the
/// pod already has one. An unnamed port that already uses the default number is named instead,
/// so the pod never declares the same port twice.
fn default_template(template: &mut PodTemplateSpec, role: Role) {
    let Some(spec) = template.spec.as_mut() else { return };
    if di_port(spec).is_some() {
        return;
    }
    let Some(main) = main_container_index(spec) else { return };
    let ports = spec.containers[main].ports.get_or_insert_with(Vec::new);
    match ports.iter_mut().find(|p| p.name.is_none() && p.container_port == role.default_port()) {
        Some(port) => port.name = Some(PORT_NAME.into()),
        None => ports.push(ContainerPort {
            name: Some(PORT_NAME.into()),
            container_port: role.default_port(),
            protocol: Some("TCP".into()),
            ..ContainerPort::default()
        }),
    }
}
