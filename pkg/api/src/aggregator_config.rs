//! The `AggregatorConfig` custom resource: the pod template of the aggregators that front the
//! DDP learners of a multi-GPU logic learner (kept from DI-orchestrator 0.2).

use k8s_openapi::api::core::v1::PodTemplateSpec;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::schema;

/// The aggregator of multi-GPU logic learners: a DIJob names its AggregatorConfig in
/// `spec.learner.aggregatorConfig`.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "diengine.opendilab.org",
    version = "v1alpha1",
    kind = "AggregatorConfig",
    namespaced,
    shortname = "agconfig",
    category = "di",
    derive = "PartialEq",
    derive = "Default",
    doc = "The pod template of the aggregators that front the DDP learners of multi-GPU logic learners.",
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct AggregatorConfigSpec {
    /// The aggregator role: the pod in front of the DDP learners of each multi-GPU logic learner.
    #[serde(default)]
    pub aggregator: AggregatorSpec,
}

/// The aggregator role.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AggregatorSpec {
    /// Pod template of every aggregator, a core/v1 PodTemplateSpec (see
    /// `kubectl explain pod.spec`). The job's `spec.volumes` are added to it.
    #[serde(default)]
    #[schemars(schema_with = "schema::pod_template")]
    pub template: PodTemplateSpec,
}
