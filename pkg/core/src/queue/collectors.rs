//! Interruptible collectors: with `spec.collector.minReplicas`, a queued job's core Workload
//! holds the coordinator, the learners and its first `minReplicas` collectors, and each
//! collector above them is a Workload of its own, one below the core's priority. Kueue admits
//! each such collector when its queue has room (borrowing its cohort's idle quota) and preempts it
//! on its own when the quota is reclaimed: its pod alone goes (not counted as a restart), the
//! eviction is acknowledged once the pod is gone, and the pod comes back when Kueue admits the
//! Workload again. A collector Workload is made only while the core is admitted, so no collector
//! ever holds quota while its core waits, and none is given back while its pod may still run
//! (terminating included); a pod whose Workload is gone stops until its new one is admitted.

use std::collections::{BTreeMap, BTreeSet};

use di_api::DIJob;
use di_api::contract::{Role, names};
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

/// A collector's Workload: one podSet of its one pod, at one below its core's priority (as the
/// core's Workload carries it), so that Kueue takes a job's collectors before its own core and
/// before the core of any job of the same priority.
fn made(
    job: &DIJob,
    queue: &str,
    index: u32,
    pod: &Pod,
    core_priority: i64,
    settings: &Settings,
) -> Result<Value, BuildError> {
    let mut workload = made_of(job, queue, None, &pod_sets(std::slice::from_ref(pod)), settings)?;
    workload["metadata"]["name"] = json!(workload_name(job, index));
    workload["spec"]["priority"] = json!(core_priority.saturating_sub(1).max(i64::from(i32::MIN)));
    Ok(workload)
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
}

/// How the job's collectors above the core stand, for its condition.
#[derive(Default)]
struct Count {
    above: usize,
    waiting: usize,
    preempted: usize,
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
    let Queued { name: queue, core_admitted, collectors, flavors, core_priority } = *queued;
    let Some(min) = job.spec.collector.as_ref().and_then(|c| c.core_collectors()) else { return Ok(()) };
    let finished = plan.status.phase.is_some_and(|p| p.is_finished());
    let asked = job.spec.collector_replicas().max(0) as u32;
    let pod_of = |index: u32| pod_of(job, world, index);
    let mut count = Count::default();
    let mut actions = vec![];
    for index in min..asked {
        let name = names::replica(&job.name_any(), Role::Collector, index);
        let pod = pod_of(index);
        let runs = core_admitted && !finished;
        let Some(workload) = collectors.get(&index).filter(|_| runs) else {
            held.insert(name.clone());
            if runs {
                count.above += 1;
                count.waiting += 1;
                // A pod whose Workload is gone (deleted by hand, or by Kueue's retention) runs on
                // no admission: it goes, and comes back with its new Workload's.
                if let Some(pod) = pod.filter(|p| !is_terminating(p) && pod_phase(p) != "Succeeded") {
                    actions.push(delete_pod(pod, Why::Reclaimed));
                }
                if let Some(template) = wanted.iter().find(|p| p.name_any() == name) {
                    let made = made(job, queue, index, template, core_priority, settings)?;
                    actions.push(Action::CreateWorkload(Box::new(made)));
                }
            }
            continue;
        };
        count.above += 1;
        let admitted = matches!(super::workload_standing(queue, workload), Standing::Admitted { .. });
        let evicted = is_true(workload, "Evicted");
        // A collector that has succeeded is done: its Workload says Finished, which gives its
        // quota back, and it is never made again nor deleted as reclaimed.
        let succeeded = pod.is_some_and(|p| pod_phase(p) == "Succeeded");
        if !admitted && !succeeded {
            held.insert(name.clone());
            count.waiting += 1;
            count.preempted += usize::from(evicted);
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
    for (index, workload) in collectors {
        let asked_for = *index < asked && core_admitted && !finished;
        if !asked_for && !may_run(pod_of(*index)) {
            actions.push(delete_workload(workload));
        }
    }
    // Only the collectors that may run are created, each where its own Workload was admitted.
    plan.actions.retain(|a| !matches!(a, Action::CreatePod(pod) if held.contains(&pod.name_any())));
    for (index, workload) in collectors {
        let name = names::replica(&job.name_any(), Role::Collector, *index);
        if let Some(template) = wanted.iter().find(|p| p.name_any() == name) {
            place(&pod_sets(std::slice::from_ref(template)), workload, flavors, &mut plan.actions);
        }
    }
    plan.actions.extend(actions);
    say(queue, &count, world, plan);
    Ok(())
}

/// The deletes of the collector Workloads of a job taken out of its queue, each once its pod no
/// longer may run on it.
pub(super) fn left_behind(job: &DIJob, world: &World, collectors: &BTreeMap<u32, Value>) -> Vec<Action> {
    collectors.iter().filter(|(i, _)| !may_run(pod_of(job, world, **i))).map(|(_, w)| delete_workload(w)).collect()
}

/// The condition `CollectorsQueued`: True while collectors above the core wait for quota.
fn say(queue: &str, count: &Count, world: &World, plan: &mut Plan) {
    if count.above == 0 && !plan.status.conditions.iter().any(|c| c.type_ == COLLECTORS_QUEUED) {
        return;
    }
    let (reason, message) = match count {
        Count { above: 0, .. } => (
            "NoneAbove",
            "no collector above the job's core runs or waits (the core is not admitted, or asks for none)".into(),
        ),
        Count { waiting: 0, above, .. } => {
            ("Admitted", format!("the {above} collector(s) above the job's core are admitted from queue {queue}"))
        }
        Count { above, waiting, preempted } => (
            if *preempted > 0 { "Preempted" } else { "Pending" },
            format!(
                "{waiting} of the {above} collector(s) above the job's core wait for quota in queue {queue} \
                 ({preempted} preempted, to run again when readmitted)"
            ),
        ),
    };
    let conditions = &mut plan.status.conditions;
    crate::status::set_condition_as_said(conditions, COLLECTORS_QUEUED, count.waiting > 0, reason, &message, world.now);
}
