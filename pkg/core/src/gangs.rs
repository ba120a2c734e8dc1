//! A pass's gang actions: every pod the pass creates that belongs to a gang joins it, and the
//! gang's PodGroup is applied first (created, or its minimum set to what the job asks now). A
//! PodGroup is applied only by passes that create pods of its gang: a gang's minimum changes only
//! with its pods (a task job's pods are rebuilt when its tasks are rescaled; a logic learner's
//! GPUs are fixed while it exists), and a pass that creates nothing costs no request. A logic
//! learner scaled away takes its PodGroup with it; the rest go with the job, which owns them.

use std::collections::{BTreeMap, BTreeSet};

use di_api::DIJob;
use di_api::contract::{Role, names};
use kube::ResourceExt;

use crate::decision::{Action, Why};
use crate::desired::gang::{self, Backend, Gang};
use crate::desired::{BuildError, Settings, owner_reference};

/// Joins the created pods of `gangs` to them and puts their PodGroups' applies first. A gang
/// counts on none of the pods in `held` (those a queue's admission has no room for, which are not
/// created while it lasts): its minimum is at most the pods that may run.
pub fn attach(
    job: &DIJob,
    gangs: &[Gang],
    held: &BTreeSet<String>,
    settings: &Settings,
    actions: &mut Vec<Action>,
) -> Result<(), BuildError> {
    if settings.gang == Backend::None {
        return Ok(());
    }
    let gangs: Vec<Gang> = gangs.iter().map(|g| within(g, held)).collect();
    let gangs = &gangs[..];
    let gang_of: BTreeMap<&str, &Gang> =
        gangs.iter().flat_map(|g| g.pods.iter().map(move |p| (p.as_str(), g))).collect();
    let mut needed: BTreeMap<String, &Gang> = BTreeMap::new();
    for action in actions.iter_mut() {
        if let Action::CreatePod(pod) = action
            && let Some(gang) = gang_of.get(pod.name_any().as_str())
        {
            gang::join(pod, &gang.name, &settings.gang);
            needed.insert(gang.name.clone(), gang);
        }
    }
    let mut first = vec![];
    if !needed.is_empty() {
        let owner = owner_reference(job, &settings.owner_version)?;
        let class = job.spec.priority_class_name.as_deref().filter(|c| !c.is_empty());
        for gang in needed.values() {
            if let Some(object) = gang::pod_group(job, gang, &settings.gang, &owner, class) {
                first.push(Action::ApplyPodGroup(Box::new(object)));
            }
        }
    }
    // A logic learner's aggregator deleted because the job has fewer learners now.
    let job_name = job.name_any();
    let gone = actions.iter().filter_map(|a| match a {
        Action::DeletePod { name, why: Why::ScaledDown, .. } => Some(name),
        _ => None,
    });
    let scaled_away: Vec<Action> = gone
        .filter_map(|name| {
            let index = name.strip_prefix(&format!("{job_name}-{}-", Role::Aggregator.label()))?.parse::<u32>().ok()?;
            let group = names::replica(&job_name, Role::Learner, index);
            (!gangs.iter().any(|g| g.name == group)).then_some(Action::DeletePodGroup { name: group })
        })
        .collect();
    actions.splice(0..0, first);
    actions.extend(scaled_away);
    Ok(())
}

/// `gang` with a minimum of at most its pods that may run, none of `held` among them.
fn within(gang: &Gang, held: &BTreeSet<String>) -> Gang {
    let may_run = gang.pods.iter().filter(|p| !held.contains(*p)).count() as u32;
    Gang { min_count: gang.min_count.min(may_run), ..gang.clone() }
}
