//! The docs' commands, run: every block marked `<!-- tested -->` in README.md and
//! docs/guide/*.md runs against the control plane, in a namespace of its own, in the order the
//! docs give them, as a reader types it: each `$ kubectl ...` line of a ```console block by a shell
//! in a folder of its own (with the repository's `manifests/` in it), with the real plugin and
//! kubectl on its PATH and the test's namespace as the kubeconfig's. Every output line the block
//! shows after a command must come, in that order, in what it printed (ages and runs of spaces
//! aside, the namespace read as `default`; `...` stands for lines not shown). A command must
//! succeed, or, in a block marked `<!-- tested: fails -->`, fail. A ```yaml block marked
//! `<!-- tested: job.yaml -->` is written to that file for the commands after it. So the docs
//! cannot drift from the product.

use std::path::{Path, PathBuf};

use di_e2e::binaries::{self, repo_root};
use di_e2e::cluster::{not_applicable, skip};
use di_e2e::nodes::real_nodes;
use di_e2e::orchestrator::binary;
use di_e2e::scenario::Scenario;

/// What a tested block does.
#[derive(Debug, PartialEq)]
enum Action {
    /// A command, which must succeed (or fail, when `fails`).
    Run { command: String, fails: bool },
    /// A file the commands after it read.
    Write { file: String, content: String },
}

/// One command (or file) of a tested block, and the output lines the docs show for it.
#[derive(Debug, PartialEq)]
struct Step {
    at: String,
    action: Action,
    shown: Vec<String>,
}

/// What a marker line asks of the block after it: `Some(None)` run it, `Some(Some("fails"))`
/// run it and expect failures, `Some(Some(file))` write it.
fn marker(line: &str) -> Option<Option<&str>> {
    let inner = line.trim().strip_prefix("<!-- tested")?.strip_suffix("-->")?.trim();
    match inner.strip_prefix(':') {
        Some(arg) => Some(Some(arg.trim())),
        None => inner.is_empty().then_some(None),
    }
}

/// The steps of every tested block of `text` (from file `file`), in order.
fn steps(file: &str, text: &str) -> Vec<Step> {
    let lines: Vec<&str> = text.lines().collect();
    let mut steps: Vec<Step> = vec![];
    let mut i = 0;
    while i < lines.len() {
        let (Some(arg), Some(fence)) = (marker(lines[i]), lines.get(i + 1).map(|l| l.trim())) else {
            i += 1;
            continue;
        };
        let at = |i: usize| format!("{file}:{}", i + 1);
        let start = i + 2;
        let end = (start..lines.len()).find(|&j| lines[j].trim() == "```").unwrap_or(lines.len());
        match (fence, arg) {
            ("```console", None | Some("fails")) => {
                for (j, line) in lines.iter().enumerate().take(end).skip(start) {
                    match line.strip_prefix("$ ") {
                        Some(command) => steps.push(Step {
                            at: at(j),
                            action: Action::Run { command: command.trim().to_owned(), fails: arg.is_some() },
                            shown: vec![],
                        }),
                        None => match steps.last_mut() {
                            Some(step @ Step { action: Action::Run { .. }, .. }) => {
                                step.shown.push(lines[j].to_owned())
                            }
                            _ => panic!("{}: a tested block starts with output, not `$ `", at(j)),
                        },
                    }
                }
            }
            ("```yaml", Some(name)) if name != "fails" => {
                let content = lines[start..end].iter().map(|l| format!("{l}\n")).collect();
                steps.push(Step { at: at(i), action: Action::Write { file: name.to_owned(), content }, shown: vec![] });
            }
            _ => {
                panic!("{}: `{}` marks a ```console block, or a ```yaml block with a file name", at(i), lines[i].trim())
            }
        }
        i = end;
    }
    steps
}

/// A line as compared: its words, one space apart, each age (`12s`, `3m`, `1h`) as `<age>`.
fn normalized(line: &str) -> String {
    let age = |w: &str| {
        let digits = w.trim_end_matches(|c: char| c.is_ascii_alphabetic());
        !digits.is_empty()
            && digits.chars().all(|c| c.is_ascii_digit())
            && matches!(&w[digits.len()..], "s" | "m" | "h" | "d")
    };
    line.split_whitespace().map(|w| if age(w) { "<age>" } else { w }).collect::<Vec<_>>().join(" ")
}

/// Whether every shown line (but `...`) comes in `printed`, in order.
fn shown_in(shown: &[String], printed: &str) -> Result<(), String> {
    let mut printed = printed.lines().map(normalized);
    for line in shown.iter().map(|l| normalized(l)).filter(|l| !l.is_empty() && l != "...") {
        if !printed.any(|p| p == line) {
            return Err(line);
        }
    }
    Ok(())
}

#[test]
fn blocks_are_read_as_steps_and_compared_in_order() {
    let text =
        "x\n<!-- tested -->\n```console\n$ kubectl di get\nNAME  AGE\ndemo  12s\n$ kubectl di delete demo\n```\n";
    let got = steps("README.md", text);
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].at, "README.md:4");
    assert_eq!(got[0].action, Action::Run { command: "kubectl di get".into(), fails: false });
    assert_eq!(got[0].shown, ["NAME  AGE", "demo  12s"]);
    assert!(shown_in(&got[0].shown, "NAME   AGE\nother 1m\ndemo   3m\n").is_ok());
    assert_eq!(shown_in(&got[0].shown, "demo 3m\nNAME AGE\n"), Err("demo <age>".to_owned()), "order counts");
    assert!(steps("x.md", "```console\n$ kubectl di get\n```\n").is_empty(), "unmarked blocks are not run");
}

#[test]
fn files_and_failures_are_marked() {
    let text = "<!-- tested: job.yaml -->\n```yaml\nkind: DIJob\n```\n\n<!-- tested: fails -->\n```console\n$ kubectl di create -f job.yaml\nError: ...\n```\n";
    let got = steps("g.md", text);
    assert_eq!(got[0].action, Action::Write { file: "job.yaml".into(), content: "kind: DIJob\n".into() });
    assert_eq!(got[1].action, Action::Run { command: "kubectl di create -f job.yaml".into(), fails: true });
    assert_eq!(got[1].shown, ["Error: ..."]);
    assert_eq!(marker("<!-- tested -->"), Some(None));
    assert_eq!(marker("<!-- testedx -->"), None);
    let wrong = std::panic::catch_unwind(|| steps("g.md", "<!-- tested -->\n```yaml\nkind: DIJob\n```\n"));
    assert!(wrong.is_err(), "a yaml block needs a file name");
}

/// Every tested block of README.md and docs/guide/*.md, by file, in the order a reader meets them.
fn documented() -> Vec<Step> {
    let root = repo_root();
    let mut files = vec![root.join("README.md")];
    let mut guide: Vec<_> =
        std::fs::read_dir(root.join("docs/guide")).expect("docs/guide").map(|e| e.unwrap().path()).collect();
    guide.sort();
    files.extend(guide.into_iter().filter(|p| p.extension().is_some_and(|e| e == "md")));
    let name = |p: &Path| p.strip_prefix(&root).unwrap().display().to_string();
    files.iter().flat_map(|f| steps(&name(f), &std::fs::read_to_string(f).unwrap())).collect()
}

/// Where a reader's commands run: a folder of its own holding the repository's `manifests/`, with
/// the plugin and kubectl on the PATH and the test's namespace as the kubeconfig's.
struct Reader {
    dir: PathBuf,
    kubeconfig: PathBuf,
    path: std::ffi::OsString,
}

impl Reader {
    fn new(s: &Scenario, kubectl: &Path) -> Reader {
        let dir = std::env::temp_dir().join(format!("di-guide-{}", s.ns));
        std::fs::create_dir_all(&dir).expect("the reader's folder");
        std::os::unix::fs::symlink(repo_root().join("manifests"), dir.join("manifests")).expect("manifests/");
        let kubeconfig = dir.join("kubeconfig");
        std::fs::copy(&s.cluster.kubeconfig, &kubeconfig).expect("a kubeconfig of the reader's own");
        let set = std::process::Command::new(kubectl)
            .args(["config", "set-context", "--current", "--namespace", &s.ns])
            .env("KUBECONFIG", &kubeconfig)
            .output()
            .expect("kubectl config");
        assert!(set.status.success(), "kubectl config set-context: {}", String::from_utf8_lossy(&set.stderr));
        let plugin = binary("kubectl-di");
        let ours = [plugin.parent().unwrap(), kubectl.parent().unwrap()].map(Path::to_path_buf);
        let inherited = std::env::var_os("PATH").unwrap_or_default();
        let path = std::env::join_paths(ours.into_iter().chain(std::env::split_paths(&inherited))).expect("a PATH");
        Reader { dir, kubeconfig, path }
    }

    /// `command` as a shell runs it; what it printed, the namespace read as `default`.
    async fn run(&self, command: &str, ns: &str) -> (bool, String) {
        let out = tokio::process::Command::new("sh")
            .args(["-c", command])
            .current_dir(&self.dir)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("PATH", &self.path)
            .output()
            .await
            .expect("running sh");
        let printed = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.success(), printed.replace(ns, "default"))
    }
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn the_docs_commands_print_what_the_docs_show() {
    if real_nodes() {
        // The docs' example jobs name public images, which an offline kind cluster has not got.
        not_applicable("the docs' examples run on the control-plane tier, whose simulated nodes run any image");
        return;
    }
    let steps = documented();
    assert!(!steps.is_empty(), "no tested block in the docs");
    let kubectl = match binaries::kubectl(&repo_root()).expect("building kubectl") {
        Ok(kubectl) => kubectl,
        Err(why) => return skip(&format!("the docs' commands need kubectl: {}", why.0)),
    };
    let s = Box::pin(Scenario::new("guide")).await;
    let reader = Reader::new(&s, &kubectl);
    for step in steps {
        let (command, fails) = match step.action {
            Action::Write { file, content } => {
                std::fs::write(reader.dir.join(&file), content).expect("a file of the docs");
                continue;
            }
            Action::Run { command, fails } => (command, fails),
        };
        assert!(command.starts_with("kubectl "), "{}: a tested command runs kubectl, not {command:?}", step.at);
        let (succeeded, printed) = reader.run(&command, &s.ns).await;
        // Shown with `--nocapture`: what to paste where the docs show output.
        eprintln!("{}: $ {command}\n{printed}", step.at);
        let wanted = if fails { "fail" } else { "succeed" };
        assert!(succeeded != fails, "{}: `{command}` did not {wanted}:\n{printed}", step.at);
        if let Err(line) = shown_in(&step.shown, &printed) {
            panic!("{}: `{command}` did not print {line:?} where the docs show it; it printed:\n{printed}", step.at);
        }
    }
    std::fs::remove_dir_all(&reader.dir).expect("removing the reader's folder");
}
