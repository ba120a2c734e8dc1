//! The tables and texts `kubectl di` prints, as a reader sees them.

use super::*;
use serde_json::json;

fn job(name: &str, ns: &str, status: serde_json::Value) -> DIJob {
    serde_json::from_value(json!({
        "apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJob",
        "metadata": {"name": name, "namespace": ns, "creationTimestamp": "2026-11-22T09:00:00Z"},
        "spec": {"cleanPodPolicy": "All", "collector": {"replicas": 4, "template": {}}, "learner": {"replicas": 1, "gpus": 2, "template": {}}},
        "status": status,
    }))
    .unwrap()
}

fn now() -> Timestamp {
    "2026-11-22T10:30:00Z".parse().unwrap()
}

#[test]
fn get_tables() {
    let jobs = vec![
        job("cartpole", "rl", json!({"phase": "Running", "collectors": "3/4", "learners": "1/1", "readyReplicas": 4})),
        job("a-much-longer-name", "other", json!({})),
    ];
    assert_eq!(
        jobs_table(&jobs, &Workers::default(), false, false, now()),
        "NAME                 PHASE     READY   RESTARTS   COLLECTORS   LEARNERS   AGE\n\
         cartpole             Running   4/6     0          3/4          1/1        1h\n\
         a-much-longer-name   Pending   0/6     0          0/4          0/1        1h\n"
    );
    assert_eq!(
        jobs_table(&jobs[..1], &Workers::default(), true, true, now()),
        "NAMESPACE   NAME       PHASE     READY   RESTARTS   COLLECTORS   LEARNERS   AGE   GPUS/LEARNER   SUSPENDED   CLEANUP\n\
         rl          cartpole   Running   4/6     0          3/4          1/1        1h    2              false       All\n"
    );
}

#[test]
fn task_jobs_show_ready_pods_restarts_and_tasks() {
    let job: DIJob = serde_json::from_value(json!({
        "apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob",
        "metadata": {"name": "mesh", "namespace": "rl", "creationTimestamp": "2026-11-22T09:00:00Z"},
        "spec": {"tasks": [{"type": "learner", "template": {}}, {"type": "collector", "replicas": 2, "template": {}}]},
        "status": {"phase": "Restarting", "replicas": 3, "readyReplicas": 2, "restarts": 1,
                   "taskStatus": {"collector": {"Pending": 1, "Running": 1}, "learner": {"Running": 1}}},
    }))
    .unwrap();
    assert_eq!(
        jobs_table(std::slice::from_ref(&job), &Workers::default(), false, false, now()),
        "NAME   PHASE        READY   RESTARTS   COLLECTORS   LEARNERS   AGE\n\
         mesh   Restarting   2/3     1          -            -          1h\n"
    );
    assert_eq!(progress(&job), "mesh: phase Restarting, ready 2/3");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "mesh-collector-1", "namespace": "rl", "labels": {"diengine.opendilab.org/task": "collector"}},
        "spec": {"subdomain": "di-mesh", "containers": []}, "status": {"phase": "Pending"}
    }))
    .unwrap();
    let text = describe(&job, &Workers::default(), &[pod], &[], now());
    assert!(text.contains("Restarts:           1 of at most 3\n"), "{text}");
    assert!(text.contains("  collector   collector   2          ") && text.contains("Pending 1, Running 1"), "{text}");
    assert!(text.contains("  mesh-collector-1   collector   Pending   mesh-collector-1.di-mesh.rl.svc\n"), "{text}");
}

#[test]
fn a_job_waiting_for_capacity_says_so() {
    let waiting = job(
        "j",
        "ns",
        json!({"phase": "Created", "conditions": [{"type": "WaitingForCapacity", "status": "True",
            "message": "2 pod(s) cannot be placed yet"}]}),
    );
    assert_eq!(phase(&waiting), "Created (WaitingForCapacity)");
    let placed =
        job("j", "ns", json!({"phase": "Running", "conditions": [{"type": "WaitingForCapacity", "status": "False"}]}));
    assert_eq!(phase(&placed), "Running");
    let queued = job("j", "ns", json!({"phase": "Created", "conditions": [{"type": "Queued", "status": "True"}]}));
    assert_eq!(phase(&queued), "Created (Queued)");
}

#[test]
fn ages() {
    let at = |s: &str| Some(s.parse::<Timestamp>().unwrap());
    assert_eq!(age(at("2026-11-22T10:29:18Z"), now()), "42s");
    assert_eq!(age(at("2026-11-22T10:25:00Z"), now()), "5m");
    assert_eq!(age(at("2026-11-20T10:00:00Z"), now()), "2d");
    assert_eq!(age(None, now()), "<unknown>");
}

#[test]
fn progress_lines() {
    let running = job("j", "ns", json!({"phase": "Running", "collectors": "4/4", "learners": "1/1"}));
    assert_eq!(progress(&running), "j: phase Running, collectors 4/4, learners 1/1");
    assert_eq!(progress(&job("j", "ns", json!({}))), "j: phase Pending, collectors 0/4, learners 0/1");
}

#[test]
fn describe_says_where_a_job_stands_in_its_queue() {
    let queued = |conditions: serde_json::Value| {
        let mut j = job("j", "ns", json!({"phase": "Created", "conditions": conditions}));
        j.labels_mut().insert(di_core::queue::QUEUE_LABEL.into(), "team".into());
        describe(&j, &Workers::default(), &[], &[], now())
    };
    let line = |text: String| text.lines().find(|l| l.starts_with("Queue:")).map(str::to_owned);
    let evicted = json!([{"type": "Queued", "status": "True", "reason": "Evicted"}]);
    assert_eq!(line(queued(evicted)).as_deref(), Some("Queue:              team: waiting (Evicted)"));
    let admitted = json!([{"type": "Queued", "status": "False", "reason": "Admitted"}]);
    assert_eq!(line(queued(admitted)).as_deref(), Some("Queue:              team: admitted"));
    assert_eq!(
        line(describe(&job("j", "ns", json!({})), &Workers::default(), &[], &[], now())),
        None,
        "a job in no queue"
    );
}

/// A queued job with collectors above its core: `get` and `describe` say how many wait for
/// quota and how many run on spare room.
#[test]
fn collectors_above_the_core_are_shown_waiting_and_spare() {
    let above = |counts: serde_json::Value| {
        let mut j = job("j", "ns", json!({"phase": "Running", "collectors": "2/4", "collectorsAboveCore": counts}));
        let collector = j.spec.collector.as_mut().unwrap();
        (collector.min_replicas, collector.max_replicas) = (Some(1), Some(6));
        j
    };
    let waiting = above(json!({"admitted": 1, "waiting": 2, "preempted": 2, "spare": 0}));
    let column = |j: &DIJob| {
        jobs_table(std::slice::from_ref(j), &Workers::default(), false, false, now()).lines().nth(1).unwrap().to_owned()
    };
    assert!(column(&waiting).contains(" 2/4 (2 waiting) "), "{}", column(&waiting));
    let spare = above(json!({"admitted": 4, "waiting": 0, "preempted": 0, "spare": 2}));
    assert!(column(&spare).contains(" 2/4 (2 spare) "), "{}", column(&spare));
    let text = describe(&waiting, &Workers::default(), &[], &[], now());
    assert!(text.contains("Above the core:     1 admitted, 2 waiting for quota (2 preempted)\n"), "{text}");
    assert!(text.contains("Collector range:    1 in the core, up to 6 on spare room\n"), "{text}");
    let text = describe(&spare, &Workers::default(), &[], &[], now());
    assert!(text.contains("Above the core:     4 admitted (2 on spare room), 0 waiting for quota\n"), "{text}");
}

#[test]
fn describe_text() {
    let job = job(
        "cartpole",
        "rl",
        json!({"phase": "Running", "collectors": "1/4", "learners": "0/1",
        "conditions": [{"type": "Running", "status": "True", "reason": "CoordinatorRunning", "message": "the coordinator is running"}]}),
    );
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "cartpole-collector-0", "namespace": "rl", "labels": {"replica-type": "collector"}},
        "spec": {"containers": [{"name": "di-container", "ports": [{"name": "di-port", "containerPort": 22270}]}]},
        "status": {"phase": "Running"}
    }))
    .unwrap();
    let events =
        vec![("Normal".to_string(), "Created".to_string(), "created 1 pod(s): cartpole-collector-0".to_string())];
    assert_eq!(
        describe(&job, &Workers::default(), &[pod], &events, now()),
        "Name:               cartpole\n\
         Namespace:          rl\n\
         Phase:              Running\n\
         Age:                1h\n\
         Clean pod policy:   All\n\
         Suspended:          false\n\
         Ready:              0/6\n\
         Collectors:         1/4\n\
         Learners:           0/1\n\
         GPUs per learner:   2\n\
         \n\
         Conditions:\n\
         \x20 TYPE      STATUS   REASON               MESSAGE\n\
         \x20 Running   True     CoordinatorRunning   the coordinator is running\n\
         \n\
         Replicas:\n\
         \x20 POD                    ROLE        PHASE     URL\n\
         \x20 cartpole-collector-0   collector   Running   cartpole-collector-0.rl:22270\n\
         \n\
         Events:\n\
         \x20 TYPE     REASON    MESSAGE\n\
         \x20 Normal   Created   created 1 pod(s): cartpole-collector-0\n"
    );
}

/// On a MultiKueue manager: a dispatched job's phase is the worker's, with the worker named, and
/// while no worker has it, it is dispatching, whatever a worker that had it wrote last.
#[test]
fn a_dispatched_job_shows_its_worker() {
    let mut running = job("cartpole", "rl", json!({"phase": "Running", "readyReplicas": 6}));
    running.spec.managed_by = Some(di_api::contract::kueue::MULTIKUEUE.into());
    let on = Workers {
        by_job: [(("rl".to_string(), "cartpole".to_string()), Some("gpu-west".to_string()))].into(),
        unknown: false,
    };
    let row = |workers: &Workers| jobs_table(std::slice::from_ref(&running), workers, false, false, now());
    assert!(row(&on).contains("Running (on gpu-west)"), "{}", row(&on));
    let back = Workers { by_job: [(("rl".to_string(), "cartpole".to_string()), None)].into(), unknown: false };
    assert!(row(&back).contains("Pending (dispatching)"), "{}", row(&back));
    let text = describe(&running, &on, &[], &[], now());
    assert!(text.contains("Dispatched:         by MultiKueue to worker cluster gpu-west"), "{text}");
    let mut done = running.clone();
    done.status.as_mut().unwrap().phase = Some(di_api::Phase::Succeeded);
    let finished = jobs_table(std::slice::from_ref(&done), &back, false, false, now());
    assert!(finished.contains("Succeeded"), "{finished}");
    let unreadable = Workers { unknown: true, ..Workers::default() };
    assert!(row(&unreadable).contains("Running (worker unknown)"), "{}", row(&unreadable));
}
