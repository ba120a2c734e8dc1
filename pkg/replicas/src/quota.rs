//! A queued job's admission, as a scale-up meets it: a coordinator asking for more replicas than
//! Kueue admitted its job for is told so, naming the queue, and nothing is changed. (Written, the
//! extra replicas would only wait, since the reconciler never lets a queued job's pods outgrow
//! its admission, and the coordinator would wait for them in vain.)

use di_api::DIJob;
use di_client::Refusal;
use di_core::desired::Settings;
use di_core::queue::{beyond_room, queue_name, workload_kind, workload_name};
use k8s_openapi::api::core::v1::Pod;
use kube::api::DynamicObject;
use kube::{Api, ResourceExt};
use serde_json::Value;

use crate::endpoint::Endpoint;

/// What a scale-up of the job is checked against.
pub enum Admission {
    /// The job is in no queue, or its Workload is not made yet (it is made at the new size).
    Free,
    /// The job's Workload and its pods as they are.
    Queued { queue: String, workload: Value, pods: Vec<Pod> },
    /// The Workload could not be read (the endpoint's identity may lack `get` on Kueue's
    /// Workloads): the change is made, and the answer says that replicas past the admission wait.
    Unknown(String),
}

/// Reads what the endpoint's job's admission is.
pub async fn read(endpoint: &Endpoint) -> Admission {
    let job = match endpoint.jobs().get_opt(&endpoint.scope.job).await {
        Ok(Some(job)) => job,
        // The write that follows says the job is gone.
        Ok(None) => return Admission::Free,
        Err(e) => return Admission::Unknown(format!("the job could not be read ({e})")),
    };
    let Some(queue) = queue_name(&job) else { return Admission::Free };
    let api: Api<DynamicObject> =
        Api::namespaced_with(endpoint.client.clone(), &endpoint.scope.namespace, &workload_kind());
    let workload = match api.get_opt(&workload_name(&job)).await {
        Ok(Some(workload)) => workload,
        Ok(None) => return Admission::Free,
        Err(e) => return Admission::Unknown(format!("its Workload could not be read ({e})")),
    };
    let pods = match endpoint.pods().await {
        Ok(pods) => pods,
        Err(e) => return Admission::Unknown(format!("its pods could not be listed ({e})")),
    };
    match serde_json::to_value(workload) {
        Ok(workload) => Admission::Queued { queue: queue.to_owned(), workload, pods },
        Err(e) => Admission::Unknown(format!("its Workload could not be read ({e})")),
    }
}

/// Refuses `after` (the job `before` as a scale-up would leave it) when it asks for more than its
/// admission has room for, past what `before` already did (collectors a `kubectl scale` left
/// waiting do not make every later request fail); a note for the answer when the admission could
/// not be checked.
pub fn check(admission: &Admission, before: &DIJob, after: &DIJob) -> Result<Option<String>, Refusal> {
    let (queue, workload, pods) = match admission {
        Admission::Free => return Ok(None),
        Admission::Unknown(why) => {
            let note =
                format!("the job's admission by Kueue was not checked: {why}; replicas past what Kueue admitted wait");
            return Ok(Some(note));
        }
        Admission::Queued { queue, workload, pods } => (queue, workload, pods),
    };
    let pods: Vec<&Pod> = pods.iter().collect();
    // Settings shape no pod's count or resources; a multi-GPU learner's pods need its
    // AggregatorConfig, which the endpoint does not read, so learners split into DDP pods are not
    // counted here (the reconciler still holds them to the admission).
    let beyond = |job: &DIJob| {
        beyond_room(job, workload, &pods, None, &Settings::default())
            .map_err(|e| Refusal::Conflict(format!("the job as changed cannot be built: {e}")))
    };
    let already = beyond(before)?;
    let over: Vec<(String, u64)> = beyond(after)?
        .into_iter()
        .filter_map(|(set, n)| {
            let was = already.iter().find(|(s, _)| *s == set).map_or(0, |(_, n)| *n);
            (n > was).then(|| (set, n - was))
        })
        .collect();
    if over.is_empty() {
        return Ok(None);
    }
    let cluster_queue = workload["status"]["admission"]["clusterQueue"].as_str().unwrap_or("?");
    let past: Vec<String> = over.iter().map(|(set, n)| format!("{n} {set} pod(s)")).collect();
    Err(Refusal::Conflict(format!(
        "job {} runs in Kueue queue {queue}, admitted by ClusterQueue {cluster_queue}; this would need {} more \
         than its admission: nothing was changed. A queued job's pods never outgrow its admission: ask for fewer, \
         or delete the job and submit it again at the size it needs",
        after.name_any(),
        past.join(" and "),
    )))
}
