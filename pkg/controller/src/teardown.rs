//! Namespaces being torn down. Once a namespace is deleted, its namespace controller deletes
//! every object in it while the API server refuses every create there (403, cause
//! `NamespaceTerminating`). A job in it is about to go: its pods vanishing are neither a failure
//! nor a restart, and creating them again would only send the API server writes it must refuse.
//! So a pass over such a job does nothing, as for a job being deleted itself.
//!
//! Known two ways: the namespace's `deletionTimestamp`, from a metadata-only watch (which comes
//! before the namespace controller deletes anything), and, should that watch lag or be refused
//! (an install whose RBAC predates it), the first create the API server refuses that way, kept
//! for that job until the job itself is deleted.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tracing::{info, warn};

/// Which namespaces are going, as far as the orchestrator knows.
#[derive(Clone, Default)]
pub struct Teardown {
    namespaces: Option<Store<PartialObjectMeta<Namespace>>>,
    /// Jobs (by UID) a create of which was refused because their namespace is going.
    refused: Arc<Mutex<HashSet<String>>>,
}

impl Teardown {
    /// Whether the job `uid` in `namespace` is going with its namespace.
    pub fn going(&self, namespace: &str, uid: &str) -> bool {
        let deleted = |store: &Store<PartialObjectMeta<Namespace>>| {
            store.get(&ObjectRef::new(namespace)).is_some_and(|ns| ns.metadata.deletion_timestamp.is_some())
        };
        self.namespaces.as_ref().is_some_and(deleted) || self.refused.lock().expect("teardown lock").contains(uid)
    }

    /// Records that a create of job `uid` was refused because its namespace is going.
    pub fn refused(&self, uid: &str) {
        self.refused.lock().expect("teardown lock").insert(uid.to_owned());
    }

    /// Forgets a deleted job.
    pub fn forget(&self, uid: &str) {
        let mut refused = self.refused.lock().expect("teardown lock");
        if !refused.is_empty() {
            refused.remove(uid);
        }
    }

    /// Watches the namespaces' metadata (only `namespace` when the orchestrator reconciles one);
    /// the returned future keeps the cache filled. A watch the API server refuses (RBAC from
    /// before this watch) is given up, said once: refused creates still tell.
    pub fn watch(
        client: &Client,
        namespace: Option<&str>,
        backoff: watcher::ExponentialBackoff,
    ) -> (Teardown, impl Future<Output = ()> + Send + 'static) {
        let (store, writer) = reflector::store();
        let mut config = watcher::Config::default();
        if let Some(namespace) = namespace {
            config = config.fields(&format!("metadata.name={namespace}"));
        }
        let stream = watcher(Api::<PartialObjectMeta<Namespace>>::all(client.clone()), config)
            .backoff(backoff)
            .modify(|ns| ns.metadata.managed_fields = None)
            .reflect(writer);
        let teardown = Teardown { namespaces: Some(store), refused: Arc::default() };
        let run = async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    Err(watcher::Error::InitialListFailed(kube::Error::Api(status))) if status.code == 403 => {
                        warn!(
                            "namespaces cannot be watched ({}): a namespace being deleted is known from the first create it refuses",
                            status.message
                        );
                        return;
                    }
                    Err(e) => info!("namespace watch: {e}"),
                    Ok(_) => {}
                }
            }
        };
        (teardown, run)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_job_is_going_until_it_is_deleted() {
        let teardown = Teardown::default();
        assert!(!teardown.going("a", "uid-1"));
        teardown.refused("uid-1");
        assert!(teardown.going("a", "uid-1"));
        assert!(!teardown.going("a", "uid-2"), "per job: a new job of a namespace made again is not");
        teardown.forget("uid-1");
        assert!(!teardown.going("a", "uid-1"));
    }
}
