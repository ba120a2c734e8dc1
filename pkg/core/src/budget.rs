//! A job's core PodDisruptionBudget (`spec.protectCore`): its coordinator, learners and
//! aggregators (a task job's tasks but the collectors) may not be evicted through the API, so a
//! drain waits for them while collectors go. Applied (server-side) by passes that create core
//! pods, before them, as a gang's PodGroup is: a pass that creates no core pod costs no request,
//! and one deleted by hand is back with the next core pod. It goes with the job, which owns it.
//!
//! Its minimum is the core's count, not `maxUnavailable: 0`: the disruption controller reads a
//! budget's `maxUnavailable` (or a percentage) against the scale of the pods' owner, and a
//! DIJob's scale is its collectors. A minimum of every core pod allows no eviction; after a scale
//! down it is more than the pods left, which allows none either.

use std::collections::{BTreeMap, BTreeSet};

use di_api::contract::{Role, labels};
use di_api::task::TaskType;
use di_api::tasks::{self, TASK_LABEL};
use di_api::{DIJob, Phase};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use crate::decision::{Action, Plan};
use crate::desired::{BuildError, Settings, job_labels, owner_reference};

/// The budget's name: one per job.
pub fn name(job: &str) -> String {
    format!("{job}-core")
}

/// Puts the core's budget before the plan's actions when the job asks for one and they create a
/// core pod. `wanted`: the names of the pods the job wants in its core now; `pods`, the job's
/// pods as seen. The minimum counts both (the core pods alive beside those wanted: kept while
/// the job cannot build them, an AggregatorConfig missing, or on their way out), so none is left
/// out. A job that has just finished gives its budget up, so a drain never waits for the pods a
/// `cleanPodPolicy` keeps.
pub fn protect(
    job: &DIJob,
    wanted: BTreeSet<String>,
    pods: &[&Pod],
    settings: &Settings,
    plan: &mut Plan,
) -> Result<(), BuildError> {
    if !job.spec.protect_core.unwrap_or(false) {
        return Ok(());
    }
    let Some((key, core)) = core(job) else { return Ok(()) };
    let finished = |phase: Option<Phase>| phase.is_some_and(|p| p.is_finished());
    if finished(plan.status.phase) && !finished(job.status.as_ref().and_then(|s| s.phase)) {
        plan.actions.push(Action::DeleteDisruptionBudget { name: name(&job.name_any()) });
        return Ok(());
    }
    let actions = &mut plan.actions;
    let creates_core = actions.iter().any(|a| matches!(a, Action::CreatePod(pod) if is_core(pod, key, &core)));
    let alive = pods.iter().filter(|p| p.metadata.deletion_timestamp.is_none() && is_core(p, key, &core));
    let core_pods = wanted.into_iter().chain(alive.map(|p| p.name_any())).collect::<BTreeSet<_>>().len();
    if creates_core {
        let owner = owner_reference(job, &settings.owner_version)?;
        let budget = PodDisruptionBudget {
            metadata: ObjectMeta {
                name: Some(name(&job.name_any())),
                namespace: job.namespace(),
                labels: Some(job_labels(&job.name_any(), None)),
                owner_references: Some(vec![owner]),
                ..Default::default()
            },
            spec: Some(PodDisruptionBudgetSpec {
                min_available: Some(IntOrString::Int(core_pods.try_into().unwrap_or(i32::MAX))),
                selector: Some(LabelSelector {
                    match_labels: Some(BTreeMap::from([(labels::JOB_NAME.to_owned(), job.name_any())])),
                    match_expressions: Some(vec![LabelSelectorRequirement {
                        key: key.to_owned(),
                        operator: "In".into(),
                        values: Some(core),
                    }]),
                }),
                // A core pod that is not ready (crashing, never started) protects nothing: a
                // drain may take it, or it would wait for ever.
                unhealthy_pod_eviction_policy: Some("AlwaysAllow".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        actions.insert(0, Action::ApplyDisruptionBudget(Box::new(budget)));
    }
    Ok(())
}

/// The label that tells the core's pods, and its values for them: roles in a role job, task
/// names in a task job. `None` for a task job of collectors alone.
fn core(job: &DIJob) -> Option<(&'static str, Vec<String>)> {
    if job.spec.is_task_job() {
        let names: Vec<String> =
            tasks::tasks(job).into_iter().filter(|t| t.type_ != TaskType::Collector).map(|t| t.name).collect();
        return (!names.is_empty()).then_some((TASK_LABEL, names));
    }
    let roles = [Role::Coordinator, Role::Learner, Role::Aggregator, Role::DdpLearner];
    Some((labels::REPLICA_TYPE, roles.iter().map(|r| r.label().to_owned()).collect()))
}

/// A task job's core pods: those of every task but the collectors.
pub fn task_core_pods(job: &DIJob) -> BTreeSet<String> {
    let job_name = job.name_any();
    let mut names = BTreeSet::new();
    for task in tasks::tasks(job).into_iter().filter(|t| t.type_ != TaskType::Collector) {
        names.extend((0..task.replicas).map(|i| tasks::pod_name(&job_name, &task.name, i)));
    }
    names
}

fn is_core(pod: &Pod, key: &str, core: &[String]) -> bool {
    pod.labels().get(key).is_some_and(|v| core.contains(v))
}
