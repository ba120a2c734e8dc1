//! An admitted job's room: how many pods of each podSet Kueue admitted, how many of them the job
//! has given back (`reclaimablePods`: finished, or scaled away), and so which of the pods it asks
//! for may be created now.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use serde_json::{Value, json};

use super::workload::PodSet;
use crate::decision::Action;
use crate::status::pod_phase;

/// One podSet of an admitted Workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Room {
    pub name: String,
    /// Pods admitted: the admission's count for the podSet, else the count it was made with.
    pub admitted: u64,
    /// Of those, given back to the queue while this admission lasts. Kueue refuses a count that
    /// goes down while quota is reserved, so once given back a pod's room is never taken again.
    pub reclaimable: u64,
}

impl Room {
    /// Pods of the podSet that may be running or starting (succeeded ones hold no room).
    pub fn open(&self) -> u64 {
        self.admitted.saturating_sub(self.reclaimable)
    }
}

/// Each podSet's admitted count, by name, as the Workload says it.
pub(super) fn admitted_counts(workload: &Value) -> BTreeMap<String, u64> {
    let assignments = workload["status"]["admission"]["podSetAssignments"].as_array();
    workload["spec"]["podSets"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            let name = s["name"].as_str().unwrap_or_default();
            let assigned =
                assignments.and_then(|a| a.iter().find(|a| a["name"] == name)).and_then(|a| a["count"].as_u64());
            (name.to_owned(), assigned.or(s["count"].as_u64()).unwrap_or(0))
        })
        .collect()
}

/// The rooms of an admitted job whose podSets are now `sets`: a podSet gives back what it no
/// longer asks for and, where `succeeded_stay` (a role job: its succeeded replicas are never made
/// again), what has succeeded; it never takes back what its Workload's status already gave. A
/// task job's succeeded pods are made again when the job restarts whole, so they keep their room.
pub(super) fn rooms(workload: &Value, sets: &[PodSet], pods: &[&Pod], succeeded_stay: bool) -> Vec<Room> {
    let stored: BTreeMap<&str, u64> = workload["status"]["reclaimablePods"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| Some((r["name"].as_str()?, r["count"].as_u64()?)))
        .collect();
    let succeeded: BTreeSet<String> =
        pods.iter().filter(|p| succeeded_stay && pod_phase(p) == "Succeeded").map(|p| p.name_any()).collect();
    admitted_counts(workload)
        .into_iter()
        .map(|(name, admitted)| {
            let members = sets.iter().find(|s| s.name == name).map_or(&[][..], |s| s.members.as_slice());
            let within = members.iter().take(admitted as usize);
            let done = within.filter(|m| succeeded.contains(*m)).count() as u64;
            let now = admitted.saturating_sub(members.len() as u64) + done;
            let reclaimable = now.min(admitted).max(stored.get(name.as_str()).copied().unwrap_or(0));
            Room { name, admitted, reclaimable }
        })
        .collect()
}

/// `status.reclaimablePods` for `rooms`: every podSet that has given any room back.
pub(super) fn reclaimable_pods(rooms: &[Room]) -> Value {
    let given: Vec<Value> =
        rooms.iter().filter(|r| r.reclaimable > 0).map(|r| json!({"name": r.name, "count": r.reclaimable})).collect();
    Value::Array(given)
}

/// How many of each podSet's members, not succeeded, there is no room for (podSets with none
/// left out): what an admitted job asking for `sets` would wait for.
pub(super) fn over(rooms: &[Room], sets: &[PodSet], pods: &[&Pod]) -> Vec<(String, u64)> {
    let succeeded: BTreeSet<String> =
        pods.iter().filter(|p| pod_phase(p) == "Succeeded").map(|p| p.name_any()).collect();
    sets.iter()
        .filter_map(|set| {
            let open = rooms.iter().find(|r| r.name == set.name).map_or(0, Room::open);
            let asked = set.members.iter().filter(|m| !succeeded.contains(*m)).count() as u64;
            Some((set.name.clone(), asked.checked_sub(open).filter(|n| *n > 0)?))
        })
        .collect()
}

/// The members there is no room for: in each podSet, the pods that exist and have not succeeded
/// take room first, then the others in the order of the podSet's members; a podSet Kueue never
/// saw has none. These pods are not created while this admission lasts, and a gang counts on
/// none of them.
pub(super) fn without_room(rooms: &[Room], sets: &[PodSet], pods: &[&Pod]) -> BTreeSet<String> {
    let live: BTreeSet<String> = pods.iter().filter(|p| pod_phase(p) != "Succeeded").map(|p| p.name_any()).collect();
    let succeeded: BTreeSet<String> =
        pods.iter().filter(|p| pod_phase(p) == "Succeeded").map(|p| p.name_any()).collect();
    let mut held = BTreeSet::new();
    for set in sets {
        let open = rooms.iter().find(|r| r.name == set.name).map_or(0, Room::open);
        let taken = set.members.iter().filter(|m| live.contains(*m)).count() as u64;
        let room = open.saturating_sub(taken) as usize;
        let waiting = set.members.iter().filter(|m| !live.contains(*m) && !succeeded.contains(*m));
        held.extend(waiting.skip(room).cloned());
    }
    held
}

/// Keeps the pods there is no room for ([`without_room`]) from being created; how many creates
/// were held back.
pub(super) fn beyond_admission(held: &BTreeSet<String>, actions: &mut Vec<Action>) -> usize {
    let before = actions.len();
    actions.retain(|a| !matches!(a, Action::CreatePod(pod) if held.contains(&pod.name_any())));
    before - actions.len()
}
