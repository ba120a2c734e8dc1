//! Waiting until a deleted job is gone with everything it owned: `kubectl di delete --wait`
//! returns when the name can be used again without meeting the old job's pods.

use std::collections::BTreeSet;
use std::pin::pin;
use std::time::Duration;

use anyhow::Context;
use di_api::DIJob;
use di_api::contract::labels;
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::wait::{await_condition, conditions};
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Api, ResourceExt};

/// Waits, up to `timeout`, until the job with `uid` and every pod it controlled are gone.
pub async fn until_gone(
    jobs: &Api<DIJob>,
    pods: &Api<Pod>,
    name: &str,
    uid: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    let both = async {
        await_condition(jobs.clone(), name, conditions::is_deleted(uid)).await.context("watching the DIJob")?;
        pods_gone(pods, name, uid).await.context("watching the job's pods")
    };
    tokio::time::timeout(timeout, both)
        .await
        .with_context(|| format!("DIJob {name} or its pods still exist after {}s", timeout.as_secs()))?
}

/// Follows the pods labelled for `job` until none controlled by `uid` is left.
async fn pods_gone(pods: &Api<Pod>, job: &str, uid: &str) -> Result<(), watcher::Error> {
    let config = watcher::Config::default().labels(&format!("{}={job}", labels::JOB_NAME));
    let mut events = pin!(watcher(pods.clone(), config));
    let (mut left, mut listing) = (None::<BTreeSet<String>>, BTreeSet::new());
    while let Some(event) = events.try_next().await? {
        match event {
            Event::Init => listing.clear(),
            Event::InitApply(pod) if controlled_by(&pod, uid) => {
                listing.insert(pod.name_any());
            }
            Event::InitDone => left = Some(std::mem::take(&mut listing)),
            Event::Apply(pod) if controlled_by(&pod, uid) => {
                left.get_or_insert_default().insert(pod.name_any());
            }
            Event::Delete(pod) => {
                left.get_or_insert_default().remove(&pod.name_any());
            }
            _ => {}
        }
        if left.as_ref().is_some_and(BTreeSet::is_empty) {
            break;
        }
    }
    Ok(())
}

/// Whether `uid` is the pod's controller: a job of the same name submitted since owns its own.
fn controlled_by(pod: &Pod, uid: &str) -> bool {
    pod.owner_references().iter().any(|r| r.controller == Some(true) && r.uid == uid)
}
