//! What every pass shares besides its job: the caches, the settings, the pacing of writes and
//! events, and the bookkeeping of writes the caches have not shown yet. The reconciler's edge
//! (`reconciler`) builds it; passes (`pass`, `execute`, `podgroups`) read it.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use di_api::AggregatorConfig;
use di_api::DIJob;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::DynamicObject;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::Store;
use kube::{Client, Resource, ResourceExt};

use crate::created::Created;
use crate::desired::Settings;
use crate::error::Retries;
use crate::index::JobIndex;
use crate::metrics::Metrics;
use crate::pace::Pacer;
use crate::restarts::Marks;
use crate::view::{PodView, ServiceView};

/// Field manager of everything the reconciler writes.
pub const MANAGER: &str = "di-orchestrator";

/// Everything a pass needs besides the job.
pub struct Context {
    pub client: Client,
    pub pods: Store<PodView>,
    pub services: Store<ServiceView>,
    /// Every AggregatorConfig.
    pub configs: Store<AggregatorConfig>,
    /// Which cached pods and services are whose.
    pub pod_index: JobIndex,
    pub service_index: JobIndex,
    pub settings: Settings,
    /// First delay before a failed replica is replaced; doubles with each replacement.
    pub restart_backoff: Duration,
    pub events: crate::events::Events,
    pub metrics: Arc<Metrics>,
    pub pacer: Pacer,
    /// Restart marks written and not yet seen in the service cache.
    pub marks: Arc<Marks>,
    /// Pods and services created and not yet seen in the caches.
    pub created: Created,
    /// Failed passes in a row, per job.
    pub retries: Retries,
    /// Namespaces whose shared replica identity exists.
    pub namespaces: Namespaces,
    /// How many creates go out at once, per job and all jobs together.
    pub creates: crate::creates::Limits,
    /// The Workloads and ResourceFlavors, where the cluster serves Kueue.
    pub kueue: Option<Kueue>,
    /// The starting jobs, whose pods' progress may wait for a pass (`triggers`).
    pub starting: crate::triggers::Starting,
    /// Passes that wait (`later`).
    pub later: crate::later::Later,
    /// Namespaces being deleted, whose jobs go with them.
    pub teardown: crate::teardown::Teardown,
}

/// The caches of a cluster that serves Kueue (filled by `workloads::watch`).
pub struct Kueue {
    /// The Workloads of this orchestrator's jobs.
    pub workloads: Store<DynamicObject>,
    /// Every ResourceFlavor.
    pub flavors: Store<DynamicObject>,
    /// Every PriorityClass, whose value a Workload carries.
    pub priorities: Store<PriorityClass>,
    /// Every WorkloadPriorityClass, whose value collector Workloads carry
    /// (`spec.collector.workloadPriorityClassName`).
    pub workload_priorities: Store<DynamicObject>,
}

/// Namespaces whose shared ServiceAccount and RoleBinding this process made or found
/// (`identity`).
#[derive(Default)]
pub struct Namespaces(Mutex<HashSet<String>>);

impl Namespaces {
    pub fn ready(&self, namespace: &str) -> bool {
        self.0.lock().expect("namespaces lock").contains(namespace)
    }

    pub fn mark_ready(&self, namespace: &str) {
        self.0.lock().expect("namespaces lock").insert(namespace.to_owned());
    }

    pub fn forget(&self, namespace: &str) {
        self.0.lock().expect("namespaces lock").remove(namespace);
    }
}

/// Publishes an event on the job without holding up the pass: events inform, they do not gate.
pub(crate) fn publish(
    ctx: &Arc<Context>,
    job: &ObjectReference,
    name: &str,
    type_: EventType,
    reason: &str,
    action: &str,
    note: Option<String>,
) {
    debug_assert!(
        di_core::reasons::event_listed(reason),
        "event reason {reason} is not in docs/guide/troubleshooting.md: add its row"
    );
    let event = Event { type_, reason: reason.into(), note, action: action.into(), secondary: None };
    ctx.events.send(event, job.clone(), name);
}

/// Publishes an event on `job`.
pub(crate) fn publish_on(
    ctx: &Arc<Context>,
    job: &DIJob,
    type_: EventType,
    reason: &str,
    action: &str,
    note: Option<String>,
) {
    publish(ctx, &job.object_ref(&()), &job.name_any(), type_, reason, action, note);
}
