//! The orchestrator killed while a job starts, and again once it runs: the job's pods are created
//! once each, and its phase never goes back. Alone in its own test binary: on kind the kill takes
//! the deployed orchestrator, and with it the webhook every other scenario's writes need, away.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use di_api::{DIJob, Phase};
use di_e2e::cluster::within;
use di_e2e::history::{created_once, pod_uids};
use di_e2e::scenario::{Scenario, WAIT, names};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::runtime::wait::await_condition;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use serde_json::json;

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn an_orchestrator_killed_mid_job_restarts_without_duplicates() {
    let mut s = Scenario::new("crash").await;
    let created = pod_uids(&s.pods).await;
    s.submit("sturdy", 5, 2, json!({})).await;
    // Kill it while it is still creating pods.
    let mut pods =
        std::pin::pin!(watcher(s.pods.clone(), watcher::Config::default()).default_backoff().applied_objects());
    within(WAIT, "the first pods", async {
        let mut names = BTreeSet::new();
        while names.len() < 2 {
            match pods.next().await {
                Some(Ok(pod)) => names.insert(pod.name_any()),
                Some(Err(_)) => continue,
                None => panic!("the pod watch ended"),
            };
        }
    })
    .await;
    s.orchestrator.kill().await;
    s.orchestrator.restart().await;
    let expected = names(
        "sturdy",
        &[
            "coordinator",
            "collector-0",
            "collector-1",
            "collector-2",
            "collector-3",
            "collector-4",
            "learner-0",
            "learner-1",
        ],
    );
    let before = s.wait_pods("sturdy", &expected).await;
    s.wait_phase("sturdy", Phase::Running).await;
    created_once(&created, &before, &expected, "after a restart mid-creation");
    // Every phase the job shows from now on: a restart must not set it back to Created.
    let phases = phase_history(&s.jobs, "sturdy");

    // Once more, after everything exists: nothing is created or replaced.
    s.orchestrator.kill().await;
    s.orchestrator.restart().await;
    // A spec change that asks for nothing (a TTL counts once the job has finished) moves the
    // generation: once the status observes it, the new process has made a whole pass.
    let ttl = json!({"spec": {"ttlSecondsAfterFinished": 3600}});
    let generation =
        s.jobs.patch("sturdy", &PatchParams::default(), &Patch::Merge(&ttl)).await.unwrap().metadata.generation;
    let observed = move |job: Option<&DIJob>| {
        job.and_then(|j| j.status.as_ref()).is_some_and(|s| s.observed_generation == generation)
    };
    within(WAIT, "a pass of the restarted orchestrator", await_condition(s.jobs.clone(), "sturdy", observed))
        .await
        .unwrap();
    let after = s.wait_pods("sturdy", &expected).await;
    let uids = |pods: &[Pod]| {
        let mut u: Vec<_> = pods.iter().map(|p| (p.name_any(), p.uid().unwrap())).collect();
        u.sort();
        u
    };
    assert_eq!(uids(&before), uids(&after), "a restarted orchestrator recreates nothing");
    created_once(&created, &after, &expected, "after a restart of a running job");
    let seen = phases.lock().unwrap().clone();
    assert!(seen.iter().all(|p| *p == Some(Phase::Running)), "the phase went back after a restart: {seen:?}");
}

/// Records every phase job `name` shows, from a watch, until the test ends.
fn phase_history(jobs: &Api<DIJob>, name: &str) -> Arc<Mutex<Vec<Option<Phase>>>> {
    let seen = Arc::<Mutex<Vec<Option<Phase>>>>::default();
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let events = watcher(jobs.clone(), config);
    let record = seen.clone();
    tokio::spawn(events.applied_objects().for_each(move |job| {
        if let Ok(job) = job {
            record.lock().unwrap().push(job.status.and_then(|s| s.phase));
        }
        std::future::ready(())
    }));
    seen
}
