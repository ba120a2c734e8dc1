//! Where MultiKueue runs the dispatched jobs of a list, read from their Workloads on the manager
//! (`status.clusterName`): what `get` and `describe` show beside the status the worker's copy
//! writes back.

use di_api::DIJob;
use kube::api::{DynamicObject, ListParams};
use kube::{Api, Client, ResourceExt};

use crate::output::Workers;

/// The worker cluster of each dispatched job of `jobs` (all in `namespace`, or in any when
/// `None`). A courtesy: Workloads that cannot be read leave every such job "dispatching".
pub async fn workers(client: &Client, namespace: Option<&str>, jobs: &[DIJob]) -> Workers {
    let mut workers = Workers::default();
    let dispatched: Vec<&DIJob> = jobs.iter().filter(|j| j.dispatched()).collect();
    if dispatched.is_empty() {
        return workers;
    }
    let kind = di_core::queue::workload_kind();
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &kind),
        None => Api::all_with(client.clone(), &kind),
    };
    let workloads = api.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
    for job in dispatched {
        let uid = job.uid().unwrap_or_default();
        let owned = workloads
            .iter()
            .find(|w| di_core::queue::multikueue::owned_by(&serde_json::to_value(w).unwrap_or_default(), &uid));
        let worker = owned.and_then(|w| di_core::queue::multikueue::cluster(&w.data).map(str::to_owned));
        workers.0.insert((job.namespace().unwrap_or_default(), job.name_any()), worker);
    }
    workers
}
