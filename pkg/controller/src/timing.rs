//! The request timing layer: every request a client sends to the API server is counted when sent
//! and timed until answered, by verb and resource, in [`Metrics`]. That is how `/metrics` shows
//! the API cost of a job and where a pass waited (`make bench` reads both).

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use futures::future::BoxFuture;
use http::Request;
use tower::{Layer, Service};

use crate::metrics::Metrics;

/// Wraps a client's HTTP service in [`Timed`].
#[derive(Clone)]
pub struct Timing {
    metrics: Arc<Metrics>,
}

impl Timing {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Timing { metrics }
    }
}

impl<S> Layer<S> for Timing {
    type Service = Timed<S>;

    fn layer(&self, inner: S) -> Timed<S> {
        Timed { inner, metrics: self.metrics.clone() }
    }
}

/// Counts each request when sent and times it until answered, failed or not.
#[derive(Clone)]
pub struct Timed<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

impl<S, B, R> Service<Request<B>> for Timed<S>
where
    S: Service<Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let method = request.method().as_str().to_owned();
        let (path, query) = (request.uri().path().to_owned(), request.uri().query().map(str::to_owned));
        self.metrics.api_request(&method);
        let (metrics, start) = (self.metrics.clone(), Instant::now());
        let answer = self.inner.call(request);
        Box::pin(async move {
            let result = answer.await;
            metrics.api_request_answered(&method, &path, query.as_deref(), start.elapsed().as_secs_f64());
            if let Ok(response) = &result
                && (response.status().is_client_error() || response.status().is_server_error())
            {
                metrics.api_request_refused(&method, &path, response.status().as_u16());
            }
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use di_testing::{Answer, FakeApiServer};
    use k8s_openapi::api::core::v1::Pod;
    use kube::Api;
    use kube::api::{Patch, PatchParams};

    use super::*;

    /// The value of the series `series` (name and labels) in `text`.
    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    #[tokio::test]
    async fn a_request_is_counted_and_timed_by_verb_and_resource() {
        const ANSWER_AFTER: Duration = Duration::from_millis(20);
        let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "a"}});
        let service = FakeApiServer::new(move |_| Answer::json(200, pod.clone()).after(ANSWER_AFTER));
        let metrics = Arc::new(Metrics::new());
        let pods: Api<Pod> = Api::namespaced(kube::Client::new(Timing::new(metrics.clone()).layer(service), "a"), "a");
        pods.get("p").await.unwrap();
        pods.get("p").await.unwrap();
        let status = serde_json::json!({"status": {"phase": "Running"}});
        pods.patch_status("p", &PatchParams::default(), &Patch::Merge(&status)).await.unwrap();

        let text = metrics.encode();
        let get = r#"{verb="GET",resource="pods"}"#;
        let patch = r#"{verb="PATCH",resource="pods/status"}"#;
        assert_eq!(sample(&text, r#"di_orchestrator_api_requests_total{verb="GET"}"#), Some(2.0), "{text}");
        assert_eq!(sample(&text, r#"di_orchestrator_api_requests_total{verb="PATCH"}"#), Some(1.0), "{text}");
        let count = |labels| sample(&text, &format!("di_orchestrator_api_request_duration_seconds_count{labels}"));
        let sum = |labels| sample(&text, &format!("di_orchestrator_api_request_duration_seconds_sum{labels}"));
        assert_eq!(count(get), Some(2.0), "{text}");
        assert_eq!(count(patch), Some(1.0), "{text}");
        // Timed until answered: at least the time the API server took.
        assert!(sum(get).unwrap() >= 2.0 * ANSWER_AFTER.as_secs_f64(), "{text}");
        assert!(sum(patch).unwrap() >= ANSWER_AFTER.as_secs_f64(), "{text}");
        assert!(!text.contains("api_requests_refused_total{"), "none refused: {text}");
    }

    #[tokio::test]
    async fn a_refused_request_is_counted_by_verb_resource_and_code() {
        let refusal = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 403, "reason": "Forbidden", "message": "no"});
        let service = FakeApiServer::new(move |_| Answer::json(403, refusal.clone()));
        let metrics = Arc::new(Metrics::new());
        let pods: Api<Pod> = Api::namespaced(kube::Client::new(Timing::new(metrics.clone()).layer(service), "a"), "a");
        let pod: Pod = serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}})).unwrap();
        for _ in 0..3 {
            pods.create(&Default::default(), &pod).await.unwrap_err();
        }
        pods.get("p").await.unwrap_err();
        let text = metrics.encode();
        let refused = |labels: &str| sample(&text, &format!("di_orchestrator_api_requests_refused_total{labels}"));
        assert_eq!(refused(r#"{verb="POST",resource="pods",code="403"}"#), Some(3.0), "{text}");
        assert_eq!(refused(r#"{verb="GET",resource="pods",code="403"}"#), Some(1.0), "{text}");
    }
}
