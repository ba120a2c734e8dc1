//! What the suite needs from the cluster under test, wherever it runs: a client, a namespace of
//! its own per test, the CRDs, and waiting on conditions (never on fixed sleeps).
//!
//! The suite runs only against the cluster `DI_E2E_KUBECONFIG` names (set by `make e2e-local`
//! and `make e2e`), never against whatever `KUBECONFIG` happens to point at.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::wait::conditions;
use kube::{Api, Client};

use crate::binaries::repo_root;
use crate::controlplane::admin_client;

/// Field manager of everything the suite applies.
pub const MANAGER: &str = "di-e2e";

pub struct TestCluster {
    pub client: Client,
    pub kubeconfig: PathBuf,
}

/// Connects to the cluster under test. Running the suite without one is a mistake, not a skip:
/// the tier's entry points (`make e2e-local`, `make e2e`) provide it or say why they cannot.
pub async fn connect() -> TestCluster {
    let Some(kubeconfig) = std::env::var_os("DI_E2E_KUBECONFIG").map(PathBuf::from) else {
        panic!(
            "DI_E2E_KUBECONFIG is not set: run the suite with `make e2e-local` (local control plane) or `make e2e` (kind)"
        );
    };
    let client = admin_client(&kubeconfig).await.expect("client for DI_E2E_KUBECONFIG");
    TestCluster { client, kubeconfig }
}

impl TestCluster {
    /// A fresh namespace for one test, `e2e-<hint>-<n>`.
    pub async fn namespace(&self, hint: &str) -> String {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("e2e-{hint}-{}-{n}", std::process::id());
        self.namespace_named(name).await
    }

    /// Namespace `name`, made now (the same name on several clusters).
    pub async fn namespace_named(&self, name: String) -> String {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let ns =
            Namespace { metadata: ObjectMeta { name: Some(name.clone()), ..Default::default() }, ..Default::default() };
        namespaces.create(&PostParams::default(), &ns).await.expect("create test namespace");
        name
    }

    /// Applies the CRDs generated from pkg/api and waits until the API server serves them.
    pub async fn install_crds(&self) {
        for (file, yaml) in di_api::crd::crd_files() {
            self.install_crd(file, &yaml).await;
        }
    }

    /// Applies the CRD `yaml` (read from `file`) and waits until it is established.
    pub async fn install_crd(&self, file: &str, yaml: &str) {
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        let crd: CustomResourceDefinition = serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("{file}: {e}"));
        let name = crd.metadata.name.clone().expect("CRD has a name");
        crds.patch(&name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(&crd))
            .await
            .unwrap_or_else(|e| panic!("applying {file}: {e}"));
        di_client::wait::until(&crds, &name, Duration::from_secs(30), conditions::is_crd_established())
            .await
            .unwrap_or_else(|e| panic!("waiting for {name} to be established: {:#}", anyhow::Error::from(e)));
    }

    /// Server-side applies every document of a manifest file (path from the repository root).
    pub async fn apply_file(&self, path: &str) {
        let text = std::fs::read_to_string(repo_root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
        for doc in di_api::manifest::yaml_documents(&text).expect("manifest is YAML") {
            let object: DynamicObject = serde_json::from_value(doc).expect("manifest document is an object");
            di_client::apply::apply(&self.client, &object, MANAGER)
                .await
                .unwrap_or_else(|e| panic!("{path}: {:#}", anyhow::Error::from(e)));
        }
    }

    /// Runs `kubectl` against the cluster under test; `None` (after saying so) when there is none.
    pub fn kubectl(&self, args: &[&str]) -> Option<std::process::Output> {
        match run_kubectl(&self.kubeconfig, args) {
            Ok(o) => Some(o),
            Err(e) => {
                skip(&format!("kubectl cannot be run ({e})"));
                None
            }
        }
    }
}

/// `kubectl args` against the cluster `kubeconfig` names, from the repository root.
fn run_kubectl(kubeconfig: &Path, args: &[&str]) -> std::io::Result<std::process::Output> {
    std::process::Command::new("kubectl").args(args).env("KUBECONFIG", kubeconfig).current_dir(repo_root()).output()
}

/// What `kubectl args` printed, or why it printed nothing; it never skips or panics. Blocking, for
/// `Drop` and failure messages, where no runtime can be awaited.
pub fn kubectl_said(kubeconfig: &Path, args: &[&str]) -> String {
    match run_kubectl(kubeconfig, args) {
        Ok(out) => format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
        Err(e) => format!("kubectl {}: {e}", args.join(" ")),
    }
}

/// Whether this run is CI's, where a tier that cannot run is a failure, not a skip.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Says loudly, past the test harness's output capture, that a check was skipped; under CI that
/// fails the test instead, so a green run never hides a tier that did not run.
pub fn skip(why: &str) {
    use std::io::Write;
    assert!(!in_ci(), "CI=true, and a check could not run: {why}");
    let _ = writeln!(std::io::stderr(), "SKIPPED: {why}");
}

/// Says that a scenario does not apply to this kind of cluster (not a missing tool: no failure).
pub fn not_applicable(why: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "NOT APPLICABLE here: {why}");
}

/// How long a scenario waits for what the cluster does at once (a pod started, a phase reached).
pub const WAIT: Duration = Duration::from_secs(60);

/// Awaits `future`, failing the test with `what` if it takes longer than `timeout`.
pub async fn within<T>(timeout: Duration, what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(timeout, future)
        .await
        .unwrap_or_else(|_| panic!("timed out after {timeout:?} waiting for {what}"))
}

/// Waits, at most `timeout`, until what a watch of `api` (as `config` selects) holds satisfies
/// `done`, and returns its answer. Each change is looked at as it comes: no polling interval to
/// wait out, and no list between two changes to miss. `dyntype` is the kind's (`()` for a typed
/// one, an `ApiResource` for a dynamic one).
pub async fn until_watched<K, T>(
    api: Api<K>,
    config: kube::runtime::watcher::Config,
    dyntype: K::DynamicType,
    timeout: Duration,
    what: &str,
    done: impl Fn(&[std::sync::Arc<K>]) -> Option<T>,
) -> T
where
    K: kube::Resource + Clone + k8s_openapi::serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Clone + Eq + std::hash::Hash,
{
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, reflector, watcher};
    let writer = reflector::store::Writer::new(dyntype);
    let reader = writer.as_reader();
    let mut events = watcher(api, config).default_backoff().reflect(writer).boxed();
    within(timeout, what, async move {
        loop {
            match events.next().await {
                Some(Ok(watcher::Event::InitDone | watcher::Event::Apply(_) | watcher::Event::Delete(_))) => {
                    if let Some(answer) = done(&reader.state()) {
                        return answer;
                    }
                }
                Some(_) => {}
                None => panic!("the watch for {what} ended"),
            }
        }
    })
    .await
}

/// As [`admin_client`](crate::controlplane::admin_client), without kube's retries of 429, 503
/// and 504: for a test whose answer is such a refusal (an eviction a PodDisruptionBudget holds),
/// which retries would only delay.
pub async fn unretried_client(kubeconfig: &Path) -> anyhow::Result<Client> {
    use kube::config::{Config, KubeConfigOptions, Kubeconfig};
    let config = Kubeconfig::read_from(kubeconfig)?;
    let mut config = Config::from_custom_kubeconfig(config, &KubeConfigOptions::default()).await?;
    config.default_retry = false;
    Ok(di_controller::client::keeping_every_connection(&config)?)
}
