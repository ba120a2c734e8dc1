//! `kubectl di version`: the plugin's version and, when a cluster answers, the server side's: the
//! orchestrator Deployment's image and the versions the DIJob CRD serves. Each says plainly when
//! it is not installed or cannot be read, and a plugin of another version than the orchestrator
//! it talks to is pointed out.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;

use crate::cli::Global;
use crate::ctx::Ctx;

const CLIENT: &str = env!("CARGO_PKG_VERSION");
const NAMESPACE: &str = "di-system";
const DEPLOYMENT: &str = "di-orchestrator";
const CRD: &str = "dijobs.diengine.opendilab.org";

/// What was found of one part of the server side.
#[derive(Debug)]
enum Found<T> {
    Installed(T),
    NotInstalled,
    Unreadable(String),
}

/// The orchestrator's Deployment, as far as a version is concerned.
#[derive(Debug)]
struct Orchestrator {
    image: String,
    ready: i32,
    replicas: i32,
}

pub async fn version(global: &Global) {
    println!("client: kubectl-di {CLIENT}");
    let ctx = match Ctx::connect(global).await {
        Ok(ctx) => ctx,
        Err(e) => return println!("server: no cluster to ask ({e:#})"),
    };
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), NAMESPACE);
    let orchestrator = match deployments.get_opt(DEPLOYMENT).await {
        Ok(Some(d)) => Found::Installed(orchestrator_of(&d)),
        Ok(None) => Found::NotInstalled,
        Err(e) => Found::Unreadable(e.to_string()),
    };
    let crds: Api<CustomResourceDefinition> = Api::all(ctx.client);
    let served = match crds.get_opt(CRD).await {
        Ok(Some(crd)) => Found::Installed(served_versions(&crd)),
        Ok(None) => Found::NotInstalled,
        Err(e) => Found::Unreadable(e.to_string()),
    };
    for line in server_lines(&orchestrator, &served) {
        println!("{line}");
    }
}

fn orchestrator_of(deployment: &Deployment) -> Orchestrator {
    let spec = &deployment.spec;
    let image = spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default();
    let ready = deployment.status.as_ref().and_then(|s| s.ready_replicas).unwrap_or(0);
    Orchestrator { image, ready, replicas: spec.replicas.unwrap_or(1) }
}

/// `v1alpha1 (stored), v2alpha1`: the versions served, the stored one marked.
fn served_versions(crd: &CustomResourceDefinition) -> String {
    let versions = crd.spec.versions.iter().filter(|v| v.served);
    let named: Vec<String> =
        versions.map(|v| if v.storage { format!("{} (stored)", v.name) } else { v.name.clone() }).collect();
    named.join(", ")
}

fn server_lines(orchestrator: &Found<Orchestrator>, served: &Found<String>) -> Vec<String> {
    let mut lines = vec![];
    match orchestrator {
        Found::Installed(o) => {
            lines.push(format!("server: {} ({NAMESPACE}/{DEPLOYMENT}, {}/{} ready)", o.image, o.ready, o.replicas));
            let tag = o.image.rsplit_once(':').map(|(_, tag)| tag.trim_start_matches('v'));
            if tag != Some(CLIENT) {
                lines.push(format!(
                    "warning: the plugin is {CLIENT} and the orchestrator runs {}; `kubectl di install` installs {CLIENT}",
                    o.image
                ));
            }
        }
        Found::NotInstalled => {
            lines.push(format!("server: not installed (no Deployment {NAMESPACE}/{DEPLOYMENT}; kubectl di install)"))
        }
        Found::Unreadable(e) => lines.push(format!("server: cannot read Deployment {NAMESPACE}/{DEPLOYMENT}: {e}")),
    }
    lines.push(match served {
        Found::Installed(versions) => format!("crd: {CRD} serves {versions}"),
        Found::NotInstalled => format!("crd: {CRD} not installed"),
        Found::Unreadable(e) => format!("crd: cannot read {CRD}: {e}"),
    });
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn installed(image: &str) -> Found<Orchestrator> {
        Found::Installed(Orchestrator { image: image.into(), ready: 2, replicas: 2 })
    }

    #[test]
    fn the_server_side_is_named_and_a_version_skew_pointed_out() {
        let served = Found::Installed("v1alpha1 (stored), v2alpha1".to_string());
        let same = server_lines(&installed(di_api::contract::IMAGE), &served);
        assert_eq!(
            same,
            [
                format!("server: {} (di-system/di-orchestrator, 2/2 ready)", di_api::contract::IMAGE),
                "crd: dijobs.diengine.opendilab.org serves v1alpha1 (stored), v2alpha1".into(),
            ]
        );
        let other = server_lines(&installed("example/di-orchestrator:latest"), &served);
        assert!(other[1].starts_with("warning: the plugin is"), "{other:?}");
        assert!(server_lines(&installed(&format!("reg/di:v{CLIENT}")), &served).len() == 2, "a v prefix matches");
    }

    #[test]
    fn what_is_not_installed_says_so() {
        let lines = server_lines(&Found::NotInstalled, &Found::NotInstalled);
        assert_eq!(
            lines,
            [
                "server: not installed (no Deployment di-system/di-orchestrator; kubectl di install)",
                "crd: dijobs.diengine.opendilab.org not installed",
            ]
        );
        let forbidden = server_lines(&Found::Unreadable("403 forbidden".into()), &Found::NotInstalled);
        assert_eq!(forbidden[0], "server: cannot read Deployment di-system/di-orchestrator: 403 forbidden");
    }

    #[test]
    fn install_defaults_to_the_plugins_own_image() {
        use clap::Parser;
        let cli = crate::cli::Cli::try_parse_from(["kubectl-di", "install"]).unwrap();
        let crate::cli::Command::Install(args) = cli.command else { panic!("not install") };
        assert_eq!(args.image, format!("opendilab/di-orchestrator:{CLIENT}"));
    }
}
