//! A live view of one kind's objects, fed by a watch that outlives API server and etcd restarts
//! (it backs off and lists again), and bounded waits on it that wake on every change instead of
//! polling.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use futures::StreamExt;
use k8s_openapi::serde::de::DeserializeOwned;
use kube::runtime::reflector::{self, Store};
use kube::runtime::utils::Backoff;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The harness's watches try again after a short, steady pause. kube's default backoff grows to
/// 30 s and stays there until two minutes pass without an error, so after an outage a view
/// would lag the world by up to a minute, and a fault would look slower to settle than it is.
pub struct Steady;

impl Iterator for Steady {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(Duration::from_millis(250))
    }
}

impl Backoff for Steady {
    fn reset(&mut self) {}
}

/// Bumped on every change of any view that shares it: a wait over several views wakes on each.
pub type Ticks = Arc<watch::Sender<u64>>;

pub fn ticks() -> Ticks {
    Arc::new(watch::channel(0).0)
}

pub struct Follow<K: Resource<DynamicType = ()> + 'static> {
    store: Store<K>,
    ticks: Ticks,
    task: JoinHandle<()>,
}

impl<K> Follow<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    pub fn start(api: Api<K>, ticks: Ticks) -> Follow<K> {
        let (store, writer) = reflector::store();
        let stream = watcher(api, watcher::Config::default())
            .backoff(Steady)
            // Managed fields are most of an object's bytes and nothing a check reads.
            .modify(|object| object.managed_fields_mut().clear())
            .reflect(writer);
        let bump = ticks.clone();
        // Errors are the faults at work: the backoff has the watch try again, and it goes on.
        let task = tokio::spawn(stream.for_each(move |_| {
            bump.send_modify(|n| *n += 1);
            std::future::ready(())
        }));
        Follow { store, ticks, task }
    }

    /// Every object, as last seen (empty until the first list is in).
    pub fn state(&self) -> Vec<Arc<K>> {
        self.store.state()
    }

    /// Waits at most `limit` until `found` returns something for the objects seen, and returns it.
    pub async fn until<T>(
        &self,
        limit: Duration,
        what: &str,
        found: impl Fn(&[Arc<K>]) -> Option<T>,
    ) -> anyhow::Result<T> {
        let mut changes = self.ticks.subscribe();
        let wait = async {
            let _ = self.store.wait_until_ready().await;
            loop {
                changes.mark_unchanged();
                if let Some(value) = found(&self.store.state()) {
                    return value;
                }
                // The sender lives as long as this view; it cannot be gone.
                let _ = changes.changed().await;
            }
        };
        tokio::time::timeout(limit, wait).await.with_context(|| format!("{what}: not within {limit:?}"))
    }
}

impl<K: Resource<DynamicType = ()> + 'static> Drop for Follow<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Waits at most `limit` until `done` holds, looking again whenever anything sharing `ticks`
/// changes. A timeout is not an error here: the caller judges what it finds then.
pub async fn settle(ticks: &Ticks, limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let mut changes = ticks.subscribe();
    let wait = async {
        loop {
            changes.mark_unchanged();
            if done() {
                return;
            }
            let _ = changes.changed().await;
        }
    };
    tokio::time::timeout(limit, wait).await.is_ok()
}
