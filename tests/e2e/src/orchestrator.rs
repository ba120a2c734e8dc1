//! `di-orchestrator serve` as a local process with the identity the install manifests give it:
//! a token of the `di-system/di-orchestrator` ServiceAccount, so RBAC is checked for real.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use di_api::contract::COORDINATOR_ENDPOINT_IP;
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::PostParams;
use kube::config::Kubeconfig;
use kube::{Api, Client};
use tokio::process::{Child, Command};

use crate::binaries::repo_root;
use crate::cluster::{TestCluster, kubectl_said};
use crate::runs::RUN_MARKER;

/// The orchestrator a scenario runs against: a local process that reconciles one namespace on the
/// local control plane, or on kind the one deployed by the install manifests.
pub enum Orchestrator {
    Local(Box<LocalOrchestrator>),
    Deployed { client: Client, kubeconfig: PathBuf, namespace: String },
}

pub struct LocalOrchestrator {
    child: Child,
    kubeconfig: PathBuf,
    namespace: String,
    log: PathBuf,
    args: Vec<String>,
    instance: String,
}

/// A binary of the workspace the suite drives (built by `make e2e-local`; `make bench` sets
/// `DI_BIN_PROFILE=release` to measure optimised ones).
pub fn binary(name: &str) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| repo_root().join("target"), PathBuf::from);
    let profile = std::env::var("DI_BIN_PROFILE").unwrap_or_else(|_| "debug".into());
    let path = target.join(profile).join(name);
    assert!(
        path.is_file(),
        "{} is missing: build it with `cargo build -p {name}` (make e2e-local does)",
        path.display()
    );
    path
}

impl Orchestrator {
    /// The orchestrator for `namespace`: on kind the deployed one; otherwise its RBAC is installed
    /// and a local process started.
    pub async fn start(cluster: &TestCluster, namespace: &str, args: &[&str]) -> Orchestrator {
        if crate::nodes::real_nodes() {
            let (client, kubeconfig) = (cluster.client.clone(), cluster.kubeconfig.clone());
            return Orchestrator::Deployed { client, kubeconfig, namespace: namespace.into() };
        }
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        Orchestrator::Local(Box::new(LocalOrchestrator::start_with(cluster, namespace, "", &args).await))
    }

    /// Kills it at once, as a crash would (on kind: deletes its pods).
    pub async fn kill(&mut self) {
        match self {
            Orchestrator::Local(local) => local.kill().await,
            Orchestrator::Deployed { client, .. } => {
                let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), "di-system");
                let params = kube::api::DeleteParams { grace_period_seconds: Some(0), ..Default::default() };
                let selector = kube::api::ListParams::default().labels(DEPLOYED);
                pods.delete_collection(&params, &selector).await.expect("deleting the orchestrator's pods");
            }
        }
    }

    /// Starts it again after [`Orchestrator::kill`]. On kind its Deployment does; this waits until
    /// the webhook answers steadily, as every write of a DIJob needs it (failurePolicy Fail).
    pub async fn restart(&mut self) {
        match self {
            Orchestrator::Local(local) => local.restart(),
            Orchestrator::Deployed { client, .. } => webhook_settled(client).await,
        }
    }

    /// What it logged, for failure messages. The deployed one serves every namespace: its lines
    /// about this scenario's, then the namespace's events, which tell what the kubelet did.
    pub fn log(&self) -> String {
        match self {
            Orchestrator::Local(local) => local.log(),
            Orchestrator::Deployed { kubeconfig, namespace, .. } => {
                let logs =
                    kubectl_said(kubeconfig, &["logs", "-n", "di-system", "-l", DEPLOYED, "--tail=-1", "--prefix"]);
                let ours: Vec<&str> = logs.lines().filter(|l| l.contains(namespace.as_str())).collect();
                let events = kubectl_said(kubeconfig, &["get", "events", "-n", namespace, "--sort-by=.lastTimestamp"]);
                format!("{}\nevents in {namespace}:\n{events}", ours.join("\n"))
            }
        }
    }
}

const DEPLOYED: &str = "app.kubernetes.io/name=di-orchestrator";

/// Waits until the deployed orchestrator's webhook answers steadily, as `kubectl di install`
/// does (`di_client::wait::until_webhook_settled`).
pub async fn webhook_settled(client: &Client) {
    let settled = di_client::wait::until_webhook_settled(client, "di-system", std::time::Duration::from_secs(120));
    if let Err(e) = settled.await {
        panic!("the orchestrator's webhook did not answer steadily within 120 s: {:?}", e.last);
    }
}

impl LocalOrchestrator {
    /// A local process for `namespace`, one of several replicas (`instance` tells them apart),
    /// with extra arguments to `serve`.
    pub async fn start_with(
        cluster: &TestCluster,
        namespace: &str,
        instance: &str,
        args: &[String],
    ) -> LocalOrchestrator {
        Box::pin(Self::start_via(cluster, namespace, instance, args, None)).await
    }

    /// As [`LocalOrchestrator::start_with`], reaching the API server at `server` (an
    /// `https://host:port` that forwards to it) when given.
    pub async fn start_via(
        cluster: &TestCluster,
        namespace: &str,
        instance: &str,
        args: &[String],
        server: Option<&str>,
    ) -> LocalOrchestrator {
        cluster.apply_file("manifests/install/namespace.yaml").await;
        cluster.apply_file("manifests/install/rbac.yaml").await;
        let mut kubeconfig = service_account_kubeconfig(cluster, "di-system", "di-orchestrator", namespace, None).await;
        if let Some(server) = server {
            kubeconfig = with_server(&kubeconfig, &format!("{namespace}{instance}"), server);
        }
        let log = kubeconfig.with_file_name(format!("{namespace}{instance}.log"));
        let mut args = args.to_vec();
        args.push(format!("--namespace={namespace}"));
        let child = spawn(&kubeconfig, &args, &log, instance);
        LocalOrchestrator {
            child,
            kubeconfig,
            namespace: namespace.to_owned(),
            log,
            args,
            instance: instance.to_owned(),
        }
    }

    /// Kills the process at once, as a crash would.
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }

    /// The kubeconfig it runs with: its ServiceAccount's token.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Starts it again after [`Orchestrator::kill`].
    pub fn restart(&mut self) {
        self.child = spawn(&self.kubeconfig, &self.args, &self.log, &self.instance);
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// What the orchestrator logged, for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The process, for measuring it.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Sends it a signal by name (`TERM`, `STOP`, `CONT`, ...), as the kubelet or a frozen node would.
    pub fn signal(&self, name: &str) {
        let pid = self.pid().expect("the orchestrator is running").to_string();
        let status = std::process::Command::new("kill").args(["-s", name, &pid]).status().expect("running kill");
        assert!(status.success(), "kill -s {name} {pid} failed");
    }

    /// How the process ended, if it has.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().expect("checking on the orchestrator")
    }

    /// Waits for the process to end, and says how it ended.
    pub async fn wait(&mut self) -> std::process::ExitStatus {
        self.child.wait().await.expect("waiting for the orchestrator")
    }
}

/// A copy of `kubeconfig` (named `file`) that reaches the API server at `server` instead.
fn with_server(kubeconfig: &Path, file: &str, server: &str) -> PathBuf {
    let text = std::fs::read_to_string(kubeconfig).expect("reading kubeconfig");
    let mut config: serde_yaml::Value = serde_yaml::from_str(&text).expect("kubeconfig YAML");
    config["clusters"][0]["cluster"]["server"] = server.into();
    let path = kubeconfig.with_file_name(format!("{file}.kubeconfig"));
    std::fs::write(&path, serde_yaml::to_string(&config).expect("kubeconfig YAML")).expect("writing kubeconfig");
    path
}

fn spawn(kubeconfig: &Path, args: &[String], log: &Path, identity: &str) -> Child {
    let out = std::fs::OpenOptions::new().create(true).append(true).open(log).expect("orchestrator log");
    Command::new(binary("di-orchestrator"))
        .arg("serve")
        .args(["--probe-addr=127.0.0.1:0", "--restart-backoff-seconds=0.5"].into_iter().filter(|d| {
            let flag = d.split('=').next().unwrap_or_default();
            !args.iter().any(|a| a.starts_with(flag))
        }))
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("KUBERNETES_POD_NAME", format!("orchestrator{identity}"))
        // The control plane's folder: whoever stops it kills this process too.
        .env(RUN_MARKER, kubeconfig.parent().and_then(Path::parent).expect("run folder"))
        // DI_ORCHESTRATOR_LOG turns up its logging when a run needs looking into.
        .env("RUST_LOG", std::env::var("DI_ORCHESTRATOR_LOG").unwrap_or_else(|_| "info,kube=warn".into()))
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("log handle"))
        .stderr(out)
        .kill_on_drop(true)
        .spawn()
        .expect("starting di-orchestrator")
}

/// The replica endpoint of one job, as a local process with its coordinator's identity (the
/// ServiceAccount the coordinator pod runs as, in a token bound to that pod, as the kubelet
/// mounts it), listening on loopback: on the coordinator's own address and, for the network's
/// readers, on `127.0.0.1`.
pub struct Sidecar {
    _child: Child,
    /// Where the coordinator's containers reach it (reads and writes).
    pub url: String,
    /// Where the pod's network reaches it (reads only).
    pub network_url: String,
    pub kubeconfig: PathBuf,
    log: PathBuf,
}

impl Sidecar {
    pub async fn start(cluster: &TestCluster, namespace: &str, job: &str) -> Sidecar {
        let coordinator = di_api::contract::names::coordinator(job);
        let kubeconfig = pod_kubeconfig(cluster, namespace, &coordinator).await;
        // As the kubelet fills it from the pod (the downward API).
        let pods = Api::<Pod>::namespaced(cluster.client.clone(), namespace);
        let pod = pods.get(&coordinator).await.expect("the coordinator pod");
        let uid = pod.metadata.uid.clone().expect("a pod's UID");
        // The job's UID, as the reconciler gives it to the sidecar: the owner of its pod.
        let job_uid = pod.metadata.owner_references.as_ref().and_then(|o| o.first()).expect("an owned pod").uid.clone();
        // Two listeners on different addresses: the same number for both would do.
        let port = crate::ports::free_port().expect("a free port");
        let own_port = crate::ports::free_port().expect("a free port");
        let log = kubeconfig.with_extension("log");
        let out = std::fs::OpenOptions::new().create(true).append(true).open(&log).expect("sidecar log");
        let child = Command::new(binary("di-orchestrator"))
            .args(["replicas", "--bind-address=127.0.0.1", "--wait-seconds=30"])
            .arg(format!("--namespace={namespace}"))
            .arg(format!("--job={job}"))
            .arg(format!("--job-uid={job_uid}"))
            .arg(format!("--port={port}"))
            .arg(format!("--coordinator-address={}:{own_port}", COORDINATOR_ENDPOINT_IP))
            .env("KUBECONFIG", &kubeconfig)
            .env(di_api::contract::env::POD_UID, uid)
            .env(RUN_MARKER, kubeconfig.parent().and_then(Path::parent).expect("run folder"))
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log handle"))
            .stderr(out)
            .kill_on_drop(true)
            .spawn()
            .expect("starting the replica endpoint");
        let url = format!("http://{COORDINATOR_ENDPOINT_IP}:{own_port}");
        Sidecar { _child: child, url, network_url: format!("http://127.0.0.1:{port}"), kubeconfig, log }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the endpoint answers its health check (ten seconds at most, then fails with
    /// its log).
    pub async fn until_ready(&self) {
        for _ in 0..100 {
            if reqwest::get(format!("{}/healthz", self.url)).await.is_ok() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        panic!("the replica endpoint did not start: {}", self.log());
    }

    /// The process, for measuring it.
    pub fn pid(&self) -> Option<u32> {
        self._child.id()
    }
}

/// A kubeconfig with the token a pod's containers get: its ServiceAccount's, bound to the pod
/// (so the API server names the pod in the request's user info).
pub async fn pod_kubeconfig(cluster: &TestCluster, namespace: &str, pod: &str) -> PathBuf {
    let found = Api::<Pod>::namespaced(cluster.client.clone(), namespace).get(pod).await.expect("the pod");
    let account = found.spec.as_ref().and_then(|s| s.service_account_name.clone()).unwrap_or_else(|| "default".into());
    let bound = BoundObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(pod.into()),
        uid: found.metadata.uid.clone(),
    };
    service_account_kubeconfig(cluster, namespace, &account, &format!("{namespace}-{pod}"), Some(bound)).await
}

/// A kubeconfig for a ServiceAccount's token (bound to an object when given), beside the admin one.
pub async fn service_account_kubeconfig(
    cluster: &TestCluster,
    sa_namespace: &str,
    sa: &str,
    file: &str,
    bound: Option<BoundObjectReference>,
) -> PathBuf {
    let accounts: Api<ServiceAccount> = Api::namespaced(cluster.client.clone(), sa_namespace);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec { expiration_seconds: Some(3600), bound_object_ref: bound, ..Default::default() }),
        ..Default::default()
    };
    let token = accounts
        .create_token_request(sa, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("token for {sa_namespace}/{sa}: {e}"))
        .status
        .expect("token request answered")
        .token;
    let admin = Kubeconfig::read_from(&cluster.kubeconfig).expect("admin kubeconfig");
    let cluster_entry = admin.clusters.first().and_then(|c| c.cluster.clone()).expect("kubeconfig names a cluster");
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": cluster_entry}],
        "users": [{"name": sa, "user": {"token": token}}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": sa}}],
        "current-context": "e2e",
    });
    let dir = cluster.kubeconfig.parent().expect("kubeconfig folder").join("orchestrators");
    std::fs::create_dir_all(&dir).expect("orchestrators folder");
    let path = dir.join(format!("{file}.kubeconfig"));
    std::fs::write(&path, serde_yaml::to_string(&config).expect("kubeconfig YAML")).expect("writing kubeconfig");
    path
}
