//! One test's world: a namespace of its own, simulated nodes, and an orchestrator for it, with
//! the waits every scenario needs (on conditions, never on fixed sleeps).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use di_api::contract::labels;
use di_api::{DIJob, Phase};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{ListParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::cluster::{TestCluster, connect, kubectl_said, until_watched, within};
use crate::nodes::Nodes;
use crate::orchestrator::Orchestrator;

pub use crate::cluster::WAIT;

pub struct Scenario {
    pub cluster: TestCluster,
    pub ns: String,
    pub jobs: Api<DIJob>,
    pub pods: Api<Pod>,
    pub services: Api<Service>,
    pub nodes: Nodes,
    pub orchestrator: Orchestrator,
}

impl Scenario {
    pub async fn new(hint: &str) -> Scenario {
        Box::pin(Self::with_args(hint, &[])).await
    }

    /// A scenario whose orchestrator runs with `args` besides the usual (only local
    /// orchestrators take arguments: on kind the deployed one runs with its own).
    pub async fn with_args(hint: &str, args: &[&str]) -> Scenario {
        // Boxed: the setup's future is large, and test threads have small stacks.
        let cluster = Box::pin(connect()).await;
        Box::pin(Self::on(cluster, hint, args)).await
    }

    /// A scenario on `cluster` (a control plane a test started itself), as [`Scenario::with_args`].
    pub async fn on(cluster: TestCluster, hint: &str, args: &[&str]) -> Scenario {
        Box::pin(cluster.install_crds()).await;
        let ns = Box::pin(cluster.namespace(hint)).await;
        Box::pin(Self::within(cluster, ns, args)).await
    }

    /// A scenario in namespace `ns` of `cluster`, which exists (one name on several clusters).
    pub async fn within(cluster: TestCluster, ns: String, args: &[&str]) -> Scenario {
        Box::pin(cluster.install_crds()).await;
        let nodes = Nodes::start(cluster.client.clone(), &ns);
        let orchestrator = Box::pin(Orchestrator::start(&cluster, &ns, args)).await;
        Scenario {
            jobs: Api::namespaced(cluster.client.clone(), &ns),
            pods: Api::namespaced(cluster.client.clone(), &ns),
            services: Api::namespaced(cluster.client.clone(), &ns),
            cluster,
            ns,
            nodes,
            orchestrator,
        }
    }

    pub async fn submit(&self, name: &str, collectors: i32, learners: i32, extra: serde_json::Value) -> DIJob {
        let job = self.job(name, collectors, learners, extra);
        self.jobs.create(&PostParams::default(), &job).await.expect("job accepted")
    }

    /// The role job [`Scenario::submit`] submits, not yet submitted.
    pub fn job(&self, name: &str, collectors: i32, learners: i32, extra: serde_json::Value) -> DIJob {
        let pod = self.nodes.pod_spec();
        let mut job = json!({
            "apiVersion": "diengine.opendilab.org/v1alpha1",
            "kind": "DIJob",
            "metadata": {"name": name},
            "spec": {
                "coordinator": {"template": {"spec": pod}},
                "collector": {"replicas": collectors, "template": {"spec": pod}},
                "learner": {"replicas": learners, "template": {"spec": pod}},
            }
        });
        merge(&mut job["spec"], extra);
        serde_json::from_value(job).unwrap()
    }

    /// Waits, on a watch of its pods, until `job` has `count` running pods (not being deleted),
    /// at most `timeout`; their names.
    pub async fn until_running_pods(&self, job: &str, count: usize, timeout: Duration) -> BTreeSet<String> {
        let config = watcher::Config::default().labels(&format!("{}={job}", labels::JOB_NAME));
        let what = format!("job {job} to have {count} running pods");
        until_watched(self.pods.clone(), config, (), timeout, &what, |all: &[Arc<Pod>]| {
            let running: BTreeSet<String> = all
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter(|p| p.status.as_ref().and_then(|st| st.phase.as_deref()) == Some("Running"))
                .map(|p| p.name_any())
                .collect();
            (running.len() == count).then_some(running)
        })
        .await
    }

    pub async fn wait_phase(&self, name: &str, phase: Phase) -> DIJob {
        let what = format!("job {name} to be {phase:?}");
        let cond = move |job: Option<&DIJob>| job.and_then(|j| j.status.as_ref()).and_then(|s| s.phase) == Some(phase);
        let job = Box::pin(within(WAIT, &what, await_condition(self.jobs.clone(), name, cond))).await.unwrap();
        job.unwrap_or_else(|| {
            panic!("job {name} vanished while waiting; orchestrator log:\n{}", self.orchestrator.log())
        })
    }

    /// Waits until the API server holds `pod` in `phase`: on real nodes a container's exit reaches
    /// the API server in its own time, so a test that orders two exits waits for the first.
    pub async fn wait_pod_phase(&self, pod: &str, phase: &str) {
        let what = format!("pod {pod} to be {phase}");
        let cond = move |p: Option<&Pod>| p.and_then(|p| p.status.as_ref()?.phase.as_deref()) == Some(phase);
        Box::pin(within(WAIT, &what, await_condition(self.pods.clone(), pod, cond))).await.unwrap();
    }

    /// Waits until the job's pods are exactly `names` (terminating ones left out), returning them.
    pub async fn wait_pods(&self, job: &str, names: &[String]) -> Vec<Pod> {
        wait_for_names(&self.pods, job, names, true).await
    }

    /// Waits until the job's services are exactly `names`.
    pub async fn wait_services(&self, job: &str, names: &[String]) {
        wait_for_names(&self.services, job, names, false).await;
    }
}

impl Drop for Scenario {
    /// Every scenario checks that no running pod was force-deleted: on a real node its container
    /// could still run beside the replacement of the same name.
    fn drop(&mut self) {
        if std::thread::panicking() {
            // The failure's story is in the orchestrator's log: its last lines go with it.
            let tail = crate::logs::last_lines(&self.orchestrator.log(), 150);
            eprintln!("orchestrator log, last lines:\n{tail}");
            return;
        }
        let forced = self.nodes.force_deleted();
        assert!(forced.is_empty(), "running pods were force-deleted: {forced:?}");
        // A whole suite shares one real node: its pod limit (110) and its cores. A scenario that
        // passed takes its pods with it; a failed one stays for kubectl to look at.
        if crate::nodes::real_nodes() {
            kubectl_said(&self.cluster.kubeconfig, &["delete", "namespace", &self.ns, "--wait=false"]);
        }
    }
}

/// Polls the job's objects of one kind until their names are exactly `names`.
async fn wait_for_names<K>(api: &Api<K>, job: &str, names: &[String], skip_terminating: bool) -> Vec<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + k8s_openapi::serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    let mut want = names.to_vec();
    want.sort();
    let params = ListParams::default().labels(&format!("{}={job}", labels::JOB_NAME));
    let api = api.clone();
    within(WAIT, &format!("{}s {want:?}", K::kind(&()).to_lowercase()), async move {
        loop {
            let list = api.list(&params).await.unwrap().items;
            let live: Vec<K> =
                list.into_iter().filter(|o| !skip_terminating || o.meta().deletion_timestamp.is_none()).collect();
            let mut got: Vec<String> = live.iter().map(|o| o.name_any()).collect();
            got.sort();
            if got == want {
                return live;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
}

pub fn merge(target: &mut serde_json::Value, extra: serde_json::Value) {
    if let (Some(t), serde_json::Value::Object(e)) = (target.as_object_mut(), extra) {
        for (k, v) in e {
            match t.get_mut(&k) {
                Some(existing) if existing.is_object() && v.is_object() => merge(existing, v),
                _ => {
                    t.insert(k, v);
                }
            }
        }
    }
}

pub fn names(job: &str, list: &[&str]) -> Vec<String> {
    list.iter().map(|n| format!("{job}-{n}")).collect()
}
