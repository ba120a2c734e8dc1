//! What an admitted job gives back to its queue and what it may ask of it: collectors scaled
//! away free their quota for the next job and cannot be taken back; a suspended job frees its
//! place and queues again when resumed; its coordinator is refused a scale-up past its admission;
//! and Kueue installed after the orchestrator is used once the orchestrator has started again
//! (`di_e2e::kueue`). That a running job's queue cannot change is the webhook's (`webhook.rs`).

use di_api::{DIJob, Phase};
use di_e2e::cluster::{TestCluster, until_watched, within};
use di_e2e::kueue::jobs::{queued, submit};
use di_e2e::kueue::{self, Share, TestQueue};
use di_e2e::orchestrator::{Orchestrator, Sidecar};
use di_e2e::scenario::{Scenario, WAIT};
use kube::api::{DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::wait::await_condition;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

/// Waits until job `name`'s `Queued` condition is `status` with a message that contains `words`.
async fn until_queued(s: &Scenario, name: &str, status: &str, words: &str) -> DIJob {
    let what = format!("job {name} Queued={status} saying {words:?}");
    let said = |job: Option<&DIJob>| {
        job.and_then(queued).is_some_and(|c| c.status == status && c.message.as_deref().unwrap_or("").contains(words))
    };
    let job = within(WAIT, &what, await_condition(s.jobs.clone(), name, said)).await.unwrap();
    job.expect("the job")
}

/// The Workload job `name` owns.
async fn workload_of(s: &Scenario, name: &str) -> DynamicObject {
    let api: Api<DynamicObject> =
        Api::namespaced_with(s.cluster.client.clone(), &s.ns, &kueue::resource("Workload", "workloads"));
    let all = api.list(&ListParams::default()).await.unwrap().items;
    all.into_iter().find(|w| w.owner_references().iter().any(|o| o.name == name)).expect("the job's Workload")
}

async fn scale(s: &Scenario, name: &str, collectors: i32) {
    let patch = json!({"spec": {"collector": {"replicas": collectors}}});
    s.jobs.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
}

async fn suspend(s: &Scenario, name: &str, suspended: bool) {
    let patch = json!({"spec": {"suspend": suspended}});
    s.jobs.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn collectors_scaled_away_give_their_quota_to_the_next_job_and_cannot_take_it_back() {
    let Some((kueue, cluster)) = kueue::with_kueue(Share::Beside).await else { return };
    let s = Box::pin(Scenario::on(cluster, "reclaim", &[])).await;
    // Room for `big` (60m + 2 x 50m) but not `small` (60m + 50m) beside it.
    let queue =
        TestQueue::create(&s.cluster.client, &s.ns, "team-queue", &[("cpu", "220m"), ("memory", "100Gi")]).await;
    submit(&s, "big", "team-queue", 2, None).await;
    s.wait_phase("big", Phase::Running).await;
    submit(&s, "small", "team-queue", 1, None).await;
    until_queued(&s, "small", "True", "team-queue").await;

    // Its collectors scaled away: their quota goes back, and `small` is admitted with it.
    scale(&s, "big", 0).await;
    s.wait_phase("small", Phase::Running).await;
    let given = workload_of(&s, "big").await.data["status"]["reclaimablePods"].clone();
    assert_eq!(given, json!([{"name": "collector", "count": 2}]));

    // Asked for again, the room is gone: no collector is made, and the job says why.
    scale(&s, "big", 1).await;
    until_queued(&s, "big", "False", "beyond what Kueue admitted").await;
    let params = ListParams::default().labels(&format!("{}=big", di_api::contract::labels::JOB_NAME));
    // On real nodes the collectors scaled away may still be stopping (their grace period): none
    // may be a new one.
    let pods = s.pods.list(&params).await.unwrap().items;
    let live: Vec<_> = pods.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).map(|p| p.name_any()).collect();
    assert_eq!(live, ["big-coordinator"], "the coordinator alone");
    drop(s);
    queue.delete().await;
    kueue.stop().await;
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn a_suspended_job_gives_its_place_to_the_next_and_queues_again_when_resumed() {
    let Some((kueue, cluster)) = kueue::with_kueue(Share::Beside).await else { return };
    let s = Box::pin(Scenario::on(cluster, "suspend", &[])).await;
    let queue =
        TestQueue::create(&s.cluster.client, &s.ns, "team-queue", &[("cpu", "150m"), ("memory", "100Gi")]).await;
    submit(&s, "first", "team-queue", 1, None).await;
    s.wait_phase("first", Phase::Running).await;
    submit(&s, "second", "team-queue", 1, None).await;
    until_queued(&s, "second", "True", "team-queue").await;

    suspend(&s, "first", true).await;
    s.wait_phase("second", Phase::Running).await;
    assert_eq!(workload_of(&s, "first").await.data["spec"]["active"], json!(false), "made inactive");

    // Resumed while `second` runs: its Workload active again, it waits its turn, with no pod.
    suspend(&s, "first", false).await;
    let workloads: Api<DynamicObject> =
        Api::namespaced_with(s.cluster.client.clone(), &s.ns, &kueue::resource("Workload", "workloads"));
    let kind = kueue::resource("Workload", "workloads");
    until_watched(workloads, watcher::Config::default(), kind, WAIT, "first's Workload active again", |all| {
        let first = all.iter().find(|w| w.owner_references().iter().any(|o| o.name == "first"))?;
        (first.data["spec"]["active"] == json!(true)).then_some(())
    })
    .await;
    until_queued(&s, "first", "True", "team-queue").await;
    let params = ListParams::default().labels(&format!("{}=first", di_api::contract::labels::JOB_NAME));
    // On real nodes the pods its suspension deleted may still be stopping (their grace period):
    // none may be a new one.
    let pods = s.pods.list(&params).await.unwrap().items;
    assert!(pods.iter().all(|p| p.metadata.deletion_timestamp.is_some()), "a pod made while queued: {pods:?}");
    // Its turn comes when `second` ends.
    s.nodes.exit(&s.ns, "second-coordinator", 0).await;
    s.wait_phase("second", Phase::Succeeded).await;
    s.wait_phase("first", Phase::Running).await;
    drop(s);
    queue.delete().await;
    kueue.stop().await;
}

/// A request to the replica endpoint: its HTTP status and envelope.
async fn call(url: &str, body: Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(url)
        .body(serde_json::to_vec(&body).unwrap())
        .send()
        .await
        .expect("the endpoint answers");
    (response.status().as_u16(), response.json().await.expect("an envelope"))
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn a_coordinator_is_refused_more_collectors_than_its_admission_and_nothing_changes() {
    let Some((kueue, cluster)) = kueue::with_kueue(Share::Beside).await else { return };
    let s = Box::pin(Scenario::on(cluster, "endpoint-quota", &[])).await;
    let queue =
        TestQueue::create(&s.cluster.client, &s.ns, "team-queue", &[("cpu", "150m"), ("memory", "100Gi")]).await;
    submit(&s, "elastic", "team-queue", 1, None).await;
    s.wait_phase("elastic", Phase::Running).await;
    let sidecar = Sidecar::start(&s.cluster, &s.ns, "elastic").await;
    let url = format!("{}/v1alpha1/replicas", sidecar.url);
    let body = json!({"namespace": s.ns, "coordinator": "elastic-coordinator", "collectors": {"replicas": 1}});
    sidecar.until_ready().await;
    let (status, reply) = call(&url, body.clone()).await;
    assert_eq!(status, 409, "{reply}\n{}", sidecar.log());
    let message = reply["message"].as_str().unwrap_or_default();
    assert!(message.contains("team-queue") && message.contains("1 collector pod(s)"), "{message}");
    assert_eq!(s.jobs.get("elastic").await.unwrap().spec.collector_replicas(), 1, "nothing changed");
    drop(s);
    queue.delete().await;
    kueue.stop().await;
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn kueue_installed_after_the_orchestrator_is_used_once_it_has_started_again() {
    let Some((mut kueue, cluster)) = kueue::before_kueue().await else { return };
    let recheck = ["--queues-recheck-seconds=1"];
    let same = TestCluster { client: cluster.client.clone(), kubeconfig: cluster.kubeconfig.clone() };
    let mut s = Box::pin(Scenario::on(same, "kueue-later", &recheck)).await;
    submit(&s, "early", "team-queue", 1, None).await;
    let held = until_queued(&s, "early", "True", "install Kueue").await;
    assert_eq!(queued(&held).unwrap().reason.as_deref(), Some("NoKueue"));

    kueue.install(&cluster).await;
    let queue =
        TestQueue::create(&s.cluster.client, &s.ns, "team-queue", &[("cpu", "150m"), ("memory", "100Gi")]).await;
    let Orchestrator::Local(local) = &mut s.orchestrator else { unreachable!("not on kind") };
    let ended = within(WAIT, "the orchestrator to exit", local.wait()).await;
    assert!(!ended.success(), "it says why it stops: {}", local.log());
    assert!(local.log().contains("Kueue's Workloads are served now"), "{}", local.log());
    local.restart();
    s.wait_phase("early", Phase::Running).await;
    drop(s);
    queue.delete().await;
    kueue.stop().await;
}
