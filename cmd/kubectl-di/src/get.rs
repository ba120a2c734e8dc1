//! `kubectl di get`: the jobs of a namespace (or all) as a table, or one job; `-o` as kubectl's.

use di_api::DIJob;
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::cli::{GetArgs, Output};
use crate::ctx::{Ctx, explain};
use crate::output;

pub async fn get(ctx: &Ctx, args: &GetArgs) -> anyhow::Result<()> {
    let api: Api<DIJob> = if args.all_namespaces { Api::all(ctx.client.clone()) } else { ctx.jobs() };
    let list = match &args.name {
        Some(name) => vec![ctx.job(name).await?],
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
            let namespace = (!args.all_namespaces).then_some(ctx.namespace.as_str());
            let workers = crate::workers::workers(&ctx.client, namespace, &list).await;
            let wide = args.output == Some(Output::Wide);
            output::jobs_table(&list, &workers, wide, args.all_namespaces, Timestamp::now())
        }
    };
    if !text.ends_with('\n') {
        text.push('\n');
    }
    print!("{text}");
    Ok(())
}
