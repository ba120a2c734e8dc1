//! Translating replica requests into changes of the DIJob's desired state, without I/O. The
//! endpoint never touches pods: it changes the job, and the reconciler does the rest.

use std::collections::BTreeSet;

use di_api::contract::{MAX_REPLICAS, PORT_NAME, Role, annotations, labels, names};
use di_api::resources::{main_container, parse_quantity, whole_number};
use di_api::{DIJob, DIJobSpec};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::ResourceExt;
use serde_json::json;

use crate::wire::{ReplicaRequest, Replicas, ResourceRequest};

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
            ApiError::TooLarge(_) => 413,
            ApiError::Internal(_) => 500,
        }
    }
}

/// The one job this endpoint serves.
#[derive(Clone, Debug)]
pub struct Scope {
    pub namespace: String,
    pub job: String,
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

/// The desired counts after a request, and the GPUs per learner when they change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub collectors: i32,
    pub learners: i32,
    pub learner_gpus: Option<i32>,
    /// What the request asked for that the job's templates leave to the cluster.
    pub notes: Vec<String>,
}

impl Change {
    /// A merge patch of the DIJob's desired counts (see `update::update_job` for how it is
    /// written).
    pub fn patch(&self, job: &DIJob) -> serde_json::Value {
        let mut spec = json!({});
        if job.spec.collector.is_some() {
            spec["collector"] = json!({"replicas": self.collectors});
        }
        if job.spec.learner.is_some() {
            spec["learner"] = json!({"replicas": self.learners});
            if let Some(gpus) = self.learner_gpus {
                spec["learner"]["gpus"] = json!(gpus);
            }
        }
        json!({"spec": spec})
    }
}

/// `POST /replicas`: more collectors and learners.
pub fn scale_up(job: &DIJob, request: &ReplicaRequest) -> Result<Change, ApiError> {
    let spec = &job.spec;
    let mut notes = vec![];
    let collectors = grow(spec, Role::Collector, spec.collector_replicas(), &request.collectors, &mut notes)?;
    let learners = grow(spec, Role::Learner, spec.learner_replicas(), &request.learners, &mut notes)?;
    let learner_gpus = requested_gpus(job, &request.learners)?;
    Ok(Change { collectors, learners, learner_gpus, notes })
}

/// `DELETE /replicas`: fewer collectors and learners, the highest indices going first.
pub fn scale_down(job: &DIJob, request: &ReplicaRequest) -> Result<Change, ApiError> {
    let spec = &job.spec;
    let shrink = |role: Role, current: i32, asked: i64| -> Result<i32, ApiError> {
        if asked < 0 {
            return Err(ApiError::BadRequest(format!("{role}s.replicas: {asked}: must be 0 or more")));
        }
        if asked > i64::from(current) {
            return Err(ApiError::BadRequest(format!("cannot delete {asked} {role}s: the job has {current}")));
        }
        Ok(current - asked as i32)
    };
    Ok(Change {
        collectors: shrink(Role::Collector, spec.collector_replicas(), request.collectors.replicas)?,
        learners: shrink(Role::Learner, spec.learner_replicas(), request.learners.replicas)?,
        learner_gpus: None,
        notes: vec![],
    })
}

fn grow(
    spec: &DIJobSpec,
    role: Role,
    current: i32,
    asked: &ResourceRequest,
    notes: &mut Vec<String>,
) -> Result<i32, ApiError> {
    if asked.replicas < 0 {
        return Err(ApiError::BadRequest(format!("{role}s.replicas: {}: must be 0 or more", asked.replicas)));
    }
    let template = match role {
        Role::Collector => spec.collector.as_ref().map(|c| &c.template),
        _ => spec.learner.as_ref().map(|l| &l.template),
    };
    let Some(template) = template else {
        if asked.replicas > 0 {
            return Err(ApiError::Conflict(format!("the job has no {role} template; add spec.{role} to the DIJob")));
        }
        return Ok(current);
    };
    // Saturating: a count near i64::MAX is refused below, not overflowed.
    let total = i64::from(current).saturating_add(asked.replicas);
    if total > i64::from(MAX_REPLICAS) {
        return Err(ApiError::Conflict(format!("{total} {role}s is more than the {MAX_REPLICAS} a job may have")));
    }
    for (resource, value) in [("cpu", &asked.cpus), ("memory", &asked.memory)] {
        let Some(value) = value else { continue };
        check_resource(template, role, resource, value, notes)?;
    }
    Ok(total as i32)
}

/// A request's cpu or memory is honoured when the template asks for the same; a different
/// amount conflicts with the job (its templates are immutable).
fn check_resource(
    template: &PodTemplateSpec,
    role: Role,
    resource: &str,
    value: &str,
    notes: &mut Vec<String>,
) -> Result<(), ApiError> {
    let asked = parse_quantity(&Quantity(value.into()))
        .ok_or_else(|| ApiError::BadRequest(format!("{role}s.{resource}: {value:?} is not a quantity")))?;
    if asked.mantissa == 0 {
        return Ok(());
    }
    let resources = main_container(template).and_then(|c| c.resources.as_ref());
    let set = resources.and_then(|r| {
        r.requests.as_ref().and_then(|q| q.get(resource)).or_else(|| r.limits.as_ref().and_then(|q| q.get(resource)))
    });
    match set {
        None => {
            notes.push(format!("the {role} template sets no {resource}, so {value} is left to the cluster's defaults"));
            Ok(())
        }
        Some(q) if same_amount(&q.0, value) => Ok(()),
        Some(q) => Err(ApiError::Conflict(format!(
            "the job's {role}s get {resource} {} from their template, not {value}; change the DIJob's template to change it",
            q.0
        ))),
    }
}

fn same_amount(a: &str, b: &str) -> bool {
    let normalise = |s: &str| {
        parse_quantity(&Quantity(s.into())).map(|d| {
            let (mut m, mut e) = (d.mantissa, d.exp10);
            while m != 0 && m % 10 == 0 {
                m /= 10;
                e += 1;
            }
            (m, if m == 0 { 0 } else { e })
        })
    };
    normalise(a).is_some() && normalise(a) == normalise(b)
}

/// GPUs per learner the request asks for, when that changes the job.
fn requested_gpus(job: &DIJob, learners: &ResourceRequest) -> Result<Option<i32>, ApiError> {
    let Some(text) = &learners.gpus else { return Ok(None) };
    let gpus = whole_number(&Quantity(text.clone())).filter(|g| *g >= 0).ok_or_else(|| {
        ApiError::BadRequest(format!("learners.gpus: {text:?}: GPUs are whole devices: 0, 1, 2, ..."))
    })?;
    if job.spec.learner.is_none() {
        return Ok(None);
    }
    let current = learner_gpus(job);
    if gpus == current {
        return Ok(None);
    }
    if job.spec.learner_replicas() > 0 {
        return Err(ApiError::Conflict(format!(
            "the job's learners have {current} GPU(s) each; learners with {gpus} cannot join them (delete the learners first)"
        )));
    }
    if gpus > i64::from(di_api::contract::MAX_GPUS_PER_LEARNER) {
        return Err(ApiError::Conflict(format!(
            "{gpus} GPUs per learner is more than the {} allowed",
            di_api::contract::MAX_GPUS_PER_LEARNER
        )));
    }
    Ok(Some(gpus as i32))
}

/// GPUs per logic learner as the reconciler counts them: the spec's, else the template's.
fn learner_gpus(job: &DIJob) -> i64 {
    let Some(learner) = &job.spec.learner else { return 0 };
    learner
        .gpus
        .map(i64::from)
        .or_else(|| di_api::resources::template_gpus(&learner.template).ok().flatten())
        .unwrap_or(0)
}

/// What the reconciler runs for each logic learner of `job`: an aggregator (in front of DDP
/// learners) when it has several GPUs, else a learner.
pub fn learner_role(job: &DIJob) -> Role {
    if learner_gpus(job) > 1 { Role::Aggregator } else { Role::Learner }
}

/// A reported replica as a pod name: `pod`, `pod.namespace`, or `pod.namespace:port`.
pub fn pod_name_of(entry: &str) -> String {
    let entry = entry.trim();
    let entry = entry.strip_prefix("http://").unwrap_or(entry);
    let host = entry.rsplit_once(':').map_or(entry, |(h, _)| h);
    host.split('.').next().unwrap_or_default().to_owned()
}

/// `POST /replicas/failed`: the new value of the job's replace annotation and the pods it names.
/// Entries for pods that no longer run that incarnation are dropped.
pub fn report_failed(job: &DIJob, pods: &[Pod], report: &Replicas) -> Result<(String, Vec<String>), ApiError> {
    let live: Vec<&Pod> = pods.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect();
    let mut entries: BTreeSet<(String, String)> = job
        .annotations()
        .get(annotations::REPLACE)
        .map(|v| annotations::parse_replace(v))
        .unwrap_or_default()
        .into_iter()
        .filter(|(pod, uid)| live.iter().any(|p| &p.name_any() == pod && p.uid().as_ref() == Some(uid)))
        .collect();
    let mut named = vec![];
    for (list, roles, what) in [
        (&report.collectors, &[Role::Collector][..], "collector"),
        (&report.learners, &[Role::Learner, Role::Aggregator][..], "learner"),
    ] {
        for entry in list {
            let name = pod_name_of(entry);
            let pod = live
                .iter()
                .find(|p| p.name_any() == name && role_of(p).is_some_and(|r| roles.contains(&r)))
                .ok_or_else(|| ApiError::NotFound(format!("no {what} pod {name:?} in job {}", job.name_any())))?;
            entries.insert((name.clone(), pod.uid().unwrap_or_default()));
            named.push(name);
        }
    }
    Ok((annotations::format_replace(&entries.into_iter().collect::<Vec<_>>()), named))
}

/// Whether every reported pod runs a new incarnation: its name is back with another UID.
pub fn replaced(reported: &[(String, Option<String>)], pods: &[Pod]) -> bool {
    reported.iter().all(|(name, uid)| {
        pods.iter().any(|p| &p.name_any() == name && p.uid() != *uid && p.metadata.deletion_timestamp.is_none())
    })
}

pub fn role_of(pod: &Pod) -> Option<Role> {
    pod.labels().get(labels::REPLICA_TYPE).and_then(|r| Role::from_label(r))
}

pub fn index_of(pod: &Pod) -> u32 {
    pod.labels().get(labels::REPLICA_INDEX).and_then(|i| i.parse().ok()).unwrap_or(u32::MAX)
}

/// A pod's URL, `<pod>.<namespace>:<port>`, with the port of its `di-port`.
pub fn url_of(pod: &Pod) -> String {
    let role = role_of(pod).unwrap_or(Role::Collector);
    let port = pod
        .spec
        .as_ref()
        .into_iter()
        .flat_map(|s| s.containers.iter())
        .flat_map(|c| c.ports.iter().flatten())
        .find(|p| p.name.as_deref() == Some(PORT_NAME))
        .map_or(role.default_port(), |p| p.container_port);
    names::url(&pod.name_any(), &pod.namespace().unwrap_or_default(), port)
}

/// The job's live collectors and logic learners (single learners and aggregators), by index.
pub fn listing(scope: &Scope, pods: &[Pod]) -> Replicas {
    let mut live: Vec<&Pod> = pods.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect();
    live.sort_by_key(|p| (index_of(p), p.name_any()));
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
    let index = agg.labels().get(labels::REPLICA_INDEX).cloned();
    let mut ddp: Vec<&Pod> = pods
        .iter()
        .filter(|p| role_of(p) == Some(Role::DdpLearner) && p.labels().get(labels::REPLICA_INDEX) == index.as_ref())
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

/// The replicas a write adds or removes, named as the reconciler names their pods and Services.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Affected {
    pub collectors: Vec<String>,
    pub learners: Vec<String>,
    /// What the logic learners are in the job as written; see [`learner_role`].
    pub learner_role: Role,
}

impl Affected {
    /// Between the job as read and as written (which may have changed the learners' GPUs).
    pub fn between(before: &DIJob, after: &DIJob) -> Affected {
        let (job, learner_role) = (after.name_any(), learner_role(after));
        let (b, a) = (&before.spec, &after.spec);
        Affected {
            collectors: affected(&job, Role::Collector, b.collector_replicas(), a.collector_replicas()),
            learners: affected(&job, learner_role, b.learner_replicas(), a.learner_replicas()),
            learner_role,
        }
    }
}

/// Names of the replicas a change adds or removes: indices between the old and new counts.
pub fn affected(job: &str, role: Role, before: i32, after: i32) -> Vec<String> {
    let (low, high) = if before <= after { (before, after) } else { (after, before) };
    let mut names: Vec<String> = (low.max(0)..high.max(0)).map(|i| names::replica(job, role, i as u32)).collect();
    if before > after {
        names.reverse();
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reported_entries_become_pod_names() {
        for (entry, want) in [
            ("job-collector-1", "job-collector-1"),
            ("job-collector-1.ns", "job-collector-1"),
            ("job-collector-1.ns:22270", "job-collector-1"),
            ("http://job-learner-0.ns:22271", "job-learner-0"),
            ("http://job-learner-0", "job-learner-0"),
            ("http://job-learner-0.ns", "job-learner-0"),
            (" job-learner-0.ns.svc.cluster.local:22271 ", "job-learner-0"),
        ] {
            assert_eq!(pod_name_of(entry), want, "{entry}");
        }
    }

    #[test]
    fn affected_names_by_direction() {
        assert_eq!(affected("j", Role::Collector, 1, 3), vec!["j-collector-1", "j-collector-2"]);
        assert_eq!(affected("j", Role::Learner, 3, 1), vec!["j-learner-2", "j-learner-1"]);
        assert!(affected("j", Role::Learner, 2, 2).is_empty());
    }

    #[test]
    fn quantities_compare_by_amount() {
        assert!(same_amount("2", "2000m"));
        assert!(same_amount("1Gi", "1024Mi"));
        assert!(same_amount("0.5", "500m"));
        assert!(!same_amount("2", "3"));
        assert!(!same_amount("lots", "lots"));
    }

    fn pod(name: &str, role: &str, index: &str, ports: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "labels": {"replica-type": role, "diengine.opendilab.org/replica-index": index}},
            "spec": {"containers": [{"name": "di-container", "ports": ports}]},
        }))
        .unwrap()
    }

    #[test]
    fn an_aggregator_lists_every_training_process() {
        let scope = Scope { namespace: "ns".into(), job: "j".into() };
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
        let scope = Scope { namespace: "ns".into(), job: "job".into() };
        assert_eq!(scope.check("ns", "job-coordinator"), Ok(()));
        assert_eq!(scope.check("ns", "job2-coordinator").unwrap_err().status(), 403);
        assert_eq!(scope.check("other", "job-coordinator").unwrap_err().status(), 403);
        assert_eq!(scope.check("", "job-coordinator").unwrap_err().status(), 400);
        assert_eq!(scope.check("ns", "").unwrap_err().status(), 400);
    }
}
