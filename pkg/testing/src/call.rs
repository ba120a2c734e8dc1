//! What the fake API server was sent.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use serde_json::Value;

/// One request as the fake API server saw it.
#[derive(Clone, Debug)]
pub struct Call {
    pub method: String,
    pub path: String,
    /// The raw query string, empty when there is none.
    pub query: String,
    /// The body parsed as JSON; `Null` when empty or not JSON.
    pub body: Value,
    /// The body as sent, for the default answer's echo.
    pub bytes: Bytes,
}

impl Call {
    /// Whether this is a watch (`watch=true` among the query's parameters).
    pub fn is_watch(&self) -> bool {
        self.query.split('&').any(|p| p == "watch=true" || p == "watch=1")
    }

    /// The last segment of the path: the object's name for a request on one object.
    pub fn last_segment(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or_default()
    }
}

/// Every request the fake API server was sent, in the order it saw them.
#[derive(Clone, Debug, Default)]
pub struct Log(Arc<Mutex<Vec<Call>>>);

impl Log {
    /// A copy of the requests so far: tests filter it freely while the fake goes on recording.
    pub fn calls(&self) -> Vec<Call> {
        self.0.lock().unwrap().clone()
    }

    pub(crate) fn push(&self, call: Call) {
        self.0.lock().unwrap().push(call);
    }
}
