//! A scripted API server: a kube `Client` whose every request is answered by a function of the
//! request, and logged. A watch is answered with its events and then held open, as a quiet API
//! server holds it.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Request, Response};
use http_body::Frame;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use kube::Client;
use serde_json::{Value, json};

/// A request as the fake API server saw it.
#[derive(Clone, Debug)]
pub struct Call {
    pub method: String,
    pub path: String,
    pub query: String,
    pub body: Value,
}

impl Call {
    pub fn is_watch(&self) -> bool {
        self.query.contains("watch=true")
    }
}

pub enum Answer {
    Json(u16, Value),
    /// Watch events, then a connection that stays open.
    Watch(Vec<Value>),
}

/// A client of a fake API server answering with `route`, and the log of what it was sent.
pub fn client(route: impl Fn(&Call) -> Answer + Send + Sync + 'static) -> (Client, Arc<Mutex<Vec<Call>>>) {
    let (route, log) = (Arc::new(route), Arc::new(Mutex::new(vec![])));
    let seen = log.clone();
    let service = tower::service_fn(move |request: Request<kube::client::Body>| {
        let (route, seen) = (route.clone(), seen.clone());
        async move {
            let (parts, body) = request.into_parts();
            let bytes = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            let call = Call {
                method: parts.method.to_string(),
                path: parts.uri.path().to_owned(),
                query: parts.uri.query().unwrap_or_default().to_owned(),
                body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            };
            seen.lock().unwrap().push(call.clone());
            let (status, body) = match route(&call) {
                Answer::Json(status, value) => (status, Full::new(Bytes::from(value.to_string())).boxed()),
                Answer::Watch(events) => (200, watch_body(events)),
            };
            Ok::<_, Infallible>(Response::builder().status(status).body(body).unwrap())
        }
    });
    (Client::new(service, "default"), log)
}

fn watch_body(events: Vec<Value>) -> BoxBody<Bytes, Infallible> {
    let lines = events.into_iter().map(|e| Ok(Frame::data(Bytes::from(format!("{e}\n")))));
    let stream = futures::StreamExt::chain(futures::stream::iter(lines), futures::stream::pending());
    StreamBody::new(stream).boxed()
}

/// A failed request's answer, as the API server gives it.
pub fn status(code: u16, message: &str) -> Answer {
    let reason = match code {
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        422 => "Invalid",
        _ => "InternalError",
    };
    let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason, "message": message});
    Answer::Json(code, status)
}

/// A list of `items` at `version`, as the API server answers a list.
pub fn list(kind: &str, version: &str, items: Vec<Value>) -> Answer {
    Answer::Json(
        200,
        json!({"kind": format!("{kind}List"), "apiVersion": "v1", "metadata": {"resourceVersion": version}, "items": items}),
    )
}

pub fn event(kind: &str, object: &Value) -> Value {
    json!({"type": kind, "object": object})
}
