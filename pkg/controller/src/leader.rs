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

#[derive(Clone, Debug)]
pub struct LeaderConfig {
    pub namespace: String,
    pub name: String,
    /// This candidate, unique among the replicas (its pod name).
    pub identity: String,
    /// How long the Lease stays the holder's after its last renewal; only then may another
    /// candidate take it.
    pub lease_duration: Duration,
    /// How long the holder keeps trying to renew before it steps down.
    pub renew_deadline: Duration,
    /// How often the holder renews, and the timeout of each request; every candidate reads the
    /// Lease twice as often.
    pub retry_period: Duration,
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("the lease duration, renew deadline and retry period must be whole seconds, at least 1")]
    NotWholeSeconds,
    #[error(
        "the renew deadline ({deadline:?}) must be shorter than the lease duration ({duration:?}): \
         the leader has to stop before another replica may take the Lease over"
    )]
    DeadlineNotBeforeExpiry { deadline: Duration, duration: Duration },
    #[error(
        "the retry period ({retry:?}) must be shorter than the renew deadline ({deadline:?}), so a \
         failed renewal is tried again before the leader steps down"
    )]
    RetryNotBeforeDeadline { retry: Duration, deadline: Duration },
}

impl LeaderConfig {
    /// Lease duration > renew deadline > retry period: the holder retries a failed renewal, and
    /// gives up strictly before the Lease can expire for the others.
    pub fn validate(&self) -> Result<(), ConfigError> {
        // The Lease counts in whole seconds (leaseDurationSeconds), and so does the crate.
        let whole = |d: Duration| d >= Duration::from_secs(1) && d.subsec_nanos() == 0;
        if ![self.lease_duration, self.renew_deadline, self.retry_period].into_iter().all(whole) {
            return Err(ConfigError::NotWholeSeconds);
        }
        if self.renew_deadline >= self.lease_duration {
            return Err(ConfigError::DeadlineNotBeforeExpiry {
                deadline: self.renew_deadline,
                duration: self.lease_duration,
            });
        }
        if self.retry_period >= self.renew_deadline {
            return Err(ConfigError::RetryNotBeforeDeadline {
                retry: self.retry_period,
                deadline: self.renew_deadline,
            });
        }
        Ok(())
    }

    /// The client configuration for the Lease's requests: each gives up after the retry period,
    /// so a renewal stuck on a partition is tried again (or the holder steps down) in time, and
    /// none is retried behind the election's back.
    pub fn client_config(&self, mut config: kube::Config) -> kube::Config {
        config.connect_timeout = Some(self.retry_period);
        config.read_timeout = Some(self.retry_period);
        config.write_timeout = Some(self.retry_period);
        // Counted from the request, not from when its pooled connection went idle.
        config.reset_reader_on_write = true;
        config.default_retry = false;
        config
    }
}

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
mod tests {
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::jiff::SignedDuration;

    use super::*;

    fn config(duration: u64, deadline: u64, retry: u64) -> LeaderConfig {
        LeaderConfig {
            namespace: "di-system".into(),
            name: "di-orchestrator".into(),
            identity: "me".into(),
            lease_duration: Duration::from_secs(duration),
            renew_deadline: Duration::from_secs(deadline),
            retry_period: Duration::from_secs(retry),
        }
    }

    #[test]
    fn durations_must_nest() {
        assert_eq!(config(15, 10, 2).validate(), Ok(()));
        let deadline_at_expiry = ConfigError::DeadlineNotBeforeExpiry {
            deadline: Duration::from_secs(15),
            duration: Duration::from_secs(15),
        };
        assert_eq!(config(15, 15, 2).validate(), Err(deadline_at_expiry));
        assert!(matches!(config(15, 20, 2).validate(), Err(ConfigError::DeadlineNotBeforeExpiry { .. })));
        assert!(matches!(config(15, 10, 10).validate(), Err(ConfigError::RetryNotBeforeDeadline { .. })));
        assert_eq!(config(15, 10, 0).validate(), Err(ConfigError::NotWholeSeconds));
        let mut fractional = config(15, 10, 2);
        fractional.lease_duration = Duration::from_millis(15_500);
        assert_eq!(fractional.validate(), Err(ConfigError::NotWholeSeconds));
        let message = config(15, 15, 2).validate().unwrap_err().to_string();
        assert!(message.contains("must be shorter than the lease duration"), "{message}");
    }

    #[test]
    fn lease_requests_time_out_after_the_retry_period_and_are_not_retried() {
        let base = kube::Config::new("https://127.0.0.1:6443".parse().unwrap());
        let lease = config(15, 10, 2).client_config(base);
        let two = Some(Duration::from_secs(2));
        assert_eq!((lease.connect_timeout, lease.read_timeout, lease.write_timeout), (two, two, two));
        assert!(lease.reset_reader_on_write);
        assert!(!lease.default_retry);
    }

    #[test]
    fn the_step_down_time_counts_from_the_renewal() {
        let (at, wall) = (Instant::now(), Timestamp::now());
        let deadline = Duration::from_secs(10);
        let ago = |secs: i64| wall - SignedDuration::from_secs(secs);
        assert_eq!(step_down_at(ago(3), deadline, at, wall), at + Duration::from_secs(7));
        assert_eq!(step_down_at(ago(10), deadline, at, wall), at);
        assert_eq!(step_down_at(ago(60), deadline, at, wall), at);
        // A renewal newer than the read never earns more than the whole deadline.
        assert_eq!(step_down_at(ago(-5), deadline, at, wall), at + deadline);
    }

    fn lease(holder: Option<&str>, renewed: Timestamp) -> Lease {
        let spec = LeaseSpec {
            holder_identity: holder.map(Into::into),
            renew_time: Some(MicroTime(renewed)),
            lease_duration_seconds: Some(15),
            ..Default::default()
        };
        Lease { spec: Some(spec), ..Default::default() }
    }

    #[test]
    fn only_the_holder_stands_and_only_until_its_step_down_time() {
        let (at, wall, deadline) = (Instant::now(), Timestamp::now(), Duration::from_secs(10));
        let read = |holder: Option<&str>, secs_ago: i64| {
            Seen::of(Some(&lease(holder, wall - SignedDuration::from_secs(secs_ago))), deadline, at, wall)
        };
        assert_eq!(standing(&read(Some("me"), 1), "me", at), Ok(()));
        assert_eq!(standing(&read(Some("me"), 11), "me", at), Err(Lost::NotRenewed));
        assert_eq!(standing(&read(Some("other"), 1), "me", at), Err(Lost::TakenOver));
        assert_eq!(standing(&read(Some(""), 1), "me", at), Err(Lost::TakenOver));
        assert_eq!(standing(&Seen::of(None, deadline, at, wall), "me", at), Err(Lost::TakenOver));
        let fresh = read(Some("me"), 1);
        assert_eq!(standing(&fresh, "me", at + Duration::from_millis(8_999)), Ok(()));
        assert_eq!(standing(&fresh, "me", at + Duration::from_secs(9)), Err(Lost::NotRenewed));
    }

    fn held_until(step_down_at: Instant) -> watch::Receiver<Seen> {
        let seen = Seen { at: Instant::now(), holder: Some("me".into()), step_down_at };
        watch::channel(seen).1
    }

    #[tokio::test]
    async fn the_fence_runs_the_work_while_the_lease_stands() {
        let seen = held_until(Instant::now() + Duration::from_secs(60));
        let done = fenced(async { 7 }, std::future::pending(), &seen, "me").await;
        assert_eq!(done, Ok(7));
    }

    #[tokio::test]
    async fn the_fence_never_polls_the_work_of_a_holder_frozen_past_its_step_down_time() {
        let seen = held_until(Instant::now() + Duration::from_millis(20));
        let (ready, wait) = tokio::sync::oneshot::channel::<()>();
        let polled_after = std::sync::Mutex::new(false);
        let work = async {
            let _ = wait.await;
            *polled_after.lock().unwrap() = true;
        };
        let mut fence = pin!(fenced(work, std::future::pending(), &seen, "me"));
        assert!(futures::poll!(fence.as_mut()).is_pending());
        // The process stands still past its step-down time (as under SIGSTOP or a long pause)
        // without the runtime's timers running; then the work's input arrives.
        std::thread::sleep(Duration::from_millis(40));
        ready.send(()).unwrap();
        assert_eq!(futures::poll!(fence.as_mut()), Poll::Ready(Err(Lost::NotRenewed)));
        assert!(!*polled_after.lock().unwrap(), "the work took a step after its step-down time");
    }

    #[tokio::test]
    async fn the_fence_stops_the_work_when_the_lease_is_lost() {
        let seen = held_until(Instant::now() + Duration::from_secs(60));
        let lost = async { Lost::TakenOver };
        assert_eq!(fenced(std::future::pending::<()>(), lost, &seen, "me").await, Err(Lost::TakenOver));
    }

    #[tokio::test]
    async fn the_watchdog_fires_at_the_step_down_time_unless_a_renewal_is_read() {
        let now = Instant::now();
        let (tx, rx) = watch::channel(Seen { at: now, holder: Some("me".into()), step_down_at: now });
        assert_eq!(watchdog(rx.clone(), "me").await, Lost::NotRenewed);
        tx.send_replace(Seen { at: now, holder: Some("me".into()), step_down_at: now + Duration::from_millis(50) });
        let started = Instant::now();
        assert_eq!(watchdog(rx.clone(), "me").await, Lost::NotRenewed);
        assert!(started.elapsed() >= Duration::from_millis(40));
        tx.send_replace(Seen { at: now, holder: Some("other".into()), step_down_at: now + Duration::from_secs(60) });
        assert_eq!(watchdog(rx, "me").await, Lost::TakenOver);
    }
}
