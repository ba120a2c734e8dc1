//! The names and URLs the endpoint answers are the ones the reconciler gives, whatever the
//! job is called and however its learners get their GPUs.

use std::time::Duration;

use axum::http::StatusCode;
use di_api::contract::{Role, names};
use serde_json::{Value, json};

use crate::world::*;

/// The aggregator of logic learner `i` and its URL, as the reconciler names its Service.
fn aggregator_url(job: &str, index: u32) -> String {
    names::url(&names::replica(job, Role::Aggregator, index), "ns", Role::Aggregator.default_port())
}

/// A job whose learners have two GPUs: each is an aggregator in front of DDP learners.
fn multi_gpu_job(name: &str) -> Value {
    job_named(name, json!({"replicas": 1, "gpus": 2, "template": {"spec": container()}}))
}

/// What the reconciler runs for `multi_gpu_job(name)`: one collector is enough here.
fn multi_gpu_pods(job: &str) -> Vec<Value> {
    let aggregator = names::replica(job, Role::Aggregator, 0);
    let ddp = names::ddp_learner(job, 0, 0);
    vec![
        pod_of(job, &names::coordinator(job), "coordinator", None, &[("di-port", 22273)]),
        pod_of(job, &names::replica(job, Role::Collector, 0), "collector", Some(0), &[("di-port", 22270)]),
        pod_of(job, &aggregator, "aggregator", Some(0), &[("di-port", 22272)]),
        pod_of(job, &ddp, "ddp-learner", Some(0), &[("di-port", 22271), ("gpu-port-1", 22272)]),
    ]
}

/// Job names that contain a role's name, or are one, get the names the reconciler gives.
#[tokio::test(start_paused = true)]
async fn jobs_named_like_roles_get_their_own_replica_names() {
    for job in ["x-learner-y", "a-collector-b", "learner", "x-aggregator-y"] {
        let (app, world) = serve(multi_gpu_job(job), multi_gpu_pods(job), WAIT, LOCAL);
        let coordinator = names::coordinator(job);
        let collector = names::url(&names::replica(job, Role::Collector, 0), "ns", 22270);

        let (s, r) =
            call(&app, "GET", &format!("/v1alpha1/replicas?namespace=ns&coordinator={coordinator}"), b"").await;
        assert_eq!(s, StatusCode::OK, "{job}: {r}");
        assert_eq!(r["data"]["collectors"], json!([collector]), "{job}");
        assert_eq!(r["data"]["learners"], json!([aggregator_url(job, 0)]), "{job}");

        let aggregator = names::replica(job, Role::Aggregator, 0);
        let (s, r) = call(&app, "GET", &format!("/v1alpha1/replicas?namespace=ns&aggregator={aggregator}"), b"").await;
        assert_eq!(s, StatusCode::OK, "{job}: {r}");
        let ddp = names::ddp_learner(job, 0, 0);
        assert_eq!(r["data"]["learners"], json!([format!("{ddp}.ns:22271"), format!("{ddp}.ns:22272")]), "{job}");

        // The aggregator is still there (no reconciler): its URL is the one going, and not gone yet.
        let body = json!({"namespace": "ns", "coordinator": coordinator, "learners": {"replicas": 1}});
        let (s, r) = call(&app, "DELETE", "/v1alpha1/replicas", body.to_string().as_bytes()).await;
        assert_eq!(s, StatusCode::OK, "{job}: {r}");
        assert_eq!(r["data"]["learners"], json!([aggregator_url(job, 0)]), "{job}");
        assert!(r["message"].as_str().unwrap().contains("not every replica was deleted"), "{job}: {r}");

        // Index 0 is the aggregator still running; index 1 is planned.
        let body = json!({"namespace": "ns", "coordinator": coordinator, "learners": {"replicas": 2, "gpus": "2"}});
        let (s, r) = call(&app, "POST", "/v1alpha1/replicas", body.to_string().as_bytes()).await;
        assert_eq!(s, StatusCode::OK, "{job}: {r}");
        assert_eq!(r["data"]["learners"], json!([aggregator_url(job, 0), aggregator_url(job, 1)]), "{job}");
        assert_eq!(world.lock().unwrap().job["spec"]["learner"]["replicas"], 2, "{job}");
    }
}

/// Every learner URL the endpoint plans names the Service the reconciler creates: an
/// aggregator's whenever the learners have more than one GPU, however the job says so.
#[tokio::test]
async fn planned_learner_urls_name_the_reconcilers_services() {
    let learner_gpus = |gpus: &str| {
        let limits = json!({"nvidia.com/gpu": gpus});
        json!({"containers": [{"name": "di-container", "image": "ding", "resources": {"limits": limits}}]})
    };
    let cases = [
        ("the spec's gpus", json!({"replicas": 0, "gpus": 2, "template": {"spec": container()}}), "2"),
        ("the template's GPUs", json!({"replicas": 0, "template": {"spec": learner_gpus("2")}}), "2"),
        ("the request's gpus", json!({"replicas": 0, "template": {"spec": container()}}), "2"),
        ("one GPU", json!({"replicas": 0, "template": {"spec": learner_gpus("1")}}), "1"),
    ];
    let (mut got, mut want) = (vec![], vec![]);
    for (case, learner, gpus) in cases {
        // The reconciler runs no learner yet.
        let (app, _) = serve(job_named("job", learner), pods()[..3].to_vec(), Duration::ZERO, LOCAL);
        let body =
            json!({"namespace": "ns", "coordinator": "job-coordinator", "learners": {"replicas": 2, "gpus": gpus}});
        let (s, r) = call(&app, "POST", "/v1alpha1/replicas", body.to_string().as_bytes()).await;
        assert_eq!(s, StatusCode::OK, "{case}: {r}");
        got.push((case, r["data"]["learners"].clone()));
        let urls: Vec<String> = if gpus == "1" {
            (0..2).map(|i| names::url(&names::replica("job", Role::Learner, i), "ns", 22271)).collect()
        } else {
            (0..2).map(|i| aggregator_url("job", i)).collect()
        };
        want.push((case, json!(urls)));
    }
    assert_eq!(got, want);
}
