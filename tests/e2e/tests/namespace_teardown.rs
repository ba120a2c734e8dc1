//! A namespace deleted under its running jobs, as a CI pipeline or a user cleaning up does: the
//! namespace controller deletes the jobs' pods while the API server refuses every create there.
//! The jobs go with their namespace: no restart, no failure, and at most a handful of creates
//! sent only to be refused (counted from the orchestrator's own request metrics).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use di_api::{DIJob, Phase};
use di_e2e::cluster::{not_applicable, within};
use di_e2e::history::pod_uids;
use di_e2e::nodes::real_nodes;
use di_e2e::ports::free_port;
use di_e2e::scenario::{Scenario, names};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use serde_json::json;

/// Creates the API server refused the orchestrator, of any resource, from its `/metrics`.
async fn refused_creates(probe: &str) -> f64 {
    let text = reqwest::get(format!("{probe}/metrics")).await.unwrap().text().await.unwrap();
    text.lines()
        .filter(|l| l.starts_with("di_orchestrator_api_requests_refused_total{") && l.contains(r#"verb="POST""#))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Every (job, phase, restarts) the namespace's jobs showed, from a watch.
type Seen = Arc<Mutex<Vec<(String, Option<Phase>, Option<i32>)>>>;

fn follow_statuses(jobs: &Api<DIJob>) -> (Seen, tokio::task::JoinHandle<()>) {
    let seen = Seen::default();
    let record = seen.clone();
    let events = watcher(jobs.clone(), watcher::Config::default()).default_backoff().applied_objects();
    let task = tokio::spawn(events.for_each(move |job| {
        if let Ok(job) = job {
            let status = job.status.as_ref();
            let entry = (job.name_any(), status.and_then(|s| s.phase), status.and_then(|s| s.restarts));
            record.lock().unwrap().push(entry);
        }
        std::future::ready(())
    }));
    (seen, task)
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn a_namespace_deleted_under_running_jobs_takes_them_with_no_restart() {
    // Boxed: the scenario's future is large, and test threads have small stacks.
    Box::pin(namespace_deleted()).await;
}

async fn namespace_deleted() {
    if real_nodes() {
        // The deployed orchestrator serves every namespace: its metrics count other scenarios'
        // requests too.
        not_applicable("counts the requests of an orchestrator of this scenario's own");
        return;
    }
    let port = free_port().unwrap();
    let probe = format!("--probe-addr=127.0.0.1:{port}");
    let s = Scenario::with_args("teardown", &[&probe]).await;
    let probe = format!("http://127.0.0.1:{port}");

    s.submit("roles", 3, 1, json!({})).await;
    let template = json!({"spec": s.nodes.pod_spec()});
    let tasks = json!({
        "apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob",
        "metadata": {"name": "tasks"},
        "spec": {"tasks": [
            {"type": "learner", "template": template},
            {"type": "collector", "replicas": 20, "template": template},
        ]},
    });
    let gvk = GroupVersionKind::gvk("diengine.opendilab.org", "v2alpha1", "DIJob");
    let v2: Api<DynamicObject> = Api::namespaced_with(s.cluster.client.clone(), &s.ns, &ApiResource::from_gvk(&gvk));
    v2.create(&PostParams::default(), &serde_json::from_value(tasks).unwrap()).await.expect("task job accepted");
    s.wait_phase("roles", Phase::Running).await;
    s.wait_pods("roles", &names("roles", &["coordinator", "collector-0", "collector-1", "collector-2", "learner-0"]))
        .await;
    s.wait_phase("tasks", Phase::Running).await;

    let created = pod_uids(&s.pods).await;
    let (seen, follower) = follow_statuses(&s.jobs);
    let refused_before = refused_creates(&probe).await;
    let logged_before = s.orchestrator.log().len();
    let namespaces: Api<Namespace> = Api::all(s.cluster.client.clone());
    let namespace = namespaces.get(&s.ns).await.unwrap();
    namespaces.delete(&s.ns, &DeleteParams::default()).await.unwrap();
    let uid = namespace.uid().unwrap();
    let gone = await_condition(namespaces.clone(), &s.ns, conditions::is_deleted(&uid));
    Box::pin(within(Duration::from_secs(180), "the namespace to be deleted", gone)).await.unwrap();
    follower.abort();

    let refused = refused_creates(&probe).await - refused_before;
    assert!(refused <= 4.0, "{refused} creates refused while the namespace was deleted: at most a handful");
    let seen = seen.lock().unwrap().clone();
    let restarted: Vec<_> = seen
        .iter()
        .filter(|(_, phase, restarts)| {
            matches!(phase, Some(Phase::Restarting | Phase::Failed)) || restarts.is_some_and(|r| r > 0)
        })
        .collect();
    assert!(restarted.is_empty(), "the jobs restarted or failed as their namespace went: {restarted:?}");
    let twice: Vec<_> =
        created.lock().unwrap().iter().filter(|(_, uids)| uids.len() > 1).map(|(n, _)| n.clone()).collect();
    assert!(twice.is_empty(), "pods created again while their namespace went: {twice:?}");
    let log = s.orchestrator.log();
    let since = log.get(logged_before..).unwrap_or_default();
    assert!(!since.contains("reconcile failed"), "a pass failed as the namespace went:\n{since}");
}
