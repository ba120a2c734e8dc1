//! One object's write, each safe to repeat: a create that finds its object (the job's own) and a
//! delete that finds it gone are success, and neither ever touches an object of another owner.

use di_client::is_status;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, Resource, ResourceExt};
use serde::de::{DeserializeOwned, IgnoredAny};

use crate::context::MANAGER;
use crate::error::Error;
use crate::view::controller_uid;

/// Applies `object` (server-side, taking over its fields), so a repeat, or a changed field, is one
/// idempotent request; a refusal is the create of `kind` failing.
pub(crate) async fn apply<K, P>(api: &Api<K>, name: &str, object: &P, kind: &str) -> Result<(), Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
    P: serde::Serialize + std::fmt::Debug,
{
    match api.patch(name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(object)).await {
        Ok(_) => Ok(()),
        Err(source) => Err(Error::Create { kind: kind.into(), name: name.into(), source }),
    }
}

/// Creates `object`; `Ok(false)` when it already exists, which is success. The API server's answer
/// (the whole object, managed fields and all) is checked for its status and skipped, not built:
/// nothing reads it, and building it cost CPU at every create.
pub(crate) async fn create<K>(api: &Api<K>, object: &K) -> Result<bool, Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let params = PostParams { field_manager: Some(MANAGER.into()), ..Default::default() };
    let made = async {
        let body = serde_json::to_vec(object).map_err(kube::Error::SerdeError)?;
        let mut request =
            kube::core::Request::new(api.resource_url()).create(&params, body).map_err(kube::Error::BuildRequest)?;
        // As kube's own create marks it.
        request.extensions_mut().insert("create");
        api.clone().into_client().request::<IgnoredAny>(request).await
    };
    match made.await {
        Ok(IgnoredAny) => Ok(true),
        Err(e) if is_status(&e, 409) => Ok(false),
        Err(source) => Err(Error::Create { kind: K::kind(&()).into_owned(), name: object.name_any(), source }),
    }
}

/// Deletes the object `name` if its UID is still `uid` (a newer object of the same name is not
/// the one meant), with the object's own grace period: a pod's containers get to stop, and its
/// name stays taken until they have, so a replacement never runs beside it. `Ok(false)` when it
/// is already gone, which is success.
pub(crate) async fn delete<K>(api: &Api<K>, name: &str, uid: Option<&str>) -> Result<bool, Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    send_delete(api, name, uid, None).await
}

/// As [`delete`], but at once (grace period 0), for a pod whose kubelet can no longer stop it:
/// its name is free the moment this returns.
pub(crate) async fn delete_now<K>(api: &Api<K>, name: &str, uid: &str) -> Result<bool, Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    // Never forced without the UID: a newer pod of that name must get its grace period.
    if uid.is_empty() {
        return Ok(false);
    }
    send_delete(api, name, Some(uid), Some(0)).await
}

async fn send_delete<K>(api: &Api<K>, name: &str, uid: Option<&str>, grace: Option<u32>) -> Result<bool, Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let preconditions =
        uid.filter(|u| !u.is_empty()).map(|u| Preconditions { uid: Some(u.to_owned()), ..Default::default() });
    let params = DeleteParams { preconditions, grace_period_seconds: grace, ..Default::default() };
    match api.delete(name, &params).await {
        Ok(_) => Ok(true),
        // 409: the UID precondition failed, so the object meant is gone too.
        Err(e) if is_status(&e, 404) || is_status(&e, 409) => Ok(false),
        Err(source) => Err(Error::Delete { kind: K::kind(&()).into_owned(), name: name.to_owned(), source }),
    }
}

/// Deletes the object `name` only if the job `uid` controls it, and only that object (its UID as
/// precondition): a ServiceAccount or Role of that name the job does not own (made by hand, or a
/// successor's) is left alone.
pub(crate) async fn delete_owned<K>(api: &Api<K>, name: &str, uid: &str) -> Result<(), Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let kind = K::kind(&()).into_owned();
    let found = api.get_metadata_opt(name).await;
    let found = found.map_err(|source| Error::Delete { kind, name: name.to_owned(), source })?;
    match found {
        Some(found) if controller_uid(&found.metadata) == Some(uid) => {
            delete(api, name, found.metadata.uid.as_deref()).await.map(|_| ())
        }
        _ => Ok(()),
    }
}

/// Creates one of the job `uid`'s objects; `Ok(false)` when it exists already. One that exists
/// must be the job's own: not a predecessor's of the same name that garbage collection is about
/// to take away, nor an object no job owns (a Service of that name would take over the replica's
/// DNS name), which the caches, watching only what the orchestrator labels, may not show. Only
/// its metadata is read, and only then.
pub(crate) async fn create_owned<K>(api: &Api<K>, object: &K, uid: &str) -> Result<bool, Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    if create(api, object).await? {
        return Ok(true);
    }
    let name = object.name_any();
    let found = api.get_metadata_opt(&name).await;
    let kind = K::kind(&()).into_owned();
    match found.map_err(|source| Error::Create { kind: kind.clone(), name: name.clone(), source })? {
        Some(found) if controller_uid(&found.metadata) != Some(uid) => Err(Error::NameTaken { kind, name }),
        // Ours, or gone since: the next pass creates it again.
        _ => Ok(false),
    }
}
