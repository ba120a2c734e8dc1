//! The names a job's pods and Services take in its namespace, from its spec alone, and which of
//! them another job takes too. Names are derived (`<job>-collector-0`, `<job>-<task>-0`,
//! `di-<job>`), so two jobs can want one name: task `b-collector` of job `a` and role job `a-b`
//! both want pod `a-b-collector-0`. The webhook refuses the second of such jobs on create; the
//! reconciler shows any collision left (a job scaled into one) as NamesTaken.

use std::collections::{BTreeMap, BTreeSet};

use crate::contract::{MAX_REPLICAS, Role, names};
use crate::{DIJob, tasks};

/// Names of the pods and Services the job wants at its spec's counts. A multi-GPU learner's DDP
/// learners are left out: how many there are depends on the orchestrator's settings.
pub fn claimed(name: &str, job: &DIJob) -> BTreeSet<String> {
    let spec = &job.spec;
    // A stored job the webhook never saw may ask for any count: its names are not listed then,
    // rather than billions of them.
    let bounded = |n: i32| (0..=MAX_REPLICAS).contains(&n);
    if spec.is_task_job() {
        let tasks = tasks::tasks(job);
        if !tasks.iter().all(|t| bounded(t.replicas as i32)) {
            return BTreeSet::new();
        }
        let members = tasks::members(name, &tasks);
        return members.into_iter().map(|m| m.pod).chain([tasks::subdomain(name)]).collect();
    }
    let mut claimed = BTreeSet::from([names::coordinator(name)]);
    let count = |n: i32| 0..n.clamp(0, MAX_REPLICAS) as u32;
    claimed.extend(count(job.collector_slots()).map(|i| names::replica(name, Role::Collector, i)));
    let learner = match spec.learner.as_ref().and_then(|l| l.gpus) {
        Some(gpus) if gpus > 1 => Role::Aggregator,
        _ => Role::Learner,
    };
    claimed.extend(count(spec.learner_replicas()).map(|i| names::replica(name, learner, i)));
    claimed
}

/// The names `wanted` shares with the other jobs' claims, each with the job that claims it.
pub fn shared<'a>(
    wanted: &BTreeSet<String>,
    others: impl IntoIterator<Item = (&'a str, &'a BTreeSet<String>)>,
) -> BTreeMap<String, String> {
    let mut shared = BTreeMap::new();
    for (other, claims) in others {
        for name in wanted.intersection(claims) {
            shared.entry(name.clone()).or_insert_with(|| other.to_owned());
        }
    }
    shared
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn job(spec: serde_json::Value) -> DIJob {
        serde_json::from_value(json!({"metadata": {"name": "x"}, "spec": spec})).unwrap()
    }

    #[test]
    fn a_task_and_a_role_job_can_claim_one_name() {
        let template = json!({"spec": {"containers": [{"name": "c", "image": "i"}]}});
        let tasks =
            job(json!({"tasks": [{"name": "b-collector", "type": "collector", "replicas": 2, "template": template}]}));
        let roles =
            job(json!({"coordinator": {"template": template}, "collector": {"replicas": 1, "template": template}}));
        let a = claimed("a", &tasks);
        assert_eq!(a, BTreeSet::from(["a-b-collector-0".into(), "a-b-collector-1".into(), "di-a".into()]));
        let a_b = claimed("a-b", &roles);
        assert_eq!(a_b, BTreeSet::from(["a-b-coordinator".into(), "a-b-collector-0".into()]));
        assert_eq!(shared(&a_b, [("a", &a)]), BTreeMap::from([("a-b-collector-0".into(), "a".into())]));
        // A task job `coordinator` and a role job `di` want one Service.
        let di = claimed("di", &roles);
        let coordinator = claimed("coordinator", &tasks);
        assert_eq!(shared(&coordinator, [("di", &di)]).keys().collect::<Vec<_>>(), ["di-coordinator"]);
        assert!(shared(&a, [("a-b", &claimed("c", &roles))]).is_empty());
    }
}
