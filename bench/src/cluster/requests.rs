//! API request accounting, from the orchestrator's metrics: requests and status writes per job
//! against the least a job can cost, and where the orchestrator waited on the API server (every
//! request is timed by verb and resource, see `di_controller::timing`).

use std::collections::BTreeMap;

use super::{RequestTime, Row};

/// The orchestrator's metrics at one moment, or what grew between two: every sample by its series
/// (name and labels).
#[derive(Default)]
pub struct Scrape(BTreeMap<String, f64>);

impl Scrape {
    pub fn add(&mut self, more: &Scrape) {
        for (k, v) in &more.0 {
            *self.0.entry(k.clone()).or_default() += v;
        }
    }

    pub fn parse(text: &str) -> Scrape {
        let samples = text.lines().filter(|l| !l.starts_with('#')).filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse().ok()?))
        });
        Scrape(samples.collect())
    }

    /// What grew since `before`.
    pub fn since(&self, before: &Scrape) -> Scrape {
        Scrape(self.0.iter().map(|(k, v)| (k.clone(), v - before.0.get(k).unwrap_or(&0.0))).collect())
    }

    /// Events the orchestrator has queued and not sent yet.
    pub fn events_waiting(&self) -> f64 {
        self.sum("di_orchestrator_events_waiting")
    }

    /// From the API server's own metrics: the GETs of DIJobs, pods and Services it served, from
    /// any client. Neither side of the bench reads them one by one (the orchestrator reads a job
    /// only before it makes a coordinator again, which these runs never need), so these are
    /// other controllers' checks, the garbage collector's above all.
    pub fn reads_of_job_objects(&self) -> f64 {
        let read = |labels: &str| {
            labels.contains(r#"verb="GET""#)
                && labels.contains(r#"subresource="""#)
                && ["dijobs", "pods", "services"].iter().any(|r| labels.contains(&format!(r#"resource="{r}""#)))
        };
        self.0.iter().filter(|(k, _)| k.starts_with("apiserver_request_total{") && read(k)).map(|(_, v)| v).sum()
    }

    /// Sum of the series whose name and labels start with `prefix`.
    fn sum(&self, prefix: &str) -> f64 {
        self.0.iter().filter(|(k, _)| k.starts_with(prefix)).map(|(_, v)| v).sum()
    }

    /// Requests by verb and resource, the longest total wait first.
    pub fn request_time(&self) -> Vec<RequestTime> {
        const SUM: &str = "di_orchestrator_api_request_duration_seconds_sum{";
        const COUNT: &str = "di_orchestrator_api_request_duration_seconds_count{";
        let mut times: Vec<RequestTime> = self
            .0
            .iter()
            .filter_map(|(k, seconds)| {
                let labels = k.strip_prefix(SUM)?.trim_end_matches('}');
                let count = *self.0.get(&format!("{COUNT}{labels}}}"))?;
                let value = |name: &str| labels.split(',').find_map(|kv| kv.strip_prefix(&format!("{name}=\"")));
                let request =
                    format!("{} {}", value("verb")?.trim_end_matches('"'), value("resource")?.trim_end_matches('"'));
                Some(RequestTime { request, count, seconds: *seconds })
            })
            .filter(|t| t.count > 0.0)
            .collect();
        times.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
        times
    }
}

/// What `jobs` jobs of `n` collectors cost in `spent`, per job: API requests against the least a
/// job can cost, RBAC writes (none per job where the admission policy holds the replica
/// endpoints; a namespace's shared identity costs two, once), and status writes and passes
/// against the one write that says the job runs.
pub fn per_job(spent: &Scrape, scenario: &str, jobs: f64, n: usize) -> [Row; 3] {
    // The least a job can cost: one create per pod and service (the physical limit), and the
    // status write that says it runs (Created is progress, written only when the API server
    // has time for it: see the orchestrator's pace module).
    let minimum = (2 * (n + 1) + 1) as f64;
    let requests = spent.sum("di_orchestrator_api_requests_total{") / jobs;
    let rbac: f64 = spent
        .request_time()
        .iter()
        .filter(|t| ["POST roles", "POST rolebindings", "POST serviceaccounts"].contains(&t.request.as_str()))
        .fold(0.0, |sum, t| sum + t.count);
    let writes = spent.sum("di_orchestrator_status_writes_total") / jobs;
    let passes = spent.sum("di_orchestrator_reconciles_total") / jobs;
    [
        Row {
            figure: format!("API requests per job, {scenario}"),
            value: format!("{requests:.1}"),
            baseline: format!("{minimum:.0} (minimum)"),
            ratio: Some(requests / minimum),
            goal: "ratio <= 1.5".into(),
            met: Some(requests / minimum <= 1.5),
        },
        Row {
            figure: format!("RBAC writes per job, {scenario}"),
            value: format!("{:.2} ({rbac:.0} in all)", rbac / jobs),
            baseline: "0 (pods and services only)".into(),
            ratio: None,
            goal: "none per job (2 per namespace)".into(),
            met: Some(rbac <= 2.0),
        },
        Row {
            figure: format!("status writes and passes per job, {scenario}"),
            value: format!("{writes:.1} writes, {passes:.1} passes"),
            baseline: "1 write (running)".into(),
            ratio: Some(writes),
            goal: "-".into(),
            met: None,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = r#"# TYPE di_orchestrator_api_requests counter
di_orchestrator_api_requests_total{verb="POST"} 10
di_orchestrator_api_request_duration_seconds_sum{verb="POST",resource="pods"} 1.0
di_orchestrator_api_request_duration_seconds_count{verb="POST",resource="pods"} 10
di_orchestrator_status_writes_total 1
"#;

    const AFTER: &str = r#"# TYPE di_orchestrator_api_requests counter
di_orchestrator_api_requests_total{verb="POST"} 34
di_orchestrator_api_requests_total{verb="PATCH"} 4
di_orchestrator_api_request_duration_seconds_sum{verb="POST",resource="pods"} 2.5
di_orchestrator_api_request_duration_seconds_count{verb="POST",resource="pods"} 30
di_orchestrator_api_request_duration_seconds_sum{verb="PATCH",resource="dijobs/status"} 4.0
di_orchestrator_api_request_duration_seconds_count{verb="PATCH",resource="dijobs/status"} 4
di_orchestrator_status_writes_total 5
di_orchestrator_reconciles_total 6
"#;

    #[test]
    fn counts_the_api_servers_reads_of_a_jobs_objects() {
        let text = r#"apiserver_request_total{code="200",component="apiserver",dry_run="",group="diengine.opendilab.org",resource="dijobs",scope="resource",subresource="",verb="GET",version="v1alpha1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="GET",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="GET",version="v1"} 5
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 11
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="leases",scope="resource",subresource="",verb="GET",version="v1"} 13
"#;
        assert_eq!(Scrape::parse(text).reads_of_job_objects(), 10.0);
    }

    #[test]
    fn reads_what_grew_by_verb_and_resource() {
        let spent = Scrape::parse(AFTER).since(&Scrape::parse(BEFORE));
        let times = spent.request_time();
        let rows: Vec<_> = times.iter().map(|t| (t.request.as_str(), t.count, t.seconds)).collect();
        assert_eq!(rows, [("PATCH dijobs/status", 4.0, 4.0), ("POST pods", 20.0, 1.5)]);
        let [requests, rbac, writes] = per_job(&spent, "s", 2.0, 1);
        assert_eq!(requests.value, "14.0");
        assert_eq!(requests.baseline, "5 (minimum)");
        assert_eq!(rbac.value, "0.00 (0 in all)");
        assert_eq!(writes.value, "2.0 writes, 3.0 passes");
    }
}
