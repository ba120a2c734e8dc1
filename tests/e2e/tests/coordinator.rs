//! A coordinator pod that goes away while its job runs (evicted, preempted, deleted) is run again
//! only as a counted restart, against `spec.restartLimit`, never silently from scratch.

use di_api::Phase;
use di_e2e::cluster::{not_applicable, within};
use di_e2e::nodes::Nodes;
use di_e2e::scenario::{Scenario, WAIT};
use kube::api::DeleteParams;
use kube::runtime::wait::await_condition;
use serde_json::json;

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn a_lost_coordinator_is_counted_and_past_the_limit_fails_the_job() {
    let s = Scenario::new("coordinator-lost").await;
    s.submit("again", 1, 0, json!({})).await;
    s.submit("limited", 1, 0, json!({"restartLimit": 0})).await;
    s.wait_phase("again", Phase::Running).await;
    s.wait_phase("limited", Phase::Running).await;
    for job in ["again", "limited"] {
        s.pods.delete(&format!("{job}-coordinator"), &DeleteParams::default()).await.unwrap();
    }

    // No limit: run again, and counted where users look.
    let counted = |job: Option<&di_api::DIJob>| {
        job.and_then(|j| j.status.as_ref()).is_some_and(|s| s.phase == Some(Phase::Running) && s.restarts == Some(1))
    };
    let again = within(WAIT, "the coordinator run again, counted", await_condition(s.jobs.clone(), "again", counted));
    assert!(again.await.is_ok(), "orchestrator log:\n{}", s.orchestrator.log());

    // restartLimit 0: the job fails, saying why, instead of starting over.
    let failed = s.wait_phase("limited", Phase::Failed).await;
    let condition = failed.status.unwrap().conditions.into_iter().find(|c| c.type_ == "Failed").unwrap();
    assert_eq!(condition.reason.as_deref(), Some("CoordinatorLost"), "{condition:?}");
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn a_coordinator_its_kubelet_evicted_is_a_counted_restart_not_the_jobs_failure() {
    let s = Scenario::new("coordinator-evicted").await;
    let Nodes::Simulated(nodes) = &s.nodes else {
        // A real kubelet evicts only under real pressure on its node.
        not_applicable("evicts as a kubelet under node pressure does; only simulated nodes can be told to");
        return;
    };
    let first = {
        s.submit("evicted", 1, 0, json!({"restartLimit": 1})).await;
        s.wait_phase("evicted", Phase::Running).await;
        s.pods.get("evicted-coordinator").await.unwrap()
    };
    nodes.evict(&s.ns, "evicted-coordinator").await;

    let counted = |job: Option<&di_api::DIJob>| {
        job.and_then(|j| j.status.as_ref()).is_some_and(|s| s.phase == Some(Phase::Running) && s.restarts == Some(1))
    };
    let again = within(WAIT, "the coordinator run again, counted", await_condition(s.jobs.clone(), "evicted", counted));
    assert!(again.await.is_ok(), "orchestrator log:\n{}", s.orchestrator.log());
    let second = s.pods.get("evicted-coordinator").await.unwrap();
    assert_ne!(second.metadata.uid, first.metadata.uid, "a new coordinator");
}
