//! Every pod of a namespace over a whole fault, from a watch: which UIDs each name had, in what
//! order, and how each went. A replica's name is alive twice when a new UID of it appears while
//! an older one is still there, or when a running pod is removed without ever being seen
//! terminating (a forced delete: on a real node its container would still run beside the
//! replacement). Between a watch's end and its next list events are not seen: such gaps are
//! counted, and what changed in one is judged only by what the list shows.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use tokio::task::JoinHandle;

use crate::follow::{Steady, Ticks};

/// One pod UID's first sighting.
#[derive(Clone, Debug)]
pub struct Creation {
    pub name: String,
    pub uid: String,
    /// The UID of the pod's controller (its DIJob), if any.
    pub owner: Option<String>,
    /// The resourceVersion it was first seen at: its creation's, unless first seen in a list.
    pub revision: u64,
}

/// The last state seen of a pod that is there.
#[derive(Clone, Debug)]
struct Present {
    uid: String,
    running: bool,
    terminating: bool,
}

#[derive(Default)]
pub struct History {
    present: BTreeMap<String, Present>,
    /// Pods of a list in progress, by name.
    listing: Option<BTreeMap<String, Pod>>,
    lists: usize,
    uids: HashSet<String>,
    pub creations: Vec<Creation>,
    /// A new UID of a name that appeared while an older one was there.
    pub twice: Vec<String>,
    /// Running pods removed without having been seen terminating.
    pub forced: Vec<String>,
}

impl History {
    pub fn event(&mut self, event: watcher::Event<Pod>) {
        match event {
            watcher::Event::Apply(pod) => self.apply(&pod),
            watcher::Event::Delete(pod) => self.delete(&pod),
            watcher::Event::Init => self.listing = Some(BTreeMap::new()),
            watcher::Event::InitApply(pod) => {
                self.listing.get_or_insert_default().insert(pod.name_any(), pod);
            }
            watcher::Event::InitDone => self.listed(),
        }
    }

    /// Lists after the first: times the watch ended and events may have gone unseen.
    pub fn gaps(&self) -> usize {
        self.lists.saturating_sub(1)
    }

    fn apply(&mut self, pod: &Pod) {
        let (name, uid) = (pod.name_any(), pod.uid().unwrap_or_default());
        if let Some(old) = self.present.get(&name).filter(|old| old.uid != uid) {
            self.twice.push(format!("{name}: UID {uid} appeared while {} was still there", old.uid));
        }
        self.record(pod);
    }

    fn delete(&mut self, pod: &Pod) {
        let name = pod.name_any();
        let Some(seen) = self.present.get(&name).filter(|p| Some(&p.uid) == pod.uid().as_ref()) else { return };
        if seen.running && !seen.terminating {
            self.forced.push(format!("{name} (UID {}) was removed while running, never terminating", seen.uid));
        }
        self.present.remove(&name);
    }

    /// A list replaced what was known: what it lacks went unseen, and what it has is there now.
    fn listed(&mut self) {
        let listing = self.listing.take().unwrap_or_default();
        self.lists += 1;
        self.present.clear();
        for pod in listing.values() {
            self.record(pod);
        }
    }

    fn record(&mut self, pod: &Pod) {
        let uid = pod.uid().unwrap_or_default();
        if self.uids.insert(uid.clone()) {
            self.creations.push(Creation {
                name: pod.name_any(),
                uid: uid.clone(),
                owner: pod.owner_references().iter().find(|r| r.controller == Some(true)).map(|r| r.uid.clone()),
                revision: pod.resource_version().and_then(|v| v.parse().ok()).unwrap_or(0),
            });
        }
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        let present =
            Present { uid, running: phase == Some("Running"), terminating: pod.metadata.deletion_timestamp.is_some() };
        self.present.insert(pod.name_any(), present);
    }

    /// Names created more than once for the same owner, with how often.
    pub fn created_twice(&self) -> Vec<String> {
        let mut counts: BTreeMap<(String, String), usize> = BTreeMap::new();
        for c in &self.creations {
            *counts.entry((c.name.clone(), c.owner.clone().unwrap_or_default())).or_default() += 1;
        }
        counts.into_iter().filter(|(_, n)| *n > 1).map(|((name, _), n)| format!("{name} created {n} times")).collect()
    }
}

/// The history of one namespace's pods, kept by a watch of its own.
pub struct Monitor {
    history: Arc<Mutex<History>>,
    task: JoinHandle<()>,
}

impl Monitor {
    pub fn start(pods: Api<Pod>, ticks: Ticks) -> Monitor {
        let history = Arc::new(Mutex::new(History::default()));
        let events = watcher(pods, watcher::Config::default()).backoff(Steady);
        let seen = history.clone();
        let task = tokio::spawn(events.for_each(move |event| {
            // An error is the fault at work: the backoff has the watch try again.
            if let Ok(event) = event {
                seen.lock().unwrap().event(event);
                ticks.send_modify(|n| *n += 1);
            }
            std::future::ready(())
        }));
        Monitor { history, task }
    }

    /// Reads the history as it is now.
    pub fn read<T>(&self, f: impl FnOnce(&History) -> T) -> T {
        f(&self.history.lock().unwrap())
    }

    /// Pod UIDs seen so far: the fault's progress.
    pub fn created(&self) -> usize {
        self.read(|h| h.creations.len())
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(name: &str, uid: &str, phase: &str, terminating: bool) -> Pod {
        let mut pod =
            json!({"metadata": {"name": name, "uid": uid, "resourceVersion": "7"}, "status": {"phase": phase}});
        if terminating {
            pod["metadata"]["deletionTimestamp"] = json!("2025-01-01T00:00:00Z");
        }
        serde_json::from_value(pod).unwrap()
    }

    #[test]
    fn a_graceful_replacement_is_no_name_alive_twice() {
        let mut h = History::default();
        h.event(watcher::Event::Init);
        h.event(watcher::Event::InitDone);
        h.event(watcher::Event::Apply(pod("a", "1", "Running", false)));
        h.event(watcher::Event::Apply(pod("a", "1", "Running", true)));
        h.event(watcher::Event::Delete(pod("a", "1", "Running", true)));
        h.event(watcher::Event::Apply(pod("a", "2", "Pending", false)));
        assert!(h.twice.is_empty() && h.forced.is_empty());
        assert_eq!(h.creations.len(), 2);
        assert_eq!(h.gaps(), 0);
    }

    #[test]
    fn a_forced_delete_and_an_overlap_are_caught() {
        let mut h = History::default();
        h.event(watcher::Event::Apply(pod("a", "1", "Running", false)));
        h.event(watcher::Event::Delete(pod("a", "1", "Running", true)));
        assert_eq!(h.forced.len(), 1, "removed while running without terminating first");
        h.event(watcher::Event::Apply(pod("b", "1b", "Running", false)));
        h.event(watcher::Event::Apply(pod("b", "2b", "Running", false)));
        assert_eq!(h.twice.len(), 1);
        // A failed pod goes at once: no grace is owed to a container that ended.
        h.event(watcher::Event::Apply(pod("c", "1c", "Failed", false)));
        h.event(watcher::Event::Delete(pod("c", "1c", "Failed", false)));
        assert_eq!(h.forced.len(), 1);
    }

    #[test]
    fn a_list_after_a_gap_is_judged_only_by_what_it_shows() {
        let mut h = History::default();
        h.event(watcher::Event::Apply(pod("a", "1", "Running", false)));
        h.event(watcher::Event::Init);
        h.event(watcher::Event::InitApply(pod("a", "2", "Running", false)));
        h.event(watcher::Event::InitDone);
        assert!(h.twice.is_empty() && h.forced.is_empty());
        assert_eq!(h.creations.len(), 2);
        assert_eq!(h.gaps(), 0, "the first list is no gap");
        h.event(watcher::Event::Init);
        h.event(watcher::Event::InitDone);
        assert_eq!(h.gaps(), 1);
        h.event(watcher::Event::Apply(pod("a", "2", "Running", false)));
        assert_eq!(h.created_twice(), ["a created 2 times"], "two UIDs of one name, neither with an owner");
    }
}
