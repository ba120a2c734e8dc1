//! Where MultiKueue runs the dispatched jobs of a list, read from their Workloads on the manager
//! (`status.clusterName`): what `get` and `describe` show beside the status the worker's copy
//! writes back.

use std::collections::BTreeMap;

use di_api::DIJob;
use kube::api::{DynamicObject, ListParams};
use kube::{Api, Client, ResourceExt};

use crate::output::Workers;

/// The worker cluster of each dispatched job of `jobs` (all in `namespace`, or in any when
/// `None`).
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
    let Ok(workloads) = api.list(&ListParams::default()).await.map(|l| l.items) else {
        // A courtesy: without them the phase is shown as copied, the worker unknown.
        workers.unknown = true;
        return workers;
    };
    // Each Workload's worker, by the UID of the job that controls it.
    let by_job: BTreeMap<String, Option<String>> = workloads
        .iter()
        .filter_map(|w| {
            let owner = w.owner_references().iter().find(|o| o.controller == Some(true))?;
            Some((owner.uid.clone(), di_core::queue::multikueue::cluster(&w.data).map(str::to_owned)))
        })
        .collect();
    for job in dispatched {
        let worker = by_job.get(&job.uid().unwrap_or_default()).cloned().flatten();
        workers.by_job.insert((job.namespace().unwrap_or_default(), job.name_any()), worker);
    }
    workers
}
