//! `kubectl di create`: DIJobs and AggregatorConfigs from a file (or stdin), or one job from
//! flags, each checked as the webhook would before anything is sent; `--wait` follows the jobs
//! until they run.

use std::io::Read;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use di_api::{AggregatorConfig, DIJob};
use kube::Api;
use kube::api::{DynamicObject, PostParams};
use kube::core::ApiResource;
use serde_json::json;

use crate::cli::{CreateArgs, DryRun};
use crate::ctx::{Ctx, MANAGER, explain};
use crate::{follow, manifest};

/// The objects to create, each checked as the webhook would: from -f, or one job from the flags.
fn documents(args: &CreateArgs) -> anyhow::Result<Vec<serde_json::Value>> {
    let mut docs = unqueued(args)?;
    if let Some(queue) = &args.queue {
        for job in docs.iter_mut().filter(|d| d["kind"] == "DIJob") {
            if !job["metadata"]["labels"].is_object() {
                job["metadata"]["labels"] = json!({});
            }
            job["metadata"]["labels"][di_api::contract::kueue::QUEUE_NAME] = json!(queue);
        }
    }
    Ok(docs)
}

/// The documents to create, as the file or the flags give them.
fn unqueued(args: &CreateArgs) -> anyhow::Result<Vec<serde_json::Value>> {
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
    if !args.tasks.is_empty() {
        let job = task_job(&name, args)?;
        manifest::check(&[(1, job.clone())])?;
        return Ok(vec![job]);
    }
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

/// A task job (`v2alpha1`) from `--task` flags.
fn task_job(name: &str, args: &CreateArgs) -> anyhow::Result<serde_json::Value> {
    let mut tasks = vec![];
    for spec in &args.tasks {
        // `command=` takes the rest: a shell command may hold commas.
        let (fields, command) = match spec.split_once("command=") {
            Some((fields, command)) => (fields.trim_end_matches(','), Some(command.to_owned())),
            None => (spec.as_str(), args.command.clone()),
        };
        let mut task = serde_json::Map::new();
        let mut image = args.image.clone();
        for field in fields.split(',').filter(|f| !f.is_empty()) {
            let (key, value) =
                field.split_once('=').ok_or_else(|| anyhow!("--task {spec}: {field:?} is not key=value"))?;
            match key {
                "name" | "type" => {
                    task.insert(key.into(), json!(value));
                }
                "replicas" => {
                    let n: i32 =
                        value.parse().map_err(|_| anyhow!("--task {spec}: replicas {value:?} is not a number"))?;
                    task.insert(key.into(), json!(n));
                }
                "image" => image = Some(value.to_owned()),
                other => bail!("--task {spec}: unknown key {other:?}: use name, type, replicas, image, command"),
            }
        }
        let image = image.ok_or_else(|| anyhow!("--task {spec}: no image; add image=... or --image"))?;
        let mut container = json!({"name": "di-container", "image": image});
        if let Some(command) = command {
            container["command"] = json!(["sh", "-c", command]);
        }
        task.insert("template".into(), json!({"spec": {"containers": [container]}}));
        tasks.push(serde_json::Value::Object(task));
    }
    Ok(json!({
        "apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob",
        "metadata": {"name": name},
        "spec": {"tasks": tasks},
    }))
}

/// Creates the objects; without a cluster (`--dry-run=client`) only checks them.
pub async fn create(ctx: Option<&Ctx>, args: &CreateArgs) -> anyhow::Result<()> {
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
            // Either served version: the object is sent as it was written.
            let mut resource = ApiResource::erase::<DIJob>(&());
            if let Some(version) = doc["apiVersion"].as_str() {
                resource.version = version.rsplit('/').next().unwrap_or_default().to_owned();
                resource.api_version = version.to_owned();
            }
            resource
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
            follow::until_running(&api, &name, Duration::from_secs(args.timeout)).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_side_checks_name_the_field() {
        let path = format!(
            "{}/../../manifests/examples/invalid.yaml",
            std::env::var("CARGO_MANIFEST_DIR").expect("run by cargo")
        );
        let err = format!("{:#}", manifest::read(&std::fs::read(path).unwrap()).unwrap_err());
        assert!(
            err.starts_with("DIJob invalid-job is invalid: spec.cleanPodPolicy: Unsupported value \"Sometimes\""),
            "{err}"
        );
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
        let err = manifest::check(&[(1, pod)]).unwrap_err().to_string();
        assert!(err.contains("kind: Unsupported value \"Pod\""), "{err}");
    }

    #[test]
    fn the_quick_form_is_checked_like_a_file() {
        let args = |line: &str| {
            let cli = <crate::cli::Cli as clap::Parser>::try_parse_from(line.split_whitespace()).unwrap();
            let crate::cli::Command::Create(args) = cli.command else { panic!() };
            args
        };
        let docs = documents(&args("kubectl-di create demo --image ding --collectors 2 --gpus 2")).unwrap();
        assert_eq!(docs[0]["spec"]["collector"]["replicas"], 2);
        assert_eq!(docs[0]["spec"]["learner"]["gpus"], 2);
        let err = documents(&args("kubectl-di create demo")).unwrap_err().to_string();
        assert_eq!(err, "--image is required to create demo without a file");
        let queued = documents(&args("kubectl-di create demo --image ding --queue team-a")).unwrap();
        assert_eq!(queued[0]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"], "team-a");

        let argv = [
            "kubectl-di",
            "create",
            "mesh",
            "--image",
            "ding",
            "--task",
            "name=learner,type=learner",
            "--task",
            "name=collector,type=collector,replicas=4,image=ding:v2,command=ditask --platform k8s,local",
        ];
        let cli = <crate::cli::Cli as clap::Parser>::try_parse_from(argv).unwrap();
        let crate::cli::Command::Create(parsed) = cli.command else { panic!() };
        let docs = documents(&parsed).unwrap();
        assert_eq!(docs[0]["apiVersion"], "diengine.opendilab.org/v2alpha1");
        let collector = &docs[0]["spec"]["tasks"][1];
        assert_eq!((collector["replicas"].as_i64(), collector["type"].as_str()), (Some(4), Some("collector")));
        let container = &collector["template"]["spec"]["containers"][0];
        assert_eq!(container["image"], "ding:v2");
        assert_eq!(container["command"][2], "ditask --platform k8s,local", "the command keeps its commas");
        assert_eq!(docs[0]["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["image"], "ding");
        let err = documents(&args("kubectl-di create mesh --task name=a,size=3")).unwrap_err().to_string();
        assert!(err.contains("unknown key \"size\""), "{err}");
        let err = documents(&args("kubectl-di create mesh --image i --task name=Bad")).unwrap_err().to_string();
        assert!(err.contains("spec.tasks[0].name: Invalid value \"Bad\""), "{err}");
    }
}
