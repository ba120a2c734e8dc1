//! Gang scheduling of a DIJob: what its `spec.gang` asks, a task's minimum, and the rule that says
//! which pods of a task job are placed all at once or not at all. A role job's gangs are its
//! multi-GPU logic learners (an aggregator and its DDP learners), which the orchestrator builds
//! from its desired pods; how a gang becomes a PodGroup is the orchestrator's backend's.

use crate::dijob::DIJob;
use crate::tasks::{self, Task};

/// Whether `job` asks for gangs (the default).
pub fn enabled(job: &DIJob) -> bool {
    job.spec.gang.as_ref().and_then(|g| g.enabled).unwrap_or(true)
}

/// How many of `task`'s pods its job's gang needs: its `minAvailable`, else all of them.
pub fn task_minimum(task: &Task) -> u32 {
    task.min_available.unwrap_or(task.replicas).min(task.replicas)
}

/// A task job's gang: the pods placed together, and how many of them must be placed at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskGang {
    /// Every pod of the tasks whose minimum is above 0, in rank order.
    pub pods: Vec<String>,
    /// The sum of the tasks' minimums: the scheduler places no pod of the gang until it can
    /// place this many.
    pub min_count: u32,
}

/// The one gang of a task job, or none: when the job asks for none, or every task opts out.
pub fn task_gang(job: &DIJob) -> Option<TaskGang> {
    if !enabled(job) {
        return None;
    }
    let name = job.metadata.name.as_deref().unwrap_or_default();
    let mut gang = TaskGang { pods: vec![], min_count: 0 };
    for task in tasks::tasks(job) {
        let minimum = task_minimum(&task);
        if minimum == 0 {
            continue;
        }
        gang.min_count += minimum;
        gang.pods.extend((0..task.replicas).map(|i| tasks::pod_name(name, &task.name, i)));
    }
    (gang.min_count > 0).then_some(gang)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dijob::GangSpec;
    use crate::task::{TaskSpec, TaskType};

    fn job(tasks: &[(&str, i32, Option<i32>)], gang: Option<bool>) -> DIJob {
        let mut job = DIJob::new("j", Default::default());
        job.spec.gang = gang.map(|enabled| GangSpec { enabled: Some(enabled) });
        job.spec.tasks = Some(
            tasks
                .iter()
                .map(|(name, replicas, min)| TaskSpec {
                    name: Some(name.to_string()),
                    type_: Some(TaskType::None),
                    replicas: Some(*replicas),
                    min_available: *min,
                    ..Default::default()
                })
                .collect(),
        );
        job
    }

    #[test]
    fn a_task_job_is_one_gang_of_all_its_pods_by_default() {
        let gang = task_gang(&job(&[("learner", 1, None), ("actor", 2, None)], None)).unwrap();
        assert_eq!(gang.pods, ["j-learner-0", "j-actor-0", "j-actor-1"]);
        assert_eq!(gang.min_count, 3);
    }

    #[test]
    fn a_task_gives_its_own_minimum_or_opts_out() {
        let gang = task_gang(&job(&[("learner", 2, Some(1)), ("actor", 4, Some(0)), ("buffer", 1, None)], None));
        let gang = gang.unwrap();
        assert_eq!(gang.pods, ["j-learner-0", "j-learner-1", "j-buffer-0"], "the opted-out task's pods are free");
        assert_eq!(gang.min_count, 2);
    }

    #[test]
    fn no_gang_when_disabled_or_when_every_task_opts_out() {
        assert_eq!(task_gang(&job(&[("learner", 2, None)], Some(false))), None);
        assert_eq!(task_gang(&job(&[("learner", 2, Some(0))], None)), None);
    }

    #[test]
    fn a_minimum_above_the_replicas_counts_the_replicas() {
        // Refused on apply; a stored job that has one still gets a gang it can fill.
        assert_eq!(task_gang(&job(&[("learner", 2, Some(5))], None)).unwrap().min_count, 2);
    }
}
