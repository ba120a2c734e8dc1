//! What the mutating webhook knows of Kueue's queues: which LocalQueues send their Workloads
//! through MultiKueue (their ClusterQueue has an AdmissionCheck of MultiKueue's controller), kept
//! from watches of LocalQueues, ClusterQueues and AdmissionChecks. A job submitted to such a
//! queue is given `spec.managedBy: kueue.x-k8s.io/multikueue`, as Kueue's webhook gives its own
//! kinds: without it MultiKueue refuses to dispatch the job. The orchestrator serves its webhooks
//! once the caches are listed; a queue made since and not seen yet gives nothing (the job then
//! says why it waits, in Kueue's words).

use di_api::contract::kueue::resource;
use futures::StreamExt;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use serde_json::Value;

/// The controller name of MultiKueue's AdmissionChecks.
pub const MULTIKUEUE_CONTROLLER: &str = "kueue.x-k8s.io/multikueue";

/// The caches of LocalQueues (of the orchestrator's namespace, or all), ClusterQueues and
/// AdmissionChecks.
#[derive(Clone)]
pub struct Queues {
    local: Store<DynamicObject>,
    cluster: Store<DynamicObject>,
    checks: Store<DynamicObject>,
}

impl Queues {
    /// The caches, and the watches that fill them (run for as long as the webhook serves).
    pub fn watch(client: &Client, namespace: Option<&str>) -> (Queues, impl Future<Output = ()> + Send + 'static) {
        let local_kind = resource("LocalQueue", "localqueues");
        let local_api: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &local_kind),
            None => Api::all_with(client.clone(), &local_kind),
        };
        let (local, local_watch) = cache(local_api, local_kind);
        let cluster_kind = resource("ClusterQueue", "clusterqueues");
        let (cluster, cluster_watch) = cache(Api::all_with(client.clone(), &cluster_kind), cluster_kind);
        let check_kind = resource("AdmissionCheck", "admissionchecks");
        let (checks, check_watch) = cache(Api::all_with(client.clone(), &check_kind), check_kind);
        let watches = async move {
            futures::join!(local_watch, cluster_watch, check_watch);
        };
        (Queues { local, cluster, checks }, watches)
    }

    /// Returns once each cache has been listed (a watch refused, by RBAC say, never is).
    pub async fn listed(&self) {
        let _ = futures::join!(
            self.local.wait_until_ready(),
            self.cluster.wait_until_ready(),
            self.checks.wait_until_ready()
        );
    }

    /// Caches filled by hand, for tests.
    pub fn of(local: &[Value], cluster: &[Value], checks: &[Value]) -> Queues {
        let fill = |objects: &[Value], kind: ApiResource| {
            let mut writer = reflector::store::Writer::new(kind);
            for object in objects {
                let object: DynamicObject = serde_json::from_value(object.clone()).expect("a Kueue object");
                writer.apply_watcher_event(&watcher::Event::Apply(object));
            }
            writer.as_reader()
        };
        Queues {
            local: fill(local, resource("LocalQueue", "localqueues")),
            cluster: fill(cluster, resource("ClusterQueue", "clusterqueues")),
            checks: fill(checks, resource("AdmissionCheck", "admissionchecks")),
        }
    }

    /// Whether LocalQueue `queue` of `namespace` sends its Workloads through MultiKueue, as far
    /// as the caches know.
    pub fn dispatches(&self, namespace: &str, queue: &str) -> bool {
        let local = ObjectRef::new_with(queue, resource("LocalQueue", "localqueues")).within(namespace);
        let Some(local) = self.local.get(&local) else { return false };
        let Some(cluster_queue) = local.data["spec"]["clusterQueue"].as_str() else { return false };
        let cluster = ObjectRef::new_with(cluster_queue, resource("ClusterQueue", "clusterqueues"));
        let Some(cluster) = self.cluster.get(&cluster) else { return false };
        checks_of(&cluster.data).into_iter().any(|name| {
            let check = ObjectRef::new_with(name, resource("AdmissionCheck", "admissionchecks"));
            self.checks.get(&check).is_some_and(|c| c.data["spec"]["controllerName"] == MULTIKUEUE_CONTROLLER)
        })
    }
}

/// The AdmissionChecks a ClusterQueue's Workloads go through (of every flavor or some).
fn checks_of(cluster_queue: &Value) -> Vec<&str> {
    let listed = cluster_queue["spec"]["admissionChecksStrategy"]["admissionChecks"].as_array();
    listed.into_iter().flatten().filter_map(|c| c["name"].as_str()).collect()
}

/// A cache of what `api` lists, and the watch that fills it.
fn cache(
    api: Api<DynamicObject>,
    kind: ApiResource,
) -> (Store<DynamicObject>, impl Future<Output = ()> + Send + 'static) {
    let writer = reflector::store::Writer::new(kind);
    let store = writer.as_reader();
    let watch = watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(|o| o.metadata.managed_fields = None)
        .reflect(writer)
        .for_each(|_| std::future::ready(()));
    (store, watch)
}
