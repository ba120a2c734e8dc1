//! The metrics as `/metrics` shows them, and how an API path is named.

use super::*;

#[test]
fn encodes_every_metric() {
    let metrics = Metrics::new();
    drop(metrics.reconcile_started());
    metrics.pods_created.inc();
    metrics.phase_transition(Phase::Running);
    metrics.jobs.get_or_create(&PhaseLabel { phase: "Running".into() }).set(2);
    metrics.api_request_answered(
        "PATCH",
        "/apis/diengine.opendilab.org/v1alpha1/namespaces/a/dijobs/j/status",
        None,
        0.01,
    );
    metrics.api_request_answered("GET", "/api/v1/pods", Some("watch=true&labelSelector=x"), 60.0);
    let text = metrics.encode();
    for line in [
        "di_orchestrator_reconciles_total 1",
        "di_orchestrator_pods_created_total 1",
        "di_orchestrator_phase_transitions_total{phase=\"Running\"} 1",
        "di_orchestrator_jobs{phase=\"Running\"} 2",
        "di_orchestrator_reconcile_duration_seconds_count 1",
        "di_orchestrator_api_request_duration_seconds_count{verb=\"PATCH\",resource=\"dijobs/status\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
    }
}

fn has_line(text: &str, line: &str) {
    assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
}

#[test]
fn times_waits_in_seconds_up_to_hours() {
    let metrics = Metrics::new();
    metrics.time_to_running.observe(4.2);
    metrics.queue_wait.observe(5400.0);
    metrics.jobs_queued.set(3);
    metrics.queue_longest_wait.set(7200);
    let text = metrics.encode();
    for line in [
        "# TYPE di_orchestrator_time_to_running_seconds histogram",
        "di_orchestrator_time_to_running_seconds_count 1",
        "di_orchestrator_time_to_running_seconds_bucket{le=\"4.0\"} 0",
        "di_orchestrator_time_to_running_seconds_bucket{le=\"8.0\"} 1",
        "di_orchestrator_queue_wait_seconds_bucket{le=\"4096.0\"} 0",
        "di_orchestrator_queue_wait_seconds_bucket{le=\"8192.0\"} 1",
        "di_orchestrator_queue_wait_seconds_bucket{le=\"16384.0\"} 1",
        "di_orchestrator_queue_wait_seconds_sum 5400.0",
        "di_orchestrator_jobs_queued 3",
        "di_orchestrator_queue_longest_wait_seconds 7200",
    ] {
        has_line(&text, line);
    }
}

#[test]
fn the_leader_gauge_is_one_while_leading() {
    let metrics = Metrics::new();
    has_line(&metrics.encode(), "di_orchestrator_leader 0");
    let leading = metrics.leading();
    has_line(&metrics.encode(), "di_orchestrator_leader 1");
    drop(leading);
    drop(metrics.leading());
    let text = metrics.encode();
    has_line(&text, "di_orchestrator_leader 0");
    has_line(&text, "di_orchestrator_leader_acquisitions_total 2");
}

#[test]
fn names_the_resource_of_a_path() {
    for (path, resource) in [
        ("/api/v1/namespaces/a/pods", "pods"),
        ("/api/v1/namespaces/a/pods/p", "pods"),
        ("/api/v1/namespaces/a/pods/p/status", "pods/status"),
        ("/api/v1/pods", "pods"),
        ("/api/v1/namespaces", "namespaces"),
        ("/api/v1/namespaces/a", "namespaces"),
        ("/apis/diengine.opendilab.org/v1alpha1/namespaces/a/dijobs/j/status", "dijobs/status"),
        ("/apis/rbac.authorization.k8s.io/v1/namespaces/a/rolebindings", "rolebindings"),
        ("/apis/coordination.k8s.io/v1/namespaces/di-system/leases/di-orchestrator", "leases"),
        ("/version", "/version"),
    ] {
        assert_eq!(resource_of(path), resource, "{path}");
    }
}
