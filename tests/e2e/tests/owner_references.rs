//! OpenShift's owner check: with the admission plugin OwnerReferencesPermissionEnforcement (on
//! in the control-plane tier's API server), an object whose owner reference sets
//! blockOwnerDeletion, as every object of a job does, is created only by an identity that may
//! update its owner's finalizers. The orchestrator runs as the install's ServiceAccount, so its
//! ClusterRole must grant that; without the rule, the same create is refused.

use di_api::Phase;
use di_e2e::cluster::not_applicable;
use di_e2e::nodes::real_nodes;
use di_e2e::orchestrator::{Orchestrator, service_account_kubeconfig};
use di_e2e::scenario::{Scenario, names};
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, Role, RoleBinding};
use kube::api::PostParams;
use kube::{Api, Client, ResourceExt};
use serde_json::json;

/// The orchestrator's ClusterRole, as the install manifests give it.
const ORCHESTRATOR: &str = "di-orchestrator";

/// A client for a new ServiceAccount of the test's namespace that holds the orchestrator's rules,
/// but for those `drop` refuses.
async fn identity_with(s: &Scenario, name: &str, drop: impl Fn(&str) -> bool) -> Client {
    let client = s.cluster.client.clone();
    let installed = Api::<ClusterRole>::all(client.clone()).get(ORCHESTRATOR).await.expect("the install's ClusterRole");
    let rules: Vec<_> = installed
        .rules
        .unwrap_or_default()
        .into_iter()
        .filter(|r| !r.resources.iter().flatten().any(|resource| drop(resource)))
        .collect();
    let create = PostParams::default();
    let role = Role { metadata: meta(name), rules: Some(rules) };
    Api::<Role>::namespaced(client.clone(), &s.ns).create(&create, &role).await.expect("role");
    let account = ServiceAccount { metadata: meta(name), ..Default::default() };
    Api::<ServiceAccount>::namespaced(client.clone(), &s.ns).create(&create, &account).await.expect("account");
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": s.ns}],
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(client, &s.ns).create(&create, &binding).await.expect("binding");
    let kubeconfig = service_account_kubeconfig(&s.cluster, &s.ns, name, &format!("{}-{name}", s.ns), None).await;
    di_e2e::controlplane::admin_client(&kubeconfig).await.expect("client")
}

fn meta(name: &str) -> kube::api::ObjectMeta {
    kube::api::ObjectMeta { name: Some(name.into()), ..Default::default() }
}

/// Who the API server takes `client` for.
async fn username(client: Client) -> String {
    let review = Api::<SelfSubjectReview>::all(client).create(&PostParams::default(), &Default::default()).await;
    review.expect("self subject review").status.and_then(|s| s.user_info).and_then(|u| u.username).unwrap_or_default()
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn a_job_runs_under_the_owner_check_and_without_the_finalizers_rule_its_pods_are_refused() {
    let s = Scenario::new("owners").await;
    // The orchestrator is the install's ServiceAccount, not an administrator: its ClusterRole is
    // what the check is held against.
    if let Orchestrator::Local(local) = &s.orchestrator {
        let client = di_e2e::controlplane::admin_client(local.kubeconfig()).await.expect("its client");
        assert_eq!(username(client).await, "system:serviceaccount:di-system:di-orchestrator");
    }
    s.submit("owned", 1, 1, json!({})).await;
    let expected = names("owned", &["coordinator", "collector-0", "learner-0"]);
    let pods = s.wait_pods("owned", &expected).await;
    s.wait_services("owned", &expected).await;
    s.wait_phase("owned", Phase::Running).await;
    let services = futures::future::try_join_all(expected.iter().map(|n| s.services.get(n))).await.unwrap();
    let references = pods.iter().map(|p| p.owner_references()).chain(services.iter().map(|s| s.owner_references()));
    for refs in references {
        assert_eq!(refs[0].block_owner_deletion, Some(true), "every object blocks its job's deletion: {refs:?}");
    }

    // One more pod like the job's, created (as a dry run) by the orchestrator's rules and by the
    // same rules without `update` on `dijobs/finalizers`.
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "owned-extra", "ownerReferences": [pods[0].owner_references()[0]]},
        "spec": s.nodes.pod_spec(),
    }))
    .unwrap();
    let dry_run = PostParams { dry_run: true, ..Default::default() };
    let full = identity_with(&s, "full", |_| false).await;
    Api::<Pod>::namespaced(full, &s.ns).create(&dry_run, &pod).await.expect("the orchestrator's rules may");
    let without = identity_with(&s, "no-finalizers", |r| r == "dijobs/finalizers").await;
    match Api::<Pod>::namespaced(without, &s.ns).create(&dry_run, &pod).await {
        Err(kube::Error::Api(e)) if e.code == 403 && e.message.contains("blockOwnerDeletion") => {}
        Err(e) => panic!("refused, but not by the owner check: {e}"),
        // kind's API server runs without the plugin; the control-plane tier's has it.
        Ok(_) if real_nodes() => not_applicable("this API server does not run OwnerReferencesPermissionEnforcement"),
        Ok(_) => panic!("created without update on dijobs/finalizers: the owner check is not on"),
    }
}
