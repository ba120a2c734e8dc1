//! A coordinator that fails while collectors are being replaced. Of a running job of 20
//! collectors (cleanPodPolicy All), 5 fail; once the first replacement appears 5 more fail and,
//! at once, the coordinator: some collectors are replaced by then, some wait out their backoff,
//! some have just failed. The job must end Failed with nothing left, and no pod may be created
//! after its status said Failed.

use std::time::Duration;

use anyhow::Context;
use di_api::Phase;
use di_api::contract::{Role, names};
use futures::future::join_all;
use kube::ResourceExt;
use serde_json::json;

use super::Finding;
use crate::checks::{Expect, Verdict};
use crate::plane::Plane;
use crate::world::{self, World};

pub const TITLE: &str = "coordinator fails while collectors are being replaced";
pub const LOAD: &str = "1 job x 20 collectors (cleanPodPolicy All)";

const JOB: &str = "fragile";
const COLLECTORS: i32 = 20;

pub async fn run(plane: &Plane) -> anyhow::Result<Finding> {
    let world = World::new(plane, "coordinator").await?;
    let orchestrator = world.orchestrator("", &[]).await;
    // Collectors whose failures end their pods (not restarted in place): the reconciler's to replace.
    let collector = json!({"template": {"spec": {"restartPolicy": "Never"}}});
    world.submit(JOB, COLLECTORS, json!({"cleanPodPolicy": "All", "collector": collector})).await?;
    let started = world.verdict(&[Expect::running(JOB, COLLECTORS)], Duration::from_secs(90), true).await?;
    if !started.lost.is_empty() {
        anyhow::bail!("the job did not start: {}", started.lost.join("; "));
    }

    let collector = |i: u32| names::replica(JOB, Role::Collector, i);
    let before = world.monitor.created();
    fail(&world, (0..5).map(collector).collect(), 1).await;
    world.until_created(before + 1, Duration::from_secs(30)).await;
    let replaced_before = world.monitor.created() - before;
    let coordinator = names::coordinator(JOB);
    join_all([fail(&world, (5..10).map(collector).collect(), 1), fail(&world, vec![coordinator], 3)]).await;

    // The resourceVersion the job was first seen Failed at: any pod created after it was created
    // by a pass that knew the job had failed.
    let failed_at = world
        .job_view
        .until(Duration::from_secs(60), "the job to fail", |jobs| {
            let job = jobs.iter().find(|j| j.name_any() == JOB)?;
            (job.status.as_ref()?.phase == Some(Phase::Failed)).then(|| job.resource_version())
        })
        .await?
        .and_then(|v| v.parse::<u64>().ok())
        .context("the job's resourceVersion")?;
    let mut verdict = Verdict::default();
    verdict.merge(
        world
            .verdict(&[Expect::finished_clean(JOB, Phase::Failed, COLLECTORS)], Duration::from_secs(90), false)
            .await?,
    );
    let late: Vec<String> = world.monitor.read(|h| {
        h.creations.iter().filter(|c| c.revision > failed_at).map(|c| format!("{} (UID {})", c.name, c.uid)).collect()
    });
    verdict.check(format!("{} pods created after the job failed", late.len()));
    for pod in late {
        verdict.lose(format!("pod {pod} was created after the job failed"));
    }
    let replaced = world.monitor.created() - before;
    world::keep_log("coordinator", &orchestrator);
    Ok(Finding {
        load: format!(
            "{LOAD}; 10 collectors failed, the coordinator with them once {replaced_before} replacement(s) existed; {replaced} replacements in all"
        ),
        verdict,
    })
}

/// Ends the pods' main containers with `code`, all at once.
async fn fail(world: &World, pods: Vec<String>, code: i32) {
    join_all(pods.into_iter().map(|pod| async move { world.nodes.exit(&world.ns, &pod, code).await })).await;
}
