//! The three ways users install the orchestrator, each on kind driving a job to Running: the Helm
//! chart, `kubectl di install` (which returns only once the webhook answers), and
//! `kubectl apply -k`, which leaves the cluster as kind/up.sh made it. One test, in order: each
//! path replaces the cluster-wide objects of the one before.

use std::path::PathBuf;
use std::process::Output;

use di_api::Phase;
use di_e2e::binaries::repo_root;
use di_e2e::nodes::real_nodes;
use di_e2e::orchestrator::{binary, webhook_settled};
use di_e2e::scenario::{Scenario, names};
use serde_json::json;

/// Runs a command against the cluster under test without blocking the test's runtime.
async fn run(program: impl AsRef<std::ffi::OsStr>, args: &[&str], kubeconfig: &PathBuf) -> String {
    let program = program.as_ref().to_owned();
    let out: Output = tokio::process::Command::new(&program)
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .current_dir(repo_root())
        .output()
        .await
        .unwrap_or_else(|e| panic!("running {program:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{program:?} {args:?} failed: {}{stdout}", String::from_utf8_lossy(&out.stderr));
    stdout
}

/// A job of the installed orchestrator reaches Running with its pods really running.
async fn a_job_runs(hint: &str) {
    let s = Box::pin(Scenario::new(hint)).await;
    webhook_settled(&s.cluster.client).await;
    s.submit("installed", 1, 0, json!({})).await;
    s.wait_pods("installed", &names("installed", &["coordinator", "collector-0"])).await;
    s.wait_phase("installed", Phase::Running).await;
}

#[tokio::test]
#[ignore = "kind tier: run with `make e2e`"]
async fn helm_kubectl_di_install_and_kubectl_apply_each_install_a_working_orchestrator() {
    if !real_nodes() {
        di_e2e::cluster::not_applicable("no kubelet runs the orchestrator's own pods here (kind tier only)");
        return;
    }
    let Some(helm) = std::env::var_os("DI_E2E_HELM").filter(|h| !h.is_empty()) else {
        di_e2e::cluster::skip("DI_E2E_HELM names no helm binary (make e2e sets it)");
        return;
    };
    let cluster = di_e2e::cluster::connect().await;
    let kubeconfig = cluster.kubeconfig.clone();
    let kubectl_di = binary("kubectl-di");
    let kubeconfig_arg = kubeconfig.to_str().expect("a UTF-8 path");

    // Helm: the chart, into the namespace the previous install leaves behind.
    run(&kubectl_di, &["uninstall", "--keep-crds", "--kubeconfig", kubeconfig_arg], &kubeconfig).await;
    let helm_args = [
        "install",
        "di-orchestrator",
        "charts/di-orchestrator",
        "--set",
        "image.tag=dev,namespace.create=false",
        "--wait",
        "--timeout",
        "3m",
    ];
    run(&helm, &helm_args, &kubeconfig).await;
    a_job_runs("helm").await;
    run(&helm, &["uninstall", "di-orchestrator", "--wait"], &kubeconfig).await;

    // kubectl di install: returns once a dry-run DIJob goes through the webhook.
    let args =
        ["install", "--image", "opendilab/di-orchestrator:dev", "--timeout", "180", "--kubeconfig", kubeconfig_arg];
    let out = run(&kubectl_di, &args, &kubeconfig).await;
    assert!(out.contains("its webhook answers"), "{out}");
    a_job_runs("plugin").await;

    // kubectl apply -k: kind/up.sh's own install, which the rest of the suite runs against.
    run("kubectl", &["apply", "--server-side", "--force-conflicts", "-k", "kind/overlay"], &kubeconfig).await;
    run(
        "kubectl",
        &["-n", "di-system", "rollout", "status", "deployment/di-orchestrator", "--timeout=180s"],
        &kubeconfig,
    )
    .await;
    a_job_runs("kustomize").await;
}
