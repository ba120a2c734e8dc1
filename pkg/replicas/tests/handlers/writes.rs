//! Writes of the job: one at a time from the endpoint, decided again on conflict, applied
//! once or not at all whatever the clients do, never held up by a wait for pods.

use std::time::Duration;

use axum::http::StatusCode;
use di_client::update::WRITE_ATTEMPTS;
use serde_json::json;
use tokio::time::Instant;

use crate::world::*;

/// A request that waits for pods must not keep the next request from writing the job: the
/// second's patch arrives while the first still waits (here for good: no reconciler runs), and
/// the job ends with `collectors`.
async fn second_request_writes_while_the_first_waits(uri: &'static str, body: &'static [u8], collectors: i64) {
    let (app, world) = serve(job(), pods(), Duration::from_secs(3600), LOCAL);
    let mut seen = world.lock().unwrap().seen.subscribe();
    let first = tokio::spawn({
        let app = app.clone();
        async move { call(&app, "POST", uri, body).await }
    });
    // The first has written the job and reads pods to wait on.
    let waiting = seen.wait_for(|log| {
        log.iter().position(Seen::is_job_patch).is_some_and(|p| log[p..].iter().any(Seen::is_pod_read))
    });
    assert!(tokio::time::timeout(Duration::from_secs(10), waiting).await.is_ok(), "the first never waited");
    let second = tokio::spawn({
        let app = app.clone();
        async move { call(&app, "POST", "/v1alpha1/replicas", SCALE_UP).await }
    });
    let two_patches = seen.wait_for(|log| log.iter().filter(|s| s.is_job_patch()).count() == 2);
    let written = tokio::time::timeout(Duration::from_secs(10), two_patches).await.is_ok();
    assert!(written, "the second request's write waited for the first's 3600 s wait");
    assert!(!first.is_finished(), "the first still waits for its pods");
    let w = world.lock().unwrap();
    assert_eq!((w.patches, w.job["spec"]["collector"]["replicas"].clone()), (2, json!(collectors)), "each once");
    drop(w);
    first.abort();
    second.abort();
}

#[tokio::test]
async fn a_scale_waiting_for_pods_does_not_hold_up_the_next_request() {
    second_request_writes_while_the_first_waits("/v1alpha1/replicas", SCALE_UP, 4).await;
}

#[tokio::test]
async fn a_failure_report_waiting_for_pods_does_not_hold_up_the_next_request() {
    let report = br#"{"namespace": "ns", "coordinator": "job-coordinator", "collectors": ["job-collector-0"]}"#;
    second_request_writes_while_the_first_waits("/v1alpha1/replicas/failed", report, 3).await;
}

/// Another writer keeps changing the job: a few tries, each after a short pause, then a 409
/// that says to retry, and no change.
#[tokio::test(start_paused = true)]
async fn a_job_that_keeps_changing_gets_a_conflict_after_a_few_tries() {
    let (app, world) = setup(LOCAL);
    world.lock().unwrap().trouble.conflicts = usize::MAX;
    let mut seen = world.lock().unwrap().seen.subscribe();
    let (s, r) = tokio::select! {
        answer = call(&app, "POST", "/v1alpha1/replicas", SCALE_UP) => answer,
        _ = seen.wait_for(|log| count(log, Seen::is_job_patch) >= 20) => panic!("20 conflicting writes, still trying"),
    };
    assert_error(s, &r, StatusCode::CONFLICT, "kept changing");
    assert!(r["message"].as_str().unwrap().contains("retry"), "{r}");
    let tries: Vec<Instant> = seen.borrow().iter().filter(|s| s.is_job_patch()).map(|s| s.at).collect();
    assert_eq!(tries.len(), WRITE_ATTEMPTS);
    let pauses: Vec<Duration> = tries.windows(2).map(|t| t[1] - t[0]).collect();
    assert!(pauses.iter().all(|p| !p.is_zero()), "tried again without a pause: {pauses:?}");
    assert!(pauses.iter().sum::<Duration>() < Duration::from_secs(2), "the pauses are not short: {pauses:?}");
    let w = world.lock().unwrap();
    assert_eq!((w.patches, w.job["spec"]["collector"]["replicas"].clone()), (0, json!(2)));
}

#[tokio::test(start_paused = true)]
async fn a_write_that_conflicts_twice_is_decided_again_and_applied_once() {
    let (app, world) = setup(LOCAL);
    world.lock().unwrap().trouble.conflicts = 2;
    let (s, r) = call(&app, "POST", "/v1alpha1/replicas", SCALE_UP).await;
    assert_eq!(s, StatusCode::OK, "{r}");
    let w = world.lock().unwrap();
    assert_eq!(count(&w.seen.borrow(), Seen::is_job_patch), 3);
    assert_eq!((w.patches, w.job["spec"]["collector"]["replicas"].clone()), (1, json!(3)));
}

/// A client that goes while its write is at the API server: axum drops the handler, but the
/// write still finishes, once, and the next request decides on the job as written (its first
/// try does not conflict).
#[tokio::test]
async fn a_write_whose_client_goes_is_applied_once_and_seen_by_the_next_request() {
    let (app, world) = setup(LOCAL);
    world.lock().unwrap().trouble.hold_patches = true;
    let mut seen = world.lock().unwrap().seen.subscribe();
    let first = tokio::spawn({
        let app = app.clone();
        async move { call(&app, "POST", "/v1alpha1/replicas", SCALE_UP).await }
    });
    seen.wait_for(|log| count(log, Seen::is_job_patch) == 1).await.unwrap();
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    let second = tokio::spawn({
        let app = app.clone();
        async move { call(&app, "POST", "/v1alpha1/replicas", SCALE_UP).await }
    });
    release(&world);
    let (s, r) = second.await.unwrap();
    assert_eq!(s, StatusCode::OK, "{r}");
    let w = world.lock().unwrap();
    assert_eq!(w.abandoned, 0, "the first's write was cut off with its client");
    assert_eq!((w.patches, w.job["spec"]["collector"]["replicas"].clone()), (2, json!(4)), "each once");
    let statuses: Vec<Option<u16>> = w.seen.borrow().iter().filter(|s| s.is_job_patch()).map(|s| s.status).collect();
    assert_eq!(statuses, vec![Some(200), Some(200)], "the second decided on the job before the first's write");
}

/// Issue 12's load: 100 concurrent scale requests to one endpoint, a third of the clients going
/// while the first write is at the API server. Each request is applied once or not at all: no
/// write is cut off, every answered request was applied, and the job counts every write.
#[tokio::test]
async fn a_hundred_concurrent_scales_with_clients_going_are_each_applied_once_or_not_at_all() {
    let (app, world) = setup(LOCAL);
    world.lock().unwrap().trouble.hold_patches = true;
    let mut seen = world.lock().unwrap().seen.subscribe();
    let clients: Vec<_> = (0..100)
        .map(|_| {
            let app = app.clone();
            tokio::spawn(async move { call(&app, "POST", "/v1alpha1/replicas", SCALE_UP).await })
        })
        .collect();
    seen.wait_for(|log| count(log, Seen::is_job_patch) == 1).await.unwrap();
    let (going, staying): (Vec<_>, Vec<_>) = clients.into_iter().enumerate().partition(|(i, _)| i % 3 == 0);
    for (_, client) in going {
        client.abort();
        assert!(client.await.unwrap_err().is_cancelled());
    }
    release(&world);
    let answered = staying.len();
    for (_, client) in staying {
        let (s, r) = client.await.unwrap();
        assert_eq!(s, StatusCode::OK, "{r}");
    }
    // The last write goes after every earlier one (one at a time, in turn).
    let (s, r) = call(&app, "POST", "/v1alpha1/replicas", SCALE_UP).await;
    assert_eq!(s, StatusCode::OK, "{r}");
    let w = world.lock().unwrap();
    assert_eq!(w.abandoned, 0, "a write was cut off with its client");
    assert!((answered + 1..=answered + 2).contains(&w.patches), "{answered} answered, {} written", w.patches);
    assert_eq!(w.job["spec"]["collector"]["replicas"], json!(2 + w.patches));
    assert!(w.seen.borrow().iter().all(|s| s.status != Some(409)), "a write was decided on a stale job");
}

/// A coordinator the job's status does not name (a predecessor's of the same name, still
/// terminating after the job was submitted again, or one not recorded yet): it asks again until
/// the endpoint's wait is over, writes nothing and is answered 409; named meanwhile, it writes.
#[tokio::test(start_paused = true)]
async fn a_coordinator_the_status_does_not_name_writes_nothing() {
    let (app, world) = serve(job(), pods(), Duration::from_secs(5), LOCAL);
    world.lock().unwrap().job["status"]["coordinatorUID"] = json!("successor-uid");
    let (s, r) = call(&app, "POST", "/v1alpha1/replicas", SCALE_UP).await;
    assert_error(s, &r, StatusCode::CONFLICT, "is not the coordinator job job runs now");
    assert!(r["message"].as_str().unwrap().contains("successor-uid"), "{r}");
    {
        let w = world.lock().unwrap();
        let looks = w.seen.borrow().iter().filter(|s| s.method == "GET" && s.path.ends_with("/dijobs/job")).count();
        assert!(looks > 1, "looked once only: {looks}");
        assert_eq!((w.patches, w.job["spec"]["collector"]["replicas"].clone()), (0, json!(2)));
    }

    world.lock().unwrap().job["status"] = json!({});
    let named = {
        let world = world.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(700)).await;
            world.lock().unwrap().job["status"]["coordinatorUID"] = json!(COORDINATOR_UID);
        }
    };
    let ((s, r), ()) = tokio::join!(call(&app, "POST", "/v1alpha1/replicas", SCALE_UP), named);
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(world.lock().unwrap().job["spec"]["collector"]["replicas"], json!(3));
}
