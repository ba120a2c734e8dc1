//! The orchestrator killed while it makes a gang's PodGroup and pods: after its restart each pod
//! was created once, the gang has its one PodGroup and every pod joined it, and deleting the job
//! leaves nothing behind. Alone in its own test binary, as `crash.rs` is: on kind the kill takes
//! the deployed orchestrator away from every other scenario.

use std::collections::BTreeSet;

use di_api::Phase;
use di_e2e::cluster::within;
use di_e2e::history::{created_once, pod_uids};
use di_e2e::scenario::{Scenario, WAIT};
use futures::StreamExt;
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use serde_json::json;

const WORKERS: u32 = 12;

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn an_orchestrator_killed_mid_gang_leaves_one_pod_group_and_nothing_after_delete() {
    let mut s = Scenario::new("crash-gangs").await;
    let created = pod_uids(&s.pods).await;
    let job = json!({
        "apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob",
        "metadata": {"name": "mesh"},
        "spec": {"tasks": [{"name": "worker", "type": "learner", "replicas": WORKERS, "template": {"spec": s.nodes.pod_spec()}}]},
    });
    s.jobs.create(&PostParams::default(), &serde_json::from_value(job).unwrap()).await.expect("job accepted");
    // Kill it while it is still creating pods.
    let mut pods =
        std::pin::pin!(watcher(s.pods.clone(), watcher::Config::default()).default_backoff().applied_objects());
    within(WAIT, "the first pods", async {
        let mut names = BTreeSet::new();
        while names.len() < 2 {
            if let Some(Ok(pod)) = pods.next().await {
                names.insert(pod.name_any());
            }
        }
    })
    .await;
    s.orchestrator.kill().await;
    s.orchestrator.restart().await;

    let expected: Vec<String> = (0..WORKERS).map(|i| format!("mesh-worker-{i}")).collect();
    let listed = s.wait_pods("mesh", &expected).await;
    s.wait_phase("mesh", Phase::Running).await;
    created_once(&created, &listed, &expected, "after a restart mid-gang");

    let groups: Api<PodGroup> = Api::namespaced(s.cluster.client.clone(), &s.ns);
    let made = groups.list(&ListParams::default()).await.unwrap().items;
    let shape: Vec<(String, Option<i32>)> =
        made.iter().map(|g| (g.name_any(), g.spec.scheduling_policy.gang.as_ref().map(|g| g.min_count))).collect();
    assert_eq!(shape, [("mesh".to_string(), Some(WORKERS as i32))]);
    for pod in &listed {
        let group = pod.spec.as_ref().and_then(|s| s.scheduling_group.as_ref()).and_then(|g| g.pod_group_name.clone());
        assert_eq!(group.as_deref(), Some("mesh"), "{} joined no gang", pod.name_any());
    }

    s.jobs.delete("mesh", &DeleteParams::foreground()).await.unwrap();
    // Deleted in the foreground, the job goes only after every object that blocks its deletion.
    let job_gone = await_condition(s.jobs.clone(), "mesh", |job: Option<&di_api::DIJob>| job.is_none());
    within(WAIT, "the job to be gone", job_gone).await.unwrap();
    assert_eq!(s.pods.list(&ListParams::default()).await.unwrap().items.len(), 0, "pods left");
    assert_eq!(groups.list(&ListParams::default()).await.unwrap().items.len(), 0, "PodGroups left");
}
