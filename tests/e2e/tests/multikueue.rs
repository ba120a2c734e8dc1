//! Several clusters through Kueue's MultiKueue (control-plane tier): a manager and two workers,
//! each with Kueue and an orchestrator. DIJobs submitted to the manager run on whichever worker
//! has room, their status comes back to the manager, a worker that takes its room back sends its
//! job elsewhere, a job suspended on the manager leaves its worker and comes back resumed, and
//! deleting a job on the manager deletes it on its worker.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use di_api::contract::kueue::{MULTIKUEUE, ORCHESTRATOR, PREBUILT_WORKLOAD};
use di_api::contract::names;
use di_api::{DIJob, Phase};
use di_e2e::cluster::{TestCluster, until_watched};
use di_e2e::commands::output;
use di_e2e::kueue::jobs::submit_with;
use di_e2e::kueue::multikueue::{CHECK, Clusters, Member};
use di_e2e::kueue::{self, TestQueue};
use di_e2e::orchestrator::binary;
use di_e2e::ports::free_port;
use di_e2e::scenario::Scenario;
use di_e2e::webhooks::{register, until_bundled};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::json;

/// A worker's quota: one job of a coordinator (with the sidecar's 10m) and one collector, not two.
const ROOM_FOR_ONE: [(&str, &str); 2] = [("cpu", "150m"), ("memory", "100Gi")];
/// The manager's: every job of the scenario (what runs is the workers' to say).
const ROOM_FOR_ALL: [(&str, &str); 2] = [("cpu", "2"), ("memory", "100Gi")];
const WAIT: Duration = Duration::from_secs(120);

fn phase(job: &DIJob) -> Option<Phase> {
    job.status.as_ref().and_then(|s| s.phase)
}

/// What `kubectl di ARGS` prints against the scenario's cluster and namespace.
async fn kubectl_di(s: &Scenario, args: &[&str]) -> String {
    let mut command = tokio::process::Command::new(binary("kubectl-di"));
    output(command.args(args).args(["-n", &s.ns, "--kubeconfig"]).arg(&s.cluster.kubeconfig)).await
}

/// A scenario (namespace `ns`, simulated nodes, an orchestrator run with `args`) on one of the
/// clusters.
async fn scenario(member: &Member, ns: &str, args: &[&str]) -> Scenario {
    let cluster = TestCluster { client: member.cluster.client.clone(), kubeconfig: member.cluster.kubeconfig.clone() };
    cluster.namespace_named(ns.to_owned()).await;
    Box::pin(Scenario::within(cluster, ns.to_owned(), args)).await
}

/// The manager's scenario, its queue `team` (of the MultiKueue check) made before its
/// orchestrator starts, whose webhooks (registered with the manager's API server) serve once
/// they have listed the queues: a job submitted after it is given to MultiKueue.
async fn manager_scenario(member: &Member, ns: &str) -> (Scenario, TestQueue) {
    member.cluster.namespace_named(ns.to_owned()).await;
    let queue = TestQueue::checked(&member.cluster.client, ns, "team", &ROOM_FOR_ALL, CHECK).await;
    let port = free_port().unwrap();
    register(&member.cluster, &format!("https://127.0.0.1:{port}"), ns).await;
    let cluster = TestCluster { client: member.cluster.client.clone(), kubeconfig: member.cluster.kubeconfig.clone() };
    let addr = format!("--webhook-addr=127.0.0.1:{port}");
    let manager = Box::pin(Scenario::within(cluster, ns.to_owned(), &[&addr, "--webhook-hosts=127.0.0.1"])).await;
    until_bundled(&manager.cluster).await;
    (manager, queue)
}

/// The manager's jobs once `done` says so of them.
async fn until_jobs<T>(s: &Scenario, what: &str, done: impl Fn(&[Arc<DIJob>]) -> Option<T>) -> T {
    until_watched(s.jobs.clone(), watcher::Config::default(), (), WAIT, what, done).await
}

/// The Workloads of a scenario's namespace, and their kind (for a watch).
fn workload_api(s: &Scenario) -> (Api<DynamicObject>, ApiResource) {
    let kind = kueue::resource("Workload", "workloads");
    (Api::namespaced_with(s.cluster.client.clone(), &s.ns, &kind), kind)
}

/// Waits until `placed` holds of the worker cluster (`status.clusterName`) the manager's
/// Workload of `job` names.
async fn until_placed(manager: &Scenario, job: &str, what: &str, placed: impl Fn(&serde_json::Value) -> bool) {
    let (workloads, kind) = workload_api(manager);
    until_watched(workloads, watcher::Config::default(), kind, WAIT, what, |all| {
        let workload = all.iter().find(|w| w.owner_references().iter().any(|o| o.name == job))?;
        placed(&workload.data["status"]["clusterName"]).then_some(())
    })
    .await;
}

/// The worker cluster each of the manager's Workloads runs on (by its job), if one admitted it.
async fn placements(manager: &Scenario) -> BTreeMap<String, Option<String>> {
    let all = workload_api(manager).0.list(&ListParams::default()).await.unwrap().items;
    all.iter()
        .map(|w| {
            let job = w.owner_references().first().map(|o| o.name.clone()).unwrap_or_default();
            (job, w.data["status"]["clusterName"].as_str().map(str::to_owned))
        })
        .collect()
}

/// Waits until `job` runs on `worker` (named `name`) and the manager sees it there: the worker's
/// copy Running, the manager's Workload placed there, and the manager's status that copy's (its
/// coordinator's UID), not one an earlier worker wrote.
async fn until_runs_on(manager: &Scenario, (worker, name): (&Scenario, &str), job: &str) {
    let what = format!("{job} running on {name}");
    let copy = until_jobs(worker, &what, |jobs| {
        let copy = jobs.iter().find(|j| j.name_any() == job && phase(j) == Some(Phase::Running))?;
        copy.status.as_ref()?.coordinator_uid.clone()
    })
    .await;
    let what = format!("{job}'s Workload on the manager placed on {name}");
    until_placed(manager, job, &what, |placed| placed == name).await;
    let what = format!("{job}'s status from {name} on the manager");
    until_jobs(manager, &what, |jobs| {
        let seen = jobs.iter().find(|j| j.name_any() == job)?;
        let status = seen.status.as_ref()?;
        (status.coordinator_uid.as_ref() == Some(&copy) && status.phase == Some(Phase::Running)).then_some(())
    })
    .await;
}

/// Waits until the worker's copy of `job` is gone.
async fn until_gone(worker: &Scenario, job: &str) {
    let what = format!("{job}'s copy gone from the worker");
    until_jobs(worker, &what, |jobs| (!jobs.iter().any(|j| j.name_any() == job)).then_some(())).await;
}

/// Waits until `job`, evicted on `worker` (named `name`), runs there no more and the manager has
/// taken it back: its copy gone or held in the worker's queue, none of its pods left there, and
/// the manager's Workload placed elsewhere or nowhere. Whether the copy goes at once is Kueue's
/// race: MultiKueue removes it when it sees the manager's Workload without quota, but when the
/// manager's Kueue has admitted the Workload again first, the copy stays as one of the places
/// it may be admitted until a worker admits it.
async fn until_taken_back(manager: &Scenario, (worker, name): (&Scenario, &str), job: &str) {
    let what = format!("{job} held or gone on {name}");
    until_jobs(worker, &what, |jobs| {
        let copy = jobs.iter().find(|j| j.name_any() == job);
        copy.is_none_or(|c| kueue::jobs::queued(c).is_some_and(|q| q.status == "True")).then_some(())
    })
    .await;
    worker.wait_pods(job, &[]).await;
    let what = format!("{job}'s Workload on the manager no longer placed on {name}");
    until_placed(manager, job, &what, |placed| placed != name).await;
}

/// On `worker`: the one job it runs, its copy as MultiKueue made it (no managedBy, the
/// Workload's name annotated), that Workload adopted, and its pods running there.
async fn runs_there(worker: &Scenario) -> String {
    let jobs = worker.jobs.list(&ListParams::default()).await.unwrap().items;
    let running: Vec<&DIJob> = jobs.iter().filter(|j| phase(j) == Some(Phase::Running)).collect();
    let [copy] = running[..] else {
        panic!("one job running on the worker: {:?}", jobs.iter().map(|j| (j.name_any(), phase(j))).collect::<Vec<_>>())
    };
    assert_eq!(copy.spec.managed_by, None, "MultiKueue's copy runs here");
    let workload = copy.annotations().get(PREBUILT_WORKLOAD).expect("the Workload MultiKueue made").clone();
    let made = workload_api(worker).0.get(&workload).await.unwrap();
    let owner = made.owner_references().iter().find(|o| o.controller == Some(true)).expect("adopted");
    assert_eq!(owner.uid, copy.uid().unwrap(), "the copy owns the Workload MultiKueue made");
    let name = copy.name_any();
    let params = ListParams::default().labels(&format!("{}={name}", di_api::contract::labels::JOB_NAME));
    let pods = worker.pods.list(&params).await.unwrap().items;
    assert_eq!(pods.len(), 2, "its coordinator and collector run on the worker");
    name
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn multikueue_runs_each_job_on_a_worker_with_room() {
    let Some(clusters) = Clusters::start(&["worker-a", "worker-b"]).await else { return };
    let ns = format!("e2e-multikueue-{}", std::process::id());
    let (manager, _queue) = manager_scenario(&clusters.manager, &ns).await;
    let worker = |name| scenario(clusters.worker(name), &ns, &[]);
    let (a, b) = (worker("worker-a").await, worker("worker-b").await);
    let _queues = (
        TestQueue::create(&a.cluster.client, &ns, "team", &ROOM_FOR_ONE).await,
        TestQueue::create(&b.cluster.client, &ns, "team", &ROOM_FOR_ONE).await,
    );
    // Given to MultiKueue by the manager's webhook, as its queue goes through MultiKueue, or by
    // saying so.
    submit_with(&manager, "first", "team", 1, json!({})).await;
    submit_with(&manager, "second", "team", 1, json!({})).await;
    submit_with(&manager, "third", "team", 1, json!({"managedBy": MULTIKUEUE})).await;
    let stored = manager.jobs.get("first").await.unwrap();
    assert_eq!(stored.spec.managed_by.as_deref(), Some(MULTIKUEUE), "the webhook gave it to MultiKueue");
    // One that says this cluster's orchestrator runs it is never dispatched, nor run here.
    submit_with(&manager, "unmarked", "team", 1, json!({"managedBy": ORCHESTRATOR})).await;
    let held = until_jobs(&manager, "the unmarked job held, in Kueue's words", |jobs| {
        let job = jobs.iter().find(|j| j.name_any() == "unmarked")?;
        let queued = di_e2e::kueue::jobs::queued(job)
            .filter(|c| c.status == "True" && c.reason.as_deref() == Some("Evicted"))?;
        Some(queued.message.clone().unwrap_or_default())
    })
    .await;
    assert!(held.contains("Expecting .spec.managedBy"), "Kueue says what is missing: {held}");

    // Two run, one on each worker; the third waits for room. The manager runs none of them.
    let running = until_jobs(&manager, "two jobs running on the workers", |jobs| {
        let mut running: Vec<String> =
            jobs.iter().filter(|j| phase(j) == Some(Phase::Running)).map(|j| j.name_any()).collect();
        running.sort();
        (running.len() == 2).then_some(running)
    })
    .await;
    let on_a = runs_there(&a).await;
    let on_b = runs_there(&b).await;
    let mut both = vec![on_a.clone(), on_b.clone()];
    both.sort();
    assert_eq!(both, running, "the manager's view is the workers'");
    let waiting = ["first", "second", "third"].into_iter().find(|n| !running.contains(&n.to_string())).unwrap();
    assert_eq!(placements(&manager).await.get("unmarked"), Some(&None), "never dispatched");
    let placed = placements(&manager).await;
    assert_eq!(placed.get(&on_a), Some(&Some("worker-a".to_owned())));
    assert_eq!(placed.get(&on_b), Some(&Some("worker-b".to_owned())));
    assert_eq!(placed.get(waiting), Some(&None), "{waiting} waits for a worker: {placed:?}");
    assert!(manager.pods.list(&ListParams::default()).await.unwrap().items.is_empty(), "no pod on the manager");
    assert!(manager.services.list(&ListParams::default()).await.unwrap().items.is_empty(), "no Service there");
    let shown = kubectl_di(&manager, &["get"]).await;
    for (job, shows) in [
        (&on_a, "Running (on worker-a)"),
        (&on_b, "Running (on worker-b)"),
        (&waiting.to_string(), "Pending (dispatching)"),
    ] {
        let line = shown.lines().find(|l| l.starts_with(job.as_str())).unwrap_or_else(|| panic!("{job} in {shown}"));
        assert!(line.contains(shows), "kubectl di get on the manager: {line}");
    }
    let described = kubectl_di(&manager, &["describe", &on_a]).await;
    assert!(described.contains("by MultiKueue to worker cluster worker-a"), "{described}");
    until_jobs(&manager, "the worker's ready pods on the manager", |jobs| {
        let copied = jobs.iter().find(|j| j.name_any() == on_a)?;
        (copied.status.as_ref()?.ready_replicas == Some(2)).then_some(())
    })
    .await;

    // Its spec is the worker copy's to change; the manager's webhook says so.
    let scale = json!({"spec": {"collector": {"replicas": 3}}});
    let refused = manager.jobs.patch(&on_a, &PatchParams::default(), &Patch::Merge(&scale)).await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.message.contains("worker cluster")),
        "a dispatched job's spec changed on the manager: {refused:?}"
    );

    // The job on worker-a ends: its end reaches the manager, and the waiting job runs there.
    a.nodes.exit(&ns, &names::coordinator(&on_a), 0).await;
    until_jobs(&manager, "the first job's success on the manager", |jobs| {
        jobs.iter().any(|j| j.name_any() == on_a && phase(j) == Some(Phase::Succeeded)).then_some(())
    })
    .await;
    until_runs_on(&manager, (&a, "worker-a"), waiting).await;

    // Worker-b takes its room back for work of its own (a higher priority): its DIJob is
    // evicted there, goes back to the manager, and runs on worker-a once that has room, its
    // copy on worker-b gone by then.
    let classes: Api<PriorityClass> = Api::all(b.cluster.client.clone());
    let class = json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "local-work"}, "value": 1000});
    classes.create(&PostParams::default(), &serde_json::from_value(class).unwrap()).await.unwrap();
    let local = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "local-work", "labels": {di_api::contract::kueue::QUEUE_NAME: "team"}},
        "spec": {"suspend": true, "template": {"spec": {"restartPolicy": "Never", "priorityClassName": "local-work", "containers": [
            {"name": "main", "image": "local", "resources": {"requests": {"cpu": "150m"}}},
        ]}}},
    });
    let batch: Api<Job> = Api::namespaced(b.cluster.client.clone(), &ns);
    batch.create(&PostParams::default(), &serde_json::from_value(local).unwrap()).await.unwrap();
    until_taken_back(&manager, (&b, "worker-b"), &on_b).await;
    a.nodes.exit(&ns, &names::coordinator(waiting), 0).await;
    until_runs_on(&manager, (&a, "worker-a"), &on_b).await;
    assert_eq!(runs_there(&a).await, on_b);
    until_gone(&b, &on_b).await;

    // Suspended on the manager, its copy goes from its worker; resumed, it is dispatched again.
    let suspend = |on: bool| json!({"spec": {"suspend": on}});
    manager.jobs.patch(&on_b, &PatchParams::default(), &Patch::Merge(&suspend(true))).await.unwrap();
    until_gone(&a, &on_b).await;
    manager.jobs.patch(&on_b, &PatchParams::default(), &Patch::Merge(&suspend(false))).await.unwrap();
    until_runs_on(&manager, (&a, "worker-a"), &on_b).await;
    // Who runs it is fixed, by the API server itself too (its schema's rule, webhook or not).
    let taken = json!({"spec": {"managedBy": null}});
    let refused = manager.jobs.patch(&on_b, &PatchParams::default(), &Patch::Merge(&taken)).await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.code == 422 && s.message.contains("managedBy")),
        "{refused:?}"
    );

    // Deleted on the manager, it goes from its worker.
    manager.jobs.delete(&on_b, &DeleteParams::default()).await.unwrap();
    until_gone(&a, &on_b).await;
    drop((manager, a, b));
    clusters.stop().await;
}
