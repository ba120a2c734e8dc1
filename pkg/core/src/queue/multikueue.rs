//! Jobs Kueue's MultiKueue runs on worker clusters. On the manager a dispatched job
//! (`spec.managedBy: kueue.x-k8s.io/multikueue`) is its Workload and nothing else: MultiKueue
//! copies the Workload to the workers, the first to admit it gets a copy of the job, and the
//! worker copy's status comes back whole. On a worker the copy adopts the Workload MultiKueue
//! made for it (named by its annotation) and runs as any queued job does.

use di_api::DIJob;
use di_api::contract::kueue::MULTIKUEUE_ORIGIN;
use di_api::contract::labels;
use kube::ResourceExt;
use serde_json::{Value, json};

use super::report::{Report, report};
use super::workload::{pod_sets, wanted_pods};
use super::{activation, core_pods, first_workload, is_true, metadata, queue_name};
use crate::decision::{Action, Queue, World};
use crate::desired::{BuildError, Settings};

/// Whether `workload` is the job's: its controller reference names the job's UID.
pub fn owned_by(workload: &Value, uid: &str) -> bool {
    workload["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|refs| refs.iter().any(|r| r["controller"] == json!(true) && r["uid"] == uid))
}

/// On a worker: whether `workload` is the one MultiKueue made for this copy of a dispatched job,
/// not yet the job's: the name its annotation gives, made by MultiKueue (its origin label) for
/// a job of this name (the label MultiKueue copied from the manager's) in the job's queue, and
/// no one's yet. Any other Workload is not taken, whatever its name.
pub fn made_for(workload: &Value, job: &DIJob) -> bool {
    let labels = &workload["metadata"]["labels"];
    let uncontrolled = workload["metadata"]["ownerReferences"]
        .as_array()
        .is_none_or(|refs| !refs.iter().any(|r| r["controller"] == json!(true)));
    job.prebuilt_workload().is_some_and(|name| workload["metadata"]["name"] == name)
        && labels[MULTIKUEUE_ORIGIN].is_string()
        && labels[labels::JOB_NAME] == job.name_any().as_str()
        && queue_name(job).is_some_and(|queue| workload["spec"]["queueName"] == queue)
        && uncontrolled
}

/// On a worker: the Workload MultiKueue made for this copy of a job, taken as the job's own
/// when it is not yet (its controller reference, which Kueue's garbage collector follows to the
/// job, and Kueue's job-UID label).
pub(super) fn adopt(job: &DIJob, workload: &Value, settings: &Settings) -> Result<Option<Action>, BuildError> {
    if job.prebuilt_workload().is_none() || owned_by(workload, &job.uid().unwrap_or_default()) {
        return Ok(None);
    }
    Ok(Some(Action::AdoptWorkload {
        name: metadata(workload, "name"),
        resource_version: metadata(workload, "resourceVersion"),
        owner: Box::new(crate::desired::owner_reference(job, &settings.owner_version)?),
    }))
}

/// What a pass of a dispatched job does on the manager.
#[derive(Debug, Default)]
pub struct Dispatch {
    pub actions: Vec<Action>,
    /// When to look again (a finished job's TTL), if before a change would.
    pub requeue_after: Option<std::time::Duration>,
    /// Why the job is not on its way to a worker, for an event: its status is the worker's to
    /// write, even before there is one.
    pub note: Option<String>,
}

/// On the manager: the Workload made for the dispatched job (or activated as `spec.suspend`
/// says), and after an eviction its quota given back at once, as there is no pod here to wait
/// for; nothing else is made, and the job's status is left to MultiKueue. Once the copied status
/// says the job has finished, no Workload is made again, and the job goes when its
/// `ttlSecondsAfterFinished` has passed (its worker's copy with it, by MultiKueue).
pub fn dispatch(job: &DIJob, world: &World, settings: &Settings) -> Result<Dispatch, BuildError> {
    let mut done = Dispatch::default();
    // Its TTL runs from the end its worker's copy reported, as for any job here.
    crate::decision::expire(job, world.now, &mut done.actions, &mut done.requeue_after);
    let (Some(name), Some(queue)) = (queue_name(job), world.queue.as_ref()) else { return Ok(done) };
    let Queue::Kueue { workload, priority, .. } = queue else {
        let message = format!(
            "the job is dispatched by MultiKueue from queue {name}, but this cluster serves no Kueue Workloads: \
             install Kueue with MultiKueue here"
        );
        done.note = Some(message);
        return Ok(done);
    };
    let finished = job.status.as_ref().and_then(|s| s.phase).is_some_and(|p| p.is_finished());
    let Some(workload) = workload else {
        if finished {
            return Ok(done);
        }
        let sets = pod_sets(&core_pods(job, wanted_pods(job, world.aggregator_config, settings)?));
        match first_workload(job, world, (name, priority.as_ref()), &sets, settings)? {
            Ok(made) => done.actions.push(Action::CreateWorkload(Box::new(made))),
            Err((_, message)) => done.note = Some(message),
        }
        return Ok(done);
    };
    done.actions.extend(activation(workload, !job.spec.is_suspended() || finished));
    // Evicted here (suspended, or sent back by a worker): the quota goes back, after which
    // MultiKueue removes the worker's copy and, while the Workload is active, dispatches it again.
    if is_true(workload, "Evicted")
        && let Some(status) = report(workload, &Report::default(), world.now)
    {
        let mut written = workload.clone();
        written["status"] = status;
        done.actions.push(Action::WriteWorkloadStatus(Box::new(written)));
    }
    Ok(done)
}

/// The worker cluster a dispatched job's Workload runs on, once one has admitted it.
pub fn cluster(workload: &Value) -> Option<&str> {
    workload["status"]["clusterName"].as_str().filter(|c| !c.is_empty())
}
