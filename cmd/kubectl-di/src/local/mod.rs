//! `kubectl di run --local`: the very manifest you would submit, run as local processes with the
//! contract the orchestrator would give its pods (`plan`), supervised by the job's own rules
//! (`supervise`), with each replica's output prefixed by its name (`output`). No cluster needed.

mod client;
mod endpoint;
mod groups;
mod mounts;
mod output;
mod plan;
mod supervise;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use di_api::DIJob;
use di_api::defaults::{clean_pod_policy, default_dijob};
use nix::fcntl::{Flock, FlockArg};

use crate::cli::RunArgs;
use crate::manifest;

/// Runs the job of `args.filename` locally; the job's outcome is the exit code.
pub async fn run(args: &RunArgs) -> anyhow::Result<i32> {
    if !args.local {
        bail!("only --local runs are supported: to run a job on a cluster, use kubectl di create");
    }
    let bytes = if args.filename == "-" {
        let mut bytes = vec![];
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut bytes).context("reading the standard input")?;
        bytes
    } else {
        std::fs::read(&args.filename).with_context(|| format!("reading {}", args.filename))?
    };
    // Checked as the webhook would, like kubectl di create. A ConfigMap beside the job becomes
    // files for the processes that mount it; other kinds are for the cluster and are named, not
    // silently dropped.
    let docs = manifest::documents(&bytes)?;
    let (jobs, others): (Vec<_>, Vec<_>) = docs.into_iter().partition(|(_, d)| d["kind"] == "DIJob");
    let (config_maps, others): (Vec<_>, Vec<_>) = others.into_iter().partition(|(_, d)| d["kind"] == "ConfigMap");
    let config_maps = config_map_data(config_maps.iter().map(|(_, d)| d))?;
    for (_, other) in &others {
        eprintln!(
            "warning: {} {} is not created by a local run; a job that reads it will not find it",
            other["kind"].as_str().unwrap_or("object"),
            other["metadata"]["name"].as_str().unwrap_or("")
        );
    }
    manifest::check(&jobs)?;
    let [(_, doc)] = &jobs[..] else {
        bail!("a local run takes exactly one DIJob; {} has {}", args.filename, jobs.len());
    };
    let mut job: DIJob = serde_json::from_value(doc.clone())?;
    default_dijob(&mut job);
    let name = job.metadata.name.clone().ok_or_else(|| anyhow!("the DIJob has no metadata.name"))?;

    let run_dir = match &args.run_dir {
        Some(dir) => dir.clone(),
        None => PathBuf::from(".di-run").join(&name),
    };
    let ports = plan::Ports { first: args.first_port, in_use: listened_on };
    let plan = plan::plan(&job, &std::path::absolute(&run_dir)?, ports, &config_maps, &[])?;
    for warning in &plan.warnings {
        eprintln!("warning: {warning}");
    }
    if args.dry_run {
        print!("{}", describe(&plan));
        return Ok(0);
    }
    let _machine = machine_lock()?;
    let names: Vec<String> = plan.replicas.iter().map(|r| r.name.clone()).collect();
    let out = output::Output::new(&names, args.logs_dir.clone())?;
    std::fs::create_dir_all(&run_dir)?;
    std::fs::write(run_dir.join("runner.pid"), std::process::id().to_string())?;
    let backoff = Duration::from_secs_f64(args.restart_backoff_seconds.max(0.0));
    let (requests, supervisor) = tokio::sync::mpsc::unbounded_channel();
    if !job.spec.is_task_job() {
        // A 0.2 coordinator scales its job through it; a task job has none (docs/TASKS.md).
        let mut served = job.clone();
        served.metadata.namespace.get_or_insert_with(|| "default".into());
        endpoint::serve(served, requests).await?;
    }
    let dir = std::path::absolute(&run_dir)?;
    let replan: supervise::Replan = Box::new(move |job, previous| plan::plan(job, &dir, ports, &config_maps, previous));
    let outcome = supervise::run(plan, clean_pod_policy(&job), backoff, out, supervisor, replan).await?;
    Ok(outcome.code)
}

/// Whether something on this machine listens on `port`: a replica binds its port on every
/// address (DI-engine's collectors bind `0.0.0.0`), which fails if any address holds it.
fn listened_on(port: u16) -> bool {
    std::net::TcpListener::bind((std::net::Ipv4Addr::UNSPECIFIED, port)).is_err()
}

/// The data of the file's ConfigMaps, by name. Binary data has no text to write and is refused
/// rather than left out.
fn config_map_data<'a>(docs: impl Iterator<Item = &'a serde_json::Value>) -> anyhow::Result<mounts::ConfigMaps> {
    let mut out = mounts::ConfigMaps::new();
    for doc in docs {
        let map: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(doc.clone())?;
        let name = map.metadata.name.clone().ok_or_else(|| anyhow!("a ConfigMap of the file has no metadata.name"))?;
        if map.binary_data.as_ref().is_some_and(|b| !b.is_empty()) {
            bail!("ConfigMap {name} has binaryData, which a local run does not write; use data");
        }
        out.insert(name, map.data.unwrap_or_default().into_iter().collect());
    }
    Ok(out)
}

/// `kubectl di replicas add|delete NAME --local`: the running local job's endpoint does it.
pub async fn scale(args: &crate::cli::ScaleArgs, namespace: &str, up: bool) -> anyhow::Result<()> {
    let body = serde_json::json!({
        "namespace": namespace,
        "coordinator": di_api::contract::names::coordinator(&args.name),
        "collectors": {"replicas": args.collectors},
        "learners": {"replicas": args.learners, "gpus": args.gpus},
    });
    let method = if up { "POST" } else { "DELETE" };
    let answer = client::call(method, "/v1alpha1/replicas", &body).await?;
    if answer["success"] != true {
        bail!("the local run refused: {}", answer["message"].as_str().unwrap_or_default());
    }
    let verb = if up { "added" } else { "removed" };
    for role in ["collectors", "learners"] {
        for url in answer["data"][role].as_array().into_iter().flatten() {
            println!("{} {verb} at {}", &role[..role.len() - 1], url.as_str().unwrap_or_default());
        }
    }
    Ok(())
}

/// Local runs of one machine share 127.0.0.0/24: a second one at the same time is refused
/// rather than left to collide with the first. Held until the run ends.
fn machine_lock() -> anyhow::Result<Flock<std::fs::File>> {
    let path = std::env::temp_dir().join("di-local-run.lock");
    let file = std::fs::OpenOptions::new().create(true).truncate(false).read(true).write(true).open(&path)?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(mut lock) => {
            use std::io::{Seek, Write};
            lock.set_len(0)?;
            lock.rewind()?;
            write!(lock, "{}", std::process::id())?;
            Ok(lock)
        }
        Err((_, _)) => {
            let holder = std::fs::read_to_string(&path).unwrap_or_default();
            bail!(
                "another local run (pid {}) is using the loopback addresses 127.0.0.2 and up; wait for it to end or \
                 stop it (Ctrl-C, or kill -INT {0})",
                holder.trim()
            )
        }
    }
}

/// What `--dry-run` prints: every process with its address, directory, command and environment.
fn describe(plan: &plan::Plan) -> String {
    let mut text = String::new();
    for r in &plan.replicas {
        let port = r.port.map(|p| format!(":{p}")).unwrap_or_default();
        text += &format!("{} at {}{port} in {}\n", r.name, r.address, r.workdir.display());
        text += &format!("  command: {}\n", shell_words(&r.argv));
        for (mount, local) in &r.mounts.paths {
            text += &format!("  volume: {mount} is {local}\n");
        }
        for (k, v) in &r.env {
            text += &format!("  {k}={v}\n");
        }
    }
    text
}

fn shell_words(argv: &[String]) -> String {
    let quote = |a: &String| {
        if !a.is_empty() && a.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,".contains(c)) {
            a.clone()
        } else {
            format!("'{}'", a.replace('\'', r"'\''"))
        }
    };
    argv.iter().map(quote).collect::<Vec<_>>().join(" ")
}
