//! The webhook flooded by hostile clients while the orchestrator leads: slowloris connections,
//! connections that never handshake, 7 MiB reviews in a loop and bodies declared too large, all
//! on loopback and bounded in count and time. The orchestrator runs on its default single thread,
//! which also renews the Lease. Measured: the gaps between the Lease's renewals (its renewTime,
//! polled), which must stay under the renew deadline, and the answer times of well-formed
//! admissions sent meanwhile, each on a connection of its own. The row fails if the Lease was
//! lost or an admission was not answered within the webhook configurations' 5 s.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use di_webhook::certs::Bundle;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::Api;

use super::Finding;
use crate::checks::Verdict;
use crate::flood::{self, Counts, Target};
use crate::plane::Plane;
use crate::process;
use crate::world::{self, World};

pub const TITLE: &str = "webhook flooded (slowloris, silent connections, 7 MiB reviews), leader elected";
pub const LOAD: &str = "200 slowloris + 50 silent connections, 2 loops of 7 MiB reviews, 2 of oversized bodies, 30 s";

const SLOWLORIS: usize = 200;
const SILENT: usize = 50;
const LARGE_LOOPS: usize = 2;
const OVERSIZED_LOOPS: usize = 2;
const FLOOD: Duration = Duration::from_secs(30);
/// Before the flood, for a baseline of the same admissions.
const CALM: Duration = Duration::from_secs(5);
/// The webhook configurations' timeoutSeconds: an answer later than this fails the API call.
const ANSWER: Duration = Duration::from_secs(5);
const RENEW_DEADLINE: Duration = Duration::from_secs(10);

pub async fn run(plane: &Plane) -> anyhow::Result<Finding> {
    let world = World::new(plane, "webhook").await?;
    let ns = world.ns.clone();
    let dir = crate::out_dir()?.join("webhook-tls");
    std::fs::create_dir_all(&dir)?;
    let bundle = Bundle::generate(&["127.0.0.1".into()])?;
    std::fs::write(dir.join("tls.crt"), &bundle.cert)?;
    std::fs::write(dir.join("tls.key"), &bundle.key)?;
    let port = di_e2e::ports::free_port()?;
    let args = vec![
        format!("--webhook-addr=127.0.0.1:{port}"),
        format!("--tls-cert-file={}", dir.join("tls.crt").display()),
        format!("--tls-key-file={}", dir.join("tls.key").display()),
        "--leader-elect".into(),
        "--lease-namespace=di-system".into(),
        format!("--lease-name={ns}"),
        "--lease-duration-seconds=15".into(),
        format!("--renew-deadline-seconds={}", RENEW_DEADLINE.as_secs()),
        "--retry-period-seconds=2".into(),
    ];
    let leader = world.orchestrator("-w", &args).await;
    let leases: Api<Lease> = Api::namespaced(world.cluster.client.clone(), "di-system");
    let holder = "orchestrator-w";
    until_held(&leases, &ns, holder).await?;
    let target = Target::new(([127, 0, 0, 1], port).into(), &bundle.ca_cert)?;
    let small = Arc::new(flood::review(0));

    let calm_until = Instant::now() + CALM;
    let (calm, _) = tokio::join!(admissions(&target, &small, calm_until), renewals(&leases, &ns, holder, calm_until));

    let counts = Arc::new(Counts::default());
    let until = Instant::now() + FLOOD;
    let large = Arc::new(flood::review(7 << 20));
    let mut hostile = tokio::task::JoinSet::new();
    for _ in 0..SLOWLORIS {
        hostile.spawn(flood::slowloris(target.clone(), counts.clone(), until));
    }
    for _ in 0..SILENT {
        hostile.spawn(flood::silent(target.addr, counts.clone(), until));
    }
    for _ in 0..LARGE_LOOPS {
        hostile.spawn(flood::large(target.clone(), large.clone(), counts.clone(), until));
    }
    for _ in 0..OVERSIZED_LOOPS {
        hostile.spawn(flood::oversized(target.clone(), counts.clone(), until));
    }
    let (flooded, renewed) = tokio::join!(admissions(&target, &small, until), renewals(&leases, &ns, holder, until));
    // Each loop ends by itself at `until`; a client blocked on a read is cut here.
    hostile.abort_all();
    let renewed = renewed?;

    let mut verdict = Verdict::default();
    let gap = renewed.gaps.iter().max().copied().unwrap_or(Duration::MAX);
    let line = format!(
        "Lease renewed {} times over the flood, longest gap {:.1} s (deadline {} s)",
        renewed.gaps.len(),
        gap.as_secs_f64(),
        RENEW_DEADLINE.as_secs()
    );
    if renewed.gaps.is_empty() || gap >= RENEW_DEADLINE {
        verdict.lose(line);
    } else {
        verdict.check(line);
    }
    match &renewed.lost_to {
        None => verdict.check(format!("the Lease stayed {holder}'s")),
        Some(other) => verdict.lose(format!("the Lease passed to {other}")),
    }
    if leader.log().contains("lost leadership") || leader.pid().is_none_or(|pid| !process::running(pid)) {
        verdict.lose("the orchestrator lost its leadership or exited");
    }
    verdict.check(format!("calm: {}", calm.summary()));
    let summary = format!("flooded: {}", flooded.summary());
    if flooded.failed.is_empty() && !flooded.answered.is_empty() {
        verdict.check(summary);
    } else {
        verdict.lose(format!("{summary}; first failure: {}", flooded.failed.first().map_or("none", String::as_str)));
    }
    let c = &counts;
    verdict.check(format!(
        "flood: {} slowloris and {} silent connections opened, {} of {} 7 MiB reviews answered, {} oversized bodies refused with 413",
        c.slow_opened.load(Ordering::Relaxed),
        c.silent_opened.load(Ordering::Relaxed),
        c.large_answered.load(Ordering::Relaxed),
        c.large_sent.load(Ordering::Relaxed),
        c.oversized_refused.load(Ordering::Relaxed),
    ));
    world::keep_log("webhook", &leader);
    let _ = std::fs::remove_dir_all(dir);
    Ok(Finding { load: LOAD.into(), verdict })
}

async fn until_held(leases: &Api<Lease>, name: &str, holder: &str) -> anyhow::Result<()> {
    // The Lease gives no event for this to wait on that a poll would not; read every 200 ms.
    let held = async {
        loop {
            let lease = leases.get_opt(name).await.ok().flatten();
            if lease.and_then(|l| l.spec?.holder_identity).as_deref() == Some(holder) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), held).await.with_context(|| format!("{holder} never led"))
}

/// What polling the Lease saw: the gaps between successive renewTimes, and another holder if
/// one took it.
struct Renewals {
    gaps: Vec<Duration>,
    lost_to: Option<String>,
}

/// Reads the Lease every 200 ms until `until` (its renewals are 2 s apart).
async fn renewals(leases: &Api<Lease>, name: &str, holder: &str, until: Instant) -> anyhow::Result<Renewals> {
    let mut seen = Renewals { gaps: vec![], lost_to: None };
    let mut last: Option<Timestamp> = None;
    while Instant::now() < until {
        let spec = leases.get(name).await.context("reading the Lease")?.spec.unwrap_or_default();
        let now_held_by = spec.holder_identity.unwrap_or_default();
        if now_held_by != holder && seen.lost_to.is_none() {
            seen.lost_to = Some(now_held_by);
        }
        if let Some(renewed) = spec.renew_time.map(|t| t.0) {
            if let Some(before) = last.filter(|b| *b != renewed) {
                seen.gaps.push(renewed.duration_since(before).unsigned_abs());
            }
            last = Some(renewed);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(seen)
}

/// The answer times of admissions sent one after another, 100 ms apart, until `until`.
struct Admissions {
    answered: Vec<Duration>,
    failed: Vec<String>,
}

impl Admissions {
    fn summary(&self) -> String {
        let mut times = self.answered.clone();
        let mut ms = |q| flood::quantile(&mut times, q).as_secs_f64() * 1000.0;
        format!(
            "{} admissions answered (p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms), {} failed or later than {} s",
            self.answered.len(),
            ms(0.5),
            ms(0.99),
            ms(1.0),
            self.failed.len(),
            ANSWER.as_secs()
        )
    }
}

async fn admissions(target: &Target, body: &[u8], until: Instant) -> Admissions {
    let mut seen = Admissions { answered: vec![], failed: vec![] };
    while Instant::now() < until {
        match tokio::time::timeout(ANSWER, target.admission(body)).await {
            Ok(Ok(took)) => seen.answered.push(took),
            Ok(Err(e)) => seen.failed.push(format!("{e:#}")),
            Err(_) => seen.failed.push(format!("no answer in {ANSWER:?}")),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    seen
}
