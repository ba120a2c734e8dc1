//! Kueue's Workloads against the API server: whether the cluster serves them (asked once at
//! start-up), the caches of the jobs' Workloads and of the ResourceFlavors that place admitted
//! pods, what a pass knows of its job's queue, and the writes `queue` decides.

use std::collections::BTreeMap;
use std::sync::Arc;

use di_api::DIJob;
use di_client::is_status;
use futures::{Stream, StreamExt};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tracing::{info, warn};

use crate::context::Context;
use crate::context::Kueue;
use crate::desired::managed_selector;
use crate::error::Error;
use crate::queue::{self, Queue};
use crate::view::JobView;

/// Whether the API server serves Kueue's Workloads; said once, either way.
pub async fn served(client: &Client) -> Result<bool, kube::Error> {
    let kind = queue::workload_kind();
    let served = crate::discovery::serves(client, &kind.api_version, &kind.plural).await?;
    match served {
        true => info!(api_version = %kind.api_version, "jobs labelled {} wait in Kueue's queues", queue::QUEUE_LABEL),
        false => info!(
            "no Kueue here ({} is not served): a job labelled {} waits, saying so",
            kind.api_version,
            queue::QUEUE_LABEL
        ),
    }
    Ok(served)
}

/// Returns once the API server serves Kueue's Workloads, asking every `period` (a failed
/// question is asked again at the next).
pub async fn until_served(client: &Client, period: std::time::Duration) {
    loop {
        tokio::time::sleep(period).await;
        if served_now(client).await {
            return;
        }
    }
}

/// Whether the API server serves Kueue's Workloads now, asked once (an error is a no); said
/// when it does, as the orchestrator did not see them at its start.
pub async fn served_now(client: &Client) -> bool {
    let kind = queue::workload_kind();
    let served = crate::discovery::serves_once(client, &kind.api_version, &kind.plural).await.unwrap_or(false);
    if served {
        warn!(api_version = %kind.api_version, "Kueue has been installed since the orchestrator started");
    }
    served
}

/// The caches, and the stream of Workload changes that brings their jobs' passes. Workloads
/// are watched in `namespace` (all when `None`) and only ours, by the label every object of a
/// job carries; flavors everywhere, being cluster-scoped and few.
pub fn watch(
    client: &Client,
    namespace: Option<&str>,
    backoff: impl Fn() -> watcher::ExponentialBackoff,
) -> (
    Kueue,
    impl Stream<Item = Result<watcher::Event<DynamicObject>, watcher::Error>> + Send + 'static,
    impl std::future::Future<Output = ()> + Send + 'static,
) {
    let kind = queue::workload_kind();
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &kind),
        None => Api::all_with(client.clone(), &kind),
    };
    let writer = reflector::store::Writer::new(kind);
    let workloads = writer.as_reader();
    let selector = watcher::Config::default().labels(&managed_selector());
    let workload_stream =
        watcher(api, selector).backoff(backoff()).modify(|w| w.metadata.managed_fields = None).reflect(writer);
    // Flavors and (Workload) PriorityClasses trigger no pass: they matter when an admitted job's
    // pods are created, or a Workload made, which the admission or the job itself triggers.
    let (flavors, flavor_watch) = cluster_cache(client, queue::flavor_kind(), backoff());
    let (workload_priorities, class_watch) = cluster_cache(client, queue::workload_priority_kind(), backoff());
    let (priorities, priority_writer) = reflector::store();
    let priority_api: Api<PriorityClass> = Api::all(client.clone());
    let priority_watch = watcher(priority_api, watcher::Config::default())
        .backoff(backoff())
        .modify(|p| p.metadata.managed_fields = None)
        .reflect(priority_writer)
        .for_each(|_| std::future::ready(()));
    let cluster_watches = async move {
        futures::join!(flavor_watch, priority_watch, class_watch);
    };
    (Kueue { workloads, flavors, priorities, workload_priorities }, workload_stream, cluster_watches)
}

/// A cache of every object of the cluster-scoped Kueue `kind`, and the watch that fills it.
fn cluster_cache(
    client: &Client,
    kind: ApiResource,
    backoff: watcher::ExponentialBackoff,
) -> (Store<DynamicObject>, impl std::future::Future<Output = ()> + Send + 'static) {
    let writer = reflector::store::Writer::new(kind.clone());
    let store = writer.as_reader();
    let watch = watcher(Api::<DynamicObject>::all_with(client.clone(), &kind), watcher::Config::default())
        .backoff(backoff)
        .modify(|o| o.metadata.managed_fields = None)
        .reflect(writer)
        .for_each(|_| std::future::ready(()));
    (store, watch)
}

/// The job a Workload belongs to: its controller reference's, in its namespace; for one
/// MultiKueue made on this worker before the job's copy adopted it, the job its labels name.
pub fn job_of(workload: DynamicObject) -> Option<ObjectRef<JobView>> {
    let owner = workload.owner_references().iter().find(|o| o.controller == Some(true)).cloned();
    let name = match owner {
        Some(owner) => (owner.kind == "DIJob").then_some(owner.name)?,
        None => workload.labels().get(di_api::contract::labels::JOB_NAME)?.clone(),
    };
    Some(ObjectRef::new(&name).within(&workload.namespace()?))
}

/// What a pass knows of `job`'s queue: `None` for a job in none that has no Workload left from
/// when it was in one.
pub fn queue_of(ctx: &Context, job: &DIJob) -> Option<Queue> {
    let queued = queue::queue_name(job).is_some();
    let Some(kueue) = &ctx.kueue else { return queued.then_some(Queue::NoKueue) };
    let namespace = job.namespace().unwrap_or_default();
    let uid = job.uid().unwrap_or_default();
    let name = queue::workload_name(job);
    let workload = kueue
        .workloads
        .get(&ObjectRef::new_with(&name, queue::workload_kind()).within(&namespace))
        .map(|w| serde_json::to_value(&*w).unwrap_or_default())
        // Or the one MultiKueue made for this copy of a dispatched job, not adopted yet.
        .filter(|w| queue::multikueue::owned_by(w, &uid) || queue::multikueue::made_for(w, job));
    let collectors = collector_workloads(kueue, job, &namespace, &uid);
    if !queued {
        // Left from when the job was in a queue: they go (`queue::attach`).
        let left = workload.is_some() || !collectors.is_empty();
        return left.then(|| Queue::Kueue {
            workload,
            flavors: BTreeMap::new(),
            priority: None,
            collectors,
            collector_class: None,
        });
    }
    let flavors: BTreeMap<String, serde_json::Value> =
        kueue.flavors.state().iter().map(|f| (f.name_any(), f.data["spec"].clone())).collect();
    let class = job.spec.priority_class_name.as_deref().filter(|c| !c.is_empty());
    let priority =
        class.and_then(|c| kueue.priorities.get(&ObjectRef::new(c)).map(|p| (c.to_owned(), p.value.unwrap_or(0))));
    let collector_class = job.spec.collector.as_ref().and_then(|c| c.workload_priority_class_name.as_deref());
    let collector_class = collector_class
        .and_then(|c| kueue.workload_priorities.get(&ObjectRef::new_with(c, queue::workload_priority_kind())))
        .map(|class| class.data["value"].as_i64().unwrap_or(0).clamp(i32::MIN.into(), i32::MAX.into()) as i32);
    Some(Queue::Kueue { workload, flavors, priority, collectors, collector_class })
}

/// The Workloads of `job`'s collectors above its core (`spec.collector.minReplicas`), by index:
/// looked up by name, each index a job may have, as a collector scaled away leaves its Workload
/// to be deleted.
fn collector_workloads(kueue: &Kueue, job: &DIJob, namespace: &str, uid: &str) -> BTreeMap<u32, serde_json::Value> {
    let Some(min) = job.spec.collector.as_ref().and_then(|c| c.core_collectors()) else { return BTreeMap::new() };
    (min..di_api::contract::MAX_REPLICAS as u32)
        .filter_map(|index| {
            let name = queue::collectors::workload_name(job, index);
            let found = kueue.workloads.get(&ObjectRef::new_with(&name, queue::workload_kind()).within(namespace))?;
            let ours = found.owner_references().iter().any(|o| o.controller == Some(true) && o.uid == uid);
            ours.then(|| (index, serde_json::to_value(&*found).unwrap_or_default()))
        })
        .collect()
}

/// Workloads of `namespace`, through a dynamic client.
fn api(ctx: &Context, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(ctx.client.clone(), namespace, &queue::workload_kind())
}

/// Makes the job's Workload; one that exists already is the job's (its name carries the job's
/// UID).
pub async fn create(ctx: &Arc<Context>, job: &DIJob, workload: &serde_json::Value) -> Result<(), Error> {
    let api = api(ctx, &job.namespace().unwrap_or_default());
    let object: DynamicObject = serde_json::from_value(workload.clone())
        .map_err(kube::Error::SerdeError)
        .map_err(|source| Error::Create { kind: "Workload".into(), name: queue::workload_name(job), source })?;
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => Ok(()),
        Err(e) if is_status(&e, 409) => Ok(()),
        Err(source) => Err(Error::Create { kind: "Workload".into(), name: object.name_any(), source }),
    }
}

/// Deletes the Workload with this UID (not a newer one of the same name).
pub async fn delete(ctx: &Arc<Context>, job: &DIJob, name: &str, uid: &str, version: &str) -> Result<(), Error> {
    let api = api(ctx, &job.namespace().unwrap_or_default());
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid.to_owned()),
            resource_version: Some(version.to_owned()).filter(|v| !v.is_empty()),
        }),
        ..Default::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(()),
        Err(e) if is_status(&e, 404) || is_status(&e, 409) => Ok(()),
        Err(source) => Err(Error::Delete { kind: "Workload".into(), name: name.to_owned(), source }),
    }
}

/// Takes the Workload MultiKueue made for this copy of a dispatched job as the job's own, at the
/// resourceVersion read (one changed since is left to the next pass).
pub async fn adopt(
    ctx: &Arc<Context>,
    job: &DIJob,
    name: &str,
    version: &str,
    owner: &k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
) -> Result<(), Error> {
    let api = api(ctx, &job.namespace().unwrap_or_default());
    let uid = job.uid().unwrap_or_default();
    let patch = serde_json::json!({"metadata": {
        "resourceVersion": version, "ownerReferences": [owner], "labels": {queue::JOB_UID_LABEL: uid},
    }});
    match api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => {
            info!(job = %job.name_any(), workload = name, "adopted the Workload MultiKueue made for the job");
            Ok(())
        }
        Err(e) if is_status(&e, 409) || is_status(&e, 404) => Ok(()),
        Err(source) => Err(Error::WriteWorkload { name: name.to_owned(), source }),
    }
}

/// Merges `spec` (whether the Workload is active, its priority) into one of the job's
/// Workloads, at the resourceVersion read: a Workload changed since is left to the next pass.
pub async fn patch_spec(
    ctx: &Arc<Context>,
    job: &DIJob,
    name: &str,
    version: &str,
    spec: serde_json::Value,
) -> Result<(), Error> {
    let api = api(ctx, &job.namespace().unwrap_or_default());
    let patch = serde_json::json!({"metadata": {"resourceVersion": version}, "spec": spec});
    match api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => Ok(()),
        Err(e) if is_status(&e, 409) || is_status(&e, 404) => Ok(()),
        Err(source) => Err(Error::WriteWorkload { name: name.to_owned(), source }),
    }
}

/// Writes the status the orchestrator reports to Kueue over the stored one, at the
/// resourceVersion it was read at: a Workload Kueue has changed since is left to the next pass,
/// which reports again on what Kueue wrote.
pub async fn write_status(ctx: &Arc<Context>, job: &DIJob, written: &serde_json::Value) -> Result<(), Error> {
    let name = written["metadata"]["name"].as_str().unwrap_or_default().to_owned();
    let namespace = written["metadata"]["namespace"].as_str().unwrap_or_default();
    let api = api(ctx, namespace);
    let object: DynamicObject = serde_json::from_value(written.clone())
        .map_err(kube::Error::SerdeError)
        .map_err(|source| Error::WriteWorkload { name: name.clone(), source })?;
    match api.replace_status(&name, &PostParams::default(), &object).await {
        Ok(_) => Ok(()),
        Err(e) if is_status(&e, 409) || is_status(&e, 404) => Ok(()),
        // Refused (RBAC, Kueue's checks): said on the job, and the pass goes on to its pods,
        // which a report must not hold up; the next pass reports again.
        Err(source) => {
            let error = Error::WriteWorkload { name, source };
            warn!(job = %job.name_any(), "{error}");
            crate::context::publish_on(ctx, job, EventType::Warning, &error.kind(), "Report", Some(error.to_string()));
            Ok(())
        }
    }
}
