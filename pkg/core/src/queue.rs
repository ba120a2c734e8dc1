//! Queues and quotas: a job labelled `kueue.x-k8s.io/queue-name` is a Kueue workload (DIJob is
//! one of Kueue's external frameworks). Its pods run only while its Workload is admitted; until
//! then the job is held as a suspended one is, with no pod. The orchestrator makes the Workload
//! (one podSet per role, or per task, with its count and pod template), puts the admitted
//! flavors' node labels and tolerations into the pods it creates, tells Kueue when the pods are
//! ready and when the job has finished (which gives its quota back at once), and, when Kueue
//! evicts the job, deletes its pods and then gives the admission back so the job waits again.
//! Pure: the Workload and the ResourceFlavors are read by the caller.

use std::collections::BTreeSet;

use di_api::contract::kueue::QUEUED;
use di_api::{DIJob, Phase};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::core::ApiResource;
use serde_json::Value;

use crate::decision::{Action, Plan, World};
use crate::desired::{BuildError, Settings};

mod admitted;
pub mod collectors;
pub mod multikueue;
mod report;
pub mod topology;
mod workload;

pub use crate::decision::Queue;
pub use admitted::Room;
use admitted::{beyond_admission, reclaimable_pods, rooms, without_room};
pub use report::{Report, report};
use workload::{API_VERSION, place, pod_sets, wanted_pods};
pub use workload::{JOB_UID_LABEL, workload, workload_name};

/// The label that puts a job in a Kueue LocalQueue of its namespace.
pub use di_api::contract::kueue::QUEUE_NAME as QUEUE_LABEL;
/// The most podSets a Kueue Workload holds.
const MAX_POD_SETS: usize = 8;

/// Kueue's Workload kind.
pub fn workload_kind() -> ApiResource {
    di_api::contract::kueue::resource("Workload", "workloads")
}

/// Kueue's ResourceFlavor kind (cluster-scoped).
pub fn flavor_kind() -> ApiResource {
    di_api::contract::kueue::resource("ResourceFlavor", "resourceflavors")
}

/// Kueue's WorkloadPriorityClass kind (cluster-scoped).
pub fn workload_priority_kind() -> ApiResource {
    di_api::contract::kueue::resource("WorkloadPriorityClass", "workloadpriorityclasses")
}

/// The LocalQueue a job waits in, if it is in one.
pub fn queue_name(job: &DIJob) -> Option<&str> {
    job.queue_name()
}

/// Whether a Workload's condition `type_` is True.
fn condition<'a>(workload: &'a Value, type_: &str) -> Option<&'a Value> {
    workload["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == type_)
}

fn is_true(workload: &Value, type_: &str) -> bool {
    condition(workload, type_).is_some_and(|c| c["status"] == "True")
}

/// Where the job stands in its queue, for its status and its pods.
#[derive(Clone, Debug, PartialEq)]
pub enum Standing {
    /// Not admitted (yet, or again): no pod may run. The reason and message of its condition.
    Held { reason: &'static str, message: String },
    /// Admitted: its pods run, each pod placed as the admission's flavors say.
    Admitted { cluster_queue: String },
}

/// Where a job in `queue` named `name` stands.
pub fn standing(name: &str, queue: &Queue) -> Standing {
    let held = |reason, message: String| Standing::Held { reason, message };
    let Queue::Kueue { workload, .. } = queue else {
        return held(
            "NoKueue",
            format!(
                "the job waits in queue {name}, but the orchestrator has no Kueue (the API server serves no \
                 {API_VERSION} Workloads, or it runs with --queues=none): install Kueue, or remove the label \
                 {QUEUE_LABEL} to run the job without a queue"
            ),
        );
    };
    let Some(workload) = workload else {
        return held("Pending", format!("the job's Workload is being made for queue {name}"));
    };
    workload_standing(name, workload)
}

/// Where a Workload in queue `name` stands.
fn workload_standing(name: &str, workload: &Value) -> Standing {
    let held = |reason, message: String| Standing::Held { reason, message };
    if let Some(evicted) = condition(workload, "Evicted").filter(|c| c["status"] == "True") {
        let why = evicted["message"].as_str().or(evicted["reason"].as_str()).unwrap_or("evicted");
        return held(
            "Evicted",
            format!("Kueue evicted the job from queue {name}: {why}; it waits to be admitted again"),
        );
    }
    if is_true(workload, "Admitted") {
        let cluster_queue = workload["status"]["admission"]["clusterQueue"].as_str().unwrap_or_default().to_owned();
        return Standing::Admitted { cluster_queue };
    }
    let why =
        condition(workload, "QuotaReserved").and_then(|c| c["message"].as_str()).unwrap_or("no quota reserved yet");
    held("Pending", format!("waiting in queue {name}: {why}"))
}

/// Whether the job's queue holds it now (it is in one, and not admitted), with the reason and
/// message its condition gives.
pub fn held(job: &DIJob, world: &World) -> Option<(&'static str, String)> {
    let (name, queue) = (queue_name(job)?, world.queue.as_ref()?);
    match standing(name, queue) {
        Standing::Held { reason, message } => Some((reason, message)),
        Standing::Admitted { .. } => None,
    }
}

/// The job's `Queued` condition: True while its queue holds it, False once admitted; `None` for
/// a job in no queue.
pub fn queued_condition(job: &DIJob, world: &World) -> Option<(bool, String, String)> {
    // Finished: its Workload may be gone (Kueue's retention), which says nothing of a queue now.
    if job.status.as_ref().and_then(|s| s.phase).is_some_and(Phase::is_finished) {
        return None;
    }
    let Some(name) = queue_name(job) else {
        // Taken out of its queue while it waited (the webhook allows no other time).
        let was_held = job.status.iter().flat_map(|s| &s.conditions).any(|c| c.type_ == QUEUED && c.status == "True");
        let message = "the job was taken out of its queue: it runs without one";
        return was_held.then(|| (false, "NotQueued".to_owned(), message.to_owned()));
    };
    let queue = world.queue.as_ref()?;
    Some(match standing(name, queue) {
        Standing::Held { reason, message } => (true, reason.to_owned(), message),
        Standing::Admitted { cluster_queue } => {
            (false, "Admitted".to_owned(), format!("admitted from queue {name} by ClusterQueue {cluster_queue}"))
        }
    })
}

/// The pods of `wanted` in the job's core Workload: all but the collectors above
/// `spec.collector.minReplicas` (`collectors`), which have Workloads of their own.
fn core_pods(job: &DIJob, wanted: Vec<Pod>) -> Vec<Pod> {
    wanted.into_iter().filter(|p| collectors::above_core(job, &p.name_any()).is_none()).collect()
}

/// The pods `job` asks for that its admitted Workload has no room for, by podSet (none left out
/// when the Workload is not admitted: a waiting job's Workload is made anew at its new size).
/// What a scale-up of a running queued job would wait for; the learners of a job whose
/// AggregatorConfig is not given (`aggregator`) are not counted.
pub fn beyond_room(
    job: &DIJob,
    workload: &Value,
    pods: &[&Pod],
    aggregator: Option<&di_api::AggregatorConfig>,
    settings: &Settings,
) -> Result<Vec<(String, u64)>, BuildError> {
    if !is_true(workload, "Admitted") || is_true(workload, "Evicted") {
        return Ok(vec![]);
    }
    let sets = pod_sets(&core_pods(job, wanted_pods(job, aggregator, settings)?));
    Ok(admitted::over(&rooms(workload, &sets, pods, !job.spec.is_task_job()), &sets, pods))
}

/// What a job held on a spec it cannot act on (`plan::finish_held`) still owes its queue, whose
/// Workload keeps its place in the ClusterQueue: when Kueue evicts it (or never admitted it), its
/// pods go, and the admission is given back once they are gone; once it has ended (`phase`) with
/// no pod running, Kueue hears that it finished. Its podSets, which the spec cannot build, are
/// left as they are.
pub fn obey(job: &DIJob, world: &World, phase: Option<Phase>) -> Vec<Action> {
    let (Some(name), Some(queue @ Queue::Kueue { workload: Some(workload), collectors, .. })) =
        (queue_name(job), &world.queue)
    else {
        return vec![];
    };
    let finished = phase.filter(|p| p.is_finished());
    let held = matches!(standing(name, queue), Standing::Held { .. }) && finished.is_none();
    let mut actions: Vec<Action> = vec![];
    if held {
        let live = world.pods.iter().filter(|p| !crate::status::is_terminating(p));
        actions.extend(live.map(|p| crate::decision::delete_pod(p, crate::decision::Why::Suspended)));
    }
    if held || finished.is_some() {
        let active = world.pods.iter().any(|p| crate::status::is_active(p));
        let seen =
            Report { finished: finished.map(|p| p == Phase::Succeeded), pods_active: active, ..Report::default() };
        if let Some(reported) = report(workload, &seen, world.now) {
            let mut written = workload.clone();
            written["status"] = reported;
            actions.push(Action::WriteWorkloadStatus(Box::new(written)));
        }
    }
    actions.extend(collectors::obey(job, world, name, collectors, held || finished.is_some()));
    actions
}

/// The first Workload of a job in queue `name` (of `priority`) made of `sets`, or why it cannot be
/// made yet (a condition's reason and message).
fn first_workload(
    job: &DIJob,
    world: &World,
    (name, priority): (&str, Option<&(String, i32)>),
    sets: &[workload::PodSet],
    settings: &Settings,
) -> Result<Result<Value, (&'static str, String)>, BuildError> {
    if let Some(config) = &world.missing_aggregator_config {
        // Its learners cannot be built yet: a Workload without them would be admitted short.
        return Ok(Err(("Pending", format!("the job's Workload waits for its learners' AggregatorConfig {config}"))));
    }
    if sets.len() > MAX_POD_SETS {
        let message = format!(
            "the job has {} kinds of pods (tasks, or roles and their shapes) and a Kueue Workload holds at most \
             {MAX_POD_SETS}: merge tasks, or remove the label {QUEUE_LABEL}",
            sets.len()
        );
        return Ok(Err(("TooManyPodSets", message)));
    }
    Ok(Ok(workload::made_of(job, name, priority, sets, settings)?))
}

/// The write that makes `workload` active or not as `active` says, if it is not yet.
fn activation(workload: &Value, active: bool) -> Option<Action> {
    (workload["spec"]["active"].as_bool().unwrap_or(true) != active).then(|| Action::SetWorkloadActive {
        name: metadata(workload, "name"),
        resource_version: metadata(workload, "resourceVersion"),
        active,
    })
}

/// Deletes `workload` as read (its UID and resourceVersion: not a newer one, nor one Kueue has
/// changed since).
fn delete_workload(workload: &Value) -> Action {
    let field = |f| metadata(workload, f);
    Action::DeleteWorkload { name: field("name"), uid: field("uid"), resource_version: field("resourceVersion") }
}

/// A Workload's `metadata` field `name`, as read.
fn metadata(workload: &Value, name: &str) -> String {
    workload["metadata"][name].as_str().unwrap_or_default().to_owned()
}

/// After a planner decided a pass of a job in a queue: the Workload made if there is none yet,
/// the pods it creates placed as admitted, and what Kueue must know of the job written to the
/// Workload's status. Answers the pods the admission has no room for (none outside a queue),
/// which no gang may count on.
pub fn attach(
    job: &DIJob,
    world: &World,
    aggregator: Option<&di_api::AggregatorConfig>,
    settings: &Settings,
    plan: &mut Plan,
) -> Result<BTreeSet<String>, BuildError> {
    let mut held = BTreeSet::new();
    let Some(queue @ Queue::Kueue { workload, flavors, priority, collectors, collector_class }) = &world.queue else {
        return Ok(held);
    };
    let Some(name) = queue_name(job) else {
        // A Workload left from when the job was in a queue: it goes, with what it waits for; a
        // collector's once its pod no longer may run on it. Never MultiKueue's, which is its to
        // take back (the webhook keeps a copy's queue).
        if let Some(workload) = workload.as_ref().filter(|_| job.prebuilt_workload().is_none()) {
            plan.actions.push(delete_workload(workload));
        }
        plan.actions.extend(collectors::given_back(job, world, collectors));
        return Ok(held);
    };
    let finished = plan.status.phase.filter(|p| p.is_finished());
    let wanted = wanted_pods(job, aggregator, settings)?;
    let sets = pod_sets(&core_pods(job, wanted.clone()));
    // What this pass knows better than the planner's `Queued` condition.
    let say = |plan: &mut Plan, held: bool, reason: &str, message: &str| {
        let conditions = &mut plan.status.conditions;
        crate::status::set_condition_as_said(conditions, crate::status::QUEUED, held, reason, message, world.now);
    };
    let Some(workload) = workload else {
        if finished.is_some() {
            return Ok(held);
        }
        if let Some(prebuilt) = job.prebuilt_workload() {
            // MultiKueue makes it before the job; one gone is MultiKueue taking the job back.
            say(plan, true, "Pending", &format!("the job waits for the Workload MultiKueue made for it, {prebuilt}"));
        } else {
            match first_workload(job, world, (name, priority.as_ref()), &sets, settings)? {
                Ok(made) => plan.actions.insert(0, Action::CreateWorkload(Box::new(made))),
                Err((reason, message)) => say(plan, true, reason, &message),
            }
        }
        return Ok(held);
    };
    plan.actions.extend(multikueue::adopt(job, workload, settings)?);
    let (mut reclaimable, mut held_back) = (None, 0);
    match standing(name, queue) {
        Standing::Admitted { .. } => {
            let rooms = rooms(workload, &sets, &world.pods, !job.spec.is_task_job());
            held = without_room(&rooms, &sets, &world.pods);
            let over = beyond_admission(&held, &mut plan.actions);
            held_back = admitted::over(&rooms, &sets, &world.pods).iter().map(|(_, n)| n).sum();
            // Without its AggregatorConfig the learners are not built, though their pods run:
            // their podSets would read as given back, for good.
            if world.missing_aggregator_config.is_none() {
                reclaimable = Some(reclaimable_pods(&rooms));
            }
            if over > 0 {
                let message = format!(
                    "admitted from queue {name}; {over} pod(s) the job asks for beyond what Kueue admitted wait: \
                     a queued job's pods never outgrow its admission (submit it again to be admitted at its new size)"
                );
                say(plan, false, "Admitted", &message);
            }
            place(&sets, workload, flavors, &mut plan.actions);
        }
        // Not admitted and no quota reserved: a Workload made for another size (the job was
        // scaled while it waited) or another queue (its label changed) goes, and the next pass
        // makes it anew; but not one MultiKueue made, which the job keeps while it runs here.
        Standing::Held { .. }
            if !is_true(workload, "QuotaReserved") && finished.is_none() && job.prebuilt_workload().is_none() =>
        {
            let asked: Vec<(String, u64)> = sets.iter().map(|s| (s.name.clone(), s.members.len() as u64)).collect();
            let made: Vec<(String, u64)> = workload["spec"]["podSets"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|s| (s["name"].as_str().unwrap_or_default().to_owned(), s["count"].as_u64().unwrap_or(0)))
                .collect();
            if asked != made || workload["spec"]["queueName"] != name {
                plan.actions.push(delete_workload(workload));
                return Ok(held);
            }
        }
        Standing::Held { .. } => {}
    }
    // A job its user suspends gives its place back, as Kueue's integrations whose jobs decide
    // their Workload's activation do; resumed, it queues again. So does one admitted from a
    // queue it has since left (relabelled as Kueue admitted it): once its eviction is over, its
    // Workload is made anew in its new queue (the held case above).
    // (MultiKueue's Workload is in the queue MultiKueue chose, which the job's copy cannot leave.)
    let in_its_queue = workload["spec"]["queueName"] == name || job.prebuilt_workload().is_some();
    plan.actions.extend(activation(workload, (!job.spec.is_suspended() && in_its_queue) || finished.is_some()));
    let core_admitted = matches!(standing(name, queue), Standing::Admitted { .. });
    let core_priority = workload["spec"]["priority"].as_i64().unwrap_or(0);
    let queued =
        collectors::Queued { name, core_admitted, collectors, flavors, core_priority, class: *collector_class };
    collectors::attach(job, world, &queued, &wanted, settings, plan, &mut held)?;
    let status = &plan.status;
    // Ready: every pod of the core that may run (up to what was admitted) is ready or has ended
    // well; a collector that finished early leaves the job no less ready. Collectors above the
    // core are reported on their own Workloads.
    let admitted: u64 =
        workload["spec"]["podSets"].as_array().into_iter().flatten().filter_map(|s| s["count"].as_u64()).sum();
    let above = |p: &&&Pod| collectors::above_core(job, &p.name_any()).is_some();
    let above_asked = wanted.iter().filter(|p| collectors::above_core(job, &p.name_any()).is_some()).count() as u64;
    let above_ready = world.pods.iter().filter(above).filter(|p| crate::status::is_ready(p)).count() as u64;
    let may_run = status.replicas.map_or(0, |r| r.max(0) as u64).saturating_sub(held_back + above_asked).min(admitted);
    let done = world.pods.iter().filter(|p| !above(p) && crate::status::pod_phase(p) == "Succeeded").count() as u64;
    let ready_core = status.ready_replicas.map_or(0, |r| r.max(0) as u64).saturating_sub(above_ready);
    let ready = may_run > 0 && ready_core + done >= may_run;
    let active = world.pods.iter().any(|p| crate::status::is_active(p));
    let outcome = finished.map(|p| p == Phase::Succeeded);
    let seen = Report { ready, finished: outcome, pods_active: active, reclaimable };
    if let Some(reported) = report(workload, &seen, world.now) {
        let mut written = workload.clone();
        written["status"] = reported;
        plan.actions.push(Action::WriteWorkloadStatus(Box::new(written)));
    }
    Ok(held)
}
