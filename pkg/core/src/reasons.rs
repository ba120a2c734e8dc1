//! Every reason the orchestrator writes on a DIJob, a condition's or an event's, is explained to
//! its users in docs/guide/troubleshooting.md. In debug builds (every test tier's) writing one the
//! page does not list panics, naming it: a new reason cannot ship unexplained.

use std::collections::BTreeSet;
use std::sync::OnceLock;

/// The troubleshooting page, as built in.
const PAGE: &str = include_str!("../../../docs/guide/troubleshooting.md");

/// The cells of the table rows of the page's section `heading`, backticks taken off.
fn rows(heading: &str) -> impl Iterator<Item = Vec<&'static str>> {
    let section = PAGE.split("\n## ").find(|s| s.starts_with(heading)).unwrap_or_default();
    section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| l.trim_matches('|').split('|').map(|c| c.trim().trim_matches('`')).collect())
}

/// The page's (condition type, reason) pairs and event reasons, read once.
type Listed = (BTreeSet<(&'static str, &'static str)>, BTreeSet<&'static str>);

fn listed() -> &'static Listed {
    static LISTED: OnceLock<Listed> = OnceLock::new();
    LISTED.get_or_init(|| {
        let conditions = rows("Conditions").filter_map(|cells| Some((*cells.first()?, *cells.get(2)?))).collect();
        let events = rows("Events").filter_map(|cells| cells.first().copied()).collect();
        (conditions, events)
    })
}

/// Whether the page lists `reason` for condition `type_`.
pub fn condition_listed(type_: &str, reason: &str) -> bool {
    listed().0.contains(&(type_, reason))
}

/// Whether the page lists event `reason`.
pub fn event_listed(reason: &str) -> bool {
    listed().1.contains(reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_is_read_by_section() {
        assert!(condition_listed("Queued", "Pending"));
        assert!(!condition_listed("Suspended", "Pending"), "a reason of another condition");
        assert!(event_listed("CreatePod"));
        assert!(!event_listed("Pending"), "a condition's reason is no event's");
        assert!(!event_listed("NoSuchReason"));
    }
}
