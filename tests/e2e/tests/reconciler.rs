//! The reconciler against a real API server: pods and services with owner references, phases
//! from the coordinator, replacement of failed replicas, cleanup policies, suspension and garbage
//! collection. A crash mid-job is crash.rs's.

use std::collections::BTreeMap;
use std::time::Duration;

use di_api::contract::annotations;
use di_api::{DIJob, Phase};
/// The namespace's shared replica identity (ServiceAccount and RoleBinding), kept for its next job.
const SHARED: &str = "di-replicas";
use di_e2e::cluster::within;
use di_e2e::orchestrator::LocalOrchestrator;
use di_e2e::scenario::{Scenario, WAIT, names};
use k8s_openapi::api::core::v1::{Pod, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::wait::await_condition;
use kube::{Api, ResourceExt};
use serde_json::json;

fn env_of(pod: &Pod) -> BTreeMap<String, String> {
    let container = &pod.spec.as_ref().unwrap().containers[0];
    container.env.iter().flatten().map(|e| (e.name.clone(), e.value.clone().unwrap_or_default())).collect()
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn a_job_runs_with_every_replica_owned_and_wired() {
    let s = Scenario::new("run").await;
    let job = s.submit("cartpole", 2, 1, json!({})).await;
    let uid = job.uid().unwrap();
    let expected = names("cartpole", &["coordinator", "collector-0", "collector-1", "learner-0"]);
    let pods = s.wait_pods("cartpole", &expected).await;
    s.wait_services("cartpole", &expected).await;
    let job = s.wait_phase("cartpole", Phase::Running).await;

    for pod in &pods {
        let owner = &pod.owner_references()[0];
        assert_eq!((owner.kind.as_str(), owner.uid.as_str(), owner.controller), ("DIJob", uid.as_str(), Some(true)));
        // The version the garbage collector watches DIJobs under, though the job was written as v1alpha1.
        assert_eq!(owner.api_version, "diengine.opendilab.org/v2alpha1");
        let env = env_of(pod);
        assert_eq!(env["KUBERNETES_POD_NAME"], pod.name_any());
        assert_eq!(env["KUBERNETES_POD_NAMESPACE"], s.ns);
        // The coordinator's own containers write at the endpoint's loopback address; the others
        // read at the coordinator's Service.
        let endpoint = match pod.name_any().as_str() {
            "cartpole-coordinator" => "127.0.22.80:22281".to_string(),
            _ => format!("cartpole-coordinator.{}:22280", s.ns),
        };
        assert_eq!(env["KUBERNETES_SERVER_URL"], endpoint);
    }
    let coordinator = pods.iter().find(|p| p.name_any() == "cartpole-coordinator").unwrap();
    assert_eq!(env_of(coordinator)["COORDINATOR_PORT"], "22273");
    assert_eq!(env_of(coordinator)["KUBERNETES_COORDINATOR_URL"], format!("cartpole-coordinator.{}:22273", s.ns));
    let spec = coordinator.spec.as_ref().unwrap();
    assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
    assert_eq!(spec.service_account_name.as_deref(), Some(SHARED));
    assert!(
        spec.init_containers
            .iter()
            .flatten()
            .any(|c| c.name == "di-replicas" && c.restart_policy.as_deref() == Some("Always")),
        "the replica endpoint runs beside the coordinator as a native sidecar"
    );
    let collector = pods.iter().find(|p| p.name_any() == "cartpole-collector-1").unwrap();
    assert_eq!(env_of(collector)["COLLECTOR_PORT"], "22270");

    let service = s.services.get("cartpole-collector-1").await.unwrap();
    let svc = service.spec.unwrap();
    assert_eq!(svc.cluster_ip.as_deref(), Some("None"));
    assert_eq!(svc.publish_not_ready_addresses, Some(true));
    assert_eq!(service.metadata.owner_references.unwrap()[0].uid, uid);

    // The sidecar's identity exists: the namespace's, shared by its jobs and owned by none (the
    // admission policy holds each coordinator to its own job).
    let client = s.cluster.client.clone();
    let sa = Api::<ServiceAccount>::namespaced(client.clone(), &s.ns).get("di-replicas").await.unwrap();
    assert!(sa.owner_references().is_empty());
    Api::<RoleBinding>::namespaced(client.clone(), &s.ns).get("di-replicas").await.unwrap();
    let roles = Api::<Role>::namespaced(client, &s.ns).list(&Default::default()).await.unwrap();
    assert!(roles.items.is_empty(), "no Role per job");

    let status = job.status.unwrap();
    assert_eq!(status.observed_generation, job.metadata.generation);
    assert!(status.conditions.iter().any(|c| c.type_ == "Running" && c.status == "True"));

    // Scaling is a change of desired counts: down removes the highest index, up adds.
    let patch = json!({"spec": {"collector": {"replicas": 1}, "learner": {"replicas": 2}}});
    s.jobs.patch("cartpole", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let expected = names("cartpole", &["coordinator", "collector-0", "learner-0", "learner-1"]);
    s.wait_pods("cartpole", &expected).await;
    s.wait_services("cartpole", &expected).await;
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn coordinator_success_finishes_the_job_and_cleans_up_running_pods() {
    let s = Scenario::new("succeed").await;
    // Collectors that end rather than restart in place (Kubernetes' default, Always).
    s.submit("done", 2, 0, json!({"collector": {"template": {"spec": {"restartPolicy": "Never"}}}})).await;
    s.wait_pods("done", &names("done", &["coordinator", "collector-0", "collector-1"])).await;
    s.wait_phase("done", Phase::Running).await;
    s.nodes.exit(&s.ns, "done-collector-1", 0).await;
    // Known finished before the coordinator ends, or policy Running rightly deletes it as running.
    s.wait_pod_phase("done-collector-1", "Succeeded").await;
    s.nodes.exit(&s.ns, "done-coordinator", 0).await;
    let job = s.wait_phase("done", Phase::Succeeded).await;
    // Policy Running: what still ran is deleted; the finished coordinator and collector stay for their logs.
    s.wait_pods("done", &names("done", &["coordinator", "collector-1"])).await;
    s.wait_services("done", &[]).await;
    let conditions = job.status.unwrap().conditions;
    assert!(conditions.iter().any(|c| c.type_ == "Succeeded" && c.status == "True"));
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn coordinator_failure_fails_the_job_and_policy_all_removes_every_pod() {
    let s = Scenario::new("fail").await;
    s.submit("broken", 1, 1, json!({"cleanPodPolicy": "All"})).await;
    s.wait_pods("broken", &names("broken", &["coordinator", "collector-0", "learner-0"])).await;
    s.wait_phase("broken", Phase::Running).await;
    s.nodes.exit(&s.ns, "broken-coordinator", 3).await;
    s.wait_phase("broken", Phase::Failed).await;
    s.wait_pods("broken", &[]).await;
    s.wait_services("broken", &[]).await;
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn policy_none_keeps_every_pod() {
    let s = Scenario::new("keep").await;
    s.submit("kept", 1, 0, json!({"cleanPodPolicy": "None"})).await;
    let all = names("kept", &["coordinator", "collector-0"]);
    s.wait_pods("kept", &all).await;
    s.wait_phase("kept", Phase::Running).await;
    s.nodes.exit(&s.ns, "kept-coordinator", 0).await;
    s.wait_phase("kept", Phase::Succeeded).await;
    s.wait_services("kept", &[]).await;
    s.wait_pods("kept", &all).await;
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn a_failed_collector_is_replaced_and_the_phase_stays() {
    let s = Scenario::new("replace").await;
    // A failed pod, not a container restarted in place: the reconciler's to replace.
    s.submit("flaky", 2, 0, json!({"collector": {"template": {"spec": {"restartPolicy": "Never"}}}})).await;
    let pods = s.wait_pods("flaky", &names("flaky", &["coordinator", "collector-0", "collector-1"])).await;
    s.wait_phase("flaky", Phase::Running).await;
    let old_uid = pods.iter().find(|p| p.name_any() == "flaky-collector-0").unwrap().uid().unwrap();
    s.nodes.exit(&s.ns, "flaky-collector-0", 1).await;

    let replacement = move |pod: Option<&Pod>| {
        pod.is_some_and(|p| p.uid().as_deref() != Some(old_uid.as_str()) && p.metadata.deletion_timestamp.is_none())
    };
    let replaced =
        within(WAIT, "collector-0 replaced", await_condition(s.pods.clone(), "flaky-collector-0", replacement))
            .await
            .unwrap()
            .unwrap();
    assert_eq!(replaced.annotations().get(annotations::RESTARTS).map(String::as_str), Some("1"));
    let service = s.services.get("flaky-collector-0").await.unwrap();
    assert_eq!(service.annotations().get(annotations::RESTARTS).map(String::as_str), Some("1"));
    let job = s.jobs.get("flaky").await.unwrap();
    assert_eq!(job.status.unwrap().phase, Some(Phase::Running), "a collector's failure does not change the phase");
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn the_restart_limit_leaves_the_replica_failed_with_a_condition() {
    let s = Scenario::new("limit").await;
    let never = json!({"collector": {"template": {"spec": {"restartPolicy": "Never"}}}});
    s.submit("limited", 1, 0, json!({"restartLimit": 0, "collector": never["collector"]})).await;
    s.wait_pods("limited", &names("limited", &["coordinator", "collector-0"])).await;
    s.wait_phase("limited", Phase::Running).await;
    s.nodes.exit(&s.ns, "limited-collector-0", 1).await;
    let cond = |job: Option<&DIJob>| {
        job.and_then(|j| j.status.as_ref())
            .is_some_and(|s| s.conditions.iter().any(|c| c.type_ == "RestartLimitExceeded" && c.status == "True"))
    };
    within(WAIT, "RestartLimitExceeded", await_condition(s.jobs.clone(), "limited", cond)).await.unwrap();
    let pod = s.pods.get("limited-collector-0").await.unwrap();
    assert_eq!(pod.status.unwrap().phase.as_deref(), Some("Failed"), "past the limit the replica stays failed");
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn suspend_deletes_the_pods_and_resume_brings_them_back() {
    let s = Scenario::new("suspend").await;
    s.submit("paused", 2, 0, json!({})).await;
    let all = names("paused", &["coordinator", "collector-0", "collector-1"]);
    s.wait_pods("paused", &all).await;
    s.wait_phase("paused", Phase::Running).await;
    s.jobs.patch("paused", &PatchParams::default(), &Patch::Merge(&json!({"spec": {"suspend": true}}))).await.unwrap();
    s.wait_pods("paused", &[]).await;
    // The condition follows the pods' removal (on real nodes they take a moment to stop).
    let suspended = |job: Option<&DIJob>| {
        job.and_then(|j| j.status.as_ref())
            .is_some_and(|s| s.conditions.iter().any(|c| c.type_ == "Suspended" && c.status == "True"))
    };
    within(WAIT, "Suspended", await_condition(s.jobs.clone(), "paused", suspended)).await.unwrap();
    s.jobs.patch("paused", &PatchParams::default(), &Patch::Merge(&json!({"spec": {"suspend": false}}))).await.unwrap();
    s.wait_pods("paused", &all).await;
    s.wait_phase("paused", Phase::Running).await;
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn deleting_a_job_leaves_nothing_behind() {
    let s = Scenario::new("gc").await;
    s.submit("gone", 2, 1, json!({})).await;
    s.wait_pods("gone", &names("gone", &["coordinator", "collector-0", "collector-1", "learner-0"])).await;
    s.wait_phase("gone", Phase::Running).await;
    s.jobs.delete("gone", &DeleteParams::foreground()).await.unwrap();
    // The garbage collector learns a new CRD's kind when it rediscovers resources (about 30 s).
    // Lists rather than watches: what is checked is that nothing of any name is left, in six kinds,
    // but the namespace's shared replica identity, which serves its next job too.
    let client = s.cluster.client.clone();
    let ns = s.ns.clone();
    within(Duration::from_secs(120), "garbage collection of the job's objects", async move {
        loop {
            let count = Api::<Pod>::namespaced(client.clone(), &ns)
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .len()
                + Api::<Service>::namespaced(client.clone(), &ns)
                    .list(&ListParams::default())
                    .await
                    .unwrap()
                    .items
                    .len()
                + Api::<Role>::namespaced(client.clone(), &ns).list(&ListParams::default()).await.unwrap().items.len()
                + Api::<RoleBinding>::namespaced(client.clone(), &ns)
                    .list(&ListParams::default())
                    .await
                    .unwrap()
                    .items
                    .iter()
                    .filter(|b| b.name_any() != SHARED)
                    .count()
                + Api::<ServiceAccount>::namespaced(client.clone(), &ns)
                    .list(&ListParams::default())
                    .await
                    .unwrap()
                    .items
                    .iter()
                    .filter(|sa| sa.name_any() != "default" && sa.name_any() != SHARED)
                    .count()
                + Api::<DIJob>::namespaced(client.clone(), &ns).list(&ListParams::default()).await.unwrap().items.len();
            if count == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
    .await;
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn an_invalid_job_is_marked_failed_with_the_reason() {
    if di_e2e::nodes::real_nodes() {
        // webhook.rs shows the deployed webhook refusing it on apply.
        di_e2e::cluster::not_applicable("on kind the deployed webhook refuses an invalid job before it is stored");
        return;
    }
    let s = Scenario::new("invalid").await;
    // What only the webhook's rules refuse (a replica count past its bound the CRD's schema
    // refuses itself).
    s.submit("bad", 1, 0, json!({"cleanPodPolicy": "Sometimes"})).await;
    let job = s.wait_phase("bad", Phase::Failed).await;
    let failed = job.status.unwrap().conditions.into_iter().find(|c| c.type_ == "Failed").unwrap();
    assert_eq!(failed.reason.as_deref(), Some("InvalidSpec"));
    assert!(failed.message.unwrap().contains("spec.cleanPodPolicy: Unsupported value \"Sometimes\""));
    assert!(s.pods.list(&ListParams::default()).await.unwrap().items.is_empty());
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn only_the_leader_acts_and_a_standby_takes_over() {
    if di_e2e::nodes::real_nodes() {
        // On kind the deployed replicas elect their leader; this scenario runs its own two.
        di_e2e::cluster::not_applicable("leader takeover needs local orchestrator processes (control-plane tier only)");
        return;
    }
    let mut s = Scenario::new("leader").await;
    // The scenario's own orchestrator is replaced by two replicas that elect a leader.
    s.orchestrator.kill().await;
    let lease = format!("--lease-name={}", s.ns);
    let args = ["--leader-elect".to_string(), "--lease-namespace=di-system".into(), lease];
    let mut first = Box::pin(LocalOrchestrator::start_with(&s.cluster, &s.ns, "-a", &args)).await;
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(s.cluster.client.clone(), "di-system");
    let holder = |lease: Option<&k8s_openapi::api::coordination::v1::Lease>| {
        lease.and_then(|l| l.spec.as_ref()).and_then(|s| s.holder_identity.clone())
    };
    let ns = s.ns.clone();
    within(
        WAIT,
        "the first replica to lead",
        await_condition(leases.clone(), &ns, move |l: Option<&_>| holder(l).as_deref() == Some("orchestrator-a")),
    )
    .await
    .unwrap();
    let _second = Box::pin(LocalOrchestrator::start_with(&s.cluster, &s.ns, "-b", &args)).await;

    s.submit("led", 2, 0, json!({})).await;
    s.wait_pods("led", &names("led", &["coordinator", "collector-0", "collector-1"])).await;
    s.wait_phase("led", Phase::Running).await;

    // The leader dies; the standby takes the Lease once it expires and carries on.
    first.kill().await;
    within(
        Duration::from_secs(90),
        "the standby to lead",
        await_condition(leases, &ns, move |l: Option<&_>| holder(l).as_deref() == Some("orchestrator-b")),
    )
    .await
    .unwrap();
    s.jobs
        .patch("led", &PatchParams::default(), &Patch::Merge(&json!({"spec": {"collector": {"replicas": 3}}})))
        .await
        .unwrap();
    s.wait_pods("led", &names("led", &["coordinator", "collector-0", "collector-1", "collector-2"])).await;
}
