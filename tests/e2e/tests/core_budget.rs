//! A job that protects its core (`spec.protectCore`) against what `kubectl drain` sends, the
//! Eviction API: its coordinator's and learner's evictions are refused while the budget holds,
//! a collector's goes through, the collector is replaced and the job keeps running. On both tiers
//! (on kind a real kubelet stops the evicted collector). Once the job finishes its budget is gone.

use di_api::{DIJob, Phase};
use di_e2e::cluster::{unretried_client, until_watched, within};
use di_e2e::scenario::{Scenario, WAIT};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::EvictParams;
use kube::runtime::wait::await_condition;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::json;

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn an_eviction_takes_a_collector_and_is_refused_for_the_protected_core() {
    let s = Scenario::new("core-budget").await;
    let job = s.submit("kept", 2, 1, json!({"protectCore": true})).await;
    s.wait_phase("kept", Phase::Running).await;
    let coordinator = s.pods.get("kept-coordinator").await.unwrap();
    let collector = s.pods.get("kept-collector-0").await.unwrap();

    // Evictions are judged by the budget's status, which the disruption controller writes: wait
    // until it counts the coordinator and the learner, healthy, with no disruption allowed.
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(s.cluster.client.clone(), &s.ns);
    let counted = |b: Option<&PodDisruptionBudget>| {
        b.and_then(|b| b.status.as_ref()).is_some_and(|st| {
            st.expected_pods == Some(2) && st.current_healthy == Some(2) && st.disruptions_allowed.unwrap_or(0) == 0
        })
    };
    within(WAIT, "the core's budget counted", await_condition(budgets.clone(), "kept-core", counted)).await.unwrap();
    let budget = budgets.get("kept-core").await.unwrap();
    let owner = budget.owner_references().first().cloned().expect("an owner");
    assert_eq!((owner.uid, owner.controller), (job.uid().unwrap(), Some(true)), "the job owns its budget");

    // What `kubectl drain` sends; a refusal (429) is the answer here, not a reason to ask again.
    let evictions: Api<Pod> = Api::namespaced(unretried_client(&s.cluster.kubeconfig).await.expect("a client"), &s.ns);
    for core in ["kept-coordinator", "kept-learner-0"] {
        let refused = evictions.evict(core, &EvictParams::default()).await;
        assert!(
            matches!(&refused, Err(kube::Error::Api(e)) if e.code == 429),
            "evicting {core} must wait for the budget: {refused:?}"
        );
    }
    evictions.evict("kept-collector-0", &EvictParams::default()).await.expect("a collector may be evicted");

    // The collector is replaced, the job runs on; the core was never touched.
    let config = watcher::Config::default().labels("dijob-name=kept");
    let old = collector.uid();
    let new_collector = until_watched(s.pods.clone(), config, (), WAIT, "the evicted collector replaced", |all| {
        all.iter()
            .find(|p| p.name_any() == "kept-collector-0" && p.uid() != old && p.metadata.deletion_timestamp.is_none())
            .filter(|p| p.status.as_ref().and_then(|st| st.phase.as_deref()) == Some("Running"))
            .map(|p| Pod::clone(p))
    })
    .await;
    let running = |j: Option<&DIJob>| {
        j.and_then(|j| j.status.as_ref())
            .is_some_and(|st| st.phase == Some(Phase::Running) && st.collectors.as_deref() == Some("2/2"))
    };
    within(WAIT, "the job running with both collectors", await_condition(s.jobs.clone(), "kept", running))
        .await
        .unwrap();
    assert_ne!(new_collector.uid(), collector.uid());
    assert_eq!(s.pods.get("kept-coordinator").await.unwrap().uid(), coordinator.uid(), "the coordinator ran on");
    let status = s.jobs.get("kept").await.unwrap().status.unwrap();
    assert_eq!(status.phase, Some(Phase::Running), "{status:?}");

    // Finished, the job gives its budget up (with the install's RBAC on kind), so a drain no
    // longer waits for the pods its cleanPodPolicy keeps.
    s.nodes.exit(&s.ns, "kept-coordinator", 0).await;
    s.wait_phase("kept", Phase::Succeeded).await;
    let uid = budget.uid().unwrap();
    let gone = kube::runtime::wait::conditions::is_deleted(&uid);
    within(WAIT, "the finished job's budget deleted", await_condition(budgets, "kept-core", gone)).await.unwrap();
}
