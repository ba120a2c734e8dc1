//! The endpoint's side of scaling, without I/O: the one job it serves (`Scope`), its error
//! answers, and its listings of the job's replicas as URLs. The rules that change the job are
//! `di_client::scale`'s and `di_client::failed`'s, which `kubectl di` applies too.

use di_api::DIJob;
use di_api::contract::{Role, names};
use di_api::pod::{index_of, role_of, url_of};
use di_client::Refusal;
use di_client::update::UpdateError;
use di_client::wire::Replicas;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

/// An error answer: the HTTP status and the envelope's message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Gone(String),
    #[error("{0}")]
    TooLarge(String),
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    pub fn status(&self) -> u16 {
        match self {
            ApiError::BadRequest(_) => 400,
            ApiError::Forbidden(_) => 403,
            ApiError::NotFound(_) => 404,
            ApiError::Conflict(_) => 409,
            ApiError::Gone(_) => 410,
            ApiError::TooLarge(_) => 413,
            ApiError::Internal(_) => 500,
        }
    }
}

impl From<Refusal> for ApiError {
    fn from(refusal: Refusal) -> ApiError {
        match refusal {
            Refusal::BadRequest(m) => ApiError::BadRequest(m),
            Refusal::NotFound(m) => ApiError::NotFound(m),
            Refusal::Conflict(m) => ApiError::Conflict(m),
            Refusal::Gone(m) => ApiError::Gone(m),
        }
    }
}

/// A job that could not be written: a job that kept changing, or that its own rules (the
/// webhook) refuse as changed, conflicts with the request.
impl From<UpdateError<Refusal>> for ApiError {
    fn from(e: UpdateError<Refusal>) -> ApiError {
        match e {
            UpdateError::Refused(refusal) => refusal.into(),
            UpdateError::NotFound(_) => ApiError::NotFound(e.to_string()),
            UpdateError::KeptChanging(_) | UpdateError::Invalid(_) => ApiError::Conflict(e.to_string()),
            UpdateError::Kube(e) => internal(e),
        }
    }
}

pub fn internal(e: kube::Error) -> ApiError {
    ApiError::Internal(format!("kubernetes API: {e}"))
}

/// The one job this endpoint serves.
#[derive(Clone, Debug)]
pub struct Scope {
    pub namespace: String,
    pub job: String,
    /// The job's UID: a job submitted again under its name is another job, never this
    /// endpoint's (a predecessor's coordinator may still be terminating when it comes).
    pub uid: String,
}

impl Scope {
    pub fn coordinator(&self) -> String {
        names::coordinator(&self.job)
    }

    /// Requests name the job by its namespace and coordinator pod; any other is not ours. A
    /// request that names none is malformed (the wire format reads a missing name as empty).
    pub fn check(&self, namespace: &str, coordinator: &str) -> Result<(), ApiError> {
        for (field, value) in [("namespace", namespace), ("coordinator", coordinator)] {
            if value.is_empty() {
                return Err(ApiError::BadRequest(format!(
                    "{field} is missing: the request must name the job's {field}"
                )));
            }
        }
        if namespace != self.namespace || coordinator != self.coordinator() {
            return Err(ApiError::Forbidden(format!(
                "this endpoint serves job {}/{} only (coordinator {}), not {namespace}/{coordinator}",
                self.namespace,
                self.job,
                self.coordinator()
            )));
        }
        Ok(())
    }
}

/// The job's live collectors and logic learners (single learners and aggregators), by index.
pub fn listing(scope: &Scope, pods: &[Pod]) -> Replicas {
    let mut live: Vec<&Pod> = pods.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect();
    // Pods without an index (none the reconciler makes) go last.
    live.sort_by_key(|p| (index_of(p).unwrap_or(u32::MAX), p.name_any()));
    let of = |roles: &[Role]| {
        live.iter().filter(|p| role_of(p).is_some_and(|r| roles.contains(&r))).map(|p| url_of(p)).collect()
    };
    Replicas {
        namespace: scope.namespace.clone(),
        coordinator: scope.coordinator(),
        collectors: of(&[Role::Collector]),
        learners: of(&[Role::Learner, Role::Aggregator]),
    }
}

/// `GET ?aggregator=`: the URL of every training process behind an aggregator of this job.
pub fn ddp_listing(scope: &Scope, pods: &[Pod], aggregator: &str) -> Result<Replicas, ApiError> {
    let agg = pods
        .iter()
        .find(|p| p.name_any() == aggregator && role_of(p) == Some(Role::Aggregator))
        .ok_or_else(|| ApiError::NotFound(format!("no aggregator pod {aggregator:?} in job {}", scope.job)))?;
    let index = index_of(agg);
    let mut ddp: Vec<&Pod> = pods
        .iter()
        .filter(|p| role_of(p) == Some(Role::DdpLearner) && index_of(p) == index)
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    ddp.sort_by_key(|p| p.name_any());
    let mut learners = vec![];
    for pod in ddp {
        learners.push(url_of(pod));
        let gpu_ports = pod.spec.iter().flat_map(|s| s.containers.iter()).flat_map(|c| c.ports.iter().flatten());
        for port in gpu_ports
            .filter(|p| p.name.as_deref().is_some_and(|n| n.starts_with(di_api::contract::DDP_GPU_PORT_PREFIX)))
        {
            learners.push(names::url(&pod.name_any(), &scope.namespace, port.container_port));
        }
    }
    Ok(Replicas {
        namespace: scope.namespace.clone(),
        coordinator: aggregator.to_owned(),
        collectors: vec![],
        learners,
    })
}

/// The URL a replica of `role` named `name` will have, before its pod exists: the port its
/// template names, or the role's default. An aggregator's template is in the AggregatorConfig,
/// which this endpoint may not read: it gets the default.
pub fn planned_url(job: &DIJob, name: &str, role: Role) -> String {
    let namespace = job.namespace().unwrap_or_default();
    let template = match role {
        Role::Collector => job.spec.collector.as_ref().map(|c| &c.template),
        Role::Learner => job.spec.learner.as_ref().map(|l| &l.template),
        _ => None,
    };
    let port = template.map_or(role.default_port(), |t| di_api::resources::replica_port(t, role));
    names::url(name, &namespace, port)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(name: &str, role: &str, index: &str, ports: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "labels": {"replica-type": role, "diengine.opendilab.org/replica-index": index}},
            "spec": {"containers": [{"name": "di-container", "ports": ports}]},
        }))
        .unwrap()
    }

    #[test]
    fn an_aggregator_lists_every_training_process() {
        let scope = Scope { namespace: "ns".into(), job: "j".into(), uid: "uid".into() };
        let pods = vec![
            pod("j-aggregator-0", "aggregator", "0", json!([{"name": "di-port", "containerPort": 22272}])),
            pod("j-ddp-learner-0-1", "ddp-learner", "0", json!([{"name": "di-port", "containerPort": 22271}])),
            pod(
                "j-ddp-learner-0-0",
                "ddp-learner",
                "0",
                json!([{"name": "di-port", "containerPort": 22271}, {"name": "gpu-port-1", "containerPort": 22272}, {"name": "master-port", "containerPort": 10314}]),
            ),
            // Another logic learner's DDP learner is not this aggregator's.
            pod("j-ddp-learner-1-0", "ddp-learner", "1", json!([{"name": "di-port", "containerPort": 22271}])),
        ];
        let listed = ddp_listing(&scope, &pods, "j-aggregator-0").unwrap();
        assert_eq!(listed.coordinator, "j-aggregator-0");
        assert_eq!(
            listed.learners,
            vec!["j-ddp-learner-0-0.ns:22271", "j-ddp-learner-0-0.ns:22272", "j-ddp-learner-0-1.ns:22271"]
        );
        assert_eq!(ddp_listing(&scope, &pods, "j-aggregator-9").unwrap_err().status(), 404);

        // The job's logic learners include its aggregators, ordered by index.
        let all = listing(&scope, &pods);
        assert_eq!(all.learners, vec!["j-aggregator-0.ns:22272"]);
        assert!(all.collectors.is_empty());
    }

    #[test]
    fn scope_is_one_job() {
        let scope = Scope { namespace: "ns".into(), job: "job".into(), uid: "uid".into() };
        assert_eq!(scope.check("ns", "job-coordinator"), Ok(()));
        assert_eq!(scope.check("ns", "job2-coordinator").unwrap_err().status(), 403);
        assert_eq!(scope.check("other", "job-coordinator").unwrap_err().status(), 403);
        assert_eq!(scope.check("", "job-coordinator").unwrap_err().status(), 400);
        assert_eq!(scope.check("ns", "").unwrap_err().status(), 400);
    }
}
