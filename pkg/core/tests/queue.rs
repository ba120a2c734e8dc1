//! A job in a Kueue queue: held with no pod until its Workload is admitted, its Workload's
//! podSets, the admitted flavors on its pods, and what it reports to Kueue.

mod common;
mod queued;

use common::{created, world_of};
use di_api::{DIJob, Phase};
use di_core::desired::Settings;
use di_core::plan::{Action, Plan};
use di_core::queue::{QUEUE_LABEL, Queue, workload, workload_name};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use queued::{admitted, condition, decide_in, kueue, queued_job, said};
use serde_json::{Value, json};

/// The pods a plan creates.
fn created_pods(plan: &Plan) -> Vec<&Pod> {
    plan.actions
        .iter()
        .filter_map(|a| match a {
            Action::CreatePod(p) => Some(&**p),
            _ => None,
        })
        .collect()
}

#[test]
fn a_job_waits_with_no_pod_until_its_workload_is_made_and_admitted() {
    let job = queued_job(2);
    let first = decide_in(&job, &[], &[], kueue(None));
    assert!(matches!(&first.actions[..], [Action::CreateWorkload(_)]), "{:?}", first.actions);
    assert_eq!(condition(&first, "Queued").status, "True");

    let mut pending = workload(&job, "team", None, None, &Settings::default()).unwrap();
    pending["status"] = json!({"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
        "message": "couldn't assign flavors to pod set collector: insufficient quota", "lastTransitionTime": "2026-11-22T09:00:00Z"}]});
    let waiting = decide_in(&job, &[], &[], kueue(Some(pending)));
    assert!(created(&waiting.actions).is_empty(), "{:?}", waiting.actions);
    let queued = condition(&waiting, "Queued");
    assert_eq!((queued.status.as_str(), queued.reason.as_deref()), ("True", Some("Pending")));
    assert!(queued.message.as_deref().unwrap().contains("insufficient quota"), "Kueue's words: {queued:?}");
    assert_eq!(waiting.status.phase, Some(Phase::Created));
}

#[test]
fn the_workload_has_a_pod_set_per_role_owned_by_the_job() {
    let job = queued_job(3);
    let w = workload(&job, "team", None, None, &Settings::default()).unwrap();
    assert_eq!(w["metadata"]["name"], workload_name(&job));
    assert_eq!(w["metadata"]["ownerReferences"][0]["uid"], "job-uid");
    assert_eq!(w["metadata"]["ownerReferences"][0]["controller"], true);
    assert_eq!(w["metadata"]["labels"]["kueue.x-k8s.io/job-uid"], "job-uid");
    assert_eq!(w["spec"]["queueName"], "team");
    assert!(w["spec"]["priorityClassRef"].is_null(), "no class, no priority");
    let ranked = workload(&job, "team", Some(&("high".into(), 1000)), None, &Settings::default()).unwrap();
    assert_eq!(
        ranked["spec"]["priorityClassRef"],
        json!({"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": "high"})
    );
    assert_eq!(ranked["spec"]["priority"], 1000);
    let sets: Vec<(String, u64)> = w["spec"]["podSets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["name"].as_str().unwrap().to_owned(), s["count"].as_u64().unwrap()))
        .collect();
    assert_eq!(sets, [("coordinator".into(), 1), ("collector".into(), 3), ("learner".into(), 1)]);
    // The coordinator's template is its pod, the replica endpoint beside it counted.
    let coordinator = &w["spec"]["podSets"][0]["template"]["spec"];
    assert!(coordinator["initContainers"].as_array().is_some_and(|c| !c.is_empty()));
}

#[test]
fn an_admitted_job_runs_with_its_flavors_on_its_pods_and_says_when_they_are_ready() {
    let job = queued_job(2);
    let w = admitted(&job);
    let start = decide_in(&job, &[], &[], kueue(Some(w.clone())));
    let queued = condition(&start, "Queued");
    assert_eq!((queued.status.as_str(), queued.reason.as_deref()), ("False", Some("Admitted")));
    let pods = created_pods(&start);
    assert_eq!(pods.len(), 4);
    for pod in pods {
        let spec = pod.spec.as_ref().unwrap();
        let placed = spec.node_selector.as_ref().is_some_and(|s| s.get("gpu").map(String::as_str) == Some("a100"));
        // Only the collectors' podSet was assigned the flavor.
        assert_eq!(placed, pod.name_any().contains("collector"), "{}", pod.name_any());
        assert_eq!(spec.tolerations.is_some(), placed);
    }
    // Starting: Kueue hears the pods are not ready yet; once every pod runs, that they are.
    let told = |plan: &Plan| {
        plan.actions.iter().find_map(|a| match a {
            Action::WriteWorkloadStatus(w) => Some(w["status"]["conditions"].clone()),
            _ => None,
        })
    };
    let starting = told(&start).expect("PodsReady reported");
    assert!(starting.as_array().unwrap().iter().any(|c| c["type"] == "PodsReady" && c["status"] == "False"));
    let (pods, services) = world_of(&job, |_| Some("Running"));
    let running = decide_in(&job, &pods, &services, kueue(Some(w)));
    assert_eq!(running.status.phase, Some(Phase::Running));
    let ready = told(&running).expect("PodsReady reported");
    assert!(ready.as_array().unwrap().iter().any(|c| c["type"] == "PodsReady" && c["status"] == "True"));
}

#[test]
fn a_finished_job_finishes_its_workload_and_an_unchanged_report_writes_nothing() {
    let job = queued_job(1);
    let w = admitted(&job);
    let finished = said(&w, false, Some(true), false).expect("Finished reported");
    let condition = finished["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Finished").unwrap();
    assert_eq!((condition["status"].as_str(), condition["reason"].as_str()), (Some("True"), Some("Succeeded")));
    let mut written = w.clone();
    written["status"] = finished;
    assert_eq!(said(&written, false, Some(true), false), None, "said once");
}

#[test]
fn an_ended_job_keeps_its_quota_while_a_pod_of_it_still_runs() {
    let job = queued_job(1);
    let w = admitted(&job);
    let finished = |status: &Value| {
        status["conditions"].as_array().into_iter().flatten().any(|c| c["type"] == "Finished" && c["status"] == "True")
    };
    // cleanPodPolicy None: the coordinator succeeded, a collector runs on.
    let running_on = said(&w, false, Some(true), true);
    assert!(!running_on.as_ref().is_some_and(finished), "quota given back with a pod running: {running_on:?}");
    let ended = said(&w, false, Some(true), false).expect("Finished reported once the pods ended");
    assert!(finished(&ended));

    // Through a whole pass: a queued job whose coordinator succeeded and whose collector runs.
    let none = queued_job_with_policy(1, "None");
    let (pods, services) =
        world_of(&none, |name| Some(if name.ends_with("coordinator") { "Succeeded" } else { "Running" }));
    let plan = decide_in(&none, &pods, &services, kueue(Some(admitted(&none))));
    assert_eq!(plan.status.phase, Some(Phase::Succeeded));
    let told = queued::written(&plan);
    assert!(!told.as_ref().is_some_and(finished), "Kueue told the job finished while its collector runs: {told:?}");
}

fn queued_job_with_policy(collectors: i32, policy: &str) -> DIJob {
    let mut job = queued_job(collectors);
    job.spec.clean_pod_policy = Some(policy.into());
    job
}

#[test]
fn an_evicted_job_loses_its_pods_then_gives_its_admission_back() {
    let job = queued_job(1);
    let mut w = admitted(&job);
    w["status"]["conditions"].as_array_mut().unwrap().push(json!({"type": "Evicted", "status": "True",
        "reason": "Preempted", "message": "Preempted to accommodate a higher priority Workload", "lastTransitionTime": "2026-11-22T09:30:00Z"}));
    w["status"]["reclaimablePods"] = json!([{"name": "collector", "count": 1}]);
    let (pods, services) = world_of(&job, |_| Some("Running"));
    let evicting = decide_in(&job, &pods, &services, kueue(Some(w.clone())));
    let queued = condition(&evicting, "Queued");
    assert_eq!((queued.status.as_str(), queued.reason.as_deref()), ("True", Some("Evicted")));
    let deleted = evicting.actions.iter().filter(|a| matches!(a, Action::DeletePod { .. })).count();
    assert_eq!(deleted, pods.len(), "every pod goes");
    assert!(
        !evicting.actions.iter().any(|a| matches!(a, Action::DeleteService { .. })),
        "the Services stay, with the restart counts they hold"
    );
    // Nothing is given back while a pod still runs.
    assert!(!evicting.actions.iter().any(|a| matches!(a, Action::WriteWorkloadStatus(_))));

    let gone = decide_in(&job, &[], &[], kueue(Some(w)));
    let released = gone
        .actions
        .iter()
        .find_map(|a| match a {
            Action::WriteWorkloadStatus(w) => Some(w.clone()),
            _ => None,
        })
        .expect("the admission given back");
    assert_eq!(released["status"]["admission"], Value::Null);
    assert_eq!(released["status"].get("reclaimablePods"), None, "the next admission takes the pods whole");
    assert_eq!(released["metadata"]["resourceVersion"], "7", "written over what was read");
    let status_of = |t: &str| {
        released["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == t).unwrap()["status"].clone()
    };
    assert_eq!(
        (status_of("QuotaReserved"), status_of("Admitted"), status_of("Requeued")),
        (json!("False"), json!("False"), json!("True"))
    );
}

#[test]
fn without_kueue_a_queued_job_waits_and_says_why() {
    let job = queued_job(1);
    let plan = decide_in(&job, &[], &[], Queue::NoKueue);
    assert!(plan.actions.is_empty(), "{:?}", plan.actions);
    let queued = condition(&plan, "Queued");
    assert_eq!(queued.reason.as_deref(), Some("NoKueue"));
    assert!(queued.message.as_deref().unwrap().contains("install Kueue"));
}

#[test]
fn collectors_scaled_past_the_admission_wait_and_say_so() {
    // Admitted with 2 collectors; the job now asks for 4.
    let admitted_job = queued_job(2);
    let w = admitted(&admitted_job);
    let grown = queued_job(4);
    let (pods, services) = world_of(&admitted_job, |_| Some("Running"));
    let plan = decide_in(&grown, &pods, &services, kueue(Some(w)));
    assert!(created(&plan.actions).is_empty(), "no pod past the admission: {:?}", plan.actions);
    let queued = condition(&plan, "Queued");
    assert_eq!((queued.status.as_str(), queued.reason.as_deref()), ("False", Some("Admitted")));
    assert!(queued.message.as_deref().unwrap().contains("2 pod(s)"), "{queued:?}");
}

#[test]
fn a_waiting_job_scaled_gets_its_workload_made_anew() {
    let made_for = queued_job(2);
    let mut w = workload(&made_for, "team", None, None, &Settings::default()).unwrap();
    w["metadata"]["uid"] = json!("workload-uid");
    let plan = decide_in(&queued_job(5), &[], &[], kueue(Some(w.clone())));
    let deleted = plan.actions.iter().any(
        |a| matches!(a, Action::DeleteWorkload { name, uid, .. } if *name == workload_name(&made_for) && uid == "workload-uid"),
    );
    assert!(deleted, "{:?}", plan.actions);
    // The same size keeps it.
    let same = decide_in(&made_for, &[], &[], kueue(Some(w)));
    assert!(!same.actions.iter().any(|a| matches!(a, Action::DeleteWorkload { .. })), "{:?}", same.actions);
}

#[test]
fn a_ready_job_that_loses_a_pod_waits_for_recovery_not_for_its_start() {
    let job = queued_job(1);
    let mut w = admitted(&job);
    w["status"]["conditions"].as_array_mut().unwrap().push(json!({"type": "PodsReady", "status": "True",
        "reason": "Started", "message": "every pod of the job is ready", "lastTransitionTime": "2026-11-22T09:10:00Z"}));
    let lost = said(&w, false, None, true).expect("reported");
    let pods_ready = lost["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "PodsReady").unwrap().clone();
    assert_eq!(
        (pods_ready["status"].as_str(), pods_ready["reason"].as_str()),
        (Some("False"), Some("WaitForRecovery"))
    );
    let mut written = w.clone();
    written["status"] = lost;
    let back = said(&written, true, None, true).expect("reported");
    let pods_ready = back["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "PodsReady").unwrap().clone();
    assert_eq!((pods_ready["status"].as_str(), pods_ready["reason"].as_str()), (Some("True"), Some("Recovered")));
    // A Workload with no status yet gets none written for nothing.
    let mut bare = w.clone();
    bare["status"] = Value::Null;
    assert_eq!(said(&bare, false, None, false), None);
}

#[test]
fn task_names_never_collide_with_a_second_shape_and_too_many_pod_sets_are_refused_by_name() {
    let task = |name: &str, cpu: &str| {
        json!({"name": name, "type": "learner", "replicas": 1, "template": {"spec":
        {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu}}}]}}})
    };
    let mesh = |tasks: Vec<Value>| {
        let mut job: DIJob = serde_json::from_value(json!({
            "apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob",
            "metadata": {"name": "mesh", "namespace": "ns", "uid": "mesh-uid", "labels": {QUEUE_LABEL: "team"}},
            "spec": {"tasks": tasks},
        }))
        .unwrap();
        di_api::defaults::default_dijob(&mut job);
        job
    };
    let job = mesh(vec![task("a-2", "1"), task("a", "1")]);
    let w = workload(&job, "team", None, None, &Settings::default()).unwrap();
    let names: Vec<&str> =
        w["spec"]["podSets"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["a-2", "a"]);

    let nine = mesh((0..9).map(|i| task(&format!("t{i}"), "1")).collect());
    let plan = decide_in(&nine, &[], &[], kueue(None));
    assert!(!plan.actions.iter().any(|a| matches!(a, Action::CreateWorkload(_))), "{:?}", plan.actions);
    assert_eq!(condition(&plan, "Queued").reason.as_deref(), Some("TooManyPodSets"));
}

#[test]
fn a_job_held_on_a_spec_it_cannot_act_on_still_obeys_its_queue() {
    use di_core::queue::obey;
    let job = queued_job(1);
    let (pods, services) = world_of(&job, |_| Some("Running"));
    let in_queue = |workload: Value| {
        let mut world = common::world(&pods, &services, common::now());
        world.queue = Some(kueue(Some(workload)));
        obey(&job, &world, None)
    };
    // Admitted and running: nothing to do.
    assert!(in_queue(admitted(&job)).is_empty());
    // Evicted: every pod goes; the admission is given back only once they are gone.
    let mut evicted = admitted(&job);
    evicted["status"]["conditions"].as_array_mut().unwrap().push(json!({"type": "Evicted", "status": "True",
        "reason": "Preempted", "message": "preempted", "lastTransitionTime": "2026-11-22T09:30:00Z"}));
    let actions = in_queue(evicted.clone());
    let deleted = actions.iter().filter(|a| matches!(a, Action::DeletePod { .. })).count();
    assert_eq!(deleted, pods.len(), "{actions:?}");
    assert!(!actions.iter().any(|a| matches!(a, Action::WriteWorkloadStatus(_))), "not while its pods run");
    let mut world = common::world(&[], &services, common::now());
    world.queue = Some(kueue(Some(evicted)));
    let gone = obey(&job, &world, None);
    let written = gone.iter().find_map(|a| match a {
        Action::WriteWorkloadStatus(w) => Some(w["status"].clone()),
        _ => None,
    });
    assert!(written.is_some_and(|s| s["admission"].is_null()), "{gone:?}");

    // Ended with no pod running: Kueue hears it finished.
    let mut world = common::world(&[], &services, common::now());
    world.queue = Some(kueue(Some(admitted(&job))));
    let ended = obey(&job, &world, Some(Phase::Succeeded));
    let finished = ended.iter().any(|a| {
        matches!(a, Action::WriteWorkloadStatus(w)
        if w["status"]["conditions"].as_array().unwrap().iter().any(|c| c["type"] == "Finished"))
    });
    assert!(finished, "{ended:?}");
}

#[test]
fn an_admission_checks_pod_set_updates_are_on_the_pods() {
    let job = queued_job(2);
    let mut w = admitted(&job);
    w["status"]["admissionChecks"] = json!([{"name": "provision", "state": "Ready", "message": "",
        "lastTransitionTime": "2026-11-22T09:00:00Z",
        "podSetUpdates": [{"name": "collector", "labels": {"provisioned": "yes"},
                           "annotations": {"cluster-autoscaler.kubernetes.io/consume-provisioning-request": "pr-1"},
                           "nodeSelector": {"pool": "spot"},
                           "tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}]}]}]);
    let plan = decide_in(&job, &[], &[], kueue(Some(w)));
    let pods = created_pods(&plan);
    assert_eq!(pods.len(), 4);
    for pod in pods {
        let collector = pod.name_any().contains("collector");
        let spec = pod.spec.as_ref().unwrap();
        let pool = spec.node_selector.as_ref().and_then(|s| s.get("pool")).map(String::as_str);
        assert_eq!(pool, collector.then_some("spot"), "{}", pod.name_any());
        assert_eq!(pod.labels().get("provisioned").is_some(), collector, "{}", pod.name_any());
        let annotated = pod.annotations().contains_key("cluster-autoscaler.kubernetes.io/consume-provisioning-request");
        assert_eq!(annotated, collector);
        let tolerates = spec.tolerations.iter().flatten().any(|t| t.key.as_deref() == Some("spot"));
        assert_eq!(tolerates, collector, "{}", pod.name_any());
    }
}

/// Topology-aware scheduling: a template's annotation asks for a domain in the Workload, and the
/// pods of a podSet Kueue admitted with a `topologyAssignment` are created gated and marked, so
/// that Kueue's topology ungater puts each in its domain; a podSet admitted without one is not.
#[test]
fn a_topology_assignment_gates_its_pods_for_kueue_to_place() {
    let mut job = queued_job(2);
    let rack = json!({"kueue.x-k8s.io/podset-required-topology": "cloud.example/rack"});
    let template = &mut job.spec.collector.as_mut().unwrap().template;
    template.metadata.get_or_insert_default().annotations = serde_json::from_value(rack).unwrap();
    let made = workload(&job, "team", None, None, &Settings::default()).unwrap();
    let sets = made["spec"]["podSets"].as_array().unwrap();
    let request = |name: &str| sets.iter().find(|s| s["name"] == name).unwrap()["topologyRequest"].clone();
    assert_eq!(request("collector"), json!({"required": "cloud.example/rack"}));
    assert_eq!(request("coordinator"), Value::Null);

    let mut w = admitted(&job);
    w["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"] = json!({"levels": ["cloud.example/rack"], "slices": [{"domainCount": 1, "valuesPerLevel": [{"universal": "r1"}], "podCounts": {"universal": 2}}]});
    let plan = decide_in(&job, &[], &[], kueue(Some(w)));
    let pods = created_pods(&plan);
    assert_eq!(pods.len(), 4);
    for pod in pods {
        let collector = pod.name_any().contains("collector");
        let gates = pod.spec.as_ref().unwrap().scheduling_gates.clone().unwrap_or_default();
        assert_eq!(gates.iter().any(|g| g.name == "kueue.x-k8s.io/topology"), collector, "{}", pod.name_any());
        let marked = pod.annotations().get("kueue.x-k8s.io/workload").cloned();
        assert_eq!(marked, collector.then(|| workload_name(&job)), "{}", pod.name_any());
        let set = pod.labels().get("kueue.x-k8s.io/podset").map(String::as_str);
        assert_eq!(set, collector.then_some("collector"), "{}", pod.name_any());
    }
}
