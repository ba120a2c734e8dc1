//! Passes as they write their job's status (`record`) and what goes with it: only from the job
//! the status was computed from, a refused spec, and the events the write brings. Fixtures in
//! `pass_fixtures`.

use super::*;

#[tokio::test]
async fn a_status_computed_from_an_older_job_never_replaces_the_stored_one() {
    let mut job = job(1, "Running", Some(Phase::Created));
    job.metadata.resource_version = Some("41".into());
    let (pods, services) = world(&job, |_| "Running");
    // The stored job moved on (resourceVersion 42): the API server refuses the write.
    let (client, recorded) = fake_api_server_with(&job, |method, path| {
        (method == "PATCH" && path.ends_with("/status")).then(|| Answer::status(409, "the object has been modified"))
    });
    let requeue = reconcile(view_of(&job), context(client, pods, services)).await.unwrap();
    let writes = status_writes(&recorded);
    assert_eq!(writes.len(), 1);
    assert_eq!(writes[0]["metadata"]["resourceVersion"], "41", "the write is conditional on the cached job");
    assert_eq!(
        requeue,
        Requeue::after(Duration::from_secs(1)),
        "a conflict is no error: the newer job's event follows"
    );
}

#[tokio::test]
async fn an_invalid_job_is_marked_failed_once() {
    let job = job(-1, "Running", None);
    let (client, recorded) = fake_api_server(&job);
    let requeue = reconcile(view_of(&job), context(client, vec![], vec![])).await.unwrap();
    assert_eq!(requeue, Requeue::await_change());
    let status: Vec<Value> =
        recorded.calls().iter().filter(|c| c.path.ends_with("/status")).map(|c| c.body.clone()).collect();
    assert_eq!(status.len(), 1);
    assert_eq!(status[0]["status"]["phase"], "Failed");
    assert_eq!(status[0]["status"]["conditions"][1]["reason"], "InvalidSpec");
    assert!(calls(&recorded, "POST", "pods").is_empty());
}

#[tokio::test]
async fn an_invalid_edit_of_a_running_job_keeps_it_running_as_it_was() {
    // Possible only without the webhook: a running job's collectors set to -1.
    let mut job = job(2, "Running", Some(Phase::Running));
    let (pods, services) = world(&job, |_| "Running");
    job.spec.collector.as_mut().unwrap().replicas = Some(-1);
    let (client, recorded) = fake_api_server(&job);
    let requeue = reconcile(view_of(&job), context(client, pods.clone(), services.clone())).await.unwrap();
    assert_eq!(requeue, Requeue::await_change());
    let touched = writes_to_objects(&recorded);
    assert_eq!(touched, Vec::<String>::new(), "its pods go on as they are");
    let writes = status_writes(&recorded);
    assert_eq!(writes.len(), 1);
    let status = &writes[0]["status"];
    assert_eq!(status["phase"], "Running", "not Failed for good");
    let invalid = status["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "InvalidSpec").unwrap();
    assert_eq!(invalid["status"], "True");
    assert!(invalid["message"].as_str().unwrap().contains("spec.collector.replicas"), "{invalid}");

    // Once written, the same invalid spec costs nothing more; fixed, the condition clears.
    job.status = Some(serde_json::from_value(status.clone()).unwrap());
    let (client, recorded) = fake_api_server(&job);
    reconcile(view_of(&job), context(client, pods.clone(), services.clone())).await.unwrap();
    assert_eq!(status_writes(&recorded), Vec::<Value>::new());
    job.spec.collector.as_mut().unwrap().replicas = Some(2);
    let (client, recorded) = fake_api_server(&job);
    reconcile(view_of(&job), context(client, pods, services)).await.unwrap();
    let writes = status_writes(&recorded);
    let cleared =
        writes[0]["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "InvalidSpec").cloned();
    assert_eq!(cleared.unwrap()["status"], "False");
}

#[tokio::test]
async fn a_held_normal_event_goes_out_after_the_status_that_says_the_job_runs() {
    let job = job(1, "Running", Some(Phase::Starting));
    let (mut pods, services) = world(&job, |_| "Running");
    for pod in &mut pods {
        pod.status = Some(
            serde_json::from_value(json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}))
                .unwrap(),
        );
    }
    let (client, recorded) = fake_api_server(&job);
    let ctx = context(client, pods, services);
    // As the pass that created its pods left it: starting, its Created event held.
    ctx.starting.set("ns", "job", Some(2));
    let reference = job.object_ref(&());
    let created = kube::runtime::events::Event {
        type_: EventType::Normal,
        reason: "Created".into(),
        note: None,
        action: "Create".into(),
        secondary: None,
    };
    ctx.events.send(created, reference, "job");
    reconcile(view_of(&job), ctx.clone()).await.unwrap();
    let order = || -> Vec<String> {
        let calls = recorded.calls();
        let writes = calls.iter().filter(|c| c.method != "GET");
        writes
            .map(|c| {
                if c.path.contains("/events") {
                    c.body["reason"].as_str().unwrap_or("").to_owned()
                } else {
                    format!("{} {}", c.method, c.path)
                }
            })
            .collect()
    };
    tokio::time::timeout(Duration::from_secs(5), async {
        while !order().iter().any(|c| c == "Created") {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the Created event is sent once the job is up");
    let order = order();
    let at = |what: &str| order.iter().position(|c| c.contains(what)).unwrap_or_else(|| panic!("{what} in {order:?}"));
    assert!(at("/status") < at("Created"), "the status first: {order:?}");
}
