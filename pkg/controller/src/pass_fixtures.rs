//! What the passes' tests build on: the shared echoing fake of `di-testing` as the API server, a
//! context with its caches filled by hand, a job and the world it makes, and the calls a pass made.

use di_api::DIJobStatus;
use di_testing::{Answer, Log};
use kube::runtime::watcher;
use serde_json::json;

use super::*;
use crate::context::MANAGER;
use crate::desired::Settings;
use crate::index::JobIndex;
use crate::metrics::Metrics;
use crate::pace::Pacer;
use crate::restarts::Marks;
use crate::view::{PodView, ServiceView};
use kube::Client;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector;

/// An API server that answers every write with the object it was sent and records it.
pub(super) fn fake_api_server(job: &DIJob) -> (Client, Log) {
    fake_api_server_with(job, |_, _| None)
}

/// The shared echoing fake (`di-testing`), except where `answer` says otherwise for a method and
/// path, and except that a patch of the job answers with `job`: a status patch sends only part of
/// a job, and its answer is read as a whole one.
pub(super) fn fake_api_server_with(
    job: &DIJob,
    answer: impl Fn(&str, &str) -> Option<Answer> + Send + Sync + 'static,
) -> (Client, Log) {
    // A quorum read of the job finds the cached one, unless `answer` says otherwise.
    let stored = json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": job.metadata});
    let path = format!("/dijobs/{}", job.metadata.name.as_deref().unwrap_or_default());
    let job = serde_json::to_value(job).unwrap();
    di_testing::client(move |call| {
        answer(&call.method, &call.path).or_else(|| match call.method.as_str() {
            "PATCH" if call.path.contains("/dijobs/") => Some(Answer::json(200, job.clone())),
            "GET" if call.path.ends_with(&path) => Some(Answer::json(200, stored.clone())),
            _ => None,
        })
    })
}

/// The metadata of the replica identity `job-replicas` (its ServiceAccount, Role or RoleBinding)
/// as a read of it answers, controlled by the job `owner`.
pub(super) fn replica_identity(owner: &str) -> Answer {
    Answer::json(
        200,
        json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": {
            "name": "job-replicas", "namespace": "ns", "uid": format!("{owner}-object"),
            "ownerReferences": [{"apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJob", "name": "job",
                                 "uid": owner, "controller": true}]}}),
    )
}

/// The cached view of `job`; a status it carries is one this orchestrator applied, as the API
/// server records it.
pub(super) fn view_of(job: &DIJob) -> Arc<JobView> {
    let mut job = job.clone();
    if job.status.is_some() {
        let entry = json!({"manager": MANAGER, "operation": "Apply", "subresource": "status"});
        job.metadata.managed_fields = Some(vec![serde_json::from_value(entry).unwrap()]);
    }
    Arc::new(serde_json::from_str(&serde_json::to_string(&job).unwrap()).unwrap())
}

pub(super) fn context(client: Client, pods: Vec<Pod>, services: Vec<Service>) -> Arc<Context> {
    context_with(client, pods, services, Arc::default())
}

/// A context whose restart marks are `marks`, shared with another pass's.
pub(super) fn context_with(client: Client, pods: Vec<Pod>, services: Vec<Service>, marks: Arc<Marks>) -> Arc<Context> {
    let (pod_store, mut pod_writer) = reflector::store();
    let pod_index = JobIndex::default();
    fn view<V: serde::de::DeserializeOwned>(object: impl serde::Serialize) -> V {
        serde_json::from_value(serde_json::to_value(object).unwrap()).unwrap()
    }
    for pod in pods {
        let mut pod: PodView = view(pod);
        pod.slim();
        let event = watcher::Event::Apply(pod);
        pod_writer.apply_watcher_event(&event);
        pod_index.apply(&event);
    }
    let (service_store, mut service_writer) = reflector::store();
    let service_index = JobIndex::default();
    for service in services {
        let mut service: ServiceView = view(service);
        service.slim();
        let event = watcher::Event::Apply(service);
        service_writer.apply_watcher_event(&event);
        service_index.apply(&event);
    }
    let pacer = Pacer::new(Duration::from_secs(1), 10.0);
    let starting = crate::triggers::Starting::default();
    Arc::new(Context {
        events: crate::events::Events::start(
            Recorder::new(client.clone(), Reporter { controller: MANAGER.into(), instance: None }),
            10.0,
            pacer.creates.clone(),
            starting.clone(),
            Default::default(),
        ),
        client,
        pods: pod_store,
        services: service_store,
        configs: reflector::store().0,
        pod_index,
        service_index,
        settings: Settings::default(),
        restart_backoff: Duration::from_secs(10),
        metrics: Arc::new(Metrics::new()),
        pacer,
        marks,
        created: Default::default(),
        retries: Default::default(),
        namespaces: Default::default(),
        teardown: Default::default(),
        creates: crate::creates::Limits::new(16, 64),
        kueue: None,
        starting,
        later: crate::later::Later::new(Duration::from_secs(1)).0,
    })
}

pub(super) fn job(collectors: i32, policy: &str, phase: Option<Phase>) -> DIJob {
    let container = json!({"containers": [{"name": "di-container", "image": "ding"}]});
    let mut job: DIJob = serde_json::from_value(json!({
        "apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJob",
        "metadata": {"name": "job", "namespace": "ns", "uid": "job-uid", "generation": 1},
        "spec": {"cleanPodPolicy": policy, "coordinator": {"template": {"spec": container}},
                 "collector": {"replicas": collectors, "template": {"spec": container}}},
    }))
    .unwrap();
    job.status = phase.map(|p| DIJobStatus { phase: Some(p), ..Default::default() });
    job
}

/// The job's pods and services as they exist once created, pods in `phase_of`'s phase.
pub(super) fn world(job: &DIJob, phase_of: impl Fn(&str) -> &'static str) -> (Vec<Pod>, Vec<Service>) {
    let mut defaulted = job.clone();
    default_dijob(&mut defaulted);
    let replicas = crate::desired::replicas(&defaulted, None, &Settings::default()).unwrap();
    let pods = replicas
        .iter()
        .map(|r| {
            let mut pod = r.pod.clone();
            pod.metadata.uid = Some(format!("uid-{}", r.name()));
            pod.status = Some(serde_json::from_value(json!({"phase": phase_of(&r.name())})).unwrap());
            pod
        })
        .collect();
    (pods, replicas.into_iter().map(|r| r.service).collect())
}

pub(super) fn calls(recorded: &Log, method: &str, kind: &str) -> Vec<String> {
    recorded
        .calls()
        .iter()
        .filter(|c| c.method == method && c.path.split('/').any(|part| part == kind))
        .map(|c| c.body["metadata"]["name"].as_str().map_or_else(|| c.last_segment().to_owned(), str::to_owned))
        .collect()
}
