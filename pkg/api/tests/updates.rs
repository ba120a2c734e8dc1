//! What may change in a stored DIJob and what may not: each forbidden change is refused at its
//! field, saying how to get there instead. The queue label's rule is `queue_label.rs`.

mod common;

use common::{Mutation, defaulted, pod, set_json, update_errors, valid_job};
use serde_json::json;

#[test]
fn updates() {
    let allowed: [(&str, Mutation); 7] = [
        ("scale collectors", |j| j.spec.collector.as_mut().unwrap().replicas = Some(10)),
        ("scale learners to zero", |j| j.spec.learner.as_mut().unwrap().replicas = Some(0)),
        ("suspend", |j| j.spec.suspend = Some(true)),
        ("change the cleanup policy", |j| j.spec.clean_pod_policy = Some("None".into())),
        ("set a TTL and a restart limit", |j| {
            j.spec.ttl_seconds_after_finished = Some(60);
            j.spec.restart_limit = Some(3);
        }),
        ("add a role", |j| {
            let mut old = j.clone();
            old.spec.collector = None;
            *j = old;
        }),
        ("labels", |j| j.metadata.labels = Some([("team".to_string(), "rl".to_string())].into())),
    ];
    for (name, mutate) in allowed {
        let old = valid_job();
        let mut new = old.clone();
        mutate(&mut new);
        if name == "add a role" {
            // The old job lacks the collector the new one adds.
            assert_eq!(update_errors(new.clone(), old.clone()), Vec::<String>::new(), "{name}");
        } else {
            assert_eq!(update_errors(old, new), Vec::<String>::new(), "{name}");
        }
    }

    // The stored object is defaulted, the old one from before the webhook was installed is not:
    // filling in defaults is not a change.
    assert_eq!(update_errors(valid_job(), defaulted(valid_job())), Vec::<String>::new());

    let forbidden: [(&str, Mutation, &str); 8] = [
        (
            "change a template",
            |j| pod(j, "collector").containers[0].image = Some("ding:v2".into()),
            "spec.collector.template: Forbidden: a role's pod template is immutable once the job exists; delete and re-create the DIJob to change it",
        ),
        (
            "change volumes",
            |j| j.spec.volumes.as_mut().unwrap().push(set_json(json!({"name": "extra", "emptyDir": {}}))),
            "spec.volumes: Forbidden: volumes are immutable",
        ),
        ("change the group", |j| j.spec.group = Some("other".into()), "spec.group: Forbidden: the group is immutable"),
        (
            "change the priority",
            |j| j.spec.priority_class_name = Some("high".into()),
            "spec.priorityClassName: Forbidden: the priority is immutable",
        ),
        (
            "protect the core",
            |j| j.spec.protect_core = Some(true),
            "spec.protectCore: Forbidden: whether the core has a disruption budget is fixed",
        ),
        (
            "remove a role",
            |j| j.spec.learner = None,
            "spec.learner: Forbidden: a role cannot be removed from a job; set its replicas to 0 instead",
        ),
        (
            "change GPUs of running learners",
            |j| j.spec.learner.as_mut().unwrap().gpus = Some(2),
            "spec.learner.gpus: Forbidden: cannot change while the job has 1 learners; set spec.learner.replicas to 0 first",
        ),
        (
            "change the aggregator of running learners",
            |j| j.spec.learner.as_mut().unwrap().aggregator_config = Some("other".into()),
            "spec.learner.aggregatorConfig: Forbidden: cannot change while the job has 1 learners",
        ),
    ];
    for (name, mutate, want) in forbidden {
        let old = valid_job();
        let mut new = old.clone();
        mutate(&mut new);
        let got = update_errors(old, new);
        assert_eq!(got.len(), 1, "{name}: {got:#?}");
        assert!(got[0].starts_with(want), "{name}: {:?} does not start with {want:?}", got[0]);
    }

    // GPUs may change while no learner runs.
    let mut old = valid_job();
    old.spec.learner.as_mut().unwrap().replicas = Some(0);
    let mut new = old.clone();
    new.spec.learner.as_mut().unwrap().gpus = Some(4);
    assert_eq!(update_errors(old, new), Vec::<String>::new());

    // An update is also checked as a create.
    let old = valid_job();
    let mut new = old.clone();
    new.spec.collector.as_mut().unwrap().replicas = Some(-3);
    assert_eq!(update_errors(old, new), vec!["spec.collector.replicas: Invalid value: -3: must be between 0 and 1000"]);
}

/// A job an older release accepted keeps changing what may change, though its coordinator's
/// template breaks a rule made since (on the node's network); the template itself stays
/// immutable, and a new job with it is refused.
#[test]
fn a_template_kept_as_it_was_is_not_checked_again() {
    let mut old = valid_job();
    pod(&mut old, "coordinator").host_network = Some(true);
    let mut new = old.clone();
    new.spec.collector.as_mut().unwrap().replicas = Some(4);
    assert_eq!(update_errors(old.clone(), new), Vec::<String>::new());
    let mut changed = old.clone();
    pod(&mut changed, "coordinator").containers[0].image = Some("other".into());
    let got = update_errors(old, changed.clone());
    assert!(got.iter().any(|e| e.starts_with("spec.coordinator.template.spec.hostNetwork: Forbidden")), "{got:#?}");
    assert!(got.iter().any(|e| e.starts_with("spec.coordinator.template: Forbidden")), "{got:#?}");
}
