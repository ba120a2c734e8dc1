//! What a pass writes on its job's status: the status it computed, when it changed and is due
//! (`pace`), on the condition that the stored job is still the one it was computed from; and the
//! events a change brings (of phase, of waiting for capacity, of standing in a queue).

use std::sync::Arc;
use std::time::Duration;

use di_api::{DIJob, DIJobStatus, Phase};
use di_client::is_status;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use crate::context::{Context, MANAGER, publish_on};
use crate::error::Error;
use crate::pace::{self, Write};
use crate::status;

/// Writes the status if it changed and is due (see `pace`), with an event when the phase changed;
/// otherwise says when it will be due.
pub(crate) async fn record_status(
    ctx: &Arc<Context>,
    job: &DIJob,
    status: &DIJobStatus,
) -> Result<Option<Duration>, Error> {
    let uid = job.uid().unwrap_or_default();
    match pace::decide(job.status.as_ref(), status, ctx.pacer.since_last(&uid), ctx.pacer.period) {
        Write::Unchanged => return Ok(None),
        Write::After(due) => return Ok(Some(due)),
        Write::Progress => {
            if let Err(due) = ctx.pacer.take_budget(&uid) {
                return Ok(Some(due));
            }
        }
        Write::Now => {}
    }
    write_status(ctx, job, status).await?;
    ctx.pacer.wrote(&uid);
    crate::milestones::observe(&ctx.metrics, job, status, k8s_openapi::jiff::Timestamp::now());
    let previous = job.status.as_ref().and_then(|s| s.phase);
    if status.phase != previous
        && let Some(phase) = status.phase
    {
        ctx.metrics.phase_transition(phase);
        let kind = if phase == Phase::Failed { EventType::Warning } else { EventType::Normal };
        let note = status.conditions.iter().rev().find(|c| c.status == "True").and_then(|c| c.message.clone());
        publish_on(ctx, job, kind, &format!("Job{phase:?}"), "Reconcile", note);
    }
    let waiting = |s: Option<&DIJobStatus>| {
        s.and_then(|s| s.conditions.iter().find(|c| c.type_ == status::WAITING_FOR_CAPACITY && c.status == "True"))
            .and_then(|c| c.message.clone())
    };
    if let (Some(why), None) = (waiting(Some(status)), waiting(job.status.as_ref())) {
        publish_on(ctx, job, EventType::Warning, "WaitingForCapacity", "Schedule", Some(why));
    }
    queue_event(ctx, job, status);
    Ok(None)
}

/// An event each time the job's standing in its queue changes: queued (Normal `Queued`),
/// admitted (Normal `Admitted`), evicted or without Kueue (Warning `Evicted`, `NoKueue`), with
/// the condition's words.
fn queue_event(ctx: &Arc<Context>, job: &DIJob, status: &DIJobStatus) {
    let reason_of = |s: Option<&DIJobStatus>| {
        s.and_then(|s| s.conditions.iter().find(|c| c.type_ == status::QUEUED))
            .map(|c| (c.reason.clone(), c.message.clone()))
    };
    let (Some((Some(reason), message)), before) = (reason_of(Some(status)), reason_of(job.status.as_ref())) else {
        return;
    };
    if before.and_then(|(r, _)| r).as_deref() == Some(reason.as_str()) {
        return;
    }
    let (kind, event) = match reason.as_str() {
        "Pending" => (EventType::Normal, "Queued"),
        "Admitted" => (EventType::Normal, "Admitted"),
        other => (EventType::Warning, other),
    };
    publish_on(ctx, job, kind, event, "Queue", message);
}

/// Writes the status computed from the cached job, on the condition that the stored job is still
/// that one (its resourceVersion): a status computed from an older job never replaces a newer one.
pub(crate) async fn write_status(ctx: &Context, job: &DIJob, status: &DIJobStatus) -> Result<(), Error> {
    let api: Api<DIJob> = Api::namespaced(ctx.client.clone(), &job.namespace().unwrap_or_default());
    let patch = json!({
        "apiVersion": DIJob::api_version(&()),
        "kind": DIJob::kind(&()),
        "metadata": {"resourceVersion": job.metadata.resource_version},
        "status": status,
    });
    match api.patch_status(&job.name_any(), &PatchParams::apply(MANAGER).force(), &Patch::Apply(&patch)).await {
        Ok(_) => {}
        Err(e) if is_status(&e, 409) => return Err(Error::StaleJob),
        Err(source) => return Err(Error::WriteStatus { source }),
    }
    ctx.metrics.status_writes.inc();
    Ok(())
}
