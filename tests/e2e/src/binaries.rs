//! Where the control plane's binaries come from: a folder of ready binaries named by
//! `KUBEBUILDER_ASSETS` (as envtest users provide them), else our cache, else a build from the
//! Go modules pinned in `hack/controlplane/go.mod` (and, for the coscheduling test, in
//! `hack/coscheduling/go.mod`), cached by version so only the first run pays.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

/// The Kubernetes release the control plane is built from. It matches the `k8s-openapi` feature
/// the workspace compiles against (a test keeps the two, and `hack/controlplane/go.mod`, in step).
pub const KUBERNETES_VERSION: &str = "v1.37.2";

/// Binaries built from one pinned Go module of this repository, and cached together.
#[derive(Clone, Copy, Debug)]
pub struct Release {
    /// The Kubernetes release stamped into them.
    pub kubernetes: &'static str,
    /// The Go module (a folder of the repository) that pins them.
    pub module: &'static str,
    /// Their folder below the cache.
    pub cache: &'static str,
    /// Each binary with the Go package that builds it; the first four are a control plane's:
    /// etcd, kube-apiserver, kube-controller-manager and a kube-scheduler.
    pub binaries: &'static [(&'static str, &'static str)],
}

/// The release every tier runs: the control-plane tier takes its first four, the kind tier's
/// node image all of them.
pub const MAIN: Release = Release {
    kubernetes: KUBERNETES_VERSION,
    module: "hack/controlplane",
    cache: "kubernetes",
    binaries: &[
        ("etcd", "go.etcd.io/etcd/server/v3"),
        ("kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver"),
        ("kube-controller-manager", "k8s.io/kubernetes/cmd/kube-controller-manager"),
        ("kube-scheduler", "k8s.io/kubernetes/cmd/kube-scheduler"),
        ("kube-proxy", "k8s.io/kubernetes/cmd/kube-proxy"),
        ("kubelet", "k8s.io/kubernetes/cmd/kubelet"),
        ("kubeadm", "k8s.io/kubernetes/cmd/kubeadm"),
        ("kubectl", "k8s.io/kubernetes/cmd/kubectl"),
    ],
};

/// scheduler-plugins v0.34.7's kube-scheduler (with its Coscheduling plugin) and the control
/// plane of the Kubernetes release it is built against, for the coscheduling test.
pub const COSCHEDULING: Release = Release {
    kubernetes: "v1.34.4",
    module: "hack/coscheduling",
    cache: "coscheduling-v0.34.7",
    binaries: &[
        ("etcd", "go.etcd.io/etcd/server/v3"),
        ("kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver"),
        ("kube-controller-manager", "k8s.io/kubernetes/cmd/kube-controller-manager"),
        ("kube-scheduler", "sigs.k8s.io/scheduler-plugins/cmd/scheduler"),
    ],
};

/// The binaries of a control plane.
const CONTROL_PLANE: usize = 4;

#[derive(Clone, Debug)]
pub struct Binaries {
    pub etcd: PathBuf,
    pub kube_apiserver: PathBuf,
    pub kube_controller_manager: PathBuf,
    pub kube_scheduler: PathBuf,
}

/// Why the control plane cannot be had on this machine: the tier skips, saying so.
#[derive(Debug)]
pub struct Unavailable(pub String);

/// The repository's root, found when run, never compiled in: clones share one build target (CI's
/// cache), and cargo does not rebuild a crate because its clone moved, so a compiled-in path can
/// name another clone, or one long gone. Cargo names the crate being tested or run in
/// `CARGO_MANIFEST_DIR`; a binary make runs starts in the root itself.
pub fn repo_root() -> PathBuf {
    let starts = [std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from), std::env::current_dir().ok()];
    starts
        .into_iter()
        .flatten()
        .find_map(|start| start.ancestors().find(|dir| is_root(dir)).map(Path::to_path_buf))
        .expect("run inside the repository (make and cargo do): no directory above holds Cargo.lock and .ci/run")
}

fn is_root(dir: &Path) -> bool {
    dir.join("Cargo.lock").is_file() && dir.join(".ci/run").is_file()
}

/// Where built binaries are kept, per version: outside the clone (`$DI_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/di-orchestrator`, else `~/.cache/di-orchestrator`), so a fresh clone on the
/// same machine, CI's among them, skips the 10-minute build. `root`'s git-ignored `.cache` is
/// the last resort, with no home to write to. kind/lib.sh names the same place.
pub fn cache_dir(root: &Path) -> PathBuf {
    release_dir(root, &MAIN)
}

fn release_dir(root: &Path, release: &Release) -> PathBuf {
    cache_base(root).join(release.cache).join(release.kubernetes)
}

/// The project's cache outside the clone, as [`cache_dir`] describes it.
pub fn cache_base(root: &Path) -> PathBuf {
    let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    env("DI_CACHE_DIR")
        .or_else(|| env("XDG_CACHE_HOME").map(|d| d.join("di-orchestrator")))
        .or_else(|| env("HOME").map(|d| d.join(".cache/di-orchestrator")))
        .unwrap_or_else(|| root.join(".cache"))
}

/// The version stamped into every binary, as Kubernetes' own release build does: kubeadm refuses
/// a binary without one, and `kubectl version` cannot parse the unstamped default.
fn version_ldflags(version: &str) -> String {
    let (major, minor) = {
        let mut parts = version.trim_start_matches('v').split('.');
        (parts.next().unwrap_or("1"), parts.next().unwrap_or("0"))
    };
    let mut flags = String::from("-s -w");
    for package in ["k8s.io/component-base/version", "k8s.io/client-go/pkg/version"] {
        for (name, value) in
            [("gitVersion", version), ("gitMajor", major), ("gitMinor", minor), ("gitTreeState", "clean")]
        {
            flags.push_str(&format!(" -X {package}.{name}={value}"));
        }
    }
    flags
}

/// Finds the control-plane tier's binaries, building the missing ones. `Ok(Err(_))` means the
/// toolchain to build them is truly missing; `Err(_)` means a build was tried and failed.
pub fn obtain(root: &Path) -> anyhow::Result<Result<Binaries, Unavailable>> {
    let assets = std::env::var_os("KUBEBUILDER_ASSETS").map(PathBuf::from);
    obtain_release(root, &MAIN, assets.as_deref())
}

/// As [`obtain`], for `release`'s control plane.
pub fn obtain_release(
    root: &Path,
    release: &Release,
    assets: Option<&Path>,
) -> anyhow::Result<Result<Binaries, Unavailable>> {
    let found = match find_or_build(root, release, &release.binaries[..CONTROL_PLANE], assets)? {
        Ok(found) => found,
        Err(why) => return Ok(Err(why)),
    };
    let [etcd, kube_apiserver, kube_controller_manager, kube_scheduler] =
        <[PathBuf; CONTROL_PLANE]>::try_from(found).expect("the control plane's binaries");
    Ok(Ok(Binaries { etcd, kube_apiserver, kube_controller_manager, kube_scheduler }))
}

/// Builds (or finds) every binary of the release and returns the folder that holds them all, for
/// the kind tier's node image.
pub fn obtain_all(root: &Path) -> anyhow::Result<Result<PathBuf, Unavailable>> {
    Ok(find_or_build(root, &MAIN, MAIN.binaries, None)?.map(|_| cache_dir(root)))
}

/// The kubectl of the release every tier runs (built on first use, as the others are), for
/// tests that run commands as a reader of the docs types them.
pub fn kubectl(root: &Path) -> anyhow::Result<Result<PathBuf, Unavailable>> {
    let kubectl = MAIN.binaries.iter().filter(|(name, _)| *name == "kubectl").copied().collect::<Vec<_>>();
    Ok(find_or_build(root, &MAIN, &kubectl, None)?.map(|mut found| found.remove(0)))
}

/// Locks `dir` (made if missing) for one build into it: the tests of a run ask for the same
/// binaries together, from threads and processes, so one builds while the others wait here and
/// then find what it built. Released when the returned file closes.
pub fn lock_folder(dir: &Path) -> anyhow::Result<std::fs::File> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let lock = std::fs::File::create(dir.join(".lock"))?;
    lock.lock().with_context(|| format!("locking {}", dir.display()))?;
    Ok(lock)
}

fn find_or_build(
    root: &Path,
    release: &Release,
    wanted: &[(&str, &str)],
    assets: Option<&Path>,
) -> anyhow::Result<Result<Vec<PathBuf>, Unavailable>> {
    let cache = release_dir(root, release);
    let mut missing = vec![];
    let mut found = vec![];
    for &(name, package) in wanted {
        let from_assets = assets.map(|dir| dir.join(name)).filter(|p| p.is_file());
        match from_assets.or_else(|| Some(cache.join(name)).filter(|p| p.is_file())) {
            Some(path) => found.push(path),
            None => {
                missing.push((name, package));
                found.push(cache.join(name));
            }
        }
    }
    if !missing.is_empty() {
        if Command::new("go").arg("version").output().is_err() {
            let names: Vec<_> = missing.iter().map(|(n, _)| *n).collect();
            return Ok(Err(Unavailable(format!(
                "{} not found in KUBEBUILDER_ASSETS or {}, and no Go toolchain to build them",
                names.join(", "),
                cache.display()
            ))));
        }
        // Tests that need a release start together (a scheduler's).
        let _lock = lock_folder(&cache)?;
        let missing: Vec<_> = missing.into_iter().filter(|(name, _)| !cache.join(name).is_file()).collect();
        build(root, release, &cache, &missing)?;
    }
    Ok(Ok(found))
}

fn build(root: &Path, release: &Release, cache: &Path, missing: &[(&str, &str)]) -> anyhow::Result<()> {
    let module = root.join(release.module);
    std::fs::create_dir_all(cache).with_context(|| format!("creating {}", cache.display()))?;
    for (name, package) in missing {
        eprintln!(
            "building {name} ({} {}) from Go modules (first run only; a few minutes)...",
            release.module, release.kubernetes
        );
        // Build beside the target and rename, so an interrupted build never leaves half a binary.
        let partial = cache.join(format!(".{name}.partial"));
        let status = Command::new("go")
            .args(["build", "-trimpath"])
            .arg(format!("-ldflags={}", version_ldflags(release.kubernetes)))
            .arg("-o")
            .arg(&partial)
            .arg(package)
            // Static, as Kubernetes releases them: the node image runs them from empty images.
            .env("CGO_ENABLED", "0")
            .current_dir(&module)
            .status()
            .with_context(|| format!("running go build for {name}"))?;
        if !status.success() {
            bail!("go build {package} failed ({status}); see the output above");
        }
        std::fs::rename(&partial, cache.join(name))?;
    }
    Ok(())
}

/// Where the Go module `module@version` that `release` pins lies, downloaded into Go's module
/// cache if it is not there yet (for files of it besides its binaries, such as CRDs).
pub fn module_dir(root: &Path, release: &Release, module: &str) -> anyhow::Result<PathBuf> {
    let output = Command::new("go")
        .args(["mod", "download", "-json", module])
        .current_dir(root.join(release.module))
        .output()
        .with_context(|| format!("running go mod download {module}"))?;
    if !output.status.success() {
        bail!("go mod download {module} failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    let answer: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    let dir = answer["Dir"].as_str().with_context(|| format!("go mod download {module} named no folder"))?;
    Ok(PathBuf::from(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_stay_in_step() {
        let root = repo_root();
        let go_mod = std::fs::read_to_string(root.join("hack/controlplane/go.mod")).unwrap();
        assert!(
            go_mod.lines().any(|l| l.trim() == format!("k8s.io/kubernetes {KUBERNETES_VERSION}")),
            "hack/controlplane/go.mod must require k8s.io/kubernetes {KUBERNETES_VERSION}"
        );
        let minor = KUBERNETES_VERSION.trim_start_matches('v').split('.').take(2).collect::<Vec<_>>().join("_");
        let cargo = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
        let feature = format!("\"v{minor}\"");
        assert!(
            cargo.lines().any(|l| l.starts_with("k8s-openapi") && l.contains(&feature)),
            "the workspace's k8s-openapi must use feature {feature} to match {KUBERNETES_VERSION}"
        );
        // Every staging module is pinned to the same release.
        let staging = format!("v0.{}", KUBERNETES_VERSION.trim_start_matches("v1."));
        for line in go_mod.lines().filter(|l| l.contains("=> k8s.io/")) {
            assert!(line.trim_end().ends_with(&staging), "{line} is not pinned to {staging}");
        }
        // The coscheduling test's control plane is the release its scheduler is built against.
        let cosched = std::fs::read_to_string(root.join(COSCHEDULING.module).join("go.mod")).unwrap();
        let pinned = format!("k8s.io/kubernetes => k8s.io/kubernetes {}", COSCHEDULING.kubernetes);
        assert!(cosched.lines().any(|l| l.trim() == pinned), "{} must pin {pinned}", COSCHEDULING.module);
        let plugins = COSCHEDULING.cache.trim_start_matches("coscheduling-");
        assert!(
            cosched.lines().any(|l| l.trim() == format!("sigs.k8s.io/scheduler-plugins {plugins}")),
            "{} must require scheduler-plugins {plugins}",
            COSCHEDULING.module
        );
        // The kind tier builds its node image from the same release.
        let kind = std::fs::read_to_string(root.join("kind/lib.sh")).unwrap();
        assert!(
            kind.lines().any(|l| l == format!("KUBERNETES_VERSION={KUBERNETES_VERSION}")),
            "kind/lib.sh must set KUBERNETES_VERSION={KUBERNETES_VERSION}"
        );
    }
}
