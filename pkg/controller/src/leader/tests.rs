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
    let deadline_at_expiry =
        ConfigError::DeadlineNotBeforeExpiry { deadline: Duration::from_secs(15), duration: Duration::from_secs(15) };
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
