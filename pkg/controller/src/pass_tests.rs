//! Passes against a mocked API server (as kube-rs's controller-rs tests do): the shared echoing
//! fake of `di-testing`, which records every request, with the caches filled by hand.
//! The scenarios of a pass's status (`record_tests`) and of its failures (`failure_tests`) use
//! the same fake and fixtures (`pass_fixtures`).

use di_testing::{Answer, Log};
use k8s_openapi::api::core::v1::{Pod, Service};
use serde_json::{Value, json};

use super::*;
use crate::restarts::Marks;

#[path = "pass_fixtures.rs"]
mod fixtures;
use fixtures::*;

#[tokio::test]
async fn first_reconcile_creates_the_coordinator_and_its_service() {
    let job = job(0, "Running", None);
    let (client, recorded) = fake_api_server(&job);
    let requeue = reconcile(view_of(&job), context(client, vec![], vec![])).await.unwrap();
    assert_eq!(calls(&recorded, "POST", "services"), vec!["job-coordinator"]);
    assert_eq!(calls(&recorded, "POST", "pods"), vec!["job-coordinator"]);
    assert_eq!(calls(&recorded, "POST", "serviceaccounts"), vec!["job-replicas"]);
    assert_eq!(calls(&recorded, "POST", "roles"), vec!["job-replicas"]);
    assert_eq!(calls(&recorded, "POST", "rolebindings"), vec!["job-replicas"]);
    let order: Vec<String> = recorded.calls().iter().map(|c| format!("{} {}", c.method, c.path)).collect();
    let at = |what: &str| order.iter().position(|r| r.ends_with(what)).unwrap_or_else(|| panic!("{what} in {order:?}"));
    assert!(at("/serviceaccounts") < at("/rolebindings"), "{order:?}");
    assert!(at("/rolebindings") < at("/pods"), "the coordinator waits for its sidecar's RBAC: {order:?}");
    // Its status would describe the world before the pods: the pass their events bring
    // writes it, and a requeue within the status period stands in for lost events.
    let status_writes = |recorded: &Log| -> Vec<Value> {
        let calls = recorded.calls();
        calls.iter().filter(|c| c.method == "PATCH" && c.path.ends_with("/status")).map(|c| c.body.clone()).collect()
    };
    assert_eq!(status_writes(&recorded), Vec::<Value>::new());
    assert_eq!(requeue, Requeue::after(Duration::from_secs(1)));

    let (pods, services) = world(&job, |_| "Pending");
    let (client, recorded) = fake_api_server(&job);
    reconcile(view_of(&job), context(client, pods, services)).await.unwrap();
    let writes = status_writes(&recorded);
    assert_eq!(writes.len(), 1);
    assert_eq!(writes[0]["status"]["phase"], "Created");
}

#[tokio::test]
async fn a_reconcile_after_a_crash_creates_nothing_twice() {
    let mut job = job(3, "Running", None);
    let (mut pods, services) = world(&job, |_| "Running");
    for pod in &mut pods {
        let ready = json!({"type": "Ready", "status": "True"});
        pod.status.as_mut().unwrap().conditions = Some(vec![serde_json::from_value(ready).unwrap()]);
    }
    // What the crashed pass had already written, spelled out rather than computed: a status taken
    // from `plan` itself would agree with whatever the pass computes, right or wrong.
    let at = "2026-01-01T00:00:00Z";
    job.status = Some(
        serde_json::from_value(json!({
            "phase": "Running",
            "conditions": [
                {"type": "Created", "status": "True", "reason": "JobCreated",
                 "message": "the job's coordinator is created", "lastUpdateTime": at, "lastTransitionTime": at},
                {"type": "Running", "status": "True", "reason": "CoordinatorRunning",
                 "message": "the coordinator is running", "lastUpdateTime": at, "lastTransitionTime": at},
            ],
            "replicaStatus": {"Coordinator": {"active": 1}, "Collector": {"active": 3}},
            "observedGeneration": 1,
            "collectors": "3/3",
            "collectorReplicas": 3, "collectorSelector": "dijob-name=job,replica-type=collector",
            "replicas": 4, "readyReplicas": 4, "restarts": 0,
            "coordinatorUID": "uid-job-coordinator",
        }))
        .unwrap(),
    );

    let (client, recorded) = fake_api_server(&job);
    reconcile(view_of(&job), context(client, pods, services)).await.unwrap();
    let writes: Vec<_> =
        recorded.calls().iter().filter(|c| c.method != "GET").map(|c| format!("{} {}", c.method, c.path)).collect();
    assert_eq!(writes, Vec::<String>::new(), "a converged job costs no request");
}

#[tokio::test]
async fn completion_applies_each_cleanup_policy() {
    let cases = [
        ("Running", vec!["job-collector-1", "job-collector-0"]),
        ("All", vec!["job-coordinator", "job-collector-0", "job-collector-1"]),
        ("None", vec![]),
    ];
    for (policy, mut want) in cases {
        let job = job(2, policy, Some(Phase::Running));
        let (pods, services) = world(&job, |name| if name == "job-coordinator" { "Succeeded" } else { "Running" });
        let (client, recorded) = fake_api_server_with(&job, |method, path| {
            (method == "GET" && path.ends_with("/job-replicas")).then(|| replica_identity("job-uid"))
        });
        reconcile(view_of(&job), context(client, pods, services)).await.unwrap();
        let mut deleted = calls(&recorded, "DELETE", "pods");
        deleted.sort();
        want.sort();
        assert_eq!(deleted, want, "policy {policy}");
        let mut services_deleted = calls(&recorded, "DELETE", "services");
        services_deleted.sort();
        assert_eq!(services_deleted, vec!["job-collector-0", "job-collector-1", "job-coordinator"], "policy {policy}");
        assert_eq!(calls(&recorded, "DELETE", "roles"), vec!["job-replicas"], "policy {policy}");
        assert!(calls(&recorded, "POST", "pods").is_empty(), "policy {policy}");
        assert!(calls(&recorded, "GET", "dijobs").is_empty(), "policy {policy}: the status write guards the cleanup");
    }
}

/// Every write to an object other than the job's status and its events, as `METHOD path`.
fn writes_to_objects(recorded: &Log) -> Vec<String> {
    let calls = recorded.calls();
    let writes =
        calls.iter().filter(|c| c.method != "GET" && !c.path.ends_with("/status") && !c.path.contains("/events"));
    writes.map(|c| format!("{} {}", c.method, c.path)).collect()
}

/// The job's status writes, in order.
fn status_writes(recorded: &Log) -> Vec<Value> {
    let calls = recorded.calls();
    calls.iter().filter(|c| c.method == "PATCH" && c.path.ends_with("/status")).map(|c| c.body.clone()).collect()
}

/// Every object of `pods` and `services` controlled by another UID, as a predecessor's are.
fn owned_by(uid: &str, pods: &mut [Pod], services: &mut [Service]) {
    let metas = pods.iter_mut().map(|p| &mut p.metadata).chain(services.iter_mut().map(|s| &mut s.metadata));
    for meta in metas {
        for reference in meta.owner_references.iter_mut().flatten() {
            reference.uid = uid.to_owned();
        }
    }
}

#[tokio::test]
async fn a_job_submitted_again_ignores_its_predecessors_objects() {
    // `kubectl delete -f job.yaml && kubectl apply -f job.yaml`: the predecessor (cleanPodPolicy
    // None) had finished; its pods and services are still there, being collected.
    let job = job(2, "None", None);
    let (mut pods, mut services) = world(&job, |name| if name == "job-coordinator" { "Succeeded" } else { "Running" });
    owned_by("predecessor-uid", &mut pods, &mut services);
    for service in &mut services {
        service.annotations_mut().insert(di_api::contract::annotations::RESTARTS.into(), "3".into());
    }
    let (client, recorded) = fake_api_server(&job);
    reconcile(view_of(&job), context(client, pods, services)).await.unwrap();

    let writes = status_writes(&recorded);
    assert_eq!(writes.len(), 1, "{writes:?}");
    let status = &writes[0]["status"];
    assert_eq!(status["phase"], "Created", "the predecessor's coordinator does not finish this job");
    assert_eq!(status["collectors"], "0/2", "the predecessor's collectors are not counted");
    let taken = status["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "NamesTaken").unwrap();
    assert_eq!(taken["status"], "True");
    assert!(taken["message"].as_str().unwrap().contains("job-coordinator"), "{taken}");
    let touched = writes_to_objects(&recorded);
    assert_eq!(touched, Vec::<String>::new(), "nothing of the predecessor is deleted or created over");
}

#[tokio::test]
async fn a_name_another_job_holds_is_shown_never_found_as_ours() {
    // Task `collector` of job `job` (pods `job-collector-<i>`) and a role job's collectors collide:
    // here another job's pod and Service named `job-collector-0`, under that job's label.
    let job = job(1, "Running", Some(Phase::Running));
    let (mut pods, mut services) = world(&job, |_| "Running");
    for meta in pods.iter_mut().map(|p| &mut p.metadata).chain(services.iter_mut().map(|s| &mut s.metadata)) {
        if meta.name.as_deref() == Some("job-collector-0") {
            meta.labels.get_or_insert_default().insert(di_api::contract::labels::JOB_NAME.into(), "other".into());
            meta.owner_references.iter_mut().flatten().for_each(|r| r.uid = "other-uid".into());
        }
    }
    let (client, recorded) = fake_api_server(&job);
    reconcile(view_of(&job), context(client, pods, services)).await.unwrap();

    assert_eq!(writes_to_objects(&recorded), Vec::<String>::new(), "nothing created over the other job's");
    let writes = status_writes(&recorded);
    let status = &writes.last().expect("a status write")["status"];
    let taken = status["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "NamesTaken").unwrap();
    assert_eq!(taken["status"], "True");
    assert!(taken["message"].as_str().unwrap().contains("job-collector-0 (held by job other)"), "{taken}");
    assert_eq!(status["collectors"], "0/1", "the other job's collector is not counted");
}

#[tokio::test]
async fn pods_are_deleted_by_uid_with_their_own_grace_period() {
    let mut job = job(2, "Running", Some(Phase::Running));
    job.spec.suspend = Some(true);
    let (pods, services) = world(&job, |_| "Running");
    let (client, recorded) = fake_api_server(&job);
    reconcile(view_of(&job), context(client, pods, services)).await.unwrap();
    let deletes: Vec<(String, Value)> = recorded
        .calls()
        .iter()
        .filter(|c| c.method == "DELETE" && c.path.contains("/pods/"))
        .map(|c| (c.last_segment().to_owned(), c.body.clone()))
        .collect();
    assert_eq!(deletes.len(), 3, "{deletes:?}");
    for (name, body) in deletes {
        // A forced delete frees the name while the container may still run on its node: a
        // replacement would run beside it.
        assert!(body.get("gracePeriodSeconds").is_none(), "{name}: {body}");
        assert_eq!(body["preconditions"]["uid"], format!("uid-{name}"), "{name}: {body}");
    }
}

#[tokio::test]
async fn a_finished_job_seen_through_a_stale_cache_gets_no_new_coordinator() {
    // Stored: Succeeded, then cleanup (policy All) deleted every pod. Cached: still Running.
    let mut job = job(2, "All", Some(Phase::Running));
    job.metadata.resource_version = Some("41".into());
    let stored = r#"{"apiVersion":"meta.k8s.io/v1","kind":"PartialObjectMetadata","metadata":{"name":"job","namespace":"ns","uid":"job-uid","resourceVersion":"45"}}"#;
    let (client, recorded) = fake_api_server_with(&job, move |method, path| {
        (method == "GET" && path.ends_with("/dijobs/job")).then(|| Answer::bytes(200, stored))
    });
    let requeue = reconcile(view_of(&job), context(client, vec![], vec![])).await.unwrap();
    assert_eq!(calls(&recorded, "POST", "pods"), Vec::<String>::new());
    assert_eq!(status_writes(&recorded), Vec::<Value>::new(), "no Created over Succeeded");
    assert_eq!(requeue, Requeue::after(Duration::from_secs(1)));

    // With the stored job the same as the cached one, a deleted coordinator of a running job is
    // created again.
    let current = r#"{"apiVersion":"meta.k8s.io/v1","kind":"PartialObjectMetadata","metadata":{"name":"job","namespace":"ns","uid":"job-uid","resourceVersion":"41"}}"#;
    let (client, recorded) = fake_api_server_with(&job, move |method, path| {
        (method == "GET" && path.ends_with("/dijobs/job")).then(|| Answer::bytes(200, current))
    });
    reconcile(view_of(&job), context(client, vec![], vec![])).await.unwrap();
    assert!(calls(&recorded, "POST", "pods").contains(&"job-coordinator".to_string()));
}

/// The job's watch lists from any cache: a view older than the stored job never scales it down.
#[tokio::test]
async fn a_stale_view_of_the_job_scales_nothing_down() {
    // Stored: scaled up to 3 collectors (resourceVersion 45). Cached: the older spec of 1.
    let mut stored_job = job(3, "Running", Some(Phase::Running));
    stored_job.metadata.resource_version = Some("45".into());
    let (pods, services) = world(&stored_job, |_| "Running");
    let mut cached = job(1, "Running", Some(Phase::Running));
    cached.metadata.resource_version = Some("41".into());
    let stored =
        json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": stored_job.metadata});
    let (client, recorded) = fake_api_server_with(&cached, move |method, path| {
        (method == "GET" && path.ends_with("/dijobs/job")).then(|| Answer::json(200, stored.clone()))
    });
    let requeue = reconcile(view_of(&cached), context(client, pods.clone(), services.clone())).await.unwrap();
    assert_eq!(calls(&recorded, "DELETE", "pods"), Vec::<String>::new(), "nothing deleted on a stale view");
    assert_eq!(calls(&recorded, "DELETE", "services"), Vec::<String>::new());
    assert_eq!(requeue, Requeue::after(Duration::from_secs(1)), "the newer job's event brings the next pass");

    // Current, the same view scales down.
    let (client, recorded) = fake_api_server(&cached);
    reconcile(view_of(&cached), context(client, pods, services)).await.unwrap();
    let mut deleted = calls(&recorded, "DELETE", "pods");
    deleted.sort();
    assert_eq!(deleted, ["job-collector-1", "job-collector-2"]);
}

/// A finished job deletes its replica identity, but only the objects it owns.
#[tokio::test]
async fn a_finished_job_deletes_only_the_rbac_it_owns() {
    let job = job(1, "Running", Some(Phase::Running));
    let (pods, services) = world(&job, |name| if name == "job-coordinator" { "Succeeded" } else { "Running" });
    let (client, recorded) = fake_api_server_with(&job, |method, path| {
        let owner = if path.contains("/serviceaccounts/") { "someone-elses" } else { "job-uid" };
        (method == "GET" && path.ends_with("/job-replicas")).then(|| replica_identity(owner))
    });
    reconcile(view_of(&job), context(client, pods, services)).await.unwrap();
    let deletes: Vec<(String, Value)> = recorded
        .calls()
        .iter()
        .filter(|c| c.method == "DELETE" && c.path.ends_with("/job-replicas"))
        .map(|c| (c.path.rsplit('/').nth(1).unwrap().to_owned(), c.body["preconditions"]["uid"].clone()))
        .collect();
    assert_eq!(
        deletes,
        [("rolebindings".to_owned(), json!("job-uid-object")), ("roles".to_owned(), json!("job-uid-object"))]
    );
}

/// Creates go out concurrently, and one refused stops none of the others: every pod is tried,
/// the pass fails with the first refusal and a second one has its own Warning, naming its pod.
#[tokio::test]
async fn a_pass_before_the_caches_show_its_creations_creates_nothing_twice() {
    let job = job(2, "Running", None);
    let (client, recorded) = fake_api_server(&job);
    let ctx = context(client, vec![], vec![]);
    reconcile(view_of(&job), ctx.clone()).await.unwrap();
    // Created concurrently: in no particular order.
    let sorted = |mut names: Vec<String>| {
        names.sort();
        names
    };
    let all = ["job-collector-0", "job-collector-1", "job-coordinator"];
    assert_eq!(sorted(calls(&recorded, "POST", "pods")), all);
    // The pods' events bring the next pass before the caches hold the pods: nothing again, and
    // no status that describes a world without them.
    reconcile(view_of(&job), ctx.clone()).await.unwrap();
    assert_eq!(sorted(calls(&recorded, "POST", "pods")), all, "each pod created once");
    assert_eq!(calls(&recorded, "POST", "services").len(), 3, "each service created once");
    assert_eq!(calls(&recorded, "POST", "rolebindings"), ["job-replicas"], "the RBAC too");
    assert!(status_writes(&recorded).is_empty());
}

#[path = "record_tests.rs"]
mod record;

#[path = "failure_tests.rs"]
mod failure;

#[path = "queue_tests.rs"]
mod queue;

#[path = "milestones_tests.rs"]
mod milestones;

/// A hundred passes run at once, each its future: kept to kilobytes by what it holds on the heap
/// (the job, a refusal's future). Inline, they made it 30 KiB (`docs/PERFORMANCE.md`, 56a7c6e).
#[tokio::test]
async fn a_pass_is_small() {
    let job = job(10, "Running", None);
    let (client, _recorded) = fake_api_server(&job);
    let pass = reconcile(view_of(&job), context(client, vec![], vec![]));
    let size = std::mem::size_of_val(&pass);
    assert!(size <= 16 * 1024, "a pass's future is {size} bytes");
}
