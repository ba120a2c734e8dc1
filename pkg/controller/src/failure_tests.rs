//! Passes whose work fails or must wait: a create refused or failing (named on the job, retried
//! with a growing backoff, the others made all the same) and a replacement held to its backoff.
//! Fixtures in `pass_fixtures`.

use super::*;
use k8s_openapi::api::core::v1::Pod;

#[tokio::test]
async fn a_replacement_waits_its_backoff_even_when_the_cache_missed_the_count() {
    let job = job(1, "Running", Some(Phase::Running));
    let (pods, services) = world(&job, |name| if name == "job-collector-0" { "Failed" } else { "Running" });
    let marks: Arc<Marks> = Arc::default();
    let (client, recorded) = fake_api_server(&job);
    reconcile(view_of(&job), context_with(client, pods.clone(), services.clone(), marks.clone())).await.unwrap();
    let marked = recorded.calls().iter().any(|c| c.method == "PATCH" && c.path.ends_with("/services/job-collector-0"));
    assert!(marked, "the first failure is counted on the service");
    assert_eq!(calls(&recorded, "DELETE", "pods"), ["job-collector-0"]);

    // The next pass: the pod's deletion is in the cache, the service's count is not yet.
    let pods: Vec<Pod> = pods.into_iter().filter(|p| p.name_any() != "job-collector-0").collect();
    let (client, recorded) = fake_api_server(&job);
    reconcile(view_of(&job), context_with(client, pods, services, marks)).await.unwrap();
    assert_eq!(calls(&recorded, "POST", "pods"), Vec::<String>::new(), "not before the backoff");
}

#[tokio::test]
async fn a_failed_operation_is_named_on_the_job_and_retried_with_growing_backoff() {
    let job = job(1, "Running", None);
    let (client, recorded) = fake_api_server_with(&job, |method, path| {
        (method == "POST" && path.ends_with("/pods")).then(|| Answer::status(403, "pods is forbidden: exceeded quota"))
    });
    let ctx = context(client, vec![], vec![]);
    let error = reconcile(view_of(&job), ctx.clone()).await.unwrap_err();
    assert_eq!(error.kind(), "CreatePod");
    assert!(error.to_string().contains("exceeded quota"), "{error}");

    let first = crate::reconciler::error_policy(view_of(&job), &error, ctx.clone());
    let second = crate::reconciler::error_policy(view_of(&job), &error, ctx.clone());
    assert_eq!(first, Requeue::after(Duration::from_secs(1)));
    assert_eq!(second, Requeue::after(Duration::from_secs(2)), "backs off per job");

    // The Warning event says what failed, with the API server's words.
    let warning = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let found = recorded.calls().into_iter().find_map(|c| {
                (c.method == "POST" && c.path.ends_with("/events") && c.body["reason"] == "CreatePod").then_some(c.body)
            });
            if let Some(event) = found {
                return event;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("a Warning event with the error's kind");
    assert_eq!(warning["type"], "Warning");
    assert!(warning["note"].as_str().unwrap().contains("creating Pod job-"), "{warning}");
}

#[tokio::test]
async fn a_refused_create_keeps_none_of_the_others_from_being_made() {
    let job = job(4, "Running", None);
    let stored = serde_json::to_value(&job).unwrap();
    let refused = ["job-collector-1", "job-collector-3"];
    let (client, recorded) = di_testing::client(move |call| {
        let name = call.body["metadata"]["name"].as_str().unwrap_or_default();
        if call.method == "POST" && call.path.ends_with("/pods") && refused.contains(&name) {
            return Some(Answer::status(403, &format!("pods \"{name}\" is forbidden: exceeded quota")));
        }
        (call.method == "PATCH" && call.path.contains("/dijobs/")).then(|| Answer::json(200, stored.clone()))
    });
    let error = reconcile(view_of(&job), context(client, vec![], vec![])).await.unwrap_err();
    assert_eq!(error.kind(), "CreatePod");
    let mut tried = calls(&recorded, "POST", "pods");
    tried.sort();
    assert_eq!(tried, ["job-collector-0", "job-collector-1", "job-collector-2", "job-collector-3", "job-coordinator"]);
    let first = refused.iter().find(|name| error.to_string().contains(*name)).expect("the pass names its refusal");
    let other = refused.iter().find(|name| *name != first).unwrap();
    let warning = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let found = recorded.calls().into_iter().find_map(|c| {
                let note = c.body["note"].as_str().unwrap_or_default().to_owned();
                (c.path.ends_with("/events") && note.contains(*other)).then_some(c.body)
            });
            if let Some(event) = found {
                return event;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("a Warning of its own for the second refusal");
    assert_eq!((warning["type"].as_str(), warning["reason"].as_str()), (Some("Warning"), Some("CreatePod")));
}

/// The API server's refusal of a create in a namespace being deleted, as NamespaceLifecycle
/// answers it.
fn namespace_terminating(kind: &str) -> Answer {
    let message = "unable to create new content in namespace ns because it is being terminated";
    Answer::json(
        403,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 403, "reason": "Forbidden",
               "message": format!("{kind} is forbidden: {message}"),
               "details": {"kind": kind, "causes": [{"reason": "NamespaceTerminating", "message": message,
                                                     "field": "metadata.namespace"}]}}),
    )
}

#[tokio::test]
async fn a_namespace_being_deleted_stops_the_pass_with_no_warning_and_the_job_is_left_to_go() {
    let job = job(30, "Running", Some(Phase::Running));
    let (pods, services) = world(&job, |_| "Running");
    // Every collector's pod gone with the namespace's deletion, its Services still there.
    let pods: Vec<Pod> = pods.into_iter().filter(|p| p.name_any() == "job-coordinator").collect();
    let (client, recorded) = fake_api_server_with(&job, |method, path| {
        (method == "POST" && path.ends_with("/pods")).then(|| namespace_terminating("pods"))
    });
    let ctx = context_with(client, pods, services, Arc::default());
    let requeue = reconcile(view_of(&job), ctx.clone()).await.expect("not the job's failure");
    assert_eq!(requeue, Requeue::await_change());
    let tried = calls(&recorded, "POST", "pods").len();
    // The window of creates in flight (16 here) at most, not all 30.
    assert!((1..=16).contains(&tried), "{tried} creates sent into a namespace being deleted");
    assert!(ctx.teardown.going("ns", "job-uid"));

    // Nothing more for this job: no create, no status, no restart counted, no Warning.
    let before = recorded.calls().len();
    reconcile(view_of(&job), ctx.clone()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after: Vec<_> = recorded.calls().into_iter().skip(before).map(|c| format!("{} {}", c.method, c.path)).collect();
    assert_eq!(after, Vec::<String>::new(), "the second pass sent requests");
    let events: Vec<_> = recorded.calls().into_iter().filter(|c| c.path.ends_with("/events")).collect();
    assert!(events.is_empty(), "events published into a namespace being deleted: {events:?}");
    assert!(ctx.retries.failed("job-uid") == crate::error::RETRY_BASE, "not counted as a failed pass");
}

#[tokio::test]
async fn a_quota_whose_pod_count_is_used_up_stops_the_other_pods_but_not_the_services() {
    let job = job(40, "Running", None);
    let (client, recorded) = fake_api_server_with(&job, |method, path| {
        let used_up = "pods \"x\" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2";
        (method == "POST" && path.ends_with("/pods")).then(|| Answer::status(403, used_up))
    });
    let ctx = context(client, vec![], vec![]);
    let error = reconcile(view_of(&job), ctx.clone()).await.unwrap_err();
    assert_eq!(error.kind(), "CreatePod");
    let pods = calls(&recorded, "POST", "pods").len();
    // The collectors' window (16 here) and the coordinator, which waits for its RBAC apart.
    assert!(pods <= 17, "{pods} of 41 pods tried although the quota's count refuses each");
    assert_eq!(calls(&recorded, "POST", "services").len(), 41, "Services are another count");
}

#[tokio::test]
async fn a_name_an_object_of_another_owner_holds_is_not_taken_as_the_jobs() {
    let job = job(1, "Running", Some(Phase::Running));
    let (pods, services) = world(&job, |_| "Running");
    // The collector's pod is gone; an unlabelled Service of its name, no job's, is not cached.
    let pods: Vec<Pod> = pods.into_iter().filter(|p| p.name_any() != "job-collector-0").collect();
    let services: Vec<Service> = services.into_iter().filter(|s| s.name_any() != "job-collector-0").collect();
    let (client, recorded) = fake_api_server_with(&job, |method, path| {
        let foreign = json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                             "metadata": {"name": "job-collector-0", "namespace": "ns", "uid": "someone-elses"}});
        match (method, path) {
            ("POST", p) if p.ends_with("/services") => {
                Some(Answer::status(409, "services \"job-collector-0\" already exists"))
            }
            ("GET", p) if p.ends_with("/services/job-collector-0") => Some(Answer::json(200, foreign)),
            _ => None,
        }
    });
    let error = reconcile(view_of(&job), context(client, pods, services)).await.unwrap_err();
    assert_eq!(error.kind(), "NameTaken", "{error}");
    assert!(error.to_string().contains("Service job-collector-0 belongs to another owner"), "{error}");
    assert_eq!(calls(&recorded, "GET", "services"), ["job-collector-0"], "its owner read once, by name");
}
