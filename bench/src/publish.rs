//! `make bench-publish`: the last report into docs/bench/ (headline.md or verdict.md, by the run
//! that wrote it), and a headline's block into the pages that show it, so that the figures there
//! are what a run wrote and never typed. A test holds the pages to the published report.

use std::path::Path;

use anyhow::{Context, bail};

use crate::report::{BEGIN, END};

/// The pages that carry the headline, from the repository's root.
pub const PAGES: [&str; 2] = ["README.md", "docs/PERFORMANCE.md"];

/// Publishes target/bench/report.md of the repository at `root`; returns what it wrote.
pub fn publish(root: &Path) -> anyhow::Result<Vec<String>> {
    let out = root.join("target/bench");
    let json: serde_json::Value = serde_json::from_slice(
        &std::fs::read(out.join("report.json")).context("no target/bench/report.json: run make bench first")?,
    )?;
    let mode = json["mode"].as_str().unwrap_or("partial");
    if mode != "headline" && mode != "verdict" {
        bail!(
            "target/bench/report.md is a partial run (--only, --invocations, DI_BENCH_SCENARIOS or \
             DI_BENCH_ORCHESTRATOR_ARGS): \
             publish a run of make bench or make bench-verdict"
        );
    }
    let commit = json["commit"].as_str().unwrap_or("unknown");
    if commit == "unknown" || commit.ends_with("-dirty") {
        bail!("the report was taken on uncommitted changes ({commit}): commit them, run it again, then publish");
    }
    if json["cluster"].is_null() {
        bail!("the report has no cluster figures (no control plane ran): nothing to publish");
    }
    let report = std::fs::read_to_string(out.join("report.md"))?;
    // Every text first, then the writes: a refusal leaves every file as it was.
    let mut texts = vec![(format!("docs/bench/{mode}.md"), report.clone())];
    if mode == "headline" {
        let headline = block(&report).context("the report has no headline block")?;
        for page in PAGES {
            let text = std::fs::read_to_string(root.join(page))?;
            let new = replace(&text, headline).with_context(|| format!("{page} has no lines {BEGIN} and {END}"))?;
            texts.push((page.to_string(), new));
        }
    }
    std::fs::create_dir_all(root.join("docs/bench"))?;
    for (path, text) in &texts {
        std::fs::write(root.join(path), text)?;
    }
    Ok(texts.into_iter().map(|(path, _)| path).collect())
}

/// The headline block of `text`, its two lines included.
pub fn block(text: &str) -> Option<&str> {
    let start = text.find(BEGIN)?;
    let end = start + text[start..].find(END)? + END.len();
    Some(&text[start..end])
}

/// `text` with its headline block replaced by `headline`.
fn replace(text: &str, headline: &str) -> Option<String> {
    let old = block(text)?;
    Some(text.replacen(old, headline, 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pages_carry_the_published_headline() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let published = std::fs::read_to_string(root.join("docs/bench/headline.md")).expect("docs/bench/headline.md");
        let want = block(&published).expect("a headline block in docs/bench/headline.md");
        for page in PAGES {
            let text = std::fs::read_to_string(root.join(page)).expect(page);
            assert_eq!(
                block(&text),
                Some(want),
                "{page}'s headline differs from docs/bench/headline.md: its figures are written by \
                 `make bench` then `make bench-publish`, not by hand"
            );
        }
    }

    #[test]
    fn replaces_the_block_alone() {
        let page = format!("# P\n\nbefore\n{BEGIN}\nold table\n{END}\nafter\n");
        let new = format!("{BEGIN}\nnew table\n{END}");
        let replaced = replace(&page, &new).expect("a block");
        assert_eq!(replaced, format!("# P\n\nbefore\n{new}\nafter\n"));
        assert_eq!(replace("no block here", &new), None);
        assert_eq!(block(&format!("{BEGIN} unterminated")), None);
    }
}
