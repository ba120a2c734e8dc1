//! Events off the pass. A pass hands its events to one background sender and goes on; the sender
//! publishes them through kube-rs's `Recorder` (which aggregates repeats into a series, as
//! client-go's broadcaster does), at most `per_second` a second. Events inform and never gate: a
//! hundred jobs starting at once would otherwise spend on events the API server time their pods'
//! creates need; held back, they follow a moment later. As client-go does, a sender too far
//! behind (a full queue) drops new events rather than grow without bound, and says so.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, Recorder};
use tokio::sync::mpsc;
use tracing::warn;

use crate::pace::Bucket;

/// Events waiting to be sent, at most.
const QUEUE: usize = 1000;

pub struct Events {
    queue: mpsc::Sender<(Event, ObjectReference, String)>,
}

impl Events {
    /// Starts the sender (in the current tokio runtime).
    pub fn start(recorder: Recorder, per_second: f64) -> Events {
        let (queue, mut waiting) = mpsc::channel::<(Event, ObjectReference, String)>(QUEUE);
        let bucket = Bucket::new(per_second);
        tokio::spawn(async move {
            while let Some((event, reference, job)) = waiting.recv().await {
                while let Err(wait) = bucket.take() {
                    tokio::time::sleep(wait).await;
                }
                if let Err(e) = recorder.publish(&event, &reference).await {
                    warn!(%job, "publishing event {}: {e}", event.reason);
                }
            }
        });
        Events { queue }
    }

    /// Queues an event on `reference` (the job `job`).
    pub fn send(&self, event: Event, reference: ObjectReference, job: &str) {
        if let Err(e) = self.queue.try_send((event, reference, job.to_owned())) {
            let (event, _, _) = e.into_inner();
            warn!(%job, "dropped event {}: {QUEUE} events are waiting to be sent", event.reason);
        }
    }
}
