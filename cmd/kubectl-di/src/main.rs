//! `kubectl di`: the plugin people type. Arguments and output only; the rules come from pkg/api
//! (defaulting, validation) and pkg/replicas (scaling), the same code the cluster runs.

mod cli;
mod gone;
mod manifest;
mod output;

use std::io::{IsTerminal, Read, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use clap::{CommandFactory, Parser};
use cli::{
    Cli, Command, CreateArgs, DryRun, GetArgs, Global, InstallArgs, LogsArgs, Output, ReplicasCommand, ScaleArgs,
};
use di_api::contract::{Role, annotations, labels, names};
use di_api::{AggregatorConfig, DIJob, Phase};
use di_replicas::scale;
use di_replicas::update::update_job;
use di_replicas::wire::{ReplicaRequest, Replicas, ResourceRequest};
use futures::{AsyncBufReadExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, DynamicObject, ListParams, LogParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::ApiResource;
use kube::core::GroupVersionKind;
use kube::discovery::{Scope, pinned_kind};
use kube::{Api, Client, Config, ResourceExt};
use serde_json::json;

/// The install manifests, embedded: the same files as `manifests/install`.
const INSTALL: [(&str, &str); 5] = [
    ("namespace.yaml", include_str!("../../../manifests/install/namespace.yaml")),
    ("crds.yaml", include_str!("../../../manifests/install/crds.yaml")),
    ("rbac.yaml", include_str!("../../../manifests/install/rbac.yaml")),
    ("deployment.yaml", include_str!("../../../manifests/install/deployment.yaml")),
    ("webhook.yaml", include_str!("../../../manifests/install/webhook.yaml")),
];
const MANAGER: &str = "kubectl-di";

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

struct Ctx {
    client: Client,
    namespace: String,
}

async fn connect(global: &Global) -> anyhow::Result<Ctx> {
    let kubeconfig = match &global.kubeconfig {
        Some(path) => Kubeconfig::read_from(path).with_context(|| format!("reading {}", path.display()))?,
        None => Kubeconfig::read().context("reading the kubeconfig ($KUBECONFIG or ~/.kube/config)")?,
    };
    let options = KubeConfigOptions { context: global.context.clone(), ..Default::default() };
    let config = Config::from_custom_kubeconfig(kubeconfig, &options).await.context("loading the kubeconfig")?;
    let namespace = global.namespace.clone().unwrap_or_else(|| config.default_namespace.clone());
    Ok(Ctx { client: Client::try_from(config)?, namespace })
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    // Commands that need no cluster.
    match &cli.command {
        Command::Completion { shell } => {
            clap_complete::generate(*shell, &mut Cli::command(), "kubectl-di", &mut std::io::stdout());
            return Ok(());
        }
        Command::Create(args) if args.dry_run == DryRun::Client => return create(None, args).await,
        _ => {}
    }
    if let Command::Version = cli.command {
        println!("kubectl-di {}", env!("CARGO_PKG_VERSION"));
        if let Ok(ctx) = connect(&cli.global).await {
            let deployments: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced(ctx.client, "di-system");
            match deployments.get_opt("di-orchestrator").await {
                Ok(Some(d)) => {
                    let image = d
                        .spec
                        .and_then(|s| s.template.spec)
                        .and_then(|s| s.containers.first().and_then(|c| c.image.clone()));
                    println!("di-orchestrator {}", image.unwrap_or_default());
                }
                Ok(None) => println!("di-orchestrator not installed (kubectl di install)"),
                Err(e) => println!("di-orchestrator unknown: {e}"),
            }
        }
        return Ok(());
    }
    let ctx = connect(&cli.global).await?;
    match cli.command {
        Command::Create(args) => create(Some(&ctx), &args).await,
        Command::Get(args) => get(&ctx, &args).await,
        Command::Describe { name } => describe(&ctx, &name).await,
        Command::Delete { name, wait, timeout } => delete(&ctx, &name, wait, timeout).await,
        Command::Logs(args) => logs(&ctx, &args).await,
        Command::Replicas { command } => replicas(&ctx, command).await,
        Command::Suspend { name } => suspend(&ctx, &name, true).await,
        Command::Resume { name } => suspend(&ctx, &name, false).await,
        Command::Install(args) => install(&ctx, &args).await,
        Command::Uninstall { keep_crds } => uninstall(&ctx, keep_crds).await,
        Command::Version | Command::Completion { .. } => unreachable!("handled above"),
    }
}

fn jobs(ctx: &Ctx) -> Api<DIJob> {
    Api::namespaced(ctx.client.clone(), &ctx.namespace)
}

/// The objects to create, each checked as the webhook would: from -f, or one job from the flags.
fn documents(args: &CreateArgs) -> anyhow::Result<Vec<serde_json::Value>> {
    if let Some(file) = &args.filename {
        let bytes = if file == "-" {
            let mut bytes = vec![];
            std::io::stdin().read_to_end(&mut bytes).context("reading the standard input")?;
            bytes
        } else {
            std::fs::read(file).with_context(|| format!("reading {file}"))?
        };
        return manifest::read(&bytes);
    }
    let name = args.name.clone().expect("clap requires NAME without -f");
    let image = args.image.clone().ok_or_else(|| anyhow!("--image is required to create {name} without a file"))?;
    let mut container = json!({"name": "di-container", "image": image});
    if let Some(command) = &args.command {
        container["command"] = json!(["sh", "-c", command]);
    }
    let template = json!({"spec": {"containers": [container]}});
    let mut learner = json!({"replicas": args.learners, "template": template});
    if let Some(gpus) = args.gpus {
        learner["gpus"] = json!(gpus);
    }
    let job = json!({
        "apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJob",
        "metadata": {"name": name},
        "spec": {"coordinator": {"template": template}, "collector": {"replicas": args.collectors, "template": template}, "learner": learner},
    });
    manifest::check(&[(1, job.clone())])?;
    Ok(vec![job])
}

async fn create(ctx: Option<&Ctx>, args: &CreateArgs) -> anyhow::Result<()> {
    // Every document is checked before anything is created.
    let docs = documents(args)?;
    let mut created = vec![];
    for doc in &docs {
        let kind = doc["kind"].as_str().unwrap_or_default();
        let name = doc["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        let plural = if kind == "DIJob" { "dijob" } else { "aggregatorconfig" };
        let Some(ctx) = ctx else {
            println!("{plural}.diengine.opendilab.org/{name} created (dry run)");
            continue;
        };
        let namespace = doc["metadata"]["namespace"].as_str().map_or(ctx.namespace.clone(), str::to_owned);
        let resource = if kind == "DIJob" {
            ApiResource::erase::<DIJob>(&())
        } else {
            ApiResource::erase::<AggregatorConfig>(&())
        };
        let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &namespace, &resource);
        let object: DynamicObject = serde_json::from_value(doc.clone())?;
        let params = PostParams { dry_run: args.dry_run == DryRun::Server, field_manager: Some(MANAGER.into()) };
        api.create(&params, &object).await.map_err(|e| explain(e, &format!("creating {kind} {name}")))?;
        let suffix = if args.dry_run == DryRun::Server { " (server dry run)" } else { "" };
        println!("{plural}.diengine.opendilab.org/{name} created{suffix}");
        if kind == "DIJob" {
            created.push((namespace, name));
        }
    }
    if args.wait
        && args.dry_run == DryRun::None
        && let Some(ctx) = ctx
    {
        for (namespace, name) in created {
            let api: Api<DIJob> = Api::namespaced(ctx.client.clone(), &namespace);
            wait_running(&api, &name, Duration::from_secs(args.timeout)).await?;
        }
    }
    Ok(())
}

/// A kube error with what was being done, and the API server's message as is (it names fields).
fn explain(e: kube::Error, doing: &str) -> anyhow::Error {
    match e {
        kube::Error::Api(status) => anyhow!("{doing}: {}", status.message),
        other => anyhow!("{doing}: {other}"),
    }
}

/// Shows progress until the job runs with every replica ready; fails if it fails or times out.
async fn wait_running(api: &Api<DIJob>, name: &str, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    let tty = std::io::stderr().is_terminal();
    let mut last = String::new();
    loop {
        let job = api.get(name).await.map_err(|e| explain(e, &format!("reading DIJob {name}")))?;
        let line = output::progress(&job);
        if line != last {
            if tty {
                eprint!("\r\x1b[2K{line}");
            } else {
                eprintln!("{line}");
            }
            let _ = std::io::stderr().flush();
            last = line;
        }
        if output::converged(&job) {
            if tty {
                eprintln!();
            }
            return Ok(());
        }
        if job.status.as_ref().and_then(|s| s.phase) == Some(Phase::Failed) {
            let reason = job
                .status
                .as_ref()
                .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Failed"))
                .and_then(|c| c.message.clone());
            bail!("DIJob {name} failed: {}", reason.unwrap_or_default());
        }
        if Instant::now() >= deadline {
            bail!("DIJob {name} is not running with every replica ready after {timeout:?} ({last})");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn get(ctx: &Ctx, args: &GetArgs) -> anyhow::Result<()> {
    let api: Api<DIJob> = if args.all_namespaces { Api::all(ctx.client.clone()) } else { jobs(ctx) };
    let list = match &args.name {
        Some(name) => vec![jobs(ctx).get(name).await.map_err(|e| explain(e, &format!("getting DIJob {name}")))?],
        None => api.list(&ListParams::default()).await.map_err(|e| explain(e, "listing DIJobs"))?.items,
    };
    let mut text = match args.output {
        Some(Output::Json) if args.name.is_some() => serde_json::to_string_pretty(&list[0])?,
        Some(Output::Json) => {
            serde_json::to_string_pretty(&json!({"apiVersion": "v1", "kind": "List", "items": list}))?
        }
        Some(Output::Yaml) if args.name.is_some() => serde_yaml::to_string(&list[0])?,
        Some(Output::Yaml) => serde_yaml::to_string(&json!({"apiVersion": "v1", "kind": "List", "items": list}))?,
        Some(Output::Name) => list.iter().map(|j| format!("dijob.diengine.opendilab.org/{}\n", j.name_any())).collect(),
        Some(Output::Wide) | None => {
            if list.is_empty() {
                let place =
                    if args.all_namespaces { String::new() } else { format!(" in {} namespace", ctx.namespace) };
                eprintln!("No DIJobs found{place}.");
                return Ok(());
            }
            output::jobs_table(&list, args.output == Some(Output::Wide), args.all_namespaces, Timestamp::now())
        }
    };
    if !text.ends_with('\n') {
        text.push('\n');
    }
    print!("{text}");
    Ok(())
}

async fn job_pods(ctx: &Ctx, name: &str) -> anyhow::Result<Vec<Pod>> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let params = ListParams::default().labels(&format!("{}={name}", labels::JOB_NAME));
    Ok(pods.list(&params).await.map_err(|e| explain(e, "listing the job's pods"))?.items)
}

async fn describe(ctx: &Ctx, name: &str) -> anyhow::Result<()> {
    let job = jobs(ctx).get(name).await.map_err(|e| explain(e, &format!("getting DIJob {name}")))?;
    let pods = job_pods(ctx, name).await?;
    let events: Api<Event> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let selector = format!("involvedObject.kind=DIJob,involvedObject.name={name}");
    let mut list = events.list(&ListParams::default().fields(&selector)).await.map(|l| l.items).unwrap_or_default();
    list.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0).or(e.last_timestamp.as_ref().map(|t| t.0)));
    let recent: Vec<(String, String, String)> = list
        .iter()
        .rev()
        .take(10)
        .rev()
        .map(|e| {
            (
                e.type_.clone().unwrap_or_default(),
                e.reason.clone().unwrap_or_default(),
                e.message.clone().unwrap_or_default(),
            )
        })
        .collect();
    print!("{}", output::describe(&job, &pods, &recent, Timestamp::now()));
    Ok(())
}

async fn delete(ctx: &Ctx, name: &str, wait: bool, timeout: u64) -> anyhow::Result<()> {
    let job = jobs(ctx).get(name).await.map_err(|e| explain(e, &format!("getting DIJob {name}")))?;
    jobs(ctx)
        .delete(name, &DeleteParams::background())
        .await
        .map_err(|e| explain(e, &format!("deleting DIJob {name}")))?;
    println!("dijob.diengine.opendilab.org/{name} deleted");
    if wait {
        let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
        let uid = job.uid().unwrap_or_default();
        gone::until_gone(&jobs(ctx), &pods, name, &uid, Duration::from_secs(timeout)).await?;
    }
    Ok(())
}

/// The pod of a role and index: `<job>-coordinator`, `<job>-<role>-<i>`.
pub fn pod_name(job: &str, role: &str, replica: Option<u32>) -> anyhow::Result<String> {
    let role = Role::from_label(role).ok_or_else(|| {
        anyhow!("unknown role {role:?}: use coordinator, collector, learner, aggregator or ddp-learner")
    })?;
    match (role, replica) {
        (Role::Coordinator, _) => Ok(names::coordinator(job)),
        (Role::DdpLearner, _) => bail!("name a DDP learner's pod with kubectl logs <job>-ddp-learner-<i>-<k>"),
        (role, Some(i)) => Ok(names::replica(job, role, i)),
        (role, None) => bail!("--replica is required for a {role}"),
    }
}

async fn logs(ctx: &Ctx, args: &LogsArgs) -> anyhow::Result<()> {
    let pod = pod_name(&args.name, &args.role, args.replica)?;
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let params = LogParams { follow: args.follow, container: Some(args.container.clone()), ..Default::default() };
    let mut lines =
        pods.log_stream(&pod, &params).await.map_err(|e| explain(e, &format!("reading the logs of {pod}")))?.lines();
    let mut stdout = std::io::stdout();
    while let Some(line) = lines.try_next().await? {
        writeln!(stdout, "{line}")?;
    }
    Ok(())
}

async fn replicas(ctx: &Ctx, command: ReplicasCommand) -> anyhow::Result<()> {
    match command {
        ReplicasCommand::Add(args) => scale_job(ctx, &args, true).await,
        ReplicasCommand::Delete(args) => scale_job(ctx, &args, false).await,
        ReplicasCommand::List { name } => {
            jobs(ctx).get(&name).await.map_err(|e| explain(e, &format!("getting DIJob {name}")))?;
            let pods = job_pods(ctx, &name).await?;
            print!("{}", output::table(&["POD", "ROLE", "PHASE", "URL"], &output::replica_rows(&pods)));
            Ok(())
        }
        ReplicasCommand::Restart { name, pods, no_wait } => restart(ctx, &name, &pods, no_wait).await,
    }
}

/// Changes the job's desired counts with the replica endpoint's own rules, then follows the
/// reconciler until the job has converged.
async fn scale_job(ctx: &Ctx, args: &ScaleArgs, up: bool) -> anyhow::Result<()> {
    let api = jobs(ctx);
    let request = ReplicaRequest {
        namespace: ctx.namespace.clone(),
        coordinator: names::coordinator(&args.name),
        collectors: ResourceRequest { replicas: args.collectors, ..Default::default() },
        learners: ResourceRequest { replicas: args.learners, gpus: args.gpus.clone(), ..Default::default() },
    };
    let written = update_job(&api, &args.name, |job: &DIJob| {
        let change = if up { scale::scale_up(job, &request)? } else { scale::scale_down(job, &request)? };
        Ok((change.patch(job), change))
    })
    .await
    .map_err(|e| anyhow!("scaling DIJob {}: {e}", args.name))?;
    let change = &written.result;
    let scale::Affected { collectors, learners, .. } = scale::Affected::between(&written.before, &written.after);
    let affected = [collectors, learners].concat();
    let verb = if up { "added" } else { "removed" };
    println!(
        "dijob.diengine.opendilab.org/{}: collectors {}, learners {}",
        args.name, change.collectors, change.learners
    );
    for note in &change.notes {
        eprintln!("note: {note}");
    }
    if !args.no_wait {
        wait_running(&api, &args.name, Duration::from_secs(args.timeout)).await?;
    }
    for name in affected {
        println!("pod/{name} {verb}");
    }
    Ok(())
}

async fn restart(ctx: &Ctx, name: &str, pods: &[String], no_wait: bool) -> anyhow::Result<()> {
    let api = jobs(ctx);
    let live = job_pods(ctx, name).await?;
    let (collectors, learners): (Vec<String>, Vec<String>) = pods
        .iter()
        .map(|p| scale::pod_name_of(p))
        .partition(|p| live.iter().any(|l| &l.name_any() == p && scale::role_of(l) == Some(Role::Collector)));
    let report =
        Replicas { namespace: ctx.namespace.clone(), coordinator: names::coordinator(name), collectors, learners };
    let old = update_job(&api, name, |job: &DIJob| {
        let (value, named) = scale::report_failed(job, &live, &report)?;
        let old: Vec<(String, Option<String>)> =
            named.iter().map(|n| (n.clone(), live.iter().find(|p| &p.name_any() == n).and_then(|p| p.uid()))).collect();
        Ok((json!({"metadata": {"annotations": {annotations::REPLACE: value}}}), old))
    })
    .await
    .map_err(|e| anyhow!("marking pods of DIJob {name} for restart: {e}"))?
    .result;
    if !no_wait {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let live = job_pods(ctx, name).await?;
            if scale::replaced(&old, &live) {
                break;
            }
            if Instant::now() >= deadline {
                bail!("the pods were marked for restart but not all were replaced within 120s");
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
    for (pod, _) in old {
        println!("pod/{pod} restarted");
    }
    Ok(())
}

async fn suspend(ctx: &Ctx, name: &str, suspend: bool) -> anyhow::Result<()> {
    let patch = json!({"spec": {"suspend": suspend}});
    jobs(ctx)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| explain(e, &format!("updating DIJob {name}")))?;
    println!("dijob.diengine.opendilab.org/{name} {}", if suspend { "suspended" } else { "resumed" });
    Ok(())
}

/// Every object of the embedded install manifests, the image set to `image`.
fn install_objects(image: &str) -> anyhow::Result<Vec<DynamicObject>> {
    let mut objects = vec![];
    for (file, text) in INSTALL {
        for mut doc in di_api::manifest::yaml_documents(text).with_context(|| format!("embedded {file}"))? {
            if doc["kind"] == "Deployment" {
                let container = &mut doc["spec"]["template"]["spec"]["containers"][0];
                container["image"] = json!(image);
                for var in container["env"].as_array_mut().into_iter().flatten() {
                    if var["name"] == "DI_REPLICAS_IMAGE" {
                        var["value"] = json!(image);
                    }
                }
            }
            objects.push(serde_json::from_value(doc)?);
        }
    }
    Ok(objects)
}

async fn api_for(client: &Client, object: &DynamicObject) -> anyhow::Result<(Api<DynamicObject>, String)> {
    let types = object.types.clone().ok_or_else(|| anyhow!("an embedded manifest lacks apiVersion/kind"))?;
    let gvk = GroupVersionKind::try_from(&types)?;
    let (resource, caps) =
        pinned_kind(client, &gvk).await.with_context(|| format!("the cluster does not serve {}", types.kind))?;
    let api = match caps.scope {
        Scope::Namespaced => {
            Api::namespaced_with(client.clone(), object.namespace().as_deref().unwrap_or("default"), &resource)
        }
        Scope::Cluster => Api::all_with(client.clone(), &resource),
    };
    Ok((api, format!("{}/{}", types.kind.to_lowercase(), object.name_any())))
}

async fn install(ctx: &Ctx, args: &InstallArgs) -> anyhow::Result<()> {
    for object in install_objects(&args.image)? {
        // A CRD is served only once established; wait before objects that may depend on it.
        let (api, label) = api_for(&ctx.client, &object).await?;
        api.patch(&object.name_any(), &PatchParams::apply(MANAGER).force(), &Patch::Apply(&object))
            .await
            .map_err(|e| explain(e, &format!("applying {label}")))?;
        println!("{label} serverside-applied");
    }
    if args.no_wait {
        return Ok(());
    }
    // The webhook answers when a dry-run create of a DIJob goes through it.
    let probe: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJob",
        "metadata": {"name": "kubectl-di-install-probe", "namespace": "di-system"},
        "spec": {"coordinator": {"template": {"spec": {"containers": [{"name": "di-container", "image": "probe"}]}}}},
    }))?;
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), "di-system", &ApiResource::erase::<DIJob>(&()));
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    loop {
        let last = match api.create(&PostParams { dry_run: true, ..Default::default() }, &probe).await {
            Ok(_) => break,
            Err(e) => e.to_string(),
        };
        if Instant::now() >= deadline {
            bail!("the orchestrator's webhook did not answer within {}s: {last}", args.timeout);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    println!("the orchestrator is installed and its webhook answers");
    Ok(())
}

async fn uninstall(ctx: &Ctx, keep_crds: bool) -> anyhow::Result<()> {
    let mut objects = install_objects("unused")?;
    objects.reverse();
    for object in objects {
        let kind = object.types.as_ref().map(|t| t.kind.clone()).unwrap_or_default();
        if keep_crds && (kind == "CustomResourceDefinition" || kind == "Namespace") {
            continue;
        }
        let (api, label) = api_for(&ctx.client, &object).await?;
        match api.delete(&object.name_any(), &DeleteParams::background()).await {
            Ok(_) => println!("{label} deleted"),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(explain(e, &format!("deleting {label}"))),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_names_of_roles() {
        assert_eq!(pod_name("j", "coordinator", None).unwrap(), "j-coordinator");
        assert_eq!(pod_name("j", "collector", Some(2)).unwrap(), "j-collector-2");
        assert!(pod_name("j", "collector", None).unwrap_err().to_string().contains("--replica is required"));
        assert!(pod_name("j", "actor", Some(0)).unwrap_err().to_string().contains("unknown role \"actor\""));
    }

    #[test]
    fn the_embedded_manifests_are_the_install_manifests() {
        for (file, text) in INSTALL {
            let on_disk =
                std::fs::read_to_string(format!("{}/../../manifests/install/{file}", env!("CARGO_MANIFEST_DIR")))
                    .unwrap();
            assert_eq!(text, on_disk, "{file}");
        }
        let objects = install_objects("example/di:1").unwrap();
        let deployment = objects.iter().find(|o| o.types.as_ref().unwrap().kind == "Deployment").unwrap();
        let container = &deployment.data["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["image"], "example/di:1");
        assert!(
            container["env"]
                .as_array()
                .unwrap()
                .iter()
                .any(|v| v["name"] == "DI_REPLICAS_IMAGE" && v["value"] == "example/di:1")
        );
    }

    #[test]
    fn client_side_checks_name_the_field() {
        let path = format!("{}/../../manifests/examples/invalid.yaml", env!("CARGO_MANIFEST_DIR"));
        let err = format!("{:#}", manifest::read(&std::fs::read(path).unwrap()).unwrap_err());
        assert!(
            err.starts_with("DIJob invalid-job is invalid: spec.cleanPodPolicy: Unsupported value \"Sometimes\""),
            "{err}"
        );
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
        let err = manifest::check(&[(1, pod)]).unwrap_err().to_string();
        assert!(err.contains("kind: Unsupported value \"Pod\""), "{err}");
    }
}

#[cfg(test)]
mod parsing {
    use clap::{CommandFactory, Parser};

    use super::cli::*;

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
