//! A pass's decision, whichever form the job has: what exists (`World`), what to do (`Action`,
//! and `Why` a pod goes), and the outcome (`Plan`), with the steps both planners share (a
//! finished job's cleanup and TTL, restart bookkeeping read off Services, backoff). Pure: the
//! role planner (`plan`) and the task planner (`tasks`) build on it, and neither on the other's.

use std::collections::BTreeMap;
use std::time::Duration;

use di_api::contract::annotations;
use di_api::defaults::{CleanPodPolicy, clean_pod_policy};
use di_api::{AggregatorConfig, DIJob, DIJobStatus, Phase};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;

use crate::desired::Rbac;
use crate::restarts::Mark;
use crate::status::{self, is_active, is_terminating};

/// What a pass knows of the queue of a job that is in one.
#[derive(Clone, Debug, PartialEq)]
pub enum Queue {
    /// This cluster serves no Kueue Workloads: the job waits, saying so.
    NoKueue,
    /// The job's Workload (`None` until it is made), the ResourceFlavors by name (their specs),
    /// which place an admitted job's pods, and the job's PriorityClass with its value, which
    /// orders the queue and lets a job preempt lower ones.
    Kueue {
        workload: Option<serde_json::Value>,
        flavors: BTreeMap<String, serde_json::Value>,
        priority: Option<(String, i32)>,
        /// The Workloads of the collectors above the job's core (`spec.collector.minReplicas`),
        /// by collector index.
        collectors: BTreeMap<u32, serde_json::Value>,
        /// The value of the WorkloadPriorityClass `spec.collector.workloadPriorityClassName`
        /// names, when it exists.
        collector_class: Option<i32>,
    },
}

/// What exists of a job, and when.
pub struct World<'a> {
    /// The job's own pods and services: those its UID controls.
    pub pods: Vec<&'a Pod>,
    pub services: Vec<&'a Service>,
    /// Names the job wants that a pod or Service of another owner holds, with who holds them: a
    /// deleted predecessor's of the same name still being collected, or another job's whose
    /// names collide with this one's (task `b-collector` of job `a` and role job `a-b` both want
    /// pod `a-b-collector-0`). Never counted, touched, or created over; the job waits for them
    /// to go, and says so (condition NamesTaken).
    pub taken: BTreeMap<String, String>,
    /// The AggregatorConfig, when the job's learners need one and it exists.
    pub aggregator_config: Option<&'a AggregatorConfig>,
    /// `namespace/name` of the AggregatorConfig the learners need but that does not exist.
    pub missing_aggregator_config: Option<String>,
    /// The job's queue, when it is in one (`queue`).
    pub queue: Option<Queue>,
    pub now: Timestamp,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// The sidecar's ServiceAccount, Role and RoleBinding.
    CreateRbac(Box<Rbac>),
    /// The namespace's shared replica identity, which the sidecar runs as (`desired::identity`).
    EnsureNamespaceIdentity,
    CreateService(Box<Service>),
    CreatePod(Box<Pod>),
    /// A gang's PodGroup, in the backend's API: created, or its minimum updated, before any pod
    /// that joins it is created (`gangs`).
    ApplyPodGroup(Box<serde_json::Value>),
    /// The job's core PodDisruptionBudget (`spec.protectCore`), applied before any core pod is
    /// created (`budget`).
    ApplyDisruptionBudget(Box<k8s_openapi::api::policy::v1::PodDisruptionBudget>),
    /// The core's PodDisruptionBudget of a job that has finished (when the job owns it).
    DeleteDisruptionBudget {
        name: String,
    },
    /// The PodGroup of a gang the job no longer has (a logic learner scaled away).
    DeletePodGroup {
        name: String,
    },
    /// Count a failed replica's replacement on its Service, then its pod is deleted.
    MarkRestart {
        service: String,
        mark: Mark,
    },
    /// Deletes the pod with this UID (not a newer one of the same name), with its own grace
    /// period: its containers stop before the name is free for a replacement.
    DeletePod {
        name: String,
        uid: String,
        why: Why,
    },
    /// A collector Terminating past its grace period on node `node`: deleted at once (grace 0,
    /// this UID) if the node is gone or has stopped reporting, left to its kubelet otherwise
    /// (`stranded`).
    ReleaseStranded {
        name: String,
        uid: String,
        node: String,
    },
    /// Deletes the service with this UID.
    DeleteService {
        name: String,
        uid: String,
    },
    DeleteRbac,
    /// The finished job's TTL has passed.
    DeleteJob,
    /// The job's Kueue Workload, made before anything else of a job in a queue (`queue`).
    CreateWorkload(Box<serde_json::Value>),
    /// The job's Workload with the status the orchestrator reports to Kueue, written over the
    /// stored one at its resourceVersion (a newer write by Kueue wins, and the next pass reports
    /// again).
    WriteWorkloadStatus(Box<serde_json::Value>),
    /// The Workload MultiKueue made for this copy of a dispatched job, taken as the job's own:
    /// its controller reference and Kueue's job-UID label set, at the resourceVersion read.
    AdoptWorkload {
        name: String,
        resource_version: String,
        owner: Box<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>,
    },
    /// A waiting job's Workload made for another size than it asks now; the next pass makes it
    /// anew.
    DeleteWorkload {
        name: String,
        uid: String,
        /// As read: one Kueue has since admitted is not deleted.
        resource_version: String,
    },
    /// The job's Workload made active (the job resumed) or inactive (suspended by its user, which
    /// has Kueue evict it and give its quota back), written at the resourceVersion read.
    SetWorkloadActive {
        name: String,
        resource_version: String,
        active: bool,
    },
    /// A collector Workload's priority changed with the collector's standing (asked for, or run
    /// on spare room), so that Kueue takes spare-room collectors back first; written at the
    /// resourceVersion read.
    SetWorkloadPriority {
        name: String,
        resource_version: String,
        priority: i64,
    },
}

/// Why a pod is deleted, for events and metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    ScaledDown,
    Failed,
    AggregatorFailed,
    /// The coordinator reported it failed.
    Reported,
    Suspended,
    Cleanup,
    /// A task job's peer set changed (a task was scaled): every pod is built again.
    Rebuilt,
    /// A task job with `restartPolicy: Job` replaces every pod when one fails.
    JobRestart,
    /// A disruption ended it (`disruption`): replaced, not counted.
    Disrupted,
    /// Its collector Workload was preempted (its queue reclaimed the quota): not counted, and
    /// made again when the Workload is readmitted (`queue::collectors`).
    Reclaimed,
    /// A collector stranded on a lost node (`stranded`): its name freed for its replacement.
    NodeLost,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub status: DIJobStatus,
    pub actions: Vec<Action>,
    /// When to look again even if nothing changes (backoff, TTL).
    pub requeue_after: Option<Duration>,
}

/// Longest wait before a failed replica is replaced.
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// Backoff before the `restarts`-th replacement: `base * 2^(restarts-1)`, capped.
pub fn backoff(base: Duration, restarts: u32) -> Duration {
    let factor = 2u32.saturating_pow(restarts.saturating_sub(1));
    base.saturating_mul(factor).min(MAX_BACKOFF)
}

/// Makes `requeue` no later than `after`: a pass looks again at the soonest of its reasons.
pub(crate) fn sooner(requeue: &mut Option<Duration>, after: Duration) {
    *requeue = Some(requeue.map_or(after, |r| r.min(after)));
}

impl Plan {
    /// A finished job's `ttlSecondsAfterFinished`, role job or task job alike: the job is deleted
    /// once it has passed, and looked at again when it will.
    pub(crate) fn expire(&mut self, job: &DIJob, now: Timestamp) {
        expire(
            &DIJob { status: Some(self.status.clone()), ..job.clone() },
            now,
            &mut self.actions,
            &mut self.requeue_after,
        );
    }
}

/// `job`'s `ttlSecondsAfterFinished`, by the status it has: deleted once it has passed (an
/// action added), looked at again when it will (`requeue` made no later).
pub(crate) fn expire(job: &DIJob, now: Timestamp, actions: &mut Vec<Action>, requeue: &mut Option<Duration>) {
    let Some(ttl) = job.spec.ttl_seconds_after_finished else { return };
    if !job.status.as_ref().and_then(|s| s.phase).is_some_and(Phase::is_finished) {
        return;
    }
    let finished = status::finished_at(job).unwrap_or(now);
    let expires = finished + SignedDuration::from_secs(ttl.max(0) as i64);
    match expires.duration_since(now) {
        left if left.is_positive() => sooner(requeue, left.unsigned_abs()),
        _ => actions.push(Action::DeleteJob),
    }
}

/// What a finished job leaves: its pods by its clean pod policy; its Services go in any case.
pub(crate) fn cleanup(job: &DIJob, world: &World) -> Vec<Action> {
    let policy = clean_pod_policy(job);
    let pods = world.pods.iter().filter(|p| !is_terminating(p)).filter(|pod| match policy {
        CleanPodPolicy::All => true,
        CleanPodPolicy::Running => is_active(pod),
        CleanPodPolicy::None => false,
    });
    let mut actions: Vec<Action> = pods.map(|p| delete_pod(p, Why::Cleanup)).collect();
    actions.extend(world.services.iter().map(|s| delete_service(s)));
    actions
}

pub(crate) fn delete_pod(pod: &Pod, why: Why) -> Action {
    Action::DeletePod { name: pod.name_any(), uid: pod.uid().unwrap_or_default(), why }
}

pub(crate) fn delete_service(service: &Service) -> Action {
    Action::DeleteService { name: service.name_any(), uid: service.uid().unwrap_or_default() }
}

pub(crate) fn restarts_of(service: &Service) -> u32 {
    service.annotations().get(annotations::RESTARTS).and_then(|r| r.parse().ok()).unwrap_or(0)
}

pub(crate) fn restart_after(service: &Service) -> Option<Timestamp> {
    service.annotations().get(annotations::RESTART_AFTER)?.parse().ok()
}
