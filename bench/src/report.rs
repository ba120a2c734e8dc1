//! The report `make bench` writes (target/bench/report.md and report.json): which run it was
//! (the headline or the verdict, the commit, the date, the machine), the headline block the
//! README and docs/PERFORMANCE.md carry (see `publish`), then every figure.

use std::process::Command;

use crate::cluster::ClusterReport;
use crate::webhook::Webhook;

/// The lines around the headline, in the report and wherever it is published.
pub const BEGIN: &str = "<!-- bench:headline -->";
pub const END: &str = "<!-- /bench:headline -->";

/// Which run wrote a report: only the first two are published.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `make bench`: the headline sizes, one invocation.
    Headline,
    /// `make bench-verdict`: every scenario, the goal judged over three invocations.
    Verdict,
    /// A part (`--only`, other sizes or invocations): for looking into a figure.
    Partial,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Headline => "headline",
            Mode::Verdict => "verdict",
            Mode::Partial => "partial",
        }
    }

    fn command(self) -> &'static str {
        match self {
            Mode::Headline => "`make bench`",
            Mode::Verdict => "`make bench-verdict`",
            Mode::Partial => "A partial `di-bench` run",
        }
    }
}

/// Where and on what a report was taken.
pub struct Provenance {
    pub mode: Mode,
    pub commit: String,
    pub date: String,
    pub machine: String,
    pub invocations: usize,
}

impl Provenance {
    pub fn here(mode: Mode, invocations: usize) -> Provenance {
        Provenance { mode, commit: commit(), date: today(), machine: machine(), invocations }
    }
}

/// The report as Markdown: the headline block first.
pub fn markdown(p: &Provenance, webhook: &Webhook, cluster: Option<&ClusterReport>) -> String {
    let body = match cluster {
        Some(c) => cluster_markdown(c),
        None => "## Cluster\n\nSKIPPED: no local control plane.\n".to_string(),
    };
    let head = cluster.map_or(String::new(), |c| format!("{}\n", headline(p, webhook, c)));
    format!("# di-orchestrator benchmarks\n\n{head}Machine: {}\n\n{}\n{body}", p.machine, webhook.markdown())
}

/// What the README shows: time to running against the limit at each size, the memory with no
/// jobs and the webhook's answer time, with the run that took them.
pub fn headline(p: &Provenance, webhook: &Webhook, c: &ClusterReport) -> String {
    let invocations = match p.invocations {
        1 => "one invocation".to_string(),
        n => format!("{n} invocations, each ratio the median of theirs"),
    };
    format!(
        "{BEGIN}\n{} at commit {} ({}) on {}, the local control plane with simulated nodes, \
         {invocations}. Time from a DIJob's create until it is `Running` with every collector \
         ready, against the least any operator must do for it as fast as the API server allows \
         (its pods and Services created at the best concurrency a sweep finds, one status write):\n\n{}\n\
         The orchestrator held {:.1} MiB with no jobs; its admission webhook answered 99% of \
         reviews over TLS within {:.2} ms.\n{END}\n",
        p.mode.command(),
        p.commit,
        p.date,
        p.machine,
        c.headline,
        c.idle_rss_mib,
        webhook.tls.p99.as_secs_f64() * 1000.0,
    )
}

/// The report as JSON, with the run it came from.
pub fn json(p: &Provenance, webhook: &Webhook, cluster: Option<&ClusterReport>) -> serde_json::Value {
    let cluster_json = cluster.map(|c| {
        serde_json::json!({
            "rows": c.rows.iter().map(|r| serde_json::json!({"figure": r.figure, "value": r.value, "baseline": r.baseline, "ratio": r.ratio, "goal": r.goal, "met": r.met})).collect::<Vec<_>>(),
            "slope_ms_per_replica": c.slope_ms_per_replica,
            "waits": c.waits.iter().map(|(scenario, times)| serde_json::json!({"scenario": scenario, "requests": times.iter().map(|t| serde_json::json!({"request": t.request, "count": t.count, "seconds": t.seconds})).collect::<Vec<_>>()})).collect::<Vec<_>>(),
            "curve": c.curve.iter().map(|(n, t, rss)| serde_json::json!({"replicas": n, "seconds": t, "rss_mib": rss})).collect::<Vec<_>>(),
        })
    });
    serde_json::json!({
        "mode": p.mode.name(), "commit": p.commit, "date": p.date, "machine": p.machine,
        "invocations": p.invocations, "webhook": webhook.json(), "cluster": cluster_json,
    })
}

fn cluster_markdown(c: &ClusterReport) -> String {
    let mut text = "## Cluster (local control plane, simulated nodes)\n\n| figure | value | baseline | ratio | goal | met |\n|---|---|---|---|---|---|\n".to_string();
    for r in &c.rows {
        let ratio = r.ratio.map_or("-".into(), |x| format!("{x:.2}"));
        let met = match r.met {
            Some(true) => "yes",
            Some(false) => "MISSED",
            None => "-",
        };
        text += &format!("| {} | {} | {} | {ratio} | {} | {met} |\n", r.figure, r.value, r.baseline, r.goal);
    }
    for (scenario, times) in &c.waits {
        text += &format!(
            "\nWhere the orchestrator waited on the API server, {scenario}:\n\n| request | count | total | mean |\n|---|---|---|---|\n"
        );
        for t in times {
            text += &format!(
                "| {} | {:.0} | {:.2} s | {:.1} ms |\n",
                t.request,
                t.count,
                t.seconds,
                1000.0 * t.seconds / t.count
            );
        }
    }
    for (scenario, profile) in &c.profiles {
        text += &format!("\nWhere the orchestrator's CPU went (perf), {scenario}:\n\n");
        text += &match profile {
            Ok(table) => table.clone(),
            Err(why) => format!("No profile: {why}.\n"),
        };
    }
    if let Some(slope) = c.slope_ms_per_replica {
        text +=
            "\nScaling curve, one job of N collectors:\n\n| N | time to running | orchestrator RSS |\n|---|---|---|\n";
        for (n, t, rss) in &c.curve {
            text += &format!("| {n} | {t:.2} s | {rss:.1} MiB |\n");
        }
        text += &format!("\nFitted slope: {slope:.2} ms per replica.\n");
    }
    text
}

/// What the figures were taken on.
fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    format!("{cpus} cores ({model})")
}

/// The commit measured, and `-dirty` when the work tree differs from it, untracked files
/// included (`publish` refuses such a report: its figures belong to no commit).
fn commit() -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(di_e2e::binaries::repo_root())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let Some(head) = git(&["rev-parse", "--short=7", "HEAD"]) else { return "unknown".into() };
    match git(&["status", "--porcelain"]) {
        Some(changes) if changes.is_empty() => head,
        _ => format!("{head}-dirty"),
    }
}

/// The date in UTC, as `date` gives it.
fn today() -> String {
    Command::new("date")
        .args(["-u", "+%Y-%m-%d"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| "an unknown date".into())
}
