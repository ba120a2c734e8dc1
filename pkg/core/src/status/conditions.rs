//! How a job's conditions change: one per type, the transition time moved only when the status
//! does.

use di_api::DIJobCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// Sets a condition whose reason and message follow what they report (a queue's words change
/// while the job waits): both are replaced, the transition time kept unless the status changes.
pub fn set_condition_as_said(
    conditions: &mut Vec<DIJobCondition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    now: Timestamp,
) {
    set_condition(conditions, type_, status, reason, message, now);
    if let Some(c) = conditions.iter_mut().find(|c| c.type_ == type_) {
        let (reason, message) = (Some(reason.to_owned()), Some(message.to_owned()));
        if c.reason != reason || c.message != message {
            (c.reason, c.message) = (reason, message);
            c.last_update_time = Some(Time(now));
        }
    }
}

/// Sets a condition, keeping its transition time unless its status changes.
pub fn set_condition(
    conditions: &mut Vec<DIJobCondition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    now: Timestamp,
) {
    debug_assert!(
        reason.is_empty() || crate::reasons::condition_listed(type_, reason),
        "condition {type_} reason {reason} is not in docs/guide/troubleshooting.md: add its row"
    );
    let status = if status { "True" } else { "False" }.to_string();
    let reason = Some(reason.to_owned()).filter(|r| !r.is_empty());
    let message = Some(message.to_owned()).filter(|m| !m.is_empty());
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) if c.status == status => {
            // Same status: keep the transition, and the reason that explained it.
            if c.reason.is_none() {
                c.reason = reason;
            }
        }
        Some(c) => {
            c.status = status;
            c.reason = reason;
            c.message = message;
            c.last_transition_time = Some(Time(now));
            c.last_update_time = Some(Time(now));
        }
        None => conditions.push(DIJobCondition {
            type_: type_.to_owned(),
            status,
            reason,
            message,
            last_update_time: Some(Time(now)),
            last_transition_time: Some(Time(now)),
        }),
    }
}
