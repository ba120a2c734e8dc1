//! Several clusters for the MultiKueue scenarios, each a control plane of its own with Kueue
//! beside it: a manager, whose Kueue dispatches DIJobs (`multiKueue.externalFrameworks`), and
//! workers, which it reaches as the ServiceAccount of manifests/kueue/multikueue-worker.yaml,
//! through kubeconfigs in Secrets, inline as Kueue requires (no file paths, no token files).
//! Control-plane tier only: kind is one cluster.

use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::Api;
use kube::api::{DynamicObject, ObjectMeta, PostParams};
use kube::runtime::watcher;
use serde_json::json;

use super::turns::{Turn, turn};
use super::{EXTERNAL_FRAMEWORKS, Share, obtain, resource, start_configured};
use crate::binaries::{self, Unavailable};
use crate::cluster::{TestCluster, not_applicable, skip, until_watched};
use crate::controlplane::{ControlPlane, Options};
use crate::nodes::real_nodes;

/// The AdmissionCheck on the manager that sends a ClusterQueue's Workloads to the workers.
pub const CHECK: &str = "multikueue";
/// Kueue's own namespace, where it reads the workers' kubeconfigs.
const KUEUE_NAMESPACE: &str = "kueue-system";

/// One cluster of the set: its name (a worker's is its MultiKueueCluster's), its control plane
/// and a client.
pub struct Member {
    pub name: &'static str,
    plane: ControlPlane,
    pub cluster: TestCluster,
}

/// A manager and its workers, the scenario's for as long as it holds this.
pub struct Clusters {
    pub manager: Member,
    pub workers: Vec<Member>,
    _turn: Turn,
}

impl Clusters {
    /// A manager and `workers`, MultiKueue on the manager connected to each (its clusters
    /// Active); `None` after saying why there are none.
    pub async fn start(workers: &[&'static str]) -> Option<Clusters> {
        if real_nodes() {
            not_applicable("MultiKueue needs several clusters: the control-plane tier starts them, kind has one");
            return None;
        }
        let root = binaries::repo_root();
        let (planes, kueue) = match (binaries::obtain(&root).unwrap(), obtain(&root).unwrap()) {
            (Ok(planes), Ok(kueue)) => (planes, kueue),
            (Err(Unavailable(why)), _) | (_, Err(Unavailable(why))) => {
                skip(&format!("MultiKueue's scenarios need control planes and Kueue: {why}"));
                return None;
            }
        };
        let turn = turn(Share::Alone).await;
        let runs = root.join(".cache/controlplane/runs");
        let start = |name: &'static str, config: serde_json::Value| {
            let (planes, runs, kueue) = (&planes, &runs, &kueue);
            async move {
                let options = Options { name: Some(name), ..Options::default() };
                let mut plane = Box::pin(ControlPlane::start_with(planes, runs, &options)).await.unwrap();
                let cluster =
                    TestCluster { client: plane.client().await.unwrap(), kubeconfig: plane.kubeconfig.clone() };
                // MultiKueue watches DIJobs on each worker: its CRD comes first.
                Box::pin(cluster.install_crds()).await;
                start_configured(&mut plane, &cluster, (&kueue.0, &kueue.1), config).await.unwrap();
                Member { name, plane, cluster }
            }
        };
        let mut members = vec![];
        for name in workers {
            members.push(Box::pin(start(name, json!({}))).await);
        }
        let frameworks: Vec<_> = EXTERNAL_FRAMEWORKS.iter().map(|f| json!({"name": f})).collect();
        // Removed worker copies are collected sooner than the default minute.
        let config = json!({"multiKueue": {"externalFrameworks": frameworks, "gcInterval": "10s"}});
        let manager = Box::pin(start("manager", config)).await;
        for worker in &members {
            connect(&manager.cluster, worker).await;
        }
        configure(&manager.cluster, workers).await;
        Some(Clusters { manager, workers: members, _turn: turn })
    }

    /// The worker named `name`.
    pub fn worker(&self, name: &str) -> &Member {
        self.workers.iter().find(|w| w.name == name).unwrap_or_else(|| panic!("no worker {name}"))
    }

    /// Stops every cluster.
    pub async fn stop(self) {
        for member in self.workers.into_iter().chain([self.manager]) {
            member.plane.stop().await;
        }
    }
}

/// A kubeconfig for `worker` as MultiKueue takes it: the worker's CA inline and a token of the
/// ServiceAccount manifests/kueue/multikueue-worker.yaml grants what MultiKueue does there.
async fn worker_kubeconfig(worker: &TestCluster) -> String {
    worker.apply_file("manifests/kueue/multikueue-worker.yaml").await;
    let accounts: Api<ServiceAccount> = Api::namespaced(worker.client.clone(), KUEUE_NAMESPACE);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec { expiration_seconds: Some(3600), ..Default::default() }),
        ..Default::default()
    };
    let token = accounts.create_token_request("multikueue", &PostParams::default(), &request).await.unwrap();
    let token = token.status.expect("a token").token;
    let admin: serde_json::Value = serde_yaml::from_str(&std::fs::read_to_string(&worker.kubeconfig).unwrap()).unwrap();
    let cluster = &admin["clusters"][0]["cluster"];
    let ca = std::fs::read(cluster["certificate-authority"].as_str().expect("a CA file")).unwrap();
    let inline = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "worker", "cluster": {
            "server": cluster["server"], "certificate-authority-data": serde_json::to_value(ByteString(ca)).unwrap(),
        }}],
        "users": [{"name": "multikueue", "user": {"token": token}}],
        "contexts": [{"name": "worker", "context": {"cluster": "worker", "user": "multikueue"}}],
        "current-context": "worker",
    });
    serde_yaml::to_string(&inline).unwrap()
}

async fn create(client: &kube::Client, kind: &str, plural: &str, object: serde_json::Value) {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource(kind, plural));
    let object: DynamicObject = serde_json::from_value(object).unwrap();
    api.create(&PostParams::default(), &object).await.unwrap_or_else(|e| panic!("creating a {kind}: {e}"));
}

/// Tells the manager's MultiKueue of `worker`: its kubeconfig in a Secret, a MultiKueueCluster.
async fn connect(manager: &TestCluster, worker: &Member) {
    let secrets: Api<Secret> = Api::namespaced(manager.client.clone(), KUEUE_NAMESPACE);
    let kubeconfig = worker_kubeconfig(&worker.cluster).await;
    let secret = Secret {
        metadata: ObjectMeta { name: Some(worker.name.into()), ..Default::default() },
        data: Some([("kubeconfig".to_string(), ByteString(kubeconfig.into_bytes()))].into()),
        ..Default::default()
    };
    secrets.create(&PostParams::default(), &secret).await.unwrap();
    let cluster = json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueCluster", "metadata": {"name": worker.name},
        "spec": {"clusterSource": {"kubeConfig": {"location": worker.name, "locationType": "Secret"}}},
    });
    create(&manager.client, "MultiKueueCluster", "multikueueclusters", cluster).await;
}

/// The manager's MultiKueueConfig of `workers` and the AdmissionCheck [`CHECK`] that uses it;
/// returns once every worker is connected.
async fn configure(manager: &TestCluster, workers: &[&str]) {
    let config = json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueConfig", "metadata": {"name": "workers"},
        "spec": {"clusters": workers},
    });
    create(&manager.client, "MultiKueueConfig", "multikueueconfigs", config).await;
    let check = json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": CHECK},
        "spec": {"controllerName": "kueue.x-k8s.io/multikueue",
                 "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "workers"}},
    });
    create(&manager.client, "AdmissionCheck", "admissionchecks", check).await;
    let kind = resource("MultiKueueCluster", "multikueueclusters");
    let api: Api<DynamicObject> = Api::all_with(manager.client.clone(), &kind);
    let active = |c: &DynamicObject| {
        c.data["status"]["conditions"]
            .as_array()
            .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Active" && c["status"] == "True"))
    };
    let what = "MultiKueue connected to every worker";
    until_watched(api, watcher::Config::default(), kind, Duration::from_secs(60), what, |all| {
        (all.len() == workers.len() && all.iter().all(|c| active(c))).then_some(())
    })
    .await;
}
