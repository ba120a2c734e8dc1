//! A queued job's pass when its queue has just admitted it: the status that says so is written
//! before the first pod is created, and the job's wait is timed.

use kube::api::DynamicObject;
use kube::runtime::{reflector, watcher};
use serde_json::json;

use super::fixtures::*;
use super::*;
use crate::context::Kueue;

/// A context whose Kueue caches hold `workload`.
fn context_with_workload(client: kube::Client, workload: serde_json::Value) -> Arc<Context> {
    let mut ctx = context(client, vec![], vec![]);
    let mut writer = reflector::store::Writer::new(di_core::queue::workload_kind());
    let object: DynamicObject = serde_json::from_value(workload).unwrap();
    writer.apply_watcher_event(&watcher::Event::Apply(object));
    let flavors = reflector::store::Writer::new(di_core::queue::flavor_kind()).as_reader();
    let classes = reflector::store::Writer::new(di_core::queue::workload_priority_kind()).as_reader();
    let kueue = Kueue {
        workloads: writer.as_reader(),
        flavors,
        priorities: reflector::store().0,
        workload_priorities: classes,
    };
    Arc::get_mut(&mut ctx).expect("the test's context alone").kueue = Some(kueue);
    ctx
}

/// The webhook lets a job whose status says it waits (`Queued=True`) leave its queue. Admitted,
/// its pass writes `Queued=False` before any pod: a job with pods is never one whose status says
/// it waits.
#[tokio::test]
async fn an_admitted_job_says_so_before_its_first_pod() {
    let mut job = job(1, "Running", None);
    job.metadata.labels = Some([(di_core::queue::QUEUE_LABEL.to_string(), "team".to_string())].into());
    let waiting = json!({"phase": "Pending", "conditions": [{"type": "Queued", "status": "True", "reason": "Pending",
        "message": "waiting in queue team", "lastTransitionTime": "2026-11-28T09:00:00Z"}]});
    job.status = Some(serde_json::from_value(waiting).unwrap());
    let mut workload =
        di_core::queue::workload(&job, "team", None, None, &crate::desired::Settings::default()).unwrap();
    workload["metadata"]["resourceVersion"] = json!("7");
    workload["status"] = json!({
        "conditions": [
            {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "", "lastTransitionTime": "2026-11-28T09:00:01Z"},
            {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "", "lastTransitionTime": "2026-11-28T09:00:01Z"},
        ],
        "admission": {"clusterQueue": "team", "podSetAssignments": [
            {"name": "coordinator", "count": 1}, {"name": "collector", "count": 1},
        ]},
    });
    let (client, recorded) = fake_api_server(&job);
    let ctx = context_with_workload(client, workload);
    reconcile(view_of(&job), ctx.clone()).await.unwrap();
    let text = ctx.metrics.encode();
    let timed = "di_orchestrator_queue_wait_seconds_count 1";
    assert!(text.lines().any(|l| l == timed), "its wait is timed once: {text}");
    let calls = recorded.calls();
    let status = calls.iter().position(|c| c.method == "PATCH" && c.path.ends_with("/status"));
    let first_pod = calls.iter().position(|c| c.method == "POST" && c.path.ends_with("/pods"));
    let (Some(status), Some(first_pod)) = (status, first_pod) else { panic!("a status and pods: {calls:#?}") };
    assert!(status < first_pod, "the status first: {calls:#?}");
    let written = &calls[status].body["status"]["conditions"];
    let queued = written.as_array().unwrap().iter().find(|c| c["type"] == "Queued").unwrap();
    assert_eq!(queued["status"], "False", "{queued}");
}
