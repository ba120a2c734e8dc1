//! Prometheus metrics of the reconciler, served as OpenMetrics text on `/metrics`: its own under
//! the prefix `di_orchestrator`, and the process's (`process`) under the names Prometheus' clients
//! give them.

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

/// Half a second to about four and a half hours (16,384 s): a job on an idle cluster runs within
/// seconds, one waiting for quota or nodes may take hours.
fn wait_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.5, 2.0, 16))
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
    /// From a job's creation to the first status this orchestrator wrote Running (`milestones`).
    pub time_to_running: Histogram,
    /// From a job's entering its Kueue queue to the status that says it is admitted (`milestones`).
    pub queue_wait: Histogram,
    /// Jobs held in a Kueue queue now, and the longest any of them has waited, in seconds; set
    /// from the reconciler's cache (`gauges`).
    pub jobs_queued: Gauge,
    pub queue_longest_wait: Gauge,
    /// 1 while this replica leads (see [`Metrics::leading`]).
    pub leader: Gauge,
    pub leader_acquisitions: Counter,
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
            time_to_running: wait_buckets(),
            queue_wait: wait_buckets(),
            jobs_queued: Gauge::default(),
            queue_longest_wait: Gauge::default(),
            leader: Gauge::default(),
            leader_acquisitions: Counter::default(),
            registry: Mutex::new(Registry::default()),
        };
        {
            let mut root = metrics.registry.lock().expect("metrics registry");
            root.register_collector(Box::new(crate::process::Process));
            let r = root.sub_registry_with_prefix("di_orchestrator");
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
            r.register(
                "time_to_running_seconds",
                "Time from a DIJob's creation until the orchestrator first wrote its phase Running; once per job: \
                 running again after a restart, a suspension or a failover is not counted again",
                metrics.time_to_running.clone(),
            );
            r.register(
                "queue_wait_seconds",
                "Time a DIJob waited in its Kueue queue, from its creation, resumption or eviction (the latest) \
                 until the orchestrator wrote it admitted, just before creating its pods",
                metrics.queue_wait.clone(),
            );
            r.register(
                "jobs_queued",
                "DIJobs held in a Kueue queue now (not admitted, not suspended)",
                metrics.jobs_queued.clone(),
            );
            r.register(
                "queue_longest_wait_seconds",
                "How long the DIJob held longest in a Kueue queue now has waited so far; 0 when none waits",
                metrics.queue_longest_wait.clone(),
            );
            r.register(
                "leader",
                "1 while this replica holds the leader Lease and reconciles (always, with leader election off), \
                 else 0",
                metrics.leader.clone(),
            );
            r.register(
                "leader_acquisitions",
                "Times this replica became the leader: took the Lease, or started reconciling without election",
                metrics.leader_acquisitions.clone(),
            );
        }
        // A series that first appears at 1 hides that first failure from `increase()`, which the
        // alert on failing jobs reads: it starts at 0.
        drop(metrics.phase_transitions.get_or_create(&PhaseLabel { phase: format!("{:?}", Phase::Failed) }));
        metrics
    }

    /// Marks this replica as the leader until the guard drops: around the reconciler's run, with
    /// or without a Lease, so the replicas' `leader` gauges sum to the replicas acting now.
    pub fn leading(&self) -> Leading<'_> {
        self.leader.set(1);
        self.leader_acquisitions.inc();
        Leading { metrics: self }
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

pub struct Leading<'a> {
    metrics: &'a Metrics,
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        self.metrics.leader.set(0);
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
#[path = "metrics_tests.rs"]
mod tests;
