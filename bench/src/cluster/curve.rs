//! The scaling curve: time to running and the orchestrator's RSS as one job grows, and the
//! slope fitted over it.

use super::ClusterReport;
use super::harness::Bench;
use super::process::rss_mib;

pub async fn measure(bench: &Bench, report: &mut ClusterReport) -> anyhow::Result<()> {
    for n in [10, 100, 1000] {
        let t = bench.time_to_running(&format!("c{n}"), 1, n).await?;
        report.curve.push((n, t.as_secs_f64(), rss_mib(bench.pid)?));
    }
    let points: Vec<(f64, f64)> = report.curve.iter().map(|(n, t, _)| (*n as f64, *t)).collect();
    report.slope_ms_per_replica = Some(fit_slope(&points) * 1000.0);
    Ok(())
}

/// Least-squares slope of `y` over `x`.
pub fn fit_slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    let (sx, sy) = points.iter().fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let cov: f64 = points.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let var: f64 = points.iter().map(|(x, _)| (x - mx) * (x - mx)).sum();
    if var == 0.0 { 0.0 } else { cov / var }
}

#[cfg(test)]
mod tests {
    use super::fit_slope;

    #[test]
    fn fits_the_slope_of_a_line() {
        let points = [(10.0, 0.17), (100.0, 0.8), (1000.0, 7.1)];
        assert!((fit_slope(&points) - 0.007).abs() < 0.0002, "{}", fit_slope(&points));
        assert_eq!(fit_slope(&[(5.0, 1.0), (5.0, 2.0)]), 0.0, "no spread in x: no slope");
    }
}
