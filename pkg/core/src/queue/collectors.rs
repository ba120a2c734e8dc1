//! Interruptible collectors: with `spec.collector.minReplicas`, a queued job's core Workload
//! holds the coordinator, the learners and its first `minReplicas` collectors, and each
//! collector above them is a Workload of its own, one below the core's priority. Kueue admits
//! each such collector when its queue has room (borrowing its cohort's idle quota) and preempts it
//! on its own when the quota is reclaimed: its pod alone goes (not counted as a restart), the
//! eviction is acknowledged once the pod is gone, and the pod comes back when Kueue admits the
//! Workload again. A collector Workload is made only while the core is admitted, so no collector
//! ever holds quota while its core waits, and none is given back while its pod may still run
//! (terminating included); a pod whose Workload is gone stops until its new one is admitted.
//! With `maxReplicas`, the collectors above `replicas` and up to it are Workloads too, two below
//! the core's priority: they run on room nobody asks for, and are taken back first.

use std::collections::{BTreeMap, BTreeSet};

use di_api::contract::{Role, names};
use di_api::{CollectorsAboveCore, DIJob};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use serde_json::{Value, json};

use super::report::{Report, report};
use super::workload::{made_of, place, pod_sets};
use super::{Standing, delete_workload, is_true};
use crate::decision::{Action, Plan, Why, World, delete_pod};
use crate::desired::{BuildError, Settings};
use crate::status::{is_ready, is_terminating, pod_phase};

/// The job's condition that says how its collectors above the core stand.
pub const COLLECTORS_QUEUED: &str = "CollectorsQueued";

/// Whether `pod` may still run: it exists and has not ended, terminating or not. A collector's
/// Workload gives its quota back only once its pod no longer may.
fn may_run(pod: Option<&Pod>) -> bool {
    pod.is_some_and(|p| !matches!(pod_phase(p), "Succeeded" | "Failed"))
}

/// The pod of collector `index` above the core, if it exists.
fn pod_of<'a>(job: &DIJob, world: &World<'a>, index: u32) -> Option<&'a Pod> {
    world.pods.iter().copied().find(|p| above_core(job, &p.name_any()) == Some(index))
}

/// The name of the Workload of collector `index` (above the core).
pub fn workload_name(job: &DIJob, index: u32) -> String {
    format!("{}-collector-{index}", super::workload_name(job))
}

/// The index of collector pod `pod` when it is above the job's core, in a job with `minReplicas`.
pub fn above_core(job: &DIJob, pod: &str) -> Option<u32> {
    let min = job.spec.collector.as_ref()?.core_collectors()?;
    let index: u32 = pod.strip_prefix(&format!("{}-{}-", job.name_any(), Role::Collector.label()))?.parse().ok()?;
    (index >= min).then_some(index)
}

/// A collector Workload's priority: one below its core's (as the core's Workload carries it)
/// for a collector `replicas` asks for, two below for one on spare room (up to `maxReplicas`);
/// with the job's WorkloadPriorityClass (`class`, its value), that value, one below for spare
/// room. Kueue takes the lowest first: a job's spare-room collectors, then its asked-for ones,
/// by default before its own core and before the core of any job of the same priority.
fn priority(core_priority: i64, class: Option<i32>, spare: bool) -> i64 {
    let (base, below) = match class {
        Some(value) => (i64::from(value), i64::from(spare)),
        None => (core_priority, if spare { 2 } else { 1 }),
    };
    base.saturating_sub(below).max(i64::from(i32::MIN))
}

/// A collector's Workload: one podSet of its one pod, at `priority` (of the job's
/// WorkloadPriorityClass, where it names one).
fn made(
    job: &DIJob,
    queue: &str,
    index: u32,
    pod: &Pod,
    priority: i64,
    settings: &Settings,
) -> Result<Value, BuildError> {
    let mut workload = made_of(job, queue, None, &pod_sets(std::slice::from_ref(pod)), settings)?;
    workload["metadata"]["name"] = json!(workload_name(job, index));
    workload["spec"]["priority"] = json!(priority);
    if let Some(class) = class_name(job) {
        workload["spec"]["priorityClassRef"] =
            json!({"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": class});
    }
    Ok(workload)
}

/// The WorkloadPriorityClass the job names for its collectors, if any.
fn class_name(job: &DIJob) -> Option<&str> {
    job.spec.collector.as_ref()?.workload_priority_class_name.as_deref()
}

/// What a pass knows of the queue of a job with collectors above its core.
pub(super) struct Queued<'a> {
    /// The job's LocalQueue.
    pub name: &'a str,
    /// Whether the job's core Workload is admitted.
    pub core_admitted: bool,
    /// The collectors' Workloads, by index.
    pub collectors: &'a BTreeMap<u32, Value>,
    pub flavors: &'a BTreeMap<String, Value>,
    /// The core Workload's priority (`spec.priority`; 0 without one).
    pub core_priority: i64,
    /// The value of the job's WorkloadPriorityClass for its collectors, where it exists.
    pub class: Option<i32>,
}

/// After the core's part of `queue::attach`: each collector above the core is created only while
/// its own Workload is admitted (and placed by it); its Workload is made when the core is admitted
/// and deleted when the collector is no longer asked for (scaled down, the job held or ended)
/// and its pod has gone; a preempted one loses its pod and is given back. The held pods are added
/// to `held`.
pub(super) fn attach(
    job: &DIJob,
    world: &World,
    queued: &Queued,
    wanted: &[Pod],
    settings: &Settings,
    plan: &mut Plan,
    held: &mut BTreeSet<String>,
) -> Result<(), BuildError> {
    let Queued { name: queue, core_admitted, collectors, flavors, core_priority, class } = *queued;
    // A class named and not found: no collector Workload is made until it is (those made stay).
    let missing = class_name(job).filter(|_| class.is_none());
    let Some(min) = job.spec.collector.as_ref().and_then(|c| c.core_collectors()) else { return Ok(()) };
    let finished = plan.status.phase.is_some_and(|p| p.is_finished());
    let asked = job.spec.collector_replicas().max(0) as u32;
    let slots = job.collector_slots().max(0) as u32;
    let pod_of = |index: u32| pod_of(job, world, index);
    let mut count = CollectorsAboveCore::default();
    let mut actions = vec![];
    for index in min..slots {
        let name = names::replica(&job.name_any(), Role::Collector, index);
        let pod = pod_of(index);
        let runs = core_admitted && !finished;
        let spare = index >= asked;
        let priority = priority(core_priority, class, spare);
        let Some(workload) = collectors.get(&index).filter(|_| runs) else {
            held.insert(name.clone());
            if runs {
                count.waiting += i32::from(!spare);
                // A pod whose Workload is gone (deleted by hand, or by Kueue's retention) runs on
                // no admission: it goes, and comes back with its new Workload's.
                if let Some(pod) = pod.filter(|p| !is_terminating(p) && pod_phase(p) != "Succeeded") {
                    actions.push(delete_pod(pod, Why::Reclaimed));
                }
                if let Some(template) = wanted.iter().find(|p| p.name_any() == name).filter(|_| missing.is_none()) {
                    let made = made(job, queue, index, template, priority, settings)?;
                    actions.push(Action::CreateWorkload(Box::new(made)));
                }
            }
            continue;
        };
        if workload["spec"]["priority"].as_i64() != Some(priority) && missing.is_none() {
            actions.push(Action::SetWorkloadPriority {
                name: super::metadata(workload, "name"),
                resource_version: super::metadata(workload, "resourceVersion"),
                priority,
            });
        }
        let admitted = matches!(super::workload_standing(queue, workload), Standing::Admitted { .. });
        let evicted = is_true(workload, "Evicted");
        // A collector that has succeeded is done: its Workload says Finished, which gives its
        // quota back, and it is never made again nor deleted as reclaimed.
        let succeeded = pod.is_some_and(|p| pod_phase(p) == "Succeeded");
        if admitted {
            count.admitted += 1;
            count.spare += i32::from(spare);
        } else if !spare {
            count.waiting += 1;
            count.preempted += i32::from(evicted);
        }
        if !admitted && !succeeded {
            held.insert(name.clone());
            if let Some(pod) = pod.filter(|p| !is_terminating(p)) {
                actions.push(delete_pod(pod, Why::Reclaimed));
            }
        }
        let seen = Report {
            ready: pod.is_some_and(is_ready),
            pods_active: may_run(pod),
            finished: succeeded.then_some(true),
            ..Report::default()
        };
        if let Some(reported) = report(workload, &seen, world.now) {
            let mut written = workload.clone();
            written["status"] = reported;
            actions.push(Action::WriteWorkloadStatus(Box::new(written)));
        }
    }
    // Workloads of collectors no longer asked for, or of a job its queue holds or that has ended:
    // given back once their pod has gone.
    let asked_for = |index: u32| index < slots && core_admitted && !finished;
    actions.extend(given_back(job, world, collectors.iter().filter(|(i, _)| !asked_for(**i))));
    // Only the collectors that may run are created, each where its own Workload was admitted.
    plan.actions.retain(|a| !matches!(a, Action::CreatePod(pod) if held.contains(&pod.name_any())));
    for (index, workload) in collectors {
        let name = names::replica(&job.name_any(), Role::Collector, *index);
        if let Some(template) = wanted.iter().find(|p| p.name_any() == name) {
            place(&pod_sets(std::slice::from_ref(template)), workload, flavors, &mut plan.actions);
        }
    }
    plan.actions.extend(actions);
    say(queue, &count, missing, world, plan);
    plan.status.collectors_above_core = Some(count);
    Ok(())
}

/// What a job held on a spec it cannot act on owes its collectors' Workloads (see
/// `queue::obey`): a collector whose Workload is not admitted loses its pod, and the Workloads of
/// those, or of every collector when the core is held or the job has ended (`all`), are given
/// back once their pods no longer may run.
pub(super) fn obey(
    job: &DIJob,
    world: &World,
    queue: &str,
    collectors: &BTreeMap<u32, Value>,
    all: bool,
) -> Vec<Action> {
    let admitted = |workload: &Value| matches!(super::workload_standing(queue, workload), Standing::Admitted { .. });
    let owed: Vec<(&u32, &Value)> = collectors.iter().filter(|(_, w)| all || !admitted(w)).collect();
    let mut actions = vec![];
    if !all {
        let running = owed.iter().filter_map(|(i, _)| pod_of(job, world, **i)).filter(|p| !is_terminating(p));
        actions.extend(running.filter(|p| may_run(Some(p))).map(|p| delete_pod(p, Why::Reclaimed)));
    }
    actions.extend(given_back(job, world, owed));
    actions
}

/// The deletes of `collectors`' Workloads (by index) whose pods no longer may run on them: the
/// one rule by which a collector's quota is given back (scaled away, its job held, ended or taken
/// out of its queue).
pub(super) fn given_back<'a>(
    job: &DIJob,
    world: &World,
    collectors: impl IntoIterator<Item = (&'a u32, &'a Value)>,
) -> Vec<Action> {
    collectors.into_iter().filter(|(i, _)| !may_run(pod_of(job, world, **i))).map(|(_, w)| delete_workload(w)).collect()
}

/// The condition `CollectorsQueued`: True while collectors `replicas` asks for above the core
/// wait for quota (spare-room ones waiting is their normal state, and says nothing).
fn say(queue: &str, count: &CollectorsAboveCore, missing: Option<&str>, world: &World, plan: &mut Plan) {
    let CollectorsAboveCore { admitted, waiting, preempted, spare } = *count;
    let asked = admitted - spare + waiting;
    if admitted + waiting == 0 && !plan.status.conditions.iter().any(|c| c.type_ == COLLECTORS_QUEUED) {
        return;
    }
    let spare_said = if spare > 0 { format!("; {spare} more run on spare room") } else { String::new() };
    let (reason, message) = match (asked, waiting) {
        (_, 1..) if let Some(class) = missing => (
            "WorkloadPriorityClassNotFound",
            format!(
                "{waiting} collector(s) above the job's core wait: spec.collector.workloadPriorityClassName names \
                 WorkloadPriorityClass {class}, which does not exist; create it (kueue.x-k8s.io/v1beta2)"
            ),
        ),
        (0, _) if spare == 0 => (
            "NoneAbove",
            "no collector above the job's core runs or waits (the core is not admitted, or asks for none)".into(),
        ),
        (_, 0) => (
            "Admitted",
            format!("the {asked} collector(s) above the job's core are admitted from queue {queue}{spare_said}"),
        ),
        _ => (
            if preempted > 0 { "Preempted" } else { "Pending" },
            format!(
                "{waiting} of the {asked} collector(s) above the job's core wait for quota in queue {queue} \
                 ({preempted} preempted, to run again when readmitted){spare_said}"
            ),
        ),
    };
    let conditions = &mut plan.status.conditions;
    crate::status::set_condition_as_said(conditions, COLLECTORS_QUEUED, waiting > 0, reason, &message, world.now);
}
