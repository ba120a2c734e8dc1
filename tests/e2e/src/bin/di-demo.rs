//! `make demo`: the main job. Installs the CRDs and the orchestrator's identity, runs the
//! orchestrator, submits `manifests/examples/demo.yaml` and follows it until it is Running with
//! every replica ready.
//!
//! It uses the cluster the kubeconfig names (`KUBECONFIG`, else `~/.kube/config`) when one
//! answers; otherwise it starts the local control plane, whose simulated nodes run the pods.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use di_api::{DIJob, Phase};
use di_e2e::binaries::{self, Unavailable};
use di_e2e::cluster::TestCluster;
use di_e2e::controlplane::{ControlPlane, admin_client};
use di_e2e::nodes::SimulatedNodes;
use di_e2e::orchestrator::Orchestrator;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams};
use kube::{Api, Client};

const NAMESPACE: &str = "di-demo";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let root = binaries::repo_root();
    if let Some(cluster) = existing_cluster().await {
        println!("using the cluster of {}", cluster.kubeconfig.display());
        return demo(&cluster, None).await;
    }
    println!("no cluster answers for the kubeconfig: starting the local control plane");
    let binaries = match binaries::obtain(&root)? {
        Ok(b) => b,
        Err(Unavailable(why)) => bail!("cannot start a local control plane: {why}"),
    };
    let plane = ControlPlane::start(&binaries, &root.join(".cache/controlplane/runs")).await?;
    let cluster = TestCluster { client: plane.client().await?, kubeconfig: plane.kubeconfig.clone() };
    let outcome = demo(&cluster, Some(SimulatedNodes::start(cluster.client.clone(), NAMESPACE))).await;
    plane.stop().await;
    outcome
}

/// The cluster the user's kubeconfig names, if it answers.
async fn existing_cluster() -> Option<TestCluster> {
    let path = std::env::var_os("KUBECONFIG")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".kube/config")))?;
    if !path.is_file() {
        return None;
    }
    let client: Client = admin_client(&path).await.ok()?;
    tokio::time::timeout(Duration::from_secs(5), client.apiserver_version()).await.ok()?.ok()?;
    Some(TestCluster { client, kubeconfig: path })
}

async fn demo(cluster: &TestCluster, nodes: Option<Arc<SimulatedNodes>>) -> anyhow::Result<()> {
    println!("installing the CRDs and the orchestrator's RBAC");
    cluster.install_crds().await;
    let namespaces: Api<Namespace> = Api::all(cluster.client.clone());
    let ns =
        Namespace { metadata: ObjectMeta { name: Some(NAMESPACE.into()), ..Default::default() }, ..Default::default() };
    namespaces.patch(NAMESPACE, &PatchParams::apply("di-demo"), &Patch::Apply(&ns)).await?;
    let orchestrator = Orchestrator::start(cluster, NAMESPACE, &[]).await;
    println!("orchestrator running (as di-system/di-orchestrator, for namespace {NAMESPACE})");

    let jobs: Api<DIJob> = Api::namespaced(cluster.client.clone(), NAMESPACE);
    let text = std::fs::read_to_string(binaries::repo_root().join("manifests/examples/demo.yaml"))?;
    let doc = di_api::manifest::yaml_documents(&text)?.remove(0);
    let job: DIJob = serde_json::from_value(doc)?;
    let _ = jobs.delete("demo", &DeleteParams::foreground()).await;
    wait_gone(&jobs).await?;
    jobs.patch("demo", &PatchParams::apply("di-demo"), &Patch::Apply(&job)).await.context("submitting the demo job")?;
    println!("submitted DIJob {NAMESPACE}/demo");

    let deadline = tokio::time::Instant::now() + Duration::from_secs(if nodes.is_some() { 60 } else { 300 });
    let mut last = String::new();
    loop {
        let job = jobs.get("demo").await?;
        let status = job.status.clone().unwrap_or_default();
        let line = format!(
            "phase {:?}, collectors {}, learners {}",
            status.phase.unwrap_or(Phase::Created),
            status.collectors.as_deref().unwrap_or("-"),
            status.learners.as_deref().unwrap_or("-")
        );
        if line != last {
            println!("  {line}");
            last = line.clone();
        }
        let all_ready = status.collectors.as_deref() == Some("2/2") && status.learners.as_deref() == Some("1/1");
        if status.phase == Some(Phase::Running) && all_ready {
            break;
        }
        if status.phase.is_some_and(Phase::is_finished) || tokio::time::Instant::now() > deadline {
            bail!(
                "the demo job did not reach Running with every replica ready ({line}); orchestrator log:\n{}",
                orchestrator.log()
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    if let Some(out) = cluster.kubectl(&["get", "dijob,pods,services", "-n", NAMESPACE]) {
        println!("{}", String::from_utf8_lossy(&out.stdout));
    }
    println!("the demo job is Running with every replica ready");
    drop(nodes);
    Ok(())
}

async fn wait_gone(jobs: &Api<DIJob>) -> anyhow::Result<()> {
    for _ in 0..300 {
        if jobs.get_opt("demo").await?.is_none() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    bail!("the previous demo job was not deleted")
}
