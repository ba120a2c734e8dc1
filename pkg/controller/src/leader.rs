//! Leader election on a coordination.k8s.io Lease, so two replicas of the orchestrator never
//! both reconcile.
//!
//! kube-lease-manager takes, renews and releases the Lease (its server-side apply makes two
//! candidates racing for a free Lease conflict, so exactly one wins). It leaves four things to its
//! caller, done here on top of it:
//! - a renew deadline: it reports a failed renewal but not a successful one, so this module reads
//!   the Lease twice per retry period and steps down once its own last renewal it read is
//!   `renew_deadline` old, `lease_duration - renew_deadline` before anyone else may take it;
//! - a timeout on every request: its requests go through the client they are given, so that
//!   client gives up after the retry period ([`LeaderConfig::client_config`]);
//! - a fence: the leader's work is not polled once it may no longer act ([`Leadership::lead`]);
//! - a prompt takeover: a standby waits out the holder's lease duration even when the holder has
//!   released it, so a standby that sees the Lease free starts over at once.

mod config;

use std::future::{Future, poll_fn};
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::{Api, Client};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder, LeaseManagerError};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, info, warn};

pub use config::{ConfigError, LeaderConfig};

/// Why this replica stopped leading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Lost {
    #[error("another replica holds the lease")]
    TakenOver,
    #[error("the lease was not renewed before the renew deadline")]
    NotRenewed,
}

/// The Lease as last read.
#[derive(Clone, Debug)]
struct Seen {
    /// When it was read (taken before the request, so no later than the answer).
    at: Instant,
    holder: Option<String>,
    /// When a holder whose last renewal is the one read must have stopped acting.
    step_down_at: Instant,
}

impl Seen {
    fn of(lease: Option<&Lease>, renew_deadline: Duration, at: Instant, wall: Timestamp) -> Seen {
        let spec = lease.and_then(|l| l.spec.as_ref());
        let holder = spec.and_then(|s| s.holder_identity.clone()).filter(|h| !h.is_empty());
        let step_down_at = match spec.and_then(|s| s.renew_time.as_ref()) {
            Some(MicroTime(renewed)) => step_down_at(*renewed, renew_deadline, at, wall),
            None => at,
        };
        Seen { at, holder, step_down_at }
    }
}

/// `renew_deadline` after the renewal at `renewed`, on the monotonic clock (read at `at`, with
/// the wall clock reading `wall`), so that the wall clock stepping later cannot move it. The
/// others count the Lease's expiry from the same renewTime, so this is `lease_duration -
/// renew_deadline` before any of them may take over.
fn step_down_at(renewed: Timestamp, renew_deadline: Duration, at: Instant, wall: Timestamp) -> Instant {
    // A renewal newer than the clock (it landed while the read was in flight) counts as now.
    let age = Duration::try_from(wall.duration_since(renewed)).unwrap_or(Duration::ZERO);
    at + renew_deadline.saturating_sub(age)
}

/// `Ok` while `identity` may act as leader at `now` by the Lease as last read.
fn standing(seen: &Seen, identity: &str, now: Instant) -> Result<(), Lost> {
    if seen.holder.as_deref() != Some(identity) {
        return Err(Lost::TakenOver);
    }
    if now >= seen.step_down_at {
        return Err(Lost::NotRenewed);
    }
    Ok(())
}

/// One candidate for the Lease: it reads the Lease twice per retry period for as long as it lives.
pub struct Elector {
    config: LeaderConfig,
    client: Client,
    api: Api<Lease>,
    seen: watch::Sender<Seen>,
    reader: JoinHandle<()>,
}

/// This replica holds the Lease; [`Leadership::lead`] runs the work it may do only as leader.
pub struct Leadership<'a> {
    elector: &'a Elector,
    manager: LeaseManager,
}

impl Elector {
    /// `client` should be built from [`LeaderConfig::client_config`].
    pub fn start(client: Client, config: LeaderConfig) -> Result<Elector, ConfigError> {
        config.validate()?;
        let api: Api<Lease> = Api::namespaced(client.clone(), &config.namespace);
        let now = Instant::now();
        let (seen, _) = watch::channel(Seen { at: now, holder: None, step_down_at: now });
        let reader = tokio::spawn(read_every_period(api.clone(), config.clone(), seen.clone()));
        Ok(Elector { config, client, api, seen, reader })
    }

    /// Waits until this candidate holds the Lease, and has read it back as its own.
    pub async fn acquire(&self) -> Leadership<'_> {
        loop {
            match self.try_acquire().await {
                Ok(Some(manager)) => {
                    info!(lease = %self.config.name, identity = %self.config.identity, "became leader");
                    return Leadership { elector: self, manager };
                }
                // Released, or taken by another candidate first: start over at once.
                Ok(None) => {}
                Err(e) => {
                    warn!(lease = %self.config.name, "leader election: {e}");
                    tokio::time::sleep(self.config.retry_period).await;
                }
            }
        }
    }

    async fn try_acquire(&self) -> Result<Option<LeaseManager>, LeaseManagerError> {
        // A fresh manager each time: the crate reads the Lease again only once its holder's
        // lease duration has passed, even if the holder released it meanwhile.
        let manager = self.manager().await?;
        let mut seen = self.seen.subscribe();
        tokio::select! {
            taken = manager.changed() => {
                taken?;
            }
            () = released(&mut seen) => return Ok(None),
        }
        let seen = read(&self.api, &self.config, &self.seen).await?;
        match standing(&seen, &self.config.identity, Instant::now()) {
            Ok(()) => Ok(Some(manager)),
            // Ours, but from an earlier run of this replica (same pod name) that renews no more,
            // which the crate counts as held: free it, and take it afresh.
            Err(Lost::NotRenewed) => manager.release().await.map(|()| None),
            Err(Lost::TakenOver) => Ok(None),
        }
    }

    async fn manager(&self) -> Result<LeaseManager, LeaseManagerError> {
        let config = &self.config;
        LeaseManagerBuilder::new(self.client.clone(), &config.name)
            .with_namespace(&config.namespace)
            .with_identity(&config.identity)
            .with_duration(config.lease_duration.as_secs())
            // The crate renews `grace` before the Lease expires: this renews every retry period,
            // which leaves the renew deadline room for retries.
            .with_grace((config.lease_duration - config.retry_period).as_secs())
            .build()
            .await
    }

    /// Gives the Lease up if this replica holds it, so a standby takes over at once instead of
    /// after the lease duration. Call it only once the leader's work has stopped.
    pub async fn release(&self) {
        let release = async { self.manager().await?.release().await };
        // Bounded: when the API server cannot be reached the Lease expires as after a crash.
        match tokio::time::timeout(self.config.renew_deadline, release).await {
            Ok(Ok(())) => info!(lease = %self.config.name, "let go of the lease"),
            Ok(Err(e)) => warn!(lease = %self.config.name, "releasing the lease: {e}"),
            Err(_) => warn!(lease = %self.config.name, "releasing the lease timed out"),
        }
    }
}

impl Drop for Elector {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl Leadership<'_> {
    /// Runs `work` while this replica leads. Returns `Err` as soon as another replica holds the
    /// Lease or it could not be renewed before the renew deadline; `work` is then dropped and
    /// never polled again, strictly before the Lease can expire for the others.
    pub async fn lead<W: Future>(&self, work: W) -> Result<W::Output, Lost> {
        let config = &self.elector.config;
        let seen = self.elector.seen.subscribe();
        let lost = async {
            tokio::select! {
                lost = renew(&self.manager, config.retry_period) => lost,
                lost = watchdog(seen.clone(), &config.identity) => lost,
            }
        };
        fenced(work, lost, &seen, &config.identity).await
    }

    /// Stops renewing and gives the Lease up (see [`Elector::release`]).
    pub async fn release(self) {
        let elector = self.elector;
        drop(self.manager);
        elector.release().await;
    }
}

/// Keeps the crate renewing the Lease; returns when another replica took it. A failed renewal
/// (refused, or timed out after the retry period) is tried again soon; the watchdog decides when
/// it is too late.
async fn renew(manager: &LeaseManager, retry_period: Duration) -> Lost {
    loop {
        match manager.changed().await {
            Ok(true) => {}
            Ok(false) => return Lost::TakenOver,
            Err(e) => {
                warn!("renewing the lease: {e}");
                tokio::time::sleep(retry_period / 4).await;
            }
        }
    }
}

/// Returns when the Lease as read says this replica may no longer lead: at its step-down time,
/// unless a later renewal was read before then.
async fn watchdog(mut seen: watch::Receiver<Seen>, identity: &str) -> Lost {
    loop {
        let step_down_at = {
            let seen = seen.borrow_and_update();
            match standing(&seen, identity, Instant::now()) {
                Ok(()) => seen.step_down_at,
                Err(lost) => return lost,
            }
        };
        tokio::select! {
            () = tokio::time::sleep_until(step_down_at) => {}
            changed = seen.changed() => {
                if changed.is_err() {
                    tokio::time::sleep_until(step_down_at).await;
                }
            }
        }
    }
}

/// Polls `work` only while `identity` stands as leader, checked before every poll: a process that
/// was frozen or starved past its step-down time must not take one more step, even when the
/// timer that is to wake `lost` has not fired yet.
async fn fenced<W: Future>(
    work: W,
    lost: impl Future<Output = Lost>,
    seen: &watch::Receiver<Seen>,
    identity: &str,
) -> Result<W::Output, Lost> {
    let (mut work, mut lost) = (pin!(work), pin!(lost));
    poll_fn(|cx| {
        if let Err(lost) = standing(&seen.borrow(), identity, Instant::now()) {
            return Poll::Ready(Err(lost));
        }
        if let Poll::Ready(lost) = lost.as_mut().poll(cx) {
            return Poll::Ready(Err(lost));
        }
        work.as_mut().poll(cx).map(Ok)
    })
    .await
}

/// Returns when a new read finds the Lease free.
async fn released(seen: &mut watch::Receiver<Seen>) {
    while seen.changed().await.is_ok() {
        if seen.borrow_and_update().holder.is_none() {
            return;
        }
    }
    std::future::pending().await
}

/// Twice per retry period: the holder renews once per period, so it learns of each renewal
/// within half a period, and a standby of a release as soon.
async fn read_every_period(api: Api<Lease>, config: LeaderConfig, seen: watch::Sender<Seen>) {
    let mut every = tokio::time::interval(config.retry_period / 2);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        if let Err(e) = read(&api, &config, &seen).await {
            // No news: the step-down time stays where the last read put it.
            debug!(lease = %config.name, "reading the lease: {e}");
        }
    }
}

/// Reads the Lease and publishes it, unless a read started later was published already.
async fn read(api: &Api<Lease>, config: &LeaderConfig, seen: &watch::Sender<Seen>) -> Result<Seen, kube::Error> {
    let (at, wall) = (Instant::now(), Timestamp::now());
    let lease = api.get_opt(&config.name).await?;
    let read = Seen::of(lease.as_ref(), config.renew_deadline, at, wall);
    seen.send_if_modified(|last| {
        if read.at <= last.at {
            return false;
        }
        if read.holder != last.holder {
            info!(lease = %config.name, "the lease is held by {}", read.holder.as_deref().unwrap_or("nobody"));
        }
        *last = read.clone();
        true
    });
    Ok(read)
}

#[cfg(test)]
mod tests;
