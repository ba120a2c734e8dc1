//! Time to running: M jobs of N collectors against the plain client creating the same objects,
//! with the API server's and etcd's CPU on each side, the orchestrator's own CPU per job, the
//! requests each job cost (see `requests`) and, for the larger multi-job scenarios, a CPU profile
//! of the orchestrator.

use std::time::Duration;

use anyhow::Context;

use super::harness::{Bench, median};
use super::process::cpu_seconds;
use super::requests::{self, Scrape};
use super::{ClusterReport, Row};
use crate::profile::Profile;

pub async fn measure(bench: &Bench, report: &mut ClusterReport) -> anyhow::Result<()> {
    let (rows, waits, profiles) = (&mut report.rows, &mut report.waits, &mut report.profiles);
    // The API server's first requests of a kind pay for warming its caches; neither side
    // should be charged for that.
    bench.time_to_running("warm", 1, 10).await?;
    bench.baseline("bwarm", 1, 10).await?;
    // Every scenario runs several times, each run next to a baseline run, and the goal is judged
    // on the median of the pairs' ratios (see `Paired`): one run of either side varies by a
    // quarter here (2 cores shared by everything). So each runs as often as a minute or two
    // allows (a run of 1x10 takes a fifth of a second, of 100x10 fifteen).
    for (m, n, runs) in scenarios()? {
        let (mut ours, mut base) = (vec![], vec![]);
        let (mut server_ours, mut server_base) = (ServerCost::default(), ServerCost::default());
        let mut orchestrator = 0.0;
        let mut spent = Scrape::default();
        // The largest multi-job scenario's first run is profiled.
        let profiled = m >= 100;
        let mut profile = if profiled { Some(Profile::start(bench.pid, &crate::out_dir()?).await) } else { None };
        // Each side starts from a quiet cluster and is charged until the cluster is quiet again
        // (see `settle`): after this, every side's run ends with a settle.
        bench.settle().await?;
        let idle_rate = bench.idle_server_rate(Duration::from_secs(2)).await?;
        for run in 0..runs {
            // Which side goes first alternates, so neither is always the one right after a
            // settle or right before the other's tail.
            if run % 2 == 1 {
                base.push(self::baseline(bench, &format!("b{m}x{n}-{run}"), m, n, &mut server_base).await?);
            }
            // The API server's metrics are read outside the CPU window: rendering them costs it.
            let reads = bench.server_metrics().await?.reads_of_job_objects();
            let (server, scrape) = (bench.server_cpu()?, bench.metrics().await?);
            let own = cpu_seconds(bench.pid)?;
            let prefix = format!("r{m}x{n}-{run}");
            ours.push(bench.until_running(&prefix, m, n).await?);
            server_ours.until_running += bench.server_cpu()? - server;
            if let Some(started) = profile.take() {
                let summary = match started {
                    Ok(p) => p.finish(15).await,
                    Err(why) => Err(why),
                };
                profiles.push((format!("{m} job(s) x {n} collectors"), summary));
            }
            // Until the cluster is quiet again, so the events and status a job sends after it
            // runs count (and its requests are all in the orchestrator's metrics); the check of
            // its objects lists the namespace, no cost of the orchestrator's, so it comes after.
            let draining = bench.server_cpu()?;
            server_ours.drain_seconds += bench.drain_events().await?.as_secs_f64();
            server_ours.drain += bench.server_cpu()? - draining;
            bench.settle().await?;
            orchestrator += cpu_seconds(bench.pid)? - own;
            server_ours.all += bench.server_cpu()? - server;
            spent.add(&bench.metrics().await?.since(&scrape));
            bench.objects_complete(&prefix, m * (n + 1)).await?;
            bench.settle().await?;
            // After the second settle, so checks that trickle in late are still this run's.
            server_ours.reads += bench.server_metrics().await?.reads_of_job_objects() - reads;
            if run % 2 == 0 {
                base.push(self::baseline(bench, &format!("b{m}x{n}-{run}"), m, n, &mut server_base).await?);
            }
        }
        let paired = Paired::of(&ours, &base);
        let (spread_ours, spread_base) = (spread(&ours), spread(&base));
        let (ours, base) = (median(&mut ours), median(&mut base));
        let scenario = format!("{m} job(s) x {n} collectors");
        let runs_note = if runs > 1 { format!(", median of {runs}") } else { String::new() };
        rows.push(Row {
            figure: format!("time to running, {scenario}{runs_note}"),
            value: format!("{:.3} s{spread_ours}", ours.as_secs_f64()),
            baseline: format!("{:.3} s{spread_base} (plain client, pods and services only)", base.as_secs_f64()),
            ratio: Some(ours.as_secs_f64() / base.as_secs_f64()),
            goal: "-".into(),
            met: None,
        });
        rows.push(Row {
            figure: format!("time to running, {scenario}, ratio of each run to the baseline's next to it"),
            value: format!(
                "median {:.2}, middle half {:.2}-{:.2}",
                paired.median, paired.quartiles.0, paired.quartiles.1
            ),
            baseline: "-".into(),
            ratio: Some(paired.median),
            goal: "ratio <= 1.15".into(),
            met: Some(paired.median <= 1.15),
        });
        rows.extend(requests::per_job(&spent, &scenario, (m * runs) as f64, n));
        rows.extend(server_ours.rows(&server_base, &scenario, (m * runs) as f64, idle_rate));
        // Far steadier than the ratio of times: no other process's share of the cores is in it.
        rows.push(Row::plain(
            format!("orchestrator CPU per job, {scenario}"),
            format!("{:.1} ms", 1000.0 * orchestrator / (m * runs) as f64),
        ));
        waits.push((scenario, spent.request_time()));
    }
    super::timeline::measure(bench, rows).await
}

/// Jobs, collectors and runs of each scenario: by default every size the issue names, as many
/// runs as a minute or two allows; `DI_BENCH_SCENARIOS=1x10:40,1x500:3` measures only those, to
/// try a change on one size with more runs.
fn scenarios() -> anyhow::Result<Vec<(usize, usize, usize)>> {
    let Ok(list) = std::env::var("DI_BENCH_SCENARIOS") else {
        return Ok(vec![(1, 10, 15), (10, 10, 9), (100, 10, 5), (1, 500, 5)]);
    };
    let parse = |item: &str| -> Option<(usize, usize, usize)> {
        let (size, runs) = item.split_once(':')?;
        let (m, n) = size.split_once('x')?;
        let parsed = (m.parse().ok()?, n.parse().ok()?, runs.parse().ok()?);
        (parsed.0 > 0 && parsed.2 > 0).then_some(parsed)
    };
    list.split(',')
        .map(|item| {
            parse(item.trim()).with_context(|| format!("DI_BENCH_SCENARIOS: {item:?} is not JOBSxCOLLECTORS:RUNS"))
        })
        .collect()
}

/// One baseline run from a quiet cluster, its API server and etcd CPU added to `server`; it ends
/// with the cluster quiet again.
async fn baseline(
    bench: &Bench,
    prefix: &str,
    m: usize,
    n: usize,
    server: &mut ServerCost,
) -> anyhow::Result<Duration> {
    let reads = bench.server_metrics().await?.reads_of_job_objects();
    let before = bench.server_cpu()?;
    let took = bench.baseline(prefix, m, n).await?;
    server.until_running += bench.server_cpu()? - before;
    bench.settle().await?;
    server.all += bench.server_cpu()? - before;
    server.reads += bench.server_metrics().await?.reads_of_job_objects() - reads;
    Ok(took)
}

/// The API server's and etcd's CPU seconds one side cost over a scenario's runs: until each run
/// was seen running, while the orchestrator's events drained after it, and in all, until the
/// cluster was quiet again. Events go out at 5 a second after the creates, so at 100x10 the drain
/// lasts about 40 s a run, and the whole figure holds the cluster's idle CPU over it; the idle
/// rate beside the drain tells the two apart. Beside the CPU, the reads of DIJobs, pods and
/// Services the API server served meanwhile: other controllers' checks of the job's objects.
#[derive(Default)]
struct ServerCost {
    until_running: f64,
    drain: f64,
    drain_seconds: f64,
    all: f64,
    reads: f64,
}

impl ServerCost {
    fn rows(&self, base: &ServerCost, scenario: &str, jobs: f64, idle_rate: f64) -> Vec<Row> {
        let compared = |what: &str, ours: f64, base: f64| Row {
            figure: format!("API server and etcd CPU, {scenario}, {what}"),
            value: format!("{ours:.2} s"),
            baseline: format!("{base:.2} s (plain client)"),
            ratio: Some(ours / base),
            goal: "-".into(),
            met: None,
        };
        vec![
            compared("all runs, until each was seen running", self.until_running, base.until_running),
            compared("all runs, until the cluster was quiet again", self.all, base.all),
            Row {
                figure: format!("API server reads of DIJobs, pods and Services per job, {scenario}"),
                value: format!("{:.1}", self.reads / jobs),
                baseline: format!("{:.1} (plain client)", base.reads / jobs),
                ratio: None,
                // The garbage collector reads a job back once when it sees the job's pods before
                // the job; while references named another version than the one it watches, it
                // read every pod and Service and their job back: 44 reads a 10-collector job.
                goal: "< 2 per job".into(),
                met: Some(self.reads / jobs < 2.0),
            },
            Row::plain(
                format!("API server and etcd CPU, {scenario}, while the orchestrator's events drained"),
                format!(
                    "{:.2} s over {:.1} s ({:.2} s at the idle rate, {:.1} % of a core)",
                    self.drain,
                    self.drain_seconds,
                    idle_rate * self.drain_seconds,
                    100.0 * idle_rate
                ),
            ),
        ]
    }
}

/// The ratios of each run to the baseline's run next to it in time. The machine's speed drifts
/// (the same run varies by a quarter within minutes and by half between invocations), and two
/// runs a moment apart share more of that drift than two medians taken over minutes do. Measured
/// so far over two invocations only: the paired median moved less between them than the ratio
/// of medians at three sizes of four.
#[derive(Debug, PartialEq)]
struct Paired {
    median: f64,
    /// The first and third quartiles: the middle half of the ratios.
    quartiles: (f64, f64),
}

impl Paired {
    fn of(ours: &[Duration], base: &[Duration]) -> Paired {
        let mut ratios: Vec<f64> =
            ours.iter().zip(base).map(|(o, b)| o.as_secs_f64() / b.as_secs_f64().max(1e-9)).collect();
        ratios.sort_by(f64::total_cmp);
        let at = |q: f64| ratios[((ratios.len() - 1) as f64 * q).round() as usize];
        Paired { median: at(0.5), quartiles: (at(0.25), at(0.75)) }
    }
}

/// The run-to-run spread, ` (min-max)`, when there was more than one run.
fn spread(runs: &[Duration]) -> String {
    match (runs.iter().min(), runs.iter().max()) {
        (Some(min), Some(max)) if runs.len() > 1 => format!(" ({:.3}-{:.3})", min.as_secs_f64(), max.as_secs_f64()),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paired_ratios_take_the_median_and_middle_half() {
        let ms = |v: &[u64]| v.iter().map(|x| Duration::from_millis(*x)).collect::<Vec<_>>();
        // The machine slows between the runs: each pair shares it.
        let ours = ms(&[110, 220, 115, 330, 120]);
        let base = ms(&[100, 200, 100, 300, 100]);
        let paired = Paired::of(&ours, &base);
        let near = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(near(paired.median, 1.1), "{paired:?}");
        assert!(near(paired.quartiles.0, 1.1) && near(paired.quartiles.1, 1.15), "{paired:?}");
        assert!(near(Paired::of(&ms(&[150]), &ms(&[100])).median, 1.5), "one run");
    }
}
