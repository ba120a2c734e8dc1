//! What the fuzz tests of the three surfaces that read untrusted input share: the admission
//! webhook, the replica endpoint and `kubectl di create -f`. They live in three crates, so each
//! includes this file with `#[path]`; see fuzz/README.md. About 400 lines: the strategies
//! for JSON, YAML and quantities belong together.

#![allow(dead_code)] // each crate uses a different part

use std::path::PathBuf;

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::FileFailurePersistence;
use serde_json::{Value, json};

/// 256 cases per property keep the fuzz part of `cargo test` to seconds on 2 cores; set
/// PROPTEST_CASES (e.g. 20000) for a longer local run. Failing seeds are kept in
/// `fuzz/proptest-regressions/<surface>.txt` and replayed first: commit them.
pub fn config(surface: &str) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(256);
    let file = workspace().join("fuzz/proptest-regressions").join(format!("{surface}.txt"));
    let file: &'static str = Box::leak(file.to_string_lossy().into_owned().into_boxed_str());
    ProptestConfig {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(file))),
        ..ProptestConfig::default()
    }
}

/// Read when run, not compiled in: clones share one build target, which cargo does not rebuild
/// for a moved clone, so a compiled-in path may name another clone.
pub fn workspace() -> PathBuf {
    PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("run by cargo")).join("../..")
}

/// The seed inputs of a surface, `fuzz/corpus/<surface>/`, as (file name, bytes) in name order.
pub fn corpus(surface: &str) -> Vec<(String, Vec<u8>)> {
    let dir = workspace().join("fuzz/corpus").join(surface);
    files(&dir).into_iter().map(|(name, path)| (name, std::fs::read(path).unwrap())).collect()
}

/// The example manifests, `manifests/examples/*.yaml`: seeds every surface mutates, read where
/// they are so they never drift from what users copy.
pub fn examples() -> Vec<(String, String)> {
    let dir = workspace().join("manifests/examples");
    files(&dir).into_iter().map(|(name, path)| (name, std::fs::read_to_string(path).unwrap())).collect()
}

fn files(dir: &std::path::Path) -> Vec<(String, PathBuf)> {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut files: Vec<(String, PathBuf)> = entries
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_file())
        .map(|path| (path.file_name().unwrap().to_string_lossy().into_owned(), path))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no seeds in {}", dir.display());
    files
}

/// Strings that have broken parsers before: empty and blank, NUL, bidi and zero-width marks,
/// non-ASCII look-alikes, path and pointer syntax, numbers and quantities as text, and the
/// words the DIJob's fields give meaning to.
const ODD_STRINGS: &[&str] = &[
    "",
    " ",
    "\t\n",
    "\0",
    "\u{202e}lanigiro",
    "\u{200b}",
    "\u{feff}job",
    "🦀",
    "é",
    "ｊｏｂ",
    "Job",
    "-job",
    "job-",
    "a.b",
    "ns/name",
    "/",
    "~1",
    "..",
    "%00",
    "\\",
    "\"",
    "null",
    "true",
    "0",
    "-1",
    "+3",
    "0.5",
    "1.",
    ".5",
    "1e3",
    "5E-1",
    "1Ki",
    "2Gi",
    "500m",
    "1.5Ei",
    "99999999999999999999999999999999999999999",
    "0e99",
    "1e-99",
    "Always",
    "Never",
    "OnFailure",
    "ALL",
    "All",
    "None",
    "Running",
    "Sometimes",
    "di-port",
    "di-container",
    "nvidia.com/gpu",
    "TCP",
    "ICMP",
    "DIJob",
    "AggregatorConfig",
    "diengine.opendilab.org/v1alpha1",
    "job-coordinator",
    "job-collector-0.ns:22270",
    "http://job-learner-0.ns:22271",
    "ns",
];

pub fn odd_string() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(ODD_STRINGS).prop_map(str::to_owned),
        2 => any::<String>(),
        // Near-valid names, around the 63- and 253-character limits.
        1 => "[a-z][a-z0-9-]{50,70}",
        1 => (240usize..270).prop_map(|n| "a".repeat(n)),
        2 => quantity(),
    ]
}

/// Kubernetes quantities, well-formed or nearly: signs, fractions, exponents (any i32: a zero
/// with a huge exponent once made `whole_number` count 2^31 steps), every suffix.
pub fn quantity() -> impl Strategy<Value = String> {
    let number =
        prop_oneof![any::<u32>().prop_map(|n| n.to_string()), Just("0".to_owned()), "[0-9]{0,45}(\\.[0-9]{0,5})?",];
    let suffix = prop_oneof![
        prop::sample::select(vec![
            "", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "x"
        ])
        .prop_map(str::to_owned),
        (-400i32..400).prop_map(|e| format!("e{e}")),
        any::<i32>().prop_map(|e| format!("e{e}")),
    ];
    (prop::sample::select(vec!["", "-", "+", " "]), number, suffix).prop_map(|(sign, n, s)| format!("{sign}{n}{s}"))
}

pub fn odd_scalar() -> impl Strategy<Value = Value> {
    let boundaries = vec![
        0i64,
        -1,
        1,
        2,
        1000,
        1001,
        65535,
        65536,
        i64::from(i32::MAX),
        i64::from(i32::MAX) + 1,
        i64::from(i32::MIN),
        i64::from(i32::MIN) - 1,
        i64::MAX,
        i64::MIN,
        i64::MAX - 1,
    ];
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        prop::sample::select(boundaries).prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        Just(json!(u64::MAX)),
        // Non-finite floats become null.
        any::<f64>().prop_map(Value::from),
        prop::sample::select(vec![0.5, -0.0, 1e308, -1e-308, 2.0, 1e19]).prop_map(Value::from),
    ]
}

/// Any JSON value, a few levels deep.
pub fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![odd_scalar(), odd_string().prop_map(Value::String)];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(odd_string(), inner, 0..4).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// `depth` arrays and objects inside each other. serde_json refuses text nested deeper than 128.
pub fn nested(depth: usize) -> Value {
    (0..depth).fold(json!("bottom"), |inner, i| if i % 2 == 0 { json!([inner]) } else { json!({"deeper": inner}) })
}

/// What a node of a document becomes: usually a value of another type.
pub fn odd_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => odd_scalar(),
        4 => odd_string().prop_map(Value::String),
        1 => (1usize..140).prop_map(nested),
        2 => any_json(),
    ]
}

/// One change to a JSON document, made at the node an [`Index`] picks among all its nodes.
#[derive(Clone, Debug)]
pub enum Edit {
    /// The node becomes another value.
    Replace(Value),
    /// The node leaves its object or array (a missing field).
    Remove,
    /// A new member of the node, or of its parent when it is a scalar (an unknown field, an
    /// extra element).
    Insert(String, Value),
    /// The nearest array element around the node appears twice (two containers of one name).
    Duplicate,
}

pub fn edits() -> impl Strategy<Value = Vec<(Index, Edit)>> {
    let edit = prop_oneof![
        4 => odd_value().prop_map(Edit::Replace),
        2 => Just(Edit::Remove),
        2 => (odd_string(), odd_value()).prop_map(|(k, v)| Edit::Insert(k, v)),
        1 => Just(Edit::Duplicate),
    ];
    prop::collection::vec((any::<Index>(), edit), 1..4)
}

#[derive(Clone, Debug)]
enum Step {
    Key(String),
    At(usize),
}

/// Every node's path, the root's (empty) first.
fn paths(value: &Value) -> Vec<Vec<Step>> {
    let mut out = vec![vec![]];
    let mut i = 0;
    while i < out.len() {
        let children: Vec<Step> = match node(value, &out[i]) {
            Value::Object(map) => map.keys().cloned().map(Step::Key).collect(),
            Value::Array(items) => (0..items.len()).map(Step::At).collect(),
            _ => vec![],
        };
        for step in children {
            let mut path = out[i].clone();
            path.push(step);
            out.push(path);
        }
        i += 1;
    }
    out
}

fn node<'a>(value: &'a Value, path: &[Step]) -> &'a Value {
    path.iter().fold(value, |v, step| match step {
        Step::Key(k) => &v[k.as_str()],
        Step::At(i) => &v[*i],
    })
}

fn node_mut<'a>(value: &'a mut Value, path: &[Step]) -> &'a mut Value {
    path.iter().fold(value, |v, step| match step {
        Step::Key(k) => &mut v[k.as_str()],
        Step::At(i) => &mut v[*i],
    })
}

/// `value` with `edits` made one after the other.
pub fn apply(mut value: Value, edits: &[(Index, Edit)]) -> Value {
    for (index, edit) in edits {
        let n = index.index(node_count(&value));
        edit_node(&mut value, n, edit);
    }
    value
}

/// How many nodes `value` has, itself included.
pub fn node_count(value: &Value) -> usize {
    paths(value).len()
}

/// Makes `edit` at node `n` of `value`, counted breadth first from the root (0).
pub fn edit_node(value: &mut Value, n: usize, edit: &Edit) {
    let path = paths(value).swap_remove(n);
    edit_at(value, &path, edit);
}

fn edit_at(root: &mut Value, path: &[Step], edit: &Edit) {
    match edit {
        Edit::Replace(v) => *node_mut(root, path) = v.clone(),
        Edit::Remove => match (path.split_last(), node_mut(root, &path[..path.len().saturating_sub(1)])) {
            (None, root) => *root = Value::Null,
            (Some((Step::Key(k), _)), Value::Object(parent)) => {
                parent.remove(k);
            }
            (Some((Step::At(i), _)), Value::Array(parent)) => {
                parent.remove(*i);
            }
            _ => {}
        },
        Edit::Insert(key, v) => {
            let at = if node(root, path).is_object() || node(root, path).is_array() || path.is_empty() {
                path
            } else {
                &path[..path.len() - 1]
            };
            match node_mut(root, at) {
                Value::Object(map) => {
                    map.insert(key.clone(), v.clone());
                }
                Value::Array(items) => items.push(v.clone()),
                _ => {}
            }
        }
        Edit::Duplicate => {
            let Some(last) = path.iter().rposition(|s| matches!(s, Step::At(_))) else { return };
            let Step::At(i) = path[last] else { return };
            if let Some(items) = node_mut(root, &path[..last]).as_array_mut() {
                let copy = items[i].clone();
                items.insert(i + 1, copy);
            }
        }
    }
}

/// One change to a text's bytes.
#[derive(Clone, Debug)]
pub enum ByteEdit {
    Truncate(Index),
    Set(Index, u8),
    Insert(Index, Vec<u8>),
    Delete(Index, usize),
}

/// Byte sequences that parsers treat specially: structure, escapes (a lone surrogate), numbers
/// out of range, invalid and overlong UTF-8, YAML's anchors, tags and document markers.
const ODD_BYTES: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b",",
    b":",
    b"\\",
    b"\\ud800",
    b"\\u0000",
    b"1e400",
    b"123456789012345678901234567890",
    b"-",
    b"null",
    b"\xff",
    b"\xc0\x80",
    b"\xef\xbb\xbf",
    b"\r\n",
    b"\t",
    b"&a ",
    b"*a",
    b"<<: *a",
    b"!!binary ",
    b"? ",
    b"\n---\n",
    b"\n...\n",
    b"%YAML 1.1\n",
    b"#",
];

pub fn byte_edits() -> impl Strategy<Value = Vec<ByteEdit>> {
    let insert = prop_oneof![
        prop::sample::select(ODD_BYTES).prop_map(<[u8]>::to_vec),
        prop::collection::vec(any::<u8>(), 1..8),
    ];
    let edit = prop_oneof![
        1 => any::<Index>().prop_map(ByteEdit::Truncate),
        3 => (any::<Index>(), any::<u8>()).prop_map(|(i, b)| ByteEdit::Set(i, b)),
        4 => (any::<Index>(), insert).prop_map(|(i, bytes)| ByteEdit::Insert(i, bytes)),
        2 => (any::<Index>(), 1usize..16).prop_map(|(i, n)| ByteEdit::Delete(i, n)),
    ];
    prop::collection::vec(edit, 1..5)
}

pub fn apply_bytes(mut bytes: Vec<u8>, edits: &[ByteEdit]) -> Vec<u8> {
    for edit in edits {
        // Positions run to one past the end, so an edit can land at the end.
        let at = |i: &Index, len: usize| i.index(len + 1);
        match edit {
            ByteEdit::Truncate(i) => bytes.truncate(at(i, bytes.len())),
            ByteEdit::Set(i, b) if !bytes.is_empty() => {
                let n = i.index(bytes.len());
                bytes[n] = *b;
            }
            ByteEdit::Set(..) => {}
            ByteEdit::Insert(i, new) => {
                let n = at(i, bytes.len());
                bytes.splice(n..n, new.iter().copied());
            }
            ByteEdit::Delete(i, len) => {
                let n = at(i, bytes.len());
                bytes.drain(n..(n + len).min(bytes.len()));
            }
        }
    }
    bytes
}
