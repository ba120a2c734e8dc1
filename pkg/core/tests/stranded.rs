//! Collectors stranded on a lost node (`stranded`): their short tolerations of a lost node, and
//! the passes that release one stuck Terminating past its grace period, never a core pod.

mod common;

use std::time::Duration;

use common::{decide, job, now, observed, with_status, world_of};
use di_api::defaults::default_dijob;
use di_api::{DIJob, DIJobStatus, Phase};
use di_core::desired::{Settings, task_objects};
use di_core::node_loss::{NODE_LOST_TAINTS, TOLERATION_SECONDS, node_lost};
use di_core::plan::Action;
use k8s_openapi::api::core::v1::{Node, Pod, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use serde_json::json;

fn lost_node_tolerations(pod: &Pod) -> Vec<Toleration> {
    let tolerations = pod.spec.as_ref().and_then(|s| s.tolerations.clone()).unwrap_or_default();
    tolerations.into_iter().filter(|t| NODE_LOST_TAINTS.contains(&t.key.as_deref().unwrap_or_default())).collect()
}

/// `pod` on node `node`, deleted with a grace period that ends at `ends`.
fn terminating(mut pod: Pod, node: &str, ends: Timestamp) -> Pod {
    pod.spec.get_or_insert_default().node_name = Some(node.into());
    pod.metadata.deletion_timestamp = Some(Time(ends));
    pod
}

fn released(actions: &[Action]) -> Vec<(String, String)> {
    let of = |a: &Action| match a {
        Action::ReleaseStranded { name, node, .. } => Some((name.clone(), node.clone())),
        _ => None,
    };
    actions.iter().filter_map(of).collect()
}

fn running(job: DIJob) -> DIJob {
    with_status(job, DIJobStatus { phase: Some(Phase::Running), ..Default::default() })
}

#[test]
fn collectors_leave_a_lost_node_within_a_minute_and_the_core_keeps_the_default() {
    let (pods, _) = world_of(&job(1, 1, json!({})), |_| Some("Pending"));
    for pod in &pods {
        let tolerations = lost_node_tolerations(pod);
        if pod.name_any().contains("collector") {
            assert_eq!(tolerations.len(), 2, "{tolerations:?}");
            for t in &tolerations {
                assert_eq!((t.effect.as_deref(), t.operator.as_deref()), (Some("NoExecute"), Some("Exists")));
                assert_eq!(t.toleration_seconds, Some(TOLERATION_SECONDS));
            }
        } else {
            assert!(tolerations.is_empty(), "{}: Kubernetes' 300 s: {tolerations:?}", pod.name_any());
        }
    }
    // A template's own toleration of a key wins; the other key still gets the short one.
    let own = json!({"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 600});
    let template = json!({"template": {"spec": {"containers": [{"name": "di-container", "image": "ding"}], "tolerations": [own]}}});
    let (pods, _) = world_of(&job(1, 0, json!({"collector": template})), |_| Some("Pending"));
    let collector = pods.iter().find(|p| p.name_any() == "job-collector-0").unwrap();
    let seconds: Vec<_> = lost_node_tolerations(collector).iter().map(|t| t.toleration_seconds).collect();
    assert_eq!(seconds, [Some(600), Some(TOLERATION_SECONDS)]);

    // A template that tolerates every taint keeps its pods on a silent node: nothing is added.
    // One that only keeps new pods off (NoSchedule) still gets both.
    for (own, added) in [
        (json!({"operator": "Exists"}), 0),
        (json!({"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoSchedule"}), 2),
    ] {
        let template = json!({"template": {"spec": {"containers": [{"name": "di-container", "image": "ding"}], "tolerations": [own]}}});
        let (pods, _) = world_of(&job(1, 0, json!({"collector": template})), |_| Some("Pending"));
        let collector = pods.iter().find(|p| p.name_any() == "job-collector-0").unwrap();
        let ours = lost_node_tolerations(collector)
            .iter()
            .filter(|t| t.toleration_seconds == Some(TOLERATION_SECONDS))
            .count();
        assert_eq!(ours, added, "{own}");
    }
}

#[test]
fn a_collector_stuck_terminating_past_its_grace_is_released_and_the_core_never() {
    let job = running(job(2, 1, json!({})));
    let (mut pods, services) = world_of(&job, |_| Some("Running"));
    let past = now() - SignedDuration::from_secs(30);
    for pod in pods.iter_mut() {
        if ["job-collector-1", "job-coordinator", "job-learner-0"].contains(&pod.name_any().as_str()) {
            *pod = terminating(pod.clone(), "worker-a", past);
        }
    }
    let plan = decide(&job, &pods, &services, now());
    assert_eq!(released(&plan.actions), [("job-collector-1".to_owned(), "worker-a".to_owned())]);
    assert_eq!(plan.requeue_after, Some(Duration::from_secs(15)), "its node asked about again while it answers");
    let uid = plan.actions.iter().find_map(|a| match a {
        Action::ReleaseStranded { uid, .. } => Some(uid.clone()),
        _ => None,
    });
    assert_eq!(uid.as_deref(), Some("uid-job-collector-1"), "this pod, not a successor of its name");
}

#[test]
fn a_collector_within_its_grace_is_left_to_its_kubelet_until_the_grace_ends() {
    let job = running(job(1, 0, json!({})));
    let (mut pods, services) = world_of(&job, |_| Some("Running"));
    let collector = pods.iter_mut().find(|p| p.name_any() == "job-collector-0").unwrap();
    *collector = terminating(collector.clone(), "worker-a", now() + SignedDuration::from_secs(20));
    let plan = decide(&job, &pods, &services, now());
    assert!(released(&plan.actions).is_empty(), "{:?}", plan.actions);
    assert_eq!(plan.requeue_after, Some(Duration::from_secs(25)), "looked at again a moment after its grace ends");
    let later = decide(&job, &pods, &services, now() + SignedDuration::from_secs(25));
    assert_eq!(released(&later.actions).len(), 1, "{:?}", later.actions);
}

#[test]
fn a_task_jobs_collectors_are_released_and_its_other_tasks_are_not() {
    let template = json!({"spec": {"containers": [{"name": "di-container", "image": "ding"}]}});
    let mut job: DIJob = serde_json::from_value(json!({
        "apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob",
        "metadata": {"name": "cp", "namespace": "ns", "uid": "job-uid", "generation": 1},
        "spec": {"tasks": [
            {"type": "learner", "template": template},
            {"type": "collector", "replicas": 2, "template": template},
        ]},
    }))
    .unwrap();
    default_dijob(&mut job);
    let job = running(job);
    let objects = task_objects(&job, &Settings::default()).unwrap();
    let past = now() - SignedDuration::from_secs(30);
    let mut pods = vec![];
    for task_pod in &objects.pods {
        let pod = observed(task_pod.pod.clone(), "Running");
        let collector = task_pod.member.task == "collector";
        assert_eq!(lost_node_tolerations(&pod).len(), if collector { 2 } else { 0 }, "{}", pod.name_any());
        pods.push(terminating(pod, "worker-b", past));
    }
    let plan = decide(&job, &pods, std::slice::from_ref(&objects.service), now());
    let names: Vec<String> = released(&plan.actions).into_iter().map(|(name, _)| name).collect();
    assert_eq!(names, ["cp-collector-0", "cp-collector-1"]);
}

#[test]
fn a_node_is_lost_when_gone_or_silent_not_when_it_reports_not_ready() {
    let node = |ready: &str| -> Node {
        serde_json::from_value(
            json!({"metadata": {"name": "n"}, "status": {"conditions": [{"type": "Ready", "status": ready}]}}),
        )
        .unwrap()
    };
    assert!(node_lost(None), "deleted (a spot reclaim)");
    assert!(node_lost(Some(&node("Unknown"))), "its kubelet stopped reporting");
    assert!(!node_lost(Some(&node("False"))), "its kubelet answers, and stops its pods itself");
    assert!(!node_lost(Some(&node("True"))));
}
