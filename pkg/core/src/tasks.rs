//! One reconcile pass of a task job, decided without I/O (the role job's is `plan`). A task job's
//! pods know each other by name (`DI_NODES`), so its rules are about keeping those names true:
//! - a failed pod is replaced under its own name (`restartPolicy: Pod`), or every pod is
//!   (`restartPolicy: Job`), and each replacement is counted against `backoffLimit` on the job's
//!   Service, with backoff;
//! - a pod built for another peer set (a task was scaled) is deleted, and no pod is created while
//!   one is left, so old and new peer lists never run side by side;
//! - the job succeeds when every pod of its deciding tasks has.
//!
//! Its cases are in `tests/tasks.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use di_api::contract::annotations as marks;
use di_api::tasks::{self, annotations};
use di_api::{DIJob, JobRestartPolicy, Phase};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::SignedDuration;
use kube::ResourceExt;

use crate::decision::{
    Action, Plan, Why, World, backoff, cleanup, delete_pod, delete_service, restart_after, restarts_of, sooner,
};
use crate::desired::{self, BuildError, Settings, TaskObjects};
use crate::disruption::disrupted;
use crate::restarts::Mark;
use crate::status::{self, Facts, is_terminating, pod_phase};

/// Decides a pass for a defaulted, valid task job.
pub fn plan(job: &DIJob, world: &World, settings: &Settings, restart_backoff: Duration) -> Result<Plan, BuildError> {
    let wanted = desired::task_objects(job, settings)?;
    let service_name = wanted.service.name_any();
    let service = world.services.iter().copied().find(|s| s.name_any() == service_name);
    let pods: BTreeMap<String, &Pod> = world.pods.iter().map(|p| (p.name_any(), *p)).collect();
    let previous = job.status.as_ref().and_then(|s| s.phase);
    let mut restarts = service.map_or(0, restarts_of);
    let counted: BTreeSet<String> = service
        .and_then(|s| s.annotations().get(marks::LAST_FAILED_UID))
        .map(|v| v.split(',').map(str::to_owned).collect())
        .unwrap_or_default();
    let current: BTreeSet<String> = wanted.pods.iter().map(|p| p.member.pod.clone()).collect();
    // Pods built for another peer set, until the last is gone.
    let old_peers = world.pods.iter().any(|p| p.annotations().get(annotations::PEERS) != Some(&wanted.peers));
    let wait = service.and_then(restart_after).map(|t| t.duration_since(world.now)).filter(|d| d.is_positive());

    let mut facts = Facts { replicas: wanted.pods.len(), peers: Some(wanted.peers.clone()), ..Facts::default() };
    let held = crate::queue::held(job, world);
    facts.queued = crate::queue::queued_condition(job, world);
    let mut actions = vec![];
    let mut requeue: Option<Duration> = None;

    let live = |p: &&Pod| !is_terminating(p);
    let failed: Vec<&Pod> = world.pods.iter().copied().filter(live).filter(|p| pod_phase(p) == "Failed").collect();
    // A pod a disruption ended is replaced like a failed one, but counts against no limit.
    let new_failures: Vec<&Pod> = failed
        .iter()
        .copied()
        .filter(|p| !counted.contains(&p.uid().unwrap_or_default()) && disrupted(p).is_none())
        .collect();
    let policy = tasks::restart_policy(job);
    let limit = tasks::backoff_limit(job);

    let (phase, reason) = if let Some(done) = previous.filter(|p| p.is_finished()) {
        // Final: its condition keeps the reason it finished with.
        (done, Some((String::new(), String::new())))
    } else if let Some(done) = succeeded(&wanted, &pods) {
        (Phase::Succeeded, Some(done))
    } else if job.spec.is_suspended() {
        facts.suspended = true;
        (Phase::Pending, Some(("JobSuspended".into(), "spec.suspend is true: the job's pods are deleted".into())))
    } else if let Some((reason, message)) = held.clone() {
        // A job its queue holds has no pod, as a suspended one.
        (Phase::Pending, Some((reason.into(), message)))
    } else if !new_failures.is_empty() {
        let more = if policy == JobRestartPolicy::Job { 1 } else { new_failures.len() as u32 };
        let names = new_failures.iter().map(|p| p.name_any()).collect::<Vec<_>>().join(", ");
        if restarts + more > limit {
            let message = format!("{names} failed after {restarts} restart(s); spec.backoffLimit is {limit}");
            (Phase::Failed, Some(("BackoffLimitExceeded".into(), message)))
        } else {
            restarts += more;
            let wait = backoff(restart_backoff, restarts);
            let mut uids: Vec<String> = failed.iter().filter_map(|p| p.uid()).collect();
            uids.sort();
            let mark = Mark {
                service_uid: service.and_then(|s| s.uid()),
                restarts,
                failed_uid: uids.join(","),
                restart_after: world.now + SignedDuration::try_from(wait).unwrap_or(SignedDuration::ZERO),
            };
            actions.push(Action::MarkRestart { service: service_name.clone(), mark });
            requeue = Some(wait);
            let message = format!("{names} failed: restart {restarts} of at most {limit}");
            (Phase::Restarting, Some(("PodFailed".into(), message)))
        }
    } else {
        (Phase::Pending, None) // decided below, from what exists
    };

    if phase.is_finished() {
        actions.extend(cleanup(job, world));
    } else if facts.suspended || held.is_some() {
        actions.extend(world.pods.iter().copied().filter(live).map(|p| delete_pod(p, Why::Suspended)));
        // A job its queue evicted keeps its Service, and the restart count it holds.
        if facts.suspended {
            actions.extend(world.services.iter().map(|s| delete_service(s)));
        }
    } else {
        // Failed pods go: alone, or with every other pod of the job.
        let restart_all = policy == JobRestartPolicy::Job && !failed.is_empty();
        for pod in world.pods.iter().copied().filter(live) {
            let stale = pod.annotations().get(annotations::PEERS) != Some(&wanted.peers);
            if restart_all {
                actions.push(delete_pod(pod, Why::JobRestart));
            } else if disrupted(pod).is_some() {
                actions.push(delete_pod(pod, Why::Disrupted));
            } else if pod_phase(pod) == "Failed" {
                actions.push(delete_pod(pod, Why::Failed));
            } else if !current.contains(&pod.name_any()) {
                actions.push(delete_pod(pod, Why::ScaledDown));
            } else if stale {
                actions.push(delete_pod(pod, Why::Rebuilt));
            }
        }
        crate::stranded::release(job, world, &mut actions, &mut requeue);
        // Without its own Service no pod's name resolves: none starts while another holds it.
        let service_held = world.taken.get(&service_name);
        if let Some(holder) = service_held {
            facts.names_taken.push((service_name.clone(), holder.clone()));
        } else if service.is_none() {
            actions.push(Action::CreateService(Box::new(wanted.service.clone())));
        }
        // Pods are created only into a world of the current peer set; under `restartPolicy: Job`
        // only once every pod of the last round is gone.
        let round_ending = policy == JobRestartPolicy::Job
            && (restart_all || world.pods.iter().any(|p| is_terminating(p) || pod_phase(p) == "Failed"));
        let blocked = old_peers || round_ending || service_held.is_some();
        for task_pod in &wanted.pods {
            let name = &task_pod.member.pod;
            if let Some(holder) = world.taken.get(name) {
                facts.names_taken.push((name.clone(), holder.clone()));
            } else if pods.contains_key(name) || blocked {
                continue;
            } else if let Some(wait) = wait {
                sooner(&mut requeue, wait.unsigned_abs());
            } else {
                actions.push(Action::CreatePod(Box::new(task_pod.pod.clone())));
            }
        }
    }

    let (phase, (reason, message)) = match reason {
        Some(reason) => (phase, reason),
        None => {
            let replacing =
                matches!(previous, Some(Phase::Running | Phase::Restarting)) || !failed.is_empty() || wait.is_some();
            progress(replacing, &wanted, &pods, old_peers)
        }
    };
    facts.phase = Some(phase);
    facts.phase_reason = (reason, message);
    facts.restarts = restarts;
    let status = status::compute(job, &world.pods, &facts, world.now);
    let mut plan = Plan { status, actions, requeue_after: requeue };
    let held = crate::queue::attach(job, world, None, settings, &mut plan)?;
    crate::gangs::attach(job, &desired::gang::task_gangs(job), &held, settings, &mut plan.actions)?;
    crate::budget::protect(job, crate::budget::task_core_pods(job), &world.pods, settings, &mut plan)?;
    plan.expire(job, world.now);
    Ok(plan)
}

/// `(reason, message)` when every pod of the deciding tasks has succeeded.
fn succeeded(wanted: &TaskObjects, pods: &BTreeMap<String, &Pod>) -> Option<(String, String)> {
    let deciding: Vec<&str> = wanted.pods.iter().filter(|p| p.completion).map(|p| p.member.pod.as_str()).collect();
    let done = !deciding.is_empty()
        && deciding.iter().all(|name| pods.get(*name).is_some_and(|p| pod_phase(p) == "Succeeded"));
    done.then(|| {
        ("TasksSucceeded".into(), format!("every pod of the deciding tasks succeeded: {}", deciding.join(", ")))
    })
}

/// The phase of a job that neither finished nor failed a pod in this pass, from its pods.
/// `replacing`: the job ran, or has failed pods it is replacing.
fn progress(
    replacing: bool,
    wanted: &TaskObjects,
    pods: &BTreeMap<String, &Pod>,
    old_peers: bool,
) -> (Phase, (String, String)) {
    let live = |name: &str| pods.get(name).filter(|p| !is_terminating(p) && pod_phase(p) != "Failed");
    let all_exist = !old_peers && wanted.pods.iter().all(|p| live(&p.member.pod).is_some());
    let all_run = all_exist
        && wanted
            .pods
            .iter()
            .all(|p| live(&p.member.pod).is_some_and(|p| matches!(pod_phase(p), "Running" | "Succeeded")));
    let text = |reason: &str, message: &str| (reason.to_owned(), message.to_owned());
    if all_run {
        (Phase::Running, text("AllPodsRunning", "every pod of the job is running"))
    } else if old_peers {
        (Phase::Restarting, text("TasksScaled", "a task was scaled: every pod is built again with the new peer list"))
    } else if replacing {
        (Phase::Restarting, text("PodsReplaced", "replaced pods are starting"))
    } else if all_exist {
        (Phase::Starting, text("PodsStarting", "every pod is created; waiting for all to run"))
    } else {
        (Phase::Pending, text("PodsPending", "creating the job's pods"))
    }
}
