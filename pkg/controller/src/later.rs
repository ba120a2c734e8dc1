//! Passes that may wait: a pod report that only moves a starting job's progress (see `triggers`)
//! brings its job's pass one status period later, not at once, and all such reports of a job
//! within that period bring one pass. A job of a thousand collectors otherwise ran a pass for
//! nearly every pod that came up (180 passes, 1.2 s of CPU, on the cores its API server needed),
//! while its status could show progress only once a period anyway (see `pace`). Any pass of the
//! job meanwhile (a report that cannot wait, a change of the job) reads every report before it,
//! so it takes the waiting pass's place.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use futures::Stream;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::time::Instant;

use crate::view::JobView;

type Job = ObjectRef<JobView>;

enum Message {
    /// A report of the job may wait for its pass.
    Wait(Job),
    /// A pass of the job starts: it reads every report cached before it.
    Ran(Job),
}

/// Where reports that may wait are sent, and passes say they started.
#[derive(Clone)]
pub struct Later(UnboundedSender<Message>);

impl Later {
    /// The handle, and the stream of the jobs whose pass is due (polled by the controller).
    pub fn new(period: Duration) -> (Later, impl Stream<Item = Job> + Send + 'static) {
        let (sender, receiver) = unbounded_channel();
        (Later(sender), due(receiver, period))
    }

    /// A report of `job`, already in the cache, brings its pass within the period.
    pub fn wait(&self, job: Job) {
        // Only closed when the controller is gone, and its passes with it.
        let _ = self.0.send(Message::Wait(job));
    }

    /// A pass of `job` starts: what waited for it is read by this pass. Called before the pass
    /// reads the caches, so no report cached after that is taken for read.
    pub fn ran(&self, job: Job) {
        let _ = self.0.send(Message::Ran(job));
    }
}

fn due(receiver: UnboundedReceiver<Message>, period: Duration) -> impl Stream<Item = Job> + Send + 'static {
    futures::stream::unfold((receiver, Waiting::default()), move |(mut receiver, mut waiting)| async move {
        loop {
            if let Some(job) = waiting.pop(Instant::now()) {
                return Some((job, (receiver, waiting)));
            }
            let next = waiting.next_due();
            tokio::select! {
                message = receiver.recv() => match message {
                    Some(Message::Wait(job)) => waiting.wait(job, Instant::now() + period),
                    Some(Message::Ran(job)) => waiting.ran(&job),
                    None => return None,
                },
                _ = tokio::time::sleep_until(next.unwrap_or_else(Instant::now)), if next.is_some() => {}
            }
        }
    })
}

/// The jobs waiting for a pass, each due once. Every wait is as long, so the queue is in order of
/// due time; a pass that ran takes its job out of `due`, and its queued entry is skipped.
#[derive(Default)]
struct Waiting {
    due: HashMap<Job, Instant>,
    queue: VecDeque<(Instant, Job)>,
}

impl Waiting {
    fn wait(&mut self, job: Job, at: Instant) {
        if !self.due.contains_key(&job) {
            self.due.insert(job.clone(), at);
            self.queue.push_back((at, job));
        }
    }

    fn ran(&mut self, job: &Job) {
        self.due.remove(job);
    }

    /// The first job due by `now`, if any.
    fn pop(&mut self, now: Instant) -> Option<Job> {
        while let Some((at, _)) = self.queue.front() {
            if *at > now {
                return None;
            }
            let (at, job) = self.queue.pop_front()?;
            // Skipped when a pass ran since, or the job waits again from later on.
            if self.due.get(&job) == Some(&at) {
                self.due.remove(&job);
                return Some(job);
            }
        }
        None
    }

    /// When the first entry is due (perhaps one a pass made void: popping skips it).
    fn next_due(&self) -> Option<Instant> {
        self.queue.front().map(|(at, _)| *at)
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;

    fn job(name: &str) -> Job {
        ObjectRef::new(name).within("ns")
    }

    #[test]
    fn a_job_is_due_once_a_period_after_its_first_report() {
        let (start, period) = (Instant::now(), Duration::from_secs(1));
        let mut waiting = Waiting::default();
        waiting.wait(job("a"), start + period);
        waiting.wait(job("a"), start + period + Duration::from_millis(300));
        waiting.wait(job("b"), start + period + Duration::from_millis(500));
        assert_eq!(waiting.pop(start), None, "nothing due yet");
        assert_eq!(waiting.pop(start + period), Some(job("a")), "from its first report");
        assert_eq!(waiting.pop(start + 2 * period), Some(job("b")));
        assert_eq!(waiting.pop(start + 3 * period), None, "each report brought no pass of its own");
    }

    #[test]
    fn a_pass_that_ran_takes_the_waiting_ones_place() {
        let (start, period) = (Instant::now(), Duration::from_secs(1));
        let mut waiting = Waiting::default();
        waiting.wait(job("a"), start + period);
        waiting.ran(&job("a"));
        assert_eq!(waiting.pop(start + period), None, "the pass read the report");
        // A report after the pass waits afresh, from its own time.
        waiting.wait(job("a"), start + 2 * period);
        waiting.wait(job("b"), start + 2 * period);
        waiting.ran(&job("b"));
        assert_eq!(waiting.pop(start + 2 * period), Some(job("a")));
        assert_eq!(waiting.pop(start + 5 * period), None);
        assert!(waiting.due.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn the_stream_brings_each_job_when_due() {
        let (later, due) = Later::new(Duration::from_secs(1));
        let mut due = Box::pin(due);
        let start = Instant::now();
        later.wait(job("a"));
        later.wait(job("b"));
        later.ran(job("b"));
        assert_eq!(due.next().await, Some(job("a")));
        assert_eq!(Instant::now() - start, Duration::from_secs(1), "one period after the report");
        later.wait(job("c"));
        assert_eq!(due.next().await, Some(job("c")), "b's pass ran: only c is left");
        drop(later);
        assert_eq!(due.next().await, None, "ends with its handle");
    }
}
