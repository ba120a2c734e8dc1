//! Jobs Kueue's MultiKueue runs on worker clusters. On the manager a dispatched job
//! (`spec.managedBy: kueue.x-k8s.io/multikueue`) is its Workload and nothing else: MultiKueue
//! copies the Workload to the workers, the first to admit it gets a copy of the job, and the
//! worker copy's status comes back whole. On a worker the copy adopts the Workload MultiKueue
//! made for it (named by its annotation) and runs as any queued job does.

use di_api::DIJob;
use kube::ResourceExt;
use serde_json::{Value, json};

use super::report::{Report, report};
use super::workload::{made_of, pod_sets, wanted_pods};
use super::{MAX_POD_SETS, QUEUE_LABEL, core_pods, is_true, metadata, queue_name};
use crate::decision::{Action, Queue, World};
use crate::desired::{BuildError, Settings};

/// Whether `workload` is the job's: its controller reference names the job's UID.
pub fn owned_by(workload: &Value, uid: &str) -> bool {
    workload["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|refs| refs.iter().any(|r| r["controller"] == json!(true) && r["uid"] == uid))
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
    /// Why the job is not on its way to a worker, for an event: its status is the worker's to
    /// write, even before there is one.
    pub note: Option<String>,
}

/// On the manager: the Workload made for the dispatched job (or activated as `spec.suspend`
/// says), and after an eviction its quota given back at once, as there is no pod here to wait
/// for; nothing else is made, and the job's status is left to MultiKueue. Once the copied status
/// says the job has finished, no Workload is made again.
pub fn dispatch(job: &DIJob, world: &World, settings: &Settings) -> Result<Dispatch, BuildError> {
    let mut done = Dispatch::default();
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
        if let Some(config) = &world.missing_aggregator_config {
            done.note = Some(format!("the job's Workload waits for its learners' AggregatorConfig {config}"));
            return Ok(done);
        }
        let sets = pod_sets(&core_pods(job, wanted_pods(job, world.aggregator_config, settings)?));
        if sets.len() > MAX_POD_SETS {
            let message = format!(
                "the job has {} kinds of pods and a Kueue Workload holds at most {MAX_POD_SETS}: merge tasks, or \
                 remove the label {QUEUE_LABEL}",
                sets.len()
            );
            done.note = Some(message);
            return Ok(done);
        }
        done.actions.push(Action::CreateWorkload(Box::new(made_of(job, name, priority.as_ref(), &sets, settings)?)));
        return Ok(done);
    };
    let active = !job.spec.is_suspended() || finished;
    if workload["spec"]["active"].as_bool().unwrap_or(true) != active {
        done.actions.push(Action::SetWorkloadActive {
            name: metadata(workload, "name"),
            resource_version: metadata(workload, "resourceVersion"),
            active,
        });
    }
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
