//! The election's timing, and the rule that keeps it safe: the holder stops before anyone else
//! may start.

use std::time::Duration;

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
