//! The task form of a DIJob (DI-orchestrator 1.x's `v2alpha1`): a list of named worker groups
//! instead of 0.2's three roles. The rules that turn tasks into pods (names, ranks, peers, the
//! environment) live in `crate::tasks`; this file is only the API.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::schema;

/// Each task is a group of identical pods.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskSpec {
    /// Name of the task, a DNS label unique in the job: its pods are `<job>-<name>-<index>` (at
    /// most 63 characters) and its peers are listed in `DI_<NAME>_NODES`. Unset takes the task's
    /// type; required for type `none`. Fixed once the job exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,

    // kube gives an optional enum field its type's description: `TaskType`'s doc is this field's.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<TaskType>,

    /// Number of pods of the task, 1 to 1000; default 1. It may change while the job runs, which
    /// rebuilds the job's pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = crate::contract::MAX_REPLICAS))]
    pub replicas: Option<i32>,

    /// `true` makes this task one whose pods decide the job's success: the job succeeds when every
    /// pod of the marked tasks has succeeded. Unset on every task: the learner task decides, or,
    /// without one, every pod. Fixed once the job exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion: Option<bool>,

    /// How many of the task's pods the job's gang needs placed at once (see `spec.gang`), 0 to
    /// `replicas`; default all of them. `0` takes the task out of the gang, for workers that can
    /// join late. Refused when `spec.gang.enabled` is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_available: Option<i32>,

    /// Pod template of every pod of the task, a core/v1 PodTemplateSpec (see
    /// `kubectl explain pod.spec`). Its `restartPolicy` defaults to `Never`, so a failed pod is
    /// replaced under the same name (see `spec.restartPolicy`). Fixed once the job exists.
    #[serde(default)]
    #[schemars(schema_with = "schema::pod_template")]
    pub template: PodTemplateSpec,
}

/// What the task's workers do: `learner`, `collector`, `evaluator` or `none` (the default, which
/// needs a name). At most one task per type but `none`; a job with a learner task succeeds when
/// its learners do. Fixed once the job exists.
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

/// Task jobs: `normal` (the default) or `high`; kept from DI-orchestrator 1.x, which ordered
/// allocation by it, and not acted on: pods take their priority from `priorityClassName` and
/// their templates. Fixed once the job exists.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    Normal,
    High,
}

/// Task jobs: what is replaced when a pod fails. `Pod` (the default) replaces only that pod,
/// under the same name; `Job` replaces every pod of the job in one step, for workers that cannot
/// survive a peer's restart (synchronous training).
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum JobRestartPolicy {
    /// Only the failed pod, under the same name: its address and every peer's `DI_NODES` stay
    /// true, and DI-engine's mesh reconnects to it.
    Pod,
    /// Every pod of the job in one step, for workers that cannot survive a peer's restart
    /// (synchronous training).
    Job,
}
