//! The replica endpoint's state: its client and job, and what its requests share (one write at a
//! time, whether its pod is the job's coordinator, the network readers' listing).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use di_api::DIJob;
use di_api::contract::labels;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, Client};
use tokio::sync::{Mutex, OwnedMutexGuard};

use crate::access::{Access, Shared};
use crate::scale::{ApiError, Scope, internal};
use crate::slim::{self, SlimPod};

pub struct Endpoint {
    pub client: Client,
    pub scope: Scope,
    /// How long an answer waits for the reconciler to create or remove the replicas.
    pub wait: Duration,
    /// The UID of the pod this endpoint runs in: it writes once the job's status names it.
    pub pod_uid: String,
    /// The job's status has named this pod as its coordinator (see `follow::until_current`).
    pub(crate) current: AtomicBool,
    /// One write at a time from this endpoint; optimistic concurrency covers other writers. Held
    /// for the write only, never while a request waits for pods.
    writing: Arc<Mutex<()>>,
    /// The listing the network's readers share.
    shared: Shared,
}

impl Endpoint {
    pub fn new(client: Client, scope: Scope, wait: Duration, pod_uid: String) -> Arc<Endpoint> {
        Arc::new(Endpoint {
            client,
            scope,
            wait,
            pod_uid,
            current: AtomicBool::new(false),
            writing: Arc::default(),
            shared: Shared::default(),
        })
    }

    pub(crate) fn jobs(&self) -> Api<DIJob> {
        Api::namespaced(self.client.clone(), &self.scope.namespace)
    }

    /// The namespace's pods, as the endpoint reads them, and the selector of this job's.
    pub(crate) fn pod_api(&self) -> (Api<SlimPod>, String) {
        let api = Api::namespaced(self.client.clone(), &self.scope.namespace);
        (api, format!("{}={}", labels::JOB_NAME, self.scope.job))
    }

    /// This request's turn to write, once the writes before it are in. Waiting for it is
    /// cancellable: a request whose client goes meanwhile writes nothing.
    pub(crate) async fn turn(&self) -> OwnedMutexGuard<()> {
        self.writing.clone().lock_owned().await
    }

    pub(crate) async fn pods(&self) -> Result<Vec<Pod>, ApiError> {
        let (api, selector) = self.pod_api();
        Ok(slim::list(&api, &ListParams::default().labels(&selector)).await.map_err(internal)?.0)
    }

    /// The job's pods for a reader: listed now for the coordinator, shared by the network's.
    pub(crate) async fn pods_for(&self, access: Access) -> Result<Arc<Vec<Pod>>, ApiError> {
        match access {
            Access::Coordinator => Ok(Arc::new(self.pods().await?)),
            Access::Network => self.shared.get(|| self.pods()).await,
        }
    }
}
