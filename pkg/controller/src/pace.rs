//! How often a job's status is written. Every pod that is created or starts changes the counts,
//! and each write costs a request, a watch event to every watcher of DIJobs and another pass. So
//! what a user acts on (a job running with every replica ready, one that fails, ends or restarts,
//! a new condition, a replica that ended, a new spec) is written at once. Progress is written at
//! most once per period per job, and within a budget shared by all jobs: a change of counts, and
//! a job's way up (its first status, Created, Pending, Starting, and a role job's Running while
//! its coordinator runs but not every replica is ready yet). A hundred jobs starting at once
//! would otherwise spend on progress the API server time their pods' creates need (measured with
//! `make bench`), so progress waits while any pass creates pods or Services, for at most
//! [`HOLD`]: one job of a thousand replicas being created would otherwise hold every other job's
//! progress (and Normal events, see `events`) for its whole duration. When the API server keeps
//! up, the budget is there and progress is written at once too; when it is not, each job waiting
//! is given its own turn and its next pass comes then, rather than every waiting job asking again
//! at each new token (a hundred jobs of ten did five passes a second each). The period also
//! runs from the pass that created a job's pods, so a job that runs within it has one status
//! write. The pass that would write sooner asks to be run again when due.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use di_api::{DIJobCondition, DIJobStatus, Phase};
use tokio::time::Instant as TokioInstant;

/// The longest what only informs (a job's progress, a Normal event) waits for other passes'
/// creates: long enough that jobs starting together spend the API server on their pods first
/// (a hundred jobs of ten are all created within about three seconds here), short enough that
/// a job of a thousand replicas being created holds no one else's status for its whole duration.
pub const HOLD: Duration = Duration::from_secs(3);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    /// Nothing changed.
    Unchanged,
    Now,
    /// Only progress changed, and the job's period is over: write if the shared budget allows.
    Progress,
    /// Only progress changed, and the job's period is not over: write when this has passed.
    After(Duration),
}

/// Whether `new` is written now, given the status the job has and the time since this process
/// last wrote it (`None` when it has not, for example since a restart).
pub fn decide(old: Option<&DIJobStatus>, new: &DIJobStatus, since_last: Option<Duration>, period: Duration) -> Write {
    let none = DIJobStatus::default();
    let first = old.is_none();
    let old = old.unwrap_or(&none);
    if old == new {
        return Write::Unchanged;
    }
    let ended = |s: &DIJobStatus| -> Vec<(String, i32, i32)> {
        let ended = s.replica_status.iter().filter(|(_, r)| r.succeeded + r.failed > 0);
        ended.map(|(k, r)| (k.clone(), r.succeeded, r.failed)).collect()
    };
    let phase_moved = old.phase != new.phase && !(on_the_way_up(old) && on_the_way_up(new));
    let significant = phase_moved
        || other_conditions(old) != other_conditions(new)
        || (!first && old.observed_generation != new.observed_generation)
        || ended(old) != ended(new)
        || at_desired(new);
    match since_last {
        _ if significant => Write::Now,
        Some(since) if since < period => Write::After(period - since),
        _ => Write::Progress,
    }
}

/// The conditions that are not a phase's (a phase's condition is named by its phase, and changes
/// with it, which is judged by itself).
fn other_conditions(s: &DIJobStatus) -> Vec<&DIJobCondition> {
    let names_a_phase = |c: &&DIJobCondition| Phase::named(&c.type_).is_some();
    s.conditions.iter().filter(|c| !names_a_phase(c)).collect()
}

/// How many pods a job on its way up waits for to run, by `status`; `None` once it waits for
/// none (see `triggers`).
pub fn waits_for(status: &DIJobStatus) -> Option<usize> {
    if !on_the_way_up(status) || at_desired(status) {
        return None;
    }
    usize::try_from(status.replicas?).ok()
}

/// A job on its way up: no status yet, submitted, its pods being made or starting, or running
/// (a role job: its coordinator runs) with replicas not ready yet.
fn on_the_way_up(s: &DIJobStatus) -> bool {
    match s.phase {
        None | Some(Phase::Created | Phase::Pending | Phase::Starting) => true,
        Some(Phase::Running) => !at_desired(s),
        Some(_) => false,
    }
}

/// Every `ready/desired` figure of the status shows all replicas ready, and so does
/// `readyReplicas` (task jobs have only that).
fn at_desired(status: &DIJobStatus) -> bool {
    let figures = [&status.collectors, &status.learners].into_iter().flatten().all(|figure| {
        let mut parts = figure.split('/');
        parts.next() == parts.next()
    });
    figures && status.ready_replicas.zip(status.replicas).is_none_or(|(ready, wanted)| ready == wanted)
}

/// When this process last wrote each job's status, for the jobs written within the last period.
pub struct Pacer {
    pub period: Duration,
    written: Mutex<HashMap<String, Instant>>,
    /// Jobs whose progress waits for creates, and since when: each waits [`HOLD`] at most.
    held: Mutex<HashMap<String, Instant>>,
    /// Progress writes, all jobs together.
    budget: Bucket,
    /// Jobs that were given a turn of the budget, and when it is.
    turns: Mutex<HashMap<String, Instant>>,
    /// While any pass creates objects, progress waits for the creates to be over (a DIJob's
    /// status write costs the API server twice a pod's create, measured: 10.6 ms against 5.4 ms).
    pub creates: Creates,
}

/// Passes creating pods or Services now, all jobs together: what only informs (progress, and
/// events) waits while any is.
#[derive(Clone)]
pub struct Creates(Arc<tokio::sync::watch::Sender<usize>>);

impl Default for Creates {
    fn default() -> Self {
        Creates(Arc::new(tokio::sync::watch::Sender::new(0)))
    }
}

impl Creates {
    /// Marks a pass as creating objects until the guard is dropped.
    pub fn start(&self) -> Creating {
        self.0.send_modify(|n| *n += 1);
        Creating(self.0.clone())
    }

    pub fn any(&self) -> bool {
        *self.0.borrow() > 0
    }

    /// Resolves once no pass creates objects.
    pub async fn over(&self) {
        // The sender lives as long as `self`, so the wait ends only by its condition.
        let _ = self.0.subscribe().wait_for(|n| *n == 0).await;
    }
}

/// Held by a pass while it creates objects.
pub struct Creating(Arc<tokio::sync::watch::Sender<usize>>);

impl Drop for Creating {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

impl Pacer {
    /// `per_second`: progress writes per second, all jobs together (at least one).
    pub fn new(period: Duration, per_second: f64) -> Self {
        Pacer {
            period,
            written: Mutex::new(HashMap::new()),
            held: Mutex::new(HashMap::new()),
            budget: Bucket::new(per_second),
            turns: Mutex::new(HashMap::new()),
            creates: Creates::default(),
        }
    }

    /// Takes one progress write of the job (by UID) from the shared budget, or says when to ask
    /// again: while objects are being created, a period from now or when the job has waited
    /// [`HOLD`], whichever is sooner; else at the job's turn, which is kept for it.
    pub fn take_budget(&self, uid: &str) -> Result<(), Duration> {
        self.take_budget_at(uid, Instant::now())
    }

    fn take_budget_at(&self, uid: &str, now: Instant) -> Result<(), Duration> {
        if self.creates.any() {
            let mut held = self.held.lock().expect("pacer lock");
            if held.len() >= 64 {
                // A job deleted while it waited leaves its entry; past the hold it decides nothing.
                held.retain(|_, since| now.saturating_duration_since(*since) < HOLD);
            }
            let waited = now.saturating_duration_since(*held.entry(uid.to_owned()).or_insert(now));
            if waited < HOLD {
                return Err(self.period.max(Duration::from_millis(100)).min(HOLD - waited));
            }
        }
        let mut turns = self.turns.lock().expect("pacer lock");
        if let Some(&turn) = turns.get(uid) {
            if turn > now {
                return Err(turn - now);
            }
            turns.remove(uid);
            return Ok(());
        }
        if turns.len() >= 64 {
            // A job deleted before its turn leaves its entry; a period past, it decides nothing.
            turns.retain(|_, turn| now.saturating_duration_since(*turn) < self.period);
        }
        match self.budget.reserve_at(TokioInstant::from_std(now)) {
            Duration::ZERO => Ok(()),
            wait => {
                turns.insert(uid.to_owned(), now + wait);
                Err(wait)
            }
        }
    }

    /// Time since the job (by UID) was last written, if within the period.
    pub fn since_last(&self, uid: &str) -> Option<Duration> {
        let written = self.written.lock().expect("pacer lock");
        written.get(uid).map(Instant::elapsed).filter(|since| *since < self.period)
    }

    /// The job's pods were just created: its progress waits a period from now, as after a
    /// write, so a job that runs within the period has its status written once.
    pub fn created(&self, uid: &str) {
        self.wrote(uid);
    }

    pub fn wrote(&self, uid: &str) {
        let mut written = self.written.lock().expect("pacer lock");
        // Entries older than a period decide nothing; dropping them keeps deleted jobs from
        // piling up.
        if written.len() >= 64 {
            written.retain(|_, at| at.elapsed() < self.period);
        }
        written.insert(uid.to_owned(), Instant::now());
        drop(written);
        self.held.lock().expect("pacer lock").remove(uid);
        // Written by what could not wait: its turn goes unused.
        self.turns.lock().expect("pacer lock").remove(uid);
    }
}

/// A token bucket: `per_second` tokens a second, `burst` at most (one of each at least). On
/// tokio's clock, so that tests with paused time see it refill.
pub struct Bucket {
    per_second: f64,
    burst: f64,
    state: Mutex<(f64, TokioInstant)>,
}

impl Bucket {
    /// A bucket whose burst is a second's tokens.
    pub fn new(per_second: f64) -> Bucket {
        Bucket::with_burst(per_second, per_second)
    }

    pub fn with_burst(per_second: f64, burst: f64) -> Bucket {
        let (per_second, burst) = (per_second.max(1.0), burst.max(1.0));
        Bucket { per_second, burst, state: Mutex::new((burst, TokioInstant::now())) }
    }

    /// Takes a token, or says when one will be there.
    pub fn take(&self) -> Result<(), Duration> {
        self.take_at(TokioInstant::now())
    }

    /// Takes a token now or the next one not yet promised: how long until it is there (zero:
    /// now). The bucket goes into debt, so each caller's token is its own.
    fn reserve_at(&self, now: TokioInstant) -> Duration {
        let mut state = self.state.lock().expect("bucket lock");
        let tokens = self.refill(&mut state, now) - 1.0;
        state.0 = tokens;
        match tokens >= 0.0 {
            true => Duration::ZERO,
            false => Duration::from_secs_f64(-tokens / self.per_second),
        }
    }

    /// The tokens at `now`, brought up to date in `state`.
    fn refill(&self, state: &mut (f64, TokioInstant), now: TokioInstant) -> f64 {
        let (tokens, refilled) = state;
        let elapsed = now.saturating_duration_since(*refilled).as_secs_f64();
        *tokens = (*tokens + elapsed * self.per_second).min(self.burst);
        *refilled = now.max(*refilled);
        *tokens
    }

    /// As [`Bucket::take`], at `now`.
    fn take_at(&self, now: TokioInstant) -> Result<(), Duration> {
        let mut state = self.state.lock().expect("bucket lock");
        let tokens = self.refill(&mut state, now);
        if tokens >= 1.0 {
            state.0 -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - tokens) / self.per_second))
        }
    }
}

#[cfg(test)]
#[path = "pace_tests.rs"]
mod tests;
