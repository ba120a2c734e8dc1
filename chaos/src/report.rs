//! The table: one row per fault, with the load it ran under, what was checked, what was lost, and
//! the result.

use std::time::Duration;

pub struct Row {
    pub fault: String,
    pub load: String,
    pub checks: Vec<String>,
    pub lost: Vec<String>,
    pub result: Outcome,
    pub took: Duration,
}

pub enum Outcome {
    /// Every check ran and nothing was lost.
    Kept,
    Lost,
    /// The fault could not be carried out or judged: nothing is known.
    Error(String),
    Skipped(String),
}

impl Row {
    /// Whether the row lets the run pass. A skipped fault does, but not in CI (`ci`, from
    /// `CI=true`), where a green run must not hide a fault that never ran.
    pub fn passed(&self, ci: bool) -> bool {
        match self.result {
            Outcome::Kept => true,
            Outcome::Skipped(_) => !ci,
            Outcome::Lost | Outcome::Error(_) => false,
        }
    }
}

/// The report: a heading line, the table, and a line on the run.
pub fn markdown(rows: &[Row], took: Duration, ci: bool) -> String {
    let mut text = String::from("| fault | load | checks | lost | result |\n|---|---|---|---|---|\n");
    for row in rows {
        let lost = if row.lost.is_empty() { "nothing".to_string() } else { row.lost.join("; ") };
        let result = match &row.result {
            Outcome::Kept => format!("ok ({:.0} s)", row.took.as_secs_f64()),
            Outcome::Lost => format!("LOST ({:.0} s)", row.took.as_secs_f64()),
            Outcome::Error(why) => format!("ERROR: {why}"),
            Outcome::Skipped(why) if ci => format!("SKIPPED, a failure under CI=true: {why}"),
            Outcome::Skipped(why) => format!("SKIPPED: {why}"),
        };
        let cells = [row.fault.as_str(), &row.load, &row.checks.join("; "), &lost, &result];
        text += &format!("| {} |\n", cells.map(cell).join(" | "));
    }
    let passed = rows.iter().filter(|r| r.passed(ci)).count();
    text += &format!("\n{passed} of {} faults passed, in {:.0} s.\n", rows.len(), took.as_secs_f64());
    text
}

/// A table cell: no pipes and no line breaks of its own.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', "<br>")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(fault: &str, lost: &[&str], result: Outcome) -> Row {
        Row {
            fault: fault.into(),
            load: "2 jobs x 3 collectors".into(),
            checks: vec!["2/2 jobs Running".into(), "pods 8 exact".into()],
            lost: lost.iter().map(|s| s.to_string()).collect(),
            result,
            took: Duration::from_secs(12),
        }
    }

    #[test]
    fn rows_render_as_a_markdown_table() {
        let rows = [
            row("kill -9", &[], Outcome::Kept),
            row("etcd | restart", &["pod a-1 has no owner", "line\nbreak"], Outcome::Lost),
            row("leader", &[], Outcome::Error("no lease".into())),
        ];
        let text = markdown(&rows, Duration::from_secs(100), false);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "| fault | load | checks | lost | result |");
        assert_eq!(
            lines[2],
            "| kill -9 | 2 jobs x 3 collectors | 2/2 jobs Running; pods 8 exact | nothing | ok (12 s) |"
        );
        assert_eq!(
            lines[3],
            "| etcd \\| restart | 2 jobs x 3 collectors | 2/2 jobs Running; pods 8 exact | pod a-1 has no owner; line<br>break | LOST (12 s) |"
        );
        assert!(lines[4].ends_with("| nothing | ERROR: no lease |"));
        assert_eq!(lines.last(), Some(&"1 of 3 faults passed, in 100 s."));
        assert!(!rows[1].passed(false) && !rows[2].passed(false) && rows[0].passed(false));
    }

    #[test]
    fn a_skipped_fault_fails_the_run_in_ci() {
        let rows = [row("kill -9", &[], Outcome::Kept), row("etcd", &[], Outcome::Skipped("no etcd".into()))];
        assert!(rows[1].passed(false));
        assert!(!rows[1].passed(true));
        let text = markdown(&rows, Duration::from_secs(1), true);
        assert!(text.contains("SKIPPED, a failure under CI=true: no etcd"), "{text}");
        assert!(text.ends_with("1 of 2 faults passed, in 1 s.\n"), "{text}");
    }
}
