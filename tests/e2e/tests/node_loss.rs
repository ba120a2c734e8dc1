//! A worker lost under a running job, on kind's real nodes, its coordinator on another worker
//! (the placement and the faults: di_e2e::node_faults):
//! - the worker goes silent, its Node Ready `Unknown`, while its containers stay where they are:
//!   its kubelet stopped (the containers run on, out of the cluster's reach), its machine frozen
//!   (`docker pause`), or cut from the network. The job's collectors there leave it within a
//!   minute of the node going silent (their short tolerations of `node.kubernetes.io/unreachable`),
//!   and once their grace period is over the orchestrator lets them go (their kubelet cannot
//!   confirm they stopped), so their replacements, under the same names, run on the worker that
//!   stays. Its learner is left where it is: it runs on when the node comes back (frozen, cut
//!   off), or, once the node is tainted `out-of-service` (kubelet stopped), runs again elsewhere;
//! - a spot reclaim: the worker's machine is gone at once and its Node deleted, as a cloud's
//!   controller does. Kubernetes' pod garbage collector deletes its pods; the collectors and the
//!   learner there run again on the worker that stays, counted as no restart;
//! - a drain (`kubectl drain`) of the worker under a job that protects its core
//!   (`spec.protectCore`): the collectors are evicted and run again elsewhere at once, the
//!   learner is held by the job's budget until the drain gives up; an orchestrator replica on the
//!   drained worker goes too (its own budget lets one go at a time), and DIJobs asked for
//!   meanwhile are never refused (this scenario runs with no other fault under way: a silent
//!   worker's orchestrator replica stays in the webhook's Service for about 50 s, and admissions
//!   sent to it time out).
//!
//! Every time the coordinator runs on untouched and the job never leaves Running; then the worker
//! returns (its kubelet started, thawed, reconnected, uncordoned, or its machine started and
//! registered again). Each scenario fails a worker of its own (two run at once: the kind cluster
//! has three workers), and all share the worker that stays, Kueue's.

use std::time::Instant;

use di_e2e::admissions::Admissions;
use di_e2e::cluster::{not_applicable, until_watched, within};
use di_e2e::commands::run;
use di_e2e::node_faults::{LOSS, Placed, Share, Silence, Undo, ready};
use di_e2e::nodes::real_nodes;
use di_e2e::scenario::WAIT;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::runtime::wait::await_condition;
use kube::runtime::watcher;
use serde_json::json;

/// The taint an administrator puts on a node that will not come back (non-graceful shutdown).
const OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";

/// The lost worker goes silent in the way given: its collectors run again on the worker that stays and
/// its learner is left where it is. Returns the job and what gives the worker back.
async fn goes_silent(hint: &str, silence: Silence) -> (Placed, Vec<Undo>) {
    let placed = Placed::new(hint, Share::Beside, 2, 1, json!({})).await;
    let (lost, kept) = (placed.lost.clone(), placed.kept.clone());
    let start = Instant::now();
    let undo = silence.start(&lost).await;
    let took = placed.until_replaced(&["far-collector-0", "far-collector-1"], start).await;
    println!("{silence:?}: collectors running again on {kept} {:.0} s after {lost} went silent", took.as_secs_f64());
    let nodes: Api<Node> = Api::all(placed.s.cluster.client.clone());
    assert_eq!(ready(nodes.get(&lost).await.ok().as_ref()).as_deref(), Some("Unknown"), "the node went silent");
    // The learner is core: never forced off the silent node, it is the same pod.
    placed.stayed("far-learner-0").await;
    (placed, undo)
}

/// The silent worker comes back: the learner it kept is the same pod, ready again, and the job ran
/// on.
async fn comes_back(placed: Placed, undo: Vec<Undo>) {
    let start = Instant::now();
    drop(undo);
    placed.returned().await;
    let config = watcher::Config::default().fields("metadata.name=far-learner-0");
    let what = "far-learner-0 ready again on its node";
    until_watched(placed.s.pods.clone(), config, (), LOSS, what, |all: &[std::sync::Arc<Pod>]| {
        let conditions = all.first()?.status.as_ref()?.conditions.clone()?;
        conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True").then_some(())
    })
    .await;
    println!("{} back and its learner ready {:.0} s later", placed.lost, start.elapsed().as_secs_f64());
    placed.stayed("far-learner-0").await;
    placed.ran_on().await;
}

#[tokio::test]
#[ignore = "kind tier: run with `make e2e`"]
async fn collectors_on_a_worker_whose_kubelet_stops_run_again_on_another_and_the_job_runs_on() {
    if !real_nodes() {
        not_applicable("stops a real node's kubelet (kind tier only)");
        return;
    }
    let (placed, restart) = goes_silent("node-silent", Silence::KubeletStopped).await;
    let (lost, kept) = (placed.lost.clone(), placed.kept.clone());

    // The administrator says the node will not come back: Kubernetes lets its pods go, and the
    // learner runs again on the worker that stays.
    let kubeconfig = placed.s.cluster.kubeconfig.to_string_lossy().into_owned();
    let untaint =
        Undo::new(&["kubectl", "--kubeconfig", &kubeconfig, "taint", "nodes", &lost, &format!("{OUT_OF_SERVICE}-")]);
    let taint = format!("{OUT_OF_SERVICE}=nodeshutdown:NoExecute");
    run("kubectl", &["--kubeconfig", &kubeconfig, "taint", "nodes", &lost, &taint]).await;
    let tainted = Instant::now();
    let took = placed.until_replaced(&["far-learner-0"], tainted).await;
    println!("the learner running again on {kept} {:.0} s after {lost} was taken out of service", took.as_secs_f64());
    placed.ran_on().await;

    // The node returns to service, and its kubelet with it.
    drop(untaint);
    drop(restart);
    placed.returned().await;
}

#[tokio::test]
#[ignore = "kind tier: run with `make e2e`"]
async fn a_frozen_worker_loses_its_collectors_and_keeps_its_learner_until_it_thaws() {
    if !real_nodes() {
        not_applicable("freezes a real node (kind tier only)");
        return;
    }
    let (placed, thaw) = goes_silent("node-frozen", Silence::Paused).await;
    comes_back(placed, thaw).await;
}

#[tokio::test]
#[ignore = "kind tier: run with `make e2e`"]
async fn a_worker_cut_from_the_network_loses_its_collectors_and_keeps_its_learner_until_it_returns() {
    if !real_nodes() {
        not_applicable("cuts a real node from its network (kind tier only)");
        return;
    }
    let (placed, reconnect) = goes_silent("node-cut", Silence::CutOff).await;
    comes_back(placed, reconnect).await;
}

#[tokio::test]
#[ignore = "kind tier: run with `make e2e`"]
async fn a_spot_reclaim_takes_a_worker_and_its_collectors_and_learner_run_again_on_another() {
    if !real_nodes() {
        not_applicable("stops a real node (kind tier only)");
        return;
    }
    let placed = Placed::new("node-reclaimed", Share::Beside, 2, 1, json!({})).await;
    let lost = placed.lost.clone();
    let start = Instant::now();
    // The machine is gone at once, and the cloud's controller deletes its Node.
    let started = Undo::new(&["docker", "start", &lost]);
    run("docker", &["kill", &lost]).await;
    let nodes: Api<Node> = Api::all(placed.s.cluster.client.clone());
    nodes.delete(&lost, &Default::default()).await.unwrap();
    let took = placed.until_replaced(&["far-collector-0", "far-collector-1", "far-learner-0"], start).await;
    println!(
        "collectors and learner running again on {} {:.0} s after {lost} was reclaimed",
        placed.kept,
        took.as_secs_f64()
    );
    placed.ran_on().await;
    // The machine comes back and registers again.
    drop(started);
    placed.returned().await;
}

#[tokio::test]
#[ignore = "kind tier: run with `make e2e`"]
async fn a_drain_moves_the_collectors_and_waits_for_the_protected_learner() {
    if !real_nodes() {
        not_applicable("drains a real node (kind tier only)");
        return;
    }
    let placed = Placed::new("drained", Share::Alone, 2, 1, json!({"protectCore": true})).await;
    let (s, lost, kept) = (&placed.s, placed.lost.clone(), placed.kept.clone());
    // Evictions are judged by the budget's status, which the disruption controller writes.
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(s.cluster.client.clone(), &s.ns);
    let counted = |b: Option<&PodDisruptionBudget>| {
        b.and_then(|b| b.status.as_ref()).is_some_and(|st| st.current_healthy == Some(2))
    };
    within(WAIT, "the core's budget counted", await_condition(budgets, "far-core", counted)).await.unwrap();

    let orchestrators: Api<Pod> = Api::namespaced(s.cluster.client.clone(), "di-system");
    let listed = orchestrators.list(&Default::default()).await.unwrap().items;
    let on_lost = listed.iter().filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&lost)).count();
    let kubeconfig = s.cluster.kubeconfig.to_string_lossy().into_owned();
    let asked = Admissions::start(&s.cluster.kubeconfig, &s.ns).await;
    let uncordon = Undo::new(&["kubectl", "--kubeconfig", &kubeconfig, "uncordon", &lost]);
    let start = Instant::now();
    // As an administrator types it; given up after 20 s, as the learner's eviction never passes.
    let drain = tokio::process::Command::new("kubectl")
        .args(["--kubeconfig", &kubeconfig, "drain", &lost, "--ignore-daemonsets", "--delete-emptydir-data"])
        .args(["--timeout=20s"])
        .output();
    let (drained, took) = tokio::join!(drain, placed.until_replaced(&["far-collector-0", "far-collector-1"], start));
    println!("collectors running again on {kept} {:.1} s after the drain of {lost} began", took.as_secs_f64());
    let drained = drained.expect("kubectl drain");
    let said = String::from_utf8_lossy(&drained.stderr);
    assert!(!drained.status.success(), "the drain cannot end while the learner is held");
    assert!(said.contains("far-learner-0") && said.contains("disruption budget"), "{said}");
    placed.stayed("far-learner-0").await;
    placed.ran_on().await;

    // The orchestrator serves on: two replicas available (one evicted from the drained worker
    // runs again elsewhere), and no job asked for was refused.
    let deployments: Api<Deployment> = Api::namespaced(s.cluster.client.clone(), "di-system");
    let config = watcher::Config::default().fields("metadata.name=di-orchestrator");
    until_watched(deployments, config, (), LOSS, "the orchestrator's two replicas available", |all| {
        let status = all.first()?.status.as_ref()?;
        (status.available_replicas == Some(2) && status.updated_replicas == Some(2)).then_some(())
    })
    .await;
    let asked = asked.stop().await;
    assert!(asked.refused.is_empty(), "DIJobs refused during the drain: {:?}", asked.refused);
    assert!(asked.answered > 0, "no DIJob was asked for");
    println!(
        "{} DIJobs asked for during the drain, none refused; {on_lost} orchestrator replicas were on {lost}",
        asked.answered
    );
    drop(uncordon);
    placed.returned().await;
}
