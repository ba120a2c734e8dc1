//! The `DIJob` custom resource.
//!
//! Every field DI-orchestrator 0.2 defined keeps its name and meaning; the fields added since are
//! optional, so a 0.2 manifest is accepted unchanged. Doc comments become the CRD's descriptions
//! and so what `kubectl explain dijob.spec` prints.

// Each `printcolumn(...)` of the derive repeats the same keys, which this lint mistakes for
// duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::api::core::v1::{PodTemplateSpec, Volume};
use kube::{CustomResource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::contract::Role;
use crate::schema;
use crate::task::{JobRestartPolicy, Priority, TaskSpec};

mod status;

pub use status::{CollectorsAboveCore, DIJobCondition, DIJobStatus, Phase, ReplicaStatus};

/// What the job runs, in one of two forms, never both: DI-orchestrator 0.2's roles (`coordinator`,
/// `collector`, `learner`; the coordinator's exit decides the job's phase) or 1.x's `tasks` (named
/// groups of workers that find each other through `DI_NODES`). Failed pods are replaced.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "diengine.opendilab.org",
    version = "v1alpha1",
    kind = "DIJob",
    namespaced,
    shortname = "dijob",
    category = "di",
    status = "DIJobStatus",
    // `kubectl scale dijob X --replicas N` and autoscalers (HPA, KEDA) set a role job's
    // collectors; the status gives them the collectors there are and the pods' selector.
    scale(
        spec_replicas_path = ".spec.collector.replicas",
        status_replicas_path = ".status.collectorReplicas",
        label_selector_path = ".status.collectorSelector"
    ),
    derive = "PartialEq",
    derive = "Default",
    doc = "A distributed reinforcement-learning job of DI-engine: a coordinator, collectors and learners, or a list of tasks.",
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.phase",
        description = "Where the job is in its life"
    ),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyReplicas", description = "Pods ready"),
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".status.replicas", description = "Pods wanted"),
    printcolumn(
        name = "Restarts",
        type_ = "integer",
        json_path = ".status.restarts",
        description = "Failed pods replaced"
    ),
    printcolumn(
        name = "Collectors",
        type_ = "string",
        json_path = ".status.collectors",
        description = "ready/desired collectors",
        priority = "1"
    ),
    printcolumn(
        name = "Learners",
        type_ = "string",
        json_path = ".status.learners",
        description = "ready/desired logic learners",
        priority = "1"
    ),
    printcolumn(name = "Suspended", type_ = "boolean", json_path = ".spec.suspend", priority = "1"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
// The scale subresource writes `spec.collector.replicas` without the webhooks, which see only
// whole DIJobs: this rule, which the API server checks on every write, keeps it from giving
// collectors to a job that has no collector template (a task job, a serial job).
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.collector) || has(self.collector.template)",
    "fieldPath": ".collector",
    "message": "spec.collector.replicas needs spec.collector.template: only a role job with collectors can be scaled \
                (kubectl scale, an autoscaler); scale a task job through spec.tasks[].replicas"
}, {
    "rule": "!has(self.collector) || !has(self.collector.maxReplicas) || !has(self.collector.replicas) \
             || self.collector.replicas <= self.collector.maxReplicas",
    "fieldPath": ".collector.replicas",
    "message": "spec.collector.replicas may not exceed spec.collector.maxReplicas: ask for at most maxReplicas \
                collectors, or raise maxReplicas first"
}, {
    // Checked by the API server too: a manager's copy that changed hands without the webhook
    // would be run twice, here and by MultiKueue's worker.
    "rule": "has(self.managedBy) == has(oldSelf.managedBy) && (!has(self.managedBy) || self.managedBy == oldSelf.managedBy)",
    "fieldPath": ".managedBy",
    "message": "spec.managedBy is fixed when the job is made: delete and re-create the DIJob to change who runs it"
}]))]
pub struct DIJobSpec {
    /// A free-form name for a collection of related DIJobs, kept from DI-orchestrator 0.2; the
    /// orchestrator does not act on it. Unset by default; fixed once the job exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,

    /// The PriorityClass of every pod of the job whose template names none. Unset or empty leaves
    /// their priority to the cluster's default. A PriorityClass name; fixed once the job exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,

    /// What happens to the job's pods once it has finished: `Running` (default) deletes those still
    /// running or pending, `All` deletes every pod, `None` keeps them all.
    /// The legacy value `ALL` means `All`; any other value is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clean_pod_policy: Option<String>,

    /// Volumes given to every pod of the job, each a core/v1 Volume (see
    /// `kubectl explain pod.spec.volumes`); a container mounts those it needs with
    /// `volumeMounts`. Names must be unique DNS labels; fixed once the job exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::volumes")]
    pub volumes: Option<Vec<Volume>>,

    /// The coordinator role: the one pod that drives the job, whose exit decides the job's phase.
    /// Required in a role job; a serial job has only this role.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coordinator: Option<CoordinatorSpec>,

    /// The collector role: pods that run the policy in environments and produce data. Optional;
    /// it may be added to a running job, not removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collector: Option<CollectorSpec>,

    /// The logic learner role: pods that train on the collected data. Optional; it may be added to
    /// a running job, not removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learner: Option<LearnerSpec>,

    /// `true` deletes the job's pods and keeps the job; `false` (the default) creates them again.
    /// This pauses and resumes the whole job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,

    /// `true` covers the job's core (the coordinator, learners and aggregators; in a task job,
    /// every task but the collectors) by a PodDisruptionBudget the orchestrator owns,
    /// `<job>-core`, that lets none of them be evicted while they are ready: a `kubectl drain` or
    /// any other eviction through the API waits for them, while collectors stay free to go (a
    /// core pod not ready may be taken). It does not hold off the kubelet's evictions under node
    /// pressure, nor a node's loss. The job gives it up when it finishes. Default false; fixed
    /// once the job exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protect_core: Option<bool>,

    /// Role jobs: how many times each collector, learner and aggregator is replaced after its pod
    /// fails (with exponential backoff); past it the replica stays failed and the job gets a
    /// RestartLimitExceeded condition. 0 or more; unset means no limit. Only a pod with
    /// `restartPolicy: Never` fails; the count starts again when the job is suspended or the replica
    /// scaled away.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_limit: Option<i32>,

    /// Seconds after the job finishes (Succeeded or Failed) before the DIJob is deleted, with
    /// everything it owns. 0 or more; unset keeps the job until it is deleted by hand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<i32>,

    /// The job's workers as tasks (DI-orchestrator 1.x), at least one; a job has either tasks or
    /// roles (coordinator, collector, learner), never both. Tasks cannot be added or removed
    /// once the job exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<Vec<TaskSpec>>,

    // kube gives an optional enum field its type's description: `Priority`'s doc is this field's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<Priority>,

    /// Task jobs: how many failed pods are replaced before the job fails, each replacement waiting
    /// longer than the last (exponential backoff). Default 3; 0 or more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_limit: Option<i32>,

    /// Task jobs: whether the job may be preempted; kept from DI-orchestrator 1.x, not acted on.
    /// Fixed once the job exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemptible: Option<bool>,

    /// Gang scheduling: which of the job's pods are placed all at once or not at all, where the
    /// orchestrator runs with a gang scheduler (`--gang-scheduler`). Unset means `enabled: true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang: Option<GangSpec>,

    // Described by `JobRestartPolicy`'s doc, as `priority` is by its type's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<JobRestartPolicy>,

    /// Who runs the job: unset or `diengine.opendilab.org/di-orchestrator`, this cluster's
    /// orchestrator; `kueue.x-k8s.io/multikueue`, Kueue's MultiKueue, which copies the job to a
    /// worker cluster with room and its status back here. The webhook sets it for a new job
    /// whose queue's ClusterQueue has a MultiKueue admission check; such a job's spec is fixed
    /// here but `suspend` (it scales on its worker). Fixed once the job exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_by: Option<String>,
}

/// The coordinator role.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CoordinatorSpec {
    /// Pod template of the coordinator, a core/v1 PodTemplateSpec (see
    /// `kubectl explain pod.spec`). Its `restartPolicy` is `Never` (the default) or `OnFailure`,
    /// since its exit decides the job's phase. Fixed once the job exists.
    #[serde(default)]
    #[schemars(schema_with = "schema::pod_template")]
    pub template: PodTemplateSpec,
}

/// Whether a job's pods are gang-scheduled (where the orchestrator has a gang scheduler, see its
/// `--gang-scheduler`).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GangSpec {
    /// `false` places the job's pods one by one. Default `true`: a task job is one gang (but for
    /// tasks with `minAvailable: 0`), and so is each multi-GPU logic learner of a role job; its
    /// coordinator and collectors are in no gang. Fixed once the job exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

/// The collector role.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CollectorSpec {
    /// Pod template of every collector, a core/v1 PodTemplateSpec (see
    /// `kubectl explain pod.spec`). Fixed once the job exists.
    #[serde(default)]
    #[schemars(schema_with = "schema::pod_template")]
    pub template: PodTemplateSpec,

    /// Desired number of collectors, 0 to 1000 (and at most `maxReplicas`); unset means 0. The
    /// coordinator changes it at run time through the replica endpoint, as `kubectl scale` does.
    // Bounded in the schema too: `kubectl scale` writes it through the scale subresource, which
    // no admission webhook sees.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = crate::contract::MAX_REPLICAS))]
    pub replicas: Option<i32>,

    /// In a Kueue queue: how many collectors run with the job's core (coordinator and learners);
    /// each one above it is a Workload of its own, admitted when the queue has room and preempted
    /// alone. 0 to 1000, at most `maxReplicas`; unset puts every collector in the core. Fixed once
    /// the job exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = crate::contract::MAX_REPLICAS))]
    pub min_replicas: Option<i32>,

    /// In a Kueue queue, with `minReplicas`: up to how many collectors run while the queue has
    /// spare room (those above `replicas` are the first taken back), and the most `replicas` may
    /// be. 0 to 1000, at least `minReplicas`; unset means `replicas` and no more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = crate::contract::MAX_REPLICAS))]
    pub max_replicas: Option<i32>,

    /// In a Kueue queue, with `minReplicas`: the WorkloadPriorityClass (`kueue.x-k8s.io`) of the
    /// collectors above the core (those on spare room one below it). Unset: one below the job's
    /// priority (two on spare room). A WorkloadPriorityClass name; fixed once the job exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_priority_class_name: Option<String>,
}

impl CollectorSpec {
    /// The collectors in the job's core when the job is queued: all of them, without
    /// `minReplicas`.
    pub fn core_collectors(&self) -> Option<u32> {
        self.min_replicas.map(|m| m.max(0) as u32)
    }

    /// The collectors run on spare room, up to `maxReplicas`, when the job is queued with
    /// `minReplicas`; else none.
    fn spare_room_limit(&self) -> Option<i32> {
        self.min_replicas.and(self.max_replicas)
    }
}

/// The logic learner role.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LearnerSpec {
    /// Pod template of every logic learner (and of the DDP learners of a multi-GPU learner), a
    /// core/v1 PodTemplateSpec (see `kubectl explain pod.spec`). Fixed once the job exists.
    #[serde(default)]
    #[schemars(schema_with = "schema::pod_template")]
    pub template: PodTemplateSpec,

    /// Desired number of logic learners, 0 to 1000; unset means 0. The coordinator changes it at
    /// run time through the replica endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = crate::contract::MAX_REPLICAS))]
    pub replicas: Option<i32>,

    /// GPUs per logic learner, 0 to 256; unset takes the template's `nvidia.com/gpu` limit, or 0.
    /// More than one makes each logic learner an aggregator plus DDP learners that share the
    /// GPUs. Changes only while `replicas` is 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = crate::contract::MAX_GPUS_PER_LEARNER))]
    pub gpus: Option<i32>,

    /// The AggregatorConfig (`name` in the job's namespace, or `namespace/name`) whose template
    /// runs the aggregators of multi-GPU learners. Unset uses the orchestrator's
    /// `--default-aggregator-config`. Changes only while `replicas` is 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregator_config: Option<String>,
}

/// The pod-producing part of each role in a spec, for code that treats roles alike.
pub struct RoleTemplate<'a> {
    pub role: Role,
    /// JSON path of the role in the DIJob, for messages (`spec.collector`).
    pub path: &'static str,
    pub template: &'a PodTemplateSpec,
}

impl DIJobSpec {
    /// The roles present in the spec with their templates, coordinator first.
    pub fn role_templates(&self) -> Vec<RoleTemplate<'_>> {
        let mut roles = Vec::with_capacity(3);
        if let Some(c) = &self.coordinator {
            roles.push(RoleTemplate { role: Role::Coordinator, path: "spec.coordinator", template: &c.template });
        }
        if let Some(c) = &self.collector {
            roles.push(RoleTemplate { role: Role::Collector, path: "spec.collector", template: &c.template });
        }
        if let Some(l) = &self.learner {
            roles.push(RoleTemplate { role: Role::Learner, path: "spec.learner", template: &l.template });
        }
        roles
    }

    /// Desired collectors (0 when the role or the count is absent).
    pub fn collector_replicas(&self) -> i32 {
        self.collector.as_ref().and_then(|c| c.replicas).unwrap_or(0)
    }

    /// Desired logic learners (0 when the role or the count is absent).
    pub fn learner_replicas(&self) -> i32 {
        self.learner.as_ref().and_then(|l| l.replicas).unwrap_or(0)
    }

    /// Whether the job is described by tasks rather than roles.
    pub fn is_task_job(&self) -> bool {
        self.tasks.is_some()
    }

    pub fn is_suspended(&self) -> bool {
        self.suspend.unwrap_or(false)
    }
}

impl DIJob {
    /// The Kueue LocalQueue the job is submitted to: its label, where not empty.
    pub fn queue_name(&self) -> Option<&str> {
        self.labels().get(crate::contract::kueue::QUEUE_NAME).map(String::as_str).filter(|q| !q.is_empty())
    }

    /// Whether Kueue's MultiKueue runs the job on a worker cluster (`spec.managedBy`): here it has
    /// its Workload and nothing else, and its status is the worker's copy.
    pub fn dispatched(&self) -> bool {
        self.spec.managed_by.as_deref() == Some(crate::contract::kueue::MULTIKUEUE)
    }

    /// The Workload MultiKueue made for this copy of a dispatched job on a worker cluster, which
    /// the job adopts instead of making its own.
    pub fn prebuilt_workload(&self) -> Option<&str> {
        self.annotations().get(crate::contract::kueue::PREBUILT_WORKLOAD).map(String::as_str).filter(|w| !w.is_empty())
    }

    /// How many collectors the job may run: `spec.collector.replicas`, or in a Kueue queue with
    /// `minReplicas` and `maxReplicas`, up to `maxReplicas` while the queue has room (the
    /// indices from `replicas` on are the spare-room ones).
    pub fn collector_slots(&self) -> i32 {
        let asked = self.spec.collector_replicas();
        match self.spec.collector.as_ref().and_then(CollectorSpec::spare_room_limit) {
            Some(max) if self.queue_name().is_some() => asked.max(max),
            _ => asked,
        }
    }
}
