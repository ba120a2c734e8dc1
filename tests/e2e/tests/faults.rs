//! The reconciler in the situations that used to break a job: a job submitted again under the
//! name of one whose pods are still there, and a job waiting for its AggregatorConfig.

use std::time::Duration;

use di_api::{DIJob, Phase};
use di_e2e::cluster::within;
use di_e2e::scenario::{Scenario, WAIT, names};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{DeleteParams, ListParams, PostParams, PropagationPolicy};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Api, ResourceExt};
use serde_json::json;

/// Whether the job's status has condition `type_` with status True.
fn has_condition(type_: &'static str) -> impl Fn(Option<&DIJob>) -> bool {
    move |job| {
        let conditions = job.and_then(|j| j.status.as_ref()).map(|s| s.conditions.as_slice()).unwrap_or_default();
        conditions.iter().any(|c| c.type_ == type_ && c.status == "True")
    }
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn a_job_submitted_again_under_its_name_ignores_its_predecessors_pods() {
    // Boxed: the scenario's future is large, and test threads have small stacks.
    Box::pin(submitted_again()).await;
}

async fn submitted_again() {
    let s = Scenario::new("again").await;
    let policy = json!({"cleanPodPolicy": "None"});
    s.submit("again", 1, 0, policy.clone()).await;
    let all = names("again", &["coordinator", "collector-0"]);
    s.wait_pods("again", &all).await;
    s.wait_phase("again", Phase::Running).await;
    s.nodes.exit(&s.ns, "again-coordinator", 0).await;
    let first = s.wait_phase("again", Phase::Succeeded).await;

    // Deleted, leaving its pods behind (cleanPodPolicy None kept them; orphaning keeps them for
    // good, where garbage collection would take them a little later), and submitted again.
    s.jobs
        .delete("again", &DeleteParams { propagation_policy: Some(PropagationPolicy::Orphan), ..Default::default() })
        .await
        .unwrap();
    // The garbage collector learns a new CRD's kind when it rediscovers resources (about 30 s),
    // and only then removes the orphan finalizer.
    let first_uid = first.uid().unwrap();
    let deleted = await_condition(s.jobs.clone(), "again", conditions::is_deleted(&first_uid));
    Box::pin(within(Duration::from_secs(120), "the first job to be deleted", deleted)).await.unwrap();
    let second = s.submit("again", 1, 0, policy).await;
    let blocked = await_condition(s.jobs.clone(), "again", has_condition("NamesTaken"));
    let job = Box::pin(within(WAIT, "the new job to wait for its names", blocked)).await.unwrap().unwrap();
    assert_eq!(
        job.status.and_then(|s| s.phase),
        Some(Phase::Created),
        "the old coordinator's success is not the new job's"
    );

    // Once the old pods are gone, the new job runs with pods of its own.
    let old = ListParams::default().labels(&format!("{}=again", di_api::contract::labels::JOB_NAME));
    s.pods.delete_collection(&DeleteParams::default(), &old).await.unwrap();
    s.services.delete_collection(&DeleteParams::default(), &old).await.unwrap();
    s.wait_phase("again", Phase::Running).await;
    let pods = s.wait_pods("again", &all).await;
    let owner = |pod: &Pod| pod.owner_references().iter().find(|r| r.controller == Some(true)).map(|r| r.uid.clone());
    for pod in &pods {
        assert_eq!(owner(pod), second.uid(), "{} belongs to the new job", pod.name_any());
    }
    // Released once the names are free: the status that says so follows the last pod's creation
    // (a pass that creates pods leaves the status to the next one).
    let released = await_condition(s.jobs.clone(), "again", |job: Option<&DIJob>| !has_condition("NamesTaken")(job));
    Box::pin(within(WAIT, "NamesTaken to be released once the names are free", released)).await.unwrap().unwrap();
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn a_job_waiting_for_its_aggregator_config_starts_as_soon_as_it_appears() {
    Box::pin(waiting_for_its_config()).await;
}

async fn waiting_for_its_config() {
    let s = Scenario::new("agconfig").await;
    let learner = json!({"learner": {"gpus": 2, "aggregatorConfig": "agg"}});
    s.submit("multi", 0, 1, learner).await;
    let waiting = await_condition(s.jobs.clone(), "multi", has_condition("AggregatorConfigNotFound"));
    Box::pin(within(WAIT, "the job to say its AggregatorConfig is missing", waiting)).await.unwrap();

    let configs: Api<di_api::AggregatorConfig> = Api::namespaced(s.cluster.client.clone(), &s.ns);
    let config = json!({
        "apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "AggregatorConfig",
        "metadata": {"name": "agg"},
        "spec": {"aggregator": {"template": {"spec": s.nodes.pod_spec()}}},
    });
    configs.create(&PostParams::default(), &serde_json::from_value(config).unwrap()).await.unwrap();
    // Without a watch on AggregatorConfigs the job would look again only at its periodic
    // requeue, five minutes later.
    let aggregator = await_condition(s.pods.clone(), "multi-aggregator-0", |pod: Option<&Pod>| pod.is_some());
    Box::pin(within(WAIT, "the aggregator", aggregator)).await.unwrap();
    // Its own Service follows it: a pass creates pods before their Services, so the pod can
    // be seen a moment before its Service is.
    let service = await_condition(s.services.clone(), "multi-aggregator-0", |svc: Option<&Service>| svc.is_some());
    Box::pin(within(WAIT, "the aggregator's Service", service)).await.unwrap();
}
