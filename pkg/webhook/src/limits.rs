//! What one client may take of the webhook. The orchestrator runs on one thread by default, and
//! the same thread renews the leader's Lease, so a slow or flooding client must cost little and
//! never for long: connections are capped, every stage has a deadline, and an AdmissionReview is
//! read only up to its limit, in one of two lanes, so a flood of large bodies never queues the
//! ordinary small ones behind it.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Largest AdmissionReview accepted; larger ones get 413 before their body is read. The API
/// server refuses request bodies over 3 MiB (`--max-request-bytes`), and an update's review
/// carries the object (after earlier mutating webhooks, re-encoded as JSON) and the old one
/// besides its envelope: a few MiB at most. Twice the 3 MiB leaves room for both.
pub const MAX_BODY: usize = 8 * 1024 * 1024;

/// A review up to this size (a DIJob's is a few KiB) takes the small lane.
pub const SMALL_BODY: usize = 256 * 1024;

#[derive(Clone, Debug)]
pub struct Limits {
    /// Connections served at once; further ones wait in the kernel's backlog. The API server
    /// keeps a few alive and reuses them, so its own are not the ones waiting.
    pub connections: usize,
    /// From the first byte to a finished TLS handshake.
    pub handshake: Duration,
    /// From the end of one request (or the handshake) to the end of the next request's headers:
    /// both the header read timeout and the keep-alive idle timeout.
    pub headers: Duration,
    /// From the headers to the answer: waiting for a lane, reading the body, deciding.
    pub request: Duration,
    /// Reviews of the small lane read or decided at once (memory: `small * SMALL_BODY`).
    pub small: usize,
    /// Reviews of the large lane read or decided at once, each off the runtime's thread.
    pub large: usize,
    /// How long the webhook goes on answering once asked to stop: the Service's endpoints, and
    /// kube-proxy's rules the API server's calls follow, take a moment to forget a stopping
    /// replica, and a call routed to it meanwhile must find it there, not a closed port or a
    /// vanished address. Each connection is closed after its next answer.
    pub drain: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            connections: 256,
            handshake: Duration::from_secs(5),
            // The webhook configurations give the API server 5 s per call (30 s at most).
            headers: Duration::from_secs(10),
            request: Duration::from_secs(10),
            small: 64,
            // A 7 MiB review parses into a few tens of MiB; two fit in the 256 MiB limit.
            large: 2,
            drain: Duration::from_secs(5),
        }
    }
}

/// The two lanes' permits.
#[derive(Clone, Debug)]
pub struct Lanes {
    small: Arc<Semaphore>,
    large: Arc<Semaphore>,
}

/// Which lane a review took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    Small,
    Large,
}

impl Lane {
    /// A body of unknown length (chunked) may be large.
    pub fn of(content_length: Option<u64>) -> Lane {
        match content_length {
            Some(n) if n <= SMALL_BODY as u64 => Lane::Small,
            _ => Lane::Large,
        }
    }
}

impl Lanes {
    pub fn new(limits: &Limits) -> Lanes {
        Lanes { small: Arc::new(Semaphore::new(limits.small)), large: Arc::new(Semaphore::new(limits.large)) }
    }

    /// Waits for a place in `lane`; the permit is held while the body is read and decided.
    pub async fn enter(&self, lane: Lane) -> OwnedSemaphorePermit {
        let semaphore = match lane {
            Lane::Small => self.small.clone(),
            Lane::Large => self.large.clone(),
        };
        semaphore.acquire_owned().await.expect("the lanes' semaphores are never closed")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_of_unknown_length_takes_the_large_lane() {
        assert_eq!(Lane::of(Some(4096)), Lane::Small);
        assert_eq!(Lane::of(Some(SMALL_BODY as u64)), Lane::Small);
        assert_eq!(Lane::of(Some(SMALL_BODY as u64 + 1)), Lane::Large);
        assert_eq!(Lane::of(None), Lane::Large);
    }
}
