use std::path::{Path, PathBuf};

use di_api::defaults::default_dijob;
use serde_json::json;

use super::*;
use crate::local::mounts::ConfigMaps;

fn job(spec: serde_json::Value, api: &str) -> DIJob {
    let mut job: DIJob = serde_json::from_value(json!({
        "apiVersion": format!("diengine.opendilab.org/{api}"), "kind": "DIJob",
        "metadata": {"name": "j", "namespace": "rl"}, "spec": spec,
    }))
    .unwrap();
    default_dijob(&mut job);
    job
}

fn container(command: &str) -> serde_json::Value {
    json!({"spec": {"containers": [{"name": "di-container", "image": "ding", "command": ["sh", "-c", command]}]}})
}

/// Ports from 32000, none of them in use.
const NONE_IN_USE: Ports = Ports { first: 32000, in_use: |_| false };

fn env<'a>(r: &'a LocalReplica, k: &str) -> Option<&'a str> {
    r.env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str())
}

#[test]
fn task_peers_are_loopback_addresses_in_rank_order() {
    let job = job(
        json!({"tasks": [{"type": "learner", "template": container("learn")}, {"type": "collector", "replicas": 2, "template": container("collect")}]}),
        "v2alpha1",
    );
    let plan = plan(&job, Path::new("/run"), NONE_IN_USE, &ConfigMaps::new(), &[]).unwrap();
    let names: Vec<&str> = plan.replicas.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["j-learner-0", "j-collector-0", "j-collector-1"]);
    let addresses: Vec<String> = plan.replicas.iter().map(|r| r.address.to_string()).collect();
    assert_eq!(addresses, ["127.0.0.2", "127.0.0.3", "127.0.0.4"]);
    for (rank, r) in plan.replicas.iter().enumerate() {
        assert_eq!(env(r, "DI_NODES"), Some("127.0.0.2,127.0.0.3,127.0.0.4"));
        assert_eq!(env(r, "DI_RANK"), Some(rank.to_string().as_str()));
        assert_eq!(env(r, "DI_COLLECTOR_NODES"), Some("127.0.0.3,127.0.0.4"));
        assert_eq!(env(r, "DI_JOB_ID"), Some("rl/j"));
        assert_eq!(r.port, None, "a task's ports are its program's");
        assert_eq!(r.workdir, Path::new("/run").join(&r.name));
    }
    assert_eq!(plan.replicas[1].argv, ["sh", "-c", "collect"]);
    assert_eq!(plan.restarts, Restarts::Tasks { policy: JobRestartPolicy::Pod, limit: 3 });
    assert!(matches!(&plan.replicas[0].part, Part::Task { decides: true, rank: 0, .. }));
    assert!(matches!(&plan.replicas[2].part, Part::Task { decides: false, rank: 2, .. }));
    assert_eq!(
        plan.warnings,
        [
            "images are not pulled; the command runs on this machine as it is (j-learner-0, j-collector-0, j-collector-1)"
        ]
    );
}

#[test]
fn role_replicas_get_ports_of_their_own_and_urls_to_them() {
    let job = job(
        json!({"coordinator": {"template": container("coordinate")}, "collector": {"replicas": 2, "template": container("collect")}}),
        "v1alpha1",
    );
    let plan = plan(&job, Path::new("/run"), NONE_IN_USE, &ConfigMaps::new(), &[]).unwrap();
    let ports: Vec<(String, Option<u16>)> = plan.replicas.iter().map(|r| (r.name.clone(), r.port)).collect();
    assert_eq!(
        ports,
        [
            ("j-coordinator".into(), Some(32000)),
            ("j-collector-0".into(), Some(32001)),
            ("j-collector-1".into(), Some(32002))
        ]
    );
    let coordinator = &plan.replicas[0];
    assert_eq!(env(coordinator, "COORDINATOR_PORT"), Some("32000"));
    assert_eq!(env(coordinator, "KUBERNETES_COORDINATOR_URL"), Some("127.0.0.2:32000"));
    assert_eq!(env(coordinator, "KUBERNETES_SERVER_URL"), Some("127.0.0.1:22280"));
    assert_eq!(env(&plan.replicas[2], "COLLECTOR_PORT"), Some("32002"));
    assert_eq!(plan.restarts, Restarts::PerReplica(None));
}

#[test]
fn what_cannot_run_locally_is_refused_or_named() {
    let no_command =
        json!({"tasks": [{"type": "learner", "template": {"spec": {"containers": [{"name": "c", "image": "ding"}]}}}]});
    let err = plan(&job(no_command, "v2alpha1"), Path::new("/run"), NONE_IN_USE, &ConfigMaps::new(), &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("sets no command"), "{err}");

    let mut template = container("x");
    template["spec"]["initContainers"] = json!([{"name": "fetch", "image": "busybox"}]);
    template["spec"]["containers"][0]["volumeMounts"] =
        json!([{"name": "data", "mountPath": "/data"}, {"name": "conf", "mountPath": "/etc/conf"}]);
    template["spec"]["containers"][0]["env"] =
        json!([{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]);
    let spec = json!({"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "d"}},
                                  {"name": "conf", "configMap": {"name": "elsewhere"}}],
                      "tasks": [{"type": "learner", "template": template}]});
    let warnings =
        plan(&job(spec, "v2alpha1"), Path::new("/run"), NONE_IN_USE, &ConfigMaps::new(), &[]).unwrap().warnings;
    for expected in [
        "init containers are not run locally: fetch",
        "volume data is of a kind local runs do not have",
        "ConfigMap elsewhere (volume conf) is not in the job's file",
        "NODE comes from valueFrom",
    ] {
        assert!(warnings.iter().any(|w| w.contains(expected)), "{expected:?} not in {warnings:#?}");
    }
}

#[test]
fn a_later_plan_keeps_every_address_and_gives_new_replicas_free_ones() {
    let spec = |collectors: i32| {
        json!({"coordinator": {"template": container("c")}, "collector": {"replicas": collectors, "template": container("c")},
               "learner": {"replicas": 1, "template": container("l")}})
    };
    let first = plan(&job(spec(1), "v1alpha1"), Path::new("/run"), NONE_IN_USE, &ConfigMaps::new(), &[]).unwrap();
    let second =
        plan(&job(spec(2), "v1alpha1"), Path::new("/run"), NONE_IN_USE, &ConfigMaps::new(), &first.replicas).unwrap();
    let at = |p: &Plan| -> Vec<(String, String, Option<u16>)> {
        p.replicas.iter().map(|r| (r.name.clone(), r.address.to_string(), r.port)).collect()
    };
    assert_eq!(
        at(&second),
        [
            ("j-coordinator".into(), "127.0.0.2".into(), Some(32000)),
            ("j-collector-0".into(), "127.0.0.3".into(), Some(32001)),
            ("j-collector-1".into(), "127.0.0.5".into(), Some(32003)),
            ("j-learner-0".into(), "127.0.0.4".into(), Some(32002)),
        ],
        "the learner keeps what it had"
    );
}

#[test]
fn volumes_are_directories_of_this_machine_named_where_the_container_names_its_mount_path() {
    let mut template = container("exec python3 /opt/w/worker.py --out /scratch/out");
    template["spec"]["containers"][0]["volumeMounts"] = json!([
        {"name": "code", "mountPath": "/opt/w"}, {"name": "tmp", "mountPath": "/scratch"},
        {"name": "host", "mountPath": "/data", "subPath": "ckpt"}]);
    template["spec"]["containers"][0]["env"] = json!([{"name": "PYTHONPATH", "value": "/opt/w:/usr/lib"}]);
    let spec = json!({"volumes": [{"name": "code", "configMap": {"name": "worker"}}, {"name": "tmp", "emptyDir": {}},
                                  {"name": "host", "hostPath": {"path": "/srv"}}],
                      "tasks": [{"type": "learner", "replicas": 2, "template": template}]});
    let config_maps = ConfigMaps::from([("worker".into(), [("worker.py".into(), "print(1)".into())].into())]);
    let plan = plan(&job(spec, "v2alpha1"), Path::new("/run"), NONE_IN_USE, &config_maps, &[]).unwrap();
    assert!(plan.warnings.iter().all(|w| !w.contains("volume")), "{:#?}", plan.warnings);
    let second = &plan.replicas[1];
    assert_eq!(second.argv[2], "exec python3 /run/configmaps/worker/worker.py --out /run/volumes/j-learner-1/tmp/out");
    assert_eq!(env(second, "PYTHONPATH"), Some("/run/configmaps/worker:/usr/lib"));
    assert_eq!(second.mounts.files, [(PathBuf::from("/run/configmaps/worker/worker.py"), "print(1)".to_owned())]);
    assert_eq!(second.mounts.dirs, [PathBuf::from("/run/volumes/j-learner-1/tmp")], "an emptyDir per pod");
    assert!(second.mounts.paths.contains(&("/data".into(), "/srv/ckpt".into())), "{:?}", second.mounts.paths);
}

#[test]
fn a_port_something_listens_on_is_passed_over() {
    let spec =
        json!({"coordinator": {"template": container("c")}, "collector": {"replicas": 2, "template": container("c")}});
    let taken = Ports { first: 32000, in_use: |port| port == 32002 };
    let plan = plan(&job(spec, "v1alpha1"), Path::new("/run"), taken, &ConfigMaps::new(), &[]).unwrap();
    let ports: Vec<Option<u16>> = plan.replicas.iter().map(|r| r.port).collect();
    assert_eq!(ports, [Some(32000), Some(32001), Some(32003)], "the second collector skips 32002");
    let collector = plan.replicas.iter().find(|r| r.name == "j-collector-1").unwrap();
    assert_eq!(env(collector, "COLLECTOR_PORT"), Some("32003"));
}
