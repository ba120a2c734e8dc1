//! Which cached pods or services belong to which job, kept from the same watch events that fill
//! the cache. A pass then reads its own job's few objects instead of scanning every managed
//! object of the cluster, which made each pass cost O(objects) and a busy cluster O(objects²).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::Event;

use crate::view::JobMember;

/// A job, by namespace and name.
type JobKey = (String, String);

/// Names of each job's objects. An object relabelled to another job (nobody does that to
/// managed objects) leaves a stale name behind, which reads skip, until the next relist.
#[derive(Default)]
struct Entries(HashMap<JobKey, BTreeSet<String>>);

impl Entries {
    fn file<K: JobMember>(&mut self, object: &K) {
        if let Some(job) = object.job() {
            let key = (object.namespace().unwrap_or_default(), job.to_owned());
            self.0.entry(key).or_default().insert(object.name_any());
        }
    }

    fn unfile<K: JobMember>(&mut self, object: &K) {
        let Some(job) = object.job() else { return };
        let key = (object.namespace().unwrap_or_default(), job.to_owned());
        if let Some(names) = self.0.get_mut(&key) {
            names.remove(&object.name_any());
            if names.is_empty() {
                self.0.remove(&key);
            }
        }
    }
}

#[derive(Default)]
struct State {
    current: Entries,
    /// Filled while the watch relists, then swapped in whole.
    relisting: Option<Entries>,
}

/// The index of one kind of object; clones share it.
#[derive(Clone, Default)]
pub struct JobIndex(Arc<RwLock<State>>);

impl JobIndex {
    /// Follows one watch event, as the cache's writer does.
    pub fn apply<K: JobMember>(&self, event: &Event<K>) {
        let mut state = self.0.write().expect("index lock");
        match event {
            Event::Apply(object) => state.current.file(object),
            Event::Delete(object) => state.current.unfile(object),
            Event::Init => state.relisting = Some(Entries::default()),
            Event::InitApply(object) => state.relisting.get_or_insert_with(Entries::default).file(object),
            Event::InitDone => {
                if let Some(fresh) = state.relisting.take() {
                    state.current = fresh;
                }
            }
        }
    }

    /// The cached objects that name a job in their label, split by whether the job (by `uid`)
    /// is their controller. The one place where ownership is decided: a pass sees only
    /// `owned`, and `foreign` only as names it must not take.
    pub fn members<K>(&self, store: &Store<K>, namespace: &str, job: &str, uid: &str) -> Members<K>
    where
        K: JobMember<DynamicType = ()> + Clone + 'static,
    {
        let state = self.0.read().expect("index lock");
        let mut members = Members { owned: vec![], foreign: vec![] };
        let Some(names) = state.current.0.get(&(namespace.to_owned(), job.to_owned())) else { return members };
        let cached = names.iter().filter_map(|name| store.get(&ObjectRef::new(name).within(namespace)));
        for object in cached.filter(|object| object.job() == Some(job)) {
            if object.owner() == Some(uid) {
                members.owned.push(object);
            } else {
                members.foreign.push(object.name_any());
            }
        }
        members
    }
}

/// A job's cached objects: its own, and the names of those that carry its label but another
/// controller (a predecessor of the same name still being collected, or someone else's).
pub struct Members<K> {
    pub owned: Vec<Arc<K>>,
    pub foreign: Vec<String>,
}

#[cfg(test)]
mod tests {
    use di_api::contract::labels;
    use k8s_openapi::api::core::v1::Pod;
    use kube::runtime::reflector;
    use serde_json::json;

    use super::*;

    /// A pod labelled for `job` and controlled by the job of that name's UID, `uid-<job>`.
    fn pod(namespace: &str, name: &str, job: Option<&str>) -> Pod {
        owned_pod(namespace, name, job, job.map(|j| format!("uid-{j}")).as_deref())
    }

    fn owned_pod(namespace: &str, name: &str, job: Option<&str>, owner: Option<&str>) -> Pod {
        let labels = job.map(|j| json!({ labels::JOB_NAME: j })).unwrap_or(json!({}));
        let owners: Vec<_> = owner
            .map(|uid| json!({"apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJob", "name": "j", "uid": uid, "controller": true}))
            .into_iter()
            .collect();
        let meta = json!({"name": name, "namespace": namespace, "labels": labels, "ownerReferences": owners});
        serde_json::from_value(json!({ "metadata": meta })).unwrap()
    }

    fn names(index: &JobIndex, store: &Store<Pod>, namespace: &str, job: &str) -> Vec<String> {
        let members = index.members(store, namespace, job, &format!("uid-{job}"));
        members.owned.iter().map(|p| p.name_any()).collect()
    }

    #[test]
    fn a_job_owns_only_what_its_uid_controls() {
        let (store, mut writer) = reflector::store::<Pod>();
        let index = JobIndex::default();
        let pods = [
            owned_pod("a", "j-coordinator", Some("j"), Some("old-uid")),
            owned_pod("a", "j-collector-0", Some("j"), Some("new-uid")),
            owned_pod("a", "j-collector-1", Some("j"), None),
        ];
        for pod in pods {
            let event = Event::Apply(pod);
            writer.apply_watcher_event(&event);
            index.apply(&event);
        }
        let members = index.members(&store, "a", "j", "new-uid");
        let owned: Vec<_> = members.owned.iter().map(|p| p.name_any()).collect();
        assert_eq!(owned, ["j-collector-0"]);
        assert_eq!(members.foreign, ["j-collector-1", "j-coordinator"]);
    }

    #[test]
    fn follows_the_same_events_as_the_cache() {
        let (store, mut writer) = reflector::store::<Pod>();
        let index = JobIndex::default();
        let mut apply = |event: Event<Pod>| {
            writer.apply_watcher_event(&event);
            index.apply(&event);
        };
        apply(Event::Apply(pod("a", "j-coordinator", Some("j"))));
        apply(Event::Apply(pod("a", "j-collector-0", Some("j"))));
        apply(Event::Apply(pod("b", "j-coordinator", Some("j"))));
        apply(Event::Apply(pod("a", "k-coordinator", Some("k"))));
        apply(Event::Apply(pod("a", "stray", None)));
        assert_eq!(names(&index, &store, "a", "j"), ["j-collector-0", "j-coordinator"]);
        assert_eq!(names(&index, &store, "b", "j"), ["j-coordinator"]);

        apply(Event::Delete(pod("a", "j-collector-0", Some("j"))));
        apply(Event::Apply(pod("a", "j-coordinator", Some("k"))));
        assert_eq!(names(&index, &store, "a", "j"), Vec::<String>::new(), "deleted, and relabelled away");
        assert_eq!(names(&index, &store, "a", "k"), ["j-coordinator", "k-coordinator"]);

        // A relist replaces everything once it is done.
        apply(Event::Init);
        apply(Event::InitApply(pod("a", "j-collector-1", Some("j"))));
        assert_eq!(names(&index, &store, "a", "k"), ["j-coordinator", "k-coordinator"], "old view until done");
        apply(Event::InitDone);
        assert_eq!(names(&index, &store, "a", "j"), ["j-collector-1"]);
        assert_eq!(names(&index, &store, "a", "k"), Vec::<String>::new());
    }
}
