//! kill -9 of the orchestrator, 20 times, while 20 jobs of 20 collectors start. Each life is
//! killed once it is ready and the pods have grown by a twenty-first of the total since the kill
//! before (or after a while, should it create nothing), so the kills fall all through the start.

use std::time::Duration;

use di_api::Phase;

use super::Finding;
use crate::checks::Expect;
use crate::plane::Plane;
use crate::process;
use crate::world::{self, World};

pub const TITLE: &str = "kill -9 of the orchestrator, 20 times";
pub const LOAD: &str = "20 jobs x 20 collectors starting";

const JOBS: usize = 20;
const COLLECTORS: i32 = 20;
const KILLS: usize = 20;

pub async fn run(plane: &Plane) -> anyhow::Result<Finding> {
    let world = World::new(plane, "kill9").await?;
    let port = process::free_port()?;
    let mut orchestrator = world.orchestrator("", &[format!("--probe-addr=127.0.0.1:{port}")]).await;
    let names = world.submit_all("k", JOBS, COLLECTORS).await?;
    let pods = JOBS * (COLLECTORS as usize + 1);
    let (mut while_starting, mut at) = (0, vec![]);
    for kill in 1..=KILLS {
        world::until_ready(port, Duration::from_secs(60)).await?;
        world.until_created(kill * pods / (KILLS + 1), Duration::from_secs(10)).await;
        at.push(world.monitor.created());
        if world.monitor.created() < pods || !every_job_running(&world) {
            while_starting += 1;
        }
        orchestrator.kill().await;
        orchestrator.restart();
    }
    let expect: Vec<Expect> = names.iter().map(|n| Expect::running(n, COLLECTORS)).collect();
    let verdict = world.verdict(&expect, Duration::from_secs(240), true).await;
    world::keep_log("kill9", &orchestrator);
    Ok(Finding {
        load: format!(
            "{LOAD} ({pods} pods, {pods} services); {while_starting} of the {KILLS} kills before every job ran, with {} pods created",
            at.iter().map(usize::to_string).collect::<Vec<_>>().join(", ")
        ),
        verdict: verdict?,
    })
}

fn every_job_running(world: &World) -> bool {
    let jobs = world.job_view.state();
    jobs.len() == JOBS && jobs.iter().all(|j| j.status.as_ref().and_then(|s| s.phase) == Some(Phase::Running))
}
