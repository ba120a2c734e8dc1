//! Kueue for the queue scenarios. On the control-plane tier, beside a control plane a test
//! starts: its manager built from the Go module at a pinned version and cached outside the clone
//! like the control plane, its CRDs from the same module, run out of cluster with certificates of
//! its own and a configuration that names DIJob an external framework. On kind, the Kueue that
//! kind/up.sh deployed from the same module's manifests, around the same binary
//! (kind/kueue/deploy.sh), with its webhooks live.
//!
//! The build runs inside a copy of Kueue's own module: its go.sum covers every dependency, and a
//! module of ours that required Kueue would ask the checksum database for modules it does not know.
//! Beside a control plane, Kueue's admission webhooks are not registered with the API server: they
//! default and check Kueue's own objects (the Workloads the orchestrator writes among them), which
//! only the kind tier shows.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use crate::binaries::{Unavailable, cache_base, lock_folder};
use crate::cluster::TestCluster;
use crate::controlplane::ControlPlane;
use crate::ports::free_port;

/// The Kueue release the tests run.
pub const VERSION: &str = "v0.19.2";
const MODULE: &str = "sigs.k8s.io/kueue";

/// Where Kueue's manager reads its metrics certificate, whatever its configuration says.
const METRICS_CERTS: &str = "/etc/kueue/metrics/certs";

/// The label of the namespaces where the Kueue on kind manages jobs and pods (its
/// `managedJobsNamespaceSelector`, in kind/kueue/manager-config.yaml): [`TestQueue`]'s.
pub const MANAGED_NAMESPACES: (&str, &str) = ("di-e2e/kueue", "managed");

/// The kinds Kueue is told external controllers manage: a DIJob under either version it is
/// written in (Kueue matches owner references by apiVersion).
pub const EXTERNAL_FRAMEWORKS: [&str; 2] =
    ["DIJob.v1alpha1.diengine.opendilab.org", "DIJob.v2alpha1.diengine.opendilab.org"];

pub use di_api::contract::kueue::resource;

/// Kueue's manager binary and its module's folder (for its CRDs), built on first use; why not,
/// where this machine cannot.
pub fn obtain(root: &Path) -> anyhow::Result<Result<(PathBuf, PathBuf), Unavailable>> {
    if Command::new("go").arg("version").output().is_err() {
        return Ok(Err(Unavailable("Kueue is built from its Go module, and there is no go on the PATH".into())));
    }
    let module = module_dir()?;
    let cache = cache_base(root).join("kueue").join(VERSION);
    let binary = cache.join("kueue");
    if binary.is_file() {
        return Ok(Ok((binary, module)));
    }
    let _lock = lock_folder(&cache)?;
    if binary.is_file() {
        return Ok(Ok((binary, module)));
    }
    eprintln!("building Kueue {VERSION} from its Go module (first run only; a few minutes)...");
    // The module cache is read-only: build in a copy, beside the binary, and rename, so an
    // interrupted build never leaves half a binary.
    let source = cache.join(".source");
    let _ = std::fs::remove_dir_all(&source);
    run(Command::new("cp").arg("-R").arg(&module).arg(&source))?;
    run(Command::new("chmod").args(["-R", "u+w"]).arg(&source))?;
    let partial = cache.join(".kueue.partial");
    let status = Command::new("go")
        .args(["build", "-trimpath", "-ldflags=-s -w", "-o"])
        .arg(&partial)
        .arg("./cmd/kueue")
        .env("CGO_ENABLED", "0")
        .current_dir(&source)
        .status()
        .context("running go build for Kueue")?;
    if !status.success() {
        bail!("go build of Kueue {VERSION} failed ({status}); see the output above");
    }
    std::fs::rename(&partial, &binary)?;
    std::fs::remove_dir_all(&source)?;
    Ok(Ok((binary, module)))
}

/// Kueue's module in Go's module cache, downloaded if it is not there yet.
fn module_dir() -> anyhow::Result<PathBuf> {
    let output = Command::new("go")
        .args(["mod", "download", "-json", &format!("{MODULE}@{VERSION}")])
        .current_dir(std::env::temp_dir())
        .output()
        .context("running go mod download for Kueue")?;
    if !output.status.success() {
        bail!("go mod download {MODULE}@{VERSION} failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    let answer: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    Ok(PathBuf::from(answer["Dir"].as_str().context("go mod download named no folder")?))
}

fn run(command: &mut Command) -> anyhow::Result<()> {
    let status = command.status().with_context(|| format!("running {command:?}"))?;
    if !status.success() {
        bail!("{command:?} failed ({status})");
    }
    Ok(())
}

/// Installs Kueue's CRDs into `cluster` (on `plane`) and starts its manager beside the control
/// plane, once it answers its readiness probe.
pub async fn start(
    plane: &mut ControlPlane,
    cluster: &TestCluster,
    binary: &Path,
    module: &Path,
) -> anyhow::Result<()> {
    start_configured(plane, cluster, (binary, module), json!({})).await
}

/// As [`start`], with `extra` (top-level fields: `multiKueue`, ...) added to its configuration.
pub async fn start_configured(
    plane: &mut ControlPlane,
    cluster: &TestCluster,
    (binary, module): (&Path, &Path),
    extra: serde_json::Value,
) -> anyhow::Result<()> {
    let bases = module.join("config/components/crd/bases");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&bases)?.map(|e| e.map(|e| e.path())).collect::<Result<_, _>>()?;
    files.sort();
    for file in files.iter().filter(|f| f.extension().is_some_and(|e| e == "yaml")) {
        cluster.install_crd(&file.display().to_string(), &std::fs::read_to_string(file)?).await;
    }
    let namespaces: Api<Namespace> = Api::all(cluster.client.clone());
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kueue-system"}});
    namespaces.create(&PostParams::default(), &serde_json::from_value(namespace)?).await?;

    let certs = plane.dir.join("kueue-certs");
    write_certificate(&certs)?;
    // The manager reads its metrics certificate from a fixed path even with metrics off; any
    // certificate will do, and a test's is left for the next.
    if !Path::new(METRICS_CERTS).join("tls.crt").is_file() {
        let staged = Path::new(METRICS_CERTS).with_extension(format!("partial-{}", std::process::id()));
        write_certificate(&staged).with_context(|| {
            format!("Kueue reads its metrics certificate from {METRICS_CERTS}: it must be writable")
        })?;
        if std::fs::rename(&staged, METRICS_CERTS).is_err() {
            // Another test's Kueue wrote one first.
            let _ = std::fs::remove_dir_all(&staged);
        }
    }
    let probe = free_port()?;
    let mut config = json!({
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": "kueue-system",
        "health": {"healthProbeBindAddress": format!("127.0.0.1:{probe}")},
        "metrics": {"bindAddress": "0"},
        "webhook": {"port": free_port()?, "host": "127.0.0.1", "certDir": certs},
        "leaderElection": {"leaderElect": false},
        "internalCertManagement": {"enable": false},
        "manageJobsWithoutQueueName": false,
        "integrations": {"frameworks": ["batch/job"], "externalFrameworks": EXTERNAL_FRAMEWORKS},
        // Its on-demand visibility API wants certificates of its own under /visibility.
        "featureGates": {"VisibilityOnDemand": false},
    });
    crate::scenario::merge(&mut config, extra);
    let path = plane.dir.join("kueue.yaml");
    std::fs::write(&path, serde_yaml::to_string(&config)?)?;
    let args = [
        format!("--config={}", path.display()),
        format!("--kubeconfig={}", plane.kubeconfig.display()),
        "--zap-log-level=2".into(),
    ];
    plane.run_beside("kueue", binary, &args)?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ready = reqwest::get(format!("http://127.0.0.1:{probe}/readyz")).await;
        if ready.is_ok_and(|r| r.status().is_success()) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("Kueue did not become ready within a minute; see kueue.log in {}", plane.dir.join("logs").display());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A self-signed serving certificate for 127.0.0.1 as `tls.crt` and `tls.key` in `dir`.
fn write_certificate(dir: &Path) -> anyhow::Result<()> {
    let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string(), "localhost".into()])?;
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("tls.crt"), certified.cert.pem())?;
    std::fs::write(dir.join("tls.key"), certified.signing_key.serialize_pem())?;
    Ok(())
}

pub mod jobs;
pub mod multikueue;
mod queue;
mod turns;

pub use queue::{Cohort, TestQueue};
pub use turns::{Share, WithKueue, before_kueue, with_kueue};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binaries;

    /// The kind tier deploys the same Kueue, configured as the control-plane tier's.
    #[test]
    fn the_kind_tier_runs_the_same_kueue_with_dijob_external() {
        let root = binaries::repo_root();
        let lib = std::fs::read_to_string(root.join("kind/lib.sh")).unwrap();
        assert!(
            lib.lines().any(|l| l.split_whitespace().next() == Some(&format!("KUEUE_VERSION={VERSION}"))),
            "kind/lib.sh must set KUEUE_VERSION={VERSION}"
        );
        let patch: serde_yaml::Value =
            serde_yaml::from_str(&std::fs::read_to_string(root.join("kind/kueue/manager-config.yaml")).unwrap())
                .unwrap();
        let text = patch["data"]["controller_manager_config.yaml"].as_str().expect("the manager's configuration");
        let config: serde_yaml::Value = serde_yaml::from_str(text).unwrap();
        let external: Vec<&str> = config["integrations"]["externalFrameworks"]
            .as_sequence()
            .expect("externalFrameworks")
            .iter()
            .filter_map(|f| f.as_str())
            .collect();
        assert_eq!(external, EXTERNAL_FRAMEWORKS);
        assert_eq!(config["manageJobsWithoutQueueName"].as_bool(), Some(false));
        let selector = &config["managedJobsNamespaceSelector"]["matchLabels"];
        assert_eq!(selector[MANAGED_NAMESPACES.0].as_str(), Some(MANAGED_NAMESPACES.1));
    }
}
