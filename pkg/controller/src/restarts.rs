//! Read-your-writes for the restart bookkeeping. A failed replica's replacements are counted on
//! its Service (count, the failed pod's UID, when the replacement may start), and the next pass
//! reads the Service from a cache that may not have seen that write yet: it would replace the
//! pod at once, without backoff, or count past the restart limit. So the process keeps what it
//! wrote until the cache shows it, and a pass reads its own writes over the cache.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use di_api::contract::annotations;
use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;

pub use di_core::restarts::Mark;

/// A cache that has not shown a write after this long never will (the Service is gone): the
/// entry is dropped.
const FORGET_AFTER: Duration = Duration::from_secs(600);

/// The marks this process wrote and its caches have not shown yet, by namespace and Service.
#[derive(Default)]
pub struct Marks(Mutex<HashMap<(String, String), (Mark, Instant)>>);

impl Marks {
    pub fn wrote(&self, namespace: &str, service: &str, mark: Mark) {
        let mut marks = self.0.lock().expect("marks lock");
        marks.retain(|_, (_, at)| at.elapsed() < FORGET_AFTER);
        marks.insert((namespace.to_owned(), service.to_owned()), (mark, Instant::now()));
    }

    /// Puts this process's newer marks over the cached `services` of `namespace`, and forgets
    /// those the cache now shows (the last failed UID is ours: we are its only writer).
    pub fn overlay(&self, namespace: &str, services: &mut [Service]) {
        let mut marks = self.0.lock().expect("marks lock");
        if marks.is_empty() {
            return;
        }
        for service in services {
            let key = (namespace.to_owned(), service.name_any());
            let Some((mark, _)) = marks.get(&key) else { continue };
            let same_service = mark.service_uid.is_none() || mark.service_uid == service.uid();
            let shown = service.annotations().get(annotations::LAST_FAILED_UID) == Some(&mark.failed_uid);
            if !same_service || shown {
                marks.remove(&key);
            } else {
                service.annotations_mut().extend(mark.annotations());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn service(uid: &str, failed_uid: Option<&str>) -> Service {
        let annotations = failed_uid.map(|f| json!({annotations::LAST_FAILED_UID: f, annotations::RESTARTS: "1"}));
        serde_json::from_value(json!({"metadata": {"name": "job-collector-0", "uid": uid, "annotations": annotations}}))
            .unwrap()
    }

    fn mark(restarts: u32, failed_uid: &str) -> Mark {
        Mark {
            service_uid: Some("s1".into()),
            restarts,
            failed_uid: failed_uid.into(),
            restart_after: "2026-01-01T00:00:10Z".parse().unwrap(),
        }
    }

    #[test]
    fn a_pass_reads_its_own_write_until_the_cache_shows_it() {
        let marks = Marks::default();
        marks.wrote("ns", "job-collector-0", mark(2, "pod-b"));

        // The cache still has the first failure only.
        let mut stale = [service("s1", Some("pod-a"))];
        marks.overlay("ns", &mut stale);
        assert_eq!(stale[0].annotations()[annotations::RESTARTS], "2");
        assert_eq!(stale[0].annotations()[annotations::LAST_FAILED_UID], "pod-b");
        assert_eq!(stale[0].annotations()[annotations::RESTART_AFTER], "2026-01-01T00:00:10Z");

        // Another namespace's Service of the same name is not this one.
        let mut elsewhere = [service("s9", None)];
        marks.overlay("other", &mut elsewhere);
        assert!(elsewhere[0].annotations().get(annotations::RESTARTS).is_none());

        // The cache caught up: the mark is forgotten, and the cache is read as it is.
        let mut caught_up = [service("s1", Some("pod-b"))];
        marks.overlay("ns", &mut caught_up);
        assert_eq!(caught_up[0].annotations()[annotations::RESTARTS], "1", "as cached");
        let mut later = [service("s1", Some("pod-a"))];
        marks.overlay("ns", &mut later);
        assert_eq!(later[0].annotations()[annotations::LAST_FAILED_UID], "pod-a", "forgotten");
    }

    #[test]
    fn a_new_service_of_the_same_name_starts_afresh() {
        let marks = Marks::default();
        marks.wrote("ns", "job-collector-0", mark(3, "pod-c"));
        let mut recreated = [service("s2", None)];
        marks.overlay("ns", &mut recreated);
        assert!(recreated[0].annotations().get(annotations::RESTARTS).is_none());
    }
}
