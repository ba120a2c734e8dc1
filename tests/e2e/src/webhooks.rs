//! The orchestrator's admission webhooks registered with a control plane by URL, as a test
//! serving them from a local orchestrator needs: the install manifests' configurations, pointed
//! at a loopback address and limited to one namespace, and the wait for the CA the orchestrator
//! writes into them.

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::wait::await_condition;
use serde_json::json;

use crate::cluster::{MANAGER, TestCluster, within};

/// The webhook configurations' name: the one the orchestrator's RBAC lets it write its CA into.
pub const CONFIGURATION: &str = "di-orchestrator";

/// The webhook configurations of the install manifests, pointed at a loopback URL and limited to
/// one namespace so the rest of the suite never depends on this test's webhook.
fn configurations(url: &str, namespace: &str) -> (serde_json::Value, serde_json::Value) {
    let hook = |name: &str, path: &str| {
        json!({
            "name": name,
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "timeoutSeconds": 5,
            "clientConfig": {"url": format!("{url}{path}")},
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "rules": [{"apiGroups": ["diengine.opendilab.org"], "apiVersions": ["v1alpha1", "v2alpha1"],
                       "operations": ["CREATE", "UPDATE"], "resources": ["dijobs", "aggregatorconfigs"], "scope": "Namespaced"}],
        })
    };
    let meta = json!({"name": CONFIGURATION});
    (
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration", "metadata": meta,
               "webhooks": [hook("mdijob.diengine.opendilab.org", "/mutate")]}),
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration", "metadata": meta,
               "webhooks": [hook("vdijob.diengine.opendilab.org", "/validate")]}),
    )
}

/// Registers the webhooks of an orchestrator serving them at `url` for namespace `ns` of
/// `cluster` (before it starts: it writes its CA into them, [`until_bundled`]).
pub async fn register(cluster: &TestCluster, url: &str, ns: &str) {
    let mutating_api: Api<MutatingWebhookConfiguration> = Api::all(cluster.client.clone());
    let validating_api: Api<ValidatingWebhookConfiguration> = Api::all(cluster.client.clone());
    let (mutating, validating) = configurations(url, ns);
    let apply = PatchParams::apply(MANAGER).force();
    mutating_api.patch(CONFIGURATION, &apply, &Patch::Apply(&mutating)).await.unwrap();
    validating_api.patch(CONFIGURATION, &apply, &Patch::Apply(&validating)).await.unwrap();
}

/// Returns once the orchestrator has written its CA into both configurations.
pub async fn until_bundled(cluster: &TestCluster) {
    let mutating_api: Api<MutatingWebhookConfiguration> = Api::all(cluster.client.clone());
    let validating_api: Api<ValidatingWebhookConfiguration> = Api::all(cluster.client.clone());
    fn bundled<'a>(hooks: impl Iterator<Item = &'a WebhookClientConfig>) -> bool {
        let bundles: Vec<_> = hooks.map(|c| c.ca_bundle.as_ref().is_some_and(|b| !b.0.is_empty())).collect();
        !bundles.is_empty() && bundles.iter().all(|b| *b)
    }
    let mutating_bundled = |config: Option<&MutatingWebhookConfiguration>| {
        config.and_then(|c| c.webhooks.as_ref()).is_some_and(|w| bundled(w.iter().map(|h| &h.client_config)))
    };
    let validating_bundled = |config: Option<&ValidatingWebhookConfiguration>| {
        config.and_then(|c| c.webhooks.as_ref()).is_some_and(|w| bundled(w.iter().map(|h| &h.client_config)))
    };
    let both = async {
        await_condition(mutating_api.clone(), CONFIGURATION, mutating_bundled).await.unwrap();
        await_condition(validating_api.clone(), CONFIGURATION, validating_bundled).await.unwrap();
    };
    within(Duration::from_secs(60), "the CA bundle in the webhook configurations", both).await;
}
