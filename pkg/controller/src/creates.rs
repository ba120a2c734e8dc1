//! How a pass's creates go out: concurrently within a job, at most `per_job` at once, and every
//! request holding one permit of a budget shared by all jobs. On a production API server every
//! create waits for etcd's fsync and a network round trip; one after another, a job of a thousand
//! collectors waits that latency two thousand times in a row, while the API server could take
//! many writes at once. The window keeps one big job from taking the whole budget (the other
//! jobs' passes get permits between its requests), and the budget keeps a hundred jobs starting
//! together from opening thousands of requests.

use std::future::Future;
use std::sync::Arc;

use futures::StreamExt;
use tokio::sync::Semaphore;

pub struct Limits {
    per_job: usize,
    budget: Arc<Semaphore>,
}

impl Limits {
    /// At least one of each.
    pub fn new(per_job: usize, in_flight: usize) -> Limits {
        Limits { per_job: per_job.max(1), budget: Arc::new(Semaphore::new(in_flight.max(1))) }
    }

    /// Runs `tasks`, at most `per_job` at once, each made only once it holds a permit of the
    /// shared budget, and made on the heap: a request's future is kilobytes, and the creates of a
    /// hundred passes waiting for their permits would otherwise each hold one from the start.
    /// Every task runs: one that fails cancels none of the others, so what could be created is,
    /// and the pass after a failure has less to do. The outputs come in the order the tasks
    /// finished.
    pub async fn run_all<F: Future>(&self, tasks: impl IntoIterator<Item = impl FnOnce() -> F>) -> Vec<F::Output> {
        // Built before they are streamed: a stream over a closure that borrows loses its `Send`
        // to a limitation of the compiler's inference, and a pass must be `Send`.
        let tasks: Vec<_> = tasks.into_iter().map(|make| self.with_permit(make)).collect();
        futures::stream::iter(tasks).buffer_unordered(self.per_job).collect().await
    }

    async fn with_permit<F: Future>(&self, make: impl FnOnce() -> F) -> F::Output {
        // The semaphore is never closed, so a permit always comes.
        let _permit = self.budget.acquire().await.expect("the budget is never closed");
        Box::pin(make()).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    /// Runs `jobs` lists of `items` at once through `limits`; the most requests seen in flight
    /// at once, overall and within one job.
    async fn peaks(limits: &Limits, jobs: usize, items: usize) -> (usize, usize) {
        let (now, peak) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let job_peak = AtomicUsize::new(0);
        let one_job = |_| async {
            let mine = AtomicUsize::new(0);
            let task = || async {
                let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(n, Ordering::SeqCst);
                job_peak.fetch_max(mine.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(10)).await;
                mine.fetch_sub(1, Ordering::SeqCst);
                now.fetch_sub(1, Ordering::SeqCst);
            };
            limits.run_all((0..items).map(|_| task)).await.len()
        };
        let done: Vec<usize> = futures::future::join_all((0..jobs).map(one_job)).await;
        assert_eq!(done, vec![items; jobs], "every item of every job ran once");
        (peak.load(Ordering::SeqCst), job_peak.load(Ordering::SeqCst))
    }

    #[tokio::test(start_paused = true)]
    async fn a_job_uses_its_window_and_all_jobs_share_the_budget() {
        assert_eq!(peaks(&Limits::new(4, 100), 1, 20).await, (4, 4), "one job: its window");
        assert_eq!(peaks(&Limits::new(4, 6), 3, 20).await, (6, 4), "three jobs: the budget");
        assert_eq!(peaks(&Limits::new(0, 0), 2, 3).await, (1, 1), "at least one");
    }

    #[tokio::test(start_paused = true)]
    async fn a_task_is_made_only_once_it_holds_a_permit() {
        let limits = Limits::new(8, 3);
        let (made, peak) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let make = || {
            peak.fetch_max(made.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
            async {
                tokio::time::sleep(Duration::from_millis(10)).await;
                made.fetch_sub(1, Ordering::SeqCst);
            }
        };
        let job = |_| limits.run_all((0..20).map(|_| make));
        let done = futures::future::join_all((0..5).map(job)).await;
        assert_eq!(done.iter().map(Vec::len).sum::<usize>(), 100, "every task ran");
        assert_eq!(peak.load(Ordering::SeqCst), 3, "at most the budget's tasks exist at once");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_cancels_none_of_the_others() {
        let task = |i: u64| async move {
            tokio::time::sleep(Duration::from_millis(10 * (10 - i))).await;
            if i.is_multiple_of(4) { Err(i) } else { Ok(i) }
        };
        let results = Limits::new(3, 3).run_all((0..10).map(|i| move || task(i))).await;
        let mut ok: Vec<u64> = results.iter().filter_map(|r| r.ok()).collect();
        ok.sort();
        assert_eq!(ok, [1, 2, 3, 5, 6, 7, 9]);
        assert_eq!(results.iter().filter(|r| r.is_err()).count(), 3);
    }
}
