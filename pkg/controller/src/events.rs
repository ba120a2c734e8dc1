//! Events off the pass. A pass hands its events to one background sender and goes on; the sender
//! publishes them through kube-rs's `Recorder` (which aggregates repeats into a series, as
//! client-go's broadcaster does), at most `per_second` a second. Events inform and never gate: a
//! hundred jobs starting at once would otherwise spend on events the API server time their pods'
//! creates need. So, as progress does (see `pace`), a Normal event waits while any pass creates
//! objects, and then until its job is up (its pods bound and reported running, and its status
//! written to say so: API server work the job's watchers wait on), for at most `pace::HOLD` from
//! when its job began starting (from when it was queued, for a job that is not): a small job
//! started beside a big one being created has its first event then, however long its own creates
//! took beside the big one's. Past its hold, while that work still goes on, an event goes at a
//! fifth of the pace after a burst of a second's worth: enough for the first events of jobs
//! started beside a big one, while a hundred jobs starting together send a few of their two
//! hundred events before their pods run rather than five a second (each a write of its own). A
//! Warning, what a user acts on, waits only for its turn. As client-go does, a sender too far
//! behind (a full queue) drops new events rather than grow without bound, and says so.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::warn;

use crate::pace::{Bucket, Creates, HOLD};
use crate::triggers::Starting;

/// Events waiting to be sent, at most, of each type.
const QUEUE: usize = 1000;

struct Queued {
    event: Event,
    reference: ObjectReference,
    job: String,
    /// When its hold began: when its job began starting, or when it was queued.
    held_from: Instant,
}

/// The share of the pace at which events go once their hold ran out while creates or their
/// job's start still go on (after a burst of a second's worth at the full pace).
const BUSY_SHARE: f64 = 0.2;

impl Queued {
    /// Resolves once no pass creates objects and the event's job is up.
    async fn quiet(&self, creates: &Creates, starting: &Starting) {
        creates.over().await;
        let namespace = self.reference.namespace.as_deref().unwrap_or_default();
        starting.settled(namespace, &self.job).await;
    }

    /// Resolves when the event may go: once all is quiet, or after its hold with a token of
    /// `busy`, whichever is first.
    async fn due(&self, creates: &Creates, starting: &Starting, busy: &Bucket) {
        let quiet = self.quiet(creates, starting);
        tokio::pin!(quiet);
        if tokio::time::timeout_at(self.held_from + HOLD, &mut quiet).await.is_ok() {
            return;
        }
        while let Err(wait) = busy.take() {
            tokio::select! {
                _ = &mut quiet => return,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }
}

pub struct Events {
    starting: Starting,
    normal: mpsc::Sender<Queued>,
    warnings: mpsc::Sender<Queued>,
    /// Events queued and not sent yet, both queues together.
    waiting: Gauge,
}

impl Events {
    /// Starts the sender (in the current tokio runtime); `waiting` counts what is queued.
    pub fn start(recorder: Recorder, per_second: f64, creates: Creates, starting: Starting, waiting: Gauge) -> Events {
        let (normal, mut normal_waiting) = mpsc::channel::<Queued>(QUEUE);
        let (warnings, mut warnings_waiting) = mpsc::channel::<Queued>(QUEUE);
        let bucket = Bucket::new(per_second);
        let busy = Bucket::with_burst(per_second * BUSY_SHARE, per_second);
        let (left, up) = (waiting.clone(), starting.clone());
        tokio::spawn(async move {
            let sender = Sender { recorder, bucket, left };
            loop {
                let next = tokio::select! {
                    biased;
                    Some(warning) = warnings_waiting.recv() => warning,
                    Some(normal) = normal_waiting.recv() => {
                        // A warning queued meanwhile is not held up by this one's wait.
                        {
                            let held = normal.due(&creates, &up, &busy);
                            tokio::pin!(held);
                            loop {
                                tokio::select! {
                                    biased;
                                    Some(warning) = warnings_waiting.recv() => sender.send(warning).await,
                                    _ = &mut held => break,
                                }
                            }
                        }
                        normal
                    }
                    else => return,
                };
                sender.send(next).await;
            }
        });
        Events { starting, normal, warnings, waiting }
    }

    /// Queues an event on `reference` (the job `job`).
    pub fn send(&self, event: Event, reference: ObjectReference, job: &str) {
        let queue = if event.type_ == EventType::Warning { &self.warnings } else { &self.normal };
        // A job's start was marked on the same clock, before its events: never after now.
        let namespace = reference.namespace.as_deref().unwrap_or_default();
        let held_from = self.starting.since(namespace, job).unwrap_or_else(Instant::now);
        let queued = Queued { event, reference, job: job.to_owned(), held_from };
        // Counted before it is queued: the sender may send it (and count it down) at once.
        self.waiting.inc();
        if let Err(e) = queue.try_send(queued) {
            self.waiting.dec();
            let queued = e.into_inner();
            warn!(job = %queued.job, "dropped event {}: {QUEUE} events are waiting to be sent", queued.event.reason);
        }
    }
}

struct Sender {
    recorder: Recorder,
    bucket: Bucket,
    /// What is queued and not sent yet.
    left: Gauge,
}

impl Sender {
    /// Publishes one event when the bucket has a token.
    async fn send(&self, queued: Queued) {
        while let Err(wait) = self.bucket.take() {
            tokio::time::sleep(wait).await;
        }
        if let Err(e) = self.recorder.publish(&queued.event, &queued.reference).await {
            warn!(job = %queued.job, "publishing event {}: {e}", queued.event.reason);
        }
        self.left.dec();
    }
}

#[cfg(test)]
mod tests {
    use kube::runtime::events::Reporter;

    use std::time::Duration;

    use super::*;

    fn event(type_: EventType, reason: &str) -> Event {
        Event { type_, reason: reason.into(), note: None, action: "Test".into(), secondary: None }
    }

    /// A sender on the echoing fake, sharing `creates` and `waiting`; its log, and the job.
    fn started(creates: &Creates, waiting: &Gauge) -> (Events, di_testing::Log, ObjectReference) {
        started_with(creates, &Starting::default(), waiting)
    }

    fn started_with(
        creates: &Creates,
        starting: &Starting,
        waiting: &Gauge,
    ) -> (Events, di_testing::Log, ObjectReference) {
        let (client, log) = di_testing::client(|_| None);
        let reporter = Reporter { controller: "test".into(), instance: None };
        let recorder = Recorder::new(client, reporter);
        let events = Events::start(recorder, 100.0, creates.clone(), starting.clone(), waiting.clone());
        let job = ObjectReference { namespace: Some("ns".into()), name: Some("job".into()), ..Default::default() };
        (events, log, job)
    }

    #[tokio::test]
    async fn normal_events_wait_for_creates_and_warnings_do_not() {
        let (creates, waiting) = (Creates::default(), Gauge::default());
        let (events, log, job) = started(&creates, &waiting);
        let sent = || {
            let reasons = log.calls().into_iter().filter(|c| c.path.contains("/events"));
            reasons.map(|c| c.body["reason"].as_str().unwrap_or_default().to_owned()).collect::<Vec<_>>()
        };
        let creating = creates.start();
        events.send(event(EventType::Normal, "Created"), job.clone(), "job");
        events.send(event(EventType::Warning, "CreatePod"), job.clone(), "job");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(sent(), ["CreatePod"], "the warning passes the held event");
        assert_eq!(waiting.get(), 1, "the held event is counted as waiting");
        drop(creating);
        tokio::time::timeout(Duration::from_secs(5), async {
            while sent().len() < 2 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the held event is sent once creates are over");
        assert_eq!(sent(), ["CreatePod", "Created"]);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(waiting.get(), 0);
    }

    #[tokio::test]
    async fn a_normal_event_waits_until_its_job_is_up() {
        let (creates, starting, waiting) = (Creates::default(), Starting::default(), Gauge::default());
        let (events, log, job) = started_with(&creates, &starting, &waiting);
        let sent = || log.calls().into_iter().filter(|c| c.path.contains("/events")).count();
        starting.set("ns", "job", Some(3));
        events.send(event(EventType::Normal, "Created"), job.clone(), "job");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(sent(), 0, "held while the job's pods come up");
        starting.set("ns", "job", Some(3));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(sent(), 0, "still starting");
        starting.set("ns", "job", None);
        tokio::time::timeout(Duration::from_secs(2), async {
            while sent() < 1 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("sent once the job is up");
        // A job no pass has said is starting holds nothing.
        let other = ObjectReference { name: Some("other".into()), ..job };
        events.send(event(EventType::Normal, "Other"), other, "other");
        tokio::time::timeout(Duration::from_secs(2), async {
            while sent() < 2 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("another job's event goes at once");
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_event_goes_after_the_hold_even_while_creates_go_on() {
        let creates = Creates::default();
        let (events, log, job) = started(&creates, &Gauge::default());
        let _creating = creates.start();
        events.send(event(EventType::Normal, "Created"), job, "job");
        let sent = || log.calls().into_iter().filter(|c| c.path.contains("/events")).count();
        tokio::time::sleep(HOLD - Duration::from_secs(1)).await;
        assert_eq!(sent(), 0);
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(sent(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn past_the_hold_while_creates_go_on_events_go_slower_after_a_burst() {
        let creates = Creates::default();
        let (client, log) = di_testing::client(|_| None);
        let recorder = Recorder::new(client, Reporter { controller: "test".into(), instance: None });
        let events = Events::start(recorder, 5.0, creates.clone(), Starting::default(), Gauge::default());
        let job = ObjectReference { namespace: Some("ns".into()), name: Some("job".into()), ..Default::default() };
        let sent = || log.calls().into_iter().filter(|c| c.path.contains("/events")).count();
        let creating = creates.start();
        for i in 0..10 {
            events.send(event(EventType::Normal, &format!("Created{i}")), job.clone(), "job");
        }
        tokio::time::sleep(HOLD + Duration::from_millis(100)).await;
        assert_eq!(sent(), 5, "a second's worth at once");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(sent(), 7, "then one a second, a fifth of the pace");
        drop(creating);
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert_eq!(sent(), 10, "the pace again once the creates are over");
    }

    #[tokio::test(start_paused = true)]
    async fn the_hold_runs_from_when_the_job_began_starting() {
        let (creates, starting) = (Creates::default(), Starting::default());
        let (events, log, job) = started_with(&creates, &starting, &Gauge::default());
        let sent = || log.calls().into_iter().filter(|c| c.path.contains("/events")).count();
        let _creating = creates.start();
        starting.set("ns", "job", Some(3));
        tokio::time::sleep(HOLD - Duration::from_millis(500)).await;
        starting.set("ns", "job", Some(3));
        events.send(event(EventType::Normal, "Created"), job.clone(), "job");
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(sent(), 0, "within the hold of its job's start");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(sent(), 1, "past it, though queued less than a second ago");
        let other = ObjectReference { name: Some("other".into()), ..job };
        events.send(event(EventType::Normal, "Other"), other, "other");
        tokio::time::sleep(HOLD - Duration::from_millis(100)).await;
        assert_eq!(sent(), 1, "a job not starting is held from when its event was queued");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(sent(), 2);
    }
}
