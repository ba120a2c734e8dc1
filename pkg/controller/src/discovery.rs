//! What the API server serves, asked at start-up to choose between ways of working. Only an
//! answer decides: an API server that is restarting, overloaded or out of reach is asked again,
//! since a choice made on a passing error would hold for the process's life.

use std::time::Duration;

use backon::Retryable;
use di_client::is_status;
use kube::Client;
use tracing::warn;

/// Whether asking again may get another answer: no answer at all (the connection, a timeout),
/// 429, a server error, or 409 (someone wrote between our read and our write). Any other 4xx
/// (403: the orchestrator may not) is the API server's decision, and an error of our own
/// (credentials, a body it cannot read) stays one.
pub fn is_transient(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => status.code == 409 || status.code == 429 || status.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => true,
        _ => false,
    }
}

/// Backoff for start-up questions: from 200 ms to 10 s, until the process stops.
pub fn pauses() -> backon::ExponentialBuilder {
    backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(10))
        .with_jitter()
        .without_max_times()
}

/// Whether the API server serves `plural` in `api_version` (a group's `group/version`), asked
/// once: a group it does not serve at all is a 404, which is an answer.
pub async fn serves_once(client: &Client, api_version: &str, plural: &str) -> Result<bool, kube::Error> {
    match client.list_api_group_resources(api_version).await {
        Ok(list) => Ok(list.resources.iter().any(|r| r.name == plural)),
        Err(e) if is_status(&e, 404) => Ok(false),
        Err(e) => Err(e),
    }
}

/// As [`serves_once`], asked again after a passing error; fails only on an error that will not
/// pass (a 403: the orchestrator may not even ask).
pub async fn serves(client: &Client, api_version: &str, plural: &str) -> Result<bool, kube::Error> {
    (|| serves_once(client, api_version, plural))
        .retry(pauses())
        .when(is_transient)
        .notify(|error, wait| warn!(%error, ?wait, "asking the API server whether it serves {api_version} {plural}; trying again"))
        .await
}
