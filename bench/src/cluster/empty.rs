//! A namespace emptied between runs. Every run of time to running leaves a thousand pods and
//! Services or more, and with each run kept, later runs of an invocation were slower (100 jobs of
//! 10 with latency, commit 4cf6d40: the limit's window of 64 took 5.2 s in the sweep and 5.7 to
//! 7.6 s in the seven pairs after it): each run now starts from an empty namespace.

use std::fmt::Debug;
use std::time::{Duration, Instant};

use anyhow::bail;
use di_api::DIJob;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Api;
use kube::api::{DeleteParams, ListParams};
use serde::de::DeserializeOwned;

use super::harness::Bench;

/// The longest an emptied namespace may take to have no pod or Service left.
const LIMIT: Duration = Duration::from_secs(300);

impl Bench {
    /// Deletes every DIJob, pod and Service of `ns`, waits until none is left, then until the
    /// cluster is quiet. The jobs go first, so the orchestrator has no job left whose pods it
    /// would make again; the pods go at once (no grace), as the run is over and measured.
    pub async fn empty(&self, ns: &str) -> anyhow::Result<()> {
        let (all, background) = (ListParams::default(), DeleteParams::background());
        let now = DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::background() };
        let jobs: Api<DIJob> = Api::namespaced(self.client.clone(), ns);
        jobs.delete_collection(&background, &all).await?;
        let (pods, services) =
            (Api::<Pod>::namespaced(self.client.clone(), ns), Api::<Service>::namespaced(self.client.clone(), ns));
        tokio::try_join!(pods.delete_collection(&now, &all), services.delete_collection(&background, &all))?;
        // Any a pass made after its job was deleted is the garbage collector's.
        until_none(&pods, &all, &format!("{ns}: pods")).await?;
        until_none(&services, &all, &format!("{ns}: Services")).await?;
        self.settle().await
    }
}

/// Waits until `api` lists nothing `params` selects, at most [`LIMIT`]; `what` names them in
/// the error.
pub(super) async fn until_none<K>(api: &Api<K>, params: &ListParams, what: &str) -> anyhow::Result<()>
where
    K: Clone + DeserializeOwned + Debug,
{
    let deadline = Instant::now() + LIMIT;
    while !api.list_metadata(params).await?.items.is_empty() {
        if Instant::now() > deadline {
            bail!("{what} still there {LIMIT:?} after they were deleted");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}
