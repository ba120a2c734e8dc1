//! `kubectl di logs`: a replica's logs, named by role (or task) and index rather than by pod.

use std::io::Write;

use anyhow::{anyhow, bail};
use di_api::contract::{Role, names};
use futures::{AsyncBufReadExt, TryStreamExt};
use kube::api::LogParams;

use crate::cli::LogsArgs;
use crate::ctx::{Ctx, explain};

/// The pod of a role and index: `<job>-coordinator`, `<job>-<role>-<i>`.
pub fn pod_name(job: &str, role: &str, replica: Option<u32>) -> anyhow::Result<String> {
    let role = Role::from_label(role).ok_or_else(|| {
        anyhow!("unknown role {role:?}: use coordinator, collector, learner, aggregator or ddp-learner")
    })?;
    match (role, replica) {
        (Role::Coordinator, _) => Ok(names::coordinator(job)),
        (Role::DdpLearner, _) => bail!("name a DDP learner's pod with kubectl logs <job>-ddp-learner-<i>-<k>"),
        (role, Some(i)) => Ok(names::replica(job, role, i)),
        (role, None) => bail!("--replica is required for a {role}"),
    }
}

pub async fn logs(ctx: &Ctx, args: &LogsArgs) -> anyhow::Result<()> {
    let pod = match &args.task {
        Some(task) => di_api::tasks::pod_name(&args.name, task, args.replica.unwrap_or(0)),
        None => pod_name(&args.name, &args.role, args.replica)?,
    };
    let params = LogParams { follow: args.follow, container: Some(args.container.clone()), ..Default::default() };
    let mut lines = ctx
        .pods()
        .log_stream(&pod, &params)
        .await
        .map_err(|e| explain(e, &format!("reading the logs of {pod}")))?
        .lines();
    let mut stdout = std::io::stdout();
    while let Some(line) = lines.try_next().await? {
        writeln!(stdout, "{line}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_names_of_roles() {
        assert_eq!(pod_name("j", "coordinator", None).unwrap(), "j-coordinator");
        assert_eq!(pod_name("j", "collector", Some(2)).unwrap(), "j-collector-2");
        assert!(pod_name("j", "collector", None).unwrap_err().to_string().contains("--replica is required"));
        assert!(pod_name("j", "actor", Some(0)).unwrap_err().to_string().contains("unknown role \"actor\""));
    }
}
