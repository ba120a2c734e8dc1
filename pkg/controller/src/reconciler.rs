//! The I/O edge of the reconciler: watches DIJobs and the pods and services they own, feeds each
//! pass the world from the caches, writes the status and carries out the plan's actions.

use std::sync::Arc;
use std::time::Duration;

use di_api::contract::{annotations, names};
use di_api::defaults::default_dijob;
use di_api::validation::validate_dijob;
use di_api::{AggregatorConfig, DIJob, DIJobStatus, Phase};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role as RbacRole, RoleBinding};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action as Requeue, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;
use tracing::{info, warn};

use crate::desired::{self, BuildError, Settings, managed_selector};
use crate::index::JobIndex;
use crate::metrics::Metrics;
use crate::pace;
use crate::pace::{Pacer, Write};
use crate::plan::{self, Action, Why, World};
use crate::status::{self, Facts};
use crate::view::{JobMember, JobView, PodView, ServiceView};

/// Field manager of everything the reconciler writes.
pub const MANAGER: &str = "di-orchestrator";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("building the job's objects: {0}")]
    Build(#[from] BuildError),
}

/// Everything a pass needs besides the job.
pub struct Context {
    pub client: Client,
    pub pods: Store<PodView>,
    pub services: Store<ServiceView>,
    /// Which cached pods and services are whose.
    pub pod_index: JobIndex,
    pub service_index: JobIndex,
    pub settings: Settings,
    /// First delay before a failed replica is replaced; doubles with each replacement.
    pub restart_backoff: Duration,
    pub recorder: Recorder,
    pub metrics: Arc<Metrics>,
    pub pacer: Pacer,
}

/// Options of the reconciler loop.
#[derive(Clone, Debug)]
pub struct Options {
    pub settings: Settings,
    pub restart_backoff: Duration,
    /// Passes run at once.
    pub concurrency: u16,
    /// Only this namespace's jobs, pods and services; `None` for the whole cluster.
    pub namespace: Option<String>,
    /// Least time between two status writes of a job that change only its counts.
    pub status_period: Duration,
}

fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Runs the reconciler until `shutdown` resolves.
pub async fn run(
    client: Client,
    options: Options,
    metrics: Arc<Metrics>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let selector = watcher::Config::default().labels(&managed_selector());
    let (pods, pod_writer) = reflector::store();
    let (pod_index, service_index) = (JobIndex::default(), JobIndex::default());
    let namespace = options.namespace.as_deref();
    let pod_stream = watcher(api::<PodView>(&client, namespace), selector.clone())
        .default_backoff()
        .modify(PodView::slim)
        .reflect(pod_writer)
        .inspect({
            let index = pod_index.clone();
            move |event| event.iter().for_each(|e| index.apply(e))
        })
        .touched_objects();
    let (services, service_writer) = reflector::store();
    let service_stream = watcher(api::<ServiceView>(&client, namespace), selector)
        .default_backoff()
        .modify(ServiceView::slim)
        .reflect(service_writer)
        .inspect({
            let index = service_index.clone();
            move |event| event.iter().for_each(|e| index.apply(e))
        })
        .touched_objects();
    let reporter = Reporter { controller: MANAGER.into(), instance: std::env::var("KUBERNETES_POD_NAME").ok() };
    let context = Arc::new(Context {
        recorder: Recorder::new(client.clone(), reporter),
        client: client.clone(),
        pods,
        services,
        pod_index,
        service_index,
        settings: options.settings,
        restart_backoff: options.restart_backoff,
        metrics,
        pacer: Pacer::new(options.status_period),
    });
    let config = kube::runtime::controller::Config::default().concurrency(options.concurrency);
    let jobs = api::<JobView>(&client, options.namespace.as_deref());
    let (job_store, job_writer) = reflector::store();
    let job_stream = watcher(jobs, watcher::Config::default().any_semantic())
        .default_backoff()
        .modify(JobView::slim)
        .reflect(job_writer)
        .touched_objects();
    let controller = Controller::for_stream(job_stream, job_store);
    let gauges = tokio::spawn(count_jobs_by_phase(controller.store(), context.metrics.clone()));
    controller
        .with_config(config)
        .watches_stream(pod_stream, job_of)
        .watches_stream(service_stream, job_of)
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            if let Err(e) = result {
                warn!("reconcile: {e}");
            }
        })
        .await;
    gauges.abort();
}

/// Keeps the jobs-by-phase gauge current from the controller's own cache of DIJobs.
async fn count_jobs_by_phase(jobs: Store<JobView>, metrics: Arc<Metrics>) {
    const PHASES: [Phase; 5] = [Phase::Created, Phase::Running, Phase::Succeeded, Phase::Failed, Phase::Unknown];
    loop {
        let state = jobs.state();
        for phase in PHASES {
            let count = state
                .iter()
                .filter(|j| j.status.as_ref().and_then(|s| s.phase).unwrap_or(Phase::Created) == phase)
                .count();
            metrics.jobs.get_or_create(&crate::metrics::PhaseLabel { phase: format!("{phase:?}") }).set(count as i64);
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
}

/// The job an object belongs to, by its label: the trigger of a pass when the object changes.
fn job_of<K: JobMember>(object: K) -> Option<ObjectRef<JobView>> {
    Some(ObjectRef::new(object.job()?).within(&object.namespace()?))
}

fn error_policy(job: Arc<JobView>, error: &Error, ctx: Arc<Context>) -> Requeue {
    ctx.metrics.reconcile_errors.inc();
    warn!(job = %job.name_any(), namespace = ?job.namespace(), "reconcile failed: {error}");
    Requeue::requeue(Duration::from_secs(5))
}

async fn reconcile(view: Arc<JobView>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    let _timer = ctx.metrics.reconcile_started();
    if view.metadata.deletion_timestamp.is_some() {
        // Everything the job owns goes with it through garbage collection.
        return Ok(Requeue::await_change());
    }
    let namespace = view.namespace().unwrap_or_default();
    let name = view.name_any();
    let mut job = match view.to_job() {
        Ok(job) => job,
        Err(e) => {
            // Only a spec the API server's schema let through but the types cannot read.
            let job = DIJob { metadata: view.metadata.clone(), status: view.status.clone(), ..Default::default() };
            mark_failed(&ctx, &job, "InvalidSpec", &format!("the job's spec cannot be read: {e}")).await?;
            return Ok(Requeue::await_change());
        }
    };
    default_dijob(&mut job);

    if let Err(errors) = validate_dijob(&job) {
        // A bad object is marked once and left alone: requeueing it cannot fix it.
        let message = format!("the job is invalid: {errors}");
        mark_failed(&ctx, &job, "InvalidSpec", &message).await?;
        return Ok(Requeue::await_change());
    }

    let pods: Vec<Pod> = ctx.pod_index.objects(&ctx.pods, &namespace, &name).iter().map(|p| p.to_pod()).collect();
    let services: Vec<Service> =
        ctx.service_index.objects(&ctx.services, &namespace, &name).iter().map(|s| s.to_service()).collect();
    let job_pods: Vec<&Pod> = pods.iter().collect();
    let job_services: Vec<&Service> = services.iter().collect();

    let (aggregator_config, missing) = aggregator_config(&ctx, &job).await?;
    let world = World {
        pods: job_pods,
        services: job_services,
        aggregator_config: aggregator_config.as_ref(),
        missing_aggregator_config: missing,
        now: Timestamp::now(),
    };
    let plan = match plan::plan(&job, &world, &ctx.settings, ctx.restart_backoff) {
        Ok(plan) => plan,
        Err(e) => {
            mark_failed(&ctx, &job, "CannotBuildPods", &e.to_string()).await?;
            return Ok(Requeue::await_change());
        }
    };

    // A finished phase is recorded before the cleanup it triggers, so a crash in between cannot
    // bring a deleted coordinator back. Otherwise the pods come first, for a faster start; and a
    // pass that created pods leaves its status unwritten, since it describes the world before
    // them: the pods' own watch events bring the next pass, which writes the world as it is.
    let finishing = plan.status.phase.is_some_and(Phase::is_finished);
    let deferred = if finishing {
        let deferred = record_status(&ctx, &job, &plan.status).await?;
        execute(&ctx, &job, &plan.actions).await?;
        deferred
    } else if execute(&ctx, &job, &plan.actions).await? {
        // Should the pods' events be lost, the status still follows soon.
        Some(ctx.pacer.period.max(Duration::from_secs(1)))
    } else {
        record_status(&ctx, &job, &plan.status).await?
    };
    // A periodic look catches what no watch event reports (time passing, a lost event).
    let next = [plan.requeue_after, deferred].into_iter().flatten().min();
    Ok(Requeue::requeue(next.unwrap_or(Duration::from_secs(300))))
}

/// Writes the status if it changed and is due (see `pace`), with an event when the phase changed;
/// otherwise says when it will be due.
async fn record_status(ctx: &Arc<Context>, job: &DIJob, status: &DIJobStatus) -> Result<Option<Duration>, Error> {
    let uid = job.uid().unwrap_or_default();
    match pace::decide(job.status.as_ref(), status, ctx.pacer.since_last(&uid), ctx.pacer.period) {
        Write::Unchanged => return Ok(None),
        Write::After(due) => return Ok(Some(due)),
        Write::Now => {}
    }
    write_status(ctx, job, status).await?;
    ctx.pacer.wrote(&uid);
    let previous = job.status.as_ref().and_then(|s| s.phase);
    if status.phase != previous
        && let Some(phase) = status.phase
    {
        ctx.metrics.phase_transition(phase);
        let kind = if phase == Phase::Failed { EventType::Warning } else { EventType::Normal };
        let note = status.conditions.iter().rev().find(|c| c.status == "True").and_then(|c| c.message.clone());
        publish(ctx, job, kind, &format!("Job{phase:?}"), "Reconcile", note);
    }
    Ok(None)
}

/// The AggregatorConfig the job's learners need, if they need one: `(found, missing name)`.
async fn aggregator_config(ctx: &Context, job: &DIJob) -> Result<(Option<AggregatorConfig>, Option<String>), Error> {
    if !desired::needs_aggregator(job) || job.spec.learner_replicas() == 0 {
        return Ok((None, None));
    }
    let (namespace, name) = desired::aggregator_config_ref(job, &ctx.settings);
    let api: Api<AggregatorConfig> = Api::namespaced(ctx.client.clone(), &namespace);
    match api.get_opt(&name).await? {
        Some(mut config) => {
            di_api::defaults::default_aggregator_config(&mut config);
            Ok((Some(config), None))
        }
        None => Ok((None, Some(format!("{namespace}/{name}")))),
    }
}

/// Carries out the actions; whether any pod was created.
async fn execute(ctx: &Arc<Context>, job: &DIJob, actions: &[Action]) -> Result<bool, Error> {
    let namespace = job.namespace().unwrap_or_default();
    let rbac = actions.iter().find_map(|a| match a {
        Action::CreateRbac(rbac) => Some(rbac),
        _ => None,
    });
    // The RoleBinding's create waits on the API server's escalation check, which lists bindings
    // from a cache that must first catch up with the writes just made (about 100 ms). So only the
    // coordinator pod waits for the RBAC (a coordinator that exists means its sidecar's RBAC does,
    // even after a crash); every other service and pod is created meanwhile.
    let coordinator = names::coordinator(&job.name_any());
    let (after_grants, others): (Vec<&Action>, Vec<&Action>) = actions
        .iter()
        .partition(|a| rbac.is_some() && matches!(a, Action::CreatePod(pod) if pod.name_any() == coordinator));
    if let Some(rbac) = rbac {
        create(&Api::<ServiceAccount>::namespaced(ctx.client.clone(), &namespace), &rbac.service_account).await?;
    }
    let grants_then_coordinator = async {
        if let Some(rbac) = rbac {
            create(&Api::<RbacRole>::namespaced(ctx.client.clone(), &namespace), &rbac.role).await?;
            create(&Api::<RoleBinding>::namespaced(ctx.client.clone(), &namespace), &rbac.binding).await?;
        }
        carry_out(ctx, job, &after_grants).await
    };
    let (mut done, more) = futures::try_join!(grants_then_coordinator, carry_out(ctx, job, &others))?;
    done.created.extend(more.created);
    done.deleted.extend(more.deleted);
    done.replaced.extend(more.replaced);
    report(ctx, job, &done);
    Ok(!done.created.is_empty())
}

/// What a pass changed, for its events.
#[derive(Default)]
struct Done {
    created: Vec<String>,
    deleted: Vec<(String, Why)>,
    replaced: Vec<String>,
}

/// Every action but the RBAC's, in order.
async fn carry_out(ctx: &Arc<Context>, job: &DIJob, actions: &[&Action]) -> Result<Done, Error> {
    let namespace = job.namespace().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    let services: Api<Service> = Api::namespaced(ctx.client.clone(), &namespace);
    let (mut created, mut deleted, mut replaced) = (vec![], vec![], vec![]);
    for &action in actions {
        match action {
            Action::CreateRbac(_) => {}
            Action::CreateService(service) => {
                create(&services, service).await?;
            }
            Action::CreatePod(pod) => {
                if create(&pods, pod).await? {
                    ctx.metrics.pods_created.inc();
                    created.push(pod.name_any());
                }
            }
            Action::MarkRestart { service, restarts, failed_uid, restart_after } => {
                let patch = json!({"metadata": {"annotations": {
                    annotations::RESTARTS: restarts.to_string(),
                    annotations::LAST_FAILED_UID: failed_uid,
                    annotations::RESTART_AFTER: restart_after.to_string(),
                }}});
                match services.patch(service, &PatchParams::default(), &Patch::Merge(&patch)).await {
                    Ok(_) => replaced.push(format!("{service} (restart {restarts})")),
                    Err(e) if is_status(&e, 404) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            Action::DeletePod { name, why } => {
                if delete(&pods, name).await? {
                    ctx.metrics.pods_deleted.inc();
                    deleted.push((name.clone(), *why));
                }
            }
            Action::DeleteService(name) => {
                delete(&services, name).await?;
            }
            Action::DeleteRbac => {
                let identity = di_api::contract::names::replicas_identity(&job.name_any());
                delete(&Api::<RoleBinding>::namespaced(ctx.client.clone(), &namespace), &identity).await?;
                delete(&Api::<RbacRole>::namespaced(ctx.client.clone(), &namespace), &identity).await?;
                delete(&Api::<ServiceAccount>::namespaced(ctx.client.clone(), &namespace), &identity).await?;
            }
            Action::DeleteJob => {
                let jobs: Api<DIJob> = Api::namespaced(ctx.client.clone(), &namespace);
                let params = DeleteParams {
                    propagation_policy: Some(kube::api::PropagationPolicy::Background),
                    ..Default::default()
                };
                match jobs.delete(&job.name_any(), &params).await {
                    Ok(_) => info!(job = %job.name_any(), "deleted after its TTL"),
                    Err(e) if is_status(&e, 404) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
    Ok(Done { created, deleted, replaced })
}

/// One event per kind of change in a pass, not one per pod: a 500-replica job must not cost 500
/// events.
fn report(ctx: &Arc<Context>, job: &DIJob, done: &Done) {
    let Done { created, deleted, replaced } = done;
    if !created.is_empty() {
        publish(ctx, job, EventType::Normal, "Created", "CreatePods", Some(summary("created", created)));
    }
    if !replaced.is_empty() {
        publish(
            ctx,
            job,
            EventType::Warning,
            "Replaced",
            "ReplaceFailedPods",
            Some(summary("replacing failed", replaced)),
        );
    }
    for (why, reason) in [
        (Why::ScaledDown, "ScaledDown"),
        (Why::Suspended, "Suspended"),
        (Why::Cleanup, "CleanedUp"),
        (Why::AggregatorFailed, "AggregatorFailed"),
        (Why::Reported, "ReportedFailed"),
    ] {
        let names: Vec<String> = deleted.iter().filter(|(_, w)| *w == why).map(|(n, _)| n.clone()).collect();
        if !names.is_empty() {
            publish(ctx, job, EventType::Normal, reason, "DeletePods", Some(summary("deleted", &names)));
        }
    }
}

fn summary(verb: &str, names: &[String]) -> String {
    const SHOWN: usize = 10;
    let mut text =
        format!("{verb} {} pod(s): {}", names.len(), names.iter().take(SHOWN).cloned().collect::<Vec<_>>().join(", "));
    if names.len() > SHOWN {
        text.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    text
}

/// Creates `object`; `Ok(false)` when it already exists, which is success.
async fn create<K>(api: &Api<K>, object: &K) -> Result<bool, Error>
where
    K: Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    match api.create(&PostParams { field_manager: Some(MANAGER.into()), ..Default::default() }, object).await {
        Ok(_) => Ok(true),
        Err(e) if is_status(&e, 409) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Deletes `name` at once; `Ok(false)` when it is already gone, which is success.
async fn delete<K>(api: &Api<K>, name: &str) -> Result<bool, Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let params = DeleteParams { grace_period_seconds: Some(0), ..Default::default() };
    match api.delete(name, &params).await {
        Ok(_) => Ok(true),
        Err(e) if is_status(&e, 404) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

fn is_status(error: &kube::Error, code: u16) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == code)
}

async fn write_status(ctx: &Context, job: &DIJob, status: &DIJobStatus) -> Result<(), Error> {
    let api: Api<DIJob> = Api::namespaced(ctx.client.clone(), &job.namespace().unwrap_or_default());
    let patch = json!({
        "apiVersion": DIJob::api_version(&()),
        "kind": DIJob::kind(&()),
        "status": status,
    });
    api.patch_status(&job.name_any(), &PatchParams::apply(MANAGER).force(), &Patch::Apply(&patch)).await?;
    ctx.metrics.status_writes.inc();
    Ok(())
}

/// Marks a job that cannot be run as Failed, once, with the reason.
async fn mark_failed(ctx: &Arc<Context>, job: &DIJob, reason: &str, message: &str) -> Result<(), Error> {
    let facts = Facts { phase: Some(Phase::Failed), phase_reason: (reason.into(), message.into()), ..Facts::default() };
    let status = status::compute(job, &[], &facts, Timestamp::now());
    let unchanged = job.status.as_ref().is_some_and(|s| {
        s.phase == Some(Phase::Failed)
            && s.conditions.iter().any(|c| c.type_ == "Failed" && c.message.as_deref() == Some(message))
    });
    if !unchanged {
        write_status(ctx, job, &status).await?;
        publish(ctx, job, EventType::Warning, reason, "Validate", Some(message.to_owned()));
    }
    Ok(())
}

/// Publishes an event without holding up the pass: events inform, they do not gate.
fn publish(ctx: &Arc<Context>, job: &DIJob, type_: EventType, reason: &str, action: &str, note: Option<String>) {
    let event = Event { type_, reason: reason.into(), note, action: action.into(), secondary: None };
    let (ctx, reference, name, reason) = (ctx.clone(), job.object_ref(&()), job.name_any(), reason.to_owned());
    tokio::spawn(async move {
        if let Err(e) = ctx.recorder.publish(&event, &reference).await {
            warn!(job = %name, "publishing event {reason}: {e}");
        }
    });
}

/// Passes against a mocked API server (as kube-rs's controller-rs tests do): an echoing fake that
/// records every request, with the caches filled by hand.
#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use http::{Request, Response};
    use http_body_util::BodyExt;
    use kube::client::Body;
    use kube::runtime::watcher;
    use serde_json::Value;

    use super::*;
    use crate::desired::Settings;

    type Recorded = Arc<Mutex<Vec<(String, String, Value)>>>;

    /// An API server that answers every write with the object it was sent and records it.
    fn fake_api_server(job: &DIJob) -> (Client, Recorded) {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let recorded: Recorded = Arc::default();
        let log = recorded.clone();
        let job_json = serde_json::to_vec(job).unwrap();
        tokio::spawn(async move {
            while let Some((request, send)) = handle.next_request().await {
                let (parts, body) = request.into_parts();
                let bytes = body.collect().await.unwrap().to_bytes();
                let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                log.lock().unwrap().push((parts.method.to_string(), parts.uri.path().to_string(), value.clone()));
                let (code, answer) = match parts.method.as_str() {
                    "POST" => (201, bytes.to_vec()),
                    "PATCH" if parts.uri.path().contains("/dijobs/") => (200, job_json.clone()),
                    "PATCH" => (200, bytes.to_vec()),
                    "DELETE" => (200, br#"{"kind":"Status","apiVersion":"v1","status":"Success"}"#.to_vec()),
                    _ => (
                        404,
                        br#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}"#
                            .to_vec(),
                    ),
                };
                send.send_response(Response::builder().status(code).body(Body::from(answer)).unwrap());
            }
        });
        (Client::new(service, "default"), recorded)
    }

    fn view_of(job: &DIJob) -> Arc<JobView> {
        Arc::new(serde_json::from_str(&serde_json::to_string(job).unwrap()).unwrap())
    }

    fn context(client: Client, pods: Vec<Pod>, services: Vec<Service>) -> Arc<Context> {
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
        Arc::new(Context {
            recorder: Recorder::new(client.clone(), Reporter { controller: MANAGER.into(), instance: None }),
            client,
            pods: pod_store,
            services: service_store,
            pod_index,
            service_index,
            settings: Settings::default(),
            restart_backoff: Duration::from_secs(10),
            metrics: Arc::new(Metrics::new()),
            pacer: Pacer::new(Duration::from_secs(1)),
        })
    }

    fn job(collectors: i32, policy: &str, phase: Option<Phase>) -> DIJob {
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
    fn world(job: &DIJob, phase_of: impl Fn(&str) -> &'static str) -> (Vec<Pod>, Vec<Service>) {
        let mut defaulted = job.clone();
        default_dijob(&mut defaulted);
        let replicas = desired::replicas(&defaulted, None, &Settings::default()).unwrap();
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

    fn calls(recorded: &Recorded, method: &str, kind: &str) -> Vec<String> {
        recorded
            .lock()
            .unwrap()
            .iter()
            .filter(|(m, path, _)| m == method && path.split('/').any(|part| part == kind))
            .map(|(_, path, body)| {
                body["metadata"]["name"]
                    .as_str()
                    .map_or_else(|| path.rsplit('/').next().unwrap().to_owned(), str::to_owned)
            })
            .collect()
    }

    #[test]
    fn objects_trigger_the_job_their_label_names() {
        let job = job(1, "Running", None);
        let (pods, services) = world(&job, |_| "Running");
        assert_eq!(job_of(pods[0].clone()), Some(ObjectRef::new("job").within("ns")));
        assert_eq!(job_of(services[0].clone()), Some(ObjectRef::new("job").within("ns")));
        assert_eq!(job_of(Pod::default()), None);
    }

    #[tokio::test]
    async fn first_reconcile_creates_the_coordinator_and_its_service() {
        let job = job(0, "Running", None);
        let (client, recorded) = fake_api_server(&job);
        let requeue = reconcile(view_of(&job), context(client, vec![], vec![])).await.unwrap();
        assert_eq!(calls(&recorded, "POST", "services"), vec!["job-coordinator"]);
        assert_eq!(calls(&recorded, "POST", "pods"), vec!["job-coordinator"]);
        assert_eq!(calls(&recorded, "POST", "serviceaccounts"), vec!["job-replicas"]);
        assert_eq!(calls(&recorded, "POST", "roles"), vec!["job-replicas"]);
        assert_eq!(calls(&recorded, "POST", "rolebindings"), vec!["job-replicas"]);
        let order: Vec<String> = recorded.lock().unwrap().iter().map(|(m, p, _)| format!("{m} {p}")).collect();
        let at =
            |what: &str| order.iter().position(|r| r.ends_with(what)).unwrap_or_else(|| panic!("{what} in {order:?}"));
        assert!(at("/serviceaccounts") < at("/rolebindings"), "{order:?}");
        assert!(at("/rolebindings") < at("/pods"), "the coordinator waits for its sidecar's RBAC: {order:?}");
        // Its status would describe the world before the pods: the pass their events bring
        // writes it, and a requeue within the status period stands in for lost events.
        let status_writes = |recorded: &Recorded| -> Vec<Value> {
            let recorded = recorded.lock().unwrap();
            recorded
                .iter()
                .filter(|(m, p, _)| m == "PATCH" && p.ends_with("/status"))
                .map(|(_, _, b)| b.clone())
                .collect()
        };
        assert_eq!(status_writes(&recorded), Vec::<Value>::new());
        assert_eq!(requeue, Requeue::requeue(Duration::from_secs(1)));

        let (pods, services) = world(&job, |_| "Pending");
        let (client, recorded) = fake_api_server(&job);
        reconcile(view_of(&job), context(client, pods, services)).await.unwrap();
        let writes = status_writes(&recorded);
        assert_eq!(writes.len(), 1);
        assert_eq!(writes[0]["status"]["phase"], "Created");
    }

    #[tokio::test]
    async fn a_reconcile_after_a_crash_creates_nothing_twice() {
        let mut job = job(3, "Running", None);
        let (pods, services) = world(&job, |_| "Running");
        // What the crashed pass had already written.
        let ctx = context(fake_api_server(&job).0, vec![], vec![]);
        let mut defaulted = job.clone();
        default_dijob(&mut defaulted);
        let world = World {
            pods: pods.iter().collect(),
            services: services.iter().collect(),
            aggregator_config: None,
            missing_aggregator_config: None,
            now: Timestamp::now(),
        };
        job.status = Some(plan::plan(&defaulted, &world, &ctx.settings, ctx.restart_backoff).unwrap().status);

        let (client, recorded) = fake_api_server(&job);
        reconcile(view_of(&job), context(client, pods, services)).await.unwrap();
        let writes: Vec<_> = recorded
            .lock()
            .unwrap()
            .iter()
            .filter(|(m, _, _)| m != "GET")
            .map(|(m, p, _)| format!("{m} {p}"))
            .collect();
        assert_eq!(writes, Vec::<String>::new(), "a converged job costs no request");
    }

    #[tokio::test]
    async fn completion_applies_each_cleanup_policy() {
        let cases = [
            ("Running", vec!["job-collector-1", "job-collector-0"]),
            ("All", vec!["job-coordinator", "job-collector-0", "job-collector-1"]),
            ("None", vec![]),
        ];
        for (policy, mut want) in cases {
            let job = job(2, policy, Some(Phase::Running));
            let (pods, services) = world(&job, |name| if name == "job-coordinator" { "Succeeded" } else { "Running" });
            let (client, recorded) = fake_api_server(&job);
            reconcile(view_of(&job), context(client, pods, services)).await.unwrap();
            let mut deleted = calls(&recorded, "DELETE", "pods");
            deleted.sort();
            want.sort();
            assert_eq!(deleted, want, "policy {policy}");
            let mut services_deleted = calls(&recorded, "DELETE", "services");
            services_deleted.sort();
            assert_eq!(
                services_deleted,
                vec!["job-collector-0", "job-collector-1", "job-coordinator"],
                "policy {policy}"
            );
            assert_eq!(calls(&recorded, "DELETE", "roles"), vec!["job-replicas"], "policy {policy}");
            assert!(calls(&recorded, "POST", "pods").is_empty(), "policy {policy}");
        }
    }

    #[tokio::test]
    async fn an_invalid_job_is_marked_failed_once() {
        let job = job(-1, "Running", None);
        let (client, recorded) = fake_api_server(&job);
        let requeue = reconcile(view_of(&job), context(client, vec![], vec![])).await.unwrap();
        assert_eq!(requeue, Requeue::await_change());
        let status: Vec<Value> = recorded
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, p, _)| p.ends_with("/status"))
            .map(|(_, _, b)| b.clone())
            .collect();
        assert_eq!(status.len(), 1);
        assert_eq!(status[0]["status"]["phase"], "Failed");
        assert_eq!(status[0]["status"]["conditions"][1]["reason"], "InvalidSpec");
        assert!(calls(&recorded, "POST", "pods").is_empty());
    }
}
