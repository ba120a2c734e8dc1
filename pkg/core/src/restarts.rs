//! A failed replica's replacement as it is counted: on the replica's Service (the count, the
//! failed pod's UID, when the replacement may start), which is what every later pass reads.

use std::collections::BTreeMap;

use di_api::contract::annotations;
use k8s_openapi::jiff::Timestamp;

/// One replacement, as counted on the replica's Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mark {
    /// The Service's UID when the pass read it; `None` if it had none yet.
    pub service_uid: Option<String>,
    pub restarts: u32,
    /// The failed pod this replacement counts.
    pub failed_uid: String,
    pub restart_after: Timestamp,
}

impl Mark {
    /// The Service annotations that record it.
    pub fn annotations(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (annotations::RESTARTS.to_owned(), self.restarts.to_string()),
            (annotations::LAST_FAILED_UID.to_owned(), self.failed_uid.clone()),
            (annotations::RESTART_AFTER.to_owned(), self.restart_after.to_string()),
        ])
    }
}
