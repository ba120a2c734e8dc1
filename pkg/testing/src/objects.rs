//! Bodies the API server answers with, as it writes them.

use serde_json::{Value, json};

/// A failed request's `Status`, with the reason the API server gives for `code`.
pub fn status(code: u16, message: &str) -> Value {
    let reason = match code {
        400 => "BadRequest",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        410 => "Expired",
        422 => "Invalid",
        _ => "InternalError",
    };
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason, "message": message})
}

/// A list of `items` (of `kind`) at resourceVersion `version`.
pub fn list(kind: &str, version: &str, items: Vec<Value>) -> Value {
    json!({"kind": format!("{kind}List"), "apiVersion": "v1", "metadata": {"resourceVersion": version}, "items": items})
}

/// One line of a watch: `kind` is ADDED, MODIFIED, DELETED, BOOKMARK or ERROR.
pub fn watch_event(kind: &str, object: &Value) -> Value {
    json!({"type": kind, "object": object})
}
