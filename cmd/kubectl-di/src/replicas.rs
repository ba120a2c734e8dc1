//! `kubectl di replicas`: scale a job with the replica endpoint's own rules (`di_client::scale`),
//! list its replicas, and restart pods the way a coordinator reports them failed.

use std::time::Duration;

use anyhow::{anyhow, bail};
use di_api::DIJob;
use di_api::contract::{Role, names};
use di_api::pod::role_of;
use di_client::Refusal;
use di_client::failed::{mark_failed, pod_name_of};
use di_client::scale::{Affected, scale_down, scale_up};
use di_client::update::update_job;
use di_client::wait::{WaitError, until_replaced};
use di_client::wire::{ReplicaRequest, Replicas, ResourceRequest};
use kube::ResourceExt;

use crate::cli::{ReplicasCommand, ScaleArgs};
use crate::ctx::Ctx;
use crate::{follow, output};

/// How long `restart` waits for the pods to come back.
const RESTART_WAIT: Duration = Duration::from_secs(120);

pub async fn replicas(ctx: &Ctx, command: ReplicasCommand) -> anyhow::Result<()> {
    match command {
        ReplicasCommand::Add(args) => scale(ctx, &args, true).await,
        ReplicasCommand::Delete(args) => scale(ctx, &args, false).await,
        ReplicasCommand::List { name } => {
            ctx.job(&name).await?;
            let pods = ctx.job_pods(&name).await?;
            print!("{}", output::table(&["POD", "ROLE", "PHASE", "URL"], &output::replica_rows(&pods)));
            Ok(())
        }
        ReplicasCommand::Restart { name, pods, no_wait } => restart(ctx, &name, &pods, no_wait).await,
    }
}

/// Changes the job's desired counts with the replica endpoint's own rules, then follows the
/// reconciler until the job has converged.
async fn scale(ctx: &Ctx, args: &ScaleArgs, up: bool) -> anyhow::Result<()> {
    if let (Some(task), Some(count)) = (&args.task, args.count) {
        return scale_task(ctx, args, task, if up { count } else { -count }).await;
    }
    let api = ctx.jobs();
    let request = ReplicaRequest {
        namespace: ctx.namespace.clone(),
        coordinator: names::coordinator(&args.name),
        collectors: ResourceRequest { replicas: args.collectors, ..Default::default() },
        learners: ResourceRequest { replicas: args.learners, gpus: args.gpus.clone(), ..Default::default() },
    };
    let written = update_job(&api, &args.name, |job: &DIJob| -> Result<_, Refusal> {
        let change = if up { scale_up(job, &request)? } else { scale_down(job, &request)? };
        Ok((change.patch(job), change))
    })
    .await
    .map_err(|e| anyhow!("scaling DIJob {}: {e}", args.name))?;
    let change = &written.result;
    let Affected { collectors, learners, .. } = Affected::between(&written.before, &written.after);
    let affected = [collectors, learners].concat();
    let verb = if up { "added" } else { "removed" };
    println!(
        "dijob.diengine.opendilab.org/{}: collectors {}, learners {}",
        args.name, change.collectors, change.learners
    );
    for note in &change.notes {
        eprintln!("note: {note}");
    }
    if !args.no_wait {
        follow::until_running(&api, &args.name, Duration::from_secs(args.timeout)).await?;
    }
    for name in affected {
        println!("pod/{name} {verb}");
    }
    Ok(())
}

/// Moves one task of a task job; every pod of the job is rebuilt with the new peer list.
async fn scale_task(ctx: &Ctx, args: &ScaleArgs, task: &str, delta: i64) -> anyhow::Result<()> {
    let api = ctx.jobs();
    let written = update_job(&api, &args.name, |job: &DIJob| di_client::scale_task::scale_task(job, task, delta))
        .await
        .map_err(|e| anyhow!("scaling task {task} of DIJob {}: {e}", args.name))?;
    let change = &written.result;
    println!("dijob.diengine.opendilab.org/{}: task {task} {} -> {} pods", args.name, change.before, change.after);
    eprintln!(
        "note: every pod lists all its peers in DI_NODES, so all {} pods of the job are rebuilt in one step",
        change.pods
    );
    if !args.no_wait {
        follow::until_running(&api, &args.name, Duration::from_secs(args.timeout)).await?;
    }
    Ok(())
}

/// Marks the pods failed as the coordinator would report them; the reconciler replaces them.
async fn restart(ctx: &Ctx, name: &str, pods: &[String], no_wait: bool) -> anyhow::Result<()> {
    let live = ctx.job_pods(name).await?;
    let (collectors, learners): (Vec<String>, Vec<String>) = pods
        .iter()
        .map(|p| pod_name_of(p))
        .partition(|p| live.iter().any(|l| &l.name_any() == p && role_of(l) == Some(Role::Collector)));
    let report =
        Replicas { namespace: ctx.namespace.clone(), coordinator: names::coordinator(name), collectors, learners };
    let marked = mark_failed(&ctx.jobs(), name, None, &live, &report)
        .await
        .map_err(|e| anyhow!("marking pods of DIJob {name} for restart: {e}"))?
        .result;
    if !no_wait {
        match until_replaced(&ctx.pods(), &marked, RESTART_WAIT).await {
            Ok(()) => {}
            Err(WaitError::TimedOut(t)) => {
                bail!("the pods were marked for restart but not all were replaced within {}s", t.as_secs())
            }
            Err(e) => return Err(anyhow::Error::from(e).context("the pods were marked for restart; following them")),
        }
    }
    for (pod, _) in marked {
        println!("pod/{pod} restarted");
    }
    Ok(())
}
