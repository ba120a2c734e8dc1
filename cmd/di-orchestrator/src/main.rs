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
use clap::Parser;
use di_controller::client::Http;
use di_controller::desired::Settings;
use di_controller::leader::{Elector, LeaderConfig};
use di_controller::metrics::Metrics;
use di_controller::reconciler::{self, Options};
use di_controller::timing::Timing;
use tracing::{info, warn};

/// jemalloc rather than glibc's malloc (for the replica endpoint too, the same binary): after a
/// burst of creates (a hundred jobs starting, each create holding a connection and its buffers),
/// glibc kept the freed heap, so the orchestrator stayed at its peak (83 MiB with 1,000 running
/// jobs at 256 creates in flight, 57 MiB at 64); jemalloc gives freed pages back within about a
/// second (`.cargo/config.toml`), for about the same idle memory (`docs/PERFORMANCE.md`).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

mod args;
mod stop;
use args::{Cli, Command, Queues, ReplicasArgs, ServeArgs, WebhookArgs};
use stop::{Stopped, run_to_end, until_stopped};

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
    let http = if args.api_http2 { Http::V2 } else { Http::V1 };
    let client = di_controller::client::client(&kube_config, http, Some(Timing::new(metrics.clone())))?;
    di_controller::support::require(&client).await?;
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
    // Asked before the webhooks start: with Kueue, the mutating one reads its queues.
    let kueue = match args.queues {
        Queues::None => false,
        Queues::Auto => di_controller::workloads::served(&client).await?,
        Queues::Kueue if di_controller::workloads::served(&client).await? => true,
        Queues::Kueue => anyhow::bail!(
            "--queues=kueue, but the API server serves no Kueue Workloads (kueue.x-k8s.io/v1beta2): install \
             Kueue, or run with --queues=auto or none"
        ),
    };
    // The webhooks stop on the signal, or when this process ends without one (leadership lost,
    // Kueue installed since its start): `finish` dropped, wherever `serve` returns.
    let (finish, finished) = tokio::sync::oneshot::channel::<()>();
    let webhooks_stop = {
        let stopped = stopped.clone();
        async move {
            tokio::select! {
                () = until_stopped(stopped) => {}
                _ = finished => {}
            }
        }
    };
    let webhooks = match args.webhook.webhook_addr {
        Some(addr) => {
            let scope = (args.namespace.clone(), kueue);
            Some(start_webhooks(&client, &args.webhook, addr, scope, webhooks_stop).await?)
        }
        None => None,
    };
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
             release's (DI-orchestrator 1.x's serve v2alpha1 alone). Apply manifests/crds/ \
             (docs/guide/upgrading.md says how for each install path)",
            <di_api::DIJob as kube::Resource>::api_version(&())
        ),
        other => anyhow::Error::new(other).context("listing DIJobs"),
    })?;
    ready.store(true, Ordering::Relaxed);

    let identity = di_controller::identity::choose(&client, args.replica_identity.into()).await?;
    let owner_version = di_controller::owner::preferred_version(&client).await;
    let gang = di_controller::podgroups::choose(&client, args.gang_scheduler.choice(args.gang_scheduler_name)).await?;
    let options = Options {
        settings: Settings {
            identity,
            replicas_image: args.replicas_image,
            max_gpus_per_pod: args.max_gpus_per_pod,
            default_aggregator_config: args.default_aggregator_config,
            cluster_domain: args.cluster_domain,
            owner_version,
            gang,
        },
        restart_backoff: Duration::from_secs_f64(args.restart_backoff_seconds.max(0.0)),
        concurrency: args.concurrency,
        namespace: args.namespace,
        status_period: Duration::from_secs_f64(args.status_period_seconds.max(0.0)),
        status_writes_per_second: args.status_writes_per_second,
        events_per_second: args.events_per_second,
        creates_per_job: args.creates_per_job.into(),
        creates_in_flight: args.creates_in_flight.into(),
        kueue,
    };

    // Kueue installed after the start: its Workloads are watched from the start or not at all,
    // so the orchestrator stops and exits, and its Deployment starts it again to watch them.
    let kueue_later = matches!(args.queues, Queues::Auto) && !options.kueue;
    let recheck = Duration::from_secs(args.queues_recheck_seconds.max(1));
    let installed = Arc::new(AtomicBool::new(false));
    let reconcile = reconciler::run(client.clone(), options, metrics.clone(), until_stopped(stopped.clone()));
    let run = {
        let (client, installed) = (client.clone(), installed.clone());
        async move {
            // A standby takes the lease with what it saw at its start: Kueue may be here since.
            if kueue_later && di_controller::workloads::served_now(&client).await {
                installed.store(true, Ordering::Relaxed);
                return;
            }
            tokio::select! {
                () = reconcile => {}
                () = di_controller::workloads::until_served(&client, recheck), if kueue_later => {
                    installed.store(true, Ordering::Relaxed);
                }
            }
        }
    };
    let led = match election {
        None => {
            let _leading = metrics.leading();
            run.await;
            Ok(())
        }
        Some(config) => {
            // On connections apart from the reconciler's (a renewal never queues behind its
            // traffic), with the election's timeouts.
            let lease_client = di_controller::client::client(
                &config.client_config(kube_config),
                Http::V1,
                Some(Timing::new(metrics.clone())),
            )?;
            lead(lease_client, config, run, stopped, &metrics).await
        }
    };
    // The webhooks answer a while after the signal, until the Service forgets this replica; also
    // when it exits unasked (leadership lost, Kueue installed), as it restarts in place.
    drop(finish);
    if let Some(webhooks) = webhooks {
        ready.store(false, Ordering::Relaxed);
        let _ = webhooks.await;
    }
    led?;
    if installed.load(Ordering::Relaxed) {
        anyhow::bail!(
            "Kueue's Workloads are served now, and were not when the orchestrator started: exiting, to be started \
             again with jobs' queues in Kueue"
        );
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
    metrics: &Metrics,
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
    // The gauge says leader exactly while the reconciler may run: not while the Lease is let go.
    let led = {
        let _leading = metrics.leading();
        leadership.lead(run).await
    };
    match led {
        Ok(()) => {
            leadership.release().await;
            Ok(())
        }
        // Another replica may act now, or soon: exit, and restart as a standby.
        Err(lost) => anyhow::bail!("lost leadership: {lost}"),
    }
}

async fn replicas(args: ReplicasArgs, stopped: Stopped) -> anyhow::Result<()> {
    use di_replicas::access::Access;
    use di_replicas::scale::Scope;
    use di_replicas::server::{Endpoint, router};
    let config = kube::Config::infer().await.context("finding the API server (in-cluster or kubeconfig)")?;
    // Its requests go out at once (TCP_NODELAY): a scale request writes the DIJob and reads pods
    // on kept connections, where Nagle's algorithm could hold each for a delayed ACK.
    let client = di_controller::client::client(&config, Http::V1, None).context("connecting to the API server")?;
    let scope = Scope { namespace: args.namespace, job: args.job, uid: args.job_uid };
    let endpoint = Endpoint::new(client, scope.clone(), Duration::from_secs(args.wait_seconds), args.pod_uid);
    let network = bind_network(args.bind_address, args.port).await?;
    let own = tokio::net::TcpListener::bind(args.coordinator_address).await.with_context(|| {
        format!("binding the coordinator's address of the replica endpoint, {}", args.coordinator_address)
    })?;
    info!(
        network = %network.local_addr()?, coordinator = %own.local_addr()?, job = %scope.job, namespace = %scope.namespace,
        "serving the replica endpoint: reads on the pod's network, writes from the coordinator's containers"
    );
    let serve = |listener, access| {
        let stopped = stopped.clone();
        axum::serve(listener, router(endpoint.clone(), access))
            .with_graceful_shutdown(until_stopped(stopped))
            .into_future()
    };
    tokio::try_join!(serve(network, Access::Network), serve(own, Access::Coordinator))?;
    Ok(())
}

/// The read-only listener: `address`, or every address of the pod, IPv6 and IPv4 on one socket
/// (Linux accepts IPv4 on `[::]` as mapped addresses), or IPv4 alone where the pod has no IPv6.
async fn bind_network(address: Option<std::net::IpAddr>, port: u16) -> anyhow::Result<tokio::net::TcpListener> {
    use std::net::{Ipv4Addr, Ipv6Addr};
    let bind = |ip: std::net::IpAddr| tokio::net::TcpListener::bind(SocketAddr::new(ip, port));
    let listener = match address {
        Some(ip) => bind(ip).await,
        None => match bind(Ipv6Addr::UNSPECIFIED.into()).await {
            Ok(listener) => Ok(listener),
            Err(e) => {
                info!(error = %e, "no IPv6 in this pod: the replica endpoint listens on IPv4");
                bind(Ipv4Addr::UNSPECIFIED.into()).await
            }
        },
    };
    listener.context("binding the replica endpoint on the pod's network")
}

/// Serves the admission webhooks over TLS, with mounted or self-managed certificates.
async fn start_webhooks(
    client: &kube::Client,
    args: &WebhookArgs,
    addr: SocketAddr,
    (namespace, kueue): (Option<String>, bool),
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    use di_webhook::{certs, server, tls};
    // Kueue's queues, so a job in one that goes through MultiKueue is given to it; listed before
    // the webhooks serve (and their CA is written), so no job meets an empty cache at start.
    let queues = match kueue {
        true => {
            let (queues, watches) = di_webhook::queues::Queues::watch(client, namespace.as_deref());
            tokio::spawn(watches);
            if tokio::time::timeout(Duration::from_secs(10), queues.listed()).await.is_err() {
                warn!("Kueue's queues are not listed after 10 s: jobs are given to MultiKueue once they are");
            }
            Some(queues)
        }
        false => None,
    };
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
    let router = server::router_checking(&di_webhook::limits::Limits::default(), Some(claims), queues);
    Ok(tokio::spawn(tls::serve(listener, router, resolver, shutdown)))
}

async fn readyz(State(p): State<Probes>) -> (StatusCode, &'static str) {
    if p.ready.load(Ordering::Relaxed) { (StatusCode::OK, "ok") } else { (StatusCode::SERVICE_UNAVAILABLE, "starting") }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "di-orchestrator".into())
}
