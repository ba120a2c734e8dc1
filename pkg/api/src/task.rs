//! The task form of a DIJob (DI-orchestrator 1.x's `v2alpha1`): a list of named worker groups
//! instead of 0.2's three roles. The rules that turn tasks into pods (names, ranks, peers, the
//! environment) live in `crate::tasks`; this file is only the API.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::schema;

/// One group of identical workers of a task job.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskSpec {
    /// Name of the task, a DNS label unique in the job; its pods are `<job>-<name>-<index>` and
    /// its peers are listed in `DI_<NAME>_NODES`. Unset takes the task's type as its name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,

    /// What the task's workers do: `learner`, `collector`, `evaluator` or `none`. Typed tasks are
    /// at most one per type; a job with a learner task succeeds when its learners do.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<TaskType>,

    /// Number of pods of the task (at least 1). Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = crate::contract::MAX_REPLICAS))]
    pub replicas: Option<i32>,

    /// `true` makes this task the one whose pods decide the job's success: the job succeeds when
    /// every pod of the marked tasks has succeeded. Unset: the learner task decides, and a job
    /// without one succeeds when every pod has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion: Option<bool>,

    /// How many of the task's pods the job's gang needs placed at once (see `spec.gang`): the
    /// scheduler places no pod of the gang until it can place the sum of its tasks' minimums.
    /// Default: every pod of the task. `0` takes the task out of the gang: its pods are placed
    /// on their own, as workers that can join late are. At most `replicas`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_available: Option<i32>,

    /// Pod template of every pod of the task. Its restart policy defaults to `Never`: a failed
    /// pod is replaced by the orchestrator under the same name (see `spec.restartPolicy`).
    #[serde(default)]
    #[schemars(schema_with = "schema::pod_template")]
    pub template: PodTemplateSpec,
}

/// What a task's workers do (DI-orchestrator 1.x's task types): `learner`, `collector`,
/// `evaluator` or `none`. At most one task per type but `none`, which needs a name; a job with a
/// learner task succeeds when its learners do.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum TaskType {
    Learner,
    Collector,
    Evaluator,
    /// Any other worker; such a task needs a name.
    None,
}

impl TaskType {
    pub const fn as_str(self) -> &'static str {
        match self {
            TaskType::Learner => "learner",
            TaskType::Collector => "collector",
            TaskType::Evaluator => "evaluator",
            TaskType::None => "none",
        }
    }
}

/// Task jobs: `normal` (default) or `high`, kept from DI-orchestrator 1.x, which used it to order
/// allocation. Pods take their priority from `priorityClassName` and their templates.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    Normal,
    High,
}

/// What the orchestrator replaces when a pod of a task job fails: `Pod` (default) only that pod,
/// under the same name; `Job` every pod of the job in one step, for workers that cannot survive
/// a peer's restart (synchronous training).
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum JobRestartPolicy {
    /// Only the failed pod, under the same name: its address and every peer's `DI_NODES` stay
    /// true, and DI-engine's mesh reconnects to it.
    Pod,
    /// Every pod of the job in one step, for workers that cannot survive a peer's restart
    /// (synchronous training).
    Job,
}
