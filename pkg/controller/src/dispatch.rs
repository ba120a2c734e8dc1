//! Runs a job's pass as soon as something asks for it: at most `concurrency` passes at once, never
//! two of the same job, and a job asked for while its pass runs gets one more pass right after.
//!
//! Jobs wait in the order they were asked for, but a job whose pass would write that it runs
//! (`first`: its pods all run) goes before them, [`FIRST_IN_A_ROW`] at a time. A job's first pass
//! creates its pods and Services and holds its slot while its creates wait for the budget all
//! passes share. In one line, 100 jobs started together kept a job whose pods all ran behind
//! every first pass still waiting for a slot: its status came a median 2.6 s after its pods
//! (slowest 7.2 s; the limit's status writer 0.25 s and 0.63 s). Letting every job that had a pass
//! go first (commit dadc942) gave a prompt status, but passed each job about six times rather
//! than four: its passes that only count progress, or read its own status write back, no longer
//! waited in line, where the asks that came meanwhile join one pass. After that many jobs in a
//! row went first while others waited, the line gets the slot, so jobs whose pods keep changing
//! cannot keep new jobs from starting.
//!
//! kube-runtime's `Controller` also runs a bounded number of passes, one a job, but every
//! request, even one for now, waits in its scheduler's `DelayQueue` for a timer: it rounds
//! deadlines up to the next millisecond, and the timer then fires on the runtime's next tick. On
//! a single-threaded runtime as the orchestrator's (`examples/pass_delay.rs`), a request for now
//! started its pass 2.1 ms later (median of 200; here 1 µs). A job runs after two such requests
//! in a row (its create, then its last pod running), and a job of 10 collectors runs in about
//! 55 ms on the bench's machine. So here a request for now runs at once, and only the passes a
//! job asks for later (`Requeue`) wait on a timer.

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::{Stream, StreamExt};
use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio_util::time::DelayQueue;
use tokio_util::time::delay_queue::Key;
use tracing::debug;

/// Jobs given a slot ahead of the line, in a row, while the line waits: then the line's turn.
const FIRST_IN_A_ROW: usize = 4;

/// When a job's next pass comes if nothing asks for one before: after a while, or not at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Requeue(Option<Duration>);

impl Requeue {
    pub const fn after(after: Duration) -> Requeue {
        Requeue(Some(after))
    }

    pub const fn await_change() -> Requeue {
        Requeue(None)
    }
}

/// Which jobs wait for a pass (those `first` picks ahead of the line), which have one running,
/// and which asked again meanwhile.
struct Queue<T, F> {
    ready: VecDeque<T>,
    /// Jobs waiting that `first` picked when they were asked for: they go first.
    first_ready: VecDeque<T>,
    first: F,
    /// Jobs given a slot ahead of the line in a row while the line waited.
    streak: usize,
    /// Jobs waiting, and whether they go first.
    queued: HashMap<T, bool>,
    running: HashSet<T>,
    again: HashSet<T>,
    timers: DelayQueue<T>,
    timed: HashMap<T, Key>,
}

impl<T: Clone + Eq + Hash, F: Fn(&T) -> bool> Queue<T, F> {
    fn new(first: F) -> Queue<T, F> {
        Queue {
            ready: VecDeque::new(),
            first_ready: VecDeque::new(),
            first,
            streak: 0,
            queued: HashMap::new(),
            running: HashSet::new(),
            again: HashSet::new(),
            timers: DelayQueue::new(),
            timed: HashMap::new(),
        }
    }

    /// A pass for `job` now. It stands for any pass it had waiting on a timer: the pass that
    /// runs says when the next is due. A job waiting in line that `first` picks now leaves the
    /// line for the jobs that go first.
    fn ask(&mut self, job: T) {
        if let Some(key) = self.timed.remove(&job) {
            self.timers.remove(&key);
        }
        if self.running.contains(&job) {
            self.again.insert(job);
            return;
        }
        let first = (self.first)(&job);
        match self.queued.get(&job) {
            None if first => self.first_ready.push_back(job.clone()),
            None => self.ready.push_back(job.clone()),
            Some(false) if first => {
                self.ready.retain(|waiting| *waiting != job);
                self.first_ready.push_back(job.clone());
            }
            // Already where it belongs, or already picked to go first.
            Some(_) => return,
        }
        self.queued.insert(job, first);
    }

    /// The next job to pass, if fewer than `concurrency` passes run; it counts as running.
    fn next(&mut self, concurrency: usize) -> Option<T> {
        if self.running.len() >= concurrency {
            return None;
        }
        let line_turn = self.first_ready.is_empty() || (self.streak >= FIRST_IN_A_ROW && !self.ready.is_empty());
        let job = if line_turn {
            self.streak = 0;
            self.ready.pop_front()?
        } else {
            self.streak += usize::from(!self.ready.is_empty());
            self.first_ready.pop_front()?
        };
        self.queued.remove(&job);
        self.running.insert(job.clone());
        Some(job)
    }

    /// `job`'s pass ended, or found it gone from the store. Frees its slot: asked for meanwhile,
    /// it waits again; otherwise its timer, if any, is set.
    fn done(&mut self, job: T, requeue: Requeue) {
        self.running.remove(&job);
        if self.again.remove(&job) {
            self.ask(job);
        } else if let Requeue(Some(after)) = requeue {
            let key = self.timers.insert(job.clone(), after);
            if let Some(earlier) = self.timed.insert(job, key) {
                self.timers.remove(&earlier);
            }
        }
    }

    /// Resolves with the next job whose timer is due; pending while no timer is set.
    async fn due(&mut self) -> T {
        match futures::future::poll_fn(|cx| self.timers.poll_expired(cx)).await {
            Some(expired) => {
                let job = expired.into_inner();
                self.timed.remove(&job);
                job
            }
            None => std::future::pending().await,
        }
    }
}

/// Runs `pass` for every job `asks` names, as the module says, until `shutdown` resolves; then
/// waits for the passes running and starts no other. A job not in `store` gets no pass (it was
/// deleted after it was asked for). `first` says, as a job is asked for, whether it goes ahead
/// of the line.
pub async fn run<K, P, F>(
    store: Store<K>,
    asks: impl Stream<Item = ObjectRef<K>>,
    concurrency: usize,
    first: impl Fn(&ObjectRef<K>) -> bool,
    shutdown: impl Future<Output = ()>,
    pass: P,
) where
    K: Resource + Clone + 'static,
    K::DynamicType: Clone + Eq + Hash,
    P: Fn(Arc<K>) -> F,
    F: Future<Output = Requeue>,
{
    let mut queue = Queue::new(first);
    let mut running = FuturesUnordered::new();
    let (mut asks, mut asks_open) = (std::pin::pin!(asks), true);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        while let Some(job) = queue.next(concurrency.max(1)) {
            match store.get(&job) {
                Some(object) => {
                    let pass = pass(object);
                    running.push(async move { (job, pass.await) });
                }
                None => {
                    debug!("{job} is gone: no pass");
                    queue.done(job, Requeue::await_change());
                }
            }
        }
        tokio::select! {
            // Ended passes first: each frees a slot for a job that waits.
            Some((job, requeue)) = running.next(), if !running.is_empty() => queue.done(job, requeue),
            ask = asks.next(), if asks_open => match ask {
                Some(job) => queue.ask(job),
                None => asks_open = false,
            },
            job = queue.due() => queue.ask(job),
            () = &mut shutdown => break,
        }
    }
    // Shutting down: the passes under way end, no other starts.
    while running.next().await.is_some() {}
}

#[cfg(test)]
#[path = "dispatch_tests.rs"]
mod tests;
