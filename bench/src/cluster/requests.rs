//! API request accounting, from the orchestrator's metrics: requests and status writes per job
//! against the least a job can cost, and where the orchestrator waited on the API server (every
//! request is timed by verb and resource, see `di_controller::timing`).

use std::collections::{BTreeMap, BTreeSet};

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
        let served = self.served();
        // Folded from 0.0: an empty `sum` of floats is -0.0, which the report printed as such.
        ["GET dijobs", "GET pods", "GET services"].iter().filter_map(|kind| served.get(*kind)).fold(0.0, |a, b| a + b)
    }

    /// From the API server's own metrics: the requests it served, from any client, by verb and
    /// resource (`POST pods`, `PATCH dijobs/status`); watches are counted only when they end.
    pub fn served(&self) -> BTreeMap<String, f64> {
        let mut served = BTreeMap::new();
        for (series, count) in &self.0 {
            let Some(labels) = series.strip_prefix("apiserver_request_total{") else { continue };
            let (Some(verb), Some(resource)) = (label(labels, "verb"), label(labels, "resource")) else { continue };
            // A request for no resource (`/openapi/v3`) has its path as the subresource.
            let kind = match (resource, label(labels, "subresource").unwrap_or_default()) {
                (resource, "") => format!("{verb} {resource}"),
                ("", path) => format!("{verb} {path}"),
                (resource, sub) => format!("{verb} {resource}/{sub}"),
            };
            *served.entry(kind).or_default() += count;
        }
        served
    }

    /// From the API server's own metrics: the watch events it sent, to every watcher, by
    /// resource, and their bytes. A watch costs the API server nothing at its start and a
    /// serialization and a write for every event it sends, so what one side is sent more of is
    /// work the request counts do not show.
    pub fn watch_events(&self) -> BTreeMap<String, Sent> {
        const SERIES: [(&str, bool); 2] =
            [("apiserver_watch_events_total{", true), ("apiserver_watch_events_sizes_sum{", false)];
        let mut sent: BTreeMap<String, Sent> = BTreeMap::new();
        for (series, value) in &self.0 {
            let Some((labels, events)) =
                SERIES.iter().find_map(|(name, events)| Some((series.strip_prefix(name)?, *events)))
            else {
                continue;
            };
            // Named by resource since Kubernetes 1.31, by kind before.
            let Some(what) = label(labels, "resource").or_else(|| label(labels, "kind")) else { continue };
            let entry = sent.entry(what.to_lowercase()).or_default();
            if events { entry.events += value } else { entry.bytes += value }
        }
        sent
    }

    /// From the API server's own metrics: the requests it answered, from any client, by the
    /// class of their code (`2xx`, `409`, `429`, `5xx`: conflicts, throttling and failures
    /// by their own, since each is work done again).
    pub fn answered(&self) -> BTreeMap<String, f64> {
        let mut answered = BTreeMap::new();
        for (series, count) in &self.0 {
            let Some(code) = series.strip_prefix("apiserver_request_total{").and_then(|l| label(l, "code")) else {
                continue;
            };
            let class = match code {
                "409" | "429" => code.to_owned(),
                _ => format!("{}xx", &code[..1.min(code.len())]),
            };
            *answered.entry(class).or_default() += count;
        }
        answered
    }

    /// Sum of the series whose name and labels start with `prefix`.
    pub fn sum(&self, prefix: &str) -> f64 {
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
                let request = format!("{} {}", label(labels, "verb")?, label(labels, "resource")?);
                Some(RequestTime { request, count, seconds: *seconds })
            })
            .filter(|t| t.count > 0.0)
            .collect();
        times.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
        times
    }
}

/// The value of the label `name` in a series' labels (`verb="GET",resource="pods"`, with or
/// without the closing brace).
fn label<'a>(labels: &'a str, name: &str) -> Option<&'a str> {
    labels.split(',').find_map(|kv| kv.strip_prefix(name)?.strip_prefix("=\"")).map(|v| v.trim_end_matches(['"', '}']))
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

/// The kinds of request (verb and resource) the API server served a different number of times a
/// job for the two sides, the largest difference first: where its extra work for the orchestrator
/// went. Watches are left out (counted only when they end), and lists: the bench's own check of
/// the orchestrator's objects lists them.
pub fn served_differences(ours: &Scrape, base: &Scrape, jobs: f64) -> String {
    let (ours, base) = (ours.served(), base.served());
    let kinds: BTreeSet<&String> = ours.keys().chain(base.keys()).collect();
    let mut kinds: Vec<(&String, f64, f64)> = kinds
        .into_iter()
        .filter(|kind| !kind.starts_with("WATCH") && !kind.starts_with("LIST"))
        .map(|kind| (kind, ours.get(kind).unwrap_or(&0.0) / jobs, base.get(kind).unwrap_or(&0.0) / jobs))
        .filter(|(_, a, b)| (a - b).abs() >= 0.05)
        .collect();
    kinds.sort_by(|x, y| (y.1 - y.2).abs().total_cmp(&(x.1 - x.2).abs()));
    if kinds.is_empty() {
        return "none".into();
    }
    kinds.iter().map(|(kind, a, b)| format!("{kind} {a:.2} against {b:.2}")).collect::<Vec<_>>().join("; ")
}

/// Watch events the API server sent, and their bytes.
#[derive(Clone, Copy, Default)]
pub struct Sent {
    pub events: f64,
    bytes: f64,
}

/// The resources whose watch events the API server sent a different number of times a job for
/// the two sides (one event a job or more), the most bytes apart first.
pub fn watch_differences(ours: &Scrape, base: &Scrape, jobs: f64) -> String {
    let (ours, base) = (ours.watch_events(), base.watch_events());
    let kinds: BTreeSet<&String> = ours.keys().chain(base.keys()).collect();
    let per_job = |sent: &BTreeMap<String, Sent>, kind: &String| {
        let Sent { events, bytes } = sent.get(kind).copied().unwrap_or_default();
        Sent { events: events / jobs, bytes: bytes / jobs }
    };
    let mut kinds: Vec<(&String, Sent, Sent)> = kinds
        .into_iter()
        .map(|kind| (kind, per_job(&ours, kind), per_job(&base, kind)))
        .filter(|(_, a, b)| (a.events - b.events).abs() >= 1.0)
        .collect();
    kinds.sort_by(|x, y| (y.1.bytes - y.2.bytes).abs().total_cmp(&(x.1.bytes - x.2.bytes).abs()));
    if kinds.is_empty() {
        return "none".into();
    }
    let one = |sent: Sent| format!("{:.0} ({:.0} KiB)", sent.events, sent.bytes / 1024.0);
    kinds.iter().map(|(kind, a, b)| format!("{kind} {} against {}", one(*a), one(*b))).collect::<Vec<_>>().join("; ")
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
    fn names_the_watch_events_one_side_was_sent_more_of() {
        let sent = |pods: u32, services: u32| {
            Scrape::parse(&format!(
                "apiserver_watch_events_total{{component=\"apiserver\",group=\"\",resource=\"pods\",version=\"v1\"}} {pods}\n\
                 apiserver_watch_events_sizes_sum{{component=\"apiserver\",group=\"\",resource=\"pods\",version=\"v1\"}} {}\n\
                 apiserver_watch_events_total{{component=\"apiserver\",group=\"\",kind=\"Service\",version=\"v1\"}} {services}\n\
                 apiserver_watch_events_sizes_sum{{component=\"apiserver\",group=\"\",kind=\"Service\",version=\"v1\"}} {}\n",
                pods * 2048,
                services * 1024
            ))
        };
        assert_eq!(
            watch_differences(&sent(40, 30), &sent(40, 10), 10.0),
            "service 3 (3 KiB) against 1 (1 KiB)",
            "pods were sent as often on both sides"
        );
        assert_eq!(watch_differences(&sent(40, 10), &sent(45, 10), 10.0), "none", "half an event a job apart");
    }

    #[test]
    fn counts_the_api_servers_reads_of_a_jobs_objects() {
        let text = r#"apiserver_request_total{code="200",component="apiserver",dry_run="",group="diengine.opendilab.org",resource="dijobs",scope="resource",subresource="",verb="GET",version="v1alpha1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="GET",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="GET",version="v1"} 5
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 11
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="leases",scope="resource",subresource="",verb="GET",version="v1"} 13
"#;
        assert_eq!(Scrape::parse(text).reads_of_job_objects(), 10.0);
        let none = Scrape::parse(text).since(&Scrape::parse(text)).reads_of_job_objects();
        assert!(none == 0.0 && none.is_sign_positive(), "printed as 0.0, not -0.0");
    }

    #[test]
    fn sums_the_api_servers_requests_by_verb_and_resource() {
        let text = r#"apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 7
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="diengine.opendilab.org",resource="dijobs",scope="resource",subresource="status",verb="APPLY",version="v2alpha1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="",scope="",subresource="/openapi/v3",verb="GET",version=""} 1
apiserver_request_duration_seconds_count{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 9
"#;
        let served: Vec<(String, f64)> = Scrape::parse(text).served().into_iter().collect();
        let expected = [("APPLY dijobs/status", 3.0), ("GET /openapi/v3", 1.0), ("POST pods", 9.0)];
        assert_eq!(served, expected.map(|(k, v)| (k.to_owned(), v)));
    }

    #[test]
    fn counts_the_answers_by_class_with_conflicts_and_throttling_apart() {
        let text = r#"apiserver_request_total{code="201",resource="pods",verb="POST"} 7
apiserver_request_total{code="200",resource="pods",verb="GET"} 3
apiserver_request_total{code="409",resource="pods",verb="POST"} 2
apiserver_request_total{code="429",resource="pods",verb="POST"} 1
apiserver_request_total{code="404",resource="pods",verb="GET"} 4
apiserver_request_total{code="504",resource="pods",verb="GET"} 5
apiserver_request_duration_seconds_count{code="201",resource="pods",verb="POST"} 9
"#;
        let answered: Vec<(String, f64)> = Scrape::parse(text).answered().into_iter().collect();
        let expected = [("2xx", 10.0), ("409", 2.0), ("429", 1.0), ("4xx", 4.0), ("5xx", 5.0)];
        assert_eq!(answered, expected.map(|(k, v)| (k.to_owned(), v)));
    }

    #[test]
    fn names_the_requests_a_job_cost_one_side_more() {
        let side = |pods: f64, events: f64, watches: f64| {
            Scrape::parse(&format!(
                "apiserver_request_total{{resource=\"pods\",subresource=\"\",verb=\"POST\"}} {pods}\n\
                 apiserver_request_total{{resource=\"events\",subresource=\"\",verb=\"POST\"}} {events}\n\
                 apiserver_request_total{{resource=\"pods\",subresource=\"\",verb=\"WATCH\"}} {watches}\n"
            ))
        };
        let (ours, base) = (side(110.0, 20.0, 9.0), side(110.0, 0.0, 1.0));
        assert_eq!(served_differences(&ours, &base, 10.0), "POST events 2.00 against 0.00");
        assert_eq!(served_differences(&base, &base, 10.0), "none");
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
