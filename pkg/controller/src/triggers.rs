//! Which pod changes start a pass, and when. Most reports of a starting pod change nothing a pass
//! reads: its binding to a node, for one, moves only the resourceVersion of what the cache keeps
//! (see `view::PodView`). Each such report would cost a whole pass over its job (the plan, the
//! status) while the orchestrator shares the machine's cores with the API server it waits on. So
//! a report starts a pass only when the kept view changed; the cache takes every report all the
//! same.
//!
//! Of those that changed, a report that only moves a pod of a starting job forward (it appeared,
//! it runs, it is ready) while the job still waits for more of its pods to run changes only the
//! job's progress, which its status shows at most once a period: its pass may wait (`later`).
//! Everything else starts a pass at once: the pod that makes the job's running pods as many as
//! it wants, a pod that failed, ended, goes or cannot be placed, any change of its metadata, a
//! relist, and every report of a job no pass has said it is starting. Services likewise
//! (`ServiceChanges`).

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};

use kube::runtime::watcher::Event;
use tokio::time::Instant;

use kube::ResourceExt;

use crate::view::{JobMember, PodView, ServiceView};

/// What a pod report asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// Nothing a pass reads changed.
    None,
    /// A pass at once.
    Now,
    /// A pass within the status period (`later`).
    Later,
}

/// A watch's record of what it reported last: what each report asks for.
pub trait Changes<K> {
    fn trigger(&mut self, event: &Event<K>) -> Trigger;
}

/// The starting jobs and how many running pods each wants, by a hash of namespace and name:
/// written by each pass, read for each report; and a signal each time a job starts or stops
/// starting, for what waits until a job is up (its Normal events, see `events`).
#[derive(Clone)]
pub struct Starting {
    jobs: Arc<Mutex<HashMap<u64, Wait>>>,
    changed: Arc<tokio::sync::watch::Sender<()>>,
}

/// What a starting job waits for, whether a report has shown it all (its pass is the one that
/// writes that the job runs: the dispatcher lets it go first), and since when it is starting.
#[derive(Clone, Copy)]
struct Wait {
    wants: usize,
    arrived: bool,
    since: Instant,
}

impl Default for Starting {
    fn default() -> Self {
        Starting { jobs: Arc::default(), changed: Arc::new(tokio::sync::watch::Sender::new(())) }
    }
}

impl Starting {
    /// `wants`: the pods the job waits for to run, or `None` once it waits for none (it runs,
    /// it ended, it is held), when every report of it starts a pass at once.
    pub fn set(&self, namespace: &str, job: &str, wants: Option<usize>) {
        let mut jobs = self.jobs.lock().expect("the starting jobs' lock is never poisoned");
        // Whether the job was starting before, and is now.
        let key = job_key(namespace, job);
        let (before, now) = match wants {
            Some(wants) => {
                let was = jobs.get(&key).copied();
                // A pass that finds the pods all there but not all ready yet leaves them arrived.
                let arrived = was.is_some_and(|w| w.wants == wants && w.arrived);
                let since = was.map_or_else(Instant::now, |w| w.since);
                (jobs.insert(key, Wait { wants, arrived, since }).is_some(), true)
            }
            None => (jobs.remove(&key).is_some(), false),
        };
        drop(jobs);
        if before != now {
            self.changed.send_replace(());
        }
    }

    fn wants(&self, key: u64) -> Option<usize> {
        self.jobs.lock().expect("the starting jobs' lock is never poisoned").get(&key).map(|w| w.wants)
    }

    /// Whether the job, with `running` pods running, has as many as it wants (marking it
    /// arrived when it has); `None` when it is not starting.
    fn reached(&self, key: u64, running: usize) -> Option<bool> {
        let mut jobs = self.jobs.lock().expect("the starting jobs' lock is never poisoned");
        let wait = jobs.get_mut(&key)?;
        let reached = running >= wait.wants;
        wait.arrived |= reached;
        Some(reached)
    }

    /// Since when the job is starting, if it is.
    pub fn since(&self, namespace: &str, job: &str) -> Option<Instant> {
        let jobs = self.jobs.lock().expect("the starting jobs' lock is never poisoned");
        jobs.get(&job_key(namespace, job)).map(|w| w.since)
    }

    /// Whether the job is starting and a report showed all the running pods it wants: its next
    /// pass writes that it runs.
    pub fn arrived(&self, namespace: &str, job: &str) -> bool {
        let jobs = self.jobs.lock().expect("the starting jobs' lock is never poisoned");
        jobs.get(&job_key(namespace, job)).is_some_and(|w| w.arrived)
    }

    /// Resolves once the job is not starting: it runs with every pod it wants, it ended, it is
    /// held, or no pass has said it is starting.
    pub async fn settled(&self, namespace: &str, job: &str) {
        let key = job_key(namespace, job);
        // Subscribed before the check, so a change in between is not missed.
        let mut changes = self.changed.subscribe();
        while self.wants(key).is_some() {
            // The sender lives as long as `self`: the wait ends only by a change.
            if changes.changed().await.is_err() {
                return;
            }
        }
    }
}

/// What each pod looked like when it last started a pass, by a hash of its UID, and how many
/// running pods each job has.
#[derive(Default)]
pub struct PodChanges {
    seen: HashMap<u64, Seen>,
    running: HashMap<u64, usize>,
    starting: Starting,
}

#[derive(Clone, Copy)]
struct Seen {
    /// Everything of the kept view but its resourceVersion.
    fingerprint: u64,
    /// The same, of its metadata alone.
    metadata: u64,
    step: Option<Step>,
    job: Option<u64>,
}

/// How far a pod on its way up has come; `None` for any other pod (on its way out, ended,
/// failed, not placeable, unknown).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    Pending,
    Running,
    Ready,
}

impl PodChanges {
    pub fn new(starting: Starting) -> PodChanges {
        PodChanges { starting, ..PodChanges::default() }
    }
}

impl Changes<PodView> for PodChanges {
    /// A pod that goes, and every (re)list, always starts a pass.
    fn trigger(&mut self, event: &Event<PodView>) -> Trigger {
        match event {
            Event::Apply(pod) => {
                let (key, seen) = (hash(&pod.metadata.uid), Seen::of(pod));
                let before = self.record(key, Some(seen));
                match before {
                    Some(b) if b.fingerprint == seen.fingerprint => Trigger::None,
                    _ if !moves_forward(before, seen) => Trigger::Now,
                    _ => match seen.job.and_then(|job| self.starting.reached(job, self.running_of(job))) {
                        Some(false) => Trigger::Later,
                        _ => Trigger::Now,
                    },
                }
            }
            Event::InitApply(pod) => {
                self.record(hash(&pod.metadata.uid), Some(Seen::of(pod)));
                Trigger::Now
            }
            Event::Delete(pod) => {
                self.record(hash(&pod.metadata.uid), None);
                Trigger::Now
            }
            Event::Init => {
                // The list that follows reports every pod that is still there.
                self.seen.clear();
                self.running.clear();
                Trigger::Now
            }
            Event::InitDone => Trigger::Now,
        }
    }
}

impl PodChanges {
    /// Keeps `now` as the pod's last view (or forgets the pod), counting its job's running pods;
    /// the view before.
    fn record(&mut self, key: u64, now: Option<Seen>) -> Option<Seen> {
        let before = match now {
            Some(seen) => self.seen.insert(key, seen),
            None => self.seen.remove(&key),
        };
        if let Some(job) = before.filter(Seen::runs).and_then(|s| s.job)
            && let Some(count) = self.running.get_mut(&job)
        {
            *count -= 1;
            if *count == 0 {
                self.running.remove(&job);
            }
        }
        if let Some(job) = now.filter(Seen::runs).and_then(|s| s.job) {
            *self.running.entry(job).or_default() += 1;
        }
        before
    }

    fn running_of(&self, job: u64) -> usize {
        self.running.get(&job).copied().unwrap_or(0)
    }
}

/// What each Service looked like when it last started a pass, by a hash of its UID. A Service
/// that appears while its job is starting changes nothing a pass decides (the pass that created
/// it counts it as there, see `created`), so its pass may wait; any other change of a Service (its
/// restart marks, its going) starts one at once.
#[derive(Default)]
pub struct ServiceChanges {
    seen: HashMap<u64, u64>,
    starting: Starting,
}

impl ServiceChanges {
    pub fn new(starting: Starting) -> ServiceChanges {
        ServiceChanges { starting, ..ServiceChanges::default() }
    }
}

impl Changes<ServiceView> for ServiceChanges {
    fn trigger(&mut self, event: &Event<ServiceView>) -> Trigger {
        match event {
            Event::Apply(service) => {
                let fingerprint = service_fingerprint(service);
                match self.seen.insert(hash(&service.metadata.uid), fingerprint) {
                    Some(before) if before == fingerprint => Trigger::None,
                    Some(_) => Trigger::Now,
                    None => {
                        let job = service.job().map(|job| job_key(&service.namespace().unwrap_or_default(), job));
                        match job.and_then(|job| self.starting.wants(job)) {
                            Some(_) => Trigger::Later,
                            None => Trigger::Now,
                        }
                    }
                }
            }
            Event::InitApply(service) => {
                self.seen.insert(hash(&service.metadata.uid), service_fingerprint(service));
                Trigger::Now
            }
            Event::Delete(service) => {
                self.seen.remove(&hash(&service.metadata.uid));
                Trigger::Now
            }
            Event::Init => {
                self.seen.clear();
                Trigger::Now
            }
            Event::InitDone => Trigger::Now,
        }
    }
}

fn service_fingerprint(service: &ServiceView) -> u64 {
    let mut meta = service.metadata.clone();
    meta.resource_version = None;
    hash(&(serde_json::to_vec(&meta).unwrap_or_default(), &service.job, &service.owner))
}

/// Only its way up moved: a new pod on its way up, or one whose metadata is as it was and that
/// came further.
fn moves_forward(before: Option<Seen>, now: Seen) -> bool {
    match (before, now.step) {
        (_, None) => false,
        (None, Some(_)) => true,
        (Some(b), Some(step)) => b.metadata == now.metadata && b.step.is_some_and(|s| s < step),
    }
}

impl Seen {
    fn of(pod: &PodView) -> Seen {
        let mut meta = pod.metadata.clone();
        meta.resource_version = None;
        let metadata = hash(&(serde_json::to_vec(&meta).unwrap_or_default(), &pod.kept_labels, &pod.owner));
        let status = serde_json::to_vec(&pod.status).unwrap_or_default();
        let job = pod.job().map(|job| job_key(pod.metadata.namespace.as_deref().unwrap_or_default(), job));
        Seen { fingerprint: hash(&(metadata, status)), metadata, step: step(pod), job }
    }

    /// Counted as running: looser than ready, so the report that makes a job's pods all ready
    /// never waits (it finds them all running).
    fn runs(&self) -> bool {
        self.step >= Some(Step::Running)
    }
}

fn step(pod: &PodView) -> Option<Step> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let status = pod.status.as_ref();
    let conditions = status.map(|s| s.conditions.as_slice()).unwrap_or_default();
    let has = |type_: &str, value: &str| conditions.iter().any(|c| c.type_ == type_ && c.status == value);
    match status.and_then(|s| s.phase.as_deref()) {
        None | Some("Pending") if !has("PodScheduled", "False") => Some(Step::Pending),
        Some("Running") if has("Ready", "True") => Some(Step::Ready),
        Some("Running") => Some(Step::Running),
        _ => None,
    }
}

fn job_key(namespace: &str, job: &str) -> u64 {
    hash(&(namespace, job))
}

fn hash<T: Hash + ?Sized>(value: &T) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
#[path = "triggers_tests.rs"]
mod tests;
