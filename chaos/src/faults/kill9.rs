//! kill -9 of the orchestrator, again and again, while jobs start: 20 times while 20 jobs of 20
//! collectors start, and 10 times while one job of 500 does (its pods are created concurrently,
//! so a kill falls with many creates in flight). Each life is killed once it is ready and the
//! pods have grown by a share of the total since the kill before (or after a while, should it
//! create nothing), so the kills fall all through the start.

use std::time::Duration;

use di_api::Phase;

use super::Finding;
use crate::checks::Expect;
use crate::plane::Plane;
use crate::world::{self, World};

/// The jobs that start, and how often the orchestrator is killed meanwhile.
pub struct Load {
    pub title: &'static str,
    pub load: &'static str,
    jobs: usize,
    collectors: i32,
    kills: usize,
}

pub const MANY: Load = Load {
    title: "kill -9 of the orchestrator, 20 times",
    load: "20 jobs x 20 collectors starting",
    jobs: 20,
    collectors: 20,
    kills: 20,
};

pub const BIG: Load = Load {
    title: "kill -9 of the orchestrator, 10 times, during one big job's creates",
    load: "1 job x 500 collectors starting",
    jobs: 1,
    collectors: 500,
    kills: 10,
};

pub async fn run(plane: &Plane, load: &Load) -> anyhow::Result<Finding> {
    let Load { jobs, collectors, kills, .. } = *load;
    let world = World::new(plane, "kill9").await?;
    let port = di_e2e::ports::free_port()?;
    let mut orchestrator = world.orchestrator("", &[format!("--probe-addr=127.0.0.1:{port}")]).await;
    let names = world.submit_all("k", jobs, collectors).await?;
    let pods = jobs * (collectors as usize + 1);
    let (mut while_starting, mut at) = (0, vec![]);
    for kill in 1..=kills {
        world::until_ready(port, Duration::from_secs(60)).await?;
        world.until_created(kill * pods / (kills + 1), Duration::from_secs(10)).await;
        at.push(world.monitor.created());
        if world.monitor.created() < pods || !every_job_running(&world, jobs) {
            while_starting += 1;
        }
        orchestrator.kill().await;
        orchestrator.restart();
    }
    let expect: Vec<Expect> = names.iter().map(|n| Expect::running(n, collectors)).collect();
    let verdict = world.verdict(&expect, Duration::from_secs(240), true).await;
    world::keep_log("kill9", &orchestrator);
    Ok(Finding {
        load: format!(
            "{} ({pods} pods, {pods} services); {while_starting} of the {kills} kills before every job ran, with {} pods created",
            load.load,
            at.iter().map(usize::to_string).collect::<Vec<_>>().join(", ")
        ),
        verdict: verdict?,
    })
}

fn every_job_running(world: &World, jobs: usize) -> bool {
    let all = world.job_view.state();
    all.len() == jobs && all.iter().all(|j| j.status.as_ref().and_then(|s| s.phase) == Some(Phase::Running))
}
