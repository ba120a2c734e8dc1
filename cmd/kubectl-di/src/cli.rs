//! The command line, as clap parses it. kubectl's habits: `--kubeconfig`, `--context`,
//! `-n/--namespace` (default from the context), `-A`, `-o`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Parser, Debug)]
#[command(
    name = "kubectl-di",
    bin_name = "kubectl di",
    version,
    about = "Create, inspect, scale and delete DI-engine jobs (DIJobs)"
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Args, Debug, Clone)]
pub struct Global {
    /// Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// Namespace (default: the context's).
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create DIJobs from a file (or stdin), or one from flags.
    Create(CreateArgs),
    /// List DIJobs, or show one.
    Get(GetArgs),
    /// Show a DIJob in detail: spec, status, conditions, replicas, events.
    Describe { name: String },
    /// Delete a DIJob and everything it owns.
    Delete {
        name: String,
        /// Wait until it is gone, and every pod it owned too.
        #[arg(long)]
        wait: bool,
        /// Longest wait with --wait, in seconds.
        #[arg(long, default_value_t = 300)]
        timeout: u64,
    },
    /// Print a replica's logs (the coordinator's by default).
    Logs(LogsArgs),
    /// Scale, list and restart a job's replicas.
    Replicas {
        #[command(subcommand)]
        command: ReplicasCommand,
    },
    /// Pause a job: its pods are deleted, the job is kept.
    Suspend { name: String },
    /// Resume a suspended job: its pods are created again.
    Resume { name: String },
    /// Install the CRDs and the orchestrator into the cluster.
    Install(InstallArgs),
    /// Remove the orchestrator (and, unless --keep-crds, the CRDs and every DIJob).
    Uninstall {
        /// Keep the CRDs, and so the DIJobs.
        #[arg(long)]
        keep_crds: bool,
    },
    /// Run a job's manifest as local processes, with the environment its pods would get.
    Run(RunArgs),
    /// Print the plugin's version, and the orchestrator's when installed.
    Version,
    /// Print a shell completion script.
    Completion { shell: clap_complete::Shell },
}

#[derive(Args, Debug)]
pub struct CreateArgs {
    /// Name of a job to create from flags (instead of -f).
    #[arg(conflicts_with = "filename", required_unless_present = "filename")]
    pub name: Option<String>,
    /// File with DIJob (and AggregatorConfig) documents; `-` reads stdin.
    #[arg(short = 'f', long = "filename")]
    pub filename: Option<String>,
    /// Image of every role (with NAME).
    #[arg(long, conflicts_with = "filename")]
    pub image: Option<String>,
    /// Shell command every role runs (with NAME).
    #[arg(long, conflicts_with = "filename")]
    pub command: Option<String>,
    /// A task of a task job (with NAME), repeatable:
    /// `name=collector,type=collector,replicas=4,image=IMAGE,command=CMD` (all but name optional;
    /// --image and --command are the defaults; command comes last and takes the rest).
    #[arg(long = "task", value_name = "SPEC", conflicts_with_all = ["filename", "collectors", "learners", "gpus"])]
    pub tasks: Vec<String>,
    /// Collectors to start with (with NAME).
    #[arg(long, default_value_t = 0, conflicts_with = "filename")]
    pub collectors: i32,
    /// Learners to start with (with NAME).
    #[arg(long, default_value_t = 0, conflicts_with = "filename")]
    pub learners: i32,
    /// GPUs per learner (with NAME).
    #[arg(long, conflicts_with = "filename")]
    pub gpus: Option<i32>,
    /// Kueue LocalQueue every created job waits in (the label `kueue.x-k8s.io/queue-name`).
    #[arg(long)]
    pub queue: Option<String>,
    /// `client`: only check; `server`: check with the API server, store nothing.
    #[arg(long, value_enum, default_value_t = DryRun::None, num_args = 0..=1, default_missing_value = "client")]
    pub dry_run: DryRun,
    /// Wait until the job runs with every replica ready, showing progress.
    #[arg(long)]
    pub wait: bool,
    /// How long --wait waits, in seconds.
    #[arg(long, default_value_t = 300)]
    pub timeout: u64,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DryRun {
    None,
    Client,
    Server,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    Wide,
    Yaml,
    Json,
    Name,
}

#[derive(Args, Debug)]
pub struct GetArgs {
    pub name: Option<String>,
    /// Output format.
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<Output>,
    /// Every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
}

#[derive(Args, Debug)]
pub struct LogsArgs {
    pub name: String,
    /// coordinator, collector, learner, aggregator or ddp-learner.
    #[arg(long, default_value = "coordinator")]
    pub role: String,
    /// A task job's task, instead of a role.
    #[arg(long, conflicts_with = "role")]
    pub task: Option<String>,
    /// Index of the replica (not for the coordinator; default 0 for a task).
    #[arg(long)]
    pub replica: Option<u32>,
    /// Follow the log.
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// Container (default: the replica's main one).
    #[arg(short = 'c', long, default_value = "di-container")]
    pub container: String,
}

#[derive(Subcommand, Debug)]
pub enum ReplicasCommand {
    /// Add collectors and learners.
    Add(ScaleArgs),
    /// Remove collectors and learners (highest index first).
    Delete(ScaleArgs),
    /// List the job's replicas with their phase and URL.
    List { name: String },
    /// Replace the named pods with fresh ones.
    Restart {
        name: String,
        #[arg(required = true)]
        pods: Vec<String>,
        /// Return once the change is recorded.
        #[arg(long)]
        no_wait: bool,
    },
}

#[derive(Args, Debug)]
pub struct ScaleArgs {
    pub name: String,
    /// With --task: how many pods to add to (or remove from) the task.
    #[arg(requires = "task")]
    pub count: Option<i64>,
    /// A task job's task to scale. Every pod of the job is rebuilt, since each lists all its
    /// peers in DI_NODES.
    #[arg(long, requires = "count", conflicts_with_all = ["collectors", "learners", "gpus"])]
    pub task: Option<String>,
    #[arg(long, default_value_t = 0)]
    pub collectors: i64,
    #[arg(long, default_value_t = 0)]
    pub learners: i64,
    /// GPUs per learner (only while the job has no learners, if it changes).
    #[arg(long)]
    pub gpus: Option<String>,
    /// Return once the change is recorded, without waiting for the pods.
    #[arg(long)]
    pub no_wait: bool,
    /// How long to wait for the pods, in seconds.
    #[arg(long, default_value_t = 120)]
    pub timeout: u64,
    /// Scale the job `kubectl di run --local` runs on this machine, through its replica endpoint.
    #[arg(long, conflicts_with_all = ["task", "no_wait"])]
    pub local: bool,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Run on this machine, no cluster (the only mode).
    #[arg(long)]
    pub local: bool,
    /// The manifest with one DIJob; `-` reads stdin.
    #[arg(short = 'f', long = "filename")]
    pub filename: String,
    /// Print what would run (processes, addresses, environment) and exit.
    #[arg(long)]
    pub dry_run: bool,
    /// Each replica's output into DIR/<pod>.log instead of the terminal.
    #[arg(long, value_name = "DIR")]
    pub logs_dir: Option<std::path::PathBuf>,
    /// Where each replica gets its working directory (default .di-run/<job>).
    #[arg(long, value_name = "DIR")]
    pub run_dir: Option<std::path::PathBuf>,
    /// First port handed to role replicas (coordinator, collectors, learners).
    #[arg(long, default_value_t = 32000)]
    pub first_port: u16,
    /// Backoff before the first replacement of a failed process; it doubles after each.
    #[arg(long, default_value_t = 1.0)]
    pub restart_backoff_seconds: f64,
}

#[derive(Args, Debug)]
pub struct InstallArgs {
    /// Image of the orchestrator (and of its replica sidecars).
    #[arg(long, default_value = di_api::contract::IMAGE)]
    pub image: String,
    /// Return without waiting for the webhook to answer.
    #[arg(long)]
    pub no_wait: bool,
    /// How long to wait, in seconds.
    #[arg(long, default_value_t = 300)]
    pub timeout: u64,
}

#[cfg(test)]
mod parsing {
    use clap::{CommandFactory, Parser};

    use super::*;

    fn parse(line: &str) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(line.split_whitespace())
    }

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn kubectl_habits() {
        let cli = parse("kubectl-di -n rl --context kind get -A -o wide").unwrap();
        assert_eq!(cli.global.namespace.as_deref(), Some("rl"));
        assert_eq!(cli.global.context.as_deref(), Some("kind"));
        let Command::Get(get) = cli.command else { panic!() };
        assert!(get.all_namespaces);
        assert_eq!(get.output, Some(Output::Wide));
        // Global flags go anywhere.
        let cli = parse("kubectl-di get cartpole --namespace rl -o yaml").unwrap();
        assert_eq!(cli.global.namespace.as_deref(), Some("rl"));
        assert!(parse("kubectl-di get -o table").is_err());
    }

    #[test]
    fn create_forms() {
        let Command::Create(c) = parse("kubectl-di create -f job.yaml --dry-run=server --wait").unwrap().command else {
            panic!()
        };
        assert_eq!((c.filename.as_deref(), c.dry_run, c.wait), (Some("job.yaml"), DryRun::Server, true));
        let Command::Create(c) = parse("kubectl-di create -f - --dry-run").unwrap().command else { panic!() };
        assert_eq!(c.dry_run, DryRun::Client);
        let Command::Create(c) =
            parse("kubectl-di create demo --image ding --collectors 2 --learners 1 --gpus 2").unwrap().command
        else {
            panic!()
        };
        assert_eq!((c.name.as_deref(), c.collectors, c.learners, c.gpus), (Some("demo"), 2, 1, Some(2)));
        assert!(parse("kubectl-di create").is_err(), "a name or -f is required");
        assert!(parse("kubectl-di create demo -f job.yaml").is_err(), "not both");
        assert!(parse("kubectl-di create -f job.yaml --image ding").is_err(), "--image goes with a name");
    }

    #[test]
    fn replicas_commands() {
        let Command::Replicas { command: ReplicasCommand::Add(a) } =
            parse("kubectl-di replicas add job --collectors 3 --gpus 2 --no-wait").unwrap().command
        else {
            panic!()
        };
        assert_eq!(
            (a.name.as_str(), a.collectors, a.learners, a.gpus.as_deref(), a.no_wait),
            ("job", 3, 0, Some("2"), true)
        );
        assert!(parse("kubectl-di replicas restart job").is_err(), "restart names pods");
        let Command::Replicas { command: ReplicasCommand::Restart { pods, .. } } =
            parse("kubectl-di replicas restart job job-collector-0 job-learner-1").unwrap().command
        else {
            panic!()
        };
        assert_eq!(pods, vec!["job-collector-0", "job-learner-1"]);
    }
}
