//! Fairness: small jobs submitted while one job of a thousand collectors is being created, against
//! the same small jobs alone. Their pods compete with the big job's for the API server, which is
//! fair; what must not happen is their status and events waiting for the big job's creates to be
//! over (what only informs waits for creates at most `pace::HOLD`, 3 s).

use std::time::Duration;

use di_api::contract::labels;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::Api;

use super::Row;
use super::harness::{Bench, Marks, Start, took, watch_until};

const BIG: usize = 1000;
const SMALL: usize = 3;
const COLLECTORS: usize = 10;
/// The hold of progress and Normal events, and a second for the event's turn and its write.
const EVENT_GOAL: Duration = Duration::from_secs(4);

/// Of the small jobs, the latest: when all ran, and when each had its first Normal event.
struct Small {
    marks: Marks,
    first_events: Duration,
}

pub async fn measure(bench: &Bench, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    bench.settle().await?;
    let alone = small_jobs(bench, "fa").await?;
    bench.settle().await?;
    // The big job's first pod seen: its pass is creating, and goes on for seconds.
    let pods: Api<Pod> = Api::namespaced(bench.client.clone(), &bench.jobs_ns);
    let first_pod = watch_until(pods, &format!("{}=fbig-0", labels::JOB_NAME), |p| !p.is_empty()).await?;
    let beside = async {
        first_pod.await??;
        small_jobs(bench, "fs").await
    };
    let (big, beside) = tokio::join!(bench.submit_when("fbig", 1, BIG, |_| {}, Start::Now), beside);
    let (big, beside) = (big?, beside?);
    bench.settle().await?;

    let secs = |d: Duration| format!("{:.2} s", d.as_secs_f64());
    let scenario = format!("{SMALL} jobs x {COLLECTORS} collectors submitted while a job of {BIG} is being created");
    let ahead = big.done.saturating_duration_since(beside.marks.done);
    rows.push(Row::plain(
        format!("fairness: the job of {BIG} collectors, time to running"),
        format!("{} (the small jobs ran {} before it)", secs(big.took()), secs(ahead)),
    ));
    rows.push(Row {
        figure: format!("fairness, {scenario}: time until all run"),
        value: secs(beside.marks.took()),
        baseline: format!("{} (alone)", secs(alone.marks.took())),
        ratio: Some(beside.marks.took().as_secs_f64() / alone.marks.took().as_secs_f64()),
        goal: "-".into(),
        met: None,
    });
    rows.push(Row {
        figure: format!("fairness, {scenario}: time until each has its first Normal event"),
        value: secs(beside.first_events),
        baseline: format!("{} (alone)", secs(alone.first_events)),
        ratio: Some(beside.first_events.as_secs_f64() / alone.first_events.as_secs_f64()),
        goal: format!("< {}", secs(EVENT_GOAL)),
        met: Some(beside.first_events < EVENT_GOAL),
    });
    Ok(())
}

/// Submits the small jobs of run `prefix` and waits until they run and each has a Normal event.
async fn small_jobs(bench: &Bench, prefix: &str) -> anyhow::Result<Small> {
    let events: Api<Event> = Api::namespaced(bench.client.clone(), &bench.jobs_ns);
    let names: Vec<String> = (0..SMALL).map(|i| format!("{prefix}-{i}")).collect();
    let each_has_one = move |all: &[std::sync::Arc<Event>]| {
        names.iter().all(|name| {
            all.iter().any(|e| {
                e.type_.as_deref() == Some("Normal") && e.regarding.as_ref().and_then(|r| r.name.as_ref()) == Some(name)
            })
        })
    };
    let seen = watch_until(events, "", each_has_one).await?;
    let marks = bench.submit_when(prefix, SMALL, COLLECTORS, |_| {}, Start::Now).await?;
    let first_events = took(seen, marks.start, Duration::from_secs(120), &format!("{prefix}: an event each")).await?;
    Ok(Small { marks, first_events })
}
