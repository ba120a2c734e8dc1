//! Task jobs (DI-orchestrator 1.x's `v2alpha1`) against a real API server: one beside a 0.2 job,
//! every pod's environment accepted by DI-engine's own K8SParser (and, on real nodes, every
//! peer's FQDN resolved from inside a pod); a failure with a whole-job restart, scaling a task,
//! success and cleanup; and each example job reaching Running.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};

use di_api::tasks::annotations;
use di_api::{DIJob, Phase};
use di_e2e::binaries::repo_root;
use di_e2e::cluster::{not_applicable, until_watched, within};
use di_e2e::nodes::real_nodes;
use di_e2e::scenario::{Scenario, WAIT, names};
use k8s_openapi::api::core::v1::{PersistentVolume, Pod};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

fn env_of(pod: &Pod) -> BTreeMap<String, String> {
    let container = &pod.spec.as_ref().unwrap().containers[0];
    container.env.iter().flatten().map(|e| (e.name.clone(), e.value.clone().unwrap_or_default())).collect()
}

/// A task job as a 1.x user writes it, submitted under `v2alpha1`.
async fn submit_v2(s: &Scenario, name: &str, collectors: i32, extra: Value) {
    let template = json!({"spec": s.nodes.pod_spec()});
    let mut job = json!({
        "apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob",
        "metadata": {"name": name},
        "spec": {"tasks": [
            {"type": "learner", "template": template},
            {"type": "evaluator", "template": template},
            {"type": "collector", "replicas": collectors, "template": template},
        ]},
    });
    di_e2e::scenario::merge(&mut job["spec"], extra);
    let gvk = GroupVersionKind::gvk("diengine.opendilab.org", "v2alpha1", "DIJob");
    let api: Api<DynamicObject> = Api::namespaced_with(s.cluster.client.clone(), &s.ns, &ApiResource::from_gvk(&gvk));
    let object: DynamicObject = serde_json::from_value(job).unwrap();
    api.create(&PostParams::default(), &object).await.expect("v2alpha1 job accepted");
}

/// Runs DI-engine's own K8SParser (installed from PyPI by hack/ding/setup.sh) on every pod's
/// environment, for the mesh, star and alone topologies. `false` when it could not run.
fn ditask_accepts(pods: &[Pod]) -> bool {
    let Some(python) = di_e2e::ding::python() else { return false };
    let input =
        json!({"pods": pods.iter().map(|p| json!({"name": p.name_any(), "env": env_of(p)})).collect::<Vec<_>>()});
    let mut child = Command::new(python)
        .arg(repo_root().join("hack/ding/k8s_parser_check.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running the parser check");
    child.stdin.take().unwrap().write_all(input.to_string().as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "DI-engine's K8SParser refused a pod's environment:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    true
}

/// On real nodes, once the job's Service lists every pod under its hostname (the EndpointSlice
/// controller follows the same pod updates the job's status does, and may follow them later),
/// every address in `DI_NODES` resolves from inside each of `pods`.
async fn peers_resolve(s: &Scenario, service: &str, pods: &[Pod]) {
    let hostnames: Vec<String> = pods.iter().map(|p| p.name_any()).collect();
    let slices: Api<EndpointSlice> = Api::namespaced(s.cluster.client.clone(), &s.ns);
    let config = watcher::Config::default().labels(&format!("kubernetes.io/service-name={service}"));
    let what = format!("Service {service} to list {hostnames:?}");
    until_watched(slices, config, (), WAIT, &what, |all| {
        let listed: Vec<&str> = all
            .iter()
            .flat_map(|slice| slice.endpoints.iter().flatten())
            .filter_map(|e| e.hostname.as_deref())
            .collect();
        hostnames.iter().all(|h| listed.contains(&h.as_str())).then_some(())
    })
    .await;
    for pod in hostnames {
        resolves_from(s, &pod).await;
    }
}

async fn resolves_from(s: &Scenario, pod: &str) {
    let script =
        "for n in $(echo \"$DI_NODES\" | tr , ' '); do nslookup \"$n\" >/dev/null || { echo \"$n\"; exit 1; }; done";
    let params = kube::api::AttachParams::default().container("di-container").stdout(true).stderr(true);
    let mut process = s.pods.exec(pod, ["sh", "-c", script], &params).await.expect("exec");
    let mut stdout = String::new();
    if let Some(mut stream) = process.stdout() {
        use tokio::io::AsyncReadExt;
        let _ = stream.read_to_string(&mut stdout).await;
    }
    let status = process.take_status().unwrap().await;
    let ok = status.as_ref().and_then(|s| s.status.as_deref()) == Some("Success");
    assert!(ok, "from {pod}, a peer's FQDN did not resolve: {stdout} ({status:?})");
}

async fn wait_restarts(s: &Scenario, name: &str, restarts: i32) -> DIJob {
    let cond = move |job: Option<&DIJob>| {
        job.and_then(|j| j.status.as_ref())
            .is_some_and(|st| st.restarts == Some(restarts) && st.phase == Some(Phase::Running))
    };
    let what = format!("job {name} Running after {restarts} restart(s)");
    within(WAIT, &what, await_condition(s.jobs.clone(), name, cond)).await.unwrap().unwrap()
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn a_task_job_runs_beside_a_0_2_job_and_ditask_accepts_every_pod() {
    let s = Scenario::new("tasks").await;
    s.submit("legacy", 1, 1, json!({})).await;
    submit_v2(&s, "mesh", 2, json!({})).await;
    let expected = names("mesh", &["learner-0", "evaluator-0", "collector-0", "collector-1"]);
    let pods = s.wait_pods("mesh", &expected).await;
    s.wait_services("mesh", &["di-mesh".to_string()]).await;
    let job = s.wait_phase("mesh", Phase::Running).await;
    s.wait_phase("legacy", Phase::Running).await;

    let status = job.status.unwrap();
    assert_eq!((status.replicas, status.restarts), (Some(4), Some(0)));
    assert_eq!(status.task_status["collector"]["Running"], 2);
    let mut by_rank = pods.clone();
    by_rank.sort_by_key(|p| p.annotations()[annotations::RANK].parse::<u32>().unwrap());
    let fqdn = |pod: &str| format!("{pod}.di-mesh.{}.svc.cluster.local", s.ns);
    let nodes =
        ["learner-0", "evaluator-0", "collector-0", "collector-1"].map(|p| fqdn(&format!("mesh-{p}"))).join(",");
    for (rank, pod) in by_rank.iter().enumerate() {
        let env = env_of(pod);
        assert_eq!(env["DI_RANK"], rank.to_string());
        assert_eq!(env["DI_NODES"], nodes);
        assert_eq!(env["DI_JOB_ID"], format!("{}/mesh", s.ns));
        assert_eq!(env["DI_COLLECTOR_NODES"], [fqdn("mesh-collector-0"), fqdn("mesh-collector-1")].join(","));
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(
            (spec.hostname.as_deref(), spec.subdomain.as_deref()),
            (Some(pod.name_any().as_str()), Some("di-mesh"))
        );
        assert!(!env.contains_key("KUBERNETES_SERVER_URL"), "a task job has no replica endpoint");
    }
    ditask_accepts(&by_rank);
    if real_nodes() {
        peers_resolve(&s, "di-mesh", &by_rank).await;
    }

    // A failed collector is replaced alone, under its name (restartPolicy Pod, the default), as
    // DI-orchestrator 1.x does: restarts 1, the other pods untouched.
    s.nodes.exit(&s.ns, "mesh-collector-1", 1).await;
    wait_restarts(&s, "mesh", 1).await;
    let after = s.wait_pods("mesh", &expected).await;
    for pod in &after {
        let before = pods.iter().find(|p| p.name_any() == pod.name_any()).unwrap();
        let replaced = pod.uid() != before.uid();
        assert_eq!(replaced, pod.name_any() == "mesh-collector-1", "{} replaced: {replaced}", pod.name_any());
    }

    // One schema under both versions: the job reads back whole under 0.2's version too.
    let as_v1 = s.jobs.get("mesh").await.unwrap();
    assert_eq!(as_v1.spec.tasks.as_ref().map(Vec::len), Some(3));
    let out = s.cluster.kubectl(&["get", "dijobs", "-n", &s.ns]).expect("kubectl");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("READY") && table.contains("RESTARTS"), "{table}");
    assert!(table.lines().any(|l| l.starts_with("mesh ") && l.contains("Running")), "{table}");
    assert!(table.lines().any(|l| l.starts_with("legacy ") && l.contains("Running")), "{table}");
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn a_task_job_restarts_whole_scales_succeeds_and_is_cleaned_up() {
    let s = Scenario::new("task-life").await;
    submit_v2(&s, "sync", 2, json!({"restartPolicy": "Job"})).await;
    let expected = names("sync", &["learner-0", "evaluator-0", "collector-0", "collector-1"]);
    let before = s.wait_pods("sync", &expected).await;
    s.wait_phase("sync", Phase::Running).await;

    // One collector fails: with restartPolicy Job every pod is replaced, in one step.
    s.nodes.exit(&s.ns, "sync-collector-1", 1).await;
    wait_restarts(&s, "sync", 1).await;
    let after = s.wait_pods("sync", &expected).await;
    let old: Vec<String> = before.iter().filter_map(|p| p.uid()).collect();
    assert!(after.iter().all(|p| !old.contains(&p.uid().unwrap())), "every pod was replaced");

    // Scaling a task rebuilds every pod with the new peer list.
    let patch = json!({"spec": {"tasks": [
        {"type": "learner", "template": {"spec": s.nodes.pod_spec()}},
        {"type": "evaluator", "template": {"spec": s.nodes.pod_spec()}},
        {"type": "collector", "replicas": 3, "template": {"spec": s.nodes.pod_spec()}},
    ]}});
    s.jobs.patch("sync", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("scaling accepted");
    let expected = names("sync", &["learner-0", "evaluator-0", "collector-0", "collector-1", "collector-2"]);
    let scaled = s.wait_pods("sync", &expected).await;
    let job = s.wait_phase("sync", Phase::Running).await;
    assert_eq!(job.status.as_ref().and_then(|st| st.replicas), Some(5));
    for pod in &scaled {
        assert_eq!(env_of(pod)["DI_NODES"].split(',').count(), 5, "{} has the new peer list", pod.name_any());
        assert_eq!(pod.annotations()[annotations::PEERS], "learner=1,evaluator=1,collector=3");
    }

    // The learner decides: its success is the job's, and the running pods are cleaned up.
    s.nodes.exit(&s.ns, "sync-learner-0", 0).await;
    s.wait_phase("sync", Phase::Succeeded).await;
    s.wait_pods("sync", &names("sync", &["learner-0"])).await;
    s.wait_services("sync", &[]).await;
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn every_task_example_reaches_running() {
    if real_nodes() {
        not_applicable("the examples' images (ding, Sample Factory, SRL) are not on the kind nodes");
        return;
    }
    let s = Scenario::new("task-examples").await;
    // SRL's example shares a ReadWriteMany claim; a real cluster's NFS or CephFS provisioner
    // would make its volume, and here an admin's pre-made one stands in (named for this run:
    // volumes are cluster-wide).
    let volume = json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": format!("{}-srl-data", s.ns)},
        "spec": {
            "capacity": {"storage": "20Gi"}, "accessModes": ["ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Delete",
            "claimRef": {"namespace": s.ns, "name": "srl-atari-data"},
            "hostPath": {"path": "/tmp/srl-atari-data"},
        },
    });
    let volumes: Api<PersistentVolume> = Api::all(s.cluster.client.clone());
    volumes.create(&PostParams::default(), &serde_json::from_value(volume).unwrap()).await.expect("the shared volume");
    for (file, job) in
        [("ditask-cartpole.yaml", "ditask-cartpole"), ("sample-factory.yaml", "sf-appo"), ("srl.yaml", "srl-atari")]
    {
        let out =
            s.cluster.kubectl(&["apply", "-n", &s.ns, "-f", &format!("manifests/examples/{file}")]).expect("kubectl");
        assert!(out.status.success(), "{file}: {}", String::from_utf8_lossy(&out.stderr));
        s.wait_phase(job, Phase::Running).await;
    }
    volumes.delete(&format!("{}-srl-data", s.ns), &Default::default()).await.expect("removing the volume");
}
