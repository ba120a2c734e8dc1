//! The benchmark's job, and how a watcher tells that it runs: its status, and its pods.

use std::collections::{HashMap, HashSet};

use di_api::contract::labels;
use di_api::{DIJob, Phase};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use serde_json::json;

/// The status's collectors when all `n` are ready, for [`job_running`]: made once per watch, not
/// per job and event (the bench's CPU is taken from the cores it measures).
pub fn all_ready(n: usize) -> String {
    format!("{n}/{n}")
}

/// Whether a job's status says it runs with its collectors as `all_ready` says.
pub fn job_running(job: &DIJob, all_ready: &str) -> bool {
    let status = job.status.as_ref();
    status.and_then(|s| s.phase) == Some(Phase::Running)
        && status.and_then(|s| s.collectors.as_deref()) == Some(all_ready)
}

/// Whether a pod's phase is Running.
pub fn pod_running(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// Counts the running pods of each job from a watch's reports, each pod once, to tell when a
/// job has `per_job` of them.
pub struct JobPods {
    per_job: usize,
    running: HashMap<String, HashSet<String>>,
}

impl JobPods {
    pub fn new(per_job: usize) -> JobPods {
        JobPods { per_job, running: HashMap::new() }
    }

    /// The job (by its label) whose pods all run with this report of `pod`, the first time they do.
    pub fn saw(&mut self, pod: &Pod) -> Option<String> {
        let job = pod.labels().get(labels::JOB_NAME).filter(|_| pod_running(pod))?;
        let seen = self.running.entry(job.clone()).or_default();
        (seen.insert(pod.name_any()) && seen.len() == self.per_job).then(|| job.clone())
    }
}

/// A job of one coordinator and `collectors` collectors.
pub fn job(name: &str, collectors: usize) -> DIJob {
    let pod = json!({"containers": [{"name": "di-container", "image": "ding"}]});
    serde_json::from_value(json!({
        "apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJob",
        "metadata": {"name": name},
        "spec": {"coordinator": {"template": {"spec": pod}}, "collector": {"replicas": collectors, "template": {"spec": pod}}},
    }))
    .expect("a valid job")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, job: &str, phase: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {labels::JOB_NAME: job}},
            "status": {"phase": phase},
        }))
        .expect("a pod")
    }

    #[test]
    fn names_a_job_once_when_its_pods_all_run() {
        let mut pods = JobPods::new(2);
        assert_eq!(pods.saw(&pod("a-0", "a", "Pending")), None, "not running");
        assert_eq!(pods.saw(&pod("a-0", "a", "Running")), None, "one of two");
        assert_eq!(pods.saw(&pod("a-0", "a", "Running")), None, "the same pod again");
        assert_eq!(pods.saw(&pod("b-0", "b", "Running")), None, "another job's");
        assert_eq!(pods.saw(&pod("a-1", "a", "Running")), Some("a".into()));
        assert_eq!(pods.saw(&pod("a-1", "a", "Running")), None, "named once");
    }
}
