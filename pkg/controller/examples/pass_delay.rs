//! How long a request for a pass now waits before the pass starts, in kube-runtime's scheduler
//! (which its `Controller` runs every request through) and in `dispatch` (the orchestrator's), on
//! a single-threaded runtime as the orchestrator's: `cargo run --release --example pass_delay`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use di_controller::dispatch::{self, Requeue};
use futures::StreamExt;
use futures::channel::mpsc;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::scheduler::{ScheduleRequest, scheduler};
use kube::runtime::watcher::Event;

const REQUESTS: usize = 200;
/// Between requests: not a whole number of milliseconds, so requests fall anywhere in one.
const APART: Duration = Duration::from_micros(3_100);

#[tokio::main(flavor = "current_thread")]
async fn main() {
    println!("kube-runtime's scheduler: {}", summary(kube_scheduler().await));
    println!("dispatch: {}", summary(dispatcher().await));
}

async fn kube_scheduler() -> Vec<Duration> {
    let (requests, received) = mpsc::unbounded();
    let mut scheduled = Box::pin(scheduler(received));
    let mut waits = vec![];
    for i in 0..REQUESTS {
        tokio::time::sleep(APART).await;
        let asked = Instant::now();
        requests.unbounded_send(ScheduleRequest { message: i, run_at: asked.into() }).expect("scheduler gone");
        assert_eq!(scheduled.next().await, Some(i));
        waits.push(asked.elapsed());
    }
    waits
}

async fn dispatcher() -> Vec<Duration> {
    let (store, mut writer) = reflector::store();
    let mut map = ConfigMap::default();
    (map.metadata.name, map.metadata.namespace) = (Some("job".into()), Some("ns".into()));
    writer.apply_watcher_event(&Event::Apply(map));
    let (asks, received) = mpsc::unbounded();
    let (started, mut starts) = mpsc::unbounded();
    let pass = move |_: Arc<ConfigMap>| {
        let _ = started.unbounded_send(Instant::now());
        async { Requeue::await_change() }
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let stopped = async {
        let _ = stopped.await;
    };
    let dispatching = tokio::spawn(dispatch::run(store, received, 1, |_: &ObjectRef<ConfigMap>| false, stopped, pass));
    let mut waits = vec![];
    for _ in 0..REQUESTS {
        tokio::time::sleep(APART).await;
        let asked = Instant::now();
        asks.unbounded_send(ObjectRef::new("job").within("ns")).expect("dispatcher gone");
        let start = starts.next().await.expect("a pass");
        waits.push(start - asked);
    }
    let _ = stop.send(());
    dispatching.await.expect("dispatcher");
    waits
}

fn summary(mut waits: Vec<Duration>) -> String {
    waits.sort();
    let at = |q: f64| waits[((waits.len() - 1) as f64 * q) as usize];
    format!("median {:?}, 90th percentile {:?}, most {:?} ({} requests)", at(0.5), at(0.9), at(1.0), waits.len())
}
