//! One reconcile pass, decided without I/O: from the job and what exists, the status to write and
//! the actions that move the world toward the job's desired state. Every action is safe to repeat,
//! so a pass cut short by a crash is simply decided again.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use di_api::contract::{Role, annotations, names};
use di_api::pod::{index_of, role_of};
use di_api::{DIJob, Phase};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::jiff::SignedDuration;
use kube::ResourceExt;

pub use crate::decision::{Action, Plan, Why, World, backoff};
use crate::decision::{cleanup, delete_pod, delete_service, restart_after, restarts_of, sooner};
use crate::desired::{self, BuildError, Settings, identity};
use crate::disruption::disrupted;
use crate::restarts::Mark;
use crate::status::{self, Facts, is_terminating, pod_phase};

/// Decides a pass for a defaulted, valid job.
pub fn plan(job: &DIJob, world: &World, settings: &Settings, restart_backoff: Duration) -> Result<Plan, BuildError> {
    if job.spec.is_task_job() {
        return crate::tasks::plan(job, world, settings, restart_backoff);
    }
    let name = job.name_any();
    let pods: BTreeMap<String, &Pod> = world.pods.iter().map(|p| (p.name_any(), *p)).collect();
    let services: BTreeMap<String, &Service> = world.services.iter().map(|s| (s.name_any(), *s)).collect();
    let coordinator_name = names::coordinator(&name);
    let coordinator = pods.get(&coordinator_name).copied();
    let previous = job.status.as_ref().and_then(|s| s.phase);

    let mut facts = Facts { missing_aggregator_config: world.missing_aggregator_config.clone(), ..Facts::default() };
    let mut actions = vec![];
    let mut requeue: Option<Duration> = None;
    let mut requeue_at = |d: Duration| sooner(&mut requeue, d);

    // A coordinator that has already ended decides the job even as it is suspended: its exit is
    // recorded (and the cleanup follows) before suspend could delete the pod that shows it.
    let observed = status::job_phase(previous, coordinator);
    let lost = crate::lost::lost(job, previous, coordinator, services.get(&coordinator_name).copied());
    let past_limit = lost.as_ref().and_then(|l| l.over_limit.clone());
    // A job its queue holds has no pod, as a suspended one.
    let held = crate::queue::held(job, world).is_some();
    facts.queued = crate::queue::queued_condition(job, world);
    let holding = (job.spec.is_suspended() || held) && !observed.is_finished();
    let phase = if holding {
        facts.suspended = job.spec.is_suspended();
        Phase::Created
    } else if past_limit.is_some() {
        Phase::Failed
    } else {
        observed
    };
    facts.phase = Some(phase);
    facts.phase_reason = match past_limit {
        Some(message) => ("CoordinatorLost".into(), message),
        None => phase_reason(phase, coordinator),
    };

    let mut gangs = vec![];
    let mut core_pods = BTreeSet::new();
    if phase.is_finished() {
        actions.extend(cleanup(job, world));
        if !previous.is_some_and(Phase::is_finished) && !identity::uses_shared(job, settings.identity) {
            actions.push(Action::DeleteRbac);
        }
    } else if holding {
        for pod in world.pods.iter().filter(|p| !is_terminating(p)) {
            actions.push(delete_pod(pod, Why::Suspended));
        }
        // A job its queue evicted keeps its Services, and the restart counts they hold.
        if facts.suspended {
            actions.extend(services.values().map(|s| delete_service(s)));
        }
    } else {
        // Only what a pass may create is built: a replica without its pod or its Service.
        let missing = |name: &str| !pods.contains_key(name) || !services.contains_key(name);
        let wanted = desired::wanted(job, world.aggregator_config, settings, missing)?;
        let wanted_names: BTreeSet<String> = wanted.iter().map(|w| w.name.clone()).collect();
        facts.replicas = wanted.len();
        let limit = job.spec.restart_limit;
        let reported: BTreeSet<(String, String)> = job
            .annotations()
            .get(annotations::REPLACE)
            .map(|v| annotations::parse_replace(v).into_iter().collect())
            .unwrap_or_default();
        let mut failed_aggregators = BTreeSet::new();
        for replica in &wanted {
            let pod_name = replica.name.clone();
            let built = || replica.built.as_ref().expect("a replica missing an object is built");
            if let Some(holder) = world.taken.get(&pod_name) {
                facts.names_taken.push((pod_name, holder.clone()));
                continue;
            }
            let service = services.get(&pod_name).copied();
            if service.is_none() {
                actions.push(Action::CreateService(Box::new(built().service.clone())));
            }
            let restarts = service.map_or(0, restarts_of);
            if replica.role == Role::Coordinator
                && let Some(lost) = lost.as_ref().filter(|l| !l.counted)
            {
                // No backoff: the job waits on its coordinator.
                let service_uid = service.and_then(|s| s.uid());
                let mark = Mark {
                    service_uid,
                    restarts: lost.restarts,
                    failed_uid: lost.key.clone(),
                    restart_after: world.now,
                };
                actions.push(Action::MarkRestart { service: pod_name.clone(), mark });
            }
            match pods.get(&pod_name) {
                None => {
                    if replica.role == Role::Coordinator {
                        actions.push(match identity::uses_shared(job, settings.identity) {
                            true => Action::EnsureNamespaceIdentity,
                            false => Action::CreateRbac(Box::new(desired::rbac(job, settings)?)),
                        });
                    }
                    let after = service.and_then(restart_after);
                    match after.map(|t| t.duration_since(world.now)).filter(|d| d.is_positive()) {
                        Some(wait) => requeue_at(wait.unsigned_abs()),
                        None => {
                            let mut pod = built().pod.clone();
                            if restarts > 0 {
                                pod.annotations_mut().insert(annotations::RESTARTS.into(), restarts.to_string());
                            }
                            actions.push(Action::CreatePod(Box::new(pod)));
                        }
                    }
                }
                Some(pod) if is_terminating(pod) => {}
                // Replaced at once and not counted: nothing the replica did ended it. A
                // coordinator's loss is counted above (`lost`).
                Some(pod) if disrupted(pod).is_some() => {
                    actions.push(delete_pod(pod, Why::Disrupted));
                    if replica.role == Role::Aggregator {
                        failed_aggregators.insert(replica.index);
                    }
                }
                Some(pod)
                    if replica.role != Role::Coordinator
                        && reported.contains(&(pod_name.clone(), pod.uid().unwrap_or_default())) =>
                {
                    actions.push(delete_pod(pod, Why::Reported));
                    if replica.role == Role::Aggregator {
                        failed_aggregators.insert(replica.index);
                    }
                }
                Some(pod) if pod_phase(pod) == "Failed" && replica.role != Role::Coordinator => {
                    let uid = pod.uid().unwrap_or_default();
                    let counted = service.and_then(|s| s.annotations().get(annotations::LAST_FAILED_UID)) == Some(&uid);
                    if !counted && limit.is_some_and(|l| restarts >= l.max(0) as u32) {
                        facts.over_restart_limit.push(pod_name.clone());
                        continue;
                    }
                    if !counted {
                        let next = restarts + 1;
                        let wait = backoff(restart_backoff, next);
                        let restart_after = world.now + SignedDuration::try_from(wait).unwrap_or(SignedDuration::ZERO);
                        let service_uid = service.and_then(|s| s.uid());
                        let mark = Mark { service_uid, restarts: next, failed_uid: uid, restart_after };
                        actions.push(Action::MarkRestart { service: pod_name.clone(), mark });
                        requeue_at(wait);
                    }
                    actions.push(delete_pod(pod, Why::Failed));
                    if replica.role == Role::Aggregator {
                        failed_aggregators.insert(replica.index);
                    }
                }
                Some(_) => {}
            }
        }
        // An aggregator's DDP learners start over with it.
        for replica in wanted.iter().filter(|r| r.role == Role::DdpLearner && failed_aggregators.contains(&r.index)) {
            if let Some(pod) = pods.get(&replica.name).filter(|p| !is_terminating(p)) {
                actions.push(delete_pod(pod, Why::AggregatorFailed));
            }
        }

        // What the job no longer wants goes, highest index first. Learner pods stay while their
        // AggregatorConfig is missing: the job still wants them, it just cannot build them.
        let keep = |pod: &Pod| {
            wanted_names.contains(&pod.name_any())
                || (world.missing_aggregator_config.is_some()
                    && matches!(role_of(pod), Some(Role::Learner | Role::Aggregator | Role::DdpLearner)))
        };
        let mut excess: Vec<&Pod> = world.pods.iter().copied().filter(|p| !keep(p) && !is_terminating(p)).collect();
        // An unindexed pod (`None`) goes last.
        excess.sort_by_key(|p| std::cmp::Reverse((index_of(p), p.name_any())));
        actions.extend(excess.iter().map(|p| delete_pod(p, Why::ScaledDown)));
        for (name, service) in &services {
            let owned_by_kept_pod = pods.get(name).is_some_and(|p| keep(p));
            if !wanted_names.contains(name) && !owned_by_kept_pod {
                actions.push(delete_service(service));
            }
        }
        crate::stranded::release(job, world, &mut actions, &mut requeue);
        gangs = desired::gang::role_gangs(job, &wanted);
        core_pods = wanted.iter().filter(|w| w.role != Role::Collector).map(|w| w.name.clone()).collect();
    }

    facts.restarts = services.values().map(|s| restarts_of(s)).sum();
    let status = status::compute(job, &world.pods, &facts, world.now);
    let mut plan = Plan { status, actions, requeue_after: requeue };
    let held = crate::queue::attach(job, world, world.aggregator_config, settings, &mut plan)?;
    crate::gangs::attach(job, &gangs, &held, settings, &mut plan.actions)?;
    crate::budget::protect(job, core_pods, &world.pods, settings, &mut plan)?;
    plan.expire(job, world.now);
    Ok(plan)
}

/// A started role job whose spec cannot be acted on (it became invalid without the webhook) is
/// held as it runs, but its coordinator's end is still its end: recorded, cleaned up by the
/// clean pod policy, its TTL counted. `None` while the coordinator has not ended.
pub fn finish_held(job: &DIJob, world: &World, settings: &Settings) -> Option<Plan> {
    let previous = job.status.as_ref().and_then(|s| s.phase);
    if previous.is_some_and(Phase::is_finished) {
        // Recorded already: the cleanup (safe to repeat, should the last pass have been cut
        // short) and the TTL are left.
        let status = job.status.clone().unwrap_or_default();
        let mut plan = Plan { status, actions: cleanup(job, world), requeue_after: None };
        plan.expire(job, world.now);
        return Some(plan);
    }
    if job.spec.is_task_job() {
        return None;
    }
    let coordinator = world.pods.iter().copied().find(|p| p.name_any() == names::coordinator(&job.name_any()));
    let phase = status::job_phase(previous, coordinator);
    if !phase.is_finished() {
        return None;
    }
    let facts = Facts { phase: Some(phase), phase_reason: phase_reason(phase, coordinator), ..Facts::default() };
    let mut actions = cleanup(job, world);
    if !identity::uses_shared(job, settings.identity) {
        actions.push(Action::DeleteRbac);
    }
    let status = status::compute(job, &world.pods, &facts, world.now);
    let mut plan = Plan { status, actions, requeue_after: None };
    plan.expire(job, world.now);
    Some(plan)
}

fn phase_reason(phase: Phase, coordinator: Option<&Pod>) -> (String, String) {
    let pod_message = coordinator
        .and_then(|p| p.status.as_ref())
        .and_then(|s| s.message.clone().or_else(|| s.reason.clone()))
        .map(|m| format!(": {m}"))
        .unwrap_or_default();
    let (reason, message) = match phase {
        Phase::Created => ("JobCreated", "waiting for the coordinator to run".to_string()),
        Phase::Running => ("CoordinatorRunning", "the coordinator is running".to_string()),
        Phase::Succeeded => ("CoordinatorSucceeded", "the coordinator exited successfully".to_string()),
        Phase::Failed => ("CoordinatorFailed", format!("the coordinator failed{pod_message}")),
        Phase::Unknown => ("CoordinatorUnknown", "the coordinator's state cannot be observed".to_string()),
        // A task job's phases (see tasks.rs); a role job never has them.
        Phase::Pending | Phase::Starting | Phase::Restarting | Phase::Rescheduling => ("", String::new()),
    };
    (reason.into(), message)
}
