//! Two orchestrators on one Lease, the leader frozen (SIGSTOP) past its lease while jobs start.
//! While it is frozen half the jobs are scaled down and half up, so that when it thaws its
//! caches are wrong both ways: it would recreate what was removed and remove what was added. It
//! must instead find its lease lost and exit without acting; the standby, leading by then,
//! carries every job to its new counts.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use di_e2e::orchestrator::LocalOrchestrator;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::Finding;
use crate::checks::{Expect, Verdict};
use crate::follow::{self, Follow};
use crate::plane::Plane;
use crate::process;
use crate::world::{self, World};

pub const TITLE: &str = "leader frozen (SIGSTOP) past its lease, standby present";
pub const LOAD: &str = "10 jobs x 10 collectors starting, scaled while the leader is frozen";

const JOBS: usize = 10;
const COLLECTORS: i32 = 10;
const LEASE: Duration = Duration::from_secs(15);
/// Room on top of what the election allows, for a loaded machine.
const SLACK: Duration = Duration::from_secs(15);

fn election(lease: &str) -> Vec<String> {
    vec![
        "--leader-elect".into(),
        "--lease-namespace=di-system".into(),
        format!("--lease-name={lease}"),
        format!("--lease-duration-seconds={}", LEASE.as_secs()),
        "--renew-deadline-seconds=10".into(),
        "--retry-period-seconds=2".into(),
    ]
}

/// Whether `who` (an orchestrator's identity, `orchestrator-<instance>`) holds the Lease `name`.
fn held_by(leases: &[Arc<Lease>], name: &str, who: &str) -> Option<()> {
    let lease = leases.iter().find(|l| l.metadata.name.as_deref() == Some(name))?;
    (lease.spec.as_ref()?.holder_identity.as_deref() == Some(who)).then_some(())
}

pub async fn run(plane: &Plane) -> anyhow::Result<Finding> {
    let world = World::new(plane, "leader").await?;
    let ns = world.ns.clone();
    let leases = Follow::start(Api::<Lease>::namespaced(world.cluster.client.clone(), "di-system"), follow::ticks());
    let args = election(&ns);
    let leader = world.orchestrator("-a", &args).await;
    leases
        .until(Duration::from_secs(60), "the first orchestrator to lead", |l| held_by(l, &ns, "orchestrator-a"))
        .await?;
    let standby = world.orchestrator("-b", &args).await;
    standing_by(&standby).await?;

    let names = world.submit_all("l", JOBS, COLLECTORS).await?;
    let pods = JOBS * (COLLECTORS as usize + 1);
    world.until_created(pods / 3, Duration::from_secs(60)).await;
    let leader_pid = leader.pid().context("the leader's process")?;
    let created_at_freeze = world.monitor.created();
    process::signal(leader_pid, "STOP")?;
    let frozen = Instant::now();
    let mut expect = vec![];
    for (i, name) in names.iter().enumerate() {
        let collectors = if i < JOBS / 2 { COLLECTORS / 2 } else { COLLECTORS * 3 / 2 };
        let patch = json!({"spec": {"collector": {"replicas": collectors}}});
        world.jobs.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        expect.push(Expect::running(name, collectors));
    }
    let took_over = leases
        .until(LEASE + SLACK, "the standby to lead", |l| held_by(l, &ns, "orchestrator-b"))
        .await
        .map(|()| frozen.elapsed());
    // The standby carries every job to its new counts before the old leader thaws, so the
    // thawed leader's caches are as wrong as they can be.
    let carried = follow::settle(&world.ticks, Duration::from_secs(120), || {
        let state = world.job_view.state();
        expect.iter().all(|e| {
            state.iter().any(|j| {
                j.metadata.name.as_deref() == Some(&e.job)
                    && j.status.as_ref().and_then(|s| s.collectors.as_deref())
                        == Some(&format!("{0}/{0}", e.collectors))
            })
        })
    })
    .await;
    let frozen_for = frozen.elapsed();
    process::signal(leader_pid, "CONT")?;
    let exited = process::until_gone(leader_pid, Duration::from_secs(60)).await;

    let mut verdict = Verdict::default();
    match &took_over {
        Ok(after) => verdict.check(format!("the standby led {:.0} s after the freeze", after.as_secs_f64())),
        Err(e) => verdict.lose(format!("the standby never led: {e:#}")),
    }
    if !carried {
        verdict.check("the standby had not carried every job out when the leader thawed");
    }
    let log = leader.log();
    match exited {
        Ok(()) if log.contains("lost leadership") => verdict.check("the thawed leader exited: lost leadership"),
        Ok(()) => verdict.lose("the thawed leader exited, but not for losing its lease"),
        Err(_) => verdict.lose("the thawed leader still runs a minute after it thawed"),
    }
    verdict.merge(world.verdict(&expect, Duration::from_secs(180), true).await?);
    world::keep_log("leader-a", &leader);
    world::keep_log("leader-b", &standby);
    Ok(Finding {
        load: format!(
            "{JOBS} jobs x {COLLECTORS} collectors starting ({created_at_freeze}/{pods} pods at the freeze), scaled to {} or {} while frozen; frozen {:.0} s (lease {} s)",
            COLLECTORS / 2,
            COLLECTORS * 3 / 2,
            frozen_for.as_secs_f64(),
            LEASE.as_secs()
        ),
        verdict,
    })
}

/// Waits until the standby has read the Lease and found the leader holding it: before that it
/// might still be the one to take it.
async fn standing_by(standby: &LocalOrchestrator) -> anyhow::Result<()> {
    const LINE: &str = "the lease is held by orchestrator-a";
    // Its log is the only sign it gives; read every 100 ms.
    tokio::time::timeout(Duration::from_secs(60), async {
        while !standby.log().contains(LINE) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .with_context(|| format!("the standby never logged \"{LINE}\""))
}
