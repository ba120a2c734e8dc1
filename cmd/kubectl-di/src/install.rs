//! `kubectl di install` and `uninstall`: the install manifests, embedded in the plugin, applied
//! through discovery like `kubectl apply --server-side`; `install` then waits until the
//! orchestrator's webhook answers.

use std::time::Duration;

use anyhow::{Context, bail};
use di_client::apply::{self, api_for};
use di_client::is_status;
use di_client::wait::{Unanswered, until_webhook_settled};
use kube::ResourceExt;
use kube::api::{DeleteParams, DynamicObject};
use serde_json::json;

use crate::cli::InstallArgs;
use crate::ctx::{Ctx, MANAGER, explain};

/// The install manifests, embedded: the same files as `manifests/install`.
const INSTALL: [(&str, &str); 5] = [
    ("namespace.yaml", include_str!("../../../manifests/install/namespace.yaml")),
    ("crds.yaml", include_str!("../../../manifests/install/crds.yaml")),
    ("rbac.yaml", include_str!("../../../manifests/install/rbac.yaml")),
    ("deployment.yaml", include_str!("../../../manifests/install/deployment.yaml")),
    ("webhook.yaml", include_str!("../../../manifests/install/webhook.yaml")),
];

/// Every object of the embedded install manifests, the image set to `image`.
fn install_objects(image: &str) -> anyhow::Result<Vec<DynamicObject>> {
    let mut objects = vec![];
    for (file, text) in INSTALL {
        for mut doc in di_api::manifest::yaml_documents(text).with_context(|| format!("embedded {file}"))? {
            if doc["kind"] == "Deployment" {
                let container = &mut doc["spec"]["template"]["spec"]["containers"][0];
                container["image"] = json!(image);
                for var in container["env"].as_array_mut().into_iter().flatten() {
                    if var["name"] == "DI_REPLICAS_IMAGE" {
                        var["value"] = json!(image);
                    }
                }
            }
            objects.push(serde_json::from_value(doc)?);
        }
    }
    Ok(objects)
}

/// An object as kubectl names it in what it prints: `deployment/di-orchestrator`.
fn label(object: &DynamicObject) -> String {
    let kind = object.types.as_ref().map(|t| t.kind.to_lowercase()).unwrap_or_default();
    format!("{kind}/{}", object.name_any())
}

pub async fn install(ctx: &Ctx, args: &InstallArgs) -> anyhow::Result<()> {
    // Nothing in the install manifests is a DIJob or an AggregatorConfig, so nothing waits for
    // the CRDs to be established before the next object.
    for object in install_objects(&args.image)? {
        let label = label(&object);
        apply::apply(&ctx.client, &object, MANAGER).await.map_err(|e| match e {
            apply::Error::Refused { source, .. } => explain(source, &format!("applying {label}")),
            other => other.into(),
        })?;
        println!("{label} serverside-applied");
    }
    if args.no_wait {
        return Ok(());
    }
    let timeout = Duration::from_secs(args.timeout);
    if let Err(Unanswered { last }) = until_webhook_settled(&ctx.client, "di-system", timeout).await {
        let last = last.map(|e| e.to_string()).unwrap_or_default();
        bail!("the orchestrator's webhook did not answer steadily within {}s: {last}", args.timeout);
    }
    println!("the orchestrator is installed and its webhook answers");
    Ok(())
}

pub async fn uninstall(ctx: &Ctx, keep_crds: bool) -> anyhow::Result<()> {
    let mut objects = install_objects("unused")?;
    objects.reverse();
    for object in objects {
        let kind = object.types.as_ref().map(|t| t.kind.clone()).unwrap_or_default();
        if keep_crds && (kind == "CustomResourceDefinition" || kind == "Namespace") {
            continue;
        }
        let label = label(&object);
        let api = api_for(&ctx.client, &object).await?;
        match api.delete(&object.name_any(), &DeleteParams::background()).await {
            Ok(_) => println!("{label} deleted"),
            Err(e) if is_status(&e, 404) => {}
            Err(e) => return Err(explain(e, &format!("deleting {label}"))),
        }
    }
    delete_replica_identity(ctx).await
}

/// Says that `what` was deleted; one already gone is no error.
fn said_deleted(deleted: Result<(), kube::Error>, what: &str) -> anyhow::Result<()> {
    match deleted {
        Ok(()) => println!("{what} deleted"),
        Err(e) if is_status(&e, 404) => {}
        Err(e) => return Err(explain(e, &format!("deleting {what}"))),
    }
    Ok(())
}

/// What the orchestrator made for the replica endpoints outside the manifests: the admission
/// policy and its binding, and each namespace's shared ServiceAccount and RoleBinding.
async fn delete_replica_identity(ctx: &Ctx) -> anyhow::Result<()> {
    use di_core::desired::identity::SHARED;
    use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::RoleBinding;
    use kube::Api;

    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(ctx.client.clone());
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(ctx.client.clone());
    let params = DeleteParams::background();
    said_deleted(
        bindings.delete(SHARED, &params).await.map(|_| ()),
        &format!("validatingadmissionpolicybinding/{SHARED}"),
    )?;
    said_deleted(policies.delete(SHARED, &params).await.map(|_| ()), &format!("validatingadmissionpolicy/{SHARED}"))?;
    let managed = kube::api::ListParams::default().labels("app.kubernetes.io/managed-by=di-orchestrator");
    let accounts: Api<ServiceAccount> = Api::all(ctx.client.clone());
    let shared = accounts.list(&managed).await.map_err(|e| explain(e, "listing ServiceAccounts"))?;
    for namespace in shared.iter().filter(|a| a.name_any() == SHARED).filter_map(|a| a.namespace()) {
        let binding = Api::<RoleBinding>::namespaced(ctx.client.clone(), &namespace);
        let account = Api::<ServiceAccount>::namespaced(ctx.client.clone(), &namespace);
        said_deleted(
            binding.delete(SHARED, &params).await.map(|_| ()),
            &format!("rolebinding/{SHARED} in {namespace}"),
        )?;
        said_deleted(
            account.delete(SHARED, &params).await.map(|_| ()),
            &format!("serviceaccount/{SHARED} in {namespace}"),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_manifests_are_the_install_manifests() {
        // `kubectl apply -k manifests/install` and `kubectl di install` install the same files, in
        // the same order: a file added to the kustomization but not embedded fails here.
        let kustomization = include_str!("../../../manifests/install/kustomization.yaml");
        let listed: serde_yaml::Value = serde_yaml::from_str(kustomization).unwrap();
        let listed: Vec<&str> =
            listed["resources"].as_sequence().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
        let embedded: Vec<&str> = INSTALL.iter().map(|(file, _)| *file).collect();
        assert_eq!(embedded, listed);
        let objects = install_objects("example/di:1").unwrap();
        let deployment = objects.iter().find(|o| o.types.as_ref().unwrap().kind == "Deployment").unwrap();
        assert_eq!(label(deployment), "deployment/di-orchestrator");
        let container = &deployment.data["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["image"], "example/di:1");
        assert!(
            container["env"]
                .as_array()
                .unwrap()
                .iter()
                .any(|v| v["name"] == "DI_REPLICAS_IMAGE" && v["value"] == "example/di:1")
        );
    }
}
