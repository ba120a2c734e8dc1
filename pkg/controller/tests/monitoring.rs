//! The chart's Grafana dashboard and alert rules ask only for metrics the orchestrator exports:
//! every metric name they mention is one `/metrics` shows (read from its `# TYPE` lines), and
//! every panel and alert has a query of the orchestrator's metrics. A metric renamed or removed
//! fails here, not on a cluster's empty graph or silent alert.

use std::collections::BTreeSet;
use std::path::PathBuf;

use di_api::Phase;
use di_controller::metrics::{Metrics, PhaseLabel};
use serde_json::Value;

fn chart_file(path: &str) -> String {
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../charts/di-orchestrator").join(path);
    std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

/// The sample names `/metrics` shows: a gauge's own name, a counter's with `_total`, a
/// histogram's with `_bucket`, `_sum` and `_count`.
fn exported() -> BTreeSet<String> {
    let metrics = Metrics::new();
    // A family of labelled series shows nothing, not even its type, until it has a series.
    metrics.reconcile_failed("CreatePod");
    metrics.phase_transition(Phase::Failed);
    metrics.jobs.get_or_create(&PhaseLabel { phase: "Running".into() }).set(1);
    metrics.api_request("GET");
    metrics.api_request_answered("GET", "/api/v1/namespaces/a/pods", None, 0.01);
    metrics.api_request_refused("POST", "/api/v1/namespaces/a/pods", 403);
    let text = metrics.encode();
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let Some((name, kind)) = line.strip_prefix("# TYPE ").and_then(|t| t.split_once(' ')) else { continue };
        let suffixes: &[&str] = match kind {
            "counter" => &["_total"],
            "histogram" => &["_bucket", "_sum", "_count"],
            _ => &[""],
        };
        names.extend(suffixes.iter().map(|s| format!("{name}{s}")));
    }
    assert!(names.contains("di_orchestrator_leader"), "no metrics read from\n{text}");
    names
}

/// The metric names `text` mentions: its words that begin as the orchestrator's metrics do.
fn names_in(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|word| word.starts_with("di_orchestrator_") || word.starts_with("process_"))
        .map(str::to_owned)
        .collect()
}

/// The names of `used` that `/metrics` does not show, with where each was found.
fn unknown(used: &BTreeSet<String>, exported: &BTreeSet<String>, place: &str) -> Vec<String> {
    // The process's own metrics are read from /proc, which only Linux (the image's) has.
    let measured = |name: &&String| cfg!(target_os = "linux") || !name.starts_with("process_");
    used.difference(exported).filter(measured).map(|name| format!("{place}: {name}")).collect()
}

/// Every panel of the dashboard, those inside rows too.
fn panels(dashboard: &Value) -> Vec<&Value> {
    let mut all = vec![];
    let mut stack: Vec<&Value> = dashboard["panels"].as_array().into_iter().flatten().collect();
    while let Some(panel) = stack.pop() {
        stack.extend(panel["panels"].as_array().into_iter().flatten());
        all.push(panel);
    }
    all
}

#[test]
fn the_dashboard_shows_only_exported_metrics_and_every_panel_has_a_query() {
    let text = chart_file("dashboards/di-orchestrator.json");
    let dashboard: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let exported = exported();
    let mut problems = unknown(&names_in(&text), &exported, "dashboards/di-orchestrator.json");
    let mut ids = BTreeSet::new();
    for panel in panels(&dashboard) {
        let title = panel["title"].as_str().unwrap_or("(untitled)");
        if !ids.insert(panel["id"].as_u64()) {
            problems.push(format!("panel {title:?}: its id {} is another panel's", panel["id"]));
        }
        if panel["type"] == "row" {
            continue;
        }
        let exprs: Vec<&str> =
            panel["targets"].as_array().into_iter().flatten().filter_map(|t| t["expr"].as_str()).collect();
        if exprs.is_empty() || exprs.iter().any(|e| names_in(e).is_empty()) {
            problems
                .push(format!("panel {title:?}: a query of the orchestrator's metrics in each target, got {exprs:?}"));
        }
    }
    assert!(problems.is_empty(), "{}\n(exported: {exported:?})", problems.join("\n"));
}

/// Each alert of the PrometheusRule template: its name and its lines up to the next alert.
fn alerts(template: &str) -> Vec<(String, Vec<&str>)> {
    let mut alerts: Vec<(String, Vec<&str>)> = vec![];
    for line in template.lines() {
        match line.trim().strip_prefix("- alert:") {
            Some(name) => alerts.push((name.trim().to_owned(), vec![])),
            None => alerts.last_mut().into_iter().for_each(|(_, lines)| lines.push(line)),
        }
    }
    alerts
}

/// The expression of an alert's lines: what follows `expr:`, and the lines indented under it.
fn expression(lines: &[&str]) -> String {
    let indent = |l: &str| l.len() - l.trim_start().len();
    let Some(at) = lines.iter().position(|l| l.trim_start().starts_with("expr:")) else { return String::new() };
    let under = lines[at + 1..].iter().take_while(|l| indent(l) > indent(lines[at]));
    let first = match lines[at].trim_start().trim_start_matches("expr:").trim() {
        "|" | "|-" | ">" | ">-" => "",
        inline => inline,
    };
    std::iter::once(first).chain(under.copied()).collect::<Vec<_>>().join("\n")
}

#[test]
fn every_alert_asks_for_exported_metrics_and_says_what_and_how_bad() {
    let template = chart_file("templates/prometheusrule.yaml");
    let exported = exported();
    let mut problems = unknown(&names_in(&template), &exported, "templates/prometheusrule.yaml");
    let alerts = alerts(&template);
    assert!(alerts.len() >= 7, "the rules: {alerts:?}");
    for (name, lines) in &alerts {
        if names_in(&expression(lines)).is_empty() {
            problems.push(format!("alert {name}: no expression of the orchestrator's metrics"));
        }
        for key in ["summary:", "description:", "severity:", "for:"] {
            if !lines.iter().any(|l| l.trim_start().starts_with(key)) {
                problems.push(format!("alert {name}: no {key}"));
            }
        }
    }
    let mut names: Vec<&String> = alerts.iter().map(|(name, _)| name).collect();
    names.dedup();
    assert_eq!(names.len(), alerts.len(), "an alert name twice");
    assert!(problems.is_empty(), "{}\n(exported: {exported:?})", problems.join("\n"));
}

#[test]
fn names_are_read_out_of_queries() {
    let query = "histogram_quantile(0.9, sum by (le) (rate(di_orchestrator_queue_wait_seconds_bucket{a=~\"$b\"}[5m]))) \
                 and on (instance) process_open_fds";
    let names: Vec<String> = names_in(query).into_iter().collect();
    assert_eq!(names, ["di_orchestrator_queue_wait_seconds_bucket", "process_open_fds"]);
    let lines = ["  expr: |-", "    sum(di_orchestrator_jobs)", "      > 1", "  for: 5m"];
    assert_eq!(expression(&lines), "\n    sum(di_orchestrator_jobs)\n      > 1");
}
