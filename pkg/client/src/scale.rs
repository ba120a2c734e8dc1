//! The scale rules: a replica request as a change of the DIJob's desired counts, without I/O.
//! The replica endpoint answers DI-engine's requests with them and `kubectl di replicas` applies
//! the same, so a job scales the same way whoever asks. Nobody here touches pods: the change is
//! written to the job (see `update::update_job`), and the reconciler does the rest.

use di_api::contract::{MAX_REPLICAS, Role, names};
use di_api::resources::{main_container, parse_quantity, whole_number};
use di_api::{DIJob, DIJobSpec};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::ResourceExt;
use serde_json::json;

use crate::Refusal;
use crate::wire::{ReplicaRequest, ResourceRequest};

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

    /// The job as it will be once the change is written.
    pub fn apply(&self, job: &DIJob) -> DIJob {
        let mut after = job.clone();
        if let Some(collector) = after.spec.collector.as_mut() {
            collector.replicas = Some(self.collectors);
        }
        if let Some(learner) = after.spec.learner.as_mut() {
            learner.replicas = Some(self.learners);
            learner.gpus = self.learner_gpus.or(learner.gpus);
        }
        after
    }
}

/// `POST /replicas`: more collectors and learners.
pub fn scale_up(job: &DIJob, request: &ReplicaRequest) -> Result<Change, Refusal> {
    let spec = &job.spec;
    let mut notes = vec![];
    let collectors = grow(spec, Role::Collector, spec.collector_replicas(), &request.collectors, &mut notes)?;
    let learners = grow(spec, Role::Learner, spec.learner_replicas(), &request.learners, &mut notes)?;
    let learner_gpus = requested_gpus(job, &request.learners)?;
    Ok(Change { collectors, learners, learner_gpus, notes })
}

/// `DELETE /replicas`: fewer collectors and learners, the highest indices going first.
pub fn scale_down(job: &DIJob, request: &ReplicaRequest) -> Result<Change, Refusal> {
    let spec = &job.spec;
    let shrink = |role: Role, current: i32, asked: i64| -> Result<i32, Refusal> {
        if asked < 0 {
            return Err(Refusal::BadRequest(format!("{role}s.replicas: {asked}: must be 0 or more")));
        }
        if asked > i64::from(current) {
            return Err(Refusal::BadRequest(format!("cannot delete {asked} {role}s: the job has {current}")));
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
) -> Result<i32, Refusal> {
    if asked.replicas < 0 {
        return Err(Refusal::BadRequest(format!("{role}s.replicas: {}: must be 0 or more", asked.replicas)));
    }
    let template = match role {
        Role::Collector => spec.collector.as_ref().map(|c| &c.template),
        _ => spec.learner.as_ref().map(|l| &l.template),
    };
    let Some(template) = template else {
        if asked.replicas > 0 {
            return Err(Refusal::Conflict(format!("the job has no {role} template; add spec.{role} to the DIJob")));
        }
        return Ok(current);
    };
    // Saturating: a count near i64::MAX is refused below, not overflowed.
    let total = i64::from(current).saturating_add(asked.replicas);
    if total > i64::from(MAX_REPLICAS) {
        return Err(Refusal::Conflict(format!("{total} {role}s is more than the {MAX_REPLICAS} a job may have")));
    }
    let limit = spec.collector.as_ref().and_then(|c| c.max_replicas).filter(|_| role == Role::Collector);
    if let Some(max) = limit
        && total > i64::from(max)
    {
        return Err(Refusal::Conflict(format!(
            "{total} collectors is more than the job's spec.collector.maxReplicas ({max}); ask for at most {} more, \
             or raise maxReplicas",
            (i64::from(max) - i64::from(current)).max(0)
        )));
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
) -> Result<(), Refusal> {
    let asked = parse_quantity(&Quantity(value.into()))
        .ok_or_else(|| Refusal::BadRequest(format!("{role}s.{resource}: {value:?} is not a quantity")))?;
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
        Some(q) => Err(Refusal::Conflict(format!(
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
fn requested_gpus(job: &DIJob, learners: &ResourceRequest) -> Result<Option<i32>, Refusal> {
    let Some(text) = &learners.gpus else { return Ok(None) };
    let gpus = whole_number(&Quantity(text.clone()))
        .filter(|g| *g >= 0)
        .ok_or_else(|| Refusal::BadRequest(format!("learners.gpus: {text:?}: GPUs are whole devices: 0, 1, 2, ...")))?;
    if job.spec.learner.is_none() {
        return Ok(None);
    }
    // A fractional count reads as none, as before.
    let current = i64::from(di_api::resources::learner_gpus(job).unwrap_or(0));
    if gpus == current {
        return Ok(None);
    }
    if job.spec.learner_replicas() > 0 {
        return Err(Refusal::Conflict(format!(
            "the job's learners have {current} GPU(s) each; learners with {gpus} cannot join them (delete the learners first)"
        )));
    }
    if gpus > i64::from(di_api::contract::MAX_GPUS_PER_LEARNER) {
        return Err(Refusal::Conflict(format!(
            "{gpus} GPUs per learner is more than the {} allowed",
            di_api::contract::MAX_GPUS_PER_LEARNER
        )));
    }
    Ok(Some(gpus as i32))
}

/// The replicas a write adds or removes, named as the reconciler names their pods and Services.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Affected {
    pub collectors: Vec<String>,
    pub learners: Vec<String>,
    /// What the logic learners are in the job as written; see [`di_api::resources::learner_role`].
    pub learner_role: Role,
}

impl Affected {
    /// Between the job as read and as written (which may have changed the learners' GPUs).
    pub fn between(before: &DIJob, after: &DIJob) -> Affected {
        let (job, learner_role) = (after.name_any(), di_api::resources::learner_role(after));
        let (b, a) = (&before.spec, &after.spec);
        // Up: the collectors now asked for (some may run already, on spare room). Down: those
        // that go, which keep running on spare room while the job has `maxReplicas` above.
        let collectors = match a.collector_replicas() >= b.collector_replicas() {
            true => affected(&job, Role::Collector, b.collector_replicas(), a.collector_replicas()),
            false => affected(&job, Role::Collector, before.collector_slots(), after.collector_slots()),
        };
        Affected {
            collectors,
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
    fn affected_names_by_direction() {
        assert_eq!(affected("j", Role::Collector, 1, 3), vec!["j-collector-1", "j-collector-2"]);
        assert_eq!(affected("j", Role::Learner, 3, 1), vec!["j-learner-2", "j-learner-1"]);
        assert!(affected("j", Role::Learner, 2, 2).is_empty());
    }

    /// With `maxReplicas`, a scale-up beyond it is refused naming the field; a scale-down
    /// names only the collectors that go, none while they keep running on spare room.
    #[test]
    fn max_replicas_bounds_a_scale_and_keeps_spare_collectors() {
        let mut job: DIJob = serde_json::from_value(json!({
            "apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJob",
            "metadata": {"name": "j", "namespace": "ns", "labels": {"kueue.x-k8s.io/queue-name": "team"}},
            "spec": {"collector": {"replicas": 2, "minReplicas": 1, "maxReplicas": 4, "template": {}}},
        }))
        .unwrap();
        let ask = |n: i64| serde_json::from_value::<ReplicaRequest>(json!({"collectors": {"replicas": n}})).unwrap();
        assert_eq!(scale_up(&job, &ask(2)).unwrap().collectors, 4);
        match scale_up(&job, &ask(3)) {
            Err(Refusal::Conflict(why)) => assert!(why.contains("spec.collector.maxReplicas (4)"), "{why}"),
            other => panic!("{other:?}"),
        }
        let down = scale_down(&job, &ask(1)).unwrap();
        assert!(Affected::between(&job, &down.apply(&job)).collectors.is_empty(), "collector 1 runs on spare room");
        job.spec.collector.as_mut().unwrap().max_replicas = None;
        let down = scale_down(&job, &ask(1)).unwrap();
        assert_eq!(Affected::between(&job, &down.apply(&job)).collectors, ["j-collector-1"]);
    }

    #[test]
    fn quantities_compare_by_amount() {
        assert!(same_amount("2", "2000m"));
        assert!(same_amount("1Gi", "1024Mi"));
        assert!(same_amount("0.5", "500m"));
        assert!(!same_amount("2", "3"));
        assert!(!same_amount("lots", "lots"));
    }
}
