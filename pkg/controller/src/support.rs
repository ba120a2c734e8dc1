//! The oldest Kubernetes the orchestrator runs on, checked once at start-up: an older API server
//! would take its jobs and never run them.

use k8s_openapi::apimachinery::pkg::version::Info;
use kube::Client;
use tracing::{info, warn};

/// Kubernetes 1.29: a coordinator's replica endpoint is a native sidecar (an init container with
/// `restartPolicy: Always`), on by default from 1.29. An older API server drops the field, and
/// the endpoint, run as a plain init container, never ends: the coordinator would never start.
/// Everything newer is optional and chosen at start-up where the API server has it (the admission
/// policy of 1.30, gang scheduling's PodGroups of 1.37).
pub const OLDEST: (u32, u32) = (1, 29);

/// Why an API server is too old, for the operator's log and exit.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "the API server runs Kubernetes {found}, older than {}.{}, the oldest this orchestrator supports: \
     coordinators' replica endpoints are native sidecars (init containers with restartPolicy: Always, \
     on by default from 1.29), which an older API server drops, so no coordinator would ever start. \
     Upgrade the cluster, or keep DI-orchestrator 1.x on it",
    OLDEST.0,
    OLDEST.1
)]
pub struct TooOld {
    pub found: String,
}

/// The API server's release as (major, minor), where it can be read. Managed clusters report
/// minors such as `29+`: the digits count.
pub fn release(info: &Info) -> Option<(u32, u32)> {
    let number = |s: &str| s.chars().take_while(char::is_ascii_digit).collect::<String>().parse().ok();
    Some((number(&info.major)?, number(&info.minor)?))
}

/// Whether `info` is recent enough. A version that cannot be read is let through: a build of
/// Kubernetes with a custom version string is not evidence of an old one.
pub fn check(info: &Info) -> Result<(), TooOld> {
    match release(info) {
        Some(found) if found < OLDEST => Err(TooOld { found: info.git_version.clone() }),
        _ => Ok(()),
    }
}

/// Why start-up stops at the version check.
#[derive(Debug, thiserror::Error)]
pub enum Unsupported {
    #[error(transparent)]
    TooOld(#[from] TooOld),
    #[error("asking the API server its version")]
    Asking(#[source] kube::Error),
}

/// Asks the API server its version and refuses one older than [`OLDEST`].
pub async fn require(client: &Client) -> Result<(), Unsupported> {
    let info = client.apiserver_version().await.map_err(Unsupported::Asking)?;
    check(&info)?;
    match release(&info) {
        Some(_) => info!(version = %info.git_version, "API server"),
        None => warn!(
            version = %info.git_version, major = %info.major, minor = %info.minor,
            "the API server's version cannot be read; assuming it is at least {}.{}", OLDEST.0, OLDEST.1
        ),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(major: &str, minor: &str, git: &str) -> Info {
        Info { major: major.into(), minor: minor.into(), git_version: git.into(), ..Default::default() }
    }

    #[test]
    fn refuses_what_is_older_than_the_oldest_supported() {
        let error = check(&info("1", "28", "v1.28.15")).unwrap_err();
        assert_eq!(error, TooOld { found: "v1.28.15".into() });
        let message = error.to_string();
        assert!(message.contains("v1.28.15") && message.contains("older than 1.29"), "{message}");
        assert!(message.contains("restartPolicy: Always"), "says why: {message}");
    }

    #[test]
    fn takes_the_oldest_supported_and_newer() {
        for (major, minor) in [("1", "29"), ("1", "30"), ("1", "37"), ("2", "0")] {
            assert_eq!(check(&info(major, minor, "v")), Ok(()), "{major}.{minor}");
        }
    }

    #[test]
    fn reads_managed_clusters_minors() {
        assert_eq!(release(&info("1", "29+", "v1.29.8-gke.1")), Some((1, 29)));
        assert!(check(&info("1", "27+", "v1.27.16-eks-a")).is_err());
    }

    #[test]
    fn lets_an_unreadable_version_through() {
        assert_eq!(release(&info("", "", "v0.0.0-master")), None);
        assert_eq!(check(&info("", "", "v0.0.0-master")), Ok(()));
    }
}
