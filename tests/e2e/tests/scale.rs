//! The scale subresource: `kubectl scale dijob X --replicas N` and autoscalers set a role job's
//! collectors, read the collectors there are and find their pods by the status's selector; a job
//! with no collector template cannot be scaled, and says how to scale it instead.

use std::time::Duration;

use di_api::{DIJob, Phase};
use di_e2e::cluster::within;
use di_e2e::scenario::{Scenario, WAIT};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use serde_json::json;

/// Waits until job `name` has `n` collectors, all ready.
async fn wait_collectors(s: &Scenario, name: &str, n: i32, wait: Duration) -> DIJob {
    let want = format!("{n}/{n}");
    let cond = move |job: Option<&DIJob>| {
        let status = job.and_then(|j| j.status.as_ref());
        status.and_then(|s| s.collectors.as_deref()) == Some(want.as_str())
            && status.and_then(|s| s.collector_replicas) == Some(n)
    };
    let what = format!("job {name} to have {n} ready collectors");
    within(wait, &what, await_condition(s.jobs.clone(), name, cond)).await.unwrap().unwrap()
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn kubectl_scale_sets_a_role_jobs_collectors() {
    let s = Scenario::new("scale").await;
    s.submit("scaled", 1, 0, json!({})).await;
    s.wait_phase("scaled", Phase::Running).await;
    wait_collectors(&s, "scaled", 1, WAIT).await;

    // What `kubectl scale` sends: a merge patch of the Scale's replicas.
    let patch = json!({"spec": {"replicas": 3}});
    s.jobs.patch_scale("scaled", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("scaled");
    let job = wait_collectors(&s, "scaled", 3, WAIT).await;
    assert_eq!(job.spec.collector.and_then(|c| c.replicas), Some(3), "the scale wrote the job's own field");

    let scale = s.jobs.get_scale("scaled").await.unwrap();
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(3));
    let status = scale.status.expect("the scale's status");
    assert_eq!(status.replicas, 3);
    let selector = status.selector.expect("the collectors' selector");
    assert_eq!(selector, "dijob-name=scaled,replica-type=collector");
    // The selector finds the collectors and nothing else of the job.
    let pods = s.pods.list(&ListParams::default().labels(&selector)).await.unwrap();
    let mut names: Vec<String> = pods.items.iter().filter_map(|p| p.metadata.name.clone()).collect();
    names.sort();
    assert_eq!(names, ["scaled-collector-0", "scaled-collector-1", "scaled-collector-2"]);

    // Past the bound: the scale subresource reaches no webhook, so the CRD's schema refuses it,
    // and nothing of it is stored.
    let patch = json!({"spec": {"replicas": 1500}});
    let refused = s.jobs.patch_scale("scaled", &PatchParams::default(), &Patch::Merge(&patch)).await;
    let Err(kube::Error::Api(status)) = refused else { panic!("scaled past the bound: {refused:?}") };
    assert_eq!(status.code, 422, "{status:?}");
    assert!(status.message.contains("spec.collector.replicas"), "the field is named: {}", status.message);
    assert!(status.message.contains("1000"), "the bound is said: {}", status.message);
    let job = s.jobs.get("scaled").await.unwrap();
    assert_eq!(job.spec.collector.and_then(|c| c.replicas), Some(3));

    // Past the job's own limit, spec.collector.maxReplicas: the CRD's rule refuses it too.
    s.submit("limited", 1, 0, json!({"collector": {"minReplicas": 1, "maxReplicas": 4}})).await;
    let patch = json!({"spec": {"replicas": 5}});
    let refused = s.jobs.patch_scale("limited", &PatchParams::default(), &Patch::Merge(&patch)).await;
    let Err(kube::Error::Api(status)) = refused else { panic!("scaled past maxReplicas: {refused:?}") };
    assert_eq!(status.code, 422, "{status:?}");
    assert!(status.message.contains("may not exceed spec.collector.maxReplicas"), "{}", status.message);
    let patch = json!({"spec": {"replicas": 4}});
    s.jobs.patch_scale("limited", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("up to the limit");
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn a_job_without_collectors_cannot_be_scaled() {
    let s = Scenario::new("scale-tasks").await;
    let job = json!({
        "apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob",
        "metadata": {"name": "mesh"},
        "spec": {"tasks": [{"name": "worker", "type": "learner", "replicas": 2,
                            "template": {"spec": s.nodes.pod_spec()}}]},
    });
    s.jobs.create(&PostParams::default(), &serde_json::from_value(job).unwrap()).await.expect("job accepted");
    let patch = json!({"spec": {"replicas": 3}});
    let refused = s.jobs.patch_scale("mesh", &PatchParams::default(), &Patch::Merge(&patch)).await;
    let Err(kube::Error::Api(status)) = refused else { panic!("a task job was scaled: {refused:?}") };
    assert_eq!(status.code, 422, "{status:?}");
    assert!(status.message.contains("spec.collector.template"), "{}", status.message);
    assert!(status.message.contains("spec.tasks[].replicas"), "it says how to scale instead: {}", status.message);
    let job = s.jobs.get("mesh").await.unwrap();
    assert!(job.spec.collector.is_none(), "nothing of the refused scale was stored");
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn an_hpa_resolves_a_dijob_and_scales_its_collectors() {
    let s = Scenario::new("hpa").await;
    s.submit("autoscaled", 1, 0, json!({})).await;
    s.wait_phase("autoscaled", Phase::Running).await;
    // No metrics server here: an HPA whose minimum is above the job's collectors scales it to
    // that minimum without one, through the scale subresource.
    let hpa = json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "autoscaled"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJob", "name": "autoscaled"},
            "minReplicas": 2, "maxReplicas": 4,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                         "target": {"type": "Utilization", "averageUtilization": 80}}}],
        },
    });
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(s.cluster.client.clone(), &s.ns);
    hpas.create(&PostParams::default(), &serde_json::from_value(hpa).unwrap()).await.expect("HPA created");
    // The controller manager's discovery of the DIJob kind is refreshed every 30 s.
    wait_collectors(&s, "autoscaled", 2, Duration::from_secs(120)).await;
    let able = |hpa: Option<&HorizontalPodAutoscaler>| {
        let conditions = hpa.and_then(|h| h.status.as_ref()).and_then(|s| s.conditions.as_ref());
        conditions.is_some_and(|c| c.iter().any(|c| c.type_ == "AbleToScale" && c.status == "True"))
    };
    within(WAIT, "the HPA to be able to scale its DIJob", await_condition(hpas.clone(), "autoscaled", able))
        .await
        .unwrap()
        .unwrap();
    let status = hpas.get_status("autoscaled").await.unwrap().status.unwrap();
    assert_eq!(status.desired_replicas, 2);
}
