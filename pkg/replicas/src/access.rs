//! Who may do what at the replica endpoint. It listens twice. On the pod's network (its IPs, on
//! `REPLICAS_PORT`) the job's pods read; whatever else reaches that port (a mesh's proxy, a
//! port-forward, a peer's pod) is no more trusted, so it only reads, from a listing shared by
//! every reader and at most [`READ_AGE`] old. On a loopback address that only the pod's own
//! network namespace can reach and that a port-forward never dials (the container runtime dials
//! `localhost`), the coordinator's containers read and write: `KUBERNETES_SERVER_URL` in them
//! points there, so DI-engine's client, unchanged, writes from where no one else can.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::scale::ApiError;

/// Which listener a request came in on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// The coordinator's own address: reads and writes.
    Coordinator,
    /// The pod's network: reads only.
    Network,
}

/// How old a listing the network's readers may get: at most one list of the job's pods a
/// second, however many ask (a reader needs no credential, so it must not cost the API server
/// a request each).
pub const READ_AGE: Duration = Duration::from_secs(1);

impl Access {
    /// A write is the coordinator's alone.
    pub fn check_write(self) -> Result<(), ApiError> {
        match self {
            Access::Coordinator => Ok(()),
            Access::Network => Err(ApiError::Forbidden(format!(
                "this address only reads: the job's replicas are changed by its coordinator's own containers, at \
                 {} (KUBERNETES_SERVER_URL there)",
                di_api::contract::coordinator_endpoint()
            ))),
        }
    }
}

/// The last listing the network's readers got, shared by them.
#[derive(Default)]
pub struct Shared {
    last: Mutex<Option<(Instant, Arc<Vec<Pod>>)>>,
}

impl Shared {
    /// The listing if it is fresh enough, or a new one from `list`. Readers that come while a
    /// list is under way wait for it rather than sending their own.
    pub async fn get<F, Fut>(&self, list: F) -> Result<Arc<Vec<Pod>>, ApiError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Vec<Pod>, ApiError>>,
    {
        let mut last = self.last.lock().await;
        if let Some((at, pods)) = last.as_ref()
            && at.elapsed() < READ_AGE
        {
            return Ok(pods.clone());
        }
        let pods = Arc::new(list().await?);
        *last = Some((Instant::now(), pods.clone()));
        Ok(pods)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test(start_paused = true)]
    async fn readers_share_a_listing_for_a_second() {
        let shared = Shared::default();
        let lists = AtomicUsize::new(0);
        let list = || async {
            lists.fetch_add(1, Ordering::Relaxed);
            Ok(vec![])
        };
        for _ in 0..50 {
            shared.get(list).await.unwrap();
        }
        assert_eq!(lists.load(Ordering::Relaxed), 1);
        tokio::time::advance(READ_AGE).await;
        shared.get(list).await.unwrap();
        assert_eq!(lists.load(Ordering::Relaxed), 2);
    }

    #[tokio::test]
    async fn a_failed_list_is_not_kept() {
        let shared = Shared::default();
        let failed = shared.get(|| async { Err(ApiError::Internal("down".into())) }).await;
        assert!(failed.is_err());
        let pods = shared.get(|| async { Ok(vec![Pod::default()]) }).await.unwrap();
        assert_eq!(pods.len(), 1);
    }

    #[test]
    fn the_network_is_refused_writes_and_told_where_they_go() {
        assert!(Access::Coordinator.check_write().is_ok());
        let refused = Access::Network.check_write().unwrap_err();
        assert_eq!(refused.status(), 403);
        assert!(refused.to_string().contains("127.0.22.80:22281"), "{refused}");
    }
}
