//! A real API server calling the webhook over TLS with the self-managed CA: an invalid DIJob is
//! refused by `kubectl apply` with the message, a valid one is stored with its defaults, an
//! update of an immutable field is refused.

use std::time::Duration;

use di_api::DIJob;
use di_e2e::binaries::repo_root;
use di_e2e::cluster::{MANAGER, connect, within};
use di_e2e::orchestrator::LocalOrchestrator;
use di_e2e::webhooks::{CONFIGURATION, register, until_bundled};
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use kube::Api;
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use serde_json::json;

/// Held by a test while its webhooks are registered: the tests of this file take turns with the
/// one configuration name.
static REGISTERED: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The webhooks the API server calls for one test's namespace: on kind the deployed orchestrator's
/// (the install manifests'); on the local control plane a local orchestrator's, registered by URL
/// for that namespace alone until `unregister`.
struct Webhooks {
    orchestrator: Option<LocalOrchestrator>,
    client: kube::Client,
    name: String,
    _turn: tokio::sync::MutexGuard<'static, ()>,
}

impl Webhooks {
    async fn serve(cluster: &di_e2e::cluster::TestCluster, ns: &str) -> Webhooks {
        let turn = REGISTERED.lock().await;
        let local = !di_e2e::nodes::real_nodes();
        let name = CONFIGURATION.to_owned();
        let mut orchestrator = None;
        if local {
            let port = di_e2e::ports::free_port().unwrap();
            register(cluster, &format!("https://127.0.0.1:{port}"), ns).await;
            let args = [format!("--webhook-addr=127.0.0.1:{port}"), "--webhook-hosts=127.0.0.1".into()];
            orchestrator = Some(Box::pin(LocalOrchestrator::start_with(cluster, ns, "", &args)).await);
        }
        // The orchestrator writes its CA into both configurations.
        until_bundled(cluster).await;
        Webhooks { orchestrator, client: cluster.client.clone(), name, _turn: turn }
    }

    fn log(&self) -> String {
        self.orchestrator.as_ref().map(LocalOrchestrator::log).unwrap_or_default()
    }

    async fn unregister(self) {
        if self.orchestrator.is_some() {
            let mutating_api: Api<MutatingWebhookConfiguration> = Api::all(self.client.clone());
            let validating_api: Api<ValidatingWebhookConfiguration> = Api::all(self.client.clone());
            mutating_api.delete(&self.name, &DeleteParams::default()).await.unwrap();
            validating_api.delete(&self.name, &DeleteParams::default()).await.unwrap();
        }
    }
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn the_api_server_defaults_and_validates_through_the_webhook() {
    let cluster = Box::pin(connect()).await;
    Box::pin(cluster.install_crds()).await;
    let ns = Box::pin(cluster.namespace("webhook")).await;
    let webhooks = Box::pin(Webhooks::serve(&cluster, &ns)).await;
    // An invalid job: its replica count past the bound is refused by the CRD's schema (which
    // `kubectl scale` meets too, where no webhook looks), before any webhook is asked.
    let out = cluster.kubectl(&["apply", "-n", &ns, "-f", "manifests/examples/invalid.yaml"]).expect("kubectl");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the invalid job was accepted: {}", String::from_utf8_lossy(&out.stdout));
    assert!(
        stderr.contains("spec.collector.replicas: Invalid value: 5000: spec.collector.replicas in body should be less than or equal to 1000"),
        "{stderr}"
    );
    // Within the schema's bounds, the webhook names every other problem with its field and fix.
    let example = std::fs::read_to_string(repo_root().join("manifests/examples/invalid.yaml")).unwrap();
    let bounded = std::env::temp_dir().join(format!("{ns}-invalid.yaml"));
    std::fs::write(&bounded, example.replace("replicas: 5000", "replicas: 2")).unwrap();
    let out = cluster.kubectl(&["apply", "-n", &ns, "-f", bounded.to_str().unwrap()]).expect("kubectl");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the invalid job was accepted: {}", String::from_utf8_lossy(&out.stdout));
    for expected in [
        "admission webhook \"vdijob.diengine.opendilab.org\" denied the request",
        "spec.cleanPodPolicy: Unsupported value \"Sometimes\": use one of \"Running\", \"All\", \"None\"",
        "GPUs are counted in whole devices",
    ] {
        let log = webhooks.log();
        assert!(
            stderr.contains(expected),
            "{expected:?} missing from: {stderr}
orchestrator log:
{log}"
        );
    }

    // A valid one, written the 0.2 way: stored with its defaults filled in.
    let job = json!({
        "apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJob",
        "metadata": {"name": "defaulted"},
        "spec": {"cleanPodPolicy": "ALL",
                 "coordinator": {"template": {"spec": {"containers": [{"name": "di-container", "image": "ding"}]}}},
                 "collector": {"template": {"spec": {"containers": [{"name": "di-container", "image": "ding"}]}}}}
    });
    let jobs: Api<DIJob> = Api::namespaced(cluster.client.clone(), &ns);
    jobs.patch("defaulted", &PatchParams::apply(MANAGER), &Patch::Apply(&job)).await.expect("a valid job is accepted");
    let stored = jobs.get("defaulted").await.unwrap();
    assert_eq!(stored.spec.clean_pod_policy.as_deref(), Some("All"));
    let coordinator = stored.spec.coordinator.unwrap().template.spec.unwrap();
    assert_eq!(coordinator.restart_policy.as_deref(), Some("Never"));
    let port = &coordinator.containers[0].ports.as_ref().unwrap()[0];
    assert_eq!((port.name.as_deref(), port.container_port), (Some("di-port"), 22273));

    // Scaling is allowed; changing a template is not.
    let scale = json!({"spec": {"collector": {"replicas": 2}}});
    jobs.patch("defaulted", &PatchParams::default(), &Patch::Merge(&scale)).await.expect("scaling is allowed");
    let change = json!({"spec": {"collector": {"template": {"spec": {"containers": [{"name": "di-container", "image": "ding:v2"}]}}}}});
    let err = jobs
        .patch("defaulted", &PatchParams::default(), &Patch::Merge(&change))
        .await
        .expect_err("templates are immutable");
    assert!(
        err.to_string().contains("spec.collector.template: Forbidden: a role's pod template is immutable"),
        "{err}"
    );

    // A job that may be running cannot be put in a Kueue queue (nor moved, nor taken out).
    let running = json!({"status": {"phase": "Running"}});
    jobs.patch_status("defaulted", &PatchParams::default(), &Patch::Merge(&running)).await.unwrap();
    let queued = json!({"metadata": {"labels": {di_api::contract::kueue::QUEUE_NAME: "team"}}});
    let err = jobs
        .patch("defaulted", &PatchParams::default(), &Patch::Merge(&queued))
        .await
        .expect_err("a running job keeps its queue");
    assert!(err.to_string().contains("the queue of a job that may be running cannot change"), "{err}");

    // A 1.x job under its own version: defaulted as 1.x does.
    let gvk = GroupVersionKind::gvk("diengine.opendilab.org", "v2alpha1", "DIJob");
    let v2: Api<DynamicObject> = Api::namespaced_with(cluster.client.clone(), &ns, &ApiResource::from_gvk(&gvk));
    let container = json!({"containers": [{"name": "di-container", "image": "ding"}]});
    let tasks = json!({"apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob", "metadata": {"name": "tasks"},
        "spec": {"tasks": [{"type": "learner", "template": {"spec": container}}]}});
    v2.create(&PostParams::default(), &serde_json::from_value(tasks).unwrap()).await.expect("a 1.x job is accepted");
    let stored = jobs.get("tasks").await.unwrap();
    let task = &stored.spec.tasks.as_ref().unwrap()[0];
    assert_eq!((task.name.as_deref(), task.replicas), (Some("learner"), Some(1)));
    assert_eq!(stored.spec.backoff_limit, Some(3));
    // A role job under v2alpha1, as `kubectl get -o yaml` returns one, is accepted too.
    let roles = json!({"apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob", "metadata": {"name": "roles"},
        "spec": {"coordinator": {"template": {"spec": container}}}});
    v2.create(&PostParams::default(), &serde_json::from_value(roles).unwrap())
        .await
        .expect("a role job under v2alpha1");

    // Names that collide across jobs: task `b-collector` of job `a` and role job `a-b` would both
    // make pod a-b-collector-0. The second is refused once the webhook has seen the first.
    let a = json!({"apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJob", "metadata": {"name": "a"},
        "spec": {"tasks": [{"name": "b-collector", "type": "collector", "template": {"spec": container}}]}});
    jobs.create(&PostParams::default(), &serde_json::from_value(a).unwrap()).await.unwrap();
    let a_b: DIJob = serde_json::from_value(json!({"apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJob",
        "metadata": {"name": "a-b"},
        "spec": {"coordinator": {"template": {"spec": container}}, "collector": {"replicas": 1, "template": {"spec": container}}}}))
    .unwrap();
    let dry_run = PostParams { dry_run: true, ..PostParams::default() };
    let refused = async {
        loop {
            match jobs.create(&dry_run, &a_b).await {
                Err(e) => break e.to_string(),
                Ok(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    };
    let refused = within(Duration::from_secs(30), "the colliding job to be refused", refused).await;
    let named =
        refused.contains("metadata.name: Invalid value: \"a-b\"") && refused.contains("a-b-collector-0 (job a's)");
    assert!(named, "{refused}");
    webhooks.unregister().await;
}

/// Every example, read back with `kubectl get -o yaml` under either served version, applies again
/// as it was read once the original is gone, as a backup restored by Velero, Argo CD or a user's
/// own export does: only what the API server sets on every object is left out.
#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn every_example_read_back_under_either_version_applies_again() {
    let cluster = Box::pin(connect()).await;
    Box::pin(cluster.install_crds()).await;
    let ns = Box::pin(cluster.namespace("export")).await;
    let webhooks = Box::pin(Webhooks::serve(&cluster, &ns)).await;
    let jobs: Api<DynamicObject> = Api::namespaced_with(
        cluster.client.clone(),
        &ns,
        &ApiResource::from_gvk(&GroupVersionKind::gvk("diengine.opendilab.org", "v1alpha1", "DIJob")),
    );
    let kubectl = |args: &[&str]| {
        let out = cluster.kubectl(args).expect("kubectl");
        let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "kubectl {}: {said}\norchestrator log:\n{}", args.join(" "), webhooks.log());
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let examples = std::fs::read_dir(di_e2e::binaries::repo_root().join("manifests/examples")).unwrap();
    let mut files: Vec<_> = examples.map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    files.sort();
    let mut checked = 0;
    for file in files.iter().filter(|f| f.ends_with(".yaml") && *f != "invalid.yaml") {
        let path = format!("manifests/examples/{file}");
        kubectl(&["apply", "-n", &ns, "-f", &path]);
        let text = std::fs::read_to_string(di_e2e::binaries::repo_root().join(&path)).unwrap();
        let names: Vec<String> = di_api::manifest::yaml_documents(&text)
            .unwrap()
            .into_iter()
            .filter(|doc| doc["kind"] == "DIJob")
            .map(|doc| doc["metadata"]["name"].as_str().unwrap().to_owned())
            .collect();
        for name in &names {
            for version in ["v1alpha1", "v2alpha1"] {
                let resource = format!("dijobs.{version}.diengine.opendilab.org");
                let read: serde_json::Value =
                    serde_yaml::from_str(&kubectl(&["get", &resource, name, "-n", &ns, "-o", "yaml"])).unwrap();
                assert_eq!(read["apiVersion"], format!("diengine.opendilab.org/{version}"), "{file}");
                let exported = exported(read);
                kubectl(&["delete", "dijob", name, "-n", &ns, "--wait=true"]);
                // Saved as JSON: a YAML writer of ours could quote differently from kubectl's.
                let saved = std::env::temp_dir().join(format!("{ns}-{name}-{version}.json"));
                std::fs::write(&saved, exported.to_string()).unwrap();
                kubectl(&["apply", "-n", &ns, "-f", saved.to_str().unwrap()]);
                let again = jobs.get(name).await.unwrap();
                assert_eq!(
                    again.data["spec"], exported["spec"],
                    "{file}: {name} under {version} changed on the way back"
                );
                let _ = std::fs::remove_file(saved);
                checked += 1;
            }
        }
    }
    // Six examples hold a DIJob each (invalid.yaml aside), each read under two versions.
    assert!(checked >= 12, "only {checked} exports were checked");
    webhooks.unregister().await;
}

/// What a backup keeps of an object read back: everything but the fields the API server sets on
/// every object (and refuses or replaces on create) and the status, which only its controller writes.
fn exported(mut object: serde_json::Value) -> serde_json::Value {
    let metadata = object["metadata"].as_object_mut().expect("metadata");
    for field in ["uid", "resourceVersion", "creationTimestamp", "generation", "managedFields"] {
        metadata.remove(field);
    }
    object.as_object_mut().unwrap().remove("status");
    object
}
