//! Clusters migrated from DI-orchestrator 0.2 and 1.x: their CRD replaced by ours through each
//! install path, with their jobs still stored. The CRDs here are written from what those
//! releases installed (one version each, served and stored; 0.2's with a conversion webhook whose
//! Service went with it), not copied from them.
//!
//! One test: it replaces the cluster's DIJob CRD, so nothing else may run beside it (cargo runs
//! test binaries one after another), and it leaves ours installed.

use std::time::Duration;

use di_api::Phase;
use di_e2e::cluster::{MANAGER, TestCluster, connect, within};
use di_e2e::nodes::Nodes;
use di_e2e::orchestrator::Orchestrator;
use di_e2e::scenario::WAIT;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use kube::runtime::wait::{await_condition, conditions};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

const CRD: &str = "dijobs.diengine.opendilab.org";

/// The DIJob CRD of an older release: `version` alone, served and stored, with an open schema;
/// with DI-orchestrator 0.2's conversion webhook when `webhook`.
fn old_crd(version: &str, webhook: bool) -> Value {
    let open = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    let mut crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD},
        "spec": {
            "group": "diengine.opendilab.org", "scope": "Namespaced",
            "names": {"kind": "DIJob", "listKind": "DIJobList", "plural": "dijobs", "singular": "dijob", "shortNames": ["dijob"]},
            "versions": [{"name": version, "served": true, "storage": true, "subresources": {"status": {}},
                          "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": open, "status": open}}}}],
        }
    });
    if webhook {
        crd["spec"]["conversion"] = json!({"strategy": "Webhook", "webhook": {
            "conversionReviewVersions": ["v1", "v1beta1"],
            "clientConfig": {"service": {"namespace": "di-system", "name": "di-webhook-service",
                                         "path": "/mutate-diengine-opendilab-org-v1alpha1-dijob"}}}});
    }
    crd
}

/// Replaces the DIJob CRD with `crd`, installed as that release's users did (`kubectl apply`,
/// client-side); every DIJob goes with the old CRD.
async fn install_old(cluster: &TestCluster, crd: &Value) {
    let crds: Api<CustomResourceDefinition> = Api::all(cluster.client.clone());
    if let Some(current) = crds.get_opt(CRD).await.unwrap() {
        crds.delete(CRD, &DeleteParams::default()).await.unwrap();
        // Gone, not only terminating: a CRD waits for its objects to be deleted first.
        let uid = current.uid().unwrap();
        let gone = await_condition(crds.clone(), CRD, conditions::is_deleted(&uid));
        within(WAIT, "the CRD to be deleted", gone).await.unwrap();
    }
    let file = std::env::temp_dir().join(format!("old-crd-{}.json", std::process::id()));
    std::fs::write(&file, crd.to_string()).unwrap();
    let out = cluster.kubectl(&["apply", "-f", file.to_str().unwrap()]).expect("kubectl");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let established = await_condition(crds, CRD, conditions::is_crd_established());
    within(WAIT, "the old CRD to be established", established).await.unwrap();
}

/// A job the old release created and ran: its status written by that release's controller (an
/// update under its own field manager), and a pod it owns, labelled its way.
async fn old_job(cluster: &TestCluster, ns: &str, version: &str, name: &str, spec: Value, status: Value) {
    let gvk = GroupVersionKind::gvk("diengine.opendilab.org", version, "DIJob");
    let jobs: Api<DynamicObject> = Api::namespaced_with(cluster.client.clone(), ns, &ApiResource::from_gvk(&gvk));
    let job = json!({"apiVersion": format!("diengine.opendilab.org/{version}"), "kind": "DIJob",
                     "metadata": {"name": name}, "spec": spec});
    let by_them = PostParams { field_manager: Some("di-operator".into()), ..PostParams::default() };
    let job = jobs.create(&by_them, &serde_json::from_value(job).unwrap()).await.unwrap();
    let patch = PatchParams { field_manager: Some("di-operator".into()), ..PatchParams::default() };
    jobs.patch_status(name, &patch, &Patch::Merge(json!({"status": status}))).await.unwrap();
    let owner = json!({"apiVersion": format!("diengine.opendilab.org/{version}"), "kind": "DIJob", "name": name,
                       "uid": job.uid().unwrap(), "controller": true, "blockOwnerDeletion": true});
    let pod = json!({"metadata": {"name": format!("{name}-pod"), "labels": {"diengine/job": name},
                                  "ownerReferences": [owner]},
                     "spec": {"containers": [{"name": "di-container", "image": "ding"}]}});
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), ns);
    pods.create(&by_them, &serde_json::from_value(pod).unwrap()).await.unwrap();
}

/// Our CRDs, applied as `kubectl di install` applies them (server-side, through discovery).
async fn install_ours_as_the_plugin_does(cluster: &TestCluster) {
    for (file, yaml) in di_api::crd::crd_files() {
        let object: DynamicObject = serde_yaml::from_str(&yaml).unwrap();
        di_client::apply::apply(&cluster.client, &object, MANAGER)
            .await
            .unwrap_or_else(|e| panic!("applying {file} over the old CRD: {:#}", anyhow::Error::from(e)));
    }
}

/// Our CRDs serve both versions and convert through no webhook: a read under either answers.
async fn serves_both_versions(cluster: &TestCluster, ns: &str) {
    let crds: Api<CustomResourceDefinition> = Api::all(cluster.client.clone());
    within(WAIT, "our CRD to be established", await_condition(crds.clone(), CRD, conditions::is_crd_established()))
        .await
        .unwrap();
    let crd = crds.get(CRD).await.unwrap();
    let strategy = crd.spec.conversion.as_ref().map(|c| c.strategy.as_str());
    assert!(strategy.is_none_or(|s| s == "None"), "conversion left as {:?}", crd.spec.conversion);
    for version in ["v1alpha1", "v2alpha1"] {
        let gvk = GroupVersionKind::gvk("diengine.opendilab.org", version, "DIJob");
        let jobs: Api<DynamicObject> = Api::namespaced_with(cluster.client.clone(), ns, &ApiResource::from_gvk(&gvk));
        // Discovery can lag the CRD by a moment; the read itself is what must work.
        let listed = async {
            loop {
                match jobs.list(&ListParams::default()).await {
                    Ok(list) => break list,
                    Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            }
        };
        let list = within(WAIT, &format!("a list of DIJobs under {version}"), listed).await;
        assert!(!list.items.is_empty(), "the old jobs are readable under {version}");
    }
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn clusters_of_older_releases_take_our_crds_and_keep_their_jobs() {
    let cluster = Box::pin(connect()).await;
    let ns = Box::pin(cluster.namespace("migration")).await;
    let container = json!({"containers": [{"name": "di-container", "image": "ding"}]});

    // DI-orchestrator 0.2: v1alpha1 with a conversion webhook. Both install paths take it over.
    for (i, path) in ["kubectl di install", "kubectl apply"].into_iter().enumerate() {
        Box::pin(install_old(&cluster, &old_crd("v1alpha1", true))).await;
        let spec = json!({"coordinator": {"template": {"spec": container}}});
        let status = json!({"phase": "Running", "conditions": [{"type": "Running", "status": "True", "reason": "DIJobRunning"}],
                            "replicaStatus": {"Coordinator": {"active": 1}}});
        // A name of its own each time: the last one's pod may not be collected yet.
        Box::pin(old_job(&cluster, &ns, "v1alpha1", &format!("zero-two-{i}"), spec, status)).await;
        if path == "kubectl apply" {
            let out = cluster.kubectl(&["apply", "-f", "manifests/crds/"]).expect("kubectl");
            assert!(out.status.success(), "kubectl apply over 0.2's CRD: {}", String::from_utf8_lossy(&out.stderr));
        } else {
            Box::pin(install_ours_as_the_plugin_does(&cluster)).await;
        }
        Box::pin(serves_both_versions(&cluster, &ns)).await;
    }

    // DI-orchestrator 1.x: v2alpha1 alone, a job stored in a phase only 1.x writes.
    Box::pin(install_old(&cluster, &old_crd("v2alpha1", false))).await;
    let spec =
        json!({"tasks": [{"name": "learner", "type": "learner", "replicas": 1, "template": {"spec": container}}]});
    let status = json!({"phase": "Rescheduling", "reschedules": 1, "restarts": 0, "allocation": ["node-a"], "profilings": {},
                        "conditions": [{"type": "Rescheduling", "status": "True", "reason": "JobRescheduling"}]});
    Box::pin(old_job(&cluster, &ns, "v2alpha1", "one-x", spec, status)).await;
    Box::pin(install_ours_as_the_plugin_does(&cluster)).await;
    Box::pin(cluster.install_crds()).await;
    Box::pin(serves_both_versions(&cluster, &ns)).await;

    // The orchestrator reconciles a new job beside the old one, and leaves the old one alone.
    let nodes = Nodes::start(cluster.client.clone(), &ns);
    let orchestrator = Box::pin(Orchestrator::start(&cluster, &ns, &[])).await;
    let jobs: Api<di_api::DIJob> = Api::namespaced(cluster.client.clone(), &ns);
    let pod = nodes.pod_spec();
    let new = json!({"apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJob", "metadata": {"name": "new"},
                     "spec": {"coordinator": {"template": {"spec": pod}}, "collector": {"replicas": 1, "template": {"spec": pod}}}});
    jobs.create(&PostParams::default(), &serde_json::from_value(new).unwrap()).await.unwrap();
    let running =
        |job: Option<&di_api::DIJob>| job.and_then(|j| j.status.as_ref()).and_then(|s| s.phase) == Some(Phase::Running);
    let reached =
        within(WAIT, "the new job to run beside the stored 1.x job", await_condition(jobs.clone(), "new", running))
            .await;
    assert!(reached.is_ok(), "orchestrator log:\n{}", orchestrator.log());

    let events: Api<Event> = Api::namespaced(cluster.client.clone(), &ns);
    let named = async {
        let on_the_job = watcher::Config::default().fields("involvedObject.name=one-x");
        let mut seen = std::pin::pin!(watcher(events, on_the_job).applied_objects());
        while let Some(event) = seen.next().await {
            let event = event.expect("watching the job's events");
            if event.reason.as_deref() == Some("LeftAlone") {
                return event;
            }
        }
        panic!("the watch of the job's events ended");
    };
    let event = within(WAIT, "the Warning that names the 1.x job", named).await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert!(event.message.unwrap_or_default().contains("another controller"));
    // Nothing of it was touched: its status is 1.x's, its pod is there.
    let stored = jobs.get("one-x").await.expect("the 1.x job reads under our types");
    assert_eq!(stored.status.unwrap().phase, Some(Phase::Rescheduling));
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), &ns);
    let pod = pods.get("one-x-pod").await.expect("the 1.x job's pod is left where it was");
    assert!(pod.metadata.deletion_timestamp.is_none());
}
