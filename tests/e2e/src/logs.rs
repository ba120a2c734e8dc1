//! The end of a process's log, as a failure shows it: the story of what went wrong is usually
//! in the last lines of the orchestrator's, a control plane component's or Kueue's log.

/// The last `n` lines of `log`, in order, each as [`readable`] makes it.
pub fn last_lines(log: &str, n: usize) -> String {
    let mut tail: Vec<String> = log.lines().rev().take(n).map(readable).collect();
    tail.reverse();
    tail.join("\n")
}

/// A structured (JSON) log line, as Kueue's logger writes them, as `time message key=value...`
/// without the fields every line of a controller repeats; any other line as it is.
pub fn readable(line: &str) -> String {
    let Ok(serde_json::Value::Object(fields)) = serde_json::from_str::<serde_json::Value>(line) else {
        return line.to_owned();
    };
    let text = |key: &str| fields.get(key).and_then(|v| v.as_str()).unwrap_or_default().to_owned();
    let mut out = format!("{} {}", text("ts"), text("msg"));
    const REPEATED: [&str; 9] = [
        "ts",
        "msg",
        "level",
        "caller",
        "replica-role",
        "reconcileID",
        "controller",
        "controllerGroup",
        "controllerKind",
    ];
    for (key, value) in fields.iter().filter(|(k, _)| !REPEATED.contains(&k.as_str())) {
        out.push_str(&format!(" {key}={value}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structured_lines_lose_only_what_every_line_repeats() {
        let line = r#"{"level":"Level(-2)","ts":"2026-11-29T22:08:42.963Z","caller":"multikueue/workload.go:474","msg":"Workload was evicted in the remote cluster","reconcileID":"9f2c","remote":"worker-b"}"#;
        assert_eq!(
            readable(line),
            r#"2026-11-29T22:08:42.963Z Workload was evicted in the remote cluster remote="worker-b""#
        );
        assert_eq!(readable("I1129 plain klog text"), "I1129 plain klog text");
    }

    #[test]
    fn the_last_lines_keep_their_order() {
        assert_eq!(last_lines("a\nb\nc\nd", 2), "c\nd");
        assert_eq!(last_lines("a", 5), "a");
    }
}
