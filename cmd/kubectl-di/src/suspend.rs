//! `kubectl di suspend` and `resume`: the job's `spec.suspend`; the reconciler deletes the pods
//! of a suspended job and brings them back when it resumes.

use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::ctx::{Ctx, explain};

pub async fn suspend(ctx: &Ctx, name: &str, suspend: bool) -> anyhow::Result<()> {
    let patch = json!({"spec": {"suspend": suspend}});
    ctx.jobs()
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| explain(e, &format!("updating DIJob {name}")))?;
    println!("dijob.diengine.opendilab.org/{name} {}", if suspend { "suspended" } else { "resumed" });
    Ok(())
}
