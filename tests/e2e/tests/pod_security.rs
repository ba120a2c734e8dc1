//! Jobs in a namespace that enforces Pod Security's `restricted` profile, as many real clusters'
//! do: when the user's own containers comply, what the orchestrator adds (the coordinator's
//! replica-endpoint sidecar) must not get the pod refused. The API server enforces the profile on
//! both tiers (the PodSecurity admission plugin is on by default), and the test first shows that
//! it does: the same coordinator pod with the sidecar as it was before it complied is refused.

use di_api::Phase;
use di_e2e::scenario::{Scenario, names};
use k8s_openapi::api::core::v1::{Namespace, Pod, SecurityContext};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

/// A pod spec whose containers meet `restricted` on their own, container by container, so the
/// pod level sets nothing the sidecar could inherit. Its `/tmp` is an emptyDir: on real nodes the
/// container, no longer root, must still write its exit code there.
fn compliant(s: &Scenario) -> Value {
    let mut spec = s.nodes.pod_spec();
    let container = &mut spec["containers"][0];
    container["securityContext"] = json!({
        "allowPrivilegeEscalation": false,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": true,
        "runAsUser": 1000,
        "seccompProfile": {"type": "RuntimeDefault"},
    });
    container["volumeMounts"] = json!([{"name": "tmp", "mountPath": "/tmp"}]);
    spec["volumes"] = json!([{"name": "tmp", "emptyDir": {}}]);
    spec
}

/// A scenario whose namespace enforces `restricted`.
async fn restricted(hint: &str) -> Scenario {
    let s = Scenario::new(hint).await;
    let namespaces: Api<Namespace> = Api::all(s.cluster.client.clone());
    let labels = json!({"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest",
    }}});
    namespaces.patch(&s.ns, &PatchParams::default(), &Patch::Merge(&labels)).await.expect("labelling the namespace");
    s
}

/// Creates `pod` as a dry run: what admission says, with nothing stored.
async fn admitted(s: &Scenario, pod: &Pod) -> Result<(), String> {
    let params = PostParams { dry_run: true, ..Default::default() };
    s.pods.create(&params, pod).await.map(|_| ()).map_err(|e| e.to_string())
}

/// A new pod with `pod`'s spec, as if someone created it now.
fn copy_of(pod: &Pod, name: &str) -> Pod {
    let mut spec = pod.spec.clone().expect("pods have a spec");
    spec.node_name = None;
    Pod { metadata: ObjectMeta { name: Some(name.into()), ..Default::default() }, spec: Some(spec), status: None }
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn role_and_task_jobs_run_where_pod_security_restricted_is_enforced() {
    let s = restricted("restricted").await;
    let template = json!({"template": {"spec": compliant(&s)}});
    let extra = json!({"coordinator": template, "collector": template, "learner": template});
    s.submit("roles", 2, 1, extra).await;
    let expected = names("roles", &["coordinator", "collector-0", "collector-1", "learner-0"]);
    let pods = s.wait_pods("roles", &expected).await;
    s.wait_services("roles", &expected).await;
    s.wait_phase("roles", Phase::Running).await;

    // The namespace enforces for real: the coordinator's pod as created is admitted again, and
    // the same pod with the sidecar's security context as it was before is refused.
    let coordinator = pods.iter().find(|p| p.name_any() == "roles-coordinator").expect("the coordinator");
    let again = copy_of(coordinator, "again");
    admitted(&s, &again).await.unwrap_or_else(|e| panic!("the coordinator's own pod was refused: {e}"));
    let mut old = copy_of(coordinator, "old-sidecar");
    let sidecar = old.spec.as_mut().unwrap().init_containers.as_mut().and_then(|c| c.first_mut()).unwrap();
    assert_eq!(sidecar.name, "di-replicas");
    sidecar.security_context = Some(SecurityContext {
        run_as_non_root: Some(true),
        read_only_root_filesystem: Some(true),
        allow_privilege_escalation: Some(false),
        ..Default::default()
    });
    let refused = admitted(&s, &old).await.expect_err("restricted refuses a sidecar that keeps its capabilities");
    assert!(refused.contains("violates PodSecurity") && refused.contains("di-replicas"), "refused for: {refused}");

    // A task job's pods are the user's templates with environment and names only.
    let tasks = json!({
        "apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob",
        "metadata": {"name": "tasks"},
        "spec": {"tasks": [
            {"type": "learner", "template": {"spec": compliant(&s)}},
            {"type": "collector", "replicas": 2, "template": {"spec": compliant(&s)}},
        ]},
    });
    let gvk = GroupVersionKind::gvk("diengine.opendilab.org", "v2alpha1", "DIJob");
    let api: Api<DynamicObject> = Api::namespaced_with(s.cluster.client.clone(), &s.ns, &ApiResource::from_gvk(&gvk));
    let object: DynamicObject = serde_json::from_value(tasks).unwrap();
    api.create(&PostParams::default(), &object).await.expect("task job accepted");
    s.wait_pods("tasks", &names("tasks", &["learner-0", "collector-0", "collector-1"])).await;
    s.wait_phase("tasks", Phase::Running).await;
}
