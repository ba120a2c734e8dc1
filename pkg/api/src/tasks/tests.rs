use serde_json::json;

use super::*;

fn job(tasks: serde_json::Value) -> DIJob {
    serde_json::from_value(json!({
        "apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob",
        "metadata": {"name": "cp", "namespace": "rl"},
        "spec": {"tasks": tasks},
    }))
    .unwrap()
}

#[test]
fn ranks_follow_spec_order_then_index_without_gaps() {
    let job = job(json!([
        {"type": "learner"},
        {"type": "evaluator", "replicas": 1},
        {"name": "collector", "type": "collector", "replicas": 3},
    ]));
    let tasks = tasks(&job);
    let got: Vec<(String, u32, u32)> = members("cp", &tasks).into_iter().map(|m| (m.pod, m.index, m.rank)).collect();
    let want = [
        ("cp-learner-0", 0, 0),
        ("cp-evaluator-0", 0, 1),
        ("cp-collector-0", 0, 2),
        ("cp-collector-1", 1, 3),
        ("cp-collector-2", 2, 4),
    ];
    assert_eq!(got, want.map(|(p, i, r)| (p.to_string(), i, r)));
    assert_eq!(peers(&tasks), "learner=1,evaluator=1,collector=3");
}

#[test]
fn the_environment_names_every_peer_and_the_pods_own_rank() {
    let job = job(json!([{"type": "learner"}, {"name": "sample-worker", "type": "none", "replicas": 2}]));
    let tasks = tasks(&job);
    let env = environment(&job, &tasks, "example.org");
    let fqdn = |pod: &str| format!("{pod}.di-cp.rl.svc.example.org");
    let nodes = [fqdn("cp-learner-0"), fqdn("cp-sample-worker-0"), fqdn("cp-sample-worker-1")].join(",");
    for (member, vars) in &env {
        let get = |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()).unwrap();
        assert_eq!(get("DI_JOB_ID"), "rl/cp");
        assert_eq!(get("DI_RANK"), member.rank.to_string());
        assert_eq!(get("DI_NODES"), nodes);
        // What DI-engine's parser requires: its own address at its rank.
        assert_eq!(get("DI_NODES").split(',').nth(member.rank as usize), Some(fqdn(&member.pod).as_str()));
        assert_eq!(get("DI_LEARNER_NODES"), fqdn("cp-learner-0"));
        assert_eq!(get("DI_SAMPLE_WORKER_NODES"), [fqdn("cp-sample-worker-0"), fqdn("cp-sample-worker-1")].join(","));
    }
    assert_eq!(env.len(), 3);
}

#[test]
fn defaults_name_count_and_the_deciding_task() {
    let table = [
        // (tasks, expected (name, replicas, completion))
        (
            json!([{"type": "learner"}, {"type": "collector", "replicas": 2}]),
            vec![("learner", 1, true), ("collector", 2, false)],
        ),
        (json!([{"name": "a"}, {"name": "b", "type": "evaluator"}]), vec![("a", 1, true), ("b", 1, true)]),
        (
            json!([{"type": "learner"}, {"name": "runner", "completion": true}]),
            vec![("learner", 1, false), ("runner", 1, true)],
        ),
        (json!([{"name": "", "type": "collector", "replicas": -2}]), vec![("collector", 0, true)]),
    ];
    for (spec, want) in table {
        let job = job(spec.clone());
        let got: Vec<(String, u32, bool)> =
            tasks(&job).into_iter().map(|t| (t.name, t.replicas, t.completion)).collect();
        let want: Vec<(String, u32, bool)> = want.into_iter().map(|(n, r, c)| (n.to_string(), r, c)).collect();
        assert_eq!(got, want, "{spec}");
    }
}

#[test]
fn task_names_become_variable_names() {
    assert_eq!(env::task_nodes("collector"), "DI_COLLECTOR_NODES");
    assert_eq!(env::task_nodes("rollout-worker-2"), "DI_ROLLOUT_WORKER_2_NODES");
    assert_eq!(fqdn("j-a-0", "j", "ns", DEFAULT_CLUSTER_DOMAIN), "j-a-0.di-j.ns.svc.cluster.local");
}
