//! Which pod changes start a pass. Most reports of a starting pod change nothing a pass reads:
//! its binding to a node, for one, moves only the resourceVersion of what the cache keeps (see
//! `view::PodView`). Each such report would cost a whole pass over its job (the plan, the status)
//! while the orchestrator shares the machine's cores with the API server it waits on. So a
//! report starts a pass only when the kept view changed; the cache takes every report all the
//! same.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use kube::runtime::watcher::Event;

use crate::view::PodView;

/// What each pod looked like when it last started a pass, by a hash of its UID.
#[derive(Default)]
pub struct PodChanges {
    seen: HashMap<u64, u64>,
}

impl PodChanges {
    /// Whether `event` can change what a pass decides. A pod that appears or goes, and every
    /// (re)list, always can.
    pub fn matter(&mut self, event: &Event<PodView>) -> bool {
        match event {
            Event::Apply(pod) => {
                let (key, fingerprint) = (hash(&pod.metadata.uid), fingerprint(pod));
                self.seen.insert(key, fingerprint) != Some(fingerprint)
            }
            Event::InitApply(pod) => {
                self.seen.insert(hash(&pod.metadata.uid), fingerprint(pod));
                true
            }
            Event::Delete(pod) => {
                self.seen.remove(&hash(&pod.metadata.uid));
                true
            }
            Event::Init => {
                // The list that follows reports every pod that is still there.
                self.seen.clear();
                true
            }
            Event::InitDone => true,
        }
    }
}

fn hash<T: Hash + ?Sized>(value: &T) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

/// Everything of the kept view but its resourceVersion.
fn fingerprint(pod: &PodView) -> u64 {
    let mut meta = pod.metadata.clone();
    meta.resource_version = None;
    let json = serde_json::to_vec(&(meta, &pod.status)).unwrap_or_default();
    hash(&(json, &pod.kept_labels, &pod.owner))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(resource_version: &str, phase: &str) -> PodView {
        let mut pod: PodView = serde_json::from_value(json!({
            "metadata": {"name": "job-collector-0", "namespace": "ns", "uid": "u1",
                         "resourceVersion": resource_version,
                         "labels": {di_api::contract::labels::JOB_NAME: "job"}},
            "status": {"phase": phase},
        }))
        .unwrap();
        pod.slim();
        pod
    }

    #[test]
    fn only_a_changed_view_starts_a_pass() {
        let mut changes = PodChanges::default();
        assert!(changes.matter(&Event::Apply(pod("1", "Pending"))), "a new pod");
        assert!(!changes.matter(&Event::Apply(pod("2", "Pending"))), "bound to a node: nothing a pass reads");
        assert!(changes.matter(&Event::Apply(pod("3", "Running"))), "running");
        assert!(changes.matter(&Event::Delete(pod("4", "Running"))), "gone");
        assert!(changes.matter(&Event::Apply(pod("5", "Running"))), "a pod of that UID seen anew");
    }

    #[test]
    fn a_relist_starts_afresh() {
        let mut changes = PodChanges::default();
        assert!(changes.matter(&Event::Apply(pod("1", "Running"))));
        assert!(changes.matter(&Event::Init));
        assert!(changes.matter(&Event::InitApply(pod("1", "Running"))));
        assert!(changes.matter(&Event::InitDone));
        assert!(!changes.matter(&Event::Apply(pod("2", "Running"))), "as the list showed it");
    }
}
