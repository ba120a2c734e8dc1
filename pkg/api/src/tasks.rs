//! The contract of a task job, as pure functions: which pods it has, their ranks and names, and
//! the environment every worker reads to find its peers. DI-engine's `ditask --platform k8s` reads
//! `DI_RANK` and `DI_NODES` and requires `DI_NODES[DI_RANK]` to be its own address; other systems
//! read the per-task lists. The reconciler, the CLI and local runs all build pods from here.

use k8s_openapi::api::core::v1::PodTemplateSpec;

use crate::dijob::DIJob;
use crate::task::{JobRestartPolicy, TaskType};

/// Environment variables of a task job's pods.
pub mod env {
    /// `<namespace>/<name>` of the job.
    pub const JOB_ID: &str = "DI_JOB_ID";
    /// The pod's global rank: tasks in spec order, then replicas in index order, from 0.
    pub const RANK: &str = "DI_RANK";
    /// Every pod's FQDN in rank order, comma-separated, without a port.
    pub const NODES: &str = "DI_NODES";

    /// `DI_<TASK>_NODES`: the task's own pods' FQDNs in index order (the task name upper-cased,
    /// `-` written as `_`).
    pub fn task_nodes(task: &str) -> String {
        format!("DI_{}_NODES", task.to_ascii_uppercase().replace('-', "_"))
    }
}

/// Annotations on a task job's pods. The first three are DI-orchestrator 1.x's.
pub mod annotations {
    /// The pod's global rank.
    pub const RANK: &str = "diengine/rank";
    /// The pod's index within its task.
    pub const TASK_RANK: &str = "diengine/task-rank";
    /// How many pods the job has.
    pub const REPLICAS: &str = "diengine/replicas";
    /// The peer set the pod's `DI_NODES` was built from (`task=replicas,...` in spec order). A pod
    /// whose value differs from the job's has a stale peer list and is rebuilt.
    pub const PEERS: &str = "diengine.opendilab.org/peers";
}

/// Label naming the task a pod belongs to.
pub const TASK_LABEL: &str = "diengine.opendilab.org/task";

/// Default of `spec.backoffLimit`, as in DI-orchestrator 1.x.
pub const DEFAULT_BACKOFF_LIMIT: i32 = 3;
/// Default cluster domain of the pods' FQDNs.
pub const DEFAULT_CLUSTER_DOMAIN: &str = "cluster.local";

/// A task as the job asks for it, with its defaults resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct Task<'a> {
    pub name: String,
    pub type_: TaskType,
    pub replicas: u32,
    /// Its pods' success decides the job's.
    pub completion: bool,
    /// Its `minAvailable`, as given (`crate::gang` reads it).
    pub min_available: Option<u32>,
    pub template: &'a PodTemplateSpec,
}

/// One pod of a task job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub task: String,
    /// Index within the task.
    pub index: u32,
    /// Global rank.
    pub rank: u32,
    pub pod: String,
}

/// The tasks of a job in spec order, defaults resolved: a task without a name takes its type's,
/// replicas default to 1 (a negative count, refused on apply, counts as 0 here).
pub fn tasks(job: &DIJob) -> Vec<Task<'_>> {
    let specs = job.spec.tasks.as_deref().unwrap_or_default();
    let typed_learner = specs.iter().any(|t| t.type_ == Some(TaskType::Learner));
    let marked = specs.iter().any(|t| t.completion == Some(true));
    specs
        .iter()
        .map(|t| {
            let type_ = t.type_.unwrap_or(TaskType::None);
            let completion = if marked {
                t.completion == Some(true)
            } else {
                // Without a mark, the learner decides; without a learner, every task does.
                !typed_learner || type_ == TaskType::Learner
            };
            Task {
                name: t.name.clone().filter(|n| !n.is_empty()).unwrap_or_else(|| type_.as_str().to_owned()),
                type_,
                replicas: t.replicas.unwrap_or(1).max(0) as u32,
                completion,
                min_available: t.min_available.map(|m| m.max(0) as u32),
                template: &t.template,
            }
        })
        .collect()
}

/// How many pods the tasks make.
pub fn pod_count(tasks: &[Task]) -> u32 {
    tasks.iter().map(|t| t.replicas).sum()
}

/// `<job>-<task>-<index>`: the pod's name and hostname.
pub fn pod_name(job: &str, task: &str, index: u32) -> String {
    format!("{job}-{task}-{index}")
}

/// `di-<job>`: the job's headless Service and its pods' subdomain.
pub fn subdomain(job: &str) -> String {
    format!("di-{job}")
}

/// `<pod>.di-<job>.<namespace>.svc.<cluster domain>`.
pub fn fqdn(pod: &str, job: &str, namespace: &str, cluster_domain: &str) -> String {
    format!("{pod}.{}.{namespace}.svc.{cluster_domain}", subdomain(job))
}

/// Every pod of the job in rank order.
pub fn members(job_name: &str, tasks: &[Task]) -> Vec<Member> {
    let mut out = vec![];
    for task in tasks {
        for index in 0..task.replicas {
            let rank = out.len() as u32;
            out.push(Member { task: task.name.clone(), index, rank, pod: pod_name(job_name, &task.name, index) });
        }
    }
    out
}

/// The value of [`annotations::PEERS`] for these tasks.
pub fn peers(tasks: &[Task]) -> String {
    tasks.iter().map(|t| format!("{}={}", t.name, t.replicas)).collect::<Vec<_>>().join(",")
}

/// The restart policy of a job; unset means `Pod`.
pub fn restart_policy(job: &DIJob) -> JobRestartPolicy {
    job.spec.restart_policy.unwrap_or(JobRestartPolicy::Pod)
}

/// The backoff limit of a job; unset means [`DEFAULT_BACKOFF_LIMIT`].
pub fn backoff_limit(job: &DIJob) -> u32 {
    job.spec.backoff_limit.unwrap_or(DEFAULT_BACKOFF_LIMIT).max(0) as u32
}

/// The contract's variables for each member, in rank order: `(name, value)` pairs. The same
/// `DI_NODES` and per-task lists go to every pod; only the rank differs.
pub fn environment(job: &DIJob, tasks: &[Task], cluster_domain: &str) -> Vec<(Member, Vec<(String, String)>)> {
    let name = job.metadata.name.clone().unwrap_or_default();
    let namespace = job.metadata.namespace.clone().unwrap_or_default();
    let members = members(&name, tasks);
    let address = |m: &Member| fqdn(&m.pod, &name, &namespace, cluster_domain);
    let nodes = members.iter().map(address).collect::<Vec<_>>().join(",");
    let per_task: Vec<(String, String)> = tasks
        .iter()
        .map(|t| {
            let list = members.iter().filter(|m| m.task == t.name).map(address).collect::<Vec<_>>().join(",");
            (env::task_nodes(&t.name), list)
        })
        .collect();
    members
        .into_iter()
        .map(|m| {
            let mut vars = vec![
                (env::JOB_ID.to_owned(), format!("{namespace}/{name}")),
                (env::RANK.to_owned(), m.rank.to_string()),
                (env::NODES.to_owned(), nodes.clone()),
            ];
            vars.extend(per_task.iter().cloned());
            (m, vars)
        })
        .collect()
}

#[cfg(test)]
mod tests;
