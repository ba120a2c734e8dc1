//! One queue scenario's Kueue objects.

use di_client::is_status;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use super::{MANAGED_NAMESPACES, resource};

/// One scenario's queue: a ResourceFlavor and a ClusterQueue named after its namespace, the
/// ClusterQueue's namespaceSelector that namespace alone, and a LocalQueue in it; the namespace
/// labelled as one whose jobs Kueue manages ([`MANAGED_NAMESPACES`]). On kind every
/// scenario shares the cluster: its cluster-scoped objects are its own, and no scenario's queue
/// admits another's jobs. [`TestQueue::delete`] removes them.
pub struct TestQueue {
    client: Client,
    name: String,
}

impl TestQueue {
    /// A queue `local` in `ns` of `quota` (resource, quantity), whose workloads preempt
    /// lower-priority ones.
    pub async fn create(client: &Client, ns: &str, local: &str, quota: &[(&str, &str)]) -> TestQueue {
        Self::flavored(client, ns, local, quota, json!({}), &[]).await
    }

    /// As [`TestQueue::create`], its flavor's nodes those labelled `node_labels`, and placing pods
    /// by topology (Kueue's TAS) when `levels` are given: a Topology of the scenario's name whose
    /// levels are those node labels, broadest first.
    pub async fn flavored(
        client: &Client,
        ns: &str,
        local: &str,
        quota: &[(&str, &str)],
        node_labels: serde_json::Value,
        levels: &[&str],
    ) -> TestQueue {
        Self::made(client, ns, (local, quota), node_labels, levels, None).await
    }

    /// As [`TestQueue::create`], its Workloads admitted only once AdmissionCheck `check` says so
    /// (on a MultiKueue manager: once a worker has admitted them).
    pub async fn checked(client: &Client, ns: &str, local: &str, quota: &[(&str, &str)], check: &str) -> TestQueue {
        Self::made(client, ns, (local, quota), json!({}), &[], Some(check)).await
    }

    async fn made(
        client: &Client,
        ns: &str,
        (local, quota): (&str, &[(&str, &str)]),
        node_labels: serde_json::Value,
        levels: &[&str],
        check: Option<&str>,
    ) -> TestQueue {
        let queue = TestQueue { client: client.clone(), name: ns.to_owned() };
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let managed = json!({"metadata": {"labels": {MANAGED_NAMESPACES.0: MANAGED_NAMESPACES.1}}});
        namespaces.patch(ns, &PatchParams::default(), &Patch::Merge(&managed)).await.expect("labelling the namespace");
        let mut flavor = json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": queue.name},
            "spec": {"nodeLabels": node_labels},
        });
        if !levels.is_empty() {
            let levels: Vec<_> = levels.iter().map(|l| json!({"nodeLabel": l})).collect();
            let topology = json!({
                "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology", "metadata": {"name": queue.name},
                "spec": {"levels": levels},
            });
            queue.create_object("Topology", "topologies", None, topology).await;
            flavor["spec"]["topologyName"] = json!(queue.name);
        }
        queue.create_object("ResourceFlavor", "resourceflavors", None, flavor).await;
        let resources: Vec<_> = quota.iter().map(|(r, q)| json!({"name": r, "nominalQuota": q})).collect();
        let mut cluster_queue = json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": queue.name},
            "spec": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                "preemption": {"withinClusterQueue": "LowerPriority"},
                "resourceGroups": [{
                    "coveredResources": quota.iter().map(|(r, _)| *r).collect::<Vec<_>>(),
                    "flavors": [{"name": queue.name, "resources": resources}],
                }],
            },
        });
        if let Some(check) = check {
            cluster_queue["spec"]["admissionChecksStrategy"] = json!({"admissionChecks": [{"name": check}]});
        }
        queue.create_object("ClusterQueue", "clusterqueues", None, cluster_queue).await;
        let local_queue = json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": local},
            "spec": {"clusterQueue": queue.name},
        });
        queue.create_object("LocalQueue", "localqueues", Some(ns), local_queue).await;
        queue
    }

    async fn create_object(&self, kind: &str, plural: &str, ns: Option<&str>, object: serde_json::Value) {
        let api = self.api(kind, plural, ns);
        let object: DynamicObject = serde_json::from_value(object).expect("a Kueue object");
        api.create(&PostParams::default(), &object).await.unwrap_or_else(|e| panic!("creating a {kind}: {e}"));
    }

    fn api(&self, kind: &str, plural: &str, ns: Option<&str>) -> Api<DynamicObject> {
        let resource = resource(kind, plural);
        match ns {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        }
    }

    /// The ClusterQueue's name.
    pub fn cluster_queue(&self) -> &str {
        &self.name
    }

    /// Deletes the ClusterQueue, the ResourceFlavor and any Topology (the LocalQueue goes with the
    /// namespace).
    /// Not waited for: Kueue keeps each until nothing uses it.
    pub async fn delete(self) {
        let kinds =
            [("ClusterQueue", "clusterqueues"), ("ResourceFlavor", "resourceflavors"), ("Topology", "topologies")];
        for (kind, plural) in kinds {
            match self.api(kind, plural, None).delete(&self.name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if is_status(&e, 404) => {}
                Err(e) => panic!("deleting {kind} {}: {e}", self.name),
            }
        }
    }
}

/// Two teams' ClusterQueues in one cohort, `<ns>-a` and `<ns>-b` of one flavor `<ns>`, with
/// LocalQueues `team-a` and `team-b` in `ns`: each may borrow what the other leaves idle and
/// reclaims what it lent when its own jobs come. [`Cohort::delete`] removes them.
pub struct Cohort {
    client: Client,
    name: String,
}

impl Cohort {
    /// Team a's quota `a` and team b's `b` (resource, quantity).
    pub async fn create(client: &Client, ns: &str, a: &[(&str, &str)], b: &[(&str, &str)]) -> Cohort {
        let cohort = Cohort { client: client.clone(), name: ns.to_owned() };
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let managed = json!({"metadata": {"labels": {MANAGED_NAMESPACES.0: MANAGED_NAMESPACES.1}}});
        namespaces.patch(ns, &PatchParams::default(), &Patch::Merge(&managed)).await.expect("labelling the namespace");
        let flavor =
            json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": ns}});
        cohort.make("ResourceFlavor", "resourceflavors", None, flavor).await;
        for (team, quota) in [("a", a), ("b", b)] {
            let resources: Vec<_> = quota.iter().map(|(r, q)| json!({"name": r, "nominalQuota": q})).collect();
            let cluster_queue = json!({
                "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": format!("{ns}-{team}")},
                "spec": {
                    "cohortName": ns,
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                    "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
                    "resourceGroups": [{
                        "coveredResources": quota.iter().map(|(r, _)| *r).collect::<Vec<_>>(),
                        "flavors": [{"name": ns, "resources": resources}],
                    }],
                },
            });
            cohort.make("ClusterQueue", "clusterqueues", None, cluster_queue).await;
            let local_queue = json!({
                "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": format!("team-{team}")},
                "spec": {"clusterQueue": format!("{ns}-{team}")},
            });
            cohort.make("LocalQueue", "localqueues", Some(ns), local_queue).await;
        }
        cohort
    }

    async fn make(&self, kind: &str, plural: &str, ns: Option<&str>, object: serde_json::Value) {
        let resource = resource(kind, plural);
        let api: Api<DynamicObject> = match ns {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        };
        let object: DynamicObject = serde_json::from_value(object).expect("a Kueue object");
        api.create(&PostParams::default(), &object).await.unwrap_or_else(|e| panic!("creating a {kind}: {e}"));
    }

    /// Deletes both ClusterQueues and the flavor (not waited for).
    pub async fn delete(self) {
        let queues: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource("ClusterQueue", "clusterqueues"));
        let flavors: Api<DynamicObject> =
            Api::all_with(self.client.clone(), &resource("ResourceFlavor", "resourceflavors"));
        for (api, name) in [
            (&queues, format!("{}-a", self.name)),
            (&queues, format!("{}-b", self.name)),
            (&flavors, self.name.clone()),
        ] {
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if is_status(&e, 404) => {}
                Err(e) => panic!("deleting {name}: {e}"),
            }
        }
    }
}
