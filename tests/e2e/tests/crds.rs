//! The CRDs in a real API server: installable with plain client-side `kubectl apply`, a 0.2 job
//! stored unchanged, wrong types refused by the schema, documentation served to `kubectl explain`.

use di_api::{DIJob, DIJobStatus, Phase};
use std::time::Duration;

use di_e2e::cluster::{MANAGER, connect, within};
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Api, Resource};
use serde_json::{Value, json};

fn example(name: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(di_e2e::binaries::repo_root().join("manifests/examples").join(name)).unwrap();
    di_api::manifest::yaml_documents(&text).unwrap()
}

fn dijobs_dynamic(client: kube::Client, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("diengine.opendilab.org", "v1alpha1", "DIJob");
    Api::namespaced_with(client, ns, &ApiResource::from_gvk(&gvk))
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn crds_install_with_client_side_kubectl_apply() {
    let cluster = connect().await;
    let Some(out) = cluster.kubectl(&["apply", "-f", "manifests/crds/"]) else { return };
    assert!(out.status.success(), "kubectl apply -f manifests/crds/ failed: {}", String::from_utf8_lossy(&out.stderr));
    // Applying again is a no-op, as it must be for an install step.
    let out = cluster.kubectl(&["apply", "-f", "manifests/crds/"]).unwrap();
    assert!(out.status.success(), "second apply failed: {}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("dijobs.diengine.opendilab.org unchanged"), "{stdout}");
    cluster.install_crds().await;
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn a_0_2_job_is_stored_unchanged() {
    if di_e2e::nodes::real_nodes() {
        // webhook.rs covers what the deployed webhook makes of the same job.
        di_e2e::cluster::not_applicable("on kind the deployed webhook defaults the job before it is stored");
        return;
    }
    let cluster = connect().await;
    cluster.install_crds().await;
    let ns = cluster.namespace("crd-compat").await;
    let raw = example("cartpole-dqn.yaml").remove(0);
    let api = dijobs_dynamic(cluster.client.clone(), &ns);
    let object: DynamicObject = serde_json::from_value(raw.clone()).unwrap();
    api.create(&PostParams::default(), &object).await.expect("a 0.2 DIJob is accepted");
    let stored = api.get("cartpole-dqn").await.unwrap();
    // Nothing pruned, nothing rewritten: the embedded templates are kept exactly as written.
    assert_eq!(stored.data["spec"], raw["spec"]);
    // And it reads back as our typed DIJob.
    let typed: Api<DIJob> = Api::namespaced(cluster.client.clone(), &ns);
    let job = typed.get("cartpole-dqn").await.unwrap();
    assert_eq!(job.spec.group.as_deref(), Some("cartpole"));
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn the_schema_refuses_wrong_types() {
    if di_e2e::nodes::real_nodes() {
        di_e2e::cluster::not_applicable("on kind the deployed webhook refuses wrong types before the schema sees them");
        return;
    }
    let cluster = connect().await;
    cluster.install_crds().await;
    let ns = cluster.namespace("crd-types").await;
    let api = dijobs_dynamic(cluster.client.clone(), &ns);
    let bad: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "diengine.opendilab.org/v1alpha1",
        "kind": "DIJob",
        "metadata": {"name": "typed-wrong"},
        "spec": {"collector": {"replicas": "two", "template": {}}, "suspend": "yes"}
    }))
    .unwrap();
    let err = api.create(&PostParams::default(), &bad).await.expect_err("wrong types are refused");
    let message = err.to_string();
    assert!(message.contains("spec.collector.replicas"), "{message}");
    assert!(message.contains("spec.suspend"), "{message}");
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn status_is_a_subresource_and_kubectl_get_shows_it() {
    if di_e2e::nodes::real_nodes() {
        di_e2e::cluster::not_applicable("on kind the deployed orchestrator writes every job's status itself");
        return;
    }
    let cluster = connect().await;
    cluster.install_crds().await;
    let ns = cluster.namespace("crd-status").await;
    let api: Api<DIJob> = Api::namespaced(cluster.client.clone(), &ns);
    let job: DIJob = serde_json::from_value(example("multi-gpu-learner.yaml").remove(1)).unwrap();
    let created = api.create(&PostParams::default(), &job).await.unwrap();
    assert_eq!(created.status, None);

    // Status written through the main resource is ignored...
    let mut with_status = created.clone();
    with_status.status = Some(DIJobStatus { phase: Some(Phase::Failed), ..Default::default() });
    with_status.metadata.managed_fields = None;
    let replaced = api.replace("qbert-dqn-4gpu", &PostParams::default(), &with_status).await.unwrap();
    assert_eq!(replaced.status, None, "status must only change through the status subresource");

    // ...and applied through the subresource it is served, with the printer columns.
    let status = json!({
        "apiVersion": DIJob::api_version(&()), "kind": "DIJob",
        "status": {"phase": "Running", "collectors": "3/4", "learners": "1/1", "replicas": 6, "readyReplicas": 4,
                   "restarts": 0, "replicaStatus": {"Collector": {"active": 3}}, "observedGeneration": 1}
    });
    api.patch_status("qbert-dqn-4gpu", &PatchParams::apply(MANAGER), &Patch::Apply(&status)).await.unwrap();
    let got = api.get_status("qbert-dqn-4gpu").await.unwrap().status.unwrap();
    assert_eq!(got.phase, Some(Phase::Running));
    assert_eq!(got.replica_status["Collector"].active, 3);

    let Some(out) = cluster.kubectl(&["get", "dijob", "-n", &ns]) else { return };
    let table = String::from_utf8_lossy(&out.stdout);
    let mut lines = table.lines();
    let header: Vec<_> = lines.next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(header, ["NAME", "PHASE", "READY", "REPLICAS", "RESTARTS", "AGE"], "{table}");
    let row: Vec<_> = lines.next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(&row[..5], ["qbert-dqn-4gpu", "Running", "4", "6", "0"], "{table}");
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn kubectl_explain_documents_our_fields() {
    let cluster = connect().await;
    cluster.install_crds().await;
    // The API server publishes a new CRD's OpenAPI a little after it is established.
    for (path, expected) in [
        ("dijob.spec.learner.gpus", "GPUs per logic learner"),
        ("dijob.spec.cleanPodPolicy", "The legacy value"),
        ("agconfig.spec.aggregator", "The aggregator role"),
        ("dijob.spec.tasks.completion", "decide the job's success"),
        ("dijob.spec.restartPolicy@v2alpha1", "every pod of the job in one step"),
    ] {
        // `path@version` explains under that served version.
        let (path, version) = path.split_once('@').map_or((path, None), |(p, v)| (p, Some(v)));
        let explained = async {
            loop {
                let mut args = vec!["explain", path];
                let api_version = version.map(|v| format!("--api-version=diengine.opendilab.org/{v}"));
                args.extend(api_version.as_deref());
                let out = cluster.kubectl(&args)?;
                let text = String::from_utf8_lossy(&out.stdout).into_owned();
                if out.status.success() && text.contains(expected) {
                    return Some(text);
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        };
        if within(Duration::from_secs(60), &format!("kubectl explain {path}"), explained).await.is_none() {
            return;
        }
    }
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn the_install_manifests_pass_a_server_side_dry_run() {
    let cluster = connect().await;
    // A dry run creates nothing, so the namespace its objects go into must exist.
    cluster.apply_file("manifests/install/namespace.yaml").await;
    let Some(out) = cluster.kubectl(&["apply", "--dry-run=server", "-k", "manifests/install"]) else { return };
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "dry run refused: {}{stdout}", String::from_utf8_lossy(&out.stderr));
    for object in [
        "customresourcedefinition.apiextensions.k8s.io/dijobs.diengine.opendilab.org",
        "clusterrole.rbac.authorization.k8s.io/di-orchestrator",
        "deployment.apps/di-orchestrator",
        "mutatingwebhookconfiguration.admissionregistration.k8s.io/di-orchestrator",
        "validatingwebhookconfiguration.admissionregistration.k8s.io/di-orchestrator",
    ] {
        assert!(stdout.contains(object), "{object} missing from: {stdout}");
    }
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn kubectl_version_names_the_release() {
    // The binaries carry their release as Kubernetes' own build stamps it (kubectl cannot parse
    // an unstamped one, and kubeadm refuses it).
    let cluster = connect().await;
    let Some(out) = cluster.kubectl(&["version"]) else { return };
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "kubectl version: {}{text}", String::from_utf8_lossy(&out.stderr));
    let server = text.lines().find_map(|l| l.strip_prefix("Server Version: ")).unwrap_or_default();
    assert_eq!(server, di_e2e::binaries::KUBERNETES_VERSION, "{text}");
}
