//! What the validating webhook knows of the other jobs: the names each claims
//! (`di_api::claims`), kept from a watch of DIJobs, so a job whose names collide with another's
//! is refused on create, naming both. Until the first list arrives, or while a watch lists again,
//! the check is skipped (the reconciler still shows any collision as NamesTaken).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

use di_api::DIJob;
use di_api::claims::{claimed, shared};
use futures::StreamExt;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tracing::warn;

/// Every job's claimed names, by namespace and name.
#[derive(Clone, Default)]
pub struct Claims(Arc<RwLock<Index>>);

#[derive(Default)]
struct Index {
    ready: bool,
    jobs: HashMap<(String, String), BTreeSet<String>>,
}

impl Claims {
    /// Keeps the index from a watch of the DIJobs of `namespace` (all when `None`), until dropped.
    /// A job whose spec cannot be read claims nothing here: one such job never stops the watch.
    pub async fn watch(self, client: Client, namespace: Option<String>) {
        let resource = ApiResource::erase::<DIJob>(&());
        let api: Api<DynamicObject> = match &namespace {
            Some(namespace) => Api::namespaced_with(client, namespace, &resource),
            None => Api::all_with(client, &resource),
        };
        let mut events = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
        while let Some(event) = events.next().await {
            match event {
                Ok(event) => self.apply(event),
                Err(error) => warn!(%error, "watching DIJobs for the names they claim"),
            }
        }
    }

    fn apply(&self, event: watcher::Event<DynamicObject>) {
        let mut index = self.0.write().expect("claims lock");
        match event {
            watcher::Event::Init => *index = Index::default(),
            watcher::Event::InitDone => index.ready = true,
            watcher::Event::Apply(job) | watcher::Event::InitApply(job) => {
                let key = (job.namespace().unwrap_or_default(), job.name_any());
                match serde_json::from_value::<di_api::DIJobSpec>(job.data["spec"].clone()) {
                    Ok(spec) => index.jobs.insert(key.clone(), claimed(&key.1, &DIJob::new(&key.1, spec))),
                    Err(_) => index.jobs.remove(&key),
                };
            }
            watcher::Event::Delete(job) => {
                index.jobs.remove(&(job.namespace().unwrap_or_default(), job.name_any()));
            }
        }
    }

    /// The names job `name` of `namespace` would share with other jobs there, each with the job
    /// that claims it; `None` while the index is not listed yet.
    pub fn shared_with_others(&self, namespace: &str, name: &str, job: &DIJob) -> Option<BTreeMap<String, String>> {
        let index = self.0.read().expect("claims lock");
        if !index.ready {
            return None;
        }
        let others = index
            .jobs
            .iter()
            .filter(|((ns, other), _)| ns == namespace && other != name)
            .map(|((_, other), claims)| (other.as_str(), claims));
        Some(shared(&claimed(name, job), others))
    }

    /// An index as if listed, for tests: `(namespace, job)` and the job.
    pub fn listed(jobs: &[(&str, &str, &DIJob)]) -> Claims {
        let claims = Claims::default();
        {
            let mut index = claims.0.write().expect("claims lock");
            index.ready = true;
            for (namespace, name, job) in jobs {
                index.jobs.insert((namespace.to_string(), name.to_string()), claimed(name, job));
            }
        }
        claims
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// What the watch delivers is read as the API server sends it: a whole DynamicObject.
    #[test]
    fn a_watched_job_claims_its_names_and_an_unreadable_one_nothing() {
        let claims = Claims::default();
        let object = |name: &str, spec: serde_json::Value| -> DynamicObject {
            serde_json::from_value(json!({"apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJob",
                "metadata": {"name": name, "namespace": "ns"}, "spec": spec}))
            .unwrap()
        };
        let template = json!({"spec": {"containers": [{"name": "c", "image": "i"}]}});
        claims.apply(watcher::Event::Init);
        claims.apply(watcher::Event::InitApply(object(
            "a",
            json!({"tasks": [{"name": "b-collector", "template": template}]}),
        )));
        claims.apply(watcher::Event::InitApply(object("odd", json!({"collector": {"replicas": "many"}}))));
        let roles: DIJob = serde_json::from_value(json!({"metadata": {"name": "a-b"},
            "spec": {"coordinator": {"template": template}, "collector": {"replicas": 1, "template": template}}}))
        .unwrap();
        assert_eq!(claims.shared_with_others("ns", "a-b", &roles), None, "not listed yet");
        claims.apply(watcher::Event::InitDone);
        let shared = claims.shared_with_others("ns", "a-b", &roles).unwrap();
        assert_eq!(shared, BTreeMap::from([("a-b-collector-0".to_string(), "a".to_string())]));
        assert_eq!(claims.shared_with_others("other", "a-b", &roles), Some(BTreeMap::new()));
        claims.apply(watcher::Event::Delete(object("a", json!({}))));
        assert_eq!(claims.shared_with_others("ns", "a-b", &roles), Some(BTreeMap::new()));
    }
}
