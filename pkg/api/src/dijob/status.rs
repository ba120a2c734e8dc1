//! The `DIJob`'s status: what the orchestrator observed of the job, its phase, its conditions
//! and its pod counts.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::schema;

/// The observed state of a DIJob, recomputed by the orchestrator from the job's pods.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DIJobStatus {
    // kube gives an optional enum field its type's description: `Phase`'s doc is this field's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,

    /// The job's conditions, one per type, with the reason of the latest transition.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<DIJobCondition>,

    /// Pod counts per replica type (Coordinator, Collector, Learner, Aggregator, DDPLearner).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub replica_status: BTreeMap<String, ReplicaStatus>,

    /// The `metadata.generation` this status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Ready and desired collectors as `ready/desired`, for `kubectl get`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collectors: Option<String>,

    /// Role jobs with collectors: the collectors there are (pending or running, not
    /// terminating), for the scale subresource that `kubectl scale` and autoscalers read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collector_replicas: Option<i32>,

    /// Role jobs with collectors: the label selector of the job's collector pods, for the scale
    /// subresource (an HPA finds the pods whose metrics it averages by it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collector_selector: Option<String>,

    /// Queued role jobs with `spec.collector.minReplicas`: how the collectors above the job's
    /// core stand in their queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collectors_above_core: Option<CollectorsAboveCore>,

    /// Ready and desired logic learners as `ready/desired`, for `kubectl get`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learners: Option<String>,

    /// Pods the job wants now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,

    /// Pods of the job that are ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,

    /// Failed pods replaced so far (task jobs: counted against `spec.backoffLimit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restarts: Option<i32>,

    /// Task jobs: pod counts per task, by pod phase (`Pending`, `Running`, `Succeeded`, `Failed`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub task_status: BTreeMap<String, BTreeMap<String, i32>>,

    /// Role jobs: the UID of the coordinator pod the job runs now. Only that pod's replica
    /// endpoint may scale the job (a predecessor's coordinator of the same name, still
    /// terminating after the job was submitted again, may not).
    #[serde(default, rename = "coordinatorUID", skip_serializing_if = "Option::is_none")]
    pub coordinator_uid: Option<String>,
}

/// How the collectors above a queued job's core stand, each on its own Workload.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CollectorsAboveCore {
    /// Collectors whose Workload is admitted: they run, or are about to.
    pub admitted: i32,
    /// Collectors `spec.collector.replicas` asks for whose Workload waits for quota.
    pub waiting: i32,
    /// Of those waiting, the ones whose Workload was preempted (their pods deleted; they run
    /// again when readmitted).
    pub preempted: i32,
    /// Of those admitted, the ones above `spec.collector.replicas` (up to `maxReplicas`),
    /// running on spare room.
    pub spare: i32,
}

/// Where the job is in its life. A role job's phase follows its coordinator pod: Created,
/// Running, Succeeded, Failed or Unknown; a task job's follows all its pods: Pending, Starting,
/// Running, Restarting, Succeeded or Failed.
// Every phase DI-orchestrator 0.2 and 1.x write reads back; any other value reads as Unknown, so
// no stored job fails a read.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum Phase {
    /// Task jobs: not every pod has been created yet.
    Pending,
    /// Task jobs: every pod exists, not all run yet.
    Starting,
    /// Task jobs: failed pods are being replaced, or the pods rebuilt after a task was scaled.
    Restarting,
    /// Written only by DI-orchestrator 1.x (its pods moved to other nodes); read, never written.
    Rescheduling,
    /// Submitted; the coordinator exists but is not running yet.
    Created,
    /// The coordinator is running (task jobs: every pod is running).
    Running,
    /// The coordinator exited successfully (task jobs: every pod of the deciding tasks did).
    Succeeded,
    /// The coordinator failed, or the job could not be run (task jobs: more failures than
    /// `spec.backoffLimit`).
    Failed,
    /// The coordinator's state cannot be observed; also any phase no version of the DIJob has.
    #[serde(other)]
    Unknown,
}

impl Phase {
    /// Every phase a stored job may have, task jobs' and DI-orchestrator 1.x's too.
    pub const ALL: [Phase; 9] = [
        Phase::Pending,
        Phase::Starting,
        Phase::Restarting,
        Phase::Rescheduling,
        Phase::Created,
        Phase::Running,
        Phase::Succeeded,
        Phase::Failed,
        Phase::Unknown,
    ];

    /// The phase `name` spells exactly (a condition's type, say), if any: unlike reading it,
    /// which takes any other word for Unknown.
    pub fn named(name: &str) -> Option<Phase> {
        let phase: Phase = serde_json::from_value(name.into()).ok()?;
        (phase != Phase::Unknown || name == "Unknown").then_some(phase)
    }

    pub fn is_finished(self) -> bool {
        matches!(self, Phase::Succeeded | Phase::Failed)
    }
}

/// A condition of a DIJob (DI-orchestrator 0.2's `DIJobCondition`).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DIJobCondition {
    /// Type of the condition: a phase (Created, Running, Succeeded, Failed), or Suspended,
    /// RestartLimitExceeded.
    #[serde(rename = "type")]
    pub type_: String,
    /// True, False or Unknown.
    pub status: String,
    /// Machine-readable reason of the last transition, in CamelCase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Human-readable detail of the last transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the condition was last updated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::time")]
    pub last_update_time: Option<Time>,
    /// When the condition last changed status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::time")]
    pub last_transition_time: Option<Time>,
}

/// Pod counts of one replica type.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaStatus {
    /// Pods pending or running.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub active: i32,
    /// Pods that reached phase Succeeded.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub succeeded: i32,
    /// Pods that reached phase Failed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failed: i32,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}
