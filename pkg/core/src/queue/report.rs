//! What the orchestrator writes to a queued job's Workload status for Kueue.

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::{condition, is_true};

/// What a pass saw of a queued job, for Kueue.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// Every pod that may run is ready (or has succeeded).
    pub ready: bool,
    /// The job has ended: `Some(true)` succeeded, `Some(false)` failed.
    pub finished: Option<bool>,
    /// A pod of the job is still pending or running.
    pub pods_active: bool,
    /// While admitted: the `reclaimablePods` the job gives back (see `admitted::rooms`).
    pub reclaimable: Option<Value>,
}

/// What the orchestrator tells Kueue of its job: the Workload's status with the conditions it
/// owns brought up to date (`PodsReady`, `Finished` once no pod of an ended job runs) and the pods
/// it gives back, and after an eviction whose pods are gone, the admission given back. `None`
/// when the stored status already says all of it.
pub fn report(workload: &Value, seen: &Report, now: Timestamp) -> Option<Value> {
    let Report { ready, finished, pods_active, .. } = *seen;
    let mut status = workload["status"].clone();
    if !status.is_object() {
        status = json!({});
    }
    let generation = workload["metadata"]["generation"].clone();
    let evicted = condition(workload, "Evicted").filter(|c| c["status"] == "True").cloned();
    // The quota goes back only once no pod of the job can still run: a job that ended with pods
    // running (`cleanPodPolicy: None`, collectors a task job's success leaves behind) keeps its
    // place until they end, or Kueue would admit another job beside them.
    if let Some(success) = finished.filter(|_| !pods_active) {
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
        // The pods come back whole at the next admission: nothing is given back any more.
        if let Some(fields) = status.as_object_mut() {
            fields.remove("reclaimablePods");
        }
    } else if is_true(workload, "Admitted") {
        // As Kueue's own integrations say it: a job that was ready and no longer is waits for
        // recovery, which Kueue times from then, not from its admission.
        let previous = condition(workload, "PodsReady");
        let was_ready = previous.is_some_and(|c| c["status"] == "True" || c["reason"] == "WaitForRecovery");
        let (reason, message) = match (ready, was_ready) {
            (true, false) => ("Started", "every pod of the job is ready"),
            (true, true) => {
                let reason =
                    previous.and_then(|c| c["reason"].as_str()).filter(|r| *r == "Started").unwrap_or("Recovered");
                (reason, "every pod of the job is ready")
            }
            (false, false) => ("WaitForStart", "the job's pods are starting"),
            (false, true) => ("WaitForRecovery", "a pod of the job is not ready"),
        };
        set(&mut status, "PodsReady", ready, reason, message, &generation, now);
        match &seen.reclaimable {
            Some(Value::Array(given)) if !given.is_empty() => status["reclaimablePods"] = Value::Array(given.clone()),
            _ => {}
        }
    }
    let stored = if workload["status"].is_object() { workload["status"].clone() } else { json!({}) };
    (status != stored).then_some(status)
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
