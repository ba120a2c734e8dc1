//! Upgrading the orchestrator under running jobs, on kind, by each way users install it: the
//! previous release (kind/previous.sh: the tree at kind/lib.sh's PREVIOUS_RELEASE, its own image,
//! CRDs, RBAC and Deployment) installed, a role job, a task job (one gang) and a queued job run
//! under it, then the current version installed over it by `kubectl apply -k`, `helm upgrade`
//! and `kubectl di install`. Each time: no pod of the jobs replaced (the same UIDs), no job's phase
//! other than Running meanwhile and no restart counted, the CRD changed in place (its UID kept,
//! the new field there), and the new orchestrator drives the jobs the old one started (a scale);
//! DIJobs are asked for all along (dry runs), and what was refused is reported: a previous
//! release from before the webhook's drain closes its port at once when it stops; one with it
//! must refuse none. Last, the current release rolled under such dry runs refuses none (it
//! answers through a drain as it stops). One test, in order: each path replaces the cluster-wide
//! objects of the one before, and the last leaves the cluster as kind/up.sh made it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use di_api::Phase;
use di_e2e::admissions::{Admissions, Asked};
use di_e2e::binaries::repo_root;
use di_e2e::cluster::{not_applicable, skip};
use di_e2e::commands::output;
use di_e2e::kueue::TestQueue;
use di_e2e::kueue::jobs::submit;
use di_e2e::nodes::real_nodes;
use di_e2e::orchestrator::{binary, webhook_settled};
use di_e2e::scenario::{Scenario, names};
use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use serde_json::json;

const CRD: &str = "dijobs.diengine.opendilab.org";

/// Runs a command against the cluster under test, from the repository; its stdout.
async fn run(program: impl AsRef<std::ffi::OsStr>, args: &[&str], kubeconfig: &Path) -> String {
    let mut command = tokio::process::Command::new(program);
    output(command.args(args).env("KUBECONFIG", kubeconfig).current_dir(repo_root())).await
}

async fn rolled_out(kubeconfig: &Path) {
    let args = ["-n", "di-system", "rollout", "status", "deployment/di-orchestrator", "--timeout=180s"];
    run("kubectl", &args, kubeconfig).await;
}

/// The jobs running under the previous release, and what they were before the upgrade.
struct Running {
    s: Scenario,
    queue: TestQueue,
    /// Each pod's name and UID.
    pods: BTreeMap<String, String>,
    /// Every phase any of the jobs showed since they all ran, by job.
    phases: Arc<Mutex<BTreeMap<String, Vec<Phase>>>>,
    watch: tokio::task::JoinHandle<()>,
    crd_uid: String,
}

const JOBS: [&str; 3] = ["role", "task", "queued"];

impl Running {
    /// A role job, a task job (v2alpha1, one gang) and a job in a Kueue queue, all Running.
    async fn start(hint: &str) -> Running {
        let s = Box::pin(Scenario::new(hint)).await;
        webhook_settled(&s.cluster.client).await;
        s.submit("role", 1, 1, json!({})).await;
        let template = json!({"spec": s.nodes.pod_spec()});
        let task = json!({
            "apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob", "metadata": {"name": "task"},
            "spec": {"tasks": [{"type": "learner", "template": template}, {"type": "collector", "replicas": 1, "template": template}]},
        });
        let gvk = GroupVersionKind::gvk("diengine.opendilab.org", "v2alpha1", "DIJob");
        let tasks: Api<DynamicObject> =
            Api::namespaced_with(s.cluster.client.clone(), &s.ns, &ApiResource::from_gvk(&gvk));
        tasks.create(&PostParams::default(), &serde_json::from_value(task).unwrap()).await.expect("task job accepted");
        let queue =
            TestQueue::create(&s.cluster.client, &s.ns, "team-queue", &[("cpu", "1"), ("memory", "100Gi")]).await;
        submit(&s, "queued", "team-queue", 1, None).await;
        for job in JOBS {
            s.wait_phase(job, Phase::Running).await;
        }
        let listed = s.pods.list(&ListParams::default()).await.unwrap().items;
        let pods = listed.iter().map(|p| (p.name_any(), p.uid().unwrap())).collect();
        let phases = Arc::new(Mutex::new(BTreeMap::new()));
        let seen = phases.clone();
        let stream = watcher(s.jobs.clone(), watcher::Config::default());
        let watch = tokio::spawn(async move {
            let mut jobs = std::pin::pin!(stream.applied_objects());
            while let Some(Ok(job)) = jobs.next().await {
                let mut seen = seen.lock().unwrap();
                let phases: &mut Vec<Phase> = seen.entry(job.name_any()).or_default();
                if let Some(phase) = job.status.and_then(|s| s.phase).filter(|p| phases.last() != Some(p)) {
                    phases.push(phase);
                }
            }
        });
        let crds: Api<CustomResourceDefinition> = Api::all(s.cluster.client.clone());
        let crd_uid = crds.get(CRD).await.unwrap().uid().unwrap();
        Running { s, queue, pods, phases, watch, crd_uid }
    }

    /// Dry runs of a DIJob asked for from now on, as a user applying jobs through the upgrade.
    async fn ask(&self) -> Admissions {
        Admissions::start(&self.s.cluster.kubeconfig, &self.s.ns).await
    }

    /// After the upgrade: the jobs ran on untouched, the CRD is the same object with the current
    /// schema, and the new orchestrator scales a job the old one started. DIJobs refused while it
    /// rolled are reported, and fail the test when the previous release `drains` too.
    async fn ran_on(self, asked: Asked, path: &str, drains: bool) {
        println!("{path}: {} DIJobs asked for during the upgrade, {} refused", asked.answered, asked.refused.len());
        for refusal in &asked.refused {
            println!("  {refusal}");
        }
        assert!(!drains || asked.refused.is_empty(), "{path}: DIJobs refused during the upgrade: {:?}", asked.refused);
        assert!(asked.answered > 0, "{path}: no DIJob was asked for");
        let listed = self.s.pods.list(&ListParams::default()).await.unwrap().items;
        let now: BTreeMap<String, String> = listed.iter().map(|p| (p.name_any(), p.uid().unwrap())).collect();
        assert_eq!(now, self.pods, "{path}: the jobs' pods are the ones the previous release made");
        for job in JOBS {
            let status = self.s.jobs.get(job).await.unwrap().status.unwrap_or_default();
            assert_eq!(status.phase, Some(Phase::Running), "{path}: {job}: {status:?}");
            assert_eq!(status.restarts.unwrap_or(0), 0, "{path}: {job}: {status:?}");
        }
        let phases = self.phases.lock().unwrap().clone();
        for job in JOBS {
            assert_eq!(phases.get(job).map(Vec::as_slice), Some(&[Phase::Running][..]), "{path}: {job}'s phases");
        }
        let crds: Api<CustomResourceDefinition> = Api::all(self.s.cluster.client.clone());
        let crd = crds.get(CRD).await.unwrap();
        assert_eq!(crd.uid().unwrap(), self.crd_uid, "{path}: the CRD was changed in place");
        let schema = serde_json::to_value(&crd.spec.versions[0].schema).unwrap();
        let spec = &schema["openAPIV3Schema"]["properties"]["spec"]["properties"];
        assert!(spec.get("managedBy").is_some(), "{path}: the CRD has the current schema");

        // The new orchestrator drives what the old one started (once the webhook's Service no
        // longer sends a call to a stopped replica of a release that does not drain).
        webhook_settled(&self.s.cluster.client).await;
        let patch = json!({"spec": {"collector": {"replicas": 2}}});
        self.s.jobs.patch("role", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
        self.s.wait_pods("role", &names("role", &["coordinator", "collector-0", "collector-1", "learner-0"])).await;
        let collector = self.s.pods.get("role-collector-0").await.unwrap();
        assert_eq!(collector.uid(), self.pods.get("role-collector-0").cloned(), "{path}: scaling kept the collector");
        self.watch.abort();
        self.queue.delete().await;
    }
}

#[tokio::test]
#[ignore = "kind tier: run with `make e2e`"]
async fn each_install_path_upgrades_the_previous_release_under_running_jobs() {
    if !real_nodes() {
        not_applicable("no kubelet runs the orchestrator's own pods here (kind tier only)");
        return;
    }
    let (Some(helm), Some(previous)) = (
        std::env::var_os("DI_E2E_HELM").filter(|h| !h.is_empty()),
        std::env::var_os("DI_E2E_PREVIOUS").filter(|p| !p.is_empty()).map(PathBuf::from),
    ) else {
        skip("DI_E2E_HELM names no helm binary or DI_E2E_PREVIOUS no previous release (make e2e sets both)");
        return;
    };
    let cluster = di_e2e::cluster::connect().await;
    let kubeconfig = cluster.kubeconfig.clone();
    let kubeconfig_arg = kubeconfig.to_str().expect("a UTF-8 path");
    let kubectl_di = binary("kubectl-di");
    // A release before the webhook's drain (di_webhook's Limits::drain) closes its port at once
    // when it stops, while the API server's calls still reach it for a moment: its refusals are
    // reported, not failed on. One that drains refuses none.
    let limits = std::fs::read_to_string(previous.join("pkg/webhook/src/limits.rs")).unwrap_or_default();
    let drains = limits.contains("pub drain: Duration");
    let previous_arg = |path: &str| previous.join(path).to_string_lossy().into_owned();
    let uninstall = ["uninstall", "--keep-crds", "--kubeconfig", kubeconfig_arg];
    let apply_previous = ["apply", "--server-side", "--force-conflicts", "-k", &previous_arg("kind/previous")];
    let apply_current = ["apply", "--server-side", "--force-conflicts", "-k", "kind/overlay"];

    // kubectl apply -k over the previous release's.
    run(&kubectl_di, &uninstall, &kubeconfig).await;
    run("kubectl", &apply_previous, &kubeconfig).await;
    rolled_out(&kubeconfig).await;
    let jobs = Running::start("upgrade-kustomize").await;
    let asked = jobs.ask().await;
    run("kubectl", &apply_current, &kubeconfig).await;
    rolled_out(&kubeconfig).await;
    jobs.ran_on(asked.stop().await, "kubectl apply -k", drains).await;

    // helm upgrade over the previous release's chart; the CRDs first, as Helm never changes them.
    run(&kubectl_di, &uninstall, &kubeconfig).await;
    // The release record a failed run may have left behind.
    run(&helm, &["uninstall", "di-orchestrator", "--ignore-not-found", "--wait"], &kubeconfig).await;
    let previous_crds = previous_arg("charts/di-orchestrator/crds");
    run("kubectl", &["apply", "--server-side", "--force-conflicts", "-f", &previous_crds], &kubeconfig).await;
    let chart = previous_arg("charts/di-orchestrator");
    let values = ["--set", "namespace.create=false", "--wait", "--timeout", "3m"];
    let install = [&["install", "di-orchestrator", &chart, "--set", "image.tag=previous"][..], &values].concat();
    run(&helm, &install, &kubeconfig).await;
    let jobs = Running::start("upgrade-helm").await;
    let asked = jobs.ask().await;
    let crds = ["apply", "--server-side", "--force-conflicts", "-f", "charts/di-orchestrator/crds"];
    run("kubectl", &crds, &kubeconfig).await;
    let upgrade = [&["upgrade", "di-orchestrator", "charts/di-orchestrator", "--set", "image.tag=dev"][..], &values];
    run(&helm, &upgrade.concat(), &kubeconfig).await;
    jobs.ran_on(asked.stop().await, "helm upgrade", drains).await;
    run(&helm, &["uninstall", "di-orchestrator", "--wait"], &kubeconfig).await;

    // kubectl di install (returns once a dry-run DIJob goes through the webhook) over the
    // previous release's kubectl apply -k.
    run("kubectl", &apply_previous, &kubeconfig).await;
    rolled_out(&kubeconfig).await;
    let jobs = Running::start("upgrade-plugin").await;
    let asked = jobs.ask().await;
    let install = ["install", "--image", "opendilab/di-orchestrator:dev", "--timeout", "180", "--kubeconfig"];
    let out = run(&kubectl_di, &[&install[..], &[kubeconfig_arg]].concat(), &kubeconfig).await;
    assert!(out.contains("its webhook answers"), "{out}");
    rolled_out(&kubeconfig).await;
    jobs.ran_on(asked.stop().await, "kubectl di install", drains).await;

    // kind/up.sh's own install, which the rest of the suite runs against; then the current
    // release rolled under DIJobs asked for all along: its replicas answer through their stop.
    run("kubectl", &apply_current, &kubeconfig).await;
    rolled_out(&kubeconfig).await;
    webhook_settled(&cluster.client).await;
    let s = Box::pin(Scenario::new("upgrade-rolled")).await;
    let asked = Admissions::start(&kubeconfig, &s.ns).await;
    run("kubectl", &["-n", "di-system", "rollout", "restart", "deployment/di-orchestrator"], &kubeconfig).await;
    rolled_out(&kubeconfig).await;
    let asked = asked.stop().await;
    assert!(asked.refused.is_empty(), "DIJobs refused while the current release rolled: {:?}", asked.refused);
    println!("the current release rolled: {} DIJobs asked for meanwhile, none refused", asked.answered);
}
