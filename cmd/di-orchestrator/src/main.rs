//! The in-cluster binary. Each subcommand wires the pkg/ crates together; no logic lives here.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use clap::{Args, Parser, Subcommand};
use di_controller::desired::Settings;
use di_controller::leader::{Elector, LeaderConfig};
use di_controller::metrics::Metrics;
use di_controller::reconciler::{self, Options};
use di_controller::timing::timed_client;
use tracing::info;

mod stop;
use stop::{Stopped, run_to_end, until_stopped};

#[derive(Parser)]
#[command(name = "di-orchestrator", version, about = "Kubernetes orchestration of DI-engine jobs")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the DIJob reconciler, with health probes and metrics.
    Serve(Box<ServeArgs>),
    /// Run the replica endpoint of one job (the sidecar next to its coordinator).
    Replicas(ReplicasArgs),
}

#[derive(Args)]
struct ReplicasArgs {
    /// Namespace of the job.
    #[arg(long, env = "KUBERNETES_POD_NAMESPACE")]
    namespace: String,
    /// Name of the DIJob this endpoint serves, and no other.
    #[arg(long)]
    job: String,
    /// Port to listen on (all addresses of the pod).
    #[arg(long, default_value_t = di_api::contract::REPLICAS_PORT as u16)]
    port: u16,
    /// Address to bind.
    #[arg(long, default_value = "0.0.0.0")]
    bind_address: std::net::IpAddr,
    /// The pod's own IPs, comma-separated: writes are accepted from them and from loopback.
    #[arg(long, env = "KUBERNETES_POD_IP", value_delimiter = ',')]
    pod_ip: Vec<std::net::IpAddr>,
    /// How long an answer waits for the reconciler to carry a change out, in seconds.
    #[arg(long, default_value_t = 30)]
    wait_seconds: u64,
    /// The UID of the pod this endpoint runs in: it writes once the job's status names that pod
    /// as the job's coordinator.
    #[arg(long, env = "KUBERNETES_POD_UID")]
    pod_uid: String,
}

#[derive(Args)]
struct ServeArgs {
    /// Address of /healthz, /readyz and /metrics.
    #[arg(long, env = "DI_PROBE_ADDR", default_value = "0.0.0.0:8080")]
    probe_addr: SocketAddr,
    /// Image of the replica endpoint sidecar added to every coordinator (this binary's image).
    #[arg(long, env = "DI_REPLICAS_IMAGE", default_value = di_api::contract::IMAGE)]
    replicas_image: String,
    /// GPUs one DDP learner pod may hold; larger learners are split across pods.
    #[arg(long, default_value_t = 8)]
    max_gpus_per_pod: i32,
    /// AggregatorConfig (namespace/name) for jobs that name none.
    #[arg(long, default_value = "di-system/aggregator-config")]
    default_aggregator_config: String,
    /// The cluster's DNS domain, in the FQDNs a task job's pods find each other by (`DI_NODES`).
    #[arg(long, env = "DI_CLUSTER_DOMAIN", default_value = di_api::tasks::DEFAULT_CLUSTER_DOMAIN)]
    cluster_domain: String,
    /// Who replica endpoints are to the API server: `auto` takes the admission policy where the
    /// API server has it (Kubernetes 1.30+; no RBAC write per job) and per-job RBAC elsewhere;
    /// `policy` refuses to start without it; `per-job` always makes a job's own RBAC.
    #[arg(long, value_enum, env = "DI_REPLICA_IDENTITY", default_value = "auto")]
    replica_identity: ReplicaIdentity,
    /// First delay before a failed replica is replaced, in seconds; it doubles each time.
    #[arg(long, default_value_t = 10.0)]
    restart_backoff_seconds: f64,
    /// Least time between two progress writes of a job's status (pod counts, and its way up), in
    /// seconds, also counted from the pass that created its pods; failures, conditions, the end
    /// and a job running with every replica ready are written at once.
    #[arg(long, default_value_t = 1.0)]
    status_period_seconds: f64,
    /// Most status writes per second, all jobs together, of progress (pod counts, and a job's way
    /// up: Created, Pending, Starting), and none while pods or Services are being created (at
    /// most 3 s); the rest wait their turn. Running, failures, conditions and the end never wait.
    #[arg(long, default_value_t = 5.0)]
    status_writes_per_second: f64,
    /// Most events sent per second; the rest queue behind (events never hold up a pass). Normal
    /// events also wait while pods or Services are being created (at most 3 s); warnings do not.
    #[arg(long, default_value_t = 5.0)]
    events_per_second: f64,
    /// Jobs reconciled at once.
    #[arg(long, default_value_t = 16)]
    concurrency: u16,
    /// Creates of pods and Services one job's pass sends at once (see the README's Performance).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..))]
    creates_per_job: u16,
    /// Creates in flight at once, all jobs together: what a hundred jobs starting at once may ask
    /// of the API server.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..))]
    creates_in_flight: u16,
    /// Threads that run the reconciler, the webhooks and the probes. One (the default) runs them
    /// all on one thread: measured on 2 cores, a second worker cost up to two fifths more CPU per
    /// job in waking and parking threads, and starting jobs waits on the API server, not on this
    /// process. Raise it where the orchestrator's CPU is the limit (see the README).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    worker_threads: u16,
    /// Reconcile only the DIJobs of this namespace (default: every namespace).
    #[arg(long, env = "DI_WATCH_NAMESPACE")]
    namespace: Option<String>,
    /// Hold a Lease before reconciling, so only one replica acts.
    #[arg(long)]
    leader_elect: bool,
    /// Namespace of the Lease.
    #[arg(long, env = "KUBERNETES_POD_NAMESPACE", default_value = "di-system")]
    lease_namespace: String,
    /// Name of the Lease.
    #[arg(long, default_value = "di-orchestrator")]
    lease_name: String,
    /// Seconds the Lease stays the leader's after its last renewal: a standby takes over after
    /// this long when the leader dies without releasing it.
    #[arg(long, default_value_t = 15)]
    lease_duration_seconds: u64,
    /// Seconds the leader keeps trying to renew before it stops reconciling and exits; shorter
    /// than --lease-duration-seconds, so it has stopped before a standby may take over.
    #[arg(long, default_value_t = 10)]
    renew_deadline_seconds: u64,
    /// Seconds between renewals, and the timeout of each request for the Lease (which every
    /// replica reads twice as often). Shorter than --renew-deadline-seconds.
    #[arg(long, default_value_t = 2)]
    retry_period_seconds: u64,
    #[command(flatten)]
    webhook: WebhookArgs,
}

#[derive(Args)]
struct WebhookArgs {
    /// Serve the admission webhooks (HTTPS) on this address; unset serves none.
    #[arg(long, env = "DI_WEBHOOK_ADDR")]
    webhook_addr: Option<SocketAddr>,
    /// Serving certificate (PEM) mounted from a Secret, reloaded when it changes. Without it the
    /// certificates are self-managed.
    #[arg(long, requires = "tls_key_file")]
    tls_cert_file: Option<std::path::PathBuf>,
    /// Private key (PEM) of --tls-cert-file.
    #[arg(long, requires = "tls_cert_file")]
    tls_key_file: Option<std::path::PathBuf>,
    /// Self-managed: the Secret that keeps the CA and the serving certificate.
    #[arg(long, default_value = "di-orchestrator-webhook-certs")]
    webhook_secret: String,
    /// Self-managed: namespace of that Secret.
    #[arg(long, env = "KUBERNETES_POD_NAMESPACE", default_value = "di-system")]
    webhook_secret_namespace: String,
    /// Self-managed: names the serving certificate is valid for, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "di-orchestrator-webhook.di-system.svc,di-orchestrator-webhook.di-system.svc.cluster.local"
    )]
    webhook_hosts: Vec<String>,
    /// Self-managed: the Mutating- and ValidatingWebhookConfiguration that get the CA bundle.
    #[arg(long, default_value = "di-orchestrator")]
    webhook_configuration: String,
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        // Colours only for a terminal: `kubectl logs` and log collectors show escape codes raw.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,kube=warn".into()),
        )
        .init();
    match Cli::parse().command {
        Command::Serve(args) => run_to_end(runtime(args.worker_threads)?, |stopped| serve(*args, stopped)),
        // One job's endpoint, next to every coordinator: one thread is plenty, and the least memory.
        Command::Replicas(args) => run_to_end(runtime(1)?, |stopped| replicas(args, stopped)),
    }
}

/// A tokio runtime of `threads` threads: one is tokio's current-thread runtime.
fn runtime(threads: u16) -> anyhow::Result<tokio::runtime::Runtime> {
    let mut builder = match threads {
        1 => tokio::runtime::Builder::new_current_thread(),
        n => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(usize::from(n));
            b
        }
    };
    builder.enable_all().build().context("starting the tokio runtime")
}

#[derive(Clone)]
struct Probes {
    metrics: Arc<Metrics>,
    ready: Arc<AtomicBool>,
}

async fn serve(args: ServeArgs, stopped: Stopped) -> anyhow::Result<()> {
    let election = args.leader_elect.then(|| leader_config(&args)).transpose()?;
    let metrics = Arc::new(Metrics::new());
    let kube_config = kube::Config::infer().await.context("finding the API server (kubeconfig or in-cluster)")?;
    let client = timed_client(kube_config.clone(), metrics.clone())?;
    let ready = Arc::new(AtomicBool::new(false));
    let probes = Probes { metrics: metrics.clone(), ready: ready.clone() };
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(|State(p): State<Probes>| async move { p.metrics.encode() }))
        .with_state(probes);
    let listener = tokio::net::TcpListener::bind(args.probe_addr).await.context("binding the probe address")?;
    info!(addr = %listener.local_addr()?, "serving probes and metrics");
    tokio::spawn(async move { axum::serve(listener, app).await });
    if let Some(addr) = args.webhook.webhook_addr {
        start_webhooks(&client, &args.webhook, addr, args.namespace.clone(), until_stopped(stopped.clone())).await?;
    }
    // Ready once the webhooks serve and the API server answers for DIJobs (reachable, CRD
    // installed), leader or not: a standby replica is healthy too. Asked where this replica
    // reconciles, so one namespace's orchestrator needs no cluster-wide read of jobs.
    let jobs = match &args.namespace {
        Some(namespace) => kube::Api::<di_api::DIJob>::namespaced(client.clone(), namespace),
        None => kube::Api::<di_api::DIJob>::all(client.clone()),
    };
    jobs.list_metadata(&kube::api::ListParams::default().limit(1)).await.map_err(|e| match e {
        kube::Error::Api(status) if status.code == 404 => anyhow::anyhow!(
            "the API server serves no DIJobs under {}: the CRDs are not installed, or they are an older \
             release's (DI-orchestrator 1.x's serve v2alpha1 alone). Apply manifests/crds/ (the README's \
             \"Upgrading from DI-orchestrator 0.2 / 1.x\" says how for each install path)",
            <di_api::DIJob as kube::Resource>::api_version(&())
        ),
        other => anyhow::Error::new(other).context("listing DIJobs"),
    })?;
    ready.store(true, Ordering::Relaxed);

    let identity = di_controller::identity::choose(&client, args.replica_identity.into()).await?;
    let owner_version = di_controller::owner::preferred_version(&client).await;
    let options = Options {
        settings: Settings {
            identity,
            replicas_image: args.replicas_image,
            max_gpus_per_pod: args.max_gpus_per_pod,
            default_aggregator_config: args.default_aggregator_config,
            cluster_domain: args.cluster_domain,
            owner_version,
        },
        restart_backoff: Duration::from_secs_f64(args.restart_backoff_seconds.max(0.0)),
        concurrency: args.concurrency,
        namespace: args.namespace,
        status_period: Duration::from_secs_f64(args.status_period_seconds.max(0.0)),
        status_writes_per_second: args.status_writes_per_second,
        events_per_second: args.events_per_second,
        creates_per_job: args.creates_per_job.into(),
        creates_in_flight: args.creates_in_flight.into(),
    };

    let run = reconciler::run(client.clone(), options, metrics.clone(), until_stopped(stopped.clone()));
    match election {
        None => run.await,
        Some(config) => {
            let lease_client = timed_client(config.client_config(kube_config), metrics)?;
            lead(lease_client, config, run, stopped).await?;
        }
    }
    info!("stopped");
    Ok(())
}

/// The Lease flags, checked before anything starts: a renew deadline that is not shorter than
/// the lease duration would let two replicas reconcile at once.
fn leader_config(args: &ServeArgs) -> anyhow::Result<LeaderConfig> {
    let config = LeaderConfig {
        namespace: args.lease_namespace.clone(),
        name: args.lease_name.clone(),
        identity: std::env::var("KUBERNETES_POD_NAME")
            .unwrap_or_else(|_| format!("{}-{}", hostname(), std::process::id())),
        lease_duration: Duration::from_secs(args.lease_duration_seconds),
        renew_deadline: Duration::from_secs(args.renew_deadline_seconds),
        retry_period: Duration::from_secs(args.retry_period_seconds),
    };
    config.validate().context(
        "invalid leader election flags: need --lease-duration-seconds > --renew-deadline-seconds > --retry-period-seconds >= 1",
    )?;
    Ok(config)
}

/// Runs the reconciler only while this replica holds the Lease. On shutdown the reconciler
/// stops first and the Lease is released after, so a standby takes over at once.
async fn lead(
    client: kube::Client,
    config: LeaderConfig,
    run: impl std::future::Future<Output = ()>,
    stopped: Stopped,
) -> anyhow::Result<()> {
    let elector = Elector::start(client, config)?;
    let leadership = tokio::select! {
        leadership = elector.acquire() => leadership,
        () = until_stopped(stopped) => {
            // The Lease may have been taken just as the wait was cut short.
            elector.release().await;
            return Ok(());
        }
    };
    match leadership.lead(run).await {
        Ok(()) => {
            leadership.release().await;
            Ok(())
        }
        // Another replica may act now, or soon: exit, and restart as a standby.
        Err(lost) => anyhow::bail!("lost leadership: {lost}"),
    }
}

async fn replicas(args: ReplicasArgs, stopped: Stopped) -> anyhow::Result<()> {
    use di_replicas::scale::Scope;
    use di_replicas::server::{Endpoint, router};
    let client = kube::Client::try_default().await.context("connecting to the API server")?;
    let scope = Scope { namespace: args.namespace, job: args.job };
    let endpoint =
        Endpoint::new(client, scope.clone(), args.pod_ip, Duration::from_secs(args.wait_seconds), args.pod_uid);
    let listener = tokio::net::TcpListener::bind(SocketAddr::new(args.bind_address, args.port))
        .await
        .context("binding the replica endpoint")?;
    info!(addr = %listener.local_addr()?, job = %scope.job, namespace = %scope.namespace, "serving the replica endpoint");
    axum::serve(listener, router(endpoint).into_make_service_with_connect_info::<SocketAddr>())
        .with_graceful_shutdown(until_stopped(stopped))
        .await?;
    Ok(())
}

/// Serves the admission webhooks over TLS, with mounted or self-managed certificates.
async fn start_webhooks(
    client: &kube::Client,
    args: &WebhookArgs,
    addr: SocketAddr,
    namespace: Option<String>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    use di_webhook::{certs, server, tls};
    let resolver = match (&args.tls_cert_file, &args.tls_key_file) {
        (Some(cert), Some(key)) => {
            let resolver = tls::CertResolver::new(tls::load_files(cert, key)?);
            tokio::spawn(tls::watch_files(cert.clone(), key.clone(), resolver.clone()));
            resolver
        }
        _ => {
            let config = certs::SelfManaged {
                secret_namespace: args.webhook_secret_namespace.clone(),
                secret_name: args.webhook_secret.clone(),
                hosts: args.webhook_hosts.clone(),
                webhook_configuration: args.webhook_configuration.clone(),
            };
            let (resolver, refresh) =
                certs::start(client.clone(), config).await.context("self-managed webhook certificates")?;
            tokio::spawn(refresh);
            resolver
        }
    };
    let listener = tokio::net::TcpListener::bind(addr).await.context("binding the webhook address")?;
    info!(addr = %listener.local_addr()?, "serving admission webhooks over TLS");
    // The names every job claims, so a new job whose names collide with another's is refused.
    let claims = di_webhook::claims::Claims::default();
    tokio::spawn(claims.clone().watch(client.clone(), namespace));
    let router = server::router_checking(&di_webhook::limits::Limits::default(), Some(claims));
    tokio::spawn(tls::serve(listener, router, resolver, shutdown));
    Ok(())
}

async fn readyz(State(p): State<Probes>) -> (StatusCode, &'static str) {
    if p.ready.load(Ordering::Relaxed) { (StatusCode::OK, "ok") } else { (StatusCode::SERVICE_UNAVAILABLE, "starting") }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "di-orchestrator".into())
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum ReplicaIdentity {
    Auto,
    Policy,
    PerJob,
}

impl From<ReplicaIdentity> for di_controller::identity::Choice {
    fn from(choice: ReplicaIdentity) -> Self {
        match choice {
            ReplicaIdentity::Auto => Self::Auto,
            ReplicaIdentity::Policy => Self::Policy,
            ReplicaIdentity::PerJob => Self::PerJob,
        }
    }
}
