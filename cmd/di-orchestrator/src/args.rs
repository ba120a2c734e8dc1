//! The command line: `serve` (the reconciler, webhooks, probes) and `replicas` (one job's replica
//! endpoint), with every flag and its default.

use std::net::SocketAddr;

use clap::{Args, Parser, Subcommand};

#[derive(Parser)]
#[command(name = "di-orchestrator", version, about = "Kubernetes orchestration of DI-engine jobs")]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Run the DIJob reconciler, with health probes and metrics.
    // A flag given twice takes its last value, as Go's flags (and so DI-orchestrator's) do: a
    // deployment's extra args can override what a chart set before them.
    #[command(args_override_self = true)]
    Serve(Box<ServeArgs>),
    /// Run the replica endpoint of one job (the sidecar next to its coordinator).
    #[command(args_override_self = true)]
    Replicas(ReplicasArgs),
}

#[derive(Args)]
pub(crate) struct ReplicasArgs {
    /// Namespace of the job.
    #[arg(long, env = "KUBERNETES_POD_NAMESPACE")]
    pub(crate) namespace: String,
    /// Name of the DIJob this endpoint serves, and no other.
    #[arg(long)]
    pub(crate) job: String,
    /// UID of that DIJob: a job submitted again under its name is another, never changed here.
    #[arg(long)]
    pub(crate) job_uid: String,
    /// Port of the read-only listener on the pod's network.
    #[arg(long, default_value_t = di_api::contract::REPLICAS_PORT as u16)]
    pub(crate) port: u16,
    /// Address of the read-only listener; by default every address of the pod, IPv6 and IPv4
    /// (IPv4 alone where the pod has no IPv6).
    #[arg(long)]
    pub(crate) bind_address: Option<std::net::IpAddr>,
    /// Address of the listener that also takes writes: a loopback address only the coordinator's
    /// own containers reach (their KUBERNETES_SERVER_URL).
    #[arg(long, default_value_t = di_api::contract::coordinator_endpoint())]
    pub(crate) coordinator_address: SocketAddr,
    /// How long an answer waits for the reconciler to carry a change out, in seconds.
    #[arg(long, default_value_t = 30)]
    pub(crate) wait_seconds: u64,
    /// The UID of the pod this endpoint runs in: it writes once the job's status names that pod
    /// as the job's coordinator.
    #[arg(long, env = "KUBERNETES_POD_UID")]
    pub(crate) pod_uid: String,
}

#[derive(Args)]
pub(crate) struct ServeArgs {
    /// Address of /healthz, /readyz and /metrics.
    #[arg(long, env = "DI_PROBE_ADDR", default_value = "0.0.0.0:8080")]
    pub(crate) probe_addr: SocketAddr,
    /// Image of the replica endpoint sidecar added to every coordinator (this binary's image).
    #[arg(long, env = "DI_REPLICAS_IMAGE", default_value = di_api::contract::IMAGE)]
    pub(crate) replicas_image: String,
    /// GPUs one DDP learner pod may hold; larger learners are split across pods.
    #[arg(long, default_value_t = 8)]
    pub(crate) max_gpus_per_pod: i32,
    /// AggregatorConfig (namespace/name) for jobs that name none.
    #[arg(long, default_value = "di-system/aggregator-config")]
    pub(crate) default_aggregator_config: String,
    /// The cluster's DNS domain, in the FQDNs a task job's pods find each other by (`DI_NODES`).
    #[arg(long, env = "DI_CLUSTER_DOMAIN", default_value = di_api::tasks::DEFAULT_CLUSTER_DOMAIN)]
    pub(crate) cluster_domain: String,
    /// Who replica endpoints are to the API server: `auto` takes the admission policy where the
    /// API server has it (Kubernetes 1.30+; no RBAC write per job) and per-job RBAC elsewhere;
    /// `policy` refuses to start without it; `per-job` always makes a job's own RBAC.
    #[arg(long, value_enum, env = "DI_REPLICA_IDENTITY", default_value = "auto")]
    pub(crate) replica_identity: ReplicaIdentity,
    /// The gang scheduler jobs' gangs are made for (see docs/guide/gangs.md): `auto`
    /// uses Kubernetes' own PodGroups where the API server serves them (1.37 with the
    /// GenericWorkload feature gate) and otherwise makes no gangs, saying so once; `native`,
    /// `coscheduling` (scheduler-plugins) and `volcano` refuse to start without their PodGroup
    /// API; `none` makes no gangs.
    #[arg(long, value_enum, env = "DI_GANG_SCHEDULER", default_value = "auto")]
    pub(crate) gang_scheduler: GangScheduler,
    /// The scheduler that places gang pods under `coscheduling` or `volcano` (their pods'
    /// `schedulerName`). Default: `scheduler-plugins-scheduler`, or `volcano`.
    #[arg(long)]
    pub(crate) gang_scheduler_name: Option<String>,
    /// Queues for jobs labelled `kueue.x-k8s.io/queue-name`: `auto` uses Kueue where the API
    /// server serves its Workloads (asked at start-up; where it does not, asked again every
    /// --queues-recheck-seconds, and the orchestrator exits to be started again with Kueue's
    /// queues once it does) and otherwise holds such jobs, saying why; `kueue` refuses to start
    /// without Kueue; `none` holds them without asking.
    #[arg(long, value_enum, env = "DI_QUEUES", default_value = "auto")]
    pub(crate) queues: Queues,
    /// With --queues=auto and no Kueue at start-up, how often to ask whether it has been
    /// installed since, in seconds.
    #[arg(long, default_value_t = 30)]
    pub(crate) queues_recheck_seconds: u64,
    /// First delay before a failed replica is replaced, in seconds; it doubles each time.
    #[arg(long, default_value_t = 10.0)]
    pub(crate) restart_backoff_seconds: f64,
    /// Least time between two progress writes of a job's status (pod counts, and its way up), in
    /// seconds, also counted from the pass that created its pods; failures, conditions, the end
    /// and a job running with every replica ready are written at once.
    #[arg(long, default_value_t = 1.0)]
    pub(crate) status_period_seconds: f64,
    /// Most status writes per second, all jobs together, of progress (pod counts, and a job's way
    /// up: Created, Pending, Starting), and none while pods or Services are being created (at
    /// most 3 s); the rest wait their turn. Running, failures, conditions and the end never wait.
    #[arg(long, default_value_t = 5.0)]
    pub(crate) status_writes_per_second: f64,
    /// Most events sent per second; the rest queue behind (events never hold up a pass). Normal
    /// events also wait while pods or Services are being created (at most 3 s from their job's
    /// start; past that, while they still are, a fifth of this a second after a burst of a
    /// second's worth); warnings do not.
    #[arg(long, default_value_t = 5.0)]
    pub(crate) events_per_second: f64,
    /// Jobs reconciled at once. A pass creating a job's objects holds its slot while its creates
    /// wait for the shared budget, so this many jobs' creates queue for it at once.
    #[arg(long, default_value_t = 100)]
    pub(crate) concurrency: u16,
    /// Creates of pods and Services one job's pass sends at once (see docs/PERFORMANCE.md).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..))]
    pub(crate) creates_per_job: u16,
    /// Creates in flight at once, all jobs together: what a hundred jobs starting at once may ask
    /// of the API server. Over HTTP/1.1 each holds a connection of its own.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u16).range(1..))]
    pub(crate) creates_in_flight: u16,
    /// Speak HTTP/2 to the API server where it offers it: every request and watch a stream of one
    /// connection, instead of a connection for each request in flight. Measured on 2 cores,
    /// kube-apiserver spent more CPU serving the same jobs over HTTP/2, so HTTP/1.1 is the default;
    /// HTTP/2 saves the orchestrator's memory where many more creates are in flight.
    #[arg(long)]
    pub(crate) api_http2: bool,
    /// Threads that run the reconciler, the webhooks and the probes. One (the default) runs them
    /// all on one thread: measured on 2 cores, a second worker cost up to two fifths more CPU per
    /// job in waking and parking threads, and starting jobs waits on the API server, not on this
    /// process. Raise it where the orchestrator's CPU is the limit (see docs/PERFORMANCE.md).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub(crate) worker_threads: u16,
    /// Reconcile only the DIJobs of this namespace (default: every namespace).
    #[arg(long, env = "DI_WATCH_NAMESPACE")]
    pub(crate) namespace: Option<String>,
    /// Hold a Lease before reconciling, so only one replica acts.
    #[arg(long)]
    pub(crate) leader_elect: bool,
    /// Namespace of the Lease.
    #[arg(long, env = "KUBERNETES_POD_NAMESPACE", default_value = "di-system")]
    pub(crate) lease_namespace: String,
    /// Name of the Lease.
    #[arg(long, default_value = "di-orchestrator")]
    pub(crate) lease_name: String,
    /// Seconds the Lease stays the leader's after its last renewal: a standby takes over after
    /// this long when the leader dies without releasing it.
    #[arg(long, default_value_t = 15)]
    pub(crate) lease_duration_seconds: u64,
    /// Seconds the leader keeps trying to renew before it stops reconciling and exits; shorter
    /// than --lease-duration-seconds, so it has stopped before a standby may take over.
    #[arg(long, default_value_t = 10)]
    pub(crate) renew_deadline_seconds: u64,
    /// Seconds between renewals, and the timeout of each request for the Lease (which every
    /// replica reads twice as often). Shorter than --renew-deadline-seconds.
    #[arg(long, default_value_t = 2)]
    pub(crate) retry_period_seconds: u64,
    #[command(flatten)]
    pub(crate) webhook: WebhookArgs,
}

#[derive(Args)]
pub(crate) struct WebhookArgs {
    /// Serve the admission webhooks (HTTPS) on this address; unset serves none.
    #[arg(long, env = "DI_WEBHOOK_ADDR")]
    pub(crate) webhook_addr: Option<SocketAddr>,
    /// Serving certificate (PEM) mounted from a Secret, reloaded when it changes. Without it the
    /// certificates are self-managed.
    #[arg(long, requires = "tls_key_file")]
    pub(crate) tls_cert_file: Option<std::path::PathBuf>,
    /// Private key (PEM) of --tls-cert-file.
    #[arg(long, requires = "tls_cert_file")]
    pub(crate) tls_key_file: Option<std::path::PathBuf>,
    /// Self-managed: the Secret that keeps the CA and the serving certificate (the install's
    /// Role lets the orchestrator read and renew only this name: change both together).
    #[arg(long, default_value = "di-orchestrator-webhook-certs")]
    pub(crate) webhook_secret: String,
    /// Self-managed: namespace of that Secret.
    #[arg(long, env = "KUBERNETES_POD_NAMESPACE", default_value = "di-system")]
    pub(crate) webhook_secret_namespace: String,
    /// Self-managed: names the serving certificate is valid for, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "di-orchestrator-webhook.di-system.svc,di-orchestrator-webhook.di-system.svc.cluster.local"
    )]
    pub(crate) webhook_hosts: Vec<String>,
    /// Self-managed: the Mutating- and ValidatingWebhookConfiguration that get the CA bundle.
    #[arg(long, default_value = "di-orchestrator")]
    pub(crate) webhook_configuration: String,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub(crate) enum ReplicaIdentity {
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Queues {
    Auto,
    Kueue,
    None,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub(crate) enum GangScheduler {
    Auto,
    Native,
    Coscheduling,
    Volcano,
    None,
}

impl GangScheduler {
    pub(crate) fn choice(self, scheduler_name: Option<String>) -> di_controller::podgroups::Choice {
        use di_controller::desired::gang::Backend;
        use di_controller::podgroups::Choice;
        match self {
            GangScheduler::Auto => Choice::Auto,
            GangScheduler::Native => Choice::Exactly(Backend::Native),
            GangScheduler::Coscheduling => Choice::Exactly(Backend::Coscheduling {
                scheduler: scheduler_name.unwrap_or_else(|| "scheduler-plugins-scheduler".into()),
            }),
            GangScheduler::Volcano => {
                Choice::Exactly(Backend::Volcano { scheduler: scheduler_name.unwrap_or_else(|| "volcano".into()) })
            }
            GangScheduler::None => Choice::Exactly(Backend::None),
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::{Cli, Command};

    #[test]
    fn a_flag_given_twice_takes_its_last_value() {
        let cli = Cli::try_parse_from(["di-orchestrator", "serve", "--creates-per-job=1", "--creates-per-job=64"])
            .expect("parses");
        let Command::Serve(args) = cli.command else { panic!("serve") };
        assert_eq!(args.creates_per_job, 64);
        assert!(Cli::try_parse_from(["di-orchestrator", "serve", "--creates-per-job=0"]).is_err(), "still checked");
    }
}
