//! What a test saw happen to pods over time, which no list can show: every UID a pod name has
//! had (a pod deleted and created again under its name shows twice).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};

use crate::cluster::within;
use crate::scenario::WAIT;

pub type Uids = Arc<Mutex<BTreeMap<String, BTreeSet<String>>>>;

/// Every UID each pod of the namespace has had, from a watch: a pod deleted and created again
/// shows as a second UID under its name, which no list of names can show since the API server
/// never holds two pods of one name. Returns once the watch has listed the namespace.
pub async fn pod_uids(pods: &Api<Pod>) -> Uids {
    let seen = Uids::default();
    let record = seen.clone();
    let (listed, on_listed) = futures::channel::oneshot::channel();
    let mut listed = Some(listed);
    let events = watcher(pods.clone(), watcher::Config::default()).default_backoff();
    tokio::spawn(events.for_each(move |event| {
        match event {
            Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => {
                let uid = pod.uid().unwrap_or_default();
                record.lock().unwrap().entry(pod.name_any()).or_default().insert(uid);
            }
            Ok(watcher::Event::InitDone) => {
                if let Some(listed) = listed.take() {
                    let _ = listed.send(());
                }
            }
            _ => {}
        }
        std::future::ready(())
    }));
    within(WAIT, "the pod watch to list the namespace", on_listed).await.unwrap();
    seen
}

/// Fails unless every pod ever seen is one of `expected`, created once: what the watch saw, and
/// `listed` (a list the watch may not have caught up with yet).
pub fn created_once(created: &Uids, listed: &[Pod], expected: &[String], when: &str) {
    let mut seen = created.lock().unwrap().clone();
    for pod in listed {
        seen.entry(pod.name_any()).or_default().insert(pod.uid().unwrap());
    }
    let twice: BTreeMap<_, _> = seen.iter().filter(|(_, uids)| uids.len() > 1).collect();
    assert!(twice.is_empty(), "{when}: pods created more than once: {twice:?}");
    let names: BTreeSet<&String> = seen.keys().collect();
    assert_eq!(names, expected.iter().collect(), "{when}: pods of other names");
}
