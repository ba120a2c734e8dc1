//! How close together one job's passes run. While a big job's pods come up, nearly every pod's
//! report brings another pass, and a pass over a job of a thousand replicas costs tens of
//! milliseconds of CPU, taken from the API server on the same cores (and, in production, from
//! the node's other work). So a pass that would follow its job's last one closely first waits
//! until [`FACTOR`] times what the last one spent deciding has passed since it ended; the reports
//! that arrive meanwhile are taken by that one pass, which reads the caches after its wait. A
//! job's passes then take at most a third of a core, and its last report waits at most twice a
//! pass. A pass cheaper than [`MIN_COST`] (a job of tens of replicas) is never waited for.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The wait after a pass, as a multiple of what it spent deciding.
pub const FACTOR: u32 = 2;
/// Passes cheaper than this are not spaced: what waiting saves would not pay for the delay.
pub const MIN_COST: Duration = Duration::from_millis(2);
/// The longest wait, however slow the last pass was (a machine starved of CPU makes every pass
/// slow, and a job's reaction should not slow with it past this).
pub const MAX_WAIT: Duration = Duration::from_millis(200);

/// When each job's last pass ended and what it spent deciding, by UID.
#[derive(Default)]
pub struct Spacing {
    last: Mutex<HashMap<String, (Instant, Duration)>>,
}

impl Spacing {
    /// How long the job's next pass waits, from now.
    pub fn wait(&self, uid: &str) -> Option<Duration> {
        self.wait_at(uid, Instant::now())
    }

    fn wait_at(&self, uid: &str, now: Instant) -> Option<Duration> {
        let last = self.last.lock().expect("spacing lock");
        let &(ended, cost) = last.get(uid)?;
        let due = ended + gap(cost);
        (due > now).then(|| due - now)
    }

    /// A pass of the job ended now, having spent `cost` deciding.
    pub fn ended(&self, uid: &str, cost: Duration) {
        self.ended_at(uid, cost, Instant::now());
    }

    fn ended_at(&self, uid: &str, cost: Duration, now: Instant) {
        let mut last = self.last.lock().expect("spacing lock");
        // Entries whose wait is over decide nothing; dropping them keeps deleted jobs from
        // piling up.
        if last.len() >= 64 {
            last.retain(|_, &mut (ended, cost)| ended + gap(cost) > now);
        }
        if cost < MIN_COST {
            last.remove(uid);
        } else {
            last.insert(uid.to_owned(), (now, cost));
        }
    }
}

fn gap(cost: Duration) -> Duration {
    if cost < MIN_COST { Duration::ZERO } else { (cost * FACTOR).min(MAX_WAIT) }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_costly_pass_spaces_the_next_by_twice_its_cost() {
        let (spacing, t0) = (Spacing::default(), Instant::now());
        assert_eq!(spacing.wait_at("a", t0), None, "a job's first pass never waits");
        spacing.ended_at("a", 20 * MS, t0);
        assert_eq!(spacing.wait_at("a", t0), Some(40 * MS));
        assert_eq!(spacing.wait_at("a", t0 + 30 * MS), Some(10 * MS));
        assert_eq!(spacing.wait_at("a", t0 + 40 * MS), None);
        assert_eq!(spacing.wait_at("b", t0), None, "jobs are spaced apart from each other");
    }

    #[test]
    fn cheap_passes_are_not_spaced_and_slow_ones_only_so_far() {
        let (spacing, t0) = (Spacing::default(), Instant::now());
        spacing.ended_at("a", 20 * MS, t0);
        spacing.ended_at("a", MS, t0);
        assert_eq!(spacing.wait_at("a", t0), None, "the last pass was cheap");
        spacing.ended_at("a", Duration::from_secs(2), t0);
        assert_eq!(spacing.wait_at("a", t0), Some(MAX_WAIT));
    }

    #[test]
    fn entries_whose_wait_is_over_are_dropped() {
        let (spacing, t0) = (Spacing::default(), Instant::now());
        for i in 0..64 {
            spacing.ended_at(&format!("job-{i}"), 10 * MS, t0);
        }
        spacing.ended_at("last", 10 * MS, t0 + Duration::from_secs(1));
        assert_eq!(spacing.last.lock().unwrap().len(), 1);
    }
}
