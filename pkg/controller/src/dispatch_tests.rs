use std::sync::Mutex;

use futures::future::BoxFuture;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher::Event;
use tokio::time::Instant;

use super::*;

/// A queue whose `first` picks the jobs in `picked`, which a test changes as it goes.
fn queue(picked: &Arc<Mutex<HashSet<&'static str>>>) -> Queue<&'static str, impl Fn(&&'static str) -> bool + use<>> {
    let picked = picked.clone();
    Queue::new(move |job: &&'static str| picked.lock().unwrap().contains(job))
}

#[test]
fn a_job_asked_for_twice_waits_once_and_one_asked_for_while_it_runs_runs_again() {
    let mut queue = queue(&Arc::default());
    queue.ask("a");
    queue.ask("b");
    queue.ask("a");
    assert_eq!(queue.next(1), Some("a"));
    assert_eq!(queue.next(1), None, "one pass at a time");
    queue.ask("a");
    queue.ask("c");
    queue.done("a", Requeue::await_change());
    assert_eq!(queue.next(3), Some("b"), "in the order asked for");
    assert_eq!(queue.next(3), Some("c"));
    assert_eq!(queue.next(3), Some("a"), "asked for while it ran: in line after its pass");
    assert_eq!(queue.next(3), None);
}

#[test]
fn a_job_picked_to_go_first_goes_before_the_line_even_one_that_waits_in_it() {
    let picked = Arc::default();
    let mut queue = queue(&picked);
    for job in ["a", "b", "c", "d"] {
        queue.ask(job);
    }
    picked.lock().unwrap().insert("d");
    queue.ask("d");
    assert_eq!(queue.next(1), Some("d"), "picked while it waited in line: it leaves the line");
    picked.lock().unwrap().insert("e");
    queue.ask("d");
    queue.ask("e");
    queue.done("d", Requeue::await_change());
    assert_eq!(queue.next(1), Some("e"), "picked when asked for: before the line");
    queue.done("e", Requeue::await_change());
    assert_eq!(queue.next(1), Some("d"), "asked for while it ran, still picked: first too");
    queue.done("d", Requeue::await_change());
    picked.lock().unwrap().clear();
    queue.ask("e");
    let order: Vec<_> = std::iter::from_fn(|| {
        let job = queue.next(1)?;
        queue.done(job, Requeue::await_change());
        Some(job)
    })
    .collect();
    assert_eq!(order, ["a", "b", "c", "e"], "no longer picked: in line");
}

#[test]
fn the_line_gets_a_slot_after_a_few_jobs_went_first_in_a_row() {
    let picked = Arc::new(Mutex::new(HashSet::from(["k1", "k2", "k3", "k4", "k5", "k6"])));
    let mut queue = queue(&picked);
    queue.ask("new");
    for job in ["k1", "k2", "k3", "k4", "k5", "k6"] {
        queue.ask(job);
    }
    let order: Vec<_> = std::iter::from_fn(|| {
        let job = queue.next(1)?;
        queue.done(job, Requeue::await_change());
        Some(job)
    })
    .collect();
    assert_eq!(order, ["k1", "k2", "k3", "k4", "new", "k5", "k6"]);
}

#[tokio::test(start_paused = true)]
async fn a_requeue_waits_for_its_timer_and_an_ask_stands_for_it() {
    let mut queue = queue(&Arc::default());
    queue.ask("a");
    let a = queue.next(1).unwrap();
    queue.done(a, Requeue::after(Duration::from_secs(5)));
    assert_eq!(queue.next(1), None, "not due yet");
    let start = Instant::now();
    assert_eq!(queue.due().await, "a");
    assert!(start.elapsed() >= Duration::from_secs(5));

    // Asked for before its timer: the pass runs now, and the timer is gone.
    queue.done("b", Requeue::after(Duration::from_secs(5)));
    queue.ask("b");
    assert_eq!(queue.next(1), Some("b"));
    queue.done("b", Requeue::await_change());
    let waited = tokio::time::timeout(Duration::from_secs(60), queue.due()).await;
    assert!(waited.is_err(), "no timer left");
}

fn map(name: &str) -> ConfigMap {
    let mut map = ConfigMap::default();
    map.metadata.name = Some(name.into());
    map.metadata.namespace = Some("ns".into());
    map
}

fn stored(names: &[&str]) -> (Store<ConfigMap>, Writer<ConfigMap>) {
    let (store, mut writer) = reflector::store();
    for name in names {
        writer.apply_watcher_event(&Event::Apply(map(name)));
    }
    (store, writer)
}

fn job(name: &str) -> ObjectRef<ConfigMap> {
    ObjectRef::new(name).within("ns")
}

/// Each pass's job and when it started, and how many ended; `busy` marks a pass running, to
/// catch two of one job.
#[derive(Default)]
struct Log {
    passes: Mutex<Vec<(String, Instant)>>,
    busy: Mutex<HashSet<String>>,
    ended: Mutex<usize>,
}

/// A pass that logs itself in `log`, lasts `lasts` and asks for `requeue`.
fn logged(
    log: &Arc<Log>,
    lasts: Duration,
    requeue: Requeue,
) -> impl Fn(Arc<ConfigMap>) -> BoxFuture<'static, Requeue> + use<> {
    let log = log.clone();
    move |object: Arc<ConfigMap>| {
        let log = log.clone();
        Box::pin(async move {
            let name = object.metadata.name.clone().unwrap();
            log.passes.lock().unwrap().push((name.clone(), Instant::now()));
            assert!(log.busy.lock().unwrap().insert(name.clone()), "two passes of {name} at once");
            tokio::time::sleep(lasts).await;
            log.busy.lock().unwrap().remove(&name);
            *log.ended.lock().unwrap() += 1;
            requeue
        })
    }
}

#[tokio::test(start_paused = true)]
async fn a_request_for_now_runs_at_once_one_pass_a_job_at_a_time() {
    let (store, _writer) = stored(&["a", "b"]);
    let (asks, received) = futures::channel::mpsc::unbounded();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let log = Arc::new(Log::default());
    let pass = logged(&log, Duration::from_millis(100), Requeue::await_change());
    let start = Instant::now();
    let running = tokio::spawn(run(
        store,
        received,
        4,
        |_: &ObjectRef<ConfigMap>| false,
        async {
            let _ = stopped.await;
        },
        pass,
    ));
    for name in ["a", "a", "gone", "b"] {
        asks.unbounded_send(job(name)).unwrap();
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    // While a's pass runs: one more after it, however often asked.
    asks.unbounded_send(job("a")).unwrap();
    asks.unbounded_send(job("a")).unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.send(()).unwrap();
    running.await.unwrap();
    let passes = log.passes.lock().unwrap().clone();
    let at = |name: &str| -> Vec<Duration> {
        passes.iter().filter(|(n, _)| n == name).map(|(_, at)| at.duration_since(start)).collect()
    };
    // The paused clock moves only when every task waits on a timer: passes asked for now start
    // before it has moved at all.
    assert_eq!(at("a"), [Duration::ZERO, Duration::from_millis(100)]);
    assert_eq!(at("b"), [Duration::ZERO]);
    assert_eq!(passes.len(), 3, "no pass of a job not in the store");
}

#[tokio::test(start_paused = true)]
async fn a_requeued_job_passes_again_and_shutdown_waits_for_the_pass_under_way() {
    let (store, _writer) = stored(&["a"]);
    let (asks, received) = futures::channel::mpsc::unbounded();
    let log = Arc::new(Log::default());
    let pass = logged(&log, Duration::from_secs(1), Requeue::after(Duration::from_secs(10)));
    let start = Instant::now();
    asks.unbounded_send(job("a")).unwrap();
    // Stops while the second pass (at 11 s) runs.
    let shutdown = tokio::time::sleep(Duration::from_millis(11_500));
    run(store, received, 1, |_: &ObjectRef<ConfigMap>| false, shutdown, pass).await;
    let passes: Vec<Duration> = log.passes.lock().unwrap().iter().map(|(_, at)| at.duration_since(start)).collect();
    assert_eq!(passes, [Duration::ZERO, Duration::from_secs(11)]);
    assert_eq!(start.elapsed(), Duration::from_secs(12));
    assert_eq!(*log.ended.lock().unwrap(), 2, "the pass under way ended");
}
