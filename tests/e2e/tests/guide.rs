//! The docs' commands, run: every ```console block marked `<!-- tested -->` in README.md and
//! docs/guide/*.md runs against the control plane, in a namespace of its own, in the order the
//! docs give them. Each `$ kubectl di ...` line is run by the real plugin, and every output line
//! the block shows after it must come, in that order, in what the command printed (ages and
//! runs of spaces aside, the test's namespace read as `default`; `...` stands for lines not
//! shown). So the docs cannot drift from the product.

use std::path::Path;

use di_e2e::binaries::repo_root;
use di_e2e::cluster::not_applicable;
use di_e2e::nodes::real_nodes;
use di_e2e::orchestrator::binary;
use di_e2e::scenario::Scenario;

/// The marker a tested block follows.
const MARKER: &str = "<!-- tested -->";

/// One command of a tested block and the output lines the docs show for it.
#[derive(Debug, PartialEq)]
struct Step {
    at: String,
    command: String,
    shown: Vec<String>,
}

/// The steps of every tested block of `text` (from file `file`), in order.
fn steps(file: &str, text: &str) -> Vec<Step> {
    let lines: Vec<&str> = text.lines().collect();
    let mut steps: Vec<Step> = vec![];
    let mut i = 0;
    while i < lines.len() {
        let tested = lines[i].trim() == MARKER && lines.get(i + 1).is_some_and(|l| l.trim() == "```console");
        if !tested {
            i += 1;
            continue;
        }
        i += 2;
        while i < lines.len() && lines[i].trim() != "```" {
            match lines[i].strip_prefix("$ ") {
                Some(command) => {
                    let at = format!("{file}:{}", i + 1);
                    steps.push(Step { at, command: command.trim().to_owned(), shown: vec![] });
                }
                None => match steps.last_mut() {
                    Some(step) => step.shown.push(lines[i].to_owned()),
                    None => panic!("{file}:{}: a tested block starts with output, not `$ `", i + 1),
                },
            }
            i += 1;
        }
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
    assert_eq!((got[0].at.as_str(), got[0].command.as_str()), ("README.md:4", "kubectl di get"));
    assert_eq!(got[0].shown, ["NAME  AGE", "demo  12s"]);
    assert!(shown_in(&got[0].shown, "NAME   AGE\nother 1m\ndemo   3m\n").is_ok());
    assert_eq!(shown_in(&got[0].shown, "demo 3m\nNAME AGE\n"), Err("demo <age>".to_owned()), "order counts");
    assert!(steps("x.md", "```console\n$ kubectl di get\n```\n").is_empty(), "unmarked blocks are not run");
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
    let s = Box::pin(Scenario::new("guide")).await;
    for step in steps {
        let Some(args) = step.command.strip_prefix("kubectl di ") else {
            panic!("{}: a tested command runs `kubectl di`, not {:?}", step.at, step.command);
        };
        let out = tokio::process::Command::new(binary("kubectl-di"))
            .args(args.split_whitespace())
            .args(["-n", &s.ns, "--kubeconfig"])
            .arg(&s.cluster.kubeconfig)
            .current_dir(repo_root())
            .output()
            .await
            .expect("running kubectl-di");
        // As a reader in namespace `default` sees it.
        let printed = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
            .replace(&s.ns, "default");
        // Shown with `--nocapture`: what to paste where the docs show output.
        eprintln!("{}: $ {}\n{printed}", step.at, step.command);
        assert!(out.status.success(), "{}: `{}` failed:\n{printed}", step.at, step.command);
        if let Err(line) = shown_in(&step.shown, &printed) {
            panic!(
                "{}: `{}` did not print {line:?} where the docs show it; it printed:\n{printed}",
                step.at, step.command
            );
        }
    }
}
