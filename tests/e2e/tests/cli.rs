//! `kubectl di`, the real binary, against the cluster under test: create --wait, get, describe,
//! replicas add/delete/restart/list, suspend/resume, delete, and install/uninstall, each checked
//! against the cluster's state. One test, in order: install and uninstall touch cluster-wide
//! objects the other scenarios rely on.

use std::process::Output;

use di_api::{DIJob, Phase};
use di_e2e::orchestrator::binary;
use di_e2e::scenario::{Scenario, names};
use kube::api::ListParams;
use kube::{Api, ResourceExt};

/// Runs the plugin without blocking the test's runtime, which drives the simulated nodes.
async fn kubectl_di(s: &Scenario, args: &[&str]) -> Output {
    tokio::process::Command::new(binary("kubectl-di"))
        .args(args)
        .args(["-n", &s.ns, "--kubeconfig"])
        .arg(&s.cluster.kubeconfig)
        .current_dir(di_e2e::binaries::repo_root())
        .output()
        .await
        .expect("running kubectl-di")
}

fn ok(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "kubectl di failed: {}{stdout}", String::from_utf8_lossy(&out.stderr));
    stdout
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn the_plugin_does_what_its_help_says() {
    let s = Box::pin(Scenario::new("cli")).await;
    let image = if di_e2e::nodes::real_nodes() { di_e2e::nodes::REAL_IMAGE } else { "ding" };
    let command = di_e2e::nodes::WAIT_FOR_EXIT;

    // A bad job is refused before anything reaches the cluster, with the field named.
    let out = kubectl_di(&s, &["create", "-f", "manifests/examples/invalid.yaml"]).await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("error: DIJob invalid-job is invalid: spec.cleanPodPolicy: Unsupported value \"Sometimes\""),
        "{stderr}"
    );
    assert!(s.jobs.get_opt("invalid-job").await.unwrap().is_none());

    // Dry runs store nothing.
    ok(&kubectl_di(&s, &["create", "quick", "--image", image, "--dry-run=server"]).await);
    assert!(s.jobs.get_opt("quick").await.unwrap().is_none());

    // The quick form, waited for: Running with every replica ready.
    let out = ok(&kubectl_di(
        &s,
        &[
            "create",
            "quick",
            "--image",
            image,
            "--command",
            command,
            "--collectors",
            "2",
            "--learners",
            "1",
            "--wait",
            "--timeout",
            "90",
        ],
    )
    .await);
    assert_eq!(out, "dijob.diengine.opendilab.org/quick created\n");
    let job: DIJob = s.jobs.get("quick").await.unwrap();
    assert_eq!(job.status.unwrap().phase, Some(Phase::Running));

    let table = ok(&kubectl_di(&s, &["get"]).await);
    let row: Vec<&str> = table.lines().nth(1).unwrap_or_default().split_whitespace().collect();
    assert_eq!(&row[..6], ["quick", "Running", "4/4", "0", "2/2", "1/1"], "{table}");
    let yaml = ok(&kubectl_di(&s, &["get", "quick", "-o", "yaml"]).await);
    let parsed: DIJob = serde_yaml::from_str(&yaml).unwrap();
    assert_eq!(parsed.spec.collector_replicas(), 2);
    assert_eq!(ok(&kubectl_di(&s, &["get", "-o", "name"]).await), "dijob.diengine.opendilab.org/quick\n");

    let description = ok(&kubectl_di(&s, &["describe", "quick"]).await);
    assert!(description.contains("Phase:              Running"), "{description}");
    assert!(description.contains(&format!("quick-collector-1.{}:22270", s.ns)), "{description}");

    // Scaling, through the same rules as the replica endpoint.
    let out = ok(&kubectl_di(&s, &["replicas", "add", "quick", "--collectors", "2", "--timeout", "90"]).await);
    assert!(out.contains("pod/quick-collector-3 added"), "{out}");
    s.wait_pods(
        "quick",
        &names("quick", &["coordinator", "collector-0", "collector-1", "collector-2", "collector-3", "learner-0"]),
    )
    .await;
    ok(&kubectl_di(&s, &["replicas", "delete", "quick", "--collectors", "3", "--learners", "1", "--timeout", "90"])
        .await);
    s.wait_pods("quick", &names("quick", &["coordinator", "collector-0"])).await;
    let out = kubectl_di(&s, &["replicas", "delete", "quick", "--collectors", "5"]).await;
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot delete 5 collectors: the job has 1"));

    let before = s.pods.get("quick-collector-0").await.unwrap().uid();
    assert_eq!(
        ok(&kubectl_di(&s, &["replicas", "restart", "quick", "quick-collector-0"]).await),
        "pod/quick-collector-0 restarted\n"
    );
    assert_ne!(s.pods.get("quick-collector-0").await.unwrap().uid(), before);
    let list = ok(&kubectl_di(&s, &["replicas", "list", "quick"]).await);
    assert!(list.starts_with("POD") && list.contains("quick-collector-0"), "{list}");

    ok(&kubectl_di(&s, &["suspend", "quick"]).await);
    s.wait_pods("quick", &[]).await;
    ok(&kubectl_di(&s, &["resume", "quick"]).await);
    s.wait_pods("quick", &names("quick", &["coordinator", "collector-0"])).await;

    ok(&kubectl_di(&s, &["delete", "quick", "--wait"]).await);
    assert!(s.jobs.get_opt("quick").await.unwrap().is_none());
    let left = s.pods.list(&ListParams::default()).await.unwrap().items;
    assert!(
        left.is_empty(),
        "--wait waits for the job's pods too: {:?}",
        left.iter().map(|p| p.name_any()).collect::<Vec<_>>()
    );

    let version = ok(&kubectl_di(&s, &["version"]).await);
    assert!(version.starts_with(&format!("client: kubectl-di {}\n", env!("CARGO_PKG_VERSION"))), "{version}");
    assert!(version.contains("\nserver: "), "{version}");
    assert!(version.contains("crd: dijobs.diengine.opendilab.org serves v1alpha1 (stored), v2alpha1"), "{version}");
    let completion = ok(&kubectl_di(&s, &["completion", "bash"]).await);
    assert!(completion.contains("kubectl-di"), "a bash completion script");

    if di_e2e::nodes::real_nodes() {
        return; // On kind the orchestrator is installed by kind/up.sh and stays.
    }
    // Install without waiting (no kubelet runs the orchestrator here), then uninstall.
    let out = ok(&kubectl_di(&s, &["install", "--no-wait", "--image", "example/di-orchestrator:test"]).await);
    assert!(out.contains("deployment/di-orchestrator serverside-applied"), "{out}");
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(s.cluster.client.clone(), "di-system");
    let deployment = deployments.get("di-orchestrator").await.unwrap();
    let containers = deployment.spec.template.spec.unwrap().containers;
    assert_eq!(containers[0].image.as_deref(), Some("example/di-orchestrator:test"));
    let version = ok(&kubectl_di(&s, &["version"]).await);
    assert!(version.contains("server: example/di-orchestrator:test (di-system/di-orchestrator"), "{version}");
    assert!(version.contains("warning: the plugin is"), "another version than the plugin's is pointed out: {version}");
    let out = ok(&kubectl_di(&s, &["uninstall", "--keep-crds"]).await);
    assert!(out.contains("validatingwebhookconfiguration/di-orchestrator deleted"), "{out}");
    // And what the orchestrator made outside the manifests: the replica endpoints' policy and
    // this namespace's shared identity (its job above had a coordinator).
    assert!(out.contains("validatingadmissionpolicy/di-replicas deleted"), "{out}");
    assert!(out.contains(&format!("serviceaccount/di-replicas in {} deleted", s.ns)), "{out}");
    assert!(deployments.get_opt("di-orchestrator").await.unwrap().is_none());
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn the_plugin_runs_task_jobs() {
    let s = Box::pin(Scenario::new("cli-tasks")).await;
    let image = if di_e2e::nodes::real_nodes() { di_e2e::nodes::REAL_IMAGE } else { "ding" };
    let command = format!("command={}", di_e2e::nodes::WAIT_FOR_EXIT);
    let (learner, collector) =
        (format!("name=learner,type=learner,{command}"), format!("name=collector,type=collector,replicas=2,{command}"));
    let args =
        ["create", "mesh", "--image", image, "--task", &learner, "--task", &collector, "--wait", "--timeout", "90"];
    assert_eq!(ok(&kubectl_di(&s, &args).await), "dijob.diengine.opendilab.org/mesh created\n");

    let out = kubectl_di(&s, &["replicas", "add", "mesh", "--task", "collector", "1", "--timeout", "90"]).await;
    assert_eq!(ok(&out), "dijob.diengine.opendilab.org/mesh: task collector 2 -> 3 pods\n");
    let note = String::from_utf8_lossy(&out.stderr);
    assert!(note.contains("all 4 pods of the job are rebuilt in one step"), "{note}");
    let pods = s.wait_pods("mesh", &names("mesh", &["learner-0", "collector-0", "collector-1", "collector-2"])).await;
    assert!(pods.iter().all(|p| p.annotations()["diengine.opendilab.org/peers"] == "learner=1,collector=3"));

    let table = ok(&kubectl_di(&s, &["get"]).await);
    let row: Vec<&str> = table.lines().nth(1).unwrap_or_default().split_whitespace().collect();
    assert_eq!(&row[..6], ["mesh", "Running", "4/4", "0", "-", "-"], "{table}");
    let text = ok(&kubectl_di(&s, &["describe", "mesh"]).await);
    assert!(text.contains("Restarts:           0 of at most 3"), "{text}");
    assert!(text.contains("mesh-collector-2.di-mesh."), "{text}");
    let out = kubectl_di(&s, &["replicas", "delete", "mesh", "--task", "learner", "1"]).await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("task learner has 1 pod(s); 0 is outside"), "{out:?}");
}
