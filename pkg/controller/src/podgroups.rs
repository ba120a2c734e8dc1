//! PodGroups against the API server: which gang scheduler's to make (chosen once at start-up,
//! from what the API server serves), and a pass's PodGroups, applied (server-side, so a repeat,
//! or a changed minimum, is one idempotent request) before the pods that join them are created
//! and deleted when their gang is gone. In the backend's own API, through a dynamic client.

use std::sync::Arc;

use di_api::DIJob;
use di_client::is_status;
use kube::api::{DeleteParams, DynamicObject};
use kube::{Api, Client, ResourceExt};

use tracing::{info, warn};

use crate::context::Context;
use crate::decision::Action;
use crate::desired::gang::{self, Backend};
use crate::error::Error;

/// What `--gang-scheduler` asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Kubernetes' own PodGroups where the API server serves them, else no gangs.
    Auto,
    Exactly(Backend),
}

/// Why the orchestrator cannot make the gangs it was asked for.
#[derive(Debug, thiserror::Error)]
pub enum Unavailable {
    #[error(
        "--gang-scheduler asks for {api_version} PodGroups, which the API server does not serve: {hint}; \
         or run with --gang-scheduler=auto or none"
    )]
    NotServed { api_version: &'static str, hint: &'static str },
    #[error("asking the API server for {api_version}")]
    Asking {
        api_version: &'static str,
        #[source]
        source: kube::Error,
    },
}

/// What a cluster needs for each backend's PodGroups.
fn hint(backend: &Backend) -> &'static str {
    match backend {
        Backend::Native => {
            "Kubernetes 1.37+ with the GenericWorkload feature gate on kube-apiserver, kube-scheduler and \
             kube-controller-manager, and --runtime-config=scheduling.k8s.io/v1beta1=true"
        }
        Backend::Coscheduling { .. } => "install scheduler-plugins' coscheduling (its CRDs and its scheduler)",
        Backend::Volcano { .. } => "install Volcano (its CRDs and its scheduler)",
        Backend::None => "",
    }
}

/// Whether the API server serves `backend`'s PodGroups.
async fn served(client: &Client, backend: &Backend) -> Result<bool, Unavailable> {
    let Some(api_version) = backend.api_version() else { return Ok(true) };
    crate::discovery::serves(client, api_version, "podgroups")
        .await
        .map_err(|source| Unavailable::Asking { api_version, source })
}

/// The backend jobs' gangs are made for, as `choice` asks and the API server allows.
pub async fn choose(client: &Client, choice: Choice) -> Result<Backend, Unavailable> {
    let backend = match choice {
        Choice::Exactly(backend) => {
            if !served(client, &backend).await? {
                let api_version = backend.api_version().unwrap_or_default();
                return Err(Unavailable::NotServed { api_version, hint: hint(&backend) });
            }
            backend
        }
        Choice::Auto if served(client, &Backend::Native).await? => Backend::Native,
        Choice::Auto => {
            warn!(
                "the API server serves no scheduling.k8s.io/v1beta1 PodGroups ({}): jobs run without gangs",
                hint(&Backend::Native)
            );
            return Ok(Backend::None);
        }
    };
    match backend.api_version() {
        Some(api_version) => info!(%api_version, ?backend, "jobs' gangs are PodGroups"),
        None => info!("jobs run without gangs (--gang-scheduler=none)"),
    }
    Ok(backend)
}

fn api(ctx: &Context, job: &DIJob) -> Option<Api<DynamicObject>> {
    let resource = gang::api_resource(&ctx.settings.gang)?;
    Some(Api::namespaced_with(ctx.client.clone(), &job.namespace().unwrap_or_default(), &resource))
}

/// Applies every PodGroup of `actions`; fails the pass (its pods wait for the next) at the first
/// refusal.
pub(crate) async fn apply_all(ctx: &Arc<Context>, job: &DIJob, actions: &[Action]) -> Result<(), Error> {
    let groups: Vec<&serde_json::Value> = actions
        .iter()
        .filter_map(|a| match a {
            Action::ApplyPodGroup(object) => Some(&**object),
            _ => None,
        })
        .collect();
    let Some(api) = api(ctx, job).filter(|_| !groups.is_empty()) else { return Ok(()) };
    let applies = groups.into_iter().map(|object| {
        let api = &api;
        async move {
            let name = object["metadata"]["name"].as_str().unwrap_or_default();
            crate::writes::apply(api, name, object, "PodGroup").await
        }
    });
    futures::future::try_join_all(applies).await.map(drop)
}

/// Deletes the PodGroup `name`; one already gone is success.
pub(crate) async fn delete(ctx: &Context, job: &DIJob, name: &str) -> Result<(), Error> {
    let Some(api) = api(ctx, job) else { return Ok(()) };
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(e) if is_status(&e, 404) => Ok(()),
        Err(source) => Err(Error::Delete { kind: "PodGroup".into(), name: name.into(), source }),
    }
}
