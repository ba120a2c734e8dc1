//! `kubectl di delete`: deletes a job, and with it everything it owns; `--wait` returns when
//! the job and its pods are gone (see `gone`).

use std::time::Duration;

use kube::ResourceExt;
use kube::api::DeleteParams;

use crate::ctx::{Ctx, explain};
use crate::gone;

pub async fn delete(ctx: &Ctx, name: &str, wait: bool, timeout: u64) -> anyhow::Result<()> {
    // Read first: --wait follows this incarnation, by its UID.
    let job = ctx.job(name).await?;
    ctx.jobs()
        .delete(name, &DeleteParams::background())
        .await
        .map_err(|e| explain(e, &format!("deleting DIJob {name}")))?;
    println!("dijob.diengine.opendilab.org/{name} deleted");
    if wait {
        let uid = job.uid().unwrap_or_default();
        gone::until_gone(&ctx.jobs(), &ctx.pods(), name, &uid, Duration::from_secs(timeout)).await?;
    }
    Ok(())
}
