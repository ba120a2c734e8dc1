//! Interruptible collectors under Kueue (`spec.collector.minReplicas`): two teams' ClusterQueues
//! in one cohort, on Kueue beside a control plane of the test's own or, on kind, the Kueue
//! deployed there (`di_e2e::kueue`).

use std::collections::BTreeSet;
use std::time::Duration;

use di_api::contract::kueue::QUEUE_NAME as QUEUE_LABEL;
use di_api::{DIJob, Phase};
use di_e2e::cluster::within;
use di_e2e::ding;
use di_e2e::kueue::jobs::REPLICA_CPU;
use di_e2e::kueue::{self, Cohort, Share, TestQueue};
use di_e2e::orchestrator::Sidecar;
use di_e2e::scenario::Scenario;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::{Api, ResourceExt};
use serde_json::json;

/// Team a's quota in the cohort scenarios: a job's core (a coordinator of 60m with the sidecar,
/// one collector of 50m) and no more. (The sidecar's memory request needs some memory quota too,
/// which neither team borrows.)
const TEAM_A: [(&str, &str); 2] = [("cpu", "150m"), ("memory", "100Gi")];
/// Team b's: a coordinator and two collectors (160m), and 40m to spare.
const TEAM_B: [(&str, &str); 2] = [("cpu", "200m"), ("memory", "100Gi")];

/// A role job in LocalQueue `queue`: a coordinator and `collectors` collectors of
/// [`REPLICA_CPU`] each, the first `core` of them in its core.
async fn submit(s: &Scenario, name: &str, queue: &str, collectors: i32, core: Option<i32>, class: Option<&str>) {
    submit_with(s, name, queue, json!({"replicas": collectors, "minReplicas": core}), class).await
}

/// As [`submit`], the collector role's counts given as its fields (`replicas`, `minReplicas`,
/// `maxReplicas`).
async fn submit_with(s: &Scenario, name: &str, queue: &str, counts: serde_json::Value, class: Option<&str>) {
    let mut container = s.nodes.container();
    container["resources"] = json!({"requests": {"cpu": REPLICA_CPU}});
    let mut pod = s.nodes.pod_spec();
    pod["containers"] = json!([container]);
    let mut collector = json!({"template": {"spec": pod}});
    for (field, count) in counts.as_object().unwrap().iter().filter(|(_, c)| !c.is_null()) {
        collector[field] = count.clone();
    }
    let mut job = json!({
        "apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJob",
        "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}},
        "spec": {"coordinator": {"template": {"spec": pod}}, "collector": collector},
    });
    if let Some(class) = class {
        job["spec"]["priorityClassName"] = json!(class);
    }
    s.jobs.create(&PostParams::default(), &serde_json::from_value(job).unwrap()).await.expect("job accepted");
}

/// In one ClusterQueue, a higher-priority job takes the collectors above a lower job's core,
/// whose Workloads are one below its priority, before any core: the lower job keeps running.
#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn a_higher_priority_job_takes_collectors_before_any_core() {
    let Some((kueue, cluster)) = kueue::with_kueue(Share::Beside).await else { return };
    let s = Box::pin(Scenario::on(cluster, "above-core", &[])).await;
    let classes: Api<PriorityClass> = Api::all(s.cluster.client.clone());
    let high = format!("{}-high", s.ns);
    let class = json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": high}, "value": 1000});
    classes.create(&PostParams::default(), &serde_json::from_value(class).unwrap()).await.unwrap();
    // 300m: the low job's core (110m) and 3 collectors above it (150m) leave 40m.
    let queue =
        TestQueue::create(&s.cluster.client, &s.ns, "team-queue", &[("cpu", "300m"), ("memory", "100Gi")]).await;
    submit(&s, "low", "team-queue", 4, Some(1), None).await;
    s.wait_phase("low", Phase::Running).await;
    s.until_running_pods("low", 5, RUNNING).await;
    let coordinator = uid(&s, "low-coordinator").await;

    // The high job needs 110m: two of the low job's collectors go, its core stays.
    submit(&s, "high", "team-queue", 1, None, Some(&high)).await;
    s.wait_phase("high", Phase::Running).await;
    s.until_running_pods("high", 2, RUNNING).await;
    let kept = s.until_running_pods("low", 3, RUNNING).await;
    assert!(kept.contains("low-coordinator") && kept.contains("low-collector-0"), "{kept:?}");
    assert_eq!(uid(&s, "low-coordinator").await, coordinator, "the core untouched");
    let low = s.jobs.get("low").await.unwrap().status.unwrap_or_default();
    assert_eq!((low.phase, low.restarts.unwrap_or(0)), (Some(Phase::Running), 0));
    drop(s);
    queue.delete().await;
    classes.delete(&high, &DeleteParams::default()).await.unwrap();
    kueue.stop().await;
}

/// How long a scenario waits for a job's pods to run.
const RUNNING: Duration = Duration::from_secs(60);

async fn uid(s: &Scenario, pod: &str) -> String {
    s.pods.get(pod).await.unwrap().uid().unwrap()
}

/// Team a's job runs its core in a's quota and grows its collectors into b's idle quota. Team b
/// submits a job: Kueue reclaims just enough of a's collectors, whose pods alone go; b runs; a
/// stays Running with its coordinator's pod, no restart counted, and says how many collectors
/// wait. Team b's job deleted, a's collectors come back without anyone asking again.
#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn collectors_borrow_idle_quota_and_give_it_back_without_the_core() {
    let Some((kueue, cluster)) = kueue::with_kueue(Share::Beside).await else { return };
    let s = Box::pin(Scenario::on(cluster, "borrow", &[])).await;
    let cohort = Cohort::create(&s.cluster.client, &s.ns, &TEAM_A, &TEAM_B).await;
    submit(&s, "lender-free", "team-a", 1, Some(1), None).await;
    s.wait_phase("lender-free", Phase::Running).await;
    s.until_running_pods("lender-free", 2, RUNNING).await;
    let coordinator = uid(&s, "lender-free-coordinator").await;
    let core_collector = uid(&s, "lender-free-collector-0").await;

    // Grown to 4 collectors: 3 above the core, 150m, borrowed from b's idle 200m.
    let grow = json!({"spec": {"collector": {"replicas": 4}}});
    s.jobs.patch("lender-free", &PatchParams::default(), &Patch::Merge(&grow)).await.unwrap();
    s.until_running_pods("lender-free", 5, RUNNING).await;

    // b comes: 160m of its own 200m, of which a borrows 110m. Two of a's collectors go.
    submit(&s, "owner", "team-b", 2, None, None).await;
    s.wait_phase("owner", Phase::Running).await;
    s.until_running_pods("owner", 3, RUNNING).await;
    let kept = s.until_running_pods("lender-free", 3, RUNNING).await;
    assert!(kept.contains("lender-free-coordinator") && kept.contains("lender-free-collector-0"), "{kept:?}");
    assert_eq!(uid(&s, "lender-free-coordinator").await, coordinator, "the coordinator's pod untouched");
    assert_eq!(uid(&s, "lender-free-collector-0").await, core_collector, "the core's collector untouched");
    let job: DIJob = s.jobs.get("lender-free").await.unwrap();
    let status = job.status.clone().unwrap_or_default();
    assert_eq!(status.phase, Some(Phase::Running));
    assert_eq!(status.restarts.unwrap_or(0), 0, "no restart counted");
    let waiting = status.conditions.iter().find(|c| c.type_ == "CollectorsQueued").expect("CollectorsQueued");
    assert_eq!((waiting.status.as_str(), waiting.reason.as_deref()), ("True", Some("Preempted")), "{waiting:?}");
    assert_eq!(job.spec.collector_replicas(), 4, "what the coordinator asked for stands");

    // b's job goes: a's collectors come back on their own.
    let owner = s.jobs.get("owner").await.unwrap().uid().unwrap();
    s.jobs.delete("owner", &DeleteParams::foreground()).await.unwrap();
    let gone = move |j: Option<&DIJob>| j.is_none_or(|j| j.uid().as_deref() != Some(owner.as_str()));
    within(Duration::from_secs(60), "b's job gone", await_condition(s.jobs.clone(), "owner", gone)).await.unwrap();
    s.until_running_pods("lender-free", 5, RUNNING).await;
    assert_eq!(uid(&s, "lender-free-coordinator").await, coordinator, "the coordinator's pod untouched");
    drop(s);
    cohort.delete().await;
    kueue.stop().await;
}

/// The orchestrator killed (`kill -9`) the moment a reclaim begins: started again, it finishes
/// it. Every collector Workload is the one made before (no Workload made twice), and no collector
/// runs whose Workload is not admitted (none on quota already given back).
#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn a_reclaim_survives_the_orchestrator_killed_in_it() {
    // Alone: on kind the kill takes the deployed orchestrator, which the other scenarios need.
    let Some((kueue, cluster)) = kueue::with_kueue(Share::Alone).await else { return };
    let mut s = Box::pin(Scenario::on(cluster, "reclaim-crash", &[])).await;
    let cohort = Cohort::create(&s.cluster.client, &s.ns, &TEAM_A, &TEAM_B).await;
    submit(&s, "lender", "team-a", 4, Some(1), None).await;
    s.wait_phase("lender", Phase::Running).await;
    s.until_running_pods("lender", 5, RUNNING).await;
    let workloads: Api<DynamicObject> =
        Api::namespaced_with(s.cluster.client.clone(), &s.ns, &kueue::resource("Workload", "workloads"));
    let before: BTreeSet<(String, String)> = workloads
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|w| (w.name_any(), w.uid().unwrap()))
        .collect();
    assert_eq!(before.len(), 4, "the core's and 3 collectors': {before:?}");

    submit(&s, "owner", "team-b", 2, None, None).await;
    s.orchestrator.kill().await;
    s.orchestrator.restart().await;
    s.wait_phase("owner", Phase::Running).await;
    s.until_running_pods("owner", 3, RUNNING).await;
    let lender_pods = s.until_running_pods("lender", 3, RUNNING).await;

    let after = workloads.list(&ListParams::default()).await.unwrap().items;
    let lender: BTreeSet<(String, String)> = after
        .iter()
        .filter(|w| w.name_any().starts_with("dijob-lender-"))
        .map(|w| (w.name_any(), w.uid().unwrap()))
        .collect();
    assert_eq!(lender, before, "each of the lender's Workloads is the one made before the kill");
    // A collector above the core (index 1 and up) and its Workload, `dijob-<job>-<uid>-collector-<i>`.
    let admitted = |index: &str| {
        let suffix = format!("-collector-{index}");
        after.iter().find(|w| w.name_any().starts_with("dijob-lender-") && w.name_any().ends_with(&suffix)).is_some_and(
            |w| {
                w.data["status"]["conditions"]
                    .as_array()
                    .is_some_and(|c| c.iter().any(|c| c["type"] == "Admitted" && c["status"] == "True"))
            },
        )
    };
    let job: DIJob = s.jobs.get("lender").await.unwrap();
    for pod in lender_pods {
        if let Some(index) = pod.strip_prefix("lender-collector-").filter(|i| *i != "0") {
            assert!(admitted(index), "{pod} runs though its Workload is not admitted");
        }
    }
    assert_eq!(job.status.and_then(|st| st.restarts).unwrap_or(0), 0, "no restart counted");
    drop(s);
    cohort.delete().await;
    kueue.stop().await;
}

/// "Up to N while there is room": team a's job asks for its core alone and up to 5 collectors.
/// Its spare-room collectors fill a's and b's idle quota; b's job takes back just what it needs
/// (the job's core untouched, nothing said to wait for quota, since none was asked for); b gone,
/// the spare room fills again.
#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn collectors_up_to_max_fill_idle_quota_and_give_it_back() {
    let Some((kueue, cluster)) = kueue::with_kueue(Share::Beside).await else { return };
    let s = Box::pin(Scenario::on(cluster, "spare-room", &[])).await;
    let cohort = Cohort::create(&s.cluster.client, &s.ns, &TEAM_A, &TEAM_B).await;
    // The core (110m) in a's 150m; 4 spare collectors (200m) in a's 40m and b's idle 200m.
    submit_with(&s, "filler", "team-a", json!({"replicas": 1, "minReplicas": 1, "maxReplicas": 5}), None).await;
    s.wait_phase("filler", Phase::Running).await;
    s.until_running_pods("filler", 6, RUNNING).await;
    let coordinator = uid(&s, "filler-coordinator").await;
    let said = |j: Option<&DIJob>| {
        let above = j.and_then(|j| j.status.as_ref()?.collectors_above_core.clone()).unwrap_or_default();
        (above.admitted, above.spare, above.waiting) == (4, 4, 0)
    };
    let status_says = await_condition(s.jobs.clone(), "filler", said);
    within(Duration::from_secs(30), "status: 4 spare collectors admitted", status_says).await.unwrap();

    // b's job (160m of its 200m) takes back what it needs: 3 of the 4 spare collectors go.
    submit(&s, "owner", "team-b", 2, None, None).await;
    s.wait_phase("owner", Phase::Running).await;
    s.until_running_pods("owner", 3, RUNNING).await;
    let kept = s.until_running_pods("filler", 3, RUNNING).await;
    assert!(kept.contains("filler-coordinator") && kept.contains("filler-collector-0"), "{kept:?}");
    assert_eq!(uid(&s, "filler-coordinator").await, coordinator, "the coordinator's pod untouched");
    let job = s.jobs.get("filler").await.unwrap();
    let status = job.status.clone().unwrap_or_default();
    assert_eq!((status.phase, status.restarts.unwrap_or(0)), (Some(Phase::Running), 0));
    let queued = status.conditions.iter().find(|c| c.type_ == "CollectorsQueued");
    assert!(queued.is_none_or(|c| c.status == "False"), "spare room is no quota asked for: {queued:?}");

    // b's job goes: the spare room fills again.
    let owner = s.jobs.get("owner").await.unwrap().uid().unwrap();
    s.jobs.delete("owner", &DeleteParams::foreground()).await.unwrap();
    let gone = move |j: Option<&DIJob>| j.is_none_or(|j| j.uid().as_deref() != Some(owner.as_str()));
    within(Duration::from_secs(60), "b's job gone", await_condition(s.jobs.clone(), "owner", gone)).await.unwrap();
    s.until_running_pods("filler", 6, RUNNING).await;
    drop(s);
    cohort.delete().await;
    kueue.stop().await;
}

/// DI-engine 0.5.3's coordinator client (its own `OperatorServer`) scales a queued job: its init
/// request for 2 more collectors succeeds at once with both URLs, though its queue has room for
/// one above the core and the other waits; its sync lists just the collectors that run; its
/// delete takes the waiting one away.
#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn ding_scales_a_queued_job_through_its_own_client() {
    let Some(python) = ding::python() else { return };
    let Some((kueue, cluster)) = kueue::with_kueue(Share::Beside).await else { return };
    let s = Box::pin(Scenario::on(cluster, "ding-queued", &[])).await;
    // 200m: the core (110m) and one collector above it (50m).
    let queue =
        TestQueue::create(&s.cluster.client, &s.ns, "team-queue", &[("cpu", "200m"), ("memory", "100Gi")]).await;
    submit(&s, "scaled", "team-queue", 1, Some(1), None).await;
    s.wait_phase("scaled", Phase::Running).await;
    s.until_running_pods("scaled", 2, RUNNING).await;
    let sidecar = Sidecar::start(&s.cluster, &s.ns, "scaled").await;
    sidecar.until_ready().await;
    let ask =
        |op: &str, count: u32| ding::operator_client(&python, &sidecar.url, &s.ns, "scaled-coordinator", op, count);
    let url = |index: u32| format!("scaled-collector-{index}.{}:22270", s.ns);

    let posted = ask("post", 2);
    assert_eq!((posted["success"].as_bool(), posted["code"].as_i64()), (Some(true), Some(0)), "{posted}");
    assert_eq!(posted["data"]["collectors"], json!([url(1), url(2)]), "{posted}");
    assert!(posted["message"].as_str().unwrap().contains("wait for their queue's quota"), "{posted}");
    s.until_running_pods("scaled", 3, RUNNING).await;
    let listed = ask("get", 0);
    assert_eq!(listed["success"], true, "{listed}");
    let mut collectors: Vec<String> = serde_json::from_value(listed["data"]["collectors"].clone()).unwrap();
    collectors.sort();
    assert_eq!(collectors, [url(0), url(1)], "the one waiting for quota is not listed");

    let deleted = ask("delete", 1);
    assert_eq!(deleted["success"], true, "{deleted}");
    let job: DIJob = s.jobs.get("scaled").await.unwrap();
    assert_eq!(job.spec.collector_replicas(), 2);
    assert_eq!(s.until_running_pods("scaled", 3, RUNNING).await.len(), 3, "the running collectors stay");
    drop(sidecar);
    drop(s);
    queue.delete().await;
    kueue.stop().await;
}

/// A job naming a WorkloadPriorityClass for its collectors: Kueue admits their Workloads, which
/// carry the class and its value, and the collectors run.
#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn collector_workloads_carry_the_class_the_job_names() {
    let Some((kueue, cluster)) = kueue::with_kueue(Share::Beside).await else { return };
    let s = Box::pin(Scenario::on(cluster, "collector-class", &[])).await;
    let classes: Api<DynamicObject> =
        Api::all_with(s.cluster.client.clone(), &kueue::resource("WorkloadPriorityClass", "workloadpriorityclasses"));
    let class = format!("{}-spare", s.ns);
    let object = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
                        "metadata": {"name": class}, "value": 50});
    classes.create(&PostParams::default(), &serde_json::from_value(object).unwrap()).await.unwrap();
    let queue =
        TestQueue::create(&s.cluster.client, &s.ns, "team-queue", &[("cpu", "300m"), ("memory", "100Gi")]).await;
    let counts = json!({"replicas": 3, "minReplicas": 1, "workloadPriorityClassName": class});
    submit_with(&s, "classy", "team-queue", counts, None).await;
    s.until_running_pods("classy", 4, RUNNING).await;
    let workloads: Api<DynamicObject> =
        Api::namespaced_with(s.cluster.client.clone(), &s.ns, &kueue::resource("Workload", "workloads"));
    let listed = workloads.list(&ListParams::default()).await.unwrap().items;
    let collectors: Vec<_> = listed.iter().filter(|w| w.name_any().contains("-collector-")).collect();
    assert_eq!(collectors.len(), 2, "{:?}", listed.iter().map(|w| w.name_any()).collect::<Vec<_>>());
    for workload in collectors {
        assert_eq!(workload.data["spec"]["priority"], 50, "{:?}", workload.data["spec"]);
        assert_eq!(workload.data["spec"]["priorityClassRef"]["name"], json!(class));
    }
    drop(s);
    queue.delete().await;
    classes.delete(&class, &DeleteParams::default()).await.unwrap();
    kueue.stop().await;
}
