//! Waiting for the cluster: on a watched object's condition (`await_condition`), bounded by
//! `tokio::time::timeout`, so a wait answers as soon as the object changes and never outlives
//! its timeout. `probe` is for what can only be asked, not watched.

use std::fmt::Debug;
use std::future::Future;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use di_api::{DIJob, Phase};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::wait::{Condition, await_condition};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::failed::Marked;

/// Why a wait ended without its condition.
#[derive(Debug, thiserror::Error)]
pub enum WaitError {
    #[error("not within {}s", .0.as_secs())]
    TimedOut(Duration),
    /// The watch failed; its error is the source.
    #[error("the watch failed")]
    Watch(#[from] kube::runtime::wait::Error),
}

/// Waits until the object `name` meets `cond`, at most `timeout`; answers it as it was then
/// (`None`: absent, when `cond` holds for an absent object).
pub async fn until<K>(
    api: &Api<K>,
    name: &str,
    timeout: Duration,
    cond: impl Condition<K>,
) -> Result<Option<K>, WaitError>
where
    K: Clone + Debug + Send + DeserializeOwned + Resource + 'static,
{
    let met = tokio::time::timeout(timeout, await_condition(api.clone(), name, cond)).await;
    Ok(met.map_err(|_| WaitError::TimedOut(timeout))??)
}

/// Whether a job is Running with every desired replica ready.
pub fn converged(job: &DIJob) -> bool {
    let Some(status) = &job.status else { return false };
    // Every pod the job wants is ready, a role job's coordinator too: the job runs once its
    // container does, and it is ready only once its sidecar answers its probe.
    let all_ready = status.replicas.is_none_or(|wanted| status.ready_replicas == Some(wanted));
    let running_ready = status.phase == Some(Phase::Running) && all_ready;
    // What the status counts is checked against the spec, so a status from before a scaling
    // never passes for after.
    if job.spec.is_task_job() {
        let want = di_api::tasks::pod_count(&di_api::tasks::tasks(job)) as i32;
        return running_ready && status.replicas == Some(want);
    }
    let ready = |s: &Option<String>, desired: i32| s.as_deref().is_none_or(|s| s == format!("{desired}/{desired}"));
    running_ready
        && ready(&status.collectors, job.spec.collector_replicas())
        && ready(&status.learners, job.spec.learner_replicas())
}

/// Why a job failed (its Failed condition's message, empty without one); `None` while it has
/// not.
pub fn failure(job: &DIJob) -> Option<String> {
    let status = job.status.as_ref().filter(|s| s.phase == Some(Phase::Failed))?;
    let condition = status.conditions.iter().find(|c| c.type_ == "Failed");
    Some(condition.and_then(|c| c.message.clone()).unwrap_or_default())
}

/// How a job a wait followed ended up.
#[derive(Debug)]
pub enum Settled {
    /// Running with every replica ready (boxed: a job is large beside the other answers).
    Running(Box<DIJob>),
    Failed {
        reason: String,
    },
    Deleted,
}

/// Follows the job until it runs with every replica ready, fails or is deleted, at most
/// `timeout`. `seen` gets every version of the job observed, in order, to show progress.
pub async fn until_settled(
    api: &Api<DIJob>,
    name: &str,
    timeout: Duration,
    seen: impl FnMut(&DIJob),
) -> Result<Settled, WaitError> {
    // A condition is called through a shared reference.
    let seen = Mutex::new(seen);
    let settled = |job: Option<&DIJob>| match job {
        Some(job) => {
            (seen.lock().unwrap_or_else(PoisonError::into_inner))(job);
            converged(job) || failure(job).is_some()
        }
        None => true,
    };
    Ok(match until(api, name, timeout, settled).await? {
        None => Settled::Deleted,
        Some(job) => match failure(&job) {
            Some(reason) => Settled::Failed { reason },
            None => Settled::Running(Box::new(job)),
        },
    })
}

/// Waits until every marked pod runs a new incarnation (see [`crate::failed::replaced`]), at
/// most `timeout`.
pub async fn until_replaced(pods: &Api<Pod>, marked: &[Marked], timeout: Duration) -> Result<(), WaitError> {
    let each = marked.iter().map(|(name, old)| {
        let replaced =
            move |pod: Option<&Pod>| pod.is_some_and(|p| p.uid() != *old && p.metadata.deletion_timestamp.is_none());
        await_condition(pods.clone(), name, replaced)
    });
    let all = tokio::time::timeout(timeout, futures::future::try_join_all(each)).await;
    all.map_err(|_| WaitError::TimedOut(timeout))??;
    Ok(())
}

/// A probe that did not succeed in time, and its last failure (none when no try ended).
#[derive(Debug)]
pub struct Unanswered<E> {
    pub last: Option<E>,
}

/// Tries `attempt` every `every` until it succeeds, at most `timeout`.
pub async fn probe<T, E, F>(
    timeout: Duration,
    every: Duration,
    mut attempt: impl FnMut() -> F,
) -> Result<T, Unanswered<E>>
where
    F: Future<Output = Result<T, E>>,
{
    let mut last = None;
    let tries = async {
        loop {
            match attempt().await {
                Ok(answer) => return answer,
                Err(e) => last = Some(e),
            }
            tokio::time::sleep(every).await;
        }
    };
    let answered = tokio::time::timeout(timeout, tries).await;
    answered.map_err(|_| Unanswered { last })
}

/// Answers in a row that make a webhook settled (see [`until_webhook_settled`]).
pub const SETTLED_ANSWERS: u32 = 12;
/// The pause between two of those answers.
pub const SETTLED_EVERY: Duration = Duration::from_millis(250);

/// Asks the orchestrator's admission webhook once: a dry-run create of a DIJob in `namespace`
/// goes through it (and through the API server's whole admission chain) and is accepted.
pub async fn webhook_answers(client: &kube::Client, namespace: &str) -> Result<(), kube::Error> {
    let job: DIJob = serde_json::from_value(serde_json::json!({
        "apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJob",
        "metadata": {"name": "di-webhook-probe", "namespace": namespace},
        "spec": {"coordinator": {"template": {"spec": {"containers": [{"name": "di-container", "image": "probe"}]}}}},
    }))
    .expect("the probe is a DIJob");
    let api: Api<DIJob> = Api::namespaced(client.clone(), namespace);
    let params = kube::api::PostParams { dry_run: true, ..Default::default() };
    api.create(&params, &job).await.map(|_| ())
}

/// Waits until the webhook has answered [`SETTLED_ANSWERS`] times in a row, [`SETTLED_EVERY`]
/// apart, at most `timeout`. One answer is not enough: a new pod's address (or a killed one's
/// absence) reaches kube-proxy's rules a moment after the pod is ready, and until then a write of
/// a DIJob can be refused (seen on kind right after a deploy and after a restart).
pub async fn until_webhook_settled(
    client: &kube::Client,
    namespace: &str,
    timeout: Duration,
) -> Result<(), Unanswered<kube::Error>> {
    settled(timeout, SETTLED_ANSWERS, SETTLED_EVERY, || webhook_answers(client, namespace)).await
}

/// Calls `ask` until it has succeeded `in_a_row` times in a row, `every` apart, at most `timeout`.
/// One try each: a retry inside a try could hide a dead endpoint behind a live one.
pub async fn settled<E, F>(
    timeout: Duration,
    in_a_row: u32,
    every: Duration,
    mut ask: impl FnMut() -> F,
) -> Result<(), Unanswered<E>>
where
    F: Future<Output = Result<(), E>>,
{
    let mut last = None;
    let asking = async {
        let mut answered = 0;
        while answered < in_a_row {
            match ask().await {
                Ok(()) => answered += 1,
                Err(e) => {
                    answered = 0;
                    last = Some(e);
                }
            }
            if answered < in_a_row {
                tokio::time::sleep(every).await;
            }
        }
    };
    tokio::time::timeout(timeout, asking).await.map_err(|_| Unanswered { last })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn job(status: serde_json::Value) -> DIJob {
        serde_json::from_value(json!({
            "apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJob",
            "metadata": {"name": "j", "namespace": "ns"},
            "spec": {"collector": {"replicas": 4, "template": {}}, "learner": {"replicas": 1, "template": {}}},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn convergence_is_running_with_every_replica_ready() {
        assert!(converged(&job(json!({"phase": "Running", "collectors": "4/4", "learners": "1/1"}))));
        assert!(!converged(&job(json!({"phase": "Running", "collectors": "3/4", "learners": "1/1"}))));
        assert!(!converged(&job(json!({"phase": "Created", "collectors": "4/4", "learners": "1/1"}))));
        assert!(!converged(&job(json!({}))));
        let counted = |ready: i32| json!({"phase": "Running", "collectors": "4/4", "learners": "1/1", "replicas": 6, "readyReplicas": ready});
        assert!(converged(&job(counted(6))));
        assert!(!converged(&job(counted(5))), "the coordinator not ready yet");
    }

    #[test]
    fn a_failure_gives_its_reason() {
        let failed = json!({"phase": "Failed", "conditions": [{"type": "Failed", "status": "True", "message": "coordinator exited 1"}]});
        assert_eq!(failure(&job(failed)).as_deref(), Some("coordinator exited 1"));
        assert_eq!(failure(&job(json!({"phase": "Failed"}))).as_deref(), Some(""));
        assert_eq!(failure(&job(json!({"phase": "Running"}))), None);
    }

    #[tokio::test(start_paused = true)]
    async fn settled_means_answers_in_a_row() {
        // Fails on the 3rd and 5th asks: settled after the 5th, by 3 answers in a row.
        let mut asks = 0;
        let answer = settled(Duration::from_secs(10), 3, Duration::from_secs(1), || {
            asks += 1;
            let now = asks;
            async move { if now == 3 || now == 5 { Err(now) } else { Ok(()) } }
        })
        .await;
        assert!(answer.is_ok());
        assert_eq!(asks, 8);
        let never =
            settled(Duration::from_secs(10), 3, Duration::from_secs(1), || async { Err::<(), _>("down") }).await;
        assert_eq!(never.unwrap_err().last, Some("down"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_probe_answers_its_first_success_or_its_last_failure() {
        let mut tries = 0;
        let answer = probe(Duration::from_secs(10), Duration::from_secs(1), || {
            tries += 1;
            let now = tries;
            async move { if now < 3 { Err(now) } else { Ok(now) } }
        })
        .await;
        assert_eq!(answer.unwrap(), 3);
        let never = probe(Duration::from_millis(2500), Duration::from_secs(1), || async { Err::<(), _>("no") }).await;
        assert_eq!(never.unwrap_err().last, Some("no"));
    }
}
