//! Leader election on a coordination.k8s.io Lease, so two replicas of the orchestrator never
//! both reconcile. Every write carries the Lease's resourceVersion: of two candidates racing for
//! an expired Lease, exactly one wins.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::PostParams;
use kube::{Api, Client};
use tracing::{info, warn};

#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    /// This candidate, unique among the replicas (its pod name).
    pub identity: String,
    /// How long a holder that stops renewing keeps the Lease.
    pub duration: Duration,
    /// How often the holder renews.
    pub renew_every: Duration,
}

/// What a candidate should do with a Lease it has just read.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    /// Ours or free: write it with us as holder (renewing or taking over).
    Take { transitions: i32 },
    /// Another candidate holds it until then.
    Wait,
}

/// Pure: may `identity` take `lease` at `now`?
pub fn decide(lease: &LeaseSpec, identity: &str, now: Timestamp) -> Decision {
    let transitions = lease.lease_transitions.unwrap_or(0);
    let holder = lease.holder_identity.as_deref().unwrap_or("");
    if holder == identity {
        return Decision::Take { transitions };
    }
    let expired = match (&lease.renew_time, lease.lease_duration_seconds) {
        (Some(MicroTime(renewed)), Some(secs)) => *renewed + SignedDuration::from_secs(secs.into()) <= now,
        _ => true,
    };
    if holder.is_empty() || expired { Decision::Take { transitions: transitions + 1 } } else { Decision::Wait }
}

/// Tries once to hold the Lease; `Ok(true)` when we hold it afterwards.
pub async fn try_acquire(api: &Api<Lease>, config: &LeaseConfig) -> Result<bool, kube::Error> {
    let now = Timestamp::now();
    let spec_for = |transitions: i32, acquired: Option<MicroTime>| LeaseSpec {
        holder_identity: Some(config.identity.clone()),
        lease_duration_seconds: Some(config.duration.as_secs() as i32),
        acquire_time: acquired.or(Some(MicroTime(now))),
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(transitions),
        ..Default::default()
    };
    match api.get_opt(&config.name).await? {
        None => {
            let lease = Lease {
                metadata: ObjectMeta { name: Some(config.name.clone()), ..Default::default() },
                spec: Some(spec_for(0, None)),
            };
            match api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            }
        }
        Some(mut lease) => {
            let current = lease.spec.clone().unwrap_or_default();
            match decide(&current, &config.identity, now) {
                Decision::Wait => Ok(false),
                Decision::Take { transitions } => {
                    let renewing = current.holder_identity.as_deref() == Some(config.identity.as_str());
                    lease.spec = Some(spec_for(transitions, if renewing { current.acquire_time } else { None }));
                    // resourceVersion is kept from the read: a concurrent writer makes this fail.
                    match api.replace(&config.name, &PostParams::default(), &lease).await {
                        Ok(_) => Ok(true),
                        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                        Err(e) => Err(e),
                    }
                }
            }
        }
    }
}

/// Waits until this candidate holds the Lease.
pub async fn acquire(client: Client, config: &LeaseConfig) {
    let api: Api<Lease> = Api::namespaced(client, &config.namespace);
    loop {
        match try_acquire(&api, config).await {
            Ok(true) => {
                info!(lease = %config.name, identity = %config.identity, "became leader");
                return;
            }
            Ok(false) => {}
            Err(e) => warn!("leader election: {e}"),
        }
        tokio::time::sleep(config.renew_every).await;
    }
}

/// Renews the Lease while we hold it; returns when it is lost (another candidate took it, or it
/// could not be renewed before it expired). The caller must stop acting as leader then.
pub async fn hold(client: Client, config: &LeaseConfig) {
    let api: Api<Lease> = Api::namespaced(client, &config.namespace);
    let mut last_renewal = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(config.renew_every).await;
        match try_acquire(&api, config).await {
            Ok(true) => last_renewal = tokio::time::Instant::now(),
            Ok(false) => {
                warn!(lease = %config.name, "lost the lease to another candidate");
                return;
            }
            Err(e) => {
                warn!("renewing the lease: {e}");
                if last_renewal.elapsed() >= config.duration {
                    warn!(lease = %config.name, "could not renew the lease before it expired");
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>, renewed_secs_ago: i64, duration: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(Into::into),
            renew_time: Some(MicroTime(Timestamp::now() - SignedDuration::from_secs(renewed_secs_ago))),
            lease_duration_seconds: Some(duration),
            lease_transitions: Some(3),
            ..Default::default()
        }
    }

    #[test]
    fn decisions() {
        let now = Timestamp::now();
        assert_eq!(decide(&lease(Some("me"), 1, 15), "me", now), Decision::Take { transitions: 3 });
        assert_eq!(decide(&lease(Some("other"), 1, 15), "me", now), Decision::Wait);
        assert_eq!(decide(&lease(Some("other"), 20, 15), "me", now), Decision::Take { transitions: 4 });
        assert_eq!(decide(&lease(None, 1, 15), "me", now), Decision::Take { transitions: 4 });
        assert_eq!(decide(&LeaseSpec::default(), "me", now), Decision::Take { transitions: 1 });
    }
}
