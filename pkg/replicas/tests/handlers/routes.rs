//! Each route with well-formed and malformed requests: the answers DI-engine expects, and
//! nothing changed by what is refused.

use axum::http::StatusCode;
use di_replicas::server::MAX_BODY;
use serde_json::json;

use crate::world::*;

#[tokio::test]
async fn get_lists_collectors_and_learners_as_urls() {
    let (app, _) = setup(LOCAL);
    for version in ["v1alpha1", "v1alpha2"] {
        let (status, reply) =
            call(&app, "GET", &format!("/{version}/replicas?namespace=ns&coordinator=job-coordinator"), b"").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            reply,
            json!({"success": true, "code": 0, "message": "successfully get replicas", "data": {
                "namespace": "ns", "coordinator": "job-coordinator",
                "collectors": ["job-collector-0.ns:22270", "job-collector-1.ns:22270"],
                "learners": ["job-learner-0.ns:22271"]}})
        );
    }
    let (status, reply) = call(&app, "GET", "/v1alpha1/replicas?namespace=ns&name=job-collector-1", b"").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(reply["data"]["collectors"], json!(["job-collector-1.ns:22270"]));
}

#[tokio::test]
async fn a_big_jobs_pods_are_read_in_pages_and_listed_whole() {
    let mut pods = vec![pod("job-coordinator", "coordinator", None, 22273)];
    pods.extend((0..250).map(|i| pod(&format!("job-collector-{i}"), "collector", Some(i), 22270)));
    let (app, world) = serve(job(), pods, std::time::Duration::ZERO, LOCAL);
    let (status, reply) = call(&app, "GET", "/v1alpha1/replicas?namespace=ns&coordinator=job-coordinator", b"").await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    let listed = reply["data"]["collectors"].as_array().unwrap();
    assert_eq!(listed.len(), 250);
    assert_eq!((&listed[0], &listed[249]), (&json!("job-collector-0.ns:22270"), &json!("job-collector-249.ns:22270")));
    let w = world.lock().unwrap();
    assert_eq!(count(&w.seen.borrow(), Seen::is_pod_read), 3, "pages of 100");
}

#[tokio::test]
async fn post_raises_the_desired_counts_and_answers_with_the_new_urls() {
    let (app, world) = setup(LOCAL);
    let body = br#"{"namespace": "ns", "coordinator": "job-coordinator", "collectors": {"replicas": 2}, "learners": {"replicas": 1, "gpus": "0"}}"#;
    let (status, reply) = call(&app, "POST", "/v1alpha1/replicas", body).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    assert_eq!(reply["success"], true);
    assert_eq!(reply["data"]["collectors"], json!(["job-collector-2.ns:22270", "job-collector-3.ns:22270"]));
    assert_eq!(reply["data"]["learners"], json!(["job-learner-1.ns:22271"]));
    let w = world.lock().unwrap();
    assert_eq!(w.job["spec"]["collector"]["replicas"], 4);
    assert_eq!(w.job["spec"]["learner"]["replicas"], 2);
    assert!(w.job["spec"]["learner"].get("gpus").is_none(), "gpus 0 is what the job has: nothing to change");
}

#[tokio::test(start_paused = true)]
async fn delete_lowers_the_counts_highest_index_first() {
    let (app, world) = serve(job(), pods(), WAIT, LOCAL);
    let body = br#"{"namespace": "ns", "coordinator": "job-coordinator", "collectors": {"replicas": 2}, "learners": {"replicas": 0}}"#;
    let (status, reply) = call(&app, "DELETE", "/v1alpha1/replicas", body).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    assert_eq!(reply["message"].as_str().unwrap().split(';').next(), Some("successfully delete replicas"));
    // No reconciler removes the pods: their URLs, as listed, are the ones going.
    assert_eq!(reply["data"]["collectors"], json!(["job-collector-1.ns:22270", "job-collector-0.ns:22270"]));
    assert_eq!(world.lock().unwrap().job["spec"]["collector"]["replicas"], 0);
}

#[tokio::test]
async fn failed_marks_the_pods_for_replacement() {
    let (app, world) = setup(LOCAL);
    let body = br#"{"namespace": "ns", "coordinator": "job-coordinator", "collectors": ["job-collector-1.ns:22270"], "learners": ["job-learner-0"]}"#;
    let (status, reply) = call(&app, "POST", "/v1alpha1/replicas/failed", body).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    assert_eq!(reply["data"]["collectors"], json!(["job-collector-1.ns:22270"]));
    assert_eq!(reply["data"]["learners"], json!(["job-learner-0.ns:22271"]));
    let w = world.lock().unwrap();
    assert_eq!(
        w.job["metadata"]["annotations"]["diengine.opendilab.org/replace"],
        "job-collector-1=uid-job-collector-1,job-learner-0=uid-job-learner-0"
    );
}

#[tokio::test]
async fn bad_input_gets_the_error_envelope_and_changes_nothing() {
    let (app, world) = setup(LOCAL);
    let post = |body: &'static [u8]| {
        let app = app.clone();
        async move { call(&app, "POST", "/v1alpha1/replicas", body).await }
    };
    let (s, r) = post(b"collectors please").await;
    assert_error(s, &r, StatusCode::BAD_REQUEST, "the body is not a valid request");
    let (s, r) =
        post(br#"{"namespace": "ns", "coordinator": "job-coordinator", "collectors": {"replicas": "two"}}"#).await;
    assert_error(s, &r, StatusCode::BAD_REQUEST, "invalid type: string \"two\"");
    let (s, r) =
        post(br#"{"namespace": "ns", "coordinator": "job-coordinator", "collectors": {"replicas": -1}}"#).await;
    assert_error(s, &r, StatusCode::BAD_REQUEST, "collectors.replicas: -1: must be 0 or more");
    let (s, r) =
        post(br#"{"namespace": "ns", "coordinator": "job-coordinator", "learners": {"replicas": 1, "gpus": "0.5"}}"#)
            .await;
    assert_error(s, &r, StatusCode::BAD_REQUEST, "GPUs are whole devices");
    let (s, r) =
        post(br#"{"namespace": "ns", "coordinator": "job-coordinator", "learners": {"replicas": 1, "gpus": "2"}}"#)
            .await;
    assert_error(
        s,
        &r,
        StatusCode::CONFLICT,
        "the job's learners have 0 GPU(s) each; learners with 2 cannot join them",
    );
    let (s, r) =
        post(br#"{"namespace": "ns", "coordinator": "job-coordinator", "collectors": {"replicas": 1, "cpus": "4"}}"#)
            .await;
    assert_error(s, &r, StatusCode::CONFLICT, "the job's collectors get cpu 2 from their template, not 4");
    let (s, r) =
        post(br#"{"namespace": "ns", "coordinator": "job-coordinator", "collectors": {"replicas": 999}}"#).await;
    assert_error(s, &r, StatusCode::CONFLICT, "1001 collectors is more than the 1000 a job may have");
    let (s, r) =
        post(br#"{"namespace": "other", "coordinator": "job-coordinator", "collectors": {"replicas": 1}}"#).await;
    assert_error(s, &r, StatusCode::FORBIDDEN, "this endpoint serves job ns/job only");
    let (s, r) =
        post(br#"{"namespace": "ns", "coordinator": "other-coordinator", "collectors": {"replicas": 1}}"#).await;
    assert_error(s, &r, StatusCode::FORBIDDEN, "not ns/other-coordinator");

    let (s, r) = call(
        &app,
        "DELETE",
        "/v1alpha1/replicas",
        br#"{"namespace": "ns", "coordinator": "job-coordinator", "collectors": {"replicas": 3}}"#,
    )
    .await;
    assert_error(s, &r, StatusCode::BAD_REQUEST, "cannot delete 3 collectors: the job has 2");
    let (s, r) = call(
        &app,
        "POST",
        "/v1alpha1/replicas/failed",
        br#"{"namespace": "ns", "coordinator": "job-coordinator", "collectors": ["job-collector-7"]}"#,
    )
    .await;
    assert_error(s, &r, StatusCode::NOT_FOUND, "no collector pod \"job-collector-7\" in job job");
    let (s, r) = call(
        &app,
        "POST",
        "/v1alpha1/replicas/failed",
        br#"{"namespace": "ns", "coordinator": "job-coordinator", "learners": ["job-collector-0"]}"#,
    )
    .await;
    assert_error(s, &r, StatusCode::NOT_FOUND, "no learner pod \"job-collector-0\"");

    let big = vec![b' '; MAX_BODY + 1];
    let (s, r) = call(&app, "POST", "/v1alpha1/replicas", &big).await;
    assert_error(s, &r, StatusCode::PAYLOAD_TOO_LARGE, "");

    let (s, r) = call(&app, "GET", "/v1alpha1/replicas?namespace=ns&aggregator=job-learner-0", b"").await;
    assert_error(s, &r, StatusCode::NOT_FOUND, "no aggregator pod \"job-learner-0\" in job job");
    let (s, r) = call(&app, "GET", "/v1alpha1/replicas?coordinator=job-coordinator", b"").await;
    assert_error(s, &r, StatusCode::BAD_REQUEST, "the namespace parameter is required");
    let (s, r) = call(&app, "PUT", "/v1alpha1/replicas", b"{}").await;
    assert_error(s, &r, StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
    let (s, r) = call(&app, "GET", "/v1alpha3/replicas", b"").await;
    assert_error(s, &r, StatusCode::NOT_FOUND, "no such route");

    let w = world.lock().unwrap();
    assert_eq!(w.patches, 0, "no bad request changed the job");
    assert_eq!(w.job, job());
}

#[tokio::test]
async fn writes_come_from_the_coordinators_own_address_only() {
    let body = br#"{"namespace": "ns", "coordinator": "job-coordinator", "collectors": {"replicas": 1}}"#;
    let (network, world) = setup(NETWORK);
    for (method, uri, body) in [
        ("POST", "/v1alpha1/replicas", &body[..]),
        ("DELETE", "/v1alpha2/replicas", &body[..]),
        ("POST", "/v1alpha1/replicas/failed", REPORT),
    ] {
        let (s, r) = call(&network, method, uri, body).await;
        assert_error(s, &r, StatusCode::FORBIDDEN, "changed by its coordinator's own containers, at 127.0.22.80:22281");
    }
    // Reads are open to the job's pods (an aggregator asks for its learners).
    let (s, _) = call(&network, "GET", "/v1alpha1/replicas?namespace=ns&coordinator=job-coordinator", b"").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(world.lock().unwrap().patches, 0);
    let (own, _) = setup(LOCAL);
    let (s, r) = call(&own, "POST", "/v1alpha1/replicas", body).await;
    assert_eq!(s, StatusCode::OK, "{r}");
}

/// A job deleted and submitted again under its name is another job: its predecessor's
/// coordinator, still terminating, changes nothing of it.
#[tokio::test]
async fn a_job_submitted_again_is_not_changed_by_its_predecessors_endpoint() {
    for wrote_before in [false, true] {
        let (app, world) = setup(LOCAL);
        if wrote_before {
            // The endpoint knows its pod is the coordinator, from a write to its own job.
            let (s, r) = call(&app, "POST", "/v1alpha1/replicas", SCALE_UP).await;
            assert_eq!(s, StatusCode::OK, "{r}");
        }
        let patches = world.lock().unwrap().patches;
        world.lock().unwrap().job["metadata"]["uid"] = json!("the-new-job");
        for (uri, body) in [("/v1alpha1/replicas", SCALE_UP), ("/v1alpha1/replicas/failed", REPORT)] {
            let (s, r) = call(&app, "POST", uri, body).await;
            assert_error(s, &r, StatusCode::GONE, "DIJob job of UID job-uid is gone");
        }
        assert_eq!(world.lock().unwrap().patches, patches, "nothing written to the new job");
    }
}

#[tokio::test]
async fn concurrent_requests_lose_no_update() {
    let (app, world) = setup(LOCAL);
    let mut tasks = vec![];
    for i in 0..30 {
        let app = app.clone();
        let (method, n) = if i % 3 == 0 { ("DELETE", 1) } else { ("POST", 2) };
        tasks.push(tokio::spawn(async move {
            let body = format!(
                r#"{{"namespace": "ns", "coordinator": "job-coordinator", "collectors": {{"replicas": {n}}}}}"#
            );
            let (status, _) = call(&app, method, "/v1alpha1/replicas", body.as_bytes()).await;
            (method, n, status)
        }));
    }
    let mut expected = 2;
    for task in tasks {
        let (method, n, status) = task.await.unwrap();
        if status == StatusCode::OK {
            expected += if method == "POST" { n } else { -n };
        }
    }
    assert_eq!(world.lock().unwrap().job["spec"]["collector"]["replicas"], expected);
}

/// Serde would read a JSON array as a request, field by field; a count near `i64::MAX` must
/// not overflow the new total.
#[tokio::test]
async fn arrays_and_huge_counts_are_refused() {
    let (app, world) = setup(LOCAL);
    for (uri, body) in [
        ("/v1alpha1/replicas", &b"[]"[..]),
        ("/v1alpha1/replicas", br#"["ns", "job-coordinator", {"replicas": 1}]"#),
        ("/v1alpha1/replicas/failed", b"[]"),
    ] {
        let (s, r) = call(&app, "POST", uri, body).await;
        assert_error(s, &r, StatusCode::BAD_REQUEST, "the body is not a JSON object");
    }
    for role in ["collectors", "learners"] {
        let body = json!({"namespace": "ns", "coordinator": "job-coordinator", role: {"replicas": i64::MAX}});
        let (s, r) = call(&app, "POST", "/v1alpha1/replicas", body.to_string().as_bytes()).await;
        assert_error(s, &r, StatusCode::CONFLICT, "is more than the 1000 a job may have");
    }
    assert_eq!(world.lock().unwrap().patches, 0);
}

#[tokio::test]
async fn health() {
    let (app, _) = setup(NETWORK);
    let (status, reply) = call(&app, "GET", "/healthz", b"").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(reply, json!({"success": true, "code": 0, "message": "ok", "data": null}));
}

/// A missing `namespace` or `coordinator` makes a malformed request (400), not one for another
/// job (403).
#[tokio::test]
async fn a_body_without_namespace_or_coordinator_is_malformed() {
    let (app, world) = setup(LOCAL);
    for (method, uri, body, missing) in [
        (
            "POST",
            "/v1alpha1/replicas",
            &br#"{"coordinator": "job-coordinator", "collectors": {"replicas": 1}}"#[..],
            "namespace",
        ),
        ("POST", "/v1alpha1/replicas", br#"{"namespace": "ns", "collectors": {"replicas": 1}}"#, "coordinator"),
        ("DELETE", "/v1alpha1/replicas", br#"{"collectors": {"replicas": 1}}"#, "namespace"),
        (
            "POST",
            "/v1alpha1/replicas/failed",
            br#"{"namespace": "ns", "collectors": ["job-collector-0"]}"#,
            "coordinator",
        ),
        ("POST", "/v1alpha1/replicas", br#"{"namespace": "", "coordinator": "job-coordinator"}"#, "namespace"),
    ] {
        let (s, r) = call(&app, method, uri, body).await;
        assert_error(s, &r, StatusCode::BAD_REQUEST, &format!("{missing} is missing"));
    }
    assert_eq!(world.lock().unwrap().patches, 0);
}
