//! What the fake API server answers: a status, a body (whole or streamed) and how long it takes.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use http_body::Frame;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use serde_json::{Value, json};

use crate::call::Call;
use crate::objects::status;

/// The body of an answer; unsync so that any `Send` stream can be one.
pub type AnswerBody = UnsyncBoxBody<Bytes, Infallible>;

/// One answer of the fake API server.
pub struct Answer {
    pub(crate) code: u16,
    pub(crate) body: AnswerBody,
    pub(crate) delay: Duration,
}

impl Answer {
    /// `value` as JSON with status `code`.
    pub fn json(code: u16, value: Value) -> Self {
        Self::bytes(code, value.to_string())
    }

    /// These bytes as they are.
    pub fn bytes(code: u16, bytes: impl Into<Bytes>) -> Self {
        Answer { code, body: Full::new(bytes.into()).boxed_unsync(), delay: Duration::ZERO }
    }

    /// A failed request's `Status` (see [`status`]).
    pub fn status(code: u16, message: &str) -> Self {
        Self::json(code, status(code, message))
    }

    /// A body sent chunk by chunk as `chunks` yields them; it ends when the stream does.
    pub fn stream(code: u16, chunks: impl Stream<Item = Bytes> + Send + 'static) -> Self {
        let frames = chunks.map(|chunk| Ok(Frame::data(chunk)));
        Answer { code, body: StreamBody::new(frames).boxed_unsync(), delay: Duration::ZERO }
    }

    /// A watch: `events` (see [`crate::watch_event`]) one per line, then a connection held open,
    /// as a quiet API server holds it.
    pub fn watch(events: Vec<Value>) -> Self {
        let lines = futures::stream::iter(events.into_iter().map(|e| Bytes::from(format!("{e}\n"))));
        Self::stream(200, lines.chain(futures::stream::pending()))
    }

    /// The same answer, given only after `delay` (for tests that time requests).
    pub fn after(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// What the fake answers when the test does not: writes echoed as if stored, deletes done,
    /// and nothing found for the rest.
    pub fn default_for(call: &Call) -> Self {
        match call.method.as_str() {
            "POST" => Self::bytes(201, call.bytes.clone()),
            "PUT" | "PATCH" => Self::bytes(200, call.bytes.clone()),
            "DELETE" => Self::json(200, json!({"kind": "Status", "apiVersion": "v1", "status": "Success"})),
            _ => Self::status(404, &format!("{} not found", call.path)),
        }
    }
}
