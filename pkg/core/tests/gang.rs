//! A job's gangs and the objects each backend's scheduler reads: which pods are in which gang,
//! how a pod joins it, and the PodGroup that says how many must be placed at once.

mod common;

use common::{agconfig, job};
use di_api::DIJob;
use di_core::desired::gang::{self, Backend, COSCHEDULING_LABEL, Gang, VOLCANO_ANNOTATION};
use di_core::desired::{self, Settings, owner_reference};
use di_core::plan::{Action, Plan, plan};
use di_core::queue::{QUEUE_LABEL, Queue, workload};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use kube::ResourceExt;
use serde_json::json;

fn coscheduling() -> Backend {
    Backend::Coscheduling { scheduler: "scheduler-plugins-scheduler".into() }
}

fn volcano() -> Backend {
    Backend::Volcano { scheduler: "volcano".into() }
}

fn role_gangs(job: &DIJob) -> Vec<Gang> {
    let settings = Settings { max_gpus_per_pod: 4, ..Settings::default() };
    gang::role_gangs(job, &desired::wanted(job, Some(&agconfig()), &settings, |_| false).unwrap())
}

#[test]
fn each_multi_gpu_learner_is_a_gang_and_collectors_are_free() {
    let gangs = role_gangs(&job(3, 2, json!({"learner": {"gpus": 10}})));
    assert_eq!(gangs.len(), 2, "{gangs:#?}");
    assert_eq!(gangs[0].name, "job-learner-0");
    assert_eq!(
        gangs[0].pods,
        ["job-aggregator-0", "job-ddp-learner-0-0", "job-ddp-learner-0-1", "job-ddp-learner-0-2"]
    );
    assert_eq!(gangs[0].min_count, 4, "the aggregator and every DDP learner, at once");
    assert_eq!(gangs[1].name, "job-learner-1");
    let members: Vec<&String> = gangs.iter().flat_map(|g| &g.pods).collect();
    assert!(members.iter().all(|p| !p.contains("collector") && !p.contains("coordinator")), "{members:?}");
}

#[test]
fn single_gpu_learners_and_jobs_without_gangs_have_none() {
    assert_eq!(role_gangs(&job(3, 2, json!({"learner": {"gpus": 1}}))), vec![]);
    assert_eq!(role_gangs(&job(3, 2, json!({"learner": {"gpus": 10}, "gang": {"enabled": false}}))), vec![]);
}

#[test]
fn a_task_job_is_one_gang_named_after_it() {
    let mut task_job: DIJob = serde_json::from_value(json!({
        "apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob",
        "metadata": {"name": "mesh", "namespace": "ns", "uid": "u"},
        "spec": {"tasks": [
            {"name": "learner", "type": "learner", "replicas": 2, "template": {}},
            {"name": "actor", "replicas": 3, "minAvailable": 1, "template": {}},
        ]},
    }))
    .unwrap();
    di_api::defaults::default_dijob(&mut task_job);
    let gangs = gang::task_gangs(&task_job);
    assert_eq!(gangs.len(), 1);
    assert_eq!(gangs[0].name, "mesh");
    assert_eq!(gangs[0].pods.len(), 5);
    assert_eq!(gangs[0].min_count, 3, "both learners and one actor");
}

#[test]
fn a_pod_joins_its_gang_as_each_scheduler_reads_it() {
    let joined = |backend: &Backend| {
        let mut pod = Pod::default();
        gang::join(&mut pod, "job-learner-0", backend);
        pod
    };
    let native = joined(&Backend::Native);
    let group = native.spec.as_ref().unwrap().scheduling_group.as_ref().unwrap();
    assert_eq!(group.pod_group_name.as_deref(), Some("job-learner-0"));
    assert_eq!(native.spec.as_ref().unwrap().scheduler_name, None, "the default scheduler gangs natively");

    let cosched = joined(&coscheduling());
    assert_eq!(cosched.metadata.labels.as_ref().unwrap()[COSCHEDULING_LABEL], "job-learner-0");
    assert_eq!(cosched.spec.as_ref().unwrap().scheduler_name.as_deref(), Some("scheduler-plugins-scheduler"));

    let vc = joined(&volcano());
    assert_eq!(vc.metadata.annotations.as_ref().unwrap()[VOLCANO_ANNOTATION], "job-learner-0");
    assert_eq!(vc.spec.as_ref().unwrap().scheduler_name.as_deref(), Some("volcano"));

    assert_eq!(joined(&Backend::None), Pod { spec: Some(Default::default()), ..Pod::default() });
}

#[test]
fn pod_groups_are_owned_by_the_job_and_carry_the_minimum() {
    let job = job(0, 1, json!({"learner": {"gpus": 10}}));
    let owner = owner_reference(&job, "v1alpha1").unwrap();
    let gang = Gang { name: "job-learner-0".into(), pods: vec![], min_count: 4 };
    assert_eq!(gang::pod_group(&job, &gang, &Backend::None, &owner, None), None);

    let native = gang::pod_group(&job, &gang, &Backend::Native, &owner, None).unwrap();
    let typed: PodGroup = serde_json::from_value(native.clone()).expect("Kubernetes' own PodGroup shape");
    assert_eq!(typed.spec.scheduling_policy.gang.as_ref().map(|g| g.min_count), Some(4));
    assert_eq!(typed.metadata.owner_references.as_deref(), Some(&[owner.clone()][..]));
    assert_eq!(typed.metadata.namespace.as_deref(), Some("ns"));

    for backend in [Backend::Native, coscheduling(), volcano()] {
        let object = gang::pod_group(&job, &gang, &backend, &owner, Some("high")).unwrap();
        assert_eq!(object["apiVersion"], backend.api_version().unwrap());
    }
    let vc = gang::pod_group(&job, &gang, &volcano(), &owner, Some("high")).unwrap();
    assert_eq!(vc["spec"], json!({"minMember": 4, "priorityClassName": "high"}));
    let cs = gang::pod_group(&job, &gang, &coscheduling(), &owner, Some("high")).unwrap();
    assert_eq!(cs["spec"], json!({"minMember": 4}));
}

/// A pass of `job` with gangs made for `backend`, its learners' AggregatorConfig at hand.
fn decide_with(job: &DIJob, pods: &[Pod], backend: Backend) -> Plan {
    let settings = Settings { max_gpus_per_pod: 4, gang: backend, ..Settings::default() };
    let config = agconfig();
    let mut world = common::world(pods, &[], common::now());
    world.aggregator_config = Some(&config);
    plan(job, &world, &settings, common::BACKOFF).unwrap()
}

/// Every pod `job` wants, running (its learners built four GPUs to a pod).
fn running(job: &DIJob) -> Vec<Pod> {
    let settings = Settings { max_gpus_per_pod: 4, ..Settings::default() };
    let replicas = desired::replicas(job, Some(&agconfig()), &settings).unwrap();
    replicas.iter().map(|r| common::observed(r.pod.clone(), "Running")).collect()
}

fn applied(actions: &[Action]) -> Vec<(String, u32)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::ApplyPodGroup(o) => {
                let min_count = o.pointer("/spec/schedulingPolicy/gang/minCount")?.as_u64()? as u32;
                Some((o["metadata"]["name"].as_str()?.to_owned(), min_count))
            }
            _ => None,
        })
        .collect()
}

fn pod_group_of(actions: &[Action], pod: &str) -> Option<String> {
    actions.iter().find_map(|a| match a {
        Action::CreatePod(p) if p.name_any() == pod => {
            p.spec.as_ref()?.scheduling_group.as_ref()?.pod_group_name.clone()
        }
        _ => None,
    })
}

#[test]
fn a_pass_applies_each_gangs_pod_group_before_creating_its_pods() {
    let job = job(2, 2, json!({"learner": {"gpus": 8}}));
    let plan = decide_with(&job, &[], Backend::Native);
    assert_eq!(applied(&plan.actions), [("job-learner-0".to_string(), 3), ("job-learner-1".to_string(), 3)]);
    let first_pod = plan.actions.iter().position(|a| matches!(a, Action::CreatePod(_))).unwrap();
    let last_group = plan.actions.iter().rposition(|a| matches!(a, Action::ApplyPodGroup(_))).unwrap();
    assert!(last_group < first_pod, "PodGroups come first: {:?}", plan.actions);
    assert_eq!(pod_group_of(&plan.actions, "job-aggregator-1").as_deref(), Some("job-learner-1"));
    assert_eq!(pod_group_of(&plan.actions, "job-ddp-learner-0-1").as_deref(), Some("job-learner-0"));
    assert_eq!(pod_group_of(&plan.actions, "job-collector-0"), None, "collectors scale freely");
    assert_eq!(pod_group_of(&plan.actions, "job-coordinator"), None);

    let without = decide_with(&job, &[], Backend::None);
    assert_eq!(applied(&without.actions), []);
    assert_eq!(pod_group_of(&without.actions, "job-aggregator-1"), None);
}

#[test]
fn a_pass_that_creates_no_gang_pod_applies_nothing() {
    let job = job(0, 1, json!({"learner": {"gpus": 8}}));
    let plan = decide_with(&job, &running(&job), Backend::Native);
    assert_eq!(plan.actions.iter().filter(|a| matches!(a, Action::ApplyPodGroup(_))).count(), 0, "{:?}", plan.actions);
}

#[test]
fn a_logic_learner_scaled_away_takes_its_pod_group() {
    let before = job(0, 2, json!({"learner": {"gpus": 8}}));
    let after = job(0, 1, json!({"learner": {"gpus": 8}}));
    let plan = decide_with(&after, &running(&before), Backend::Native);
    let gone: Vec<&Action> = plan.actions.iter().filter(|a| matches!(a, Action::DeletePodGroup { .. })).collect();
    assert_eq!(gone, [&Action::DeletePodGroup { name: "job-learner-1".into() }]);
}

#[test]
fn a_task_jobs_pods_all_join_its_gang() {
    let mut task_job: DIJob = serde_json::from_value(json!({
        "apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob",
        "metadata": {"name": "mesh", "namespace": "ns", "uid": "u"},
        "spec": {"tasks": [{"name": "learner", "type": "learner", "replicas": 3, "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}]},
    }))
    .unwrap();
    di_api::defaults::default_dijob(&mut task_job);
    let plan = decide_with(&task_job, &[], Backend::Native);
    assert_eq!(applied(&plan.actions), [("mesh".to_string(), 3)]);
    for i in 0..3 {
        assert_eq!(pod_group_of(&plan.actions, &format!("mesh-learner-{i}")).as_deref(), Some("mesh"));
    }
}

/// A queued task job admitted for 3 pods, scaled to 2 (one pod's room given back to the queue, for
/// as long as the admission lasts) and back to 3: its pods are made anew at the new size and 2 of
/// them have room. The gang counts on those 2, not on the third, which waits for the job to be
/// admitted again: a gang of 3 would never be placed.
#[test]
fn a_gang_counts_only_on_the_pods_its_queue_admitted_room_for() {
    let task_job = |replicas: u32| {
        let mut job: DIJob = serde_json::from_value(json!({
            "apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob",
            "metadata": {"name": "mesh", "namespace": "ns", "uid": "u", "labels": {QUEUE_LABEL: "team"}},
            "spec": {"tasks": [{"name": "learner", "type": "learner", "replicas": replicas,
                "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}]},
        }))
        .unwrap();
        di_api::defaults::default_dijob(&mut job);
        job
    };
    let settings = Settings { gang: Backend::Native, ..Settings::default() };
    let mut admitted = workload(&task_job(3), "team", None, None, &settings).unwrap();
    let set = admitted["spec"]["podSets"][0]["name"].clone();
    admitted["metadata"]["resourceVersion"] = json!("7");
    admitted["status"] = json!({
        "conditions": [
            {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "", "lastTransitionTime": "2026-11-22T09:00:00Z"},
            {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "", "lastTransitionTime": "2026-11-22T09:00:00Z"},
        ],
        "admission": {"clusterQueue": "gpus", "podSetAssignments": [{"name": set, "count": 3}]},
        "reclaimablePods": [{"name": set, "count": 1}],
    });
    let mut world = common::world(&[], &[], common::now());
    world.queue = Some(Queue::Kueue {
        workload: Some(admitted),
        flavors: Default::default(),
        priority: None,
        collectors: Default::default(),
        collector_class: None,
    });
    let queued = plan(&task_job(3), &world, &settings, common::BACKOFF).unwrap();
    let created: Vec<String> = queued
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::CreatePod(pod) => Some(pod.name_any()),
            _ => None,
        })
        .collect();
    assert_eq!(created, ["mesh-learner-0", "mesh-learner-1"], "{:?}", queued.actions);
    assert_eq!(applied(&queued.actions), [("mesh".to_string(), 2)]);

    // Outside a queue the gang is the whole job.
    world.queue = None;
    let free = plan(&task_job(3), &world, &settings, common::BACKOFF).unwrap();
    assert_eq!(applied(&free.actions), [("mesh".to_string(), 3)]);
}

#[test]
fn a_job_whose_pods_cannot_be_placed_says_why() {
    let job = job(1, 0, json!({}));
    let replicas = desired::replicas(&job, None, &Settings::default()).unwrap();
    let unschedulable = |mut pod: Pod| {
        pod.metadata.uid = Some(format!("uid-{}", pod.name_any()));
        pod.status = Some(
            serde_json::from_value(
                json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                "reason": "Unschedulable", "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."}]}),
            )
            .unwrap(),
        );
        pod
    };
    let pods: Vec<Pod> = replicas.iter().map(|r| unschedulable(r.pod.clone())).collect();
    let waiting = decide_with(&job, &pods, Backend::None).status;
    let condition = waiting.conditions.iter().find(|c| c.type_ == "WaitingForCapacity").unwrap();
    assert_eq!((condition.status.as_str(), condition.reason.as_deref()), ("True", Some("Unschedulable")));
    assert_eq!(
        condition.message.as_deref(),
        Some("2 pod(s) cannot be placed yet; job-collector-0: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu.")
    );

    let placed: Vec<Pod> = replicas.iter().map(|r| common::observed(r.pod.clone(), "Running")).collect();
    let job = common::with_status(job, waiting);
    let now = decide_with(&job, &placed, Backend::None).status;
    let condition = now.conditions.iter().find(|c| c.type_ == "WaitingForCapacity").unwrap();
    assert_eq!((condition.status.as_str(), condition.reason.as_deref()), ("False", Some("Placed")));
}
