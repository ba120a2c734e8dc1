//! Applying manifests of any kind: the API of an object's kind is found through discovery,
//! namespaced or cluster-scoped, and the object is server-side applied. `kubectl di install`
//! applies the install manifests this way, and the end-to-end suite its fixtures.

use kube::api::{DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::core::gvk::ParseGroupVersionError;
use kube::discovery::{Scope, pinned_kind};
use kube::{Api, Client, ResourceExt};

/// Why an object was not applied.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0} lacks apiVersion or kind")]
    Untyped(String),
    #[error(transparent)]
    ApiVersion(#[from] ParseGroupVersionError),
    /// Discovery does not know the kind: a CRD not installed, or not yet served.
    #[error("the cluster does not serve {kind}")]
    NotServed {
        kind: String,
        #[source]
        source: kube::Error,
    },
    /// The API server refused the object.
    #[error("applying {kind} {name}")]
    Refused {
        kind: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// The API of `object`'s kind: in the object's namespace (`default` when it names none) for a
/// namespaced kind, else cluster-wide.
pub async fn api_for(client: &Client, object: &DynamicObject) -> Result<Api<DynamicObject>, Error> {
    let types = object.types.as_ref().ok_or_else(|| Error::Untyped(object.name_any()))?;
    let gvk = GroupVersionKind::try_from(types)?;
    let (resource, caps) =
        pinned_kind(client, &gvk).await.map_err(|source| Error::NotServed { kind: types.kind.clone(), source })?;
    Ok(match caps.scope {
        Scope::Namespaced => {
            Api::namespaced_with(client.clone(), object.namespace().as_deref().unwrap_or("default"), &resource)
        }
        Scope::Cluster => Api::all_with(client.clone(), &resource),
    })
}

/// Server-side applies `object` as `manager`, taking over fields others set: the manifest is
/// what the object must say. Answers the object as stored.
pub async fn apply(client: &Client, object: &DynamicObject, manager: &str) -> Result<DynamicObject, Error> {
    let api = api_for(client, object).await?;
    let name = object.name_any();
    let refused = |source| {
        let kind = object.types.as_ref().map(|t| t.kind.clone()).unwrap_or_default();
        Error::Refused { kind: kind.clone(), name: name.clone(), source }
    };
    if is_crd(object) {
        drop_old_conversion_webhook(&api, object, manager).await.map_err(refused)?;
    }
    api.patch(&name, &PatchParams::apply(manager).force(), &Patch::Apply(object)).await.map_err(refused)
}

fn is_crd(object: &DynamicObject) -> bool {
    object.types.as_ref().is_some_and(|t| t.kind == "CustomResourceDefinition")
}

/// DI-orchestrator 0.2 installed its CRDs with a conversion webhook (a Service of its own, gone
/// with it). Applying ours takes over the strategy but not the webhook's fields, which another
/// manager owns, and the API server refuses a webhook without the Webhook strategy. So a CRD
/// that converts through a webhook the manifest does not name is set to no conversion first.
async fn drop_old_conversion_webhook(
    api: &Api<DynamicObject>,
    object: &DynamicObject,
    manager: &str,
) -> Result<(), kube::Error> {
    let wanted = &object.data["spec"]["conversion"];
    let Some(live) = api.get_opt(&object.name_any()).await? else { return Ok(()) };
    let conversion = &live.data["spec"]["conversion"];
    if conversion["strategy"] != "Webhook" || wanted["strategy"] == "Webhook" {
        return Ok(());
    }
    let patch = serde_json::json!({"spec": {"conversion": {"strategy": "None", "webhook": null}}});
    let params = PatchParams { field_manager: Some(manager.to_owned()), ..PatchParams::default() };
    api.patch(&object.name_any(), &params, &Patch::Merge(&patch)).await.map(drop)
}
