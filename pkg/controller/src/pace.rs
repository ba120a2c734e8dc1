//! How often a job's status is written. Every pod that is created or starts changes the counts,
//! and each write costs a request, a watch event to every watcher of DIJobs and another pass. So
//! what a user acts on (the first status, a new phase or condition, a replica that ended, a job
//! that reached its replicas) is written at once, and a change of counts only is written at most
//! once per period: the pass that would write it sooner asks to be run again when it is due.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use di_api::DIJobStatus;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    /// Nothing changed.
    Unchanged,
    Now,
    /// Only counts changed, and the last write was recent: write when this has passed.
    After(Duration),
}

/// Whether `new` is written now, given the status the job has and the time since this process
/// last wrote it (`None` when it has not, for example since a restart).
pub fn decide(old: Option<&DIJobStatus>, new: &DIJobStatus, since_last: Option<Duration>, period: Duration) -> Write {
    let Some(old) = old else { return Write::Now };
    if old == new {
        return Write::Unchanged;
    }
    let ended = |s: &DIJobStatus| -> Vec<(String, i32, i32)> {
        s.replica_status.iter().map(|(k, r)| (k.clone(), r.succeeded, r.failed)).collect()
    };
    let significant = old.phase != new.phase
        || old.conditions != new.conditions
        || old.observed_generation != new.observed_generation
        || ended(old) != ended(new)
        || at_desired(new);
    match since_last {
        Some(since) if !significant && since < period => Write::After(period - since),
        _ => Write::Now,
    }
}

/// Every `ready/desired` figure of the status shows all replicas ready.
fn at_desired(status: &DIJobStatus) -> bool {
    [&status.collectors, &status.learners].into_iter().flatten().all(|figure| {
        let mut parts = figure.split('/');
        parts.next() == parts.next()
    })
}

/// When this process last wrote each job's status, for the jobs written within the last period.
pub struct Pacer {
    pub period: Duration,
    written: Mutex<HashMap<String, Instant>>,
}

impl Pacer {
    pub fn new(period: Duration) -> Self {
        Pacer { period, written: Mutex::new(HashMap::new()) }
    }

    /// Time since the job (by UID) was last written, if within the period.
    pub fn since_last(&self, uid: &str) -> Option<Duration> {
        let written = self.written.lock().expect("pacer lock");
        written.get(uid).map(Instant::elapsed).filter(|since| *since < self.period)
    }

    pub fn wrote(&self, uid: &str) {
        let mut written = self.written.lock().expect("pacer lock");
        // Entries older than a period decide nothing; dropping them keeps deleted jobs from
        // piling up.
        if written.len() >= 64 {
            written.retain(|_, at| at.elapsed() < self.period);
        }
        written.insert(uid.to_owned(), Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use di_api::{DIJobCondition, Phase, ReplicaStatus};

    use super::*;

    const PERIOD: Duration = Duration::from_secs(1);
    const RECENT: Option<Duration> = Some(Duration::from_millis(200));

    fn status(phase: Phase, collectors: &str, failed: i32) -> DIJobStatus {
        DIJobStatus {
            phase: Some(phase),
            collectors: Some(collectors.into()),
            replica_status: [("Collector".to_string(), ReplicaStatus { active: 10, succeeded: 0, failed })].into(),
            ..Default::default()
        }
    }

    #[test]
    fn counts_alone_wait_for_the_period() {
        let old = status(Phase::Running, "3/10", 0);
        let new = status(Phase::Running, "4/10", 0);
        assert_eq!(decide(Some(&old), &new, RECENT, PERIOD), Write::After(Duration::from_millis(800)));
        assert_eq!(decide(Some(&old), &new, None, PERIOD), Write::Now, "no recent write");
        assert_eq!(decide(Some(&old), &new, Some(PERIOD), PERIOD), Write::Now, "period over");
        assert_eq!(decide(Some(&new), &new, RECENT, PERIOD), Write::Unchanged);
    }

    #[test]
    fn what_a_user_acts_on_is_written_at_once() {
        let old = status(Phase::Created, "3/10", 0);
        let cases = [
            ("first status", None, status(Phase::Created, "0/10", 0)),
            ("new phase", Some(&old), status(Phase::Running, "3/10", 0)),
            ("a replica failed", Some(&old), status(Phase::Created, "3/10", 1)),
            ("every replica ready", Some(&old), status(Phase::Created, "10/10", 0)),
        ];
        for (what, old, new) in cases {
            assert_eq!(decide(old, &new, RECENT, PERIOD), Write::Now, "{what}");
        }
        let mut conditioned = old.clone();
        conditioned.conditions.push(DIJobCondition {
            type_: "Suspended".into(),
            status: "True".into(),
            ..Default::default()
        });
        assert_eq!(decide(Some(&old), &conditioned, RECENT, PERIOD), Write::Now, "new condition");
        let mut regenerated = old.clone();
        regenerated.observed_generation = Some(2);
        assert_eq!(decide(Some(&old), &regenerated, RECENT, PERIOD), Write::Now, "new generation");
    }

    #[test]
    fn at_desired_needs_every_figure_full() {
        let mut s = status(Phase::Running, "10/10", 0);
        assert!(at_desired(&s));
        s.learners = Some("1/2".into());
        assert!(!at_desired(&s));
        s.learners = Some("2/2".into());
        assert!(at_desired(&s));
    }

    #[test]
    fn the_pacer_forgets_after_a_period() {
        let pacer = Pacer::new(Duration::from_millis(50));
        assert_eq!(pacer.since_last("a"), None);
        pacer.wrote("a");
        assert!(pacer.since_last("a").is_some());
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(pacer.since_last("a"), None);
    }
}
