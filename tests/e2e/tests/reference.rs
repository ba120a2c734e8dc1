//! The reference page says what `kubectl explain` says: for every field docs/guide/reference.md
//! lists, `kubectl explain <resource>.<path>` against the CRDs installed from pkg/api must print
//! the page's type and, line wrapping aside, the page's description, word for word.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use di_api::reference::{self, Field};
use di_e2e::binaries::repo_root;
use di_e2e::cluster::{TestCluster, connect};
use serde_json::Value;

/// What `kubectl explain` printed for a field: its type and its description, words one space
/// apart (kubectl wraps lines at its own width).
#[derive(Debug, PartialEq)]
struct Explained {
    type_name: String,
    description: String,
}

/// The `FIELD: name <type>` line and the `DESCRIPTION:` section of `kubectl explain` output.
fn explained(output: &str) -> Option<Explained> {
    let field = output.lines().find_map(|l| l.strip_prefix("FIELD:"))?;
    let type_name = field.split_once('<')?.1.split_once('>')?.0.to_owned();
    let section = output.lines().skip_while(|l| l.trim() != "DESCRIPTION:").skip(1);
    let description = section.take_while(|l| l.trim() != "FIELDS:").collect::<Vec<_>>().join(" ");
    Some(Explained { type_name, description: words(&description) })
}

impl std::fmt::Display for Explained {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "<{}> {}", self.type_name, self.description)
    }
}

fn words(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// What `kubectl explain` should print for a row of the page: its type without a format
/// (`string (date-time)` is `string` to kubectl).
fn expected(field: &Field) -> Explained {
    let type_name = field.type_name.split_whitespace().next().unwrap_or_default().to_owned();
    Explained { type_name, description: words(&field.description) }
}

#[test]
fn kubectl_explain_output_is_read_as_type_and_description() {
    let output = "GROUP:      diengine.opendilab.org\nKIND:       DIJob\nVERSION:    v2alpha1\n\n\
                  FIELD: tasks <[]Object>\n\n\nDESCRIPTION:\n    The job's workers as tasks\n    (DI-orchestrator 1.x).\n    \
                  Each task is a group.\n    \nFIELDS:\n  name\t<string>\n    Name of the task.\n";
    let got = explained(output).unwrap();
    assert_eq!(got.type_name, "[]Object");
    assert_eq!(got.description, "The job's workers as tasks (DI-orchestrator 1.x). Each task is a group.");
    assert_eq!(explained("error: field \"nope\" does not exist"), None);
}

/// The page's fields from `page`, by kind and path.
fn by_path(page: &str) -> HashMap<(String, String), Field> {
    reference::fields(page).into_iter().map(|f| ((f.kind.clone(), f.path.clone()), f)).collect()
}

/// The CRDs the test installs, as JSON.
fn installed_crds() -> Vec<Value> {
    let files = di_api::crd::crd_files();
    files.iter().map(|(name, yaml)| serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("{name}: {e}"))).collect()
}

/// Each CRD's kind with its plural, which `kubectl explain` takes.
fn plurals(crds: &[Value]) -> HashMap<String, String> {
    let name = |crd: &Value, key: &str| crd["spec"]["names"][key].as_str().unwrap_or_default().to_owned();
    crds.iter().map(|crd| (name(crd, "kind"), name(crd, "plural"))).collect()
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn kubectl_explain_says_what_the_reference_says() {
    let cluster = connect().await;
    cluster.install_crds().await;
    let path = repo_root().join(reference::PAGE_PATH);
    let page = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let fields = reference::fields(&page);
    let crds = installed_crds();
    let plurals = plurals(&crds);
    for kind in plurals.keys() {
        assert!(fields.iter().any(|f| &f.kind == kind), "{} lists no field of {kind}", reference::PAGE_PATH);
    }
    // The page as pkg/api renders it from the CRDs installed.
    let installed = by_path(&reference::page(&crds));
    let mut wrong: Vec<String> = installed
        .keys()
        .filter(|k| !fields.iter().any(|f| (&f.kind, &f.path) == (&k.0, &k.1)))
        .map(|(kind, path)| format!("{kind} {path}: in the CRD, not on the page"))
        .collect();
    wrong.sort();
    // The API server publishes a CRD's schema to `kubectl explain` a little after the CRD is
    // established, and republishes it after a change: until then kubectl fails, or says what an
    // earlier CRD said. Each field is asked again until kubectl says what the page or the CRD
    // installed says; each run of kubectl paces the next.
    let deadline = Instant::now() + Duration::from_secs(60);
    for field in &fields {
        let Some(plural) = plurals.get(&field.kind) else {
            wrong.push(format!("{} {}: no CRD of kind {}", field.kind, field.path, field.kind));
            continue;
        };
        let Some(in_crd) = installed.get(&(field.kind.clone(), field.path.clone())) else {
            wrong.push(format!("{} {}: on the page, not in the CRD", field.kind, field.path));
            continue;
        };
        let target = format!("{plural}.{}", field.path);
        let Some(said) = explain_settled(&cluster, &target, &[expected(field), expected(in_crd)], deadline) else {
            return;
        };
        match said {
            Ok(said) if said == expected(field) => {}
            Ok(said) => {
                wrong.push(format!("kubectl explain {target}\n  page:    {}\n  kubectl: {said}", expected(field)))
            }
            Err(text) => wrong.push(format!("kubectl explain {target}: {}", words(&text))),
        }
    }
    assert!(
        wrong.is_empty(),
        "{} and kubectl explain disagree (run `make manifests`, which writes the page from the CRDs):\n{}",
        reference::PAGE_PATH,
        wrong.join("\n")
    );
}

/// `kubectl explain target` once it prints one of `settled`, or, past `deadline`, whatever it
/// printed last (`Err` with its output when that could not be read). `None` when kubectl cannot
/// be run at all.
fn explain_settled(
    cluster: &TestCluster,
    target: &str,
    settled: &[Explained],
    deadline: Instant,
) -> Option<Result<Explained, String>> {
    loop {
        let out = cluster.kubectl(&["explain", target])?;
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        let said = explained(&text).filter(|_| out.status.success()).ok_or(text);
        let done = said.as_ref().is_ok_and(|s| settled.contains(s));
        if done || Instant::now() > deadline {
            return Some(said);
        }
    }
}
