//! Prometheus metrics of the reconciler, served as OpenMetrics text on `/metrics`.

use std::sync::Mutex;
use std::time::Instant;

use di_api::Phase;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabel {
    pub phase: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerbLabel {
    pub verb: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabel {
    pub verb: String,
    /// The resource, with its subresource: `pods`, `dijobs/status`.
    pub resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusalLabel {
    pub verb: String,
    pub resource: String,
    pub code: u16,
}

type RequestHistograms = Family<RequestLabel, Histogram, fn() -> Histogram>;

fn latency_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 14))
}

pub struct Metrics {
    pub reconciles: Counter,
    /// Failed passes, by the error's kind.
    pub reconcile_errors: Family<KindLabel, Counter>,
    pub reconcile_duration: Histogram,
    pub pods_created: Counter,
    pub pods_deleted: Counter,
    pub status_writes: Counter,
    /// Passes that found their cached job older than the stored one and left it for the next.
    pub stale_passes: Counter,
    pub phase_transitions: Family<PhaseLabel, Counter>,
    /// DIJobs by phase, set from the reconciler's cache when scraped.
    pub jobs: Family<PhaseLabel, Gauge>,
    /// DIJobs the reconciler leaves alone: a status it cannot read, or another controller's
    /// (`JobView::left_alone`); each is named in a Warning event `LeftAlone`.
    pub jobs_left_alone: Gauge,
    /// Events queued and not sent yet (see `events`).
    pub events_waiting: Gauge,
    /// Requests sent to the API server, by HTTP method (watches count once, when opened).
    pub api_requests: Family<VerbLabel, Counter>,
    /// Time until the API server answered, by verb and resource (watches excluded: they last).
    pub api_request_duration: RequestHistograms,
    /// Requests the API server refused or failed (an answer of 400 or more), by verb, resource
    /// and code: what the orchestrator asked for in vain.
    pub api_requests_refused: Family<RefusalLabel, Counter>,
    registry: Mutex<Registry>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let metrics = Metrics {
            reconciles: Counter::default(),
            reconcile_errors: Family::default(),
            reconcile_duration: Histogram::new(exponential_buckets(0.0005, 2.0, 14)),
            pods_created: Counter::default(),
            pods_deleted: Counter::default(),
            status_writes: Counter::default(),
            stale_passes: Counter::default(),
            phase_transitions: Family::default(),
            jobs: Family::default(),
            jobs_left_alone: Gauge::default(),
            events_waiting: Gauge::default(),
            api_requests: Family::default(),
            api_request_duration: RequestHistograms::new_with_constructor(latency_buckets),
            api_requests_refused: Family::default(),
            registry: Mutex::new(Registry::with_prefix("di_orchestrator")),
        };
        {
            let mut r = metrics.registry.lock().expect("metrics registry");
            r.register("reconciles", "Reconcile passes started", metrics.reconciles.clone());
            r.register(
                "reconcile_errors",
                "Reconcile passes that failed and were requeued, by the error's kind",
                metrics.reconcile_errors.clone(),
            );
            r.register("reconcile_duration_seconds", "Time a reconcile pass takes", metrics.reconcile_duration.clone());
            r.register("pods_created", "Pods created", metrics.pods_created.clone());
            r.register("pods_deleted", "Pods deleted", metrics.pods_deleted.clone());
            r.register("status_writes", "DIJob status writes", metrics.status_writes.clone());
            r.register(
                "stale_passes",
                "Reconcile passes that found their cached DIJob older than the stored one",
                metrics.stale_passes.clone(),
            );
            r.register("phase_transitions", "DIJob phase transitions, by new phase", metrics.phase_transitions.clone());
            r.register("jobs", "DIJobs by phase", metrics.jobs.clone());
            r.register(
                "jobs_left_alone",
                "DIJobs not reconciled: a status that cannot be read, or written by another controller",
                metrics.jobs_left_alone.clone(),
            );
            r.register("events_waiting", "Events queued and not sent yet", metrics.events_waiting.clone());
            r.register("api_requests", "Requests sent to the API server, by HTTP method", metrics.api_requests.clone());
            r.register(
                "api_request_duration_seconds",
                "Time until the API server answered a request, by verb and resource; watches excluded",
                metrics.api_request_duration.clone(),
            );
            r.register(
                "api_requests_refused",
                "Requests the API server answered with an error (400 or more), by verb, resource and code",
                metrics.api_requests_refused.clone(),
            );
        }
        metrics
    }

    /// Counts a pass and times it until the guard drops.
    pub fn reconcile_started(&self) -> ReconcileTimer<'_> {
        self.reconciles.inc();
        ReconcileTimer { metrics: self, start: Instant::now() }
    }

    /// Counts a request as it is sent; [`crate::timing`] calls this and the next for each one.
    pub fn api_request(&self, method: &str) {
        self.api_requests.get_or_create(&VerbLabel { verb: method.to_owned() }).inc();
    }

    /// Records the answer to a request for `path` (watches are not timed).
    pub fn api_request_answered(&self, method: &str, path: &str, query: Option<&str>, seconds: f64) {
        if query.is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1")) {
            return;
        }
        let label = RequestLabel { verb: method.to_owned(), resource: resource_of(path) };
        self.api_request_duration.get_or_create(&label).observe(seconds);
    }

    /// Counts a request the API server answered with an error.
    pub fn api_request_refused(&self, method: &str, path: &str, code: u16) {
        let label = RefusalLabel { verb: method.to_owned(), resource: resource_of(path), code };
        self.api_requests_refused.get_or_create(&label).inc();
    }

    pub fn reconcile_failed(&self, kind: &str) {
        self.reconcile_errors.get_or_create(&KindLabel { kind: kind.to_owned() }).inc();
    }

    pub fn phase_transition(&self, phase: Phase) {
        self.phase_transitions.get_or_create(&PhaseLabel { phase: format!("{phase:?}") }).inc();
    }

    /// OpenMetrics text of every metric.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        let registry = self.registry.lock().expect("metrics registry");
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("writing to a String cannot fail");
        text
    }
}

pub struct ReconcileTimer<'a> {
    metrics: &'a Metrics,
    start: Instant,
}

impl Drop for ReconcileTimer<'_> {
    fn drop(&mut self) {
        self.metrics.reconcile_duration.observe(self.start.elapsed().as_secs_f64());
    }
}

/// The resource (and subresource) an API path names: `/api/v1/namespaces/a/pods/p/status` is
/// `pods/status`; a path that names none is kept as it is.
pub fn resource_of(path: &str) -> String {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let after_version = match segments.first() {
        Some(&"api") => 2,
        Some(&"apis") => 3,
        _ => return path.to_owned(),
    };
    let mut rest = segments.get(after_version..).unwrap_or_default();
    if rest.first() == Some(&"namespaces") && rest.len() > 2 {
        rest = &rest[2..];
    }
    match rest {
        [resource] | [resource, _] => (*resource).to_owned(),
        [resource, _, sub, ..] => format!("{resource}/{sub}"),
        [] => path.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_every_metric() {
        let metrics = Metrics::new();
        drop(metrics.reconcile_started());
        metrics.pods_created.inc();
        metrics.phase_transition(Phase::Running);
        metrics.jobs.get_or_create(&PhaseLabel { phase: "Running".into() }).set(2);
        metrics.api_request_answered(
            "PATCH",
            "/apis/diengine.opendilab.org/v1alpha1/namespaces/a/dijobs/j/status",
            None,
            0.01,
        );
        metrics.api_request_answered("GET", "/api/v1/pods", Some("watch=true&labelSelector=x"), 60.0);
        let text = metrics.encode();
        for line in [
            "di_orchestrator_reconciles_total 1",
            "di_orchestrator_pods_created_total 1",
            "di_orchestrator_phase_transitions_total{phase=\"Running\"} 1",
            "di_orchestrator_jobs{phase=\"Running\"} 2",
            "di_orchestrator_reconcile_duration_seconds_count 1",
            "di_orchestrator_api_request_duration_seconds_count{verb=\"PATCH\",resource=\"dijobs/status\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
    }

    #[test]
    fn names_the_resource_of_a_path() {
        for (path, resource) in [
            ("/api/v1/namespaces/a/pods", "pods"),
            ("/api/v1/namespaces/a/pods/p", "pods"),
            ("/api/v1/namespaces/a/pods/p/status", "pods/status"),
            ("/api/v1/pods", "pods"),
            ("/api/v1/namespaces", "namespaces"),
            ("/api/v1/namespaces/a", "namespaces"),
            ("/apis/diengine.opendilab.org/v1alpha1/namespaces/a/dijobs/j/status", "dijobs/status"),
            ("/apis/rbac.authorization.k8s.io/v1/namespaces/a/rolebindings", "rolebindings"),
            ("/apis/coordination.k8s.io/v1/namespaces/di-system/leases/di-orchestrator", "leases"),
            ("/version", "/version"),
        ] {
            assert_eq!(resource_of(path), resource, "{path}");
        }
    }
}
