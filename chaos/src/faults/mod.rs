//! The faults, one module each, run one after another on one control plane, each in a namespace
//! and with orchestrators of its own. The restarts of the API server and etcd come last: they
//! shake everything on the plane.

mod apiserver;
mod coordinator;
mod etcd;
mod kill9;
mod leader;
mod replicas;
mod restart;
mod resubmit;
mod webhook;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::checks::Verdict;
use crate::plane::Plane;
use crate::report::{Outcome, Row};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Fault {
    /// kill -9 of the orchestrator, again and again, while jobs start.
    Kill9,
    /// kill -9 of the orchestrator, again and again, while one job of 500 collectors starts.
    Kill9Big,
    /// Concurrent scale requests to one replica endpoint, some clients hanging up.
    Replicas,
    /// A job submitted again under its name while its predecessor's pods are collected.
    Resubmit,
    /// A coordinator that fails while collectors are being replaced.
    Coordinator,
    /// Two orchestrators with leader election, the leader frozen past its lease.
    Leader,
    /// The leader's webhook flooded by slow and oversized clients.
    Webhook,
    /// The API server killed and started again while jobs start.
    Apiserver,
    /// etcd killed and started again while jobs start.
    Etcd,
}

/// What a fault found: the load it ran under, and the verdict.
pub struct Finding {
    pub load: String,
    pub verdict: Verdict,
}

type Running = Pin<Box<dyn Future<Output = anyhow::Result<Finding>> + Send>>;

impl Fault {
    const ALL: [Fault; 9] = [
        Fault::Kill9,
        Fault::Kill9Big,
        Fault::Replicas,
        Fault::Resubmit,
        Fault::Coordinator,
        Fault::Leader,
        Fault::Webhook,
        Fault::Apiserver,
        Fault::Etcd,
    ];

    fn title(self) -> &'static str {
        match self {
            Fault::Kill9 => kill9::MANY.title,
            Fault::Kill9Big => kill9::BIG.title,
            Fault::Replicas => replicas::TITLE,
            Fault::Resubmit => resubmit::TITLE,
            Fault::Coordinator => coordinator::TITLE,
            Fault::Leader => leader::TITLE,
            Fault::Webhook => webhook::TITLE,
            Fault::Apiserver => apiserver::TITLE,
            Fault::Etcd => etcd::TITLE,
        }
    }

    /// The load it is to run under, for a row that has no finding to tell it.
    fn load(self) -> &'static str {
        match self {
            Fault::Kill9 => kill9::MANY.load,
            Fault::Kill9Big => kill9::BIG.load,
            Fault::Replicas => replicas::LOAD,
            Fault::Resubmit => resubmit::LOAD,
            Fault::Coordinator => coordinator::LOAD,
            Fault::Leader => leader::LOAD,
            Fault::Webhook => webhook::LOAD,
            Fault::Apiserver | Fault::Etcd => restart::LOAD,
        }
    }

    /// The longest a fault may take, setup and checks included, before it is called an error.
    fn limit(self) -> Duration {
        Duration::from_secs(match self {
            Fault::Resubmit | Fault::Apiserver | Fault::Etcd => 600,
            // Setup, 5 s calm, 30 s of flood.
            Fault::Webhook => 180,
            _ => 420,
        })
    }

    fn start(self, plane: Arc<Plane>) -> Running {
        match self {
            Fault::Kill9 => Box::pin(async move { kill9::run(&plane, &kill9::MANY).await }),
            Fault::Kill9Big => Box::pin(async move { kill9::run(&plane, &kill9::BIG).await }),
            Fault::Replicas => Box::pin(async move { replicas::run(&plane).await }),
            Fault::Resubmit => Box::pin(async move { resubmit::run(&plane).await }),
            Fault::Coordinator => Box::pin(async move { coordinator::run(&plane).await }),
            Fault::Leader => Box::pin(async move { leader::run(&plane).await }),
            Fault::Webhook => Box::pin(async move { webhook::run(&plane).await }),
            Fault::Apiserver => Box::pin(async move { apiserver::run(&plane).await }),
            Fault::Etcd => Box::pin(async move { etcd::run(&plane).await }),
        }
    }
}

/// Runs the faults asked for (every one when none is), and gives a row for each.
pub async fn run(only: &[Fault]) -> Vec<Row> {
    let faults: Vec<Fault> = Fault::ALL.into_iter().filter(|f| only.is_empty() || only.contains(f)).collect();
    let unrun = |result: &dyn Fn() -> Outcome| -> Vec<Row> {
        let row = |f: &Fault| Row {
            fault: f.title().into(),
            load: f.load().into(),
            checks: vec![],
            lost: vec![],
            result: result(),
            took: Duration::ZERO,
        };
        faults.iter().map(row).collect()
    };
    let plane = match Plane::start().await {
        Ok(Ok(plane)) => Arc::new(plane),
        Ok(Err(why)) => {
            eprintln!("SKIPPED: every fault needs the local control plane: {why}");
            return unrun(&|| Outcome::Skipped(format!("no local control plane: {why}")));
        }
        Err(e) => return unrun(&|| Outcome::Error(format!("starting the control plane: {e:#}"))),
    };
    let mut rows = vec![];
    for fault in faults {
        eprintln!("chaos: {}...", fault.title());
        let row = one(fault, plane.clone()).await;
        let lost = if row.lost.is_empty() { "nothing lost".to_string() } else { row.lost.join("\n  ") };
        eprintln!("chaos: {} done in {:.0} s: {lost}", fault.title(), row.took.as_secs_f64());
        rows.push(row);
    }
    match Arc::try_unwrap(plane) {
        Ok(plane) => plane.stop().await,
        // A fault's task still holds it: its processes die with ours.
        Err(_) => eprintln!("chaos: the control plane is still in use; it stops when this program exits"),
    }
    rows
}

/// One fault in a task of its own, so that a panic in the harness or a fault that hangs ends
/// its row, not the run.
async fn one(fault: Fault, plane: Arc<Plane>) -> Row {
    let started = Instant::now();
    let mut task = tokio::spawn(fault.start(plane));
    let outcome = match tokio::time::timeout(fault.limit(), &mut task).await {
        Ok(Ok(outcome)) => outcome.map_err(|e| format!("{e:#}")),
        Ok(Err(join)) => Err(format!("the fault's task failed: {}", panic_message(join))),
        Err(_) => {
            task.abort();
            // Its orchestrators and nodes are dropped, and killed, as it ends.
            let _ = task.await;
            Err(format!("not done within {:?}", fault.limit()))
        }
    };
    let took = started.elapsed();
    match outcome {
        Ok(Finding { load, verdict }) => {
            let result = if verdict.lost.is_empty() { Outcome::Kept } else { Outcome::Lost };
            Row { fault: fault.title().into(), load, checks: verdict.checks, lost: verdict.lost, result, took }
        }
        Err(why) => Row {
            fault: fault.title().into(),
            load: fault.load().into(),
            checks: vec![],
            lost: vec![],
            result: Outcome::Error(why),
            took,
        },
    }
}

fn panic_message(join: tokio::task::JoinError) -> String {
    match join.try_into_panic() {
        Ok(panic) => panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic".into()),
        Err(join) => join.to_string(),
    }
}
