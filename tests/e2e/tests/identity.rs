//! The admission policy that holds every coordinator's sidecar to its own job is kept by the
//! orchestrator like any object it owns: deleted or edited, it is applied again within seconds.
//! One test in its own binary: it deletes a cluster-wide object no other test may miss meanwhile.

use std::time::Duration;

use di_e2e::cluster::within;
use di_e2e::scenario::Scenario;
use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::wait::await_condition;
use serde_json::json;

const SHARED: &str = "di-replicas";
/// Restored "within seconds": the keeper reacts to the watch event at once.
const RESTORED_WITHIN: Duration = Duration::from_secs(15);

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn the_admission_policy_is_restored_when_deleted_or_edited() {
    let mut s = Scenario::new("identity").await;
    // The orchestrator chose the policy (Kubernetes 1.30+) and put it in force.
    s.submit("job", 0, 0, json!({})).await;
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(s.cluster.client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(s.cluster.client.clone());
    let exists = |p: Option<&ValidatingAdmissionPolicy>| p.is_some_and(|p| p.metadata.deletion_timestamp.is_none());
    within(RESTORED_WITHIN, "the policy", await_condition(policies.clone(), SHARED, exists)).await.unwrap();

    let before = policies.get(SHARED).await.unwrap().metadata.uid;
    policies.delete(SHARED, &DeleteParams::default()).await.unwrap();
    let recreated = move |p: Option<&ValidatingAdmissionPolicy>| p.is_some_and(|p| p.metadata.uid != before);
    let restored =
        within(RESTORED_WITHIN, "the deleted policy to be applied again", await_condition(policies, SHARED, recreated));
    assert!(restored.await.is_ok(), "orchestrator log:\n{}", s.orchestrator.log());

    // An edit that would let any request through (Warn instead of Deny) is undone.
    let relaxed = json!({"spec": {"validationActions": ["Warn"]}});
    let by_hand = PatchParams { field_manager: Some("kubectl-edit".into()), ..PatchParams::default() };
    bindings.patch(SHARED, &by_hand, &Patch::Merge(&relaxed)).await.unwrap();
    let denies = |b: Option<&ValidatingAdmissionPolicyBinding>| {
        b.map(|b| b.spec.validation_actions.clone()) == Some(vec!["Deny".to_string()])
    };
    let undone =
        within(RESTORED_WITHIN, "the binding to deny again", await_condition(bindings.clone(), SHARED, denies));
    assert!(undone.await.is_ok(), "orchestrator log:\n{}", s.orchestrator.log());

    // Relaxed while no orchestrator runs: the next one starts by writing the binding whole. An
    // apply would merge our Deny beside the hand-made Warn, which the API server refuses, and the
    // orchestrator would fall back to per-job RBAC with the policy left relaxed.
    s.orchestrator.kill().await;
    bindings.patch(SHARED, &by_hand, &Patch::Merge(&relaxed)).await.unwrap();
    s.orchestrator.restart().await;
    // On kind the killed leader never released its Lease: a new replica leads, and keeps the
    // binding, once that has expired (15 s, the orchestrator's default), which may be after its
    // webhook already answers.
    let after_restart = RESTORED_WITHIN + Duration::from_secs(15);
    let undone =
        within(after_restart, "a restarted orchestrator to deny again", await_condition(bindings, SHARED, denies));
    assert!(undone.await.is_ok(), "orchestrator log:\n{}", s.orchestrator.log());
}
