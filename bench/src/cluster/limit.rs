//! Time to running against the limit (see `baseline`), at every size, over several invocations:
//! each invocation is a control plane and orchestrator of its own, and gives per size the median
//! of its paired ratios (each run of ours next to a baseline run); the goal is judged on the
//! median over invocations, since the machine's speed drifts more between invocations than
//! within one. Beside them, the per-replica slope of one growing job on each side.

use std::collections::BTreeMap;
use std::time::Duration;

use super::Row;
use super::curve::fit_slope;
use super::harness::median;

/// The goal: the orchestrator within this ratio of the limit.
pub const GOAL: f64 = 1.05;

/// One size in one invocation.
pub struct Pairs {
    /// Medians of the runs on each side.
    pub ours: Duration,
    pub base: Duration,
    /// The median of each run's ratio to the baseline run next to it.
    pub paired: f64,
    /// The baseline's window: the sweep's best.
    pub window: usize,
    /// What the sweep measured: each window and its time.
    pub swept: Vec<(usize, Duration)>,
    /// Every run's time on each side, in the order run.
    pub runs: (Vec<Duration>, Vec<Duration>),
}

impl Pairs {
    pub fn of(mut ours: Vec<Duration>, mut base: Vec<Duration>, window: usize, swept: Vec<(usize, Duration)>) -> Pairs {
        let paired = paired_median(&ours, &base);
        let runs = (ours.clone(), base.clone());
        Pairs { ours: median(&mut ours), base: median(&mut base), paired, window, swept, runs }
    }
}

/// The median of the ratios of each run to the baseline's run next to it in time. The machine's
/// speed drifts (the same run varies by a quarter within minutes), and two runs a moment apart
/// share more of that drift than two medians taken over minutes do.
pub fn paired_median(ours: &[Duration], base: &[Duration]) -> f64 {
    let mut ratios: Vec<f64> =
        ours.iter().zip(base).map(|(o, b)| o.as_secs_f64() / b.as_secs_f64().max(1e-9)).collect();
    ratios.sort_by(f64::total_cmp);
    ratios.get(ratios.len().saturating_sub(1) / 2).copied().unwrap_or(f64::NAN)
}

/// Every invocation's pairs of one scenario, by size (jobs, and pods of one kind per job).
pub struct Limit {
    scenario: &'static str,
    /// What a size counts per job: `collectors` (besides a coordinator), `gang workers`.
    unit: &'static str,
    /// What the baseline creates for a job, besides the DIJob.
    made: &'static str,
    sizes: BTreeMap<(usize, usize), Vec<Pairs>>,
}

impl Limit {
    /// Role jobs of a coordinator and collectors.
    pub fn new(scenario: &'static str) -> Limit {
        Limit::of(scenario, "collectors", "pods and Services")
    }

    pub fn of(scenario: &'static str, unit: &'static str, made: &'static str) -> Limit {
        Limit { scenario, unit, made, sizes: BTreeMap::new() }
    }

    /// Adds one invocation's pairs of a size; every run's time goes to the log, in order, so a
    /// drift within the invocation shows.
    pub fn add(&mut self, m: usize, n: usize, pairs: Pairs) {
        let list = |d: &[Duration]| d.iter().map(|d| format!("{:.3}", d.as_secs_f64())).collect::<Vec<_>>().join(" ");
        eprintln!("{}, {m}x{n}: ours {} s; the limit's {} s", self.scenario, list(&pairs.runs.0), list(&pairs.runs.1));
        self.sizes.entry((m, n)).or_default().push(pairs);
    }

    pub fn rows(&self) -> Vec<Row> {
        let mut rows = vec![];
        let (mut ours_curve, mut base_curve) = (vec![], vec![]);
        for (&(m, n), all) in &self.sizes {
            let listed = all.iter().map(|p| format!("{:.2}", p.paired)).collect::<Vec<_>>().join(", ");
            let (ours, base, ratio) = judged(all);
            let windows = all.iter().map(|p| p.window.to_string()).collect::<Vec<_>>().join(", ");
            let size = format!("{m} job(s) x {n} {}", self.unit);
            rows.push(Row {
                figure: format!(
                    "time to running, {}, {size}, paired median of {} invocation(s) ({listed})",
                    self.scenario,
                    all.len()
                ),
                value: format!("{:.3} s", ours.as_secs_f64()),
                baseline: format!(
                    "{:.3} s (DIJob create, {} at a window of {windows}, one status write)",
                    base.as_secs_f64(),
                    self.made,
                ),
                ratio: Some(ratio),
                goal: format!("ratio <= {GOAL}"),
                met: Some(ratio <= GOAL),
            });
            if let Some(first) = all.first() {
                let swept = first.swept.iter().map(|(w, t)| format!("{w}: {:.3} s", t.as_secs_f64()));
                rows.push(Row::plain(
                    format!("baseline's window sweep, {}, {size}, first invocation", self.scenario),
                    swept.collect::<Vec<_>>().join(", "),
                ));
            }
            if m == 1 {
                ours_curve.push((n as f64, ours.as_secs_f64()));
                base_curve.push((n as f64, base.as_secs_f64()));
            }
        }
        if ours_curve.len() >= 2 {
            let (ours, base) = (1000.0 * fit_slope(&ours_curve), 1000.0 * fit_slope(&base_curve));
            let sizes = ours_curve.iter().map(|(n, _)| n.to_string()).collect::<Vec<_>>().join(", ");
            rows.push(Row {
                figure: format!("per-replica slope, {}, one job of {sizes} {}", self.scenario, self.unit),
                value: format!("{ours:.2} ms per replica"),
                baseline: format!("{base:.2} ms per replica (the limit)"),
                ratio: Some(ours / base),
                goal: "-".into(),
                met: None,
            });
        }
        rows
    }

    /// The headline: each size's time on both sides and its ratio, as a Markdown table.
    pub fn table(&self) -> String {
        let mut text = "| job | time to Running | the limit | ratio |\n|---|---|---|---|\n".to_string();
        for (&(m, n), all) in &self.sizes {
            let (ours, base, ratio) = judged(all);
            let jobs = if m == 1 { "1 job".to_string() } else { format!("{} jobs", thousands(m)) };
            text += &format!(
                "| {jobs} x {} {} | {} | {} | {ratio:.2} |\n",
                thousands(n),
                self.unit,
                seconds(ours),
                seconds(base)
            );
        }
        text
    }
}

/// A size's medians on each side, and its ratio: the median over invocations of each one's
/// paired median.
fn judged(all: &[Pairs]) -> (Duration, Duration, f64) {
    let mut paired: Vec<f64> = all.iter().map(|p| p.paired).collect();
    paired.sort_by(f64::total_cmp);
    let ratio = paired[(paired.len() - 1) / 2];
    let ours = median(&mut all.iter().map(|p| p.ours).collect::<Vec<_>>());
    let base = median(&mut all.iter().map(|p| p.base).collect::<Vec<_>>());
    (ours, base, ratio)
}

/// Two significant places or more: 0.046 s, 0.31 s, 3.80 s.
fn seconds(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 0.1 { format!("{s:.3} s") } else { format!("{s:.2} s") }
}

fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|x| Duration::from_millis(*x)).collect()
    }

    #[test]
    fn pairs_each_run_with_the_baseline_next_to_it() {
        // The machine slows between the runs: each pair shares it.
        let ratio = paired_median(&ms(&[110, 220, 115, 330, 120]), &ms(&[100, 200, 100, 300, 100]));
        assert!((ratio - 1.1).abs() < 1e-9, "{ratio}");
        assert!((paired_median(&ms(&[150]), &ms(&[100])) - 1.5).abs() < 1e-9, "one run");
        // An even count takes the lower middle, never a ratio no run had.
        assert!((paired_median(&ms(&[100, 120]), &ms(&[100, 100])) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn judges_the_median_over_invocations_and_fits_both_slopes() {
        let mut limit = Limit::new("s");
        let pair = |ours: u64, base: u64, paired: f64| Pairs {
            ours: Duration::from_millis(ours),
            base: Duration::from_millis(base),
            paired,
            window: 16,
            swept: vec![(4, Duration::from_millis(base * 2)), (16, Duration::from_millis(base))],
            runs: (vec![Duration::from_millis(ours)], vec![Duration::from_millis(base)]),
        };
        for paired in [1.2, 1.01, 1.04] {
            limit.add(1, 10, pair(110, 100, paired));
        }
        limit.add(1, 1000, pair(10_100, 10_000, 1.01));
        let rows = limit.rows();
        let first = &rows[0];
        assert_eq!(first.ratio, Some(1.04), "the middle invocation, not the first");
        assert_eq!(first.met, Some(true));
        assert!(first.figure.contains("(1.20, 1.01, 1.04)"), "{}", first.figure);
        assert_eq!(rows[1].value, "4: 0.200 s, 16: 0.100 s");
        let slope = rows.last().expect("a slope row");
        assert_eq!(slope.value, "10.09 ms per replica");
        assert_eq!(slope.baseline, "10.00 ms per replica (the limit)");
        let table = limit.table();
        assert!(table.contains("| 1 job x 10 collectors | 0.11 s | 0.10 s | 1.04 |"), "{table}");
        assert!(table.contains("| 1 job x 1,000 collectors | 10.10 s | 10.00 s | 1.01 |"), "{table}");
        assert_eq!(seconds(Duration::from_millis(46)), "0.046 s");
        assert_eq!(thousands(100_000), "100,000");
    }
}
