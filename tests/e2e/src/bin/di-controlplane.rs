//! Runs a local Kubernetes control plane for the control-plane test tier and the demo.
//!
//!   di-controlplane run [--prefetch] -- CMD [ARGS...]
//!                                          start, run CMD against it, stop; exit with CMD's code;
//!                                          with --prefetch, build meanwhile what later scenarios
//!                                          build on first use (Kueue, the coscheduling release)
//!   di-controlplane up                     start and wait for Ctrl-C
//!   di-controlplane binaries               obtain (build or find) the binaries and print them
//!   di-controlplane release                obtain every binary of the release (kubelet, kubeadm,
//!                                          ... too) and print the folder that holds them (kind/)
//!
//! CMD sees `KUBECONFIG` and `DI_E2E_KUBECONFIG` pointing at the control plane's admin
//! kubeconfig, and `DI_E2E_NODES=simulated`. When the binaries can be neither found nor built,
//! `run` says why and exits 0 without running CMD: the tier is skipped, loudly.

use std::process::ExitCode;

use di_e2e::binaries::{self, Unavailable};
use di_e2e::controlplane::ControlPlane;
use tokio::signal::unix::{SignalKind, signal};

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mode, rest) = match args.split_first() {
        Some((mode, rest)) => (mode.as_str(), rest),
        None => ("", &[][..]),
    };
    let prefetch = mode == "run" && rest.first().is_some_and(|a| a == "--prefetch");
    let command: Vec<String> = rest.iter().skip(usize::from(prefetch)).skip_while(|a| *a == "--").cloned().collect();
    match (mode, command.is_empty()) {
        ("run", false) | ("up", true) | ("binaries", true) => {}
        ("release", true) => return release(),
        _ => {
            eprintln!("usage: di-controlplane run [--prefetch] -- CMD [ARGS...] | up | binaries | release");
            return ExitCode::from(2);
        }
    }
    match run(mode, &command, prefetch).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("di-controlplane: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn release() -> ExitCode {
    match binaries::obtain_all(&binaries::repo_root()) {
        Ok(Ok(dir)) => {
            println!("{}", dir.display());
            ExitCode::SUCCESS
        }
        Ok(Err(Unavailable(why))) => {
            eprintln!("di-controlplane: {why}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("di-controlplane: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(mode: &str, command: &[String], prefetch: bool) -> anyhow::Result<ExitCode> {
    let root = binaries::repo_root();
    let binaries = match binaries::obtain(&root)? {
        Ok(b) => b,
        Err(Unavailable(why)) => {
            eprintln!(
                "SKIPPED: the control-plane tier needs etcd, kube-apiserver, kube-controller-manager and kube-scheduler: {why}."
            );
            eprintln!("SKIPPED: install Go (to build them from hack/controlplane) or set KUBEBUILDER_ASSETS.");
            if di_e2e::cluster::in_ci() {
                eprintln!("di-controlplane: CI=true: the control-plane tier must run in CI, so this is a failure.");
                return Ok(ExitCode::FAILURE);
            }
            return Ok(ExitCode::SUCCESS);
        }
    };
    if mode == "binaries" {
        for binary in
            [&binaries.etcd, &binaries.kube_apiserver, &binaries.kube_controller_manager, &binaries.kube_scheduler]
        {
            println!("{}", binary.display());
        }
        return Ok(ExitCode::SUCCESS);
    }

    let fetching = prefetch.then(|| {
        let root = root.clone();
        std::thread::spawn(move || fetch_later_builds(&root))
    });
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    eprintln!("starting the local control plane (Kubernetes {})...", binaries::KUBERNETES_VERSION);
    let runs = root.join(".cache/controlplane/runs");
    let plane = tokio::select! {
        plane = ControlPlane::start(&binaries, &runs) => plane?,
        _ = interrupt.recv() => return Ok(ExitCode::from(130)),
        _ = terminate.recv() => return Ok(ExitCode::from(143)),
    };
    eprintln!("control plane ready at {} (kubeconfig {})", plane.server, plane.kubeconfig.display());

    let code = if mode == "up" {
        println!("export KUBECONFIG={}", plane.kubeconfig.display());
        tokio::select! {
            _ = interrupt.recv() => ExitCode::SUCCESS,
            _ = terminate.recv() => ExitCode::SUCCESS,
        }
    } else {
        let mut child = tokio::process::Command::new(&command[0])
            .args(&command[1..])
            .env("KUBECONFIG", &plane.kubeconfig)
            .env("DI_E2E_KUBECONFIG", &plane.kubeconfig)
            .env("DI_E2E_NODES", "simulated")
            .kill_on_drop(true)
            .spawn()?;
        tokio::select! {
            status = child.wait() => {
                let status = status?;
                ExitCode::from(status.code().map_or(1, |c| c.clamp(0, 255) as u8))
            }
            _ = interrupt.recv() => ExitCode::from(130),
            _ = terminate.recv() => ExitCode::from(143),
        }
    };
    plane.stop().await;
    if let Some(fetching) = fetching.filter(|f| !f.is_finished()) {
        // Left running, its go build would finish outside the cache's lock.
        eprintln!("di-controlplane: waiting for the builds begun with --prefetch to end");
        let _ = tokio::task::spawn_blocking(move || fetching.join()).await;
    }
    Ok(code)
}

/// Builds what scenarios later in the suite build on first use, each under the cache's lock (a
/// scenario that needs one meanwhile waits for it, then finds it): with nothing cached, the
/// suite's test binaries, which run one at a time, would otherwise wait for each build in turn.
/// A build that fails is left for its scenario to try again and report.
fn fetch_later_builds(root: &std::path::Path) {
    if let Err(e) = di_e2e::kueue::obtain(root) {
        eprintln!("di-controlplane: building Kueue ahead failed (its scenarios will say why): {e:#}");
    }
    if let Err(e) = binaries::obtain_release(root, &binaries::COSCHEDULING, None) {
        eprintln!("di-controlplane: building the coscheduling release ahead failed (its scenario will say why): {e:#}");
    }
}
