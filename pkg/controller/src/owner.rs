//! Which version controller references name a DIJob under: the group's preferred version as this
//! API server's discovery says, read once at start-up.

use di_api::contract::{GROUP, OWNER_VERSION};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIGroupList;
use kube::Client;
use tracing::{info, warn};

/// The DIJob group's preferred version on this API server. The garbage collector watches DIJobs
/// under it, and a reference naming another version makes it read every pod and Service of the
/// job back (see [`OWNER_VERSION`]). Our CRD makes it `OWNER_VERSION`; a cluster that kept
/// DI-orchestrator 0.2's CRD serves only `v1alpha1`, and a reference to a version that is not
/// served is one the collector cannot follow at all. Without an answer, `OWNER_VERSION`.
pub async fn preferred_version(client: &Client) -> String {
    match client.list_api_groups().await.map(|groups| preferred_in(&groups)) {
        Ok(Some(version)) => {
            if version == OWNER_VERSION {
                info!(version, "controller references name DIJobs under {GROUP}'s preferred version");
            } else {
                warn!(
                    version,
                    expected = OWNER_VERSION,
                    "{GROUP}'s preferred version is not the CRD's own: are DI-orchestrator 0.2's CRDs installed? \
                     Controller references follow the API server"
                );
            }
            version
        }
        Ok(None) => {
            warn!("the API server lists no {GROUP} group; controller references name {OWNER_VERSION}");
            OWNER_VERSION.into()
        }
        Err(error) => {
            warn!(%error, "discovery failed; controller references name {OWNER_VERSION}");
            OWNER_VERSION.into()
        }
    }
}

/// The preferred version of the DIJob group in a discovery answer.
fn preferred_in(groups: &APIGroupList) -> Option<String> {
    let group = groups.groups.iter().find(|g| g.name == GROUP)?;
    group.preferred_version.as_ref().map(|v| v.version.clone())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn groups(preferred: &str) -> APIGroupList {
        serde_json::from_value(json!({"groups": [
            {"name": "apps", "versions": [{"groupVersion": "apps/v1", "version": "v1"}],
             "preferredVersion": {"groupVersion": "apps/v1", "version": "v1"}},
            {"name": GROUP, "versions": [
                {"groupVersion": format!("{GROUP}/v2alpha1"), "version": "v2alpha1"},
                {"groupVersion": format!("{GROUP}/v1alpha1"), "version": "v1alpha1"}],
             "preferredVersion": {"groupVersion": format!("{GROUP}/{preferred}"), "version": preferred}},
        ]}))
        .expect("a discovery answer")
    }

    #[test]
    fn reads_the_groups_preferred_version() {
        assert_eq!(preferred_in(&groups("v2alpha1")).as_deref(), Some("v2alpha1"));
        assert_eq!(preferred_in(&groups("v1alpha1")).as_deref(), Some("v1alpha1"));
        assert_eq!(preferred_in(&APIGroupList { groups: vec![] }), None);
    }
}
