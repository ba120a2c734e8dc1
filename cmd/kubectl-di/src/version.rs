//! `kubectl di version`: the plugin's version, and the orchestrator's image when a cluster
//! answers (without one, the plugin's alone).

use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;

use crate::cli::Global;
use crate::ctx::Ctx;

pub async fn version(global: &Global) {
    println!("kubectl-di {}", env!("CARGO_PKG_VERSION"));
    let Ok(ctx) = Ctx::connect(global).await else { return };
    let deployments: Api<Deployment> = Api::namespaced(ctx.client, "di-system");
    match deployments.get_opt("di-orchestrator").await {
        Ok(Some(d)) => {
            let image =
                d.spec.and_then(|s| s.template.spec).and_then(|s| s.containers.first().and_then(|c| c.image.clone()));
            println!("di-orchestrator {}", image.unwrap_or_default());
        }
        Ok(None) => println!("di-orchestrator not installed (kubectl di install)"),
        Err(e) => println!("di-orchestrator unknown: {e}"),
    }
}
