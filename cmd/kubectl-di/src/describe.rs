//! `kubectl di describe`: a job's spec and status, its conditions, every replica with its
//! phase and URL, and its last events.

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::ListParams;

use crate::ctx::Ctx;
use crate::output;

/// How many of the job's events are shown, the latest.
const EVENTS: usize = 10;

pub async fn describe(ctx: &Ctx, name: &str) -> anyhow::Result<()> {
    let job = ctx.job(name).await?;
    let pods = ctx.job_pods(name).await?;
    let events: Api<Event> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let selector = format!("involvedObject.kind=DIJob,involvedObject.name={name}");
    // Events are a courtesy: a user who may not list them still gets the rest.
    let mut list = events.list(&ListParams::default().fields(&selector)).await.map(|l| l.items).unwrap_or_default();
    list.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0).or(e.last_timestamp.as_ref().map(|t| t.0)));
    let recent: Vec<(String, String, String)> = list
        .iter()
        .rev()
        .take(EVENTS)
        .rev()
        .map(|e| {
            (
                e.type_.clone().unwrap_or_default(),
                e.reason.clone().unwrap_or_default(),
                e.message.clone().unwrap_or_default(),
            )
        })
        .collect();
    let workers = crate::workers::workers(&ctx.client, Some(&ctx.namespace), std::slice::from_ref(&job)).await;
    print!("{}", output::describe(&job, &workers, &pods, &recent, Timestamp::now()));
    Ok(())
}
