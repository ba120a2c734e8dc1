//! Pods as the endpoint reads them: the fields it uses (names, labels, UID, deletion, the
//! containers' names and ports for the URLs, and the phase) and nothing else. The endpoint holds a job's pods
//! while a request waits for them, and a whole Pod (its managed fields, env, probes, status)
//! would cost it a hundred times more at 1,000 collectors than what it reads. The rest of a pod
//! is skipped while it is parsed, never held.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, ContainerPort, Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::Api;
use kube::api::ListParams;
use serde::{Deserialize, Deserializer};

/// Pods a list asks for at once: a page's answer is read whole before it is parsed, so a big
/// job's pods come in pages of about half a MiB rather than one answer of several.
const PAGE: u32 = 100;

/// Every pod `params` selects, page by page, and the version the list was taken at (to watch
/// from). The pages are of one snapshot: the API server keeps the first page's version.
pub async fn list(api: &Api<SlimPod>, params: &ListParams) -> Result<(Vec<Pod>, String), kube::Error> {
    let mut params = params.clone().limit(PAGE);
    let mut pods = vec![];
    loop {
        let page = api.list(&params).await?;
        pods.extend(page.items.into_iter().map(|SlimPod(pod)| pod));
        match page.metadata.continue_.filter(|token| !token.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok((pods, page.metadata.resource_version.unwrap_or_default())),
        }
    }
}

/// A pod with only the fields the endpoint reads filled in.
#[derive(Clone, Debug, Default)]
pub struct SlimPod(pub Pod);

impl k8s_openapi::Resource for SlimPod {
    const API_VERSION: &'static str = <Pod as k8s_openapi::Resource>::API_VERSION;
    const GROUP: &'static str = <Pod as k8s_openapi::Resource>::GROUP;
    const KIND: &'static str = <Pod as k8s_openapi::Resource>::KIND;
    const VERSION: &'static str = <Pod as k8s_openapi::Resource>::VERSION;
    const URL_PATH_SEGMENT: &'static str = <Pod as k8s_openapi::Resource>::URL_PATH_SEGMENT;
    type Scope = <Pod as k8s_openapi::Resource>::Scope;
}

impl k8s_openapi::Metadata for SlimPod {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.0.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}

#[derive(Deserialize)]
struct Wire {
    metadata: Meta,
    spec: Option<Spec>,
    status: Option<Status>,
}

/// A succeeded collector holds no room in its queue's admission (`quota`).
#[derive(Deserialize)]
struct Status {
    phase: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    deletion_timestamp: Option<Time>,
}

#[derive(Deserialize)]
struct Spec {
    #[serde(default)]
    containers: Vec<SlimContainer>,
}

#[derive(Deserialize)]
struct SlimContainer {
    name: String,
    ports: Option<Vec<ContainerPort>>,
}

impl<'de> Deserialize<'de> for SlimPod {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let Wire { metadata: m, spec, status } = Wire::deserialize(deserializer)?;
        let containers = |s: Spec| {
            s.containers
                .into_iter()
                .map(|c| Container { name: c.name, ports: c.ports, ..Container::default() })
                .collect()
        };
        Ok(SlimPod(Pod {
            metadata: ObjectMeta {
                name: m.name,
                namespace: m.namespace,
                uid: m.uid,
                resource_version: m.resource_version,
                labels: m.labels,
                deletion_timestamp: m.deletion_timestamp,
                ..ObjectMeta::default()
            },
            spec: spec.map(|s| PodSpec { containers: containers(s), ..PodSpec::default() }),
            status: status.map(|s| PodStatus { phase: s.phase, ..PodStatus::default() }),
        }))
    }
}

#[cfg(test)]
mod tests {
    use di_api::pod::{index_of, role_of, url_of};
    use serde_json::json;

    use super::*;

    #[test]
    fn keeps_what_the_endpoint_reads_and_drops_the_rest() {
        let full = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "j-collector-3", "namespace": "ns", "uid": "u1", "resourceVersion": "42",
                "labels": {"replica-type": "collector", "replica-index": "3"},
                "annotations": {"big": "x".repeat(4096)},
                "deletionTimestamp": "2026-11-24T00:00:00Z",
                "managedFields": [{"manager": "di-orchestrator", "operation": "Apply", "fieldsV1": {"f:spec": {}}}],
            },
            "spec": {"containers": [
                {"name": "di-container", "image": "ding", "env": [{"name": "A", "value": "b"}],
                 "ports": [{"name": "di-port", "containerPort": 22270}]},
            ]},
            "status": {"phase": "Running", "podIP": "10.0.0.3"},
        });
        let whole: Pod = serde_json::from_value(full.clone()).unwrap();
        let SlimPod(slim) = serde_json::from_value(full).unwrap();
        assert_eq!(url_of(&slim), url_of(&whole));
        assert_eq!((role_of(&slim), index_of(&slim)), (role_of(&whole), index_of(&whole)));
        assert_eq!(slim.metadata.uid.as_deref(), Some("u1"));
        assert_eq!(slim.metadata.resource_version.as_deref(), Some("42"));
        assert!(slim.metadata.deletion_timestamp.is_some());
        assert!(slim.metadata.annotations.is_none() && slim.metadata.managed_fields.is_none());
        let container = &slim.spec.as_ref().unwrap().containers[0];
        assert_eq!(container.name, "di-container");
        assert!(container.env.is_none() && container.image.is_none());
        let status = slim.status.as_ref().unwrap();
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert!(status.pod_ip.is_none());
    }

    #[test]
    fn a_pod_without_a_spec_or_labels_is_read() {
        let SlimPod(pod) = serde_json::from_value(json!({"metadata": {"name": "p"}})).unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("p"));
        assert!(pod.spec.is_none() && role_of(&pod).is_none());
    }
}
