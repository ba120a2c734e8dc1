//! A control-plane process killed (SIGKILL) and started again, twice, while jobs start: once a
//! third of their pods exist and once two thirds do. The orchestrator must carry on by itself
//! (its watches back off and list again); the simulated nodes, whose watch ends at its first
//! error, are replaced after each restart, as a kubelet would reconnect.

use std::time::Duration;

use super::Finding;
use crate::checks::{Expect, Verdict};
use crate::plane::Plane;
use crate::process;
use crate::world::{self, World};

const JOBS: usize = 20;
const COLLECTORS: i32 = 20;
const RESTARTS: usize = 2;

pub const LOAD: &str = "20 jobs x 20 collectors starting";

pub async fn under_load(plane: &Plane, component: &'static str, hint: &str) -> anyhow::Result<Finding> {
    let mut world = World::new(plane, hint).await?;
    let mut orchestrator = world.orchestrator("", &[]).await;
    let names = world.submit_all(hint, JOBS, COLLECTORS).await?;
    let pods = JOBS * (COLLECTORS as usize + 1);
    let mut outages = vec![];
    let mut at = vec![];
    for restart in 1..=RESTARTS {
        world.until_created(restart * pods / (RESTARTS + 1), Duration::from_secs(120)).await;
        at.push(world.monitor.created());
        outages.push(plane.restart(component).await?);
        world.replace_nodes();
    }
    let survived = orchestrator.pid().is_some_and(process::running);
    if !survived {
        // Its Deployment would start it again; so does this, to see whether anything is lost.
        orchestrator.restart();
    }
    let expect: Vec<Expect> = names.iter().map(|n| Expect::running(n, COLLECTORS)).collect();
    // After an outage the orchestrator can be slow to see the world again: its watches back off
    // up to 30 s a try (with jitter) until two minutes pass without an error, and a job whose
    // passes kept failing waits out a retry backoff of up to 300 s. The checks wait past that.
    let judged = world.verdict(&expect, Duration::from_secs(360), true).await?;
    let mut verdict = Verdict::default();
    if survived {
        verdict.check("the orchestrator kept running");
    } else {
        verdict.lose("the orchestrator exited in an outage (started again to finish the run)");
    }
    for other in ["etcd", "kube-apiserver", "kube-controller-manager"] {
        if !plane.running(other) {
            verdict.lose(format!("{other} is not running after the restarts"));
        }
    }
    verdict.merge(judged);
    world::keep_log(hint, &orchestrator);
    let outages: Vec<String> = outages
        .iter()
        .map(|r| match r.starts {
            1 => format!("{:.1} s", r.down.as_secs_f64()),
            n => format!("{:.1} s (its port taken: started {n} times)", r.down.as_secs_f64()),
        })
        .collect();
    let at: Vec<String> = at.iter().map(|n| format!("{n}/{pods}")).collect();
    Ok(Finding {
        load: format!(
            "{LOAD} ({pods} pods); {component} killed and started again {RESTARTS} times, with {} pods created, down {} until ready",
            at.join(" and "),
            outages.join(" and ")
        ),
        verdict,
    })
}
