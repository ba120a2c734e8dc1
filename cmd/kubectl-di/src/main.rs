//! `kubectl di`: the plugin people type. Parsing and dispatch here, one module per command;
//! arguments and output only: the rules come from pkg/api (defaulting, validation) and
//! `di_client` (scaling, restarts), the same code the cluster runs.

mod cli;
mod create;
mod ctx;
mod delete;
mod describe;
mod follow;
mod get;
mod gone;
mod install;
mod local;
mod logs;
mod manifest;
mod output;
mod replicas;
mod suspend;
mod version;
mod workers;

use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use cli::{Cli, Command, DryRun};
use ctx::Ctx;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Replicas { command: cli::ReplicasCommand::Add(args) | cli::ReplicasCommand::Delete(args) } =
        &cli.command
        && args.local
    {
        let up = matches!(&cli.command, Command::Replicas { command: cli::ReplicasCommand::Add(_) });
        let namespace = cli.global.namespace.clone().unwrap_or_else(|| "default".into());
        return match local::scale(args, &namespace, up).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    if let Command::Run(args) = &cli.command {
        // The job's outcome is the exit code.
        return match local::run(args).await {
            Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    // Commands that need no cluster, or do without one.
    match &cli.command {
        Command::Completion { shell } => {
            clap_complete::generate(*shell, &mut Cli::command(), "kubectl-di", &mut std::io::stdout());
            return Ok(());
        }
        Command::Create(args) if args.dry_run == DryRun::Client => return create::create(None, args).await,
        Command::Version => {
            version::version(&cli.global).await;
            return Ok(());
        }
        _ => {}
    }
    let ctx = Ctx::connect(&cli.global).await?;
    match cli.command {
        Command::Create(args) => create::create(Some(&ctx), &args).await,
        Command::Get(args) => get::get(&ctx, &args).await,
        Command::Describe { name } => describe::describe(&ctx, &name).await,
        Command::Delete { name, wait, timeout } => delete::delete(&ctx, &name, wait, timeout).await,
        Command::Logs(args) => logs::logs(&ctx, &args).await,
        Command::Replicas { command } => replicas::replicas(&ctx, command).await,
        Command::Suspend { name } => suspend::suspend(&ctx, &name, true).await,
        Command::Resume { name } => suspend::suspend(&ctx, &name, false).await,
        Command::Install(args) => install::install(&ctx, &args).await,
        Command::Uninstall { keep_crds } => install::uninstall(&ctx, keep_crds).await,
        Command::Version | Command::Completion { .. } | Command::Run(_) => unreachable!("handled above"),
    }
}
