//! The wait for pods after a write: bounded by the deadline whatever the API server does, and
//! a success either way once the job is written.

use std::time::Duration;

use axum::http::StatusCode;
use serde_json::json;
use tokio::time::Instant;

use crate::world::*;

/// Once the job is written the change is in: an error would have the client send it again. So
/// whatever the pod reads do after the write, the answer is a success that says the reconciler
/// has not finished, with the URLs known: planned from the job as written, or as last listed.
#[tokio::test(start_paused = true)]
async fn after_the_write_failing_pod_reads_still_answer_success() {
    let cases = [
        (
            "POST",
            "/v1alpha1/replicas",
            SCALE_UP,
            "job-collector-2.ns:22270",
            "the job is changed, but not every replica was created within 30s",
        ),
        (
            "DELETE",
            "/v1alpha1/replicas",
            SCALE_DOWN,
            "job-collector-1.ns:22270",
            "the job is changed, but not every replica was deleted within 30s",
        ),
        (
            "POST",
            "/v1alpha1/replicas/failed",
            REPORT,
            "job-collector-0.ns:22270",
            "marked for replacement, not every replica was back within 30s",
        ),
    ];
    let (mut got, mut want) = (vec![], vec![]);
    for (method, uri, body, url, message) in cases {
        let (app, world) = serve(job(), pods(), WAIT, LOCAL);
        world.lock().unwrap().trouble.pod_reads_after_write = Reads::Failing;
        let (s, r) = call(&app, method, uri, body).await;
        // The message as wanted when it says that, else as it came.
        let said = r["message"].as_str().unwrap();
        let said = if said.contains(message) { message } else { said };
        got.push((method, uri, s, r["data"]["collectors"].clone(), said.to_owned(), world.lock().unwrap().patches));
        want.push((method, uri, StatusCode::OK, json!([url]), message.to_owned(), 1));
    }
    assert_eq!(got, want);
}

/// A watch the API server ends at once is opened again after a pause, not in a busy loop, and
/// the answer comes at the deadline.
#[tokio::test(start_paused = true)]
async fn a_watch_that_ends_at_once_is_reopened_after_a_pause() {
    let (app, world) = serve(job(), pods(), WAIT, LOCAL);
    world.lock().unwrap().trouble.watches = Watches::EndAtOnce;
    let mut seen = world.lock().unwrap().seen.subscribe();
    let start = Instant::now();
    let (s, r) = tokio::select! {
        answer = call(&app, "POST", "/v1alpha1/replicas", SCALE_UP) => answer,
        _ = seen.wait_for(|log| count(log, Seen::is_pod_watch) >= 100) => panic!("100 watches in {:?}", start.elapsed()),
    };
    assert_eq!(s, StatusCode::OK, "{r}");
    assert!(r["message"].as_str().unwrap().contains("not every replica was created within 30s"), "{r}");
    let elapsed = start.elapsed();
    assert!(elapsed >= WAIT && elapsed < WAIT + Duration::from_secs(1), "answered after {elapsed:?}");
    let watches: Vec<Instant> = seen.borrow().iter().filter(|s| s.is_pod_watch()).map(|s| s.at).collect();
    let pauses: Vec<Duration> = watches.windows(2).map(|t| t[1] - t[0]).collect();
    assert!(watches.len() < 30, "{} watches, pauses {pauses:?}", watches.len());
    assert!(pauses.iter().all(|p| !p.is_zero()), "reopened without a pause: {pauses:?}");
}

/// No step of the wait for pods outlasts the deadline: not the list, not opening the watch.
#[tokio::test(start_paused = true)]
async fn an_unanswered_pod_read_does_not_hold_the_answer_past_the_deadline() {
    let cases = [
        (
            "list",
            "/v1alpha1/replicas",
            SCALE_UP,
            Trouble { pod_reads_after_write: Reads::Unanswered, ..Default::default() },
        ),
        ("watch", "/v1alpha1/replicas", SCALE_UP, Trouble { watches: Watches::Unanswered, ..Default::default() }),
        (
            "report's list",
            "/v1alpha1/replicas/failed",
            REPORT,
            Trouble { pod_reads_after_write: Reads::Unanswered, ..Default::default() },
        ),
    ];
    let (mut got, mut want) = (vec![], vec![]);
    for (case, uri, body, trouble) in cases {
        let (app, world) = serve(job(), pods(), WAIT, LOCAL);
        world.lock().unwrap().trouble = trouble;
        let start = Instant::now();
        let outcome = match tokio::time::timeout(WAIT * 10, call(&app, "POST", uri, body)).await {
            Err(_) => format!("no answer in {:?}", WAIT * 10),
            Ok((s, r)) => format!("{s} after {:?}: {}", start.elapsed(), r["message"]),
        };
        got.push((case, outcome));
        let message = if uri.ends_with("failed") {
            "successfully recreate replicas; marked for replacement, not every replica was back within 30s"
        } else {
            "successfully create replicas; the job is changed, but not every replica was created within 30s"
        };
        want.push((case, format!("200 OK after {WAIT:?}: \"{message}\"")));
        assert_eq!(world.lock().unwrap().patches, 1, "{case}");
    }
    assert_eq!(got, want);
}
