//! Collectors stranded on a node that is gone or has stopped answering. When a node stops
//! reporting, Kubernetes deletes its pods once they stop tolerating the node's `unreachable` (or
//! `not-ready`) taint, 300 s by default; but only the node's kubelet can confirm that a pod's
//! containers stopped, so until the node comes back the pod stays Terminating, and its name, which
//! its replacement needs, stays taken. A job would wait for the node, however long it is away.
//!
//! Collectors are disposable by design, so:
//! - they tolerate those taints for [`TOLERATION_SECONDS`](crate::node_loss::TOLERATION_SECONDS) only (a template's own tolerations of
//!   either key win), so they are let go within a minute of their node's loss;
//! - once such a collector's grace period is over and its node is gone or has stopped reporting
//!   (condition Ready `Unknown`), it is deleted at once (grace 0, this UID), and its replacement
//!   starts on a node that answers. A collector cut off from the cluster but still running may
//!   run on beside its replacement until its kubelet returns and stops it; a collector's work
//!   is a stream of episodes, where one counted twice costs nothing.
//!
//! Core pods (coordinator, learners, aggregators, DDP learners; a task job's tasks but its
//! collectors) are never let go this way: they must not run twice. They wait for their node to
//! return, to be deleted, or for an administrator's `node.kubernetes.io/out-of-service` taint,
//! on which Kubernetes deletes them itself.

use std::time::Duration;

use di_api::DIJob;
use di_api::contract::Role;
use di_api::pod::role_of;
use di_api::task::TaskType;
use di_api::tasks::{self, TASK_LABEL};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use crate::decision::{Action, World, sooner};
use crate::status::is_terminating;

/// How long past its grace period a collector is left to its kubelet before its node is asked
/// about: a kubelet that answers confirms within moments.
const MARGIN: Duration = Duration::from_secs(5);

/// How often a stranded collector's node is asked about again while the node still answers.
const RECHECK: Duration = Duration::from_secs(15);

/// Whether `pod` is one of the job's collectors: a role job's collector, or a pod of a task job's
/// collector task.
pub fn is_collector(job: &DIJob, pod: &Pod) -> bool {
    if job.spec.is_task_job() {
        let Some(task) = pod.labels().get(TASK_LABEL) else { return false };
        return tasks::tasks(job).iter().any(|t| &t.name == task && t.type_ == TaskType::Collector);
    }
    role_of(pod) == Some(Role::Collector)
}

/// What to do about the job's terminating collectors: each past its grace period (and
/// [`MARGIN`]) is to be released if its node is lost (`Action::ReleaseStranded`, which asks the
/// node); the others are looked at again when theirs ends. Adds to a pass's `actions` and
/// brings its `requeue` forward.
pub(crate) fn release(job: &DIJob, world: &World, actions: &mut Vec<Action>, requeue: &mut Option<Duration>) {
    for pod in world.pods.iter().copied().filter(|p| is_terminating(p) && is_collector(job, p)) {
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else { continue };
        let Some(deleted) = pod.metadata.deletion_timestamp.as_ref() else { continue };
        let left = deleted.0.duration_since(world.now).as_secs_f64() + MARGIN.as_secs_f64();
        if left > 0.0 {
            sooner(requeue, Duration::from_secs_f64(left));
            continue;
        }
        actions.push(Action::ReleaseStranded { name: pod.name_any(), uid: pod.uid().unwrap_or_default(), node });
        sooner(requeue, RECHECK);
    }
}
