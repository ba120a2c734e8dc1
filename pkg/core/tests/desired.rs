//! The desired-state function: every role, aggregator and DDP learners, env, ports, owner
//! references and names.

mod common;

use std::collections::BTreeMap;

use common::{agconfig, job};
use di_api::contract::Role;
use di_core::desired::{self, Replica, Settings};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use serde_json::json;

fn env(pod: &Pod, container: usize) -> BTreeMap<String, String> {
    pod.spec.as_ref().unwrap().containers[container]
        .env
        .iter()
        .flatten()
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect()
}

fn ports(pod: &Pod) -> Vec<(String, i32)> {
    pod.spec.as_ref().unwrap().containers[0]
        .ports
        .iter()
        .flatten()
        .map(|p| (p.name.clone().unwrap_or_default(), p.container_port))
        .collect()
}

fn service_ports(replica: &Replica) -> Vec<(String, i32)> {
    replica.service.spec.as_ref().unwrap().ports.iter().flatten().map(|p| (p.name.clone().unwrap(), p.port)).collect()
}

#[test]
fn every_role_with_names_in_order() {
    let replicas = desired::replicas(&job(2, 2, json!({})), None, &Settings::default()).unwrap();
    let got: Vec<(Role, Option<u32>, String)> = replicas.iter().map(|r| (r.role, r.index, r.name())).collect();
    assert_eq!(
        got,
        vec![
            (Role::Coordinator, None, "job-coordinator".into()),
            (Role::Collector, Some(0), "job-collector-0".into()),
            (Role::Collector, Some(1), "job-collector-1".into()),
            (Role::Learner, Some(0), "job-learner-0".into()),
            (Role::Learner, Some(1), "job-learner-1".into()),
        ]
    );
    // Deterministic: built twice, the same objects.
    assert_eq!(replicas, desired::replicas(&job(2, 2, json!({})), None, &Settings::default()).unwrap());
}

#[test]
fn every_object_is_owned_by_the_job_and_labelled() {
    for replica in desired::replicas(&job(1, 1, json!({})), None, &Settings::default()).unwrap() {
        for meta in [&replica.pod.metadata, &replica.service.metadata] {
            let owner = &meta.owner_references.as_ref().unwrap()[0];
            assert_eq!((owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()), ("DIJob", "job", "job-uid"));
            assert_eq!((owner.controller, owner.block_owner_deletion), (Some(true), Some(true)));
            let labels = meta.labels.as_ref().unwrap();
            assert_eq!(labels["dijob-name"], "job");
            assert_eq!(labels["replica-type"], replica.role.label());
            assert_eq!(labels["app.kubernetes.io/managed-by"], "di-orchestrator");
            assert_eq!(labels["group-name"], "diengine.opendilab.org");
            assert_eq!(labels["pod-name"], replica.name());
        }
        let svc = replica.service.spec.as_ref().unwrap();
        assert_eq!(svc.cluster_ip.as_deref(), Some("None"));
        assert_eq!(svc.publish_not_ready_addresses, Some(true));
        assert_eq!(svc.selector.as_ref().unwrap()["pod-name"], replica.name());
    }
}

#[test]
fn the_env_contract() {
    let replicas = desired::replicas(&job(1, 1, json!({})), None, &Settings::default()).unwrap();
    let coordinator = env(&replicas[0].pod, 0);
    assert_eq!(coordinator["KUBERNETES_POD_NAMESPACE"], "ns");
    assert_eq!(coordinator["KUBERNETES_POD_NAME"], "job-coordinator");
    // The coordinator's containers write at the endpoint's own loopback address; the others
    // read at the coordinator's Service.
    assert_eq!(coordinator["KUBERNETES_SERVER_URL"], "127.0.22.80:22281");
    assert_eq!(coordinator["KUBERNETES_COORDINATOR_URL"], "job-coordinator.ns:22273");
    assert_eq!(coordinator["COORDINATOR_PORT"], "22273");
    let collector = env(&replicas[1].pod, 0);
    assert_eq!(collector["COLLECTOR_PORT"], "22270");
    assert_eq!(collector["KUBERNETES_SERVER_URL"], "job-coordinator.ns:22280");
    assert!(!collector.contains_key("KUBERNETES_COORDINATOR_URL"));
    assert_eq!(env(&replicas[2].pod, 0)["LEARNER_PORT"], "22271");
}

#[test]
fn contract_variables_override_the_templates_and_reach_every_container() {
    let extra = json!({"collector": {"template": {"spec": {"containers": [
        {"name": "di-container", "image": "ding", "env": [{"name": "KUBERNETES_POD_NAME", "value": "wrong"}, {"name": "KEEP", "value": "1"}]},
        {"name": "sidecar", "image": "side"}]}}}});
    let replicas = desired::replicas(&job(1, 0, extra), None, &Settings::default()).unwrap();
    let main = env(&replicas[1].pod, 0);
    assert_eq!(main["KUBERNETES_POD_NAME"], "job-collector-0");
    assert_eq!(main["KEEP"], "1");
    assert_eq!(env(&replicas[1].pod, 1)["COLLECTOR_PORT"], "22270");
}

#[test]
fn coordinator_pod_carries_the_replica_endpoint() {
    let replicas = desired::replicas(&job(0, 0, json!({})), None, &Settings::default()).unwrap();
    let coordinator = &replicas[0];
    let spec = coordinator.pod.spec.as_ref().unwrap();
    assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
    assert_eq!(spec.service_account_name.as_deref(), Some("job-replicas"));
    let init = spec.init_containers.as_deref().unwrap_or_default();
    let sidecar = init.first().filter(|c| c.name == "di-replicas").expect("the sidecar runs first");
    // A native sidecar: the pod ends with the coordinator's own container.
    assert_eq!(sidecar.restart_policy.as_deref(), Some("Always"));
    assert!(sidecar.startup_probe.is_some(), "the coordinator starts once the endpoint answers");
    assert!(spec.containers.iter().all(|c| c.name != "di-replicas"));
    assert_eq!(sidecar.image.as_deref(), Some(Settings::default().replicas_image.as_str()));
    let args = sidecar.args.clone().unwrap();
    for arg in ["--job=job", "--coordinator-address=127.0.22.80:22281", "--port=22280"] {
        assert!(args.contains(&arg.to_string()), "{args:?} lacks {arg}");
    }
    let uid = coordinator.pod.metadata.owner_references.as_ref().unwrap()[0].uid.clone();
    assert!(args.contains(&format!("--job-uid={uid}")), "{args:?}: the endpoint serves this job's UID only");
    let sidecar_env = sidecar.env.as_deref().unwrap_or_default();
    assert!(sidecar_env.iter().all(|e| e.name != "KUBERNETES_POD_IP"), "writes are no longer told by address");
    assert_eq!(service_ports(coordinator), vec![("di-port".into(), 22273), ("di-replicas".into(), 22280)]);
}

/// The sidecar of a coordinator pod whose template has `pod_security` at pod level, and the pod.
fn sidecar_with(pod_security: serde_json::Value) -> (k8s_openapi::api::core::v1::Container, Pod) {
    let template =
        json!({"spec": {"securityContext": pod_security, "containers": [{"name": "di-container", "image": "ding"}]}});
    let replicas =
        desired::replicas(&job(0, 0, json!({"coordinator": {"template": template}})), None, &Settings::default());
    let pod = replicas.unwrap().remove(0).pod;
    let sidecar = pod.spec.as_ref().unwrap().init_containers.as_ref().unwrap()[0].clone();
    assert_eq!(sidecar.name, "di-replicas");
    (sidecar, pod)
}

#[test]
fn the_sidecar_meets_pod_security_restricted_and_leaves_the_users_containers_alone() {
    let (sidecar, pod) = sidecar_with(json!({}));
    let context = sidecar.security_context.expect("the sidecar has a security context");
    // Each field `restricted` checks on a container.
    assert_eq!(context.allow_privilege_escalation, Some(false));
    let capabilities = context.capabilities.expect("capabilities");
    assert_eq!(capabilities.drop, Some(vec!["ALL".to_string()]));
    assert_eq!(capabilities.add, None);
    assert_eq!(context.run_as_non_root, Some(true));
    // No UID where the pod names none: the image's own user, or one a platform assigns.
    assert_eq!(context.run_as_user, None);
    assert_ne!(desired::SIDECAR_USER, 0);
    assert_eq!(context.seccomp_profile.expect("seccomp profile").type_, "RuntimeDefault");
    assert_eq!(context.privileged, None);
    // Set on the container only: neither the pod nor the user's containers change.
    let spec = pod.spec.unwrap();
    assert_eq!(spec.security_context.unwrap_or_default(), Default::default());
    assert!(spec.containers.iter().all(|c| c.security_context.is_none()));
}

#[test]
fn the_sidecar_runs_as_the_pods_own_non_root_user() {
    let (sidecar, _) = sidecar_with(json!({"runAsUser": 1000, "runAsNonRoot": true}));
    assert_eq!(sidecar.security_context.unwrap().run_as_user, None, "it inherits the pod's 1000");
    // A pod that runs as root would make the sidecar's runAsNonRoot fail its start.
    let (sidecar, pod) = sidecar_with(json!({"runAsUser": 0}));
    assert_eq!(sidecar.security_context.unwrap().run_as_user, Some(desired::SIDECAR_USER));
    assert_eq!(pod.spec.unwrap().security_context.unwrap().run_as_user, Some(0), "the pod's own is kept");
}

#[test]
fn a_template_service_account_is_kept_and_bound() {
    let extra = json!({"coordinator": {"template": {"spec": {"serviceAccountName": "mine", "containers": [{"name": "c", "image": "i"}]}}}});
    let job = job(0, 0, extra);
    let replicas = desired::replicas(&job, None, &Settings::default()).unwrap();
    assert_eq!(replicas[0].pod.spec.as_ref().unwrap().service_account_name.as_deref(), Some("mine"));
    let rbac = desired::rbac(&job, &Settings::default()).unwrap();
    assert_eq!(rbac.binding.subjects.unwrap()[0].name, "mine");
}

#[test]
fn the_sidecar_role_is_least_privilege() {
    let rbac = desired::rbac(&job(0, 0, json!({})), &Settings::default()).unwrap();
    let rules = rbac.role.rules.clone().unwrap();
    assert_eq!(rules.len(), 3);
    assert_eq!(rules[0].resources.as_deref(), Some(&["dijobs".to_string()][..]));
    assert_eq!(rules[0].resource_names.as_deref(), Some(&["job".to_string()][..]));
    assert_eq!(rules[0].verbs, vec!["get", "watch", "patch"]);
    assert_eq!(rules[1].verbs, vec!["get", "list", "watch"]);
    // Its own Workload only, and only read.
    assert_eq!(rules[2].resources.as_deref(), Some(&["workloads".to_string()][..]));
    assert_eq!(rules[2].resource_names.as_deref(), Some(&["dijob-job-jobuid".to_string()][..]));
    assert_eq!(rules[2].verbs, vec!["get"]);
    assert_eq!(rbac.service_account.name_any(), "job-replicas");
    assert_eq!(rbac.role.owner_references()[0].uid, "job-uid");
}

#[test]
fn job_volumes_and_priority_reach_every_pod() {
    let job = job(1, 0, json!({"priorityClassName": "high"}));
    for replica in desired::replicas(&job, None, &Settings::default()).unwrap() {
        let spec = replica.pod.spec.unwrap();
        assert!(spec.volumes.unwrap().iter().any(|v| v.name == "data"), "{}", replica.role);
        assert_eq!(spec.priority_class_name.as_deref(), Some("high"));
    }
}

#[test]
fn an_undefaulted_template_still_gets_its_port() {
    let mut raw = job(1, 0, json!({}));
    raw.spec.collector.as_mut().unwrap().template.spec.as_mut().unwrap().containers[0].ports = None;
    let replicas = desired::replicas(&raw, None, &Settings::default()).unwrap();
    assert_eq!(ports(&replicas[1].pod), vec![("di-port".into(), 22270)]);
}

#[test]
fn a_single_gpu_learner_is_one_pod_with_its_gpu() {
    let replicas = desired::replicas(&job(0, 1, json!({"learner": {"gpus": 1}})), None, &Settings::default()).unwrap();
    let learner = &replicas[1];
    assert_eq!(learner.role, Role::Learner);
    let limits = learner.pod.spec.as_ref().unwrap().containers[0].resources.as_ref().unwrap().limits.clone().unwrap();
    assert_eq!(limits["nvidia.com/gpu"].0, "1");
}

#[test]
fn a_multi_gpu_learner_is_an_aggregator_and_ddp_learners() {
    let settings = Settings { max_gpus_per_pod: 4, ..Settings::default() };
    let job = job(0, 2, json!({"learner": {"gpus": 10}}));
    assert!(di_api::resources::needs_aggregator(&job));
    assert_eq!(desired::aggregator_config_ref(&job, &settings), ("di-system".into(), "aggregator-config".into()));
    // Without the AggregatorConfig no learner can be built.
    assert_eq!(desired::replicas(&job, None, &settings).unwrap().len(), 1);

    let config = agconfig();
    let replicas = desired::replicas(&job, Some(&config), &settings).unwrap();
    let got: Vec<(Role, Option<u32>, String)> = replicas.iter().skip(1).map(|r| (r.role, r.index, r.name())).collect();
    assert_eq!(
        got[..4],
        [
            (Role::Aggregator, Some(0), "job-aggregator-0".to_string()),
            (Role::DdpLearner, Some(0), "job-ddp-learner-0-0".to_string()),
            (Role::DdpLearner, Some(0), "job-ddp-learner-0-1".to_string()),
            (Role::DdpLearner, Some(0), "job-ddp-learner-0-2".to_string()),
        ]
    );
    assert_eq!(got.len(), 8, "two logic learners of an aggregator and three DDP pods each");

    let aggregator = &replicas[1];
    assert_eq!(aggregator.pod.spec.as_ref().unwrap().containers[0].image.as_deref(), Some("agg"));
    assert_eq!(env(&aggregator.pod, 0)["AGGREGATOR_PORT"], "22272");

    // 10 GPUs in pods of at most 4: 4 + 4 + 2, ranks 0, 4, 8.
    let ddp: Vec<&Replica> = replicas.iter().filter(|r| r.role == Role::DdpLearner && r.index == Some(0)).collect();
    let table: Vec<(String, String, String, String)> = ddp
        .iter()
        .map(|r| {
            let e = env(&r.pod, 0);
            (e["WORLD_SIZE"].clone(), e["LOCAL_WORLD_SIZE"].clone(), e["START_RANK"].clone(), e["MASTER_ADDR"].clone())
        })
        .collect();
    assert_eq!(
        table,
        vec![
            ("10".into(), "4".into(), "0".into(), "localhost".into()),
            ("10".into(), "4".into(), "4".into(), "job-ddp-learner-0-0".into()),
            ("10".into(), "2".into(), "8".into(), "job-ddp-learner-0-0".into()),
        ]
    );
    for r in &ddp {
        let e = env(&r.pod, 0);
        assert_eq!(e["MASTER_PORT"], "10314");
        assert_eq!(e["KUBERNETES_AGGREGATOR_URL"], "job-aggregator-0.ns:22272");
    }
    let gpus = |r: &Replica| {
        r.pod.spec.as_ref().unwrap().containers[0].resources.as_ref().unwrap().limits.as_ref().unwrap()["nvidia.com/gpu"].0.clone()
    };
    assert_eq!(ddp.iter().map(|r| gpus(r)).collect::<Vec<_>>(), vec!["4", "4", "2"]);
    assert_eq!(
        service_ports(ddp[0]),
        vec![
            ("di-port".into(), 22271),
            ("gpu-port-1".into(), 22272),
            ("gpu-port-2".into(), 22273),
            ("gpu-port-3".into(), 22274),
            ("master-port".into(), 10314)
        ]
    );
    assert_eq!(ddp[0].pod.labels()["ddp-learner-type"], "ddp-learner-master");
    assert_eq!(ddp[1].pod.labels()["ddp-learner-type"], "ddp-learner-worker");
    assert_eq!(ddp[2].pod.labels()["diengine.opendilab.org/replica-index"], "0");
}

#[test]
fn only_the_replicas_asked_for_are_built_and_they_are_built_whole() {
    let settings = Settings { max_gpus_per_pod: 4, ..Settings::default() };
    let job = job(3, 1, json!({"learner": {"gpus": 10}}));
    let config = agconfig();
    let all = desired::replicas(&job, Some(&config), &settings).unwrap();
    let asked = ["job-collector-1", "job-ddp-learner-0-2"];
    let wanted = desired::wanted(&job, Some(&config), &settings, |name| asked.contains(&name)).unwrap();
    // Every replica is named, in the same order, built or not.
    let who = |w: &desired::Wanted| (w.role, w.index, w.name.clone());
    assert_eq!(
        wanted.iter().map(who).collect::<Vec<_>>(),
        all.iter().map(|r| (r.role, r.index, r.name())).collect::<Vec<_>>()
    );
    let built: Vec<&Replica> = wanted.iter().filter_map(|w| w.built.as_ref()).collect();
    assert_eq!(built.iter().map(|r| r.name()).collect::<Vec<_>>(), asked);
    for replica in built {
        assert_eq!(Some(replica), all.iter().find(|r| r.name() == replica.name()));
    }
    let none = desired::wanted(&job, Some(&config), &settings, |_| false).unwrap();
    assert!(none.iter().all(|w| w.built.is_none()));
    // A job that cannot be built is refused whether or not anything is asked for.
    let mut no_coordinator = job.clone();
    no_coordinator.spec.coordinator = None;
    let refused = desired::wanted(&no_coordinator, None, &settings, |_| false);
    assert_eq!(refused, Err(desired::BuildError::NoCoordinator));
}

#[test]
fn a_job_without_uid_or_coordinator_cannot_be_built() {
    let mut no_uid = job(0, 0, json!({}));
    no_uid.metadata.uid = None;
    assert_eq!(desired::replicas(&no_uid, None, &Settings::default()), Err(desired::BuildError::NoUid));
    let mut no_coordinator = job(0, 0, json!({}));
    no_coordinator.spec.coordinator = None;
    assert_eq!(desired::replicas(&no_coordinator, None, &Settings::default()), Err(desired::BuildError::NoCoordinator));
}

#[test]
fn built_pods_read_back_as_what_they_are() {
    // The replica endpoint and the CLI know pods only by what di-api reads off them.
    use di_api::pod::{index_of, port_of, role_of};
    let settings = Settings { max_gpus_per_pod: 4, ..Settings::default() };
    let port = json!([{"name": "di-port", "containerPort": 9000}]);
    let collector = json!({"template": {"spec": {"containers": [{"name": "di-container", "ports": port}]}}});
    for job in [job(2, 1, json!({"collector": collector})), job(1, 2, json!({"learner": {"gpus": 6}}))] {
        for replica in desired::replicas(&job, Some(&agconfig()), &settings).unwrap() {
            let (pod, name) = (&replica.pod, replica.name());
            assert_eq!(role_of(pod), Some(replica.role), "{name}");
            assert_eq!(index_of(pod), replica.index, "{name}");
            assert_eq!(port_of(pod), Some(service_ports(&replica)[0].1), "{name}: the port its Service points at");
        }
    }
}

#[test]
fn the_templates_gpus_decide_the_learners_like_the_spec() {
    let gpus = |n: &str| {
        json!({"template": {"spec": {"containers": [
        {"name": "di-container", "resources": {"limits": {"nvidia.com/gpu": n}}}]}}})
    };
    let two = job(0, 1, json!({"learner": gpus("2")}));
    assert!(di_api::resources::needs_aggregator(&two));
    let roles: Vec<Role> =
        desired::replicas(&two, Some(&agconfig()), &Settings::default()).unwrap().iter().map(|r| r.role).collect();
    assert_eq!(roles, [Role::Coordinator, Role::Aggregator, Role::DdpLearner]);

    let half = job(0, 1, json!({"learner": gpus("500m")}));
    assert!(!di_api::resources::needs_aggregator(&half));
    assert_eq!(
        desired::replicas(&half, None, &Settings::default()),
        Err(desired::BuildError::FractionalGpus(Role::Learner, "500m".into()))
    );
}
