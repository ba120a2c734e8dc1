//! Marking a job's pods failed, for the reconciler to replace: what a coordinator's failure
//! report (`POST /replicas/failed`) and `kubectl di replicas restart` both do. A pod is named
//! with the UID of the incarnation reported in the job's replace annotation; the reconciler
//! deletes that incarnation and creates the pod again.

use std::collections::BTreeSet;

use di_api::DIJob;
use di_api::contract::{Role, annotations};
use k8s_openapi::api::core::v1::Pod;
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::Refusal;
use crate::update::{UpdateError, Written, update_job};
use crate::wire::Replicas;
use di_api::pod::role_of;

/// A pod marked failed: its name, and the UID of the incarnation that was reported (none when it
/// had none yet).
pub type Marked = (String, Option<String>);

/// A reported replica as a pod name: `pod`, `pod.namespace`, or `pod.namespace:port`.
pub fn pod_name_of(entry: &str) -> String {
    let entry = entry.trim();
    let entry = entry.strip_prefix("http://").unwrap_or(entry);
    let host = entry.rsplit_once(':').map_or(entry, |(h, _)| h);
    host.split('.').next().unwrap_or_default().to_owned()
}

/// The new value of the job's replace annotation for `report` and the pods it names. Entries
/// for pods that no longer run that incarnation are dropped.
pub fn report_failed(job: &DIJob, pods: &[Pod], report: &Replicas) -> Result<(String, Vec<String>), Refusal> {
    let live: Vec<&Pod> = pods.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect();
    let mut entries: BTreeSet<(String, String)> = job
        .annotations()
        .get(annotations::REPLACE)
        .map(|v| annotations::parse_replace(v))
        .unwrap_or_default()
        .into_iter()
        .filter(|(pod, uid)| live.iter().any(|p| &p.name_any() == pod && p.uid().as_ref() == Some(uid)))
        .collect();
    let mut named = vec![];
    for (list, roles, what) in [
        (&report.collectors, &[Role::Collector][..], "collector"),
        (&report.learners, &[Role::Learner, Role::Aggregator][..], "learner"),
    ] {
        for entry in list {
            let name = pod_name_of(entry);
            let pod = live
                .iter()
                .find(|p| p.name_any() == name && role_of(p).is_some_and(|r| roles.contains(&r)))
                .ok_or_else(|| Refusal::NotFound(format!("no {what} pod {name:?} in job {}", job.name_any())))?;
            entries.insert((name.clone(), pod.uid().unwrap_or_default()));
            named.push(name);
        }
    }
    Ok((annotations::format_replace(&entries.into_iter().collect::<Vec<_>>()), named))
}

/// Marks the pods `report` names failed (in the job of UID `uid`, when given), deciding on `pods` as listed before: a retry after a
/// conflicting write decides on the same incarnations. Answers every pod marked, in the order
/// of the report.
pub async fn mark_failed(
    api: &Api<DIJob>,
    name: &str,
    uid: Option<&str>,
    pods: &[Pod],
    report: &Replicas,
) -> Result<Written<Vec<Marked>>, UpdateError<Refusal>> {
    update_job(api, name, |job: &DIJob| {
        if let Some(uid) = uid {
            crate::same_job(job, uid)?;
        }
        let (value, named) = report_failed(job, pods, report)?;
        let marked = named
            .into_iter()
            .map(|n| {
                let uid = pods.iter().find(|p| p.name_any() == n).and_then(|p| p.uid());
                (n, uid)
            })
            .collect();
        Ok((json!({"metadata": {"annotations": {annotations::REPLACE: value}}}), marked))
    })
    .await
}

/// Whether every marked pod runs a new incarnation: its name is back with another UID.
pub fn replaced(marked: &[Marked], pods: &[Pod]) -> bool {
    marked.iter().all(|(name, uid)| {
        pods.iter().any(|p| &p.name_any() == name && p.uid() != *uid && p.metadata.deletion_timestamp.is_none())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reported_entries_become_pod_names() {
        for (entry, want) in [
            ("job-collector-1", "job-collector-1"),
            ("job-collector-1.ns", "job-collector-1"),
            ("job-collector-1.ns:22270", "job-collector-1"),
            ("http://job-learner-0.ns:22271", "job-learner-0"),
            ("http://job-learner-0", "job-learner-0"),
            ("http://job-learner-0.ns", "job-learner-0"),
            (" job-learner-0.ns.svc.cluster.local:22271 ", "job-learner-0"),
        ] {
            assert_eq!(pod_name_of(entry), want, "{entry}");
        }
    }

    fn pod(name: &str, role: &str, uid: &str) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": name, "uid": uid, "labels": {"replica-type": role}}}))
            .unwrap()
    }

    #[test]
    fn a_report_names_live_pods_of_its_roles() {
        let job: DIJob = serde_json::from_value(json!({
            "apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJob",
            "metadata": {"name": "j", "annotations": {annotations::REPLACE: "j-collector-9=gone"}},
            "spec": {"coordinator": {"template": {}}},
        }))
        .unwrap();
        let pods = [pod("j-collector-0", "collector", "c0"), pod("j-learner-0", "learner", "l0")];
        let report = Replicas {
            collectors: vec!["j-collector-0.ns:22270".into()],
            learners: vec!["j-learner-0".into()],
            ..Default::default()
        };
        let (value, named) = report_failed(&job, &pods, &report).unwrap();
        assert_eq!(named, ["j-collector-0", "j-learner-0"]);
        let entries = annotations::parse_replace(&value);
        assert_eq!(entries, [("j-collector-0".to_owned(), "c0".to_owned()), ("j-learner-0".into(), "l0".into())]);

        // A learner is not reported as a collector.
        let wrong = Replicas { collectors: vec!["j-learner-0".into()], ..Default::default() };
        let refusal = report_failed(&job, &pods, &wrong).unwrap_err();
        assert_eq!(refusal, Refusal::NotFound("no collector pod \"j-learner-0\" in job j".into()));

        let marked = [("j-collector-0".to_owned(), Some("c0".to_owned()))];
        assert!(!replaced(&marked, &pods));
        assert!(replaced(&marked, &[pod("j-collector-0", "collector", "c1")]));
    }
}
