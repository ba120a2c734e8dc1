//! The I/O edge of the reconciler: watches DIJobs and the pods and services they own and runs a
//! pass (`pass`) for each job that changed (which reports ask for one: `asks`; when it runs:
//! `dispatch`), with the caches as its view of the world.

use std::sync::Arc;
use std::time::Duration;

use di_api::AggregatorConfig;
use futures::StreamExt;
use futures::stream::BoxStream;
use kube::runtime::events::{EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::watcher::Event;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use tracing::{info, warn};

use crate::asks::{asks_for, job_of, jobs_using, paced};
use crate::context::{Context, MANAGER};
use crate::created::Created;
use crate::desired::{Settings, managed_selector};
use crate::dispatch::Requeue;
use crate::error::{Error, Retries};
use crate::index::JobIndex;
use crate::later::Later;
use crate::metrics::Metrics;
use crate::pace::Pacer;
use crate::pass;
use crate::triggers::{PodChanges, ServiceChanges, Starting};
use crate::view::{JobView, PodView, ServiceView};

/// Options of the reconciler loop.
#[derive(Clone, Debug)]
pub struct Options {
    pub settings: Settings,
    pub restart_backoff: Duration,
    /// Passes run at once.
    pub concurrency: u16,
    /// Only this namespace's jobs, pods and services; `None` for the whole cluster.
    pub namespace: Option<String>,
    /// Least time between two progress writes of a job's status (see `pace`).
    pub status_period: Duration,
    /// Most progress writes of status per second, all jobs together (see `pace`).
    pub status_writes_per_second: f64,
    /// Most events sent per second.
    pub events_per_second: f64,
    /// Creates of one job's pass in flight at once (see `creates`).
    pub creates_per_job: usize,
    /// Creates in flight at once, all passes together.
    pub creates_in_flight: usize,
    /// Whether the cluster serves Kueue's Workloads (asked at start-up, `workloads::served`).
    pub kueue: bool,
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
    let starting = Starting::default();
    let (later, due) = Later::new(options.status_period);
    let pod_stream = watcher(api::<PodView>(&client, namespace), selector.clone())
        .backoff(watch_backoff())
        .modify(PodView::slim)
        .reflect(pod_writer)
        .inspect({
            let index = pod_index.clone();
            move |event| event.iter().for_each(|e| index.apply(e))
        })
        .filter(paced(PodChanges::new(starting.clone()), later.clone()));
    let (services, service_writer) = reflector::store();
    let service_stream = watcher(api::<ServiceView>(&client, namespace), selector)
        .backoff(watch_backoff())
        .modify(ServiceView::slim)
        .reflect(service_writer)
        .inspect({
            let index = service_index.clone();
            move |event| event.iter().for_each(|e| index.apply(e))
        })
        .filter(paced(ServiceChanges::new(starting.clone()), later.clone()));
    // AggregatorConfigs are few and small: cached whole, from every namespace (a job may name
    // one in another, and the default lives in the orchestrator's).
    let (configs, config_writer) = reflector::store();
    let config_stream = watcher(Api::<AggregatorConfig>::all(client.clone()), watcher::Config::default())
        .backoff(watch_backoff())
        .modify(|config| config.metadata.managed_fields = None)
        .reflect(config_writer);
    let (kueue, workload_stream, cluster_watches) = match options.kueue {
        true => {
            let (kueue, stream, watches) = crate::workloads::watch(&client, namespace, watch_backoff);
            (Some(kueue), Some(stream), Some(tokio::spawn(watches)))
        }
        false => (None, None, None),
    };
    let (teardown, namespace_watch) = crate::teardown::Teardown::watch(&client, namespace, watch_backoff());
    let namespace_watch = tokio::spawn(namespace_watch);
    let reporter = Reporter { controller: MANAGER.into(), instance: std::env::var("KUBERNETES_POD_NAME").ok() };
    let pacer = Pacer::new(options.status_period, options.status_writes_per_second);
    let recorder = Recorder::new(client.clone(), reporter);
    let context = Arc::new(Context {
        events: crate::events::Events::start(
            recorder,
            options.events_per_second,
            pacer.creates.clone(),
            starting.clone(),
            metrics.events_waiting.clone(),
        ),
        client: client.clone(),
        pods,
        services,
        configs,
        pod_index,
        service_index,
        settings: options.settings,
        restart_backoff: options.restart_backoff,
        metrics,
        pacer,
        marks: Arc::default(),
        created: Created::default(),
        retries: Retries::default(),
        namespaces: Default::default(),
        creates: crate::creates::Limits::new(options.creates_per_job, options.creates_in_flight),
        kueue,
        starting: starting.clone(),
        later,
        teardown,
    });
    let jobs = api::<JobView>(&client, options.namespace.as_deref());
    let (job_store, job_writer) = reflector::store();
    let arrived = starting.clone();
    let bookkeeping = context.clone();
    let job_stream = watcher(jobs, watcher::Config::default().any_semantic())
        .backoff(watch_backoff())
        .modify(JobView::slim)
        .reflect(job_writer)
        .inspect(move |event| {
            // A deleted job waits for no pod, and what was kept of it goes.
            if let Ok(Event::Delete(job)) = event {
                starting.set(&job.namespace().unwrap_or_default(), &job.name_any(), None);
                let uid = job.uid().unwrap_or_default();
                bookkeeping.teardown.forget(&uid);
                bookkeeping.created.forget(&uid);
                bookkeeping.retries.succeeded(&uid);
            }
        });
    // No pass runs before the pods and services are listed: a pass over an empty cache would see
    // a running job without its coordinator and set it back to Created. The dispatcher polls the
    // pod and service watches meanwhile, which is what makes them ready.
    let listed = {
        let (pods, services, configs) = (context.pods.clone(), context.services.clone(), context.configs.clone());
        // Nor before the Workloads are: a job in a queue whose Workload is not seen would be held,
        // and an admitted one lose its pods.
        let workloads = context
            .kueue
            .as_ref()
            .map(|k| (k.workloads.clone(), k.flavors.clone(), k.priorities.clone(), k.workload_priorities.clone()));
        async move {
            let _ = futures::join!(pods.wait_until_ready(), services.wait_until_ready(), configs.wait_until_ready());
            if let Some((workloads, flavors, priorities, classes)) = workloads {
                let _ = futures::join!(
                    workloads.wait_until_ready(),
                    flavors.wait_until_ready(),
                    priorities.wait_until_ready(),
                    classes.wait_until_ready()
                );
            }
            info!("pods and services listed: reconciling");
            job_stream
        }
    };
    let job_stream = futures::stream::once(listed).flatten();
    let uses_config = {
        let (jobs, settings) = (job_store.clone(), context.settings.clone());
        move |config: AggregatorConfig| jobs_using(&jobs.state(), &config, &settings)
    };
    let gauges = tokio::spawn(crate::gauges::keep_current(job_store.clone(), context.metrics.clone()));
    // Only while this replica reconciles (leads): one keeper at a time.
    let keeper = (context.settings.identity == crate::identity::Identity::Policy)
        .then(|| tokio::spawn(crate::identity::keep_policy(client.clone())));
    // What asks for a job's pass: the job itself, its pods and Services, the configs its learners
    // use, its Workload, and what waited for a later pass (`later`).
    let mut asks: Vec<BoxStream<'static, ObjectRef<JobView>>> = vec![
        asks_for(job_stream, &job_store, |job| Some(ObjectRef::from_obj(&job))),
        asks_for(pod_stream, &job_store, |pod| job_of(&pod)),
        asks_for(service_stream, &job_store, |service| job_of(&service)),
        asks_for(config_stream, &job_store, uses_config),
        due.boxed(),
    ];
    if let Some(stream) = workload_stream {
        asks.push(asks_for(stream, &job_store, crate::workloads::job_of));
    }
    let concurrency = options.concurrency.into();
    // A job whose pods all run goes ahead of the line: its pass writes that it runs.
    let first =
        move |job: &ObjectRef<JobView>| arrived.arrived(job.namespace.as_deref().unwrap_or_default(), &job.name);
    let asks = futures::stream::select_all(asks);
    crate::dispatch::run(job_store, asks, concurrency, first, shutdown, move |job| {
        let ctx = context.clone();
        async move {
            match pass::reconcile(job.clone(), ctx.clone()).await {
                Ok(requeue) => requeue,
                Err(error) => error_policy(job, &error, ctx),
            }
        }
    })
    .await;
    gauges.abort();
    namespace_watch.abort();
    if let Some(watches) = cluster_watches {
        watches.abort();
    }
    if let Some(keeper) = keeper {
        keeper.abort();
    }
}

/// How a watch that failed waits before it tries again: from 200 ms up to 5 s, reset by any event.
/// kube's default climbs to 30 s and lets that grow across a few failures in a row: after an API
/// server restart (403s while its RBAC cache fills, then 410 for every resumed watch) the
/// orchestrator was blind for minutes (`make chaos`, the API server row).
fn watch_backoff() -> watcher::ExponentialBackoff {
    let builder = backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(5))
        .with_jitter()
        .without_max_times();
    builder.into()
}

/// A failed pass: the job's users read why in a Warning event (reason: the error's kind), and
/// the job is looked at again after a backoff that grows with each failure in a row.
pub(crate) fn error_policy(job: Arc<JobView>, error: &Error, ctx: Arc<Context>) -> Requeue {
    let kind = error.kind();
    ctx.metrics.reconcile_failed(&kind);
    warn!(job = %job.name_any(), namespace = ?job.namespace(), kind = %kind, "reconcile failed: {error}");
    crate::context::publish(
        &ctx,
        &job.object_ref(&()),
        &job.name_any(),
        EventType::Warning,
        &kind,
        "Reconcile",
        Some(error.to_string()),
    );
    Requeue::after(ctx.retries.failed(&job.uid().unwrap_or_default()))
}
