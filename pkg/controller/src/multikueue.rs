//! A pass over a job Kueue's MultiKueue runs on a worker cluster, on the manager: its Workload
//! made and kept as `queue::multikueue` decides, a reason it cannot be said as an event (its
//! status is the worker's, which MultiKueue copies here), and nothing else touched.

use std::sync::Arc;

use di_api::DIJob;
use di_api::validation::validate_dijob;
use kube::runtime::events::EventType;

use crate::context::{Context, publish_on};
use crate::decision::Action;
use crate::dispatch::Requeue;
use crate::error::Error;
use crate::execute::execute;
use crate::members::{Members, aggregator_config, confirm_current};
use crate::queue::multikueue::dispatch;

/// The one reason of what a dispatched job says here, the message saying why.
const NOT_DISPATCHED: &str = "NotDispatched";

pub(crate) async fn pass(ctx: &Arc<Context>, job: &DIJob) -> Result<Requeue, Error> {
    let mut job = job.clone();
    di_api::defaults::default_dijob(&mut job);
    if let Err(errors) = validate_dijob(&job) {
        let note = format!("the job is invalid, and is not dispatched: {errors}");
        publish_on(ctx, &job, EventType::Warning, NOT_DISPATCHED, "Dispatch", Some(note));
        return Ok(Requeue::await_change());
    }
    // No pod or Service of its own here.
    let members = Members::default();
    let (config, missing) = aggregator_config(ctx, &job);
    let mut world = members.world();
    (world.aggregator_config, world.missing_aggregator_config) = (config.as_ref(), missing);
    world.queue = crate::workloads::queue_of(ctx, &job);
    let dispatched = match dispatch(&job, &world, &ctx.settings) {
        Ok(dispatched) => dispatched,
        Err(e) => {
            let note = format!("the job's Workload cannot be made, and the job is not dispatched: {e}");
            publish_on(ctx, &job, EventType::Warning, NOT_DISPATCHED, "Dispatch", Some(note));
            return Ok(Requeue::await_change());
        }
    };
    if let Some(note) = dispatched.note {
        publish_on(ctx, &job, EventType::Warning, NOT_DISPATCHED, "Dispatch", Some(note));
    }
    // A Workload made again (Kueue may have dropped a finished one), or made inactive (which
    // has MultiKueue take the job from its worker), only on the job as stored: the cache may not
    // show its last status or resume yet.
    let drastic = |a: &Action| matches!(a, Action::CreateWorkload(_) | Action::SetWorkloadActive { active: false, .. });
    if dispatched.actions.iter().any(drastic) {
        confirm_current(ctx, &job).await?;
    }
    execute(ctx, &job, &dispatched.actions).await?;
    Ok(dispatched.requeue_after.map_or_else(Requeue::await_change, Requeue::after))
}
