//! The collector role's queue fields (`minReplicas`, `maxReplicas`, `workloadPriorityClassName`):
//! their rules on create, table-driven as `validation.rs`, on update, and the warnings of a job
//! in no queue (`validation/collectors.rs`).

mod common;

use common::{Mutation, each_refused_once, update_errors, valid_job};

#[test]
fn each_collector_count_rule_rejects_with_field_and_fix() {
    let cases: Vec<(&str, Mutation, &str, &str)> = vec![
        (
            "maxReplicas without minReplicas",
            |j| j.spec.collector.as_mut().unwrap().max_replicas = Some(4),
            "spec.collector.maxReplicas",
            "Required value: spec.collector.minReplicas",
        ),
        (
            "more collectors than maxReplicas",
            |j| {
                let collector = j.spec.collector.as_mut().unwrap();
                (collector.min_replicas, collector.max_replicas) = (Some(1), Some(1));
            },
            "spec.collector.replicas",
            "Invalid value: 2: more than spec.collector.maxReplicas (1)",
        ),
        (
            "a collectors' class without minReplicas",
            |j| j.spec.collector.as_mut().unwrap().workload_priority_class_name = Some("spare".into()),
            "spec.collector.workloadPriorityClassName",
            "Required value: spec.collector.minReplicas",
        ),
        (
            "a collectors' class that is no name",
            |j| {
                let collector = j.spec.collector.as_mut().unwrap();
                (collector.min_replicas, collector.workload_priority_class_name) = (Some(1), Some("Spare!".into()));
            },
            "spec.collector.workloadPriorityClassName",
            "Invalid value \"Spare!\": a WorkloadPriorityClass name",
        ),
        (
            "minReplicas above maxReplicas",
            |j| {
                let collector = j.spec.collector.as_mut().unwrap();
                (collector.min_replicas, collector.max_replicas) = (Some(3), Some(2));
            },
            "spec.collector.minReplicas",
            "Invalid value: 3: more than spec.collector.maxReplicas (2)",
        ),
    ];
    each_refused_once(cases);
}

/// Which collectors run in a queued job's core is fixed with its Workloads; `minReplicas` without
/// a queue is accepted with a warning that it does nothing there.
#[test]
fn min_replicas_is_fixed_and_said_to_need_a_queue() {
    let mut old = valid_job();
    old.spec.collector.as_mut().unwrap().min_replicas = Some(1);
    let mut new = old.clone();
    new.spec.collector.as_mut().unwrap().min_replicas = Some(2);
    let got = update_errors(old.clone(), new);
    assert_eq!(got.len(), 1, "{got:#?}");
    assert!(got[0].starts_with("spec.collector.minReplicas: Forbidden"), "{got:#?}");
    let mut new = old.clone();
    new.spec.collector.as_mut().unwrap().workload_priority_class_name = Some("spare".into());
    let got = update_errors(old.clone(), new);
    assert_eq!(got.len(), 1, "{got:#?}");
    assert!(got[0].starts_with("spec.collector.workloadPriorityClassName: Forbidden"), "{got:#?}");
    let said = di_api::validation::warnings(&old);
    assert!(said.iter().any(|w| w.starts_with("spec.collector.minReplicas: acts only in a Kueue queue")), "{said:?}");
    old.metadata.labels = Some([("kueue.x-k8s.io/queue-name".to_string(), "team".to_string())].into());
    assert!(di_api::validation::warnings(&old).is_empty());
}

/// `maxReplicas` may change on a live job (it is a limit, not a Workload's shape); without a
/// queue, collectors it allows above `replicas` are said not to run.
#[test]
fn max_replicas_changes_and_is_said_to_need_a_queue() {
    let mut old = valid_job();
    let collector = old.spec.collector.as_mut().unwrap();
    (collector.min_replicas, collector.max_replicas) = (Some(1), Some(4));
    let mut new = old.clone();
    new.spec.collector.as_mut().unwrap().max_replicas = Some(8);
    assert!(update_errors(old.clone(), new).is_empty());
    let said = di_api::validation::warnings(&old);
    assert!(said.iter().any(|w| w.starts_with("spec.collector.maxReplicas: collectors above")), "{said:?}");
    old.metadata.labels = Some([("kueue.x-k8s.io/queue-name".to_string(), "team".to_string())].into());
    assert!(di_api::validation::warnings(&old).is_empty());
    assert_eq!(old.collector_slots(), 4);
}
