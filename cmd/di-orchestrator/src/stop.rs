//! How the binary stops: SIGTERM or Ctrl-C, heard from the first moment, and a bounded grace for
//! the work in flight, whatever state it is in.

use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};
use tracing::{info, warn};

/// How long a stopping process lets its work finish (a pass, the Lease's release, the webhooks'
/// drain and answers in flight: di_webhook's `Limits::drain` and `LAST_ANSWERS`, 6 s) before it
/// exits anyway. A stop must not depend on the API server answering, nor on the caches ever
/// syncing: a rollout or `kubectl delete pod` waits on it, and kubelet's default grace is 30 s.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// Runs `work` to its end, or until `STOP_GRACE` after SIGTERM or Ctrl-C, whichever is first.
pub fn run_to_end<F>(runtime: tokio::runtime::Runtime, work: impl FnOnce(Stopped) -> F) -> anyhow::Result<()>
where
    F: std::future::Future<Output = anyhow::Result<()>>,
{
    let result = runtime.block_on(async move {
        let stopped = stop_signal()?;
        tokio::select! {
            result = work(stopped.clone()) => result,
            () = async { until_stopped(stopped).await; tokio::time::sleep(STOP_GRACE).await } => {
                warn!("still stopping {STOP_GRACE:?} after the signal: exiting now");
                Ok(())
            }
        }
    });
    // A task that does not heed cancellation (a blocking lookup) must not hold the exit either.
    runtime.shutdown_timeout(Duration::from_secs(1));
    result
}

/// Becomes true on SIGTERM or Ctrl-C.
pub type Stopped = tokio::sync::watch::Receiver<bool>;

/// Listens for SIGTERM and Ctrl-C from the start, before anything that could wait on the API
/// server, so a signal is never missed nor left to a handler installed later.
fn stop_signal() -> anyhow::Result<Stopped> {
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut terminate = signal(SignalKind::terminate())?;
    tokio::spawn(async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate.recv() => {}
        }
        info!("stopping");
        let _ = stop.send(true);
    });
    Ok(stopped)
}

/// Resolves once the process is asked to stop.
pub async fn until_stopped(mut stopped: Stopped) {
    let _ = stopped.wait_for(|stop| *stop).await;
}
