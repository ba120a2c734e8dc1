//! The replica endpoint as a local process with the job's own ServiceAccount, against a real API
//! server and the reconciler: POST adds pods that GET then lists, DELETE removes them, `failed`
//! replaces them, another job is refused, and the RBAC the reconciler created is enough and no
//! more.

use std::time::Duration;

use di_api::{DIJob, Phase};
use di_e2e::controlplane::admin_client;
use di_e2e::orchestrator::Sidecar;
use di_e2e::scenario::{Scenario, names};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

/// Sends a request the way DI-engine does: a JSON body and no Content-Type.
async fn call(method: reqwest::Method, url: &str, body: Option<Value>) -> (u16, Value) {
    let client = reqwest::Client::new();
    let mut request = client.request(method, url);
    if let Some(body) = body {
        request = request.body(serde_json::to_vec(&body).unwrap());
    }
    let response = request.send().await.expect("the endpoint answers");
    let status = response.status().as_u16();
    (status, response.json().await.expect("an envelope"))
}

async fn ready(sidecar: &Sidecar) {
    for _ in 0..100 {
        if reqwest::get(format!("{}/healthz", sidecar.url)).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the replica endpoint did not start: {}", sidecar.log());
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn a_coordinator_scales_its_own_job() {
    let s = Scenario::new("replicas").await;
    s.submit("scaled", 1, 0, json!({})).await;
    s.wait_pods("scaled", &names("scaled", &["coordinator", "collector-0"])).await;
    s.wait_phase("scaled", Phase::Running).await;
    let sidecar = Sidecar::start(&s.cluster, &s.ns, "scaled").await;
    ready(&sidecar).await;
    let base = format!("{}/v1alpha1/replicas", sidecar.url);
    let ns = s.ns.clone();

    // DI-engine's init request: two more collectors, one learner, "gpus" as a string.
    let (status, reply) = call(
        reqwest::Method::POST,
        &base,
        Some(json!({"namespace": ns, "coordinator": "scaled-coordinator",
                    "collectors": {"replicas": 2}, "learners": {"replicas": 1, "gpus": "0"}})),
    )
    .await;
    assert_eq!(status, 200, "{reply}\n{}", sidecar.log());
    assert_eq!(reply["success"], true);
    assert_eq!(reply["message"], "successfully create replicas", "the reconciler converged within the wait");
    assert_eq!(
        reply["data"]["collectors"],
        json!([format!("scaled-collector-1.{ns}:22270"), format!("scaled-collector-2.{ns}:22270")])
    );
    assert_eq!(reply["data"]["learners"], json!([format!("scaled-learner-0.{ns}:22271")]));
    s.wait_pods("scaled", &names("scaled", &["coordinator", "collector-0", "collector-1", "collector-2", "learner-0"]))
        .await;

    let (status, reply) =
        call(reqwest::Method::GET, &format!("{base}?namespace={ns}&coordinator=scaled-coordinator"), None).await;
    assert_eq!(status, 200);
    assert_eq!(reply["data"]["collectors"].as_array().unwrap().len(), 3);
    assert_eq!(reply["data"]["learners"], json!([format!("scaled-learner-0.{ns}:22271")]));

    // Give one back: the highest index goes.
    let (status, reply) = call(
        reqwest::Method::DELETE,
        &base,
        Some(json!({"namespace": ns, "coordinator": "scaled-coordinator", "collectors": {"replicas": 1}, "learners": {"replicas": 0}})),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["data"]["collectors"], json!([format!("scaled-collector-2.{ns}:22270")]));
    s.wait_pods("scaled", &names("scaled", &["coordinator", "collector-0", "collector-1", "learner-0"])).await;

    // Report a collector as failed (by its URL, as DI-engine knows it): it is replaced.
    let before = s.pods.get("scaled-collector-1").await.unwrap().uid().unwrap();
    let (status, reply) = call(
        reqwest::Method::POST,
        &format!("{}/v1alpha1/replicas/failed", sidecar.url),
        Some(json!({"namespace": ns, "coordinator": "scaled-coordinator", "collectors": [format!("scaled-collector-1.{ns}:22270")], "learners": []})),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["message"], "successfully recreate replicas");
    let after = s.pods.get("scaled-collector-1").await.unwrap().uid().unwrap();
    assert_ne!(before, after, "the reported pod was replaced");
    let job: DIJob = s.jobs.get("scaled").await.unwrap();
    assert_eq!((job.spec.collector_replicas(), job.spec.learner_replicas()), (2, 1));

    // Another job is not this endpoint's business.
    let (status, reply) = call(
        reqwest::Method::POST,
        &base,
        Some(json!({"namespace": ns, "coordinator": "other-coordinator", "collectors": {"replicas": 1}})),
    )
    .await;
    assert_eq!((status, reply["success"].clone(), reply["code"].clone()), (403, json!(false), json!(1)));
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn concurrent_requests_through_the_real_api_server_lose_no_update() {
    let s = Scenario::new("replicas-race").await;
    s.submit("raced", 0, 0, json!({})).await;
    s.wait_phase("raced", Phase::Running).await;
    let sidecar = Sidecar::start(&s.cluster, &s.ns, "raced").await;
    ready(&sidecar).await;
    let url = format!("{}/v1alpha1/replicas", sidecar.url);
    let mut tasks = vec![];
    for i in 0..12 {
        let (url, ns) = (url.clone(), s.ns.clone());
        tasks.push(tokio::spawn(async move {
            let n = 1 + i % 2;
            let body = json!({"namespace": ns, "coordinator": "raced-coordinator", "collectors": {"replicas": n}});
            let (status, _) = call(reqwest::Method::POST, &url, Some(body)).await;
            if status == 200 { n } else { 0 }
        }));
    }
    let mut accepted = 0;
    for t in tasks {
        accepted += t.await.unwrap();
    }
    assert_eq!(accepted, 18, "every request is accepted");
    let job: DIJob = s.jobs.get("raced").await.unwrap();
    assert_eq!(job.spec.collector_replicas(), accepted);
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn the_sidecars_identity_is_enough_and_no_more() {
    let s = Scenario::new("replicas-rbac").await;
    s.submit("mine", 1, 0, json!({})).await;
    s.submit("theirs", 0, 0, json!({})).await;
    s.wait_pods("mine", &names("mine", &["coordinator", "collector-0"])).await;
    s.wait_pods("theirs", &names("theirs", &["coordinator"])).await;
    let sidecar = Sidecar::start(&s.cluster, &s.ns, "mine").await;
    let client = admin_client(&sidecar.kubeconfig).await.unwrap();
    let jobs: Api<DIJob> = Api::namespaced(client.clone(), &s.ns);
    let pods: Api<Pod> = Api::namespaced(client, &s.ns);

    // Enough: read and patch its own job, read the namespace's pods.
    jobs.get("mine").await.expect("reads its own job");
    let scale = json!({"spec": {"collector": {"replicas": 1}}});
    jobs.patch("mine", &PatchParams::default(), &Patch::Merge(&scale)).await.expect("patches its own job");
    pods.list(&Default::default()).await.expect("lists pods");

    // No more: not another job, not a pod write, not a delete of its own job.
    let forbidden = |r: Result<(), kube::Error>, what: &str| match r {
        Err(kube::Error::Api(e)) if e.code == 403 => {}
        other => panic!("{what} must be forbidden, got {other:?}"),
    };
    forbidden(jobs.get("theirs").await.map(|_| ()), "reading another job");
    forbidden(
        jobs.patch("theirs", &PatchParams::default(), &Patch::Merge(&scale)).await.map(|_| ()),
        "patching another job",
    );
    forbidden(jobs.delete("mine", &DeleteParams::default()).await.map(|_| ()), "deleting its own job");
    forbidden(pods.delete("mine-collector-0", &DeleteParams::default()).await.map(|_| ()), "deleting a pod");
    forbidden(jobs.list(&Default::default()).await.map(|_| ()), "listing jobs");
}
