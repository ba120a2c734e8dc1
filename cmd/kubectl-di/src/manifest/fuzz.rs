//! Fuzzing what `kubectl di create -f` reads: any bytes, any text, the example manifests and the
//! corpus with their lines and bytes mangled, their fields mutated (wrong types, huge numbers,
//! deep nesting, unknown and missing fields, odd unicode), several of them in one stream. The
//! answer is never a panic: it is objects that pass the webhook's checks and can be sent, or an
//! error that says where the problem is.

#[path = "../../../../fuzz/support.rs"]
mod support;

use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::Value;

use super::*;

/// Checks the answer to `bytes`; returns the error message, if any.
fn answer_to(bytes: &[u8]) -> Result<Option<String>, TestCaseError> {
    match read(bytes) {
        Ok(objects) => {
            prop_assert!(!objects.is_empty());
            for object in &objects {
                check_sendable(object)?;
            }
            Ok(None)
        }
        Err(e) => {
            let message = format!("{e:#}");
            prop_assert!(names_a_place(&message), "the error does not say where: {message:?}");
            Ok(Some(message))
        }
    }
}

/// An object `read` lets through is one the webhook accepts and `create` can send.
fn check_sendable(object: &Value) -> Result<(), TestCaseError> {
    let outcome = check(&[(1, object.clone())]);
    prop_assert!(outcome.is_ok(), "{outcome:?}");
    let sendable = serde_json::from_value::<kube::core::DynamicObject>(object.clone());
    prop_assert!(sendable.is_ok(), "{sendable:?}");
    Ok(())
}

/// Where a problem is: a document, a line, a field, or the whole manifest.
fn names_a_place(message: &str) -> bool {
    let field = ["spec", "metadata", "apiVersion", "kind", "status"]
        .iter()
        .any(|f| message.contains(&format!(": {f}")) || message.contains(&format!("field `{f}")));
    message.contains("document ") || message.contains(" line ") || message.starts_with("the manifest ") || field
}

/// The example manifests and the corpus, as text.
fn seeds() -> Vec<String> {
    let examples = support::examples().into_iter().map(|(_, text)| text);
    let corpus =
        support::corpus("kubectl-di").into_iter().map(|(_, bytes)| String::from_utf8_lossy(&bytes).into_owned());
    examples.chain(corpus).collect()
}

fn seed() -> impl Strategy<Value = String> {
    prop::sample::select(seeds())
}

/// The objects of the seeds that read as YAML, what field mutations start from.
fn seed_objects() -> Vec<Value> {
    seeds().iter().filter_map(|text| documents(text.as_bytes()).ok()).flatten().map(|(_, doc)| doc).collect()
}

/// Lines that mean something to YAML: anchors, aliases and merges, tags, flow collections,
/// complex keys, document markers and directives, block scalars, tabs, odd indentation.
const ODD_LINES: &[&str] = &[
    "base: &base {name: di-container, image: ding}",
    "<<: *base",
    "- <<: *base",
    "again: *base",
    "missing: *nowhere",
    "self: &loop [*loop]",
    "tagged: !Custom {a: 1}",
    "bytes: !!binary aGVsbG8=",
    "number: !!int '12'",
    "? [a, b]",
    ": value",
    "---",
    "...",
    "%YAML 1.2",
    "%TAG ! tag:example.com,2000:",
    "text: |",
    "folded: >-",
    "\tindented: with a tab",
    "  - dangling",
    "key: [unclosed",
    "key: {unclosed: 1",
    "'quoted key': \"value with \\u0000 escape\"",
    "nan: .nan",
    "inf: -.inf",
    "huge: 123456789012345678901234567890",
    "octal: 0o777",
    "replicas: 9223372036854775808",
    "kind: Pod",
    "apiVersion: v1",
    "kind: [DIJob]",
    "metadata: {name: 🦀}",
    "metadata: {name: \"\\u202ejob\"}",
    "spec: null",
    "spec: ~",
];

#[derive(Clone, Debug)]
enum LineEdit {
    Delete(Index),
    Duplicate(Index),
    Indent(Index, usize),
    Dedent(Index),
    Insert(Index, String),
}

fn line_edits() -> impl Strategy<Value = Vec<LineEdit>> {
    let line = prop_oneof![
        3 => prop::sample::select(ODD_LINES).prop_map(str::to_owned),
        1 => (support::odd_string(), support::odd_string()).prop_map(|(k, v)| format!("{k:?}: {v:?}")),
        1 => (1usize..200).prop_map(|n| format!("deep: {}", "[".repeat(n))),
    ];
    let edit = prop_oneof![
        2 => any::<Index>().prop_map(LineEdit::Delete),
        1 => any::<Index>().prop_map(LineEdit::Duplicate),
        1 => (any::<Index>(), 1usize..5).prop_map(|(i, n)| LineEdit::Indent(i, n)),
        1 => any::<Index>().prop_map(LineEdit::Dedent),
        3 => (any::<Index>(), line).prop_map(|(i, line)| LineEdit::Insert(i, line)),
    ];
    prop::collection::vec(edit, 1..5)
}

fn apply_lines(text: &str, edits: &[LineEdit]) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    for edit in edits {
        if lines.is_empty() {
            lines.push(String::new());
        }
        let n = lines.len();
        match edit {
            LineEdit::Delete(i) => {
                lines.remove(i.index(n));
            }
            LineEdit::Duplicate(i) => {
                let at = i.index(n);
                lines.insert(at, lines[at].clone());
            }
            LineEdit::Indent(i, by) => lines[i.index(n)].insert_str(0, &" ".repeat(*by)),
            LineEdit::Dedent(i) => {
                let line = &mut lines[i.index(n)];
                *line = line.trim_start().to_owned();
            }
            LineEdit::Insert(i, line) => {
                // Indented like the line it goes before, so it joins that line's mapping.
                let at = i.index(n + 1);
                let indent = lines.get(at).map_or(0, |l| l.len() - l.trim_start().len());
                lines.insert(at, format!("{}{line}", " ".repeat(indent)));
            }
        }
    }
    lines.join("\n")
}

proptest! {
    #![proptest_config(support::config("kubectl-di"))]

    #[test]
    fn any_bytes_are_answered(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        answer_to(&bytes)?;
    }

    #[test]
    fn any_text_is_answered(text in any::<String>()) {
        answer_to(text.as_bytes())?;
    }

    #[test]
    fn mangled_lines_are_answered(text in seed(), edits in line_edits()) {
        answer_to(apply_lines(&text, &edits).as_bytes())?;
    }

    #[test]
    fn mangled_bytes_are_answered(text in seed(), edits in support::byte_edits()) {
        answer_to(&support::apply_bytes(text.into_bytes(), &edits))?;
    }

    /// Well-formed YAML with fields of the wrong shape: every error is a field's, never YAML's
    /// (unless the nesting is deeper than any reader takes).
    #[test]
    fn mutated_fields_are_answered_with_the_field(
        objects in prop::collection::vec((prop::sample::select(seed_objects()), support::edits()), 1..4),
    ) {
        let docs: Vec<String> =
            objects.into_iter().map(|(object, edits)| serde_yaml::to_string(&support::apply(object, &edits)).unwrap()).collect();
        let text = docs.join("---\n");
        if let Some(message) = answer_to(text.as_bytes())? {
            let too_deep = message.contains("recursion limit exceeded");
            prop_assert!(!message.contains("not valid YAML") || too_deep, "{message}\n{text}");
        }
    }
}

/// Every seed as it is, alone and all in one stream.
#[test]
fn the_corpus_is_answered() {
    for (name, bytes) in support::corpus("kubectl-di") {
        let outcome = answer_to(&bytes);
        assert!(outcome.is_ok(), "fuzz/corpus/kubectl-di/{name}: {outcome:?}");
    }
    let all = seeds().join("\n---\n");
    assert!(answer_to(all.as_bytes()).is_ok());
}

/// A quantity whose zero mantissa has a huge exponent: `di_api::resources::whole_number` counts
/// the exponent down one step at a time, seconds of CPU for a few bytes (reported; the fuzz
/// strategies keep exponents within ±400 until it is fixed).
#[test]
fn a_huge_exponent_is_answered_at_once() {
    let text = "apiVersion: diengine.opendilab.org/v1alpha1\nkind: DIJob\nmetadata: {name: job}\nspec:\n  coordinator:\n    template:\n      spec:\n        containers:\n        - {name: di-container, image: ding, resources: {limits: {nvidia.com/gpu: \"0e2147483647\"}}}\n";
    let started = std::time::Instant::now();
    assert!(answer_to(text.as_bytes()).is_ok());
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "took {:?} (the spin took a minute; a loaded machine takes milliseconds)",
        started.elapsed()
    );
}
