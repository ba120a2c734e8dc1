//! What the plugin prints, as pure functions: kubectl-style tables and descriptions.

use std::collections::BTreeMap;

use di_api::DIJob;
use di_api::contract::labels;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

/// Columns padded like `kubectl get`: three spaces between them, the last one unpadded.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.len());
        }
    }
    let line = |cells: Vec<&str>| {
        let last = cells.len() - 1;
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i == last {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<w$}   ", w = widths[i]));
            }
        }
        out.trim_end().to_owned() + "\n"
    };
    let mut text = line(header.to_vec());
    for row in rows {
        text += &line(row.iter().map(String::as_str).collect());
    }
    text
}

/// `1d`, `3h`, `5m`, `42s`, as kubectl shows ages.
pub fn age(created: Option<Timestamp>, now: Timestamp) -> String {
    let Some(created) = created else { return "<unknown>".into() };
    let secs = now.duration_since(created).as_secs().max(0);
    match secs {
        s if s >= 86_400 => format!("{}d", s / 86_400),
        s if s >= 3_600 => format!("{}h", s / 3_600),
        s if s >= 60 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// Where MultiKueue runs each dispatched job, by namespace and name: the worker cluster that
/// admitted its Workload, `None` while none has (read from the manager's Workloads).
#[derive(Debug, Default)]
pub struct Workers {
    pub by_job: BTreeMap<(String, String), Option<String>>,
    /// The Workloads could not be read: no job's worker is known.
    pub unknown: bool,
}

impl Workers {
    /// The worker cluster `job` runs on, if it is dispatched and one has admitted it.
    fn of(&self, job: &DIJob) -> Option<&str> {
        let key = (job.namespace().unwrap_or_default(), job.name_any());
        self.by_job.get(&key)?.as_deref()
    }
}

/// The phase of a job MultiKueue runs elsewhere: the worker's (`Running (on worker-1)`), or,
/// while no worker has it, `Pending (dispatching)` whatever a worker that had it wrote last.
fn dispatched_phase(job: &DIJob, workers: &Workers) -> String {
    let phase = job.status.as_ref().and_then(|s| s.phase);
    let shown = || phase.map_or_else(|| "Pending".into(), |p| format!("{p:?}"));
    match (workers.of(job), phase) {
        _ if workers.unknown => format!("{} (worker unknown)", shown()),
        (Some(worker), _) => format!("{} (on {worker})", shown()),
        (None, Some(p)) if p.is_finished() => format!("{p:?}"),
        (None, _) => "Pending (dispatching)".into(),
    }
}

/// The phase, and what it waits for: its queue (`Created (Queued)`), or the scheduler that
/// cannot place its pods (`Created (WaitingForCapacity)`), as kubectl shows a pod's reason in
/// place of its phase.
fn phase(job: &DIJob) -> String {
    use di_core::status::{QUEUED, WAITING_FOR_CAPACITY};
    let phase = job.status.as_ref().and_then(|s| s.phase).map_or_else(|| "Pending".into(), |p| format!("{p:?}"));
    let conditions: Vec<_> = job.status.iter().flat_map(|s| &s.conditions).collect();
    let waiting = [QUEUED, WAITING_FOR_CAPACITY]
        .into_iter()
        .find(|kind| conditions.iter().any(|c| c.type_ == *kind && c.status == "True"));
    match waiting {
        Some(kind) => format!("{phase} ({kind})"),
        None => phase,
    }
}

/// The Kueue queue a job waits or runs in and where it stands there, from its `Queued`
/// condition: `team: admitted`, `team: waiting (Pending)`, `team: waiting (Evicted)`.
fn queue_standing(job: &DIJob, queue: &str) -> String {
    let condition = job.status.iter().flat_map(|s| &s.conditions).find(|c| c.type_ == di_core::status::QUEUED);
    match condition {
        Some(c) if c.status == "True" => format!("{queue}: waiting ({})", c.reason.as_deref().unwrap_or("Pending")),
        Some(_) => format!("{queue}: admitted"),
        None => format!("{queue}: not seen by the orchestrator yet"),
    }
}

/// Ready and wanted pods, `ready/wanted`; before any status, what the spec asks for.
fn ready(job: &DIJob) -> String {
    let status = job.status.clone().unwrap_or_default();
    let wanted = status.replicas.unwrap_or_else(|| {
        if job.spec.is_task_job() {
            di_api::tasks::pod_count(&di_api::tasks::tasks(job)) as i32
        } else {
            1 + job.spec.collector_replicas() + job.spec.learner_replicas()
        }
    });
    format!("{}/{wanted}", status.ready_replicas.unwrap_or(0))
}

/// A role's `ready/desired`, or `-` for a task job.
fn role_column(job: &DIJob, shown: Option<String>, desired: i32) -> String {
    if job.spec.is_task_job() { "-".into() } else { shown.unwrap_or_else(|| format!("0/{desired}")) }
}

/// The collectors' column: `ready/desired`, and for a queued job with collectors above its core,
/// how many wait for quota and how many run on spare room: `2/4 (2 waiting)`, `6/2 (4 spare)`.
fn collectors_column(job: &DIJob) -> String {
    let status = job.status.clone().unwrap_or_default();
    let shown = role_column(job, status.collectors, job.spec.collector_replicas());
    let Some(above) = status.collectors_above_core else { return shown };
    let mut said = vec![];
    if above.waiting > 0 {
        said.push(format!("{} waiting", above.waiting));
    }
    if above.spare > 0 {
        said.push(format!("{} spare", above.spare));
    }
    if said.is_empty() { shown } else { format!("{shown} ({})", said.join(", ")) }
}

/// `describe`'s line on the collectors above a queued job's core.
fn above_core(above: &di_api::CollectorsAboveCore) -> String {
    let spare = if above.spare > 0 { format!(" ({} on spare room)", above.spare) } else { String::new() };
    let preempted = if above.preempted > 0 { format!(" ({} preempted)", above.preempted) } else { String::new() };
    format!("{} admitted{spare}, {} waiting for quota{preempted}", above.admitted, above.waiting)
}

/// `kubectl di get`: NAME PHASE READY RESTARTS COLLECTORS LEARNERS AGE (and more with `wide`,
/// NAMESPACE with `-A`), for role jobs and task jobs alike.
pub fn jobs_table(jobs: &[DIJob], workers: &Workers, wide: bool, all_namespaces: bool, now: Timestamp) -> String {
    let mut header = vec!["NAME", "PHASE", "READY", "RESTARTS", "COLLECTORS", "LEARNERS", "AGE"];
    if wide {
        header.extend(["GPUS/LEARNER", "SUSPENDED", "CLEANUP"]);
    }
    if all_namespaces {
        header.insert(0, "NAMESPACE");
    }
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|job| {
            let status = job.status.clone().unwrap_or_default();
            let mut row = vec![
                job.name_any(),
                if job.dispatched() { dispatched_phase(job, workers) } else { phase(job) },
                ready(job),
                status.restarts.unwrap_or(0).to_string(),
                collectors_column(job),
                role_column(job, status.learners, job.spec.learner_replicas()),
                age(job.metadata.creation_timestamp.as_ref().map(|t| t.0), now),
            ];
            if wide {
                let gpus = job.spec.learner.as_ref().and_then(|l| l.gpus).map_or("-".into(), |g| g.to_string());
                row.extend([
                    gpus,
                    job.spec.is_suspended().to_string(),
                    di_api::defaults::clean_pod_policy(job).as_str().to_owned(),
                ]);
            }
            if all_namespaces {
                row.insert(0, job.namespace().unwrap_or_default());
            }
            row
        })
        .collect();
    table(&header, &rows)
}

/// One line of progress while waiting: phase and ready/desired replicas.
pub fn progress(job: &DIJob) -> String {
    if job.spec.is_task_job() {
        return format!("{}: phase {}, ready {}", job.name_any(), phase(job), ready(job));
    }
    let status = job.status.clone().unwrap_or_default();
    format!(
        "{}: phase {}, collectors {}, learners {}",
        job.name_any(),
        phase(job),
        status.collectors.unwrap_or_else(|| format!("0/{}", job.spec.collector_replicas())),
        status.learners.unwrap_or_else(|| format!("0/{}", job.spec.learner_replicas())),
    )
}

/// A pod's row in `describe` and `replicas list`: name, role (a task pod's task), phase, URL (a
/// task pod's address).
pub fn replica_rows(pods: &[Pod]) -> Vec<Vec<String>> {
    let mut pods: Vec<&Pod> = pods.iter().collect();
    pods.sort_by_key(|p| p.name_any());
    pods.iter()
        .map(|p| {
            let task = p.labels().get(di_api::tasks::TASK_LABEL).cloned();
            let role = p.labels().get(labels::REPLICA_TYPE).cloned().or(task.clone()).unwrap_or_default();
            let phase = if p.metadata.deletion_timestamp.is_some() {
                "Terminating".into()
            } else {
                p.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_else(|| "Pending".into())
            };
            let url = match (task, p.spec.as_ref().and_then(|s| s.subdomain.clone())) {
                (Some(_), Some(subdomain)) => {
                    format!("{}.{subdomain}.{}.svc", p.name_any(), p.namespace().unwrap_or_default())
                }
                _ => di_api::pod::url_of(p),
            };
            vec![p.name_any(), role, phase, url]
        })
        .collect()
}

/// `kubectl di describe`: the spec in short, the status, conditions, replicas and events.
pub fn describe(
    job: &DIJob,
    workers: &Workers,
    pods: &[Pod],
    events: &[(String, String, String)],
    now: Timestamp,
) -> String {
    let spec = &job.spec;
    let mut out = String::new();
    let mut field = |k: &str, v: String| out.push_str(&format!("{:<20}{v}\n", format!("{k}:")));
    field("Name", job.name_any());
    field("Namespace", job.namespace().unwrap_or_default());
    field("Phase", if job.dispatched() { dispatched_phase(job, workers) } else { phase(job) });
    if job.dispatched() {
        let worker = match workers.of(job) {
            _ if workers.unknown => "by MultiKueue (its Workload cannot be read here)".to_owned(),
            Some(w) => {
                format!("by MultiKueue to worker cluster {w}, which runs it and scales it; its status is copied here")
            }
            None => "by MultiKueue, waiting for a worker cluster with room".to_owned(),
        };
        field("Dispatched", worker);
    }
    field("Age", age(job.metadata.creation_timestamp.as_ref().map(|t| t.0), now));
    field("Clean pod policy", di_api::defaults::clean_pod_policy(job).as_str().into());
    field("Suspended", spec.is_suspended().to_string());
    if let Some(queue) = di_core::queue::queue_name(job) {
        field("Queue", queue_standing(job, queue));
    }
    if let Some(limit) = spec.restart_limit {
        field("Restart limit", limit.to_string());
    }
    if let Some(ttl) = spec.ttl_seconds_after_finished {
        field("TTL after finished", format!("{ttl}s"));
    }
    let status = job.status.clone().unwrap_or_default();
    field("Ready", ready(job));
    if spec.is_task_job() {
        let policy = di_api::tasks::restart_policy(job);
        field("Restarts", format!("{} of at most {}", status.restarts.unwrap_or(0), di_api::tasks::backoff_limit(job)));
        field("Restart policy", format!("{policy:?}"));
    } else {
        field("Collectors", status.collectors.clone().unwrap_or_else(|| format!("0/{}", spec.collector_replicas())));
        if let Some(above) = &status.collectors_above_core {
            field("Above the core", above_core(above));
        }
        if let Some(collector) = &spec.collector
            && let (Some(min), max) = (collector.min_replicas, collector.max_replicas)
        {
            let max = max.map_or(String::new(), |m| format!(", up to {m} on spare room"));
            field("Collector range", format!("{min} in the core{max}"));
        }
        field("Learners", status.learners.clone().unwrap_or_else(|| format!("0/{}", spec.learner_replicas())));
    }
    if let Some(gpus) = spec.learner.as_ref().and_then(|l| l.gpus) {
        field("GPUs per learner", gpus.to_string());
    }
    if spec.is_task_job() {
        out.push_str("\nTasks:\n");
        let rows: Vec<Vec<String>> = di_api::tasks::tasks(job)
            .iter()
            .map(|t| {
                let counts = status.task_status.get(&t.name).cloned().unwrap_or_default();
                let pods = counts.iter().map(|(phase, n)| format!("{phase} {n}")).collect::<Vec<_>>().join(", ");
                let decides = if t.completion { "yes" } else { "" };
                vec![t.name.clone(), t.type_.as_str().to_owned(), t.replicas.to_string(), decides.into(), pods]
            })
            .collect();
        out.push_str(&indent(&table(&["TASK", "TYPE", "REPLICAS", "DECIDES", "PODS"], &rows)));
    }
    out.push_str("\nConditions:\n");
    let rows: Vec<Vec<String>> = status
        .conditions
        .iter()
        .map(|c| {
            vec![
                c.type_.clone(),
                c.status.clone(),
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            ]
        })
        .collect();
    out.push_str(&indent(&table(&["TYPE", "STATUS", "REASON", "MESSAGE"], &rows)));
    out.push_str("\nReplicas:\n");
    out.push_str(&indent(&table(&["POD", "ROLE", "PHASE", "URL"], &replica_rows(pods))));
    out.push_str("\nEvents:\n");
    if events.is_empty() {
        out.push_str("  <none>\n");
    } else {
        let rows: Vec<Vec<String>> = events.iter().map(|(t, r, m)| vec![t.clone(), r.clone(), m.clone()]).collect();
        out.push_str(&indent(&table(&["TYPE", "REASON", "MESSAGE"], &rows)));
    }
    out
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}

#[cfg(test)]
mod tests;
