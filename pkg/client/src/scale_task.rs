//! Scaling one task of a task job: the rule `kubectl di replicas --task` applies. A task's pods
//! each list every peer in `DI_NODES`, so any change rebuilds every pod of the job; the caller
//! says so.

use di_api::DIJob;
use di_api::contract::MAX_REPLICAS;
use serde_json::{Value, json};

use crate::Refusal;

/// A task's replicas before and after.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskChange {
    pub task: String,
    pub before: i32,
    pub after: i32,
    /// Pods the job has after the change: every one of them is rebuilt.
    pub pods: i32,
}

/// The merge patch that moves `task` by `delta` pods (a task keeps at least one), with the change.
/// The whole list is written, since a merge patch replaces lists; the write is conditional on
/// the version read, so no other change is lost.
pub fn scale_task(job: &DIJob, task: &str, delta: i64) -> Result<(Value, TaskChange), Refusal> {
    let Some(tasks) = job.spec.tasks.as_ref() else {
        return Err(Refusal::Conflict(
            "the job has roles, not tasks: scale it with --collectors and --learners".into(),
        ));
    };
    let resolved = di_api::tasks::tasks(job);
    let Some(i) = resolved.iter().position(|t| t.name == task) else {
        let known: Vec<&str> = resolved.iter().map(|t| t.name.as_str()).collect();
        return Err(Refusal::NotFound(format!("the job has no task {task:?}; its tasks are {}", known.join(", "))));
    };
    let before = resolved[i].replicas as i64;
    let after = before + delta;
    if !(1..=MAX_REPLICAS as i64).contains(&after) {
        return Err(Refusal::Conflict(format!(
            "task {task} has {before} pod(s); {after} is outside 1..={MAX_REPLICAS} (remove a task by re-creating the job)"
        )));
    }
    let mut list = tasks.clone();
    list[i].replicas = Some(after as i32);
    let pods = di_api::tasks::pod_count(&resolved) as i64 + delta;
    let change = TaskChange { task: task.to_owned(), before: before as i32, after: after as i32, pods: pods as i32 };
    Ok((json!({"spec": {"tasks": list}}), change))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> DIJob {
        serde_json::from_value(json!({
            "apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob", "metadata": {"name": "j"},
            "spec": {"tasks": [{"type": "learner", "template": {}}, {"type": "collector", "replicas": 2, "template": {}}]},
        }))
        .unwrap()
    }

    #[test]
    fn a_task_moves_within_its_bounds() {
        let (patch, change) = scale_task(&job(), "collector", 3).unwrap();
        assert_eq!(change, TaskChange { task: "collector".into(), before: 2, after: 5, pods: 6 });
        assert_eq!(patch["spec"]["tasks"][1]["replicas"], 5);
        assert_eq!(patch["spec"]["tasks"][0]["type"], "learner", "the other tasks are written as they were");
        assert!(
            matches!(scale_task(&job(), "collector", -2), Err(Refusal::Conflict(m)) if m.contains("outside 1..=1000"))
        );
        assert!(
            matches!(scale_task(&job(), "actor", 1), Err(Refusal::NotFound(m)) if m.contains("learner, collector"))
        );
    }
}
