//! What the install's RBAC grants the orchestrator, asked of the API server's own authorizer
//! (SubjectAccessReviews): what it needs, and none of the Secrets beside its own.

use di_e2e::cluster::{connect, not_applicable};
use di_e2e::nodes::real_nodes;
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::Api;
use kube::api::PostParams;

const ORCHESTRATOR: &str = "system:serviceaccount:di-system:di-orchestrator";

/// Whether the orchestrator's ServiceAccount may `verb` the `resource` (named `name`) in
/// `namespace`; `resource` is `plural.group` outside the core group, as kubectl names it.
async fn may(reviews: &Api<SubjectAccessReview>, verb: &str, resource: &str, namespace: &str, name: &str) -> bool {
    let (resource, group) = resource.split_once('.').unwrap_or((resource, ""));
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(ORCHESTRATOR.into()),
            groups: Some(vec!["system:serviceaccounts".into(), "system:serviceaccounts:di-system".into()]),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                resource: Some(resource.into()),
                group: Some(group.into()),
                namespace: (!namespace.is_empty()).then(|| namespace.into()),
                name: (!name.is_empty()).then(|| name.into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = reviews.create(&PostParams::default(), &review).await.expect("the API server reviews access");
    answer.status.is_some_and(|s| s.allowed)
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn the_orchestrator_reads_only_its_own_secret_and_what_its_passes_need() {
    if real_nodes() {
        // Which install is live there depends on the install-path scenarios that ran before.
        not_applicable("asks about the install's manifests as applied here; kind runs whichever install was last");
        return;
    }
    let cluster = Box::pin(connect()).await;
    cluster.apply_file("manifests/install/namespace.yaml").await;
    cluster.apply_file("manifests/install/rbac.yaml").await;
    let reviews: Api<SubjectAccessReview> = Api::all(cluster.client.clone());
    let certs = "di-orchestrator-webhook-certs";
    assert!(may(&reviews, "get", "secrets", "di-system", certs).await, "its webhook certificates");
    assert!(may(&reviews, "update", "secrets", "di-system", certs).await, "renewed");
    assert!(may(&reviews, "create", "secrets", "di-system", "").await, "made once");
    assert!(!may(&reviews, "get", "secrets", "di-system", "someone-elses").await, "no other Secret read");
    assert!(!may(&reviews, "list", "secrets", "di-system", "").await, "no Secret listed");
    // A namespace being deleted takes its jobs with it (`teardown`).
    assert!(may(&reviews, "watch", "namespaces", "", "").await);
    // A create answered 409 reads whose the object there is.
    assert!(may(&reviews, "get", "services", "team-a", "job-collector-0").await);
    // The node of a collector stuck terminating, read to know whether it is lost.
    assert!(may(&reviews, "get", "nodes", "", "worker-1").await, "a stranded collector's node");
    assert!(!may(&reviews, "list", "nodes", "", "").await, "no node listed");
    // Kueue's queues, which the mutating webhook reads to give MultiKueue's jobs to it.
    for queues in ["localqueues.kueue.x-k8s.io", "clusterqueues.kueue.x-k8s.io", "admissionchecks.kueue.x-k8s.io"] {
        assert!(may(&reviews, "watch", queues, "", "").await, "{queues} watched");
    }
    // A worker's copy of a dispatched job adopts the Workload MultiKueue made (a patch).
    assert!(may(&reviews, "patch", "workloads.kueue.x-k8s.io", "team-a", "dijob-job-1234abcd").await);
    // A finished job's core budget is read for its owner, then deleted.
    for verb in ["create", "patch", "get", "delete"] {
        assert!(may(&reviews, verb, "poddisruptionbudgets.policy", "team-a", "job-core").await, "{verb} a core budget");
    }
}
