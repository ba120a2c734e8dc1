//! Hand-written schemas for the Kubernetes types embedded in our resources.
//!
//! The full OpenAPI schema of a `PodTemplateSpec` is about 500 KiB per copy, so a CRD that embeds
//! it for each role cannot be installed with client-side `kubectl apply` (the last-applied
//! annotation is limited to 256 KiB). These objects are kept as opaque embedded objects instead;
//! the webhook and the reconciler check them against the typed `PodTemplateSpec`.

use schemars::{Schema, SchemaGenerator, json_schema};

pub fn pod_template(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "description": "A core/v1 PodTemplateSpec (metadata and spec), as in a Deployment or Job. Checked in full by the admission webhook; see `kubectl explain pod.spec` for its fields.",
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

pub fn volumes(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "description": "core/v1 Volumes shared by every replica of the job; see `kubectl explain pod.spec.volumes`.",
        "type": "array",
        "items": {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": true,
        },
    })
}

pub fn time(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "format": "date-time",
    })
}
