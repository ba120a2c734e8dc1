//! The replica endpoint as a local process with its coordinator's identity, against a real API
//! server and the reconciler: POST adds pods that GET then lists, DELETE removes them, `failed`
//! replaces them, another job is refused; and that identity, under the admission policy or
//! per-job RBAC, is enough and no more, as the API server itself answers (403).

use std::time::Duration;

use di_api::contract::{annotations, labels};
use di_api::{DIJob, Phase};
use di_e2e::cluster::within;
use di_e2e::controlplane::admin_client;
use di_e2e::orchestrator::{Sidecar, pod_kubeconfig};
use di_e2e::scenario::{Scenario, names};
use k8s_openapi::api::core::v1::{Pod, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

/// Sends a request the way DI-engine does: a JSON body and no Content-Type.
async fn call(method: reqwest::Method, url: &str, body: Option<Value>) -> (u16, Value) {
    let client = reqwest::Client::new();
    let mut request = client.request(method, url);
    if let Some(body) = body {
        request = request.body(serde_json::to_vec(&body).unwrap());
    }
    let response = request.send().await.expect("the endpoint answers");
    let status = response.status().as_u16();
    (status, response.json().await.expect("an envelope"))
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn a_coordinator_scales_its_own_job() {
    let s = Scenario::new("replicas").await;
    s.submit("scaled", 1, 0, json!({})).await;
    s.wait_pods("scaled", &names("scaled", &["coordinator", "collector-0"])).await;
    s.wait_phase("scaled", Phase::Running).await;
    let sidecar = Sidecar::start(&s.cluster, &s.ns, "scaled").await;
    sidecar.until_ready().await;
    let base = format!("{}/v1alpha1/replicas", sidecar.url);
    let ns = s.ns.clone();

    // DI-engine's init request: two more collectors, one learner, "gpus" as a string.
    let (status, reply) = call(
        reqwest::Method::POST,
        &base,
        Some(json!({"namespace": ns, "coordinator": "scaled-coordinator",
                    "collectors": {"replicas": 2}, "learners": {"replicas": 1, "gpus": "0"}})),
    )
    .await;
    assert_eq!(status, 200, "{reply}\n{}", sidecar.log());
    assert_eq!(reply["success"], true);
    assert_eq!(reply["message"], "successfully create replicas", "the reconciler converged within the wait");
    assert_eq!(
        reply["data"]["collectors"],
        json!([format!("scaled-collector-1.{ns}:22270"), format!("scaled-collector-2.{ns}:22270")])
    );
    assert_eq!(reply["data"]["learners"], json!([format!("scaled-learner-0.{ns}:22271")]));
    s.wait_pods("scaled", &names("scaled", &["coordinator", "collector-0", "collector-1", "collector-2", "learner-0"]))
        .await;

    let (status, reply) =
        call(reqwest::Method::GET, &format!("{base}?namespace={ns}&coordinator=scaled-coordinator"), None).await;
    assert_eq!(status, 200);
    assert_eq!(reply["data"]["collectors"].as_array().unwrap().len(), 3);
    assert_eq!(reply["data"]["learners"], json!([format!("scaled-learner-0.{ns}:22271")]));

    // Give one back: the highest index goes.
    let (status, reply) = call(
        reqwest::Method::DELETE,
        &base,
        Some(json!({"namespace": ns, "coordinator": "scaled-coordinator", "collectors": {"replicas": 1}, "learners": {"replicas": 0}})),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["data"]["collectors"], json!([format!("scaled-collector-2.{ns}:22270")]));
    s.wait_pods("scaled", &names("scaled", &["coordinator", "collector-0", "collector-1", "learner-0"])).await;

    // Report a collector as failed (by its URL, as DI-engine knows it): it is replaced.
    let before = s.pods.get("scaled-collector-1").await.unwrap().uid().unwrap();
    let (status, reply) = call(
        reqwest::Method::POST,
        &format!("{}/v1alpha1/replicas/failed", sidecar.url),
        Some(json!({"namespace": ns, "coordinator": "scaled-coordinator", "collectors": [format!("scaled-collector-1.{ns}:22270")], "learners": []})),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["message"], "successfully recreate replicas");
    let after = s.pods.get("scaled-collector-1").await.unwrap().uid().unwrap();
    assert_ne!(before, after, "the reported pod was replaced");
    let job: DIJob = s.jobs.get("scaled").await.unwrap();
    assert_eq!((job.spec.collector_replicas(), job.spec.learner_replicas()), (2, 1));

    // Another job is not this endpoint's business.
    let (status, reply) = call(
        reqwest::Method::POST,
        &base,
        Some(json!({"namespace": ns, "coordinator": "other-coordinator", "collectors": {"replicas": 1}})),
    )
    .await;
    assert_eq!((status, reply["success"].clone(), reply["code"].clone()), (403, json!(false), json!(1)));

    // On the pod's network the endpoint reads, and writes nothing, whoever asks.
    let network = format!("{}/v1alpha1/replicas", sidecar.network_url);
    let (status, reply) =
        call(reqwest::Method::GET, &format!("{network}?namespace={ns}&coordinator=scaled-coordinator"), None).await;
    assert_eq!((status, reply["data"]["collectors"].as_array().map(Vec::len)), (200, Some(2)), "{reply}");
    let scale = json!({"namespace": ns, "coordinator": "scaled-coordinator", "collectors": {"replicas": 1}});
    for method in [reqwest::Method::POST, reqwest::Method::DELETE] {
        let (status, reply) = call(method, &network, Some(scale.clone())).await;
        assert_eq!(status, 403, "{reply}");
    }
    let job: DIJob = s.jobs.get("scaled").await.unwrap();
    assert_eq!(job.spec.collector_replicas(), 2, "nothing written from the network");
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn concurrent_requests_through_the_real_api_server_lose_no_update() {
    let s = Scenario::new("replicas-race").await;
    s.submit("raced", 0, 0, json!({})).await;
    s.wait_phase("raced", Phase::Running).await;
    let sidecar = Sidecar::start(&s.cluster, &s.ns, "raced").await;
    sidecar.until_ready().await;
    let url = format!("{}/v1alpha1/replicas", sidecar.url);
    let mut tasks = vec![];
    for i in 0..12 {
        let (url, ns) = (url.clone(), s.ns.clone());
        tasks.push(tokio::spawn(async move {
            let n = 1 + i % 2;
            let body = json!({"namespace": ns, "coordinator": "raced-coordinator", "collectors": {"replicas": n}});
            let (status, _) = call(reqwest::Method::POST, &url, Some(body)).await;
            if status == 200 { n } else { 0 }
        }));
    }
    let mut accepted = 0;
    for t in tasks {
        accepted += t.await.unwrap();
    }
    assert_eq!(accepted, 18, "every request is accepted");
    let job: DIJob = s.jobs.get("raced").await.unwrap();
    assert_eq!(job.spec.collector_replicas(), accepted);
}

/// Refused by the API server itself, with 403 (not by the endpoint, which is not asked here).
fn forbidden<T: std::fmt::Debug>(r: Result<T, kube::Error>, what: &str) -> String {
    match r {
        Err(kube::Error::Api(e)) if e.code == 403 => e.message,
        other => panic!("{what} must be forbidden (403), got {other:?}"),
    }
}

/// Who refuses a coordinator what is not its own job's: the admission policy `di-replicas`, or
/// RBAC where the job has an identity of its own (`<job>-replicas`).
#[derive(Clone, Copy)]
enum Guard {
    Policy,
    PerJobRbac,
}

/// Refused by RBAC (not by an admission policy or webhook), for `verb` on `resource`.
fn by_rbac(refused: &str, verb: &str, resource: &str) {
    let expected = format!("cannot {verb} resource \"{resource}\"");
    assert!(refused.contains(&expected), "RBAC's {expected:?} missing: {refused}");
}

/// The coordinator's identity, in a token bound to its pod as the kubelet mounts it: it reads and
/// patches its own job's desired counts and reads the namespace's pods; `guard` refuses it
/// another job, and RBAC deletes, lists of jobs and pod writes.
async fn enough_and_no_more(s: &Scenario, guard: Guard) -> Api<DIJob> {
    s.submit("mine", 1, 0, json!({})).await;
    s.submit("theirs", 0, 0, json!({})).await;
    s.wait_pods("mine", &names("mine", &["coordinator", "collector-0"])).await;
    s.wait_pods("theirs", &names("theirs", &["coordinator"])).await;
    // The policy lets a coordinator write once the job's status names it, with the job running.
    s.wait_phase("mine", Phase::Running).await;
    let kubeconfig = pod_kubeconfig(&s.cluster, &s.ns, "mine-coordinator").await;
    let client = admin_client(&kubeconfig).await.unwrap();
    let jobs: Api<DIJob> = Api::namespaced(client.clone(), &s.ns);
    let pods: Api<Pod> = Api::namespaced(client, &s.ns);

    jobs.get("mine").await.expect("reads its own job");
    let scale = json!({"spec": {"collector": {"replicas": 2}}});
    jobs.patch("mine", &PatchParams::default(), &Patch::Merge(&scale)).await.expect("patches its own counts");
    let marks = annotations::format_replace(&[("mine-collector-0".into(), "not-a-uid".into())]);
    let replace = json!({"metadata": {"annotations": {annotations::REPLACE: marks}}});
    jobs.patch("mine", &PatchParams::default(), &Patch::Merge(&replace)).await.expect("reports a failed replica");
    pods.list(&Default::default()).await.expect("lists pods");

    let refused =
        forbidden(jobs.patch("theirs", &PatchParams::default(), &Patch::Merge(&scale)).await, "patching another job");
    match guard {
        Guard::Policy => assert!(
            refused.contains("only the coordinator pod theirs-coordinator of this DIJob may change it as di-replicas, not pod mine-coordinator"),
            "not the admission policy's refusal: {refused}"
        ),
        Guard::PerJobRbac => {
            let user = format!("User \"system:serviceaccount:{}:mine-replicas\"", s.ns);
            assert!(refused.contains(&user), "not refused to the job's own identity: {refused}");
            by_rbac(&refused, "patch", "dijobs");
        }
    }
    by_rbac(
        &forbidden(jobs.delete("mine", &DeleteParams::default()).await, "deleting its own job"),
        "delete",
        "dijobs",
    );
    let refused = forbidden(pods.delete("mine-collector-0", &DeleteParams::default()).await, "deleting a pod");
    by_rbac(&refused, "delete", "pods");
    by_rbac(&forbidden(jobs.list(&Default::default()).await, "listing jobs"), "list", "dijobs");
    jobs
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn the_admission_policy_holds_a_coordinator_to_its_own_job() {
    let s = Scenario::new("replicas-policy").await;
    let jobs = enough_and_no_more(&s, Guard::Policy).await;
    // Stronger than per-job RBAC: of its own job, only what the endpoint changes.
    let counts_only =
        "di-replicas may change only spec.collector.replicas, spec.learner.replicas and spec.learner.gpus";
    let template = json!({"spec": {"collector": {"template": {"metadata": {"labels": {"x": "y"}}}}}});
    let refused =
        forbidden(jobs.patch("mine", &PatchParams::default(), &Patch::Merge(&template)).await, "changing its template");
    assert!(refused.contains(counts_only), "{refused}");
    let restarts = json!({"spec": {"restartLimit": 99}});
    let refused = forbidden(
        jobs.patch("mine", &PatchParams::default(), &Patch::Merge(&restarts)).await,
        "changing its restartLimit",
    );
    assert!(refused.contains(counts_only), "{refused}");
    let label = json!({"metadata": {"labels": {"x": "y"}}});
    let refused =
        forbidden(jobs.patch("mine", &PatchParams::default(), &Patch::Merge(&label)).await, "labelling its job");
    let metadata = format!("di-replicas may change only the annotation {} of the metadata", annotations::REPLACE);
    assert!(refused.contains(&metadata), "{refused}");
    // One identity for the namespace, no RBAC of the job's own.
    let pod = s.pods.get("mine-coordinator").await.unwrap();
    assert_eq!(pod.spec.unwrap().service_account_name.as_deref(), Some("di-replicas"));
    let admin = s.cluster.client.clone();
    let roles = Api::<Role>::namespaced(admin.clone(), &s.ns).list(&Default::default()).await.unwrap();
    assert_eq!(roles.items.len(), 0, "no Role per job");
    Api::<RoleBinding>::namespaced(admin, &s.ns).get("di-replicas").await.expect("the namespace's binding");
    // The shared identity reads its namespace's jobs (what their pods already show), and the
    // policy refuses every change to another's; another pod of the job is refused its own job.
    jobs.get("theirs").await.expect("reads another job of the namespace");
    let collector = admin_client(&pod_kubeconfig(&s.cluster, &s.ns, "mine-collector-0").await).await.unwrap();
    if s.pods.get("mine-collector-0").await.unwrap().spec.unwrap().service_account_name.as_deref()
        == Some("di-replicas")
    {
        panic!("only the coordinator runs as di-replicas");
    }
    let scale = json!({"spec": {"collector": {"replicas": 3}}});
    let refused = forbidden(
        Api::<DIJob>::namespaced(collector, &s.ns).patch("mine", &PatchParams::default(), &Patch::Merge(&scale)).await,
        "a collector patching its job",
    );
    // Its own ServiceAccount has no right to DIJobs at all.
    by_rbac(&refused, "patch", "dijobs");
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn per_job_rbac_holds_a_coordinator_to_its_own_job() {
    if di_e2e::nodes::real_nodes() {
        eprintln!(
            "NOT APPLICABLE here: --replica-identity per-job needs a local orchestrator (control-plane tier only)"
        );
        return;
    }
    let s = Scenario::with_args("replicas-rbac", &["--replica-identity=per-job"]).await;
    let jobs = enough_and_no_more(&s, Guard::PerJobRbac).await;
    by_rbac(&forbidden(jobs.get("theirs").await, "reading another job"), "get", "dijobs");
    let pod = s.pods.get("mine-coordinator").await.unwrap();
    assert_eq!(pod.spec.unwrap().service_account_name.as_deref(), Some("mine-replicas"));
}

/// The rule the policy exists for, where a name is not enough: a job deleted and submitted again
/// while its old coordinator still terminates (held here by a finalizer, as a slow shutdown or a
/// lost node would). The old pod has the new coordinator's name, and a token bound to it is
/// refused the new job; the new coordinator, once the old pod is gone, is not.
#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn a_predecessors_coordinator_is_refused_the_job_submitted_again() {
    predecessor_refused("replicas-predecessor", None).await;
}

/// The same with a coordinator whose template names its own ServiceAccount, which the account's
/// own grants let patch any DIJob: the policy still refuses a token bound to the old pod, and the
/// old pod's replica endpoint, made for the first job's UID, changes nothing.
#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn a_predecessors_coordinator_with_its_own_account_is_refused_the_job_submitted_again() {
    predecessor_refused("replicas-predecessor-own", Some("trainer")).await;
}

async fn predecessor_refused(scenario: &str, account: Option<&str>) {
    let s = Scenario::new(scenario).await;
    let admin = s.cluster.client.clone();
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &s.ns);
    let mut extra = json!({});
    if let Some(account) = account {
        let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), &s.ns);
        let sa = serde_json::from_value(json!({"metadata": {"name": account}})).unwrap();
        accounts.create(&PostParams::default(), &sa).await.unwrap();
        extra = json!({"coordinator": {"template": {"spec": {"serviceAccountName": account}}}});
        // The account's own grant, beside the job's: patch any DIJob of the namespace (the job's
        // Role is made only with its coordinator, after the old one is gone).
        let role = json!({"metadata": {"name": account}, "rules": [{"apiGroups": ["diengine.opendilab.org"],
            "resources": ["dijobs"], "verbs": ["get", "patch"]}]});
        let binding = json!({"metadata": {"name": account}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role", "name": account}, "subjects": [{"kind": "ServiceAccount", "name": account}]});
        let roles: Api<Role> = Api::namespaced(admin.clone(), &s.ns);
        roles.create(&PostParams::default(), &serde_json::from_value(role).unwrap()).await.unwrap();
        let bindings: Api<RoleBinding> = Api::namespaced(admin.clone(), &s.ns);
        bindings.create(&PostParams::default(), &serde_json::from_value(binding).unwrap()).await.unwrap();
    }
    s.submit("again", 0, 0, extra.clone()).await;
    s.wait_phase("again", Phase::Running).await;
    let hold = json!({"metadata": {"finalizers": ["e2e.diengine.opendilab.org/hold"]}});
    pods.patch("again-coordinator", &PatchParams::default(), &Patch::Merge(&hold)).await.unwrap();
    let old = admin_client(&pod_kubeconfig(&s.cluster, &s.ns, "again-coordinator").await).await.unwrap();
    let old_jobs: Api<DIJob> = Api::namespaced(old, &s.ns);
    let scale = json!({"spec": {"collector": {"replicas": 1}}});
    old_jobs.patch("again", &PatchParams::default(), &Patch::Merge(&scale)).await.expect("scales its own job");
    let old_sidecar = Sidecar::start(&s.cluster, &s.ns, "again").await;
    old_sidecar.until_ready().await;
    // Its endpoint writes to its job once, and knows from then on that its pod is the coordinator.
    let request = json!({"namespace": s.ns, "coordinator": "again-coordinator", "collectors": {"replicas": 1}});
    let url = format!("{}/v1alpha1/replicas", old_sidecar.url);
    let (status, reply) = call(reqwest::Method::POST, &url, Some(request.clone())).await;
    assert_eq!(status, 200, "{reply}\n{}", old_sidecar.log());

    let first = s.jobs.get("again").await.unwrap().uid();
    s.jobs.delete("again", &DeleteParams::default()).await.unwrap();
    let gone = move |j: Option<&DIJob>| j.is_none_or(|j| j.uid() != first);
    within(Duration::from_secs(30), "the first job gone", await_condition(s.jobs.clone(), "again", gone))
        .await
        .unwrap();
    // The old job's pods and Services deleted, as the garbage collector does (which may not
    // know DIJobs yet on a control plane just started); the coordinator stays, terminating.
    let old_ones = ListParams::default().labels(&format!("{}=again", labels::JOB_NAME));
    pods.delete_collection(&DeleteParams::default(), &old_ones).await.unwrap();
    let services: Api<Service> = Api::namespaced(admin.clone(), &s.ns);
    services.delete_collection(&DeleteParams::default(), &old_ones).await.unwrap();
    // And the job's own identity, which a coordinator of its own account also gets.
    let none = DeleteParams::default();
    Api::<ServiceAccount>::namespaced(admin.clone(), &s.ns).delete_collection(&none, &old_ones).await.unwrap();
    Api::<Role>::namespaced(admin.clone(), &s.ns).delete_collection(&none, &old_ones).await.unwrap();
    Api::<RoleBinding>::namespaced(admin.clone(), &s.ns).delete_collection(&none, &old_ones).await.unwrap();
    s.submit("again", 0, 0, extra).await;
    let refused = forbidden(
        old_jobs.patch("again", &PatchParams::default(), &Patch::Merge(&scale)).await,
        "the old coordinator scaling the new job",
    );
    assert!(refused.contains("is not the coordinator this DIJob runs now"), "not the policy's refusal: {refused}");
    // The old pod's endpoint, as DI-engine's client asks it.
    let (status, reply) = call(reqwest::Method::POST, &url, Some(request)).await;
    assert_eq!(status, 410, "{reply}\n{}", old_sidecar.log());
    assert_eq!(s.jobs.get("again").await.unwrap().spec.collector_replicas(), 0, "the new job unchanged");

    let release = json!({"metadata": {"finalizers": null}});
    pods.patch("again-coordinator", &PatchParams::default(), &Patch::Merge(&release)).await.unwrap();
    let job = s.wait_phase("again", Phase::Running).await;
    let coordinator = pods.get("again-coordinator").await.unwrap();
    assert_eq!(job.status.and_then(|st| st.coordinator_uid), coordinator.metadata.uid, "the status names the new pod");
    let new = admin_client(&pod_kubeconfig(&s.cluster, &s.ns, "again-coordinator").await).await.unwrap();
    Api::<DIJob>::namespaced(new, &s.ns)
        .patch("again", &PatchParams::default(), &Patch::Merge(&scale))
        .await
        .expect("the new coordinator scales the new job");
}
