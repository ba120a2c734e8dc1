//! The fake API server as a tower service, and the client in front of it.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use http::{Request, Response};
use http_body_util::BodyExt;
use kube::Client;
use serde_json::Value;
use tower::Service;

use crate::answer::{Answer, AnswerBody};
use crate::call::{Call, Log};

type Route = dyn Fn(&Call) -> Option<Answer> + Send + Sync;

/// Records every request in its [`Log`] and answers it with the test's route, or with
/// [`Answer::default_for`] where the route gives `None`. A service rather than only a client, so
/// that tests can put their own layers in front of it.
#[derive(Clone)]
pub struct FakeApiServer {
    route: Arc<Route>,
    log: Log,
}

impl FakeApiServer {
    /// `route` returns an [`Answer`], or an `Option<Answer>` to leave some requests to the default.
    pub fn new<R: Into<Option<Answer>>>(route: impl Fn(&Call) -> R + Send + Sync + 'static) -> Self {
        FakeApiServer { route: Arc::new(move |call| route(call).into()), log: Log::default() }
    }

    pub fn log(&self) -> Log {
        self.log.clone()
    }

    /// A client of this server, whose default namespace is `default`.
    pub fn client(&self) -> Client {
        Client::new(self.clone(), "default")
    }
}

/// A client of a [`FakeApiServer`] answering with `route`, and the log of what it was sent.
pub fn client<R: Into<Option<Answer>>>(route: impl Fn(&Call) -> R + Send + Sync + 'static) -> (Client, Log) {
    let server = FakeApiServer::new(route);
    (server.client(), server.log())
}

impl Service<Request<kube::client::Body>> for FakeApiServer {
    type Response = Response<AnswerBody>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<kube::client::Body>) -> Self::Future {
        let (route, log) = (self.route.clone(), self.log.clone());
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let bytes = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            let call = Call {
                method: parts.method.to_string(),
                path: parts.uri.path().to_owned(),
                query: parts.uri.query().unwrap_or_default().to_owned(),
                body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                bytes,
            };
            // Recorded before it is answered: a test waiting on the log sees requests still
            // being answered (a delayed one, a watch held open).
            log.push(call.clone());
            let answer = route(&call).unwrap_or_else(|| Answer::default_for(&call));
            if !answer.delay.is_zero() {
                tokio::time::sleep(answer.delay).await;
            }
            Ok(Response::builder().status(answer.code).body(answer.body).unwrap())
        })
    }
}
