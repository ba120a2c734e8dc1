//! The di-server wire format of DI-orchestrator 0.2, as DI-engine's client speaks it.

use serde::{Deserialize, Deserializer, Serialize};

/// Every answer, errors included: `code` is 0 on success and 1 on failure.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Envelope<T> {
    pub success: bool,
    pub code: i32,
    pub message: String,
    pub data: Option<T>,
}

/// A job's replicas as URLs (`<pod>.<namespace>:<port>`); also the body of a failure report,
/// whose lists then name pods (or their URLs).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replicas {
    #[serde(default)]
    pub namespace: String,
    #[serde(default)]
    pub coordinator: String,
    #[serde(default)]
    pub collectors: Vec<String>,
    #[serde(default)]
    pub learners: Vec<String>,
}

/// `POST /replicas` and `DELETE /replicas`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct ReplicaRequest {
    #[serde(default)]
    pub namespace: String,
    #[serde(default)]
    pub coordinator: String,
    #[serde(default)]
    pub collectors: ResourceRequest,
    #[serde(default)]
    pub learners: ResourceRequest,
}

/// How many replicas of a role, and what each needs. Quantities come as strings (`"gpus": "0"`)
/// or numbers, as Kubernetes quantities do.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct ResourceRequest {
    #[serde(default)]
    pub replicas: i64,
    #[serde(default, deserialize_with = "quantity")]
    pub cpus: Option<String>,
    #[serde(default, deserialize_with = "quantity")]
    pub gpus: Option<String>,
    #[serde(default, deserialize_with = "quantity")]
    pub memory: Option<String>,
}

fn quantity<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Text(String),
        Number(serde_json::Number),
        Null(()),
    }
    Ok(match Raw::deserialize(d)? {
        Raw::Text(s) if s.trim().is_empty() => None,
        Raw::Text(s) => Some(s.trim().to_owned()),
        Raw::Number(n) => Some(n.to_string()),
        Raw::Null(()) => None,
    })
}
