//! Queues and quotas: a job labelled `kueue.x-k8s.io/queue-name` is a Kueue workload (DIJob is
//! one of Kueue's external frameworks). Its pods run only while its Workload is admitted; until
//! then the job is held as a suspended one is, with no pod. The orchestrator makes the Workload
//! (one podSet per role, or per task, with its count and pod template), puts the admitted
//! flavors' node labels and tolerations into the pods it creates, tells Kueue when the pods are
//! ready and when the job has finished (which gives its quota back at once), and, when Kueue
//! evicts the job, deletes its pods and then gives the admission back so the job waits again.
//! Pure: the Workload and the ResourceFlavors are read by the caller.

use std::collections::BTreeMap;

use di_api::contract::labels;
use di_api::tasks::TASK_LABEL;
use di_api::{DIJob, Phase};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::core::ApiResource;
use serde_json::{Value, json};

use crate::decision::{Action, Plan, World};
use crate::desired::{self, BuildError, Settings, job_labels};

/// The label that puts a job in a Kueue LocalQueue of its namespace.
pub use di_api::contract::kueue::QUEUE_NAME as QUEUE_LABEL;
/// The label Kueue finds a Workload's job by.
const JOB_UID_LABEL: &str = "kueue.x-k8s.io/job-uid";
const API_VERSION: &str = "kueue.x-k8s.io/v1beta2";

fn kueue_kind(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "kueue.x-k8s.io".into(),
        version: "v1beta2".into(),
        api_version: API_VERSION.into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// Kueue's Workload kind.
pub fn workload_kind() -> ApiResource {
    kueue_kind("Workload", "workloads")
}

/// Kueue's ResourceFlavor kind (cluster-scoped).
pub fn flavor_kind() -> ApiResource {
    kueue_kind("ResourceFlavor", "resourceflavors")
}

/// The LocalQueue a job waits in, if it is in one.
pub fn queue_name(job: &DIJob) -> Option<&str> {
    job.labels().get(QUEUE_LABEL).map(String::as_str).filter(|q| !q.is_empty())
}

/// The name of a job's Workload: its UID's start keeps a job submitted again under the same
/// name from finding its predecessor's.
pub fn workload_name(job: &DIJob) -> String {
    let uid = job.uid().unwrap_or_default();
    format!("dijob-{}-{}", job.name_any(), uid.chars().filter(char::is_ascii_alphanumeric).take(8).collect::<String>())
}

/// What a pass knows of the queue of a job that is in one.
#[derive(Clone, Debug, PartialEq)]
pub enum Queue {
    /// This cluster serves no Kueue Workloads: the job waits, saying so.
    NoKueue,
    /// The job's Workload (`None` until it is made), the ResourceFlavors by name (their specs),
    /// which place an admitted job's pods, and the job's PriorityClass with its value, which
    /// orders the queue and lets a job preempt lower ones.
    Kueue { workload: Option<Value>, flavors: BTreeMap<String, Value>, priority: Option<(String, i32)> },
}

/// Whether a Workload's condition `type_` is True.
fn condition<'a>(workload: &'a Value, type_: &str) -> Option<&'a Value> {
    workload["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == type_)
}

fn is_true(workload: &Value, type_: &str) -> bool {
    condition(workload, type_).is_some_and(|c| c["status"] == "True")
}

/// Where the job stands in its queue, for its status and its pods.
#[derive(Clone, Debug, PartialEq)]
pub enum Standing {
    /// Not admitted (yet, or again): no pod may run. The reason and message of its condition.
    Held { reason: &'static str, message: String },
    /// Admitted: its pods run, each pod placed as the admission's flavors say.
    Admitted { cluster_queue: String },
}

/// Where a job in `queue` named `name` stands.
pub fn standing(name: &str, queue: &Queue) -> Standing {
    let held = |reason, message: String| Standing::Held { reason, message };
    let Queue::Kueue { workload, .. } = queue else {
        return held(
            "NoKueue",
            format!(
                "the job waits in queue {name}, but the orchestrator has no Kueue (the API server serves no \
                 {API_VERSION} Workloads, or it runs with --queues=none): install Kueue, or remove the label \
                 {QUEUE_LABEL} to run the job without a queue"
            ),
        );
    };
    let Some(workload) = workload else {
        return held("Pending", format!("the job's Workload is being made for queue {name}"));
    };
    if let Some(evicted) = condition(workload, "Evicted").filter(|c| c["status"] == "True") {
        let why = evicted["message"].as_str().or(evicted["reason"].as_str()).unwrap_or("evicted");
        return held(
            "Evicted",
            format!("Kueue evicted the job from queue {name}: {why}; it waits to be admitted again"),
        );
    }
    if is_true(workload, "Admitted") {
        let cluster_queue = workload["status"]["admission"]["clusterQueue"].as_str().unwrap_or_default().to_owned();
        return Standing::Admitted { cluster_queue };
    }
    let why =
        condition(workload, "QuotaReserved").and_then(|c| c["message"].as_str()).unwrap_or("no quota reserved yet");
    held("Pending", format!("waiting in queue {name}: {why}"))
}

/// One podSet of the Workload: pods of one role (or task) and one shape.
struct PodSet {
    name: String,
    template: Value,
    members: Vec<String>,
}

/// The job's pods grouped into podSets: by task, or by role; a role whose pods differ in
/// resources (DDP learners splitting a learner's GPUs unevenly) is one podSet per shape, so the
/// quota Kueue counts is what the pods request.
fn pod_sets(pods: &[Pod]) -> Vec<PodSet> {
    let mut sets: Vec<PodSet> = vec![];
    let mut shapes: BTreeMap<String, usize> = BTreeMap::new();
    for pod in pods {
        let group = pod
            .labels()
            .get(TASK_LABEL)
            .or_else(|| pod.labels().get(labels::REPLICA_TYPE))
            .cloned()
            .unwrap_or_else(|| "main".into());
        let spec = pod.spec.clone().unwrap_or_default();
        let resources: Vec<_> = spec.containers.iter().map(|c| c.resources.clone()).collect();
        let shape = serde_json::to_string(&(&group, resources)).unwrap_or_default();
        match shapes.get(&shape) {
            Some(&i) => sets[i].members.push(pod.name_any()),
            None => {
                let same_group =
                    sets.iter().filter(|s| s.name == group || s.name.starts_with(&format!("{group}-"))).count();
                let name = if same_group == 0 { group.clone() } else { format!("{group}-{}", same_group + 1) };
                let metadata = json!({"labels": pod.labels(), "annotations": pod.annotations()});
                let template = json!({"metadata": metadata, "spec": spec});
                shapes.insert(shape, sets.len());
                sets.push(PodSet { name, template, members: vec![pod.name_any()] });
            }
        }
    }
    sets
}

/// Every pod the job asks for, as built for it (the pods' names, labels and resources are all
/// the Workload needs).
fn wanted_pods(
    job: &DIJob,
    aggregator: Option<&di_api::AggregatorConfig>,
    settings: &Settings,
) -> Result<Vec<Pod>, BuildError> {
    if job.spec.is_task_job() {
        return Ok(desired::task_objects(job, settings)?.pods.into_iter().map(|p| p.pod).collect());
    }
    Ok(desired::replicas(job, aggregator, settings)?.into_iter().map(|r| r.pod).collect())
}

/// The job's Workload: owned by the job, in its queue, one podSet per role or task, with its
/// priority when its PriorityClass exists.
pub fn workload(
    job: &DIJob,
    queue: &str,
    priority: Option<&(String, i32)>,
    aggregator: Option<&di_api::AggregatorConfig>,
    settings: &Settings,
) -> Result<Value, BuildError> {
    let owner = desired::owner_reference(job, &settings.owner_version)?;
    let mut labels = job_labels(&job.name_any(), None);
    labels.insert(JOB_UID_LABEL.into(), job.uid().unwrap_or_default());
    let sets = pod_sets(&wanted_pods(job, aggregator, settings)?);
    let pod_sets: Vec<Value> =
        sets.iter().map(|s| json!({"name": s.name, "count": s.members.len(), "template": s.template})).collect();
    let mut spec = json!({"queueName": queue, "podSets": pod_sets});
    if let Some((class, value)) = priority {
        spec["priorityClassRef"] = json!({"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": class});
        spec["priority"] = json!(value);
    }
    Ok(json!({
        "apiVersion": API_VERSION, "kind": "Workload",
        "metadata": {
            "name": workload_name(job), "namespace": job.namespace(), "labels": labels,
            "ownerReferences": [owner],
        },
        "spec": spec,
    }))
}

/// Keeps the pods Kueue did not admit from being created: each podSet's members past its
/// admitted count (a running job's collectors scaled up), and those of podSets it never saw.
/// How many were held back.
fn beyond_admission(workload: &Value, sets: &[PodSet], actions: &mut Vec<Action>) -> usize {
    let counts: BTreeMap<&str, u64> = workload["spec"]["podSets"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            let name = s["name"].as_str().unwrap_or_default();
            let assigned = workload["status"]["admission"]["podSetAssignments"]
                .as_array()
                .and_then(|a| a.iter().find(|a| a["name"] == name))
                .and_then(|a| a["count"].as_u64());
            (name, assigned.or(s["count"].as_u64()).unwrap_or(0))
        })
        .collect();
    let over: std::collections::BTreeSet<&str> = sets
        .iter()
        .flat_map(|s| {
            let admitted = counts.get(s.name.as_str()).copied().unwrap_or(0) as usize;
            s.members.iter().skip(admitted).map(String::as_str)
        })
        .collect();
    let before = actions.len();
    actions.retain(|a| !matches!(a, Action::CreatePod(pod) if over.contains(pod.name_any().as_str())));
    before - actions.len()
}

/// Puts each created pod where its podSet was admitted: the node labels and tolerations of the
/// flavors Kueue assigned it.
pub fn place(
    job: &DIJob,
    workload: &Value,
    flavors: &BTreeMap<String, Value>,
    aggregator: Option<&di_api::AggregatorConfig>,
    settings: &Settings,
    actions: &mut [Action],
) -> Result<(), BuildError> {
    let sets = pod_sets(&wanted_pods(job, aggregator, settings)?);
    let set_of: BTreeMap<&str, &str> =
        sets.iter().flat_map(|s| s.members.iter().map(move |m| (m.as_str(), s.name.as_str()))).collect();
    let assignments = workload["status"]["admission"]["podSetAssignments"].as_array().cloned().unwrap_or_default();
    for action in actions.iter_mut() {
        let Action::CreatePod(pod) = action else { continue };
        let Some(set) = set_of.get(pod.name_any().as_str()) else { continue };
        let Some(assignment) = assignments.iter().find(|a| a["name"] == *set) else { continue };
        let names = assignment["flavors"].as_object().map(|f| f.values().filter_map(Value::as_str).collect::<Vec<_>>());
        let spec = pod.spec.get_or_insert_default();
        for flavor in names.unwrap_or_default().into_iter().filter_map(|n| flavors.get(n)) {
            if let Some(node_labels) = flavor["nodeLabels"].as_object() {
                let selector = spec.node_selector.get_or_insert_default();
                for (k, v) in node_labels {
                    selector.insert(k.clone(), v.as_str().unwrap_or_default().to_owned());
                }
            }
            for toleration in flavor["tolerations"].as_array().into_iter().flatten() {
                if let Ok(toleration) = serde_json::from_value(toleration.clone()) {
                    let tolerations = spec.tolerations.get_or_insert_default();
                    if !tolerations.contains(&toleration) {
                        tolerations.push(toleration);
                    }
                }
            }
        }
    }
    Ok(())
}

/// What the orchestrator tells Kueue of its job: the Workload's status with the conditions it
/// owns brought up to date (`PodsReady`, `Finished`), and after an eviction whose pods are gone,
/// the admission given back. `None` when the stored status already says all of it.
pub fn report(
    workload: &Value,
    ready: bool,
    finished: Option<bool>,
    pods_active: bool,
    now: Timestamp,
) -> Option<Value> {
    let mut status = workload["status"].clone();
    if !status.is_object() {
        status = json!({});
    }
    let generation = workload["metadata"]["generation"].clone();
    let evicted = condition(workload, "Evicted").filter(|c| c["status"] == "True").cloned();
    if let Some(success) = finished {
        let reason = if success { "Succeeded" } else { "Failed" };
        set(
            &mut status,
            "Finished",
            true,
            reason,
            &format!("the DIJob has {}", reason.to_lowercase()),
            &generation,
            now,
        );
    } else if let Some(evicted) = evicted {
        if pods_active || !is_true(workload, "QuotaReserved") {
            return None;
        }
        // Kueue's own controllers acknowledge an eviction so: quota and admission go together.
        let reason = evicted["reason"].as_str().unwrap_or("Evicted").to_owned();
        let requeued = matches!(reason.as_str(), "Preempted" | "NodeFailures");
        set(
            &mut status,
            "QuotaReserved",
            false,
            "Pending",
            "the job's pods are gone after its eviction",
            &generation,
            now,
        );
        set(&mut status, "Admitted", false, "NoReservation", "The workload has no reservation", &generation, now);
        set(&mut status, "Requeued", requeued, &reason, "the job waits to be admitted again", &generation, now);
        status["admission"] = Value::Null;
    } else if is_true(workload, "Admitted") {
        let (reason, message) = if ready {
            ("Started", "every pod of the job is ready")
        } else {
            ("WaitForStart", "the job's pods are starting")
        };
        set(&mut status, "PodsReady", ready, reason, message, &generation, now);
    }
    (status != workload["status"]).then_some(status)
}

/// Sets condition `type_` of a Workload's status in place; an unchanged condition is left as
/// it was written (its transition time and generation), so an unchanged report writes nothing.
fn set(status: &mut Value, type_: &str, value: bool, reason: &str, message: &str, generation: &Value, now: Timestamp) {
    let wanted = if value { "True" } else { "False" };
    let mut conditions = status["conditions"].as_array().cloned().unwrap_or_default();
    let at = conditions.iter().position(|c| c["type"] == type_);
    let previous = at.map(|i| conditions[i].clone());
    if previous.as_ref().is_some_and(|p| p["status"] == wanted && p["reason"] == reason && p["message"] == message) {
        return;
    }
    let transition = match &previous {
        Some(p) if p["status"] == wanted => p["lastTransitionTime"].clone(),
        _ => json!(now.to_string()),
    };
    let mut condition = json!({
        "type": type_, "status": wanted, "reason": reason, "message": message,
        "lastTransitionTime": transition,
    });
    if !generation.is_null() {
        condition["observedGeneration"] = generation.clone();
    }
    match at {
        Some(i) => conditions[i] = condition,
        None => conditions.push(condition),
    }
    status["conditions"] = Value::Array(conditions);
}

/// Whether the job's queue holds it now (it is in one, and not admitted), with the reason and
/// message its condition gives.
pub fn held(job: &DIJob, world: &World) -> Option<(&'static str, String)> {
    let (name, queue) = (queue_name(job)?, world.queue.as_ref()?);
    match standing(name, queue) {
        Standing::Held { reason, message } => Some((reason, message)),
        Standing::Admitted { .. } => None,
    }
}

/// The job's `Queued` condition: True while its queue holds it, False once admitted; `None` for
/// a job in no queue.
pub fn queued_condition(job: &DIJob, world: &World) -> Option<(bool, String, String)> {
    let (name, queue) = (queue_name(job)?, world.queue.as_ref()?);
    Some(match standing(name, queue) {
        Standing::Held { reason, message } => (true, reason.to_owned(), message),
        Standing::Admitted { cluster_queue } => {
            (false, "Admitted".to_owned(), format!("admitted from queue {name} by ClusterQueue {cluster_queue}"))
        }
    })
}

/// After a planner decided a pass of a job in a queue: the Workload made if there is none yet,
/// the pods it creates placed as admitted, and what Kueue must know of the job written to the
/// Workload's status.
pub fn attach(
    job: &DIJob,
    world: &World,
    aggregator: Option<&di_api::AggregatorConfig>,
    settings: &Settings,
    plan: &mut Plan,
) -> Result<(), BuildError> {
    let (Some(name), Some(queue)) = (queue_name(job), world.queue.as_ref()) else { return Ok(()) };
    let Queue::Kueue { workload, flavors, priority } = queue else { return Ok(()) };
    let finished = plan.status.phase.filter(|p| p.is_finished());
    let Some(workload) = workload else {
        if finished.is_none() {
            let made = self::workload(job, name, priority.as_ref(), aggregator, settings)?;
            plan.actions.insert(0, Action::CreateWorkload(Box::new(made)));
        }
        return Ok(());
    };
    let sets = pod_sets(&wanted_pods(job, aggregator, settings)?);
    match standing(name, queue) {
        Standing::Admitted { .. } => {
            let over = beyond_admission(workload, &sets, &mut plan.actions);
            if over > 0 {
                let message = format!(
                    "admitted from queue {name}; {over} pod(s) the job asks for beyond what Kueue admitted wait: \
                     a queued job's pods never outgrow its admission (submit it again to be admitted at its new size)"
                );
                let now = world.now;
                let conditions = &mut plan.status.conditions;
                crate::status::set_condition_as_said(
                    conditions,
                    crate::status::QUEUED,
                    false,
                    "Admitted",
                    &message,
                    now,
                );
            }
            place(job, workload, flavors, aggregator, settings, &mut plan.actions)?;
        }
        // Not admitted and no quota reserved: a Workload made for another size (the job was
        // scaled while it waited) goes, and the next pass makes it anew.
        Standing::Held { .. } if !is_true(workload, "QuotaReserved") && finished.is_none() => {
            let asked: Vec<(String, u64)> = sets.iter().map(|s| (s.name.clone(), s.members.len() as u64)).collect();
            let made: Vec<(String, u64)> = workload["spec"]["podSets"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|s| (s["name"].as_str().unwrap_or_default().to_owned(), s["count"].as_u64().unwrap_or(0)))
                .collect();
            if asked != made {
                let name = workload["metadata"]["name"].as_str().unwrap_or_default().to_owned();
                let uid = workload["metadata"]["uid"].as_str().unwrap_or_default().to_owned();
                plan.actions.push(Action::DeleteWorkload { name, uid });
                return Ok(());
            }
        }
        Standing::Held { .. } => {}
    }
    let status = &plan.status;
    let ready = status.replicas.is_some_and(|r| r > 0) && status.ready_replicas == status.replicas;
    let active = world.pods.iter().any(|p| crate::status::is_active(p));
    let outcome = finished.map(|p| p == Phase::Succeeded);
    if let Some(reported) = report(workload, ready, outcome, active, world.now) {
        let mut written = workload.clone();
        written["status"] = reported;
        plan.actions.push(Action::WriteWorkloadStatus(Box::new(written)));
    }
    Ok(())
}
