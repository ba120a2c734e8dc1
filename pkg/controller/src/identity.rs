//! The replica endpoints' identity at the edges: which one this API server allows, chosen once at
//! start-up (see `desired::identity`; which namespaces' shared identity exists is kept in
//! `context::Namespaces`).

use std::time::Duration;

use backon::Retryable;
use di_client::is_status;
use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use kube::{Api, Client};
use tracing::{info, warn};

use crate::context::MANAGER;
pub use crate::desired::identity::Identity;
use crate::desired::identity::{SHARED, policy, policy_binding};

/// What the operator asked for (`--replica-identity`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Choice {
    /// The admission policy where the API server has it, per-job RBAC elsewhere.
    #[default]
    Auto,
    /// The admission policy, or no start.
    Policy,
    /// Per-job RBAC.
    PerJob,
}

/// How long a changed policy takes to be enforced: each API server reloads policies about once a
/// second; twice that, and no coordinator runs as the shared identity before it holds.
const POLICY_RELOAD: Duration = Duration::from_secs(2);

/// Decides the identity and, for the policy, puts it in force (written only when it changed).
pub async fn choose(client: &Client, choice: Choice) -> Result<Identity, Unavailable> {
    if choice == Choice::PerJob {
        info!("replica endpoints get a ServiceAccount, Role and RoleBinding per job (--replica-identity per-job)");
        return Ok(Identity::PerJob);
    }
    let why_not = match put_policy_in_force(client).await {
        Ok(()) => {
            info!(
                policy = SHARED,
                "replica endpoints run as the namespace's {SHARED}, held to their own job by the admission policy"
            );
            return Ok(Identity::Policy);
        }
        Err(why_not) => why_not,
    };
    if choice == Choice::Policy {
        return Err(Unavailable(why_not));
    }
    warn!(reason = %why_not, "replica endpoints get a ServiceAccount, Role and RoleBinding per job");
    Ok(Identity::PerJob)
}

/// Applies the policy where the API server has its API, or says why it cannot. Only an answer
/// decides: an API server that is restarting, overloaded or out of reach is asked again (with
/// backoff, until the process stops), since falling back to per-job RBAC for good on a passing
/// error would cost every later job its RBAC writes.
async fn put_policy_in_force(client: &Client) -> Result<(), String> {
    let once = || async {
        if !crate::discovery::serves_once(client, "admissionregistration.k8s.io/v1", "validatingadmissionpolicies")
            .await?
        {
            return Ok(Err(
                "the API server has no admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy (Kubernetes 1.30+)"
                    .into(),
            ));
        }
        apply_policy(client).await.map(Ok)
    };
    let answer = once
        .retry(crate::discovery::pauses())
        .when(crate::discovery::is_transient)
        .notify(|error, wait| warn!(%error, ?wait, "asking the API server for the admission policy; trying again"))
        .await;
    answer.unwrap_or_else(|e| Err(format!("the admission policy could not be applied: {e}")))
}

/// Writes the policy and its binding as [`put_back`] does (one edited by hand, say relaxed to
/// `Warn`, is corrected rather than merged into an invalid `[Warn, Deny]`); waits for the API
/// servers to load them when either changed.
async fn apply_policy(client: &Client) -> Result<(), kube::Error> {
    let policies = Api::<ValidatingAdmissionPolicy>::all(client.clone());
    let bindings = Api::<ValidatingAdmissionPolicyBinding>::all(client.clone());
    let changed = put_back(&policies, policy()).await? | put_back(&bindings, policy_binding()).await?;
    if changed {
        info!("the admission policy {SHARED} changed: waiting {POLICY_RELOAD:?} for the API servers to load it");
        tokio::time::sleep(POLICY_RELOAD).await;
    }
    Ok(())
}

/// Keeps the policy and its binding as the orchestrator applies them, for as long as it runs: the
/// two are what holds every coordinator's sidecar to its own job, so one deleted or edited (a
/// cleanup script, `kubectl edit`) is put back within about a second of the change.
pub async fn keep_policy(client: Client) {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let config = watcher::Config::default().fields(&format!("metadata.name={SHARED}"));
    let policies = Api::<ValidatingAdmissionPolicy>::all(client.clone());
    let bindings = Api::<ValidatingAdmissionPolicyBinding>::all(client.clone());
    let changes = futures::stream::select(
        watcher(policies.clone(), config.clone()).default_backoff().map(|e| e.map(drop)),
        watcher(bindings.clone(), config).default_backoff().map(|e| e.map(drop)),
    );
    let mut changes = std::pin::pin!(changes);
    while let Some(change) = changes.next().await {
        if let Err(error) = change {
            warn!(%error, "watching the admission policy {SHARED}");
            continue;
        }
        for restored in [put_back(&policies, policy()).await, put_back(&bindings, policy_binding()).await] {
            if let Err(error) = restored {
                // The watch's next event, or its relist after an error, brings another try.
                warn!(%error, "restoring the admission policy {SHARED}");
            }
        }
    }
}

/// Writes `desired` over whatever is stored under its name, by a whole update: an apply would
/// keep another manager's entries in a set (`validationActions: [Warn]` beside our `Deny`). An
/// update that changes nothing is no write (the resourceVersion stays), so this ends the
/// keeper's loop. Says whether anything was written.
///
/// One deleted between the read and the update (a cleanup meeting a start) is created again:
/// its update's 404 is no answer about the API. A write meeting another writer's is a 409, which
/// callers retry.
async fn put_back<K>(api: &Api<K>, desired: K) -> Result<bool, kube::Error>
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    let params = kube::api::PostParams { field_manager: Some(MANAGER.into()), ..Default::default() };
    if let Some(live) = api.get_opt(SHARED).await? {
        let before = live.meta().resource_version.clone();
        let mut update = desired.clone();
        update.meta_mut().resource_version = before.clone();
        match api.replace(SHARED, &params, &update).await {
            Ok(written) => return Ok(written.meta().resource_version != before),
            Err(error) if is_status(&error, 404) => {}
            Err(error) => return Err(error),
        }
    }
    api.create(&params, &desired).await.map(|_| true)
}

/// The admission policy was asked for and cannot be had, and why.
#[derive(Debug, thiserror::Error)]
#[error("the replica endpoints' admission policy cannot be used: {0}")]
pub struct Unavailable(String);

#[cfg(test)]
mod tests {
    use di_testing::{Answer, Log};
    use serde_json::json;

    use super::*;

    /// A stored policy at resourceVersion 7, its update answered `put` (default: as if written
    /// unchanged), and the rest as the fake answers by default.
    fn stored(put: Option<(u16, &'static str)>) -> (Api<ValidatingAdmissionPolicy>, Log) {
        let stored = json!({"metadata": {"name": SHARED, "resourceVersion": "7"}});
        let (client, log) = di_testing::client(move |call| match (call.method.as_str(), put) {
            ("GET", _) | ("PUT", None) => Some(Answer::json(200, stored.clone())),
            ("PUT", Some((code, message))) => Some(Answer::status(code, message)),
            _ => None,
        });
        (Api::all(client), log)
    }

    /// The policy read back, then deleted by someone else before the update lands.
    #[tokio::test]
    async fn a_policy_deleted_between_read_and_update_is_created_again() {
        let (policies, log) = stored(Some((404, "validatingadmissionpolicies \"di-replicas\" not found")));
        assert!(put_back(&policies, policy()).await.expect("created again"), "a create is a write");
        let calls = log.calls();
        let methods: Vec<&str> = calls.iter().map(|c| c.method.as_str()).collect();
        assert_eq!(methods, ["GET", "PUT", "POST"]);
        assert_eq!(calls[1].body["metadata"]["resourceVersion"], "7", "the update is conditional on what was read");
        assert!(calls[2].body["metadata"].get("resourceVersion").is_none(), "a create carries no resourceVersion");
    }

    /// An update that finds nothing to change is no write: the keeper's loop ends there.
    #[tokio::test]
    async fn an_unchanged_policy_is_no_write() {
        let (policies, _) = stored(None);
        assert!(!put_back(&policies, policy()).await.expect("updated"));
    }

    /// Another writer's create or update first: a 409 for the caller's retry, not a create.
    #[tokio::test]
    async fn a_conflicting_update_is_left_to_the_retry() {
        let (policies, log) = stored(Some((409, "the object has been modified")));
        let error = put_back(&policies, policy()).await.unwrap_err();
        assert!(crate::discovery::is_transient(&error), "{error}");
        assert_eq!(log.calls().len(), 2);
    }
}
