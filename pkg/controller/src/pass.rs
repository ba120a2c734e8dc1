//! One pass over one job: read its world from the caches, decide (`plan`), carry the decision out
//! (`execute`) and record the status, in the order that keeps every step safe to repeat.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use di_api::contract::names;
use di_api::defaults::default_dijob;
use di_api::validation::validate_dijob;
use di_api::{DIJob, Phase};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use tracing::{info, warn};

use crate::context::{Context, publish, publish_on};
use crate::created::Kind;
use crate::decision::{Action, Plan};
use crate::dispatch::Requeue;
use crate::error::Error;
use crate::execute::execute;
use crate::members::{aggregator_config, confirm_current, members};
use crate::order::{admitted_now, deletes_by_spec, recreates_coordinator};
use crate::pace;
use crate::plan;
use crate::record::{record_status, write_status};
use crate::status::{self, Facts};
use crate::view::JobView;

pub(crate) async fn reconcile(view: Arc<JobView>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    let _timer = ctx.metrics.reconcile_started();
    // Before any cache is read: this pass reads every report that was waiting for one.
    ctx.later.ran(ObjectRef::from_obj(view.as_ref()));
    let uid = view.uid().unwrap_or_default();
    match pass(view.clone(), &ctx).await {
        // The cached job is older than the one stored: the newer one's watch event brings the
        // next pass; the requeue only stands in for a lost event.
        Err(Error::StaleJob) => {
            ctx.metrics.stale_passes.inc();
            Ok(Requeue::after(Duration::from_secs(1)))
        }
        // Not the job's failure: it goes with its namespace, and every later pass leaves it be.
        Err(e) if e.says_namespace_terminating() => {
            info!(job = %view.name_any(), namespace = ?view.namespace(), "the job's namespace is being deleted: {e}");
            ctx.teardown.refused(&uid);
            ctx.retries.succeeded(&uid);
            Ok(Requeue::await_change())
        }
        Ok(requeue) => {
            ctx.retries.succeeded(&uid);
            Ok(requeue)
        }
        Err(e) => Err(e),
    }
}

async fn pass(view: Arc<JobView>, ctx: &Arc<Context>) -> Result<Requeue, Error> {
    if view.metadata.deletion_timestamp.is_some() {
        // Everything the job owns goes with it through garbage collection.
        return Ok(Requeue::await_change());
    }
    let namespace = view.namespace().unwrap_or_default();
    if ctx.teardown.going(&namespace, view.uid().as_deref().unwrap_or_default()) {
        // Its pods going are its namespace's deletion, not a failure or a restart; anything
        // created would be refused.
        return Ok(Requeue::await_change());
    }
    // On the heap: a job is kilobytes, and a hundred passes at once would each hold one inline.
    let parsed = view.to_job().map(Box::new);
    // Its status is the worker's, which MultiKueue writes here: not another controller's job.
    if let Ok(job) = &parsed
        && job.dispatched()
    {
        return Box::pin(crate::multikueue::pass(ctx, job)).await;
    }
    if let Some(why) = view.left_alone() {
        leave_alone(ctx, &view, &why);
        return Ok(Requeue::await_change());
    }
    let mut job = match parsed {
        Ok(job) => job,
        Err(e) => {
            // Only a spec the API server's schema let through but the types cannot read.
            let job =
                Box::new(DIJob { metadata: view.metadata.clone(), status: view.status.clone(), ..Default::default() });
            return refuse(ctx, &job, "InvalidSpec", &format!("the job's spec cannot be read: {e}")).await;
        }
    };
    default_dijob(&mut job);

    if let Err(errors) = validate_dijob(&job) {
        return refuse(ctx, &job, "InvalidSpec", &format!("the job is invalid: {errors}")).await;
    }

    let uid = job.uid().unwrap_or_default();
    let members = members(ctx, &job);

    // What the caches show, for the creations they have not shown yet (created.rs).
    let taken = || members.taken.keys().cloned();
    let cached_pods: BTreeSet<String> = members.pods.iter().map(|p| p.name_any()).chain(taken()).collect();
    let cached_services: BTreeSet<String> = members.services.iter().map(|s| s.name_any()).chain(taken()).collect();

    let (aggregator_config, missing) = aggregator_config(ctx, &job);
    let mut world = members.world();
    (world.aggregator_config, world.missing_aggregator_config) = (aggregator_config.as_ref(), missing);
    world.queue = crate::workloads::queue_of(ctx, &job);
    let mut plan = match plan::plan(&job, &world, &ctx.settings, ctx.restart_backoff) {
        Ok(plan) => plan,
        Err(e) => return refuse(ctx, &job, "CannotBuildPods", &e.to_string()).await,
    };
    // A name another job's pod or Service holds would be "created" by finding it, and this job
    // would run without that replica. Such names (rare: two jobs whose names collide) are
    // decided again as taken, so the job shows who holds them.
    let held = held_elsewhere(ctx, &namespace, &uid, &plan.actions);
    if !held.is_empty() {
        world.taken.extend(held);
        plan = plan::plan(&job, &world, &ctx.settings, ctx.restart_backoff)?;
    }
    // A job that waits for pods is starting from now on. One that waits for none is up only once
    // its status says so: its held Normal events (see `events`) go out after that write, not
    // beside it, where they would cost the API server time the write and its watchers wait on.
    let waits = pace::waits_for(&plan.status);
    if waits.is_some() {
        ctx.starting.set(&namespace, &job.name_any(), waits);
    }
    let acted = act(ctx, &job, plan, (&cached_pods, &cached_services)).await;
    if waits.is_none() {
        ctx.starting.set(&namespace, &job.name_any(), None);
    }
    acted
}

/// Carries the plan out (`execute`) and records the status, in the order that keeps every step
/// safe to repeat; `cached`: the names of the job's pods and Services its caches show.
async fn act(
    ctx: &Arc<Context>,
    job: &DIJob,
    mut plan: Plan,
    (cached_pods, cached_services): (&BTreeSet<String>, &BTreeSet<String>),
) -> Result<Requeue, Error> {
    let uid = job.uid().unwrap_or_default();
    // What this process created and its caches do not show yet exists: creating it again would
    // only be refused. Until the caches catch up, the status would describe a world without it.
    let unseen_pods = ctx.created.unseen(&uid, Kind::Pod, cached_pods);
    let unseen_services = ctx.created.unseen(&uid, Kind::Service, cached_services);
    let planned = plan.actions.len();
    let coordinator = names::coordinator(&job.name_any());
    plan.actions.retain(|action| match action {
        Action::CreatePod(pod) => !unseen_pods.contains(&pod.name_any()),
        // The RBAC is made before its coordinator, so a coordinator that exists has it.
        Action::CreateRbac(_) | Action::EnsureNamespaceIdentity => !unseen_pods.contains(&coordinator),
        Action::CreateService(service) => !unseen_services.contains(&service.name_any()),
        // What the pods do is reported once the cache shows every pod this process created.
        // Nor is a Workload given back while a pod it admitted may not be in the cache yet.
        Action::WriteWorkloadStatus(_) | Action::DeleteWorkload { .. } => unseen_pods.is_empty(),
        _ => true,
    });
    let cache_behind = plan.actions.len() < planned;

    // A finished phase is recorded before the cleanup it triggers, so a crash in between cannot
    // bring a deleted coordinator back. Otherwise the pods come first, for a faster start; and a
    // pass that created pods leaves its status unwritten, since it describes the world before
    // them: the pods' own watch events bring the next pass, which writes the world as it is.
    let finishing = plan.status.phase.is_some_and(Phase::is_finished);
    if recreates_coordinator(job, &plan) || (!finishing && deletes_by_spec(&plan)) {
        // Only a cache that missed the job's last status (say, Succeeded, then the cleanup that
        // deleted the coordinator) could bring a finished job's coordinator back; and only a
        // cache that missed the job's last spec could scale it down or suspend it after a newer
        // one scaled it up or resumed it. Its watch lists from any cache, so each of these is
        // first checked against a quorum read (one request, and only in such passes). A
        // finishing pass's cleanup needs none: its status write, conditioned on the job it read,
        // goes first, and a finished phase never goes back.
        confirm_current(ctx, job).await?;
    }

    // So is an admission (a change of the Queued condition, written at once): see
    // `admitted_now`. Its status describes the world before its pods, which follows soon.
    let deferred = if finishing || admitted_now(job, &plan) {
        let deferred = record_status(ctx, job, &plan.status).await?;
        let created = execute(ctx, job, &plan.actions).await?;
        if created {
            ctx.pacer.created(&uid);
            Some(ctx.pacer.period.max(Duration::from_secs(1)))
        } else {
            deferred
        }
    } else {
        let created = execute(ctx, job, &plan.actions).await?;
        if created {
            ctx.pacer.created(&uid);
        }
        if created || cache_behind {
            // Should the pods' events be lost, the status still follows soon.
            Some(ctx.pacer.period.max(Duration::from_secs(1)))
        } else {
            record_status(ctx, job, &plan.status).await?
        }
    };
    // A periodic look catches what no watch event reports (time passing, a lost event).
    let next = [plan.requeue_after, deferred].into_iter().flatten().min();
    Ok(Requeue::after(next.unwrap_or(Duration::from_secs(300))))
}

/// Names a job the orchestrator does not act on (`JobView::left_alone`), and touches nothing of
/// it: no pod, no status, no deletion. Its next change brings the next look.
fn leave_alone(ctx: &Arc<Context>, view: &JobView, why: &str) {
    let name = view.name_any();
    warn!(job = %name, namespace = ?view.namespace(), "left alone: {why}");
    let note = format!(
        "di-orchestrator leaves this job alone: {why}. Its pods are not touched; delete it when done, \
         or export it without its status and apply it again to run it under di-orchestrator"
    );
    publish(ctx, &view.object_ref(&()), &name, EventType::Warning, "LeftAlone", "Reconcile", Some(note));
}

/// The names `actions` would create that a cached pod or Service of another owner holds, with
/// the job that holds each (by its label).
fn held_elsewhere(ctx: &Context, namespace: &str, uid: &str, actions: &[Action]) -> BTreeMap<String, String> {
    use crate::view::JobMember;
    fn holder<K: JobMember + Resource<DynamicType = ()> + Clone>(
        store: &kube::runtime::reflector::Store<K>,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> Option<String> {
        let found = store.get(&ObjectRef::new(name).within(namespace))?;
        (found.owner() != Some(uid)).then(|| match found.job() {
            Some(job) => format!("held by job {job}"),
            None => "held by an object no job owns".to_owned(),
        })
    }
    let mut held = BTreeMap::new();
    for action in actions {
        let name = match action {
            Action::CreatePod(pod) => pod.name_any(),
            Action::CreateService(service) => service.name_any(),
            _ => continue,
        };
        // A role replica's pod and Service share its name: either held is the name held.
        let holder = holder(&ctx.pods, namespace, &name, uid).or_else(|| holder(&ctx.services, namespace, &name, uid));
        held.extend(holder.map(|h| (name, h)));
    }
    held
}

/// A spec the reconciler cannot act on (possible only without the webhook): requeueing cannot fix
/// it, so the job is left alone until it changes. A job that never started is marked Failed; one
/// that runs keeps running as it is, on the last spec it could act on, and says why in a
/// condition, rather than fail for good while its pods go on. Its coordinator's end is still
/// recorded and cleaned up after (`plan::finish_held`), and its queue still obeyed (`queue::obey`).
async fn refuse(ctx: &Arc<Context>, job: &DIJob, reason: &str, message: &str) -> Result<Requeue, Error> {
    // On the heap: refusals are rare, and inline their future would make every pass's twice as
    // big.
    Box::pin(refused(ctx, job, reason, message)).await
}

async fn refused(ctx: &Arc<Context>, job: &DIJob, reason: &str, message: &str) -> Result<Requeue, Error> {
    let phase = job.status.as_ref().and_then(|s| s.phase);
    if phase.is_none() {
        mark_failed(ctx, job, reason, message).await?;
        return Ok(Requeue::await_change());
    }
    let members = members(ctx, job);
    let mut world = members.world();
    world.queue = crate::workloads::queue_of(ctx, job);
    match plan::finish_held(job, &world, &ctx.settings) {
        Some(mut plan) => {
            plan.actions.extend(crate::queue::obey(job, &world, plan.status.phase));
            record_status(ctx, job, &plan.status).await?;
            execute(ctx, job, &plan.actions).await?;
            Ok(plan.requeue_after.map_or_else(Requeue::await_change, Requeue::after))
        }
        None => {
            hold(ctx, job, reason, message).await?;
            // Its queue still decides whether its pods may run.
            execute(ctx, job, &crate::queue::obey(job, &world, None)).await?;
            Ok(Requeue::await_change())
        }
    }
}

/// Keeps a started job's status as it is, with the InvalidSpec condition saying why.
async fn hold(ctx: &Arc<Context>, job: &DIJob, reason: &str, message: &str) -> Result<(), Error> {
    let old = job.status.clone().unwrap_or_default();
    let mut held = old.clone();
    let message = format!("{message}; the job keeps running as it was until the spec can be acted on again");
    let conditions = &mut held.conditions;
    status::set_condition(conditions, status::INVALID_SPEC, true, reason, &message, Timestamp::now());
    if let Some(condition) = conditions.iter_mut().find(|c| c.type_ == status::INVALID_SPEC) {
        // The latest problem, not the first one's.
        (condition.reason, condition.message) = (Some(reason.to_owned()), Some(message.clone()));
    }
    if held != old {
        write_status(ctx, job, &held).await?;
        publish_on(ctx, job, EventType::Warning, reason, "Validate", Some(message));
    }
    Ok(())
}

/// Marks a job that cannot be run as Failed, once, with the reason.
async fn mark_failed(ctx: &Arc<Context>, job: &DIJob, reason: &str, message: &str) -> Result<(), Error> {
    let facts = Facts { phase: Some(Phase::Failed), phase_reason: (reason.into(), message.into()), ..Facts::default() };
    let status = status::compute(job, &[], &facts, Timestamp::now());
    let unchanged = job.status.as_ref().is_some_and(|s| {
        s.phase == Some(Phase::Failed)
            && s.conditions.iter().any(|c| c.type_ == "Failed" && c.message.as_deref() == Some(message))
    });
    if !unchanged {
        write_status(ctx, job, &status).await?;
        if job.status.as_ref().and_then(|s| s.phase) != Some(Phase::Failed) {
            ctx.metrics.phase_transition(Phase::Failed);
        }
        publish_on(ctx, job, EventType::Warning, reason, "Validate", Some(message.to_owned()));
    }
    Ok(())
}

#[cfg(test)]
#[path = "pass_tests.rs"]
mod tests;
