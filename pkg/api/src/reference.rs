//! The reference page of the custom resources (docs/guide/reference.md), rendered from their CRDs:
//! per object, a table of its fields with each one's type, default, limits and description. The
//! descriptions are the CRD's own, which is what `kubectl explain` prints, so the page and a
//! cluster say the same. Pure: CRD JSON in, Markdown out; `crdgen` writes the page beside the
//! CRDs, and [`fields`] reads a page back for the test that runs `kubectl explain`.

mod cells;
mod read;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fmt::Write;

use serde_json::Value;

pub use read::{Field, fields};

/// Where the page lives, from the repository root.
pub const PAGE_PATH: &str = "docs/guide/reference.md";

const TITLE: &str = "DIJob reference";

const INTRO: &str = "\
This page is generated from the CRDs by `make manifests`; do not edit it by hand. Each description \
is the one the CRD carries, so it is what `kubectl explain dijobs.spec.<field>` (or \
`kubectl explain aggregatorconfigs.spec.<field>`) prints on a cluster with the CRDs installed. Type, \
Default and Limits are what the API server itself fills in and checks; what an unset field means to \
the orchestrator, and the rules its admission webhook adds, are in the description. Pod templates \
and volumes are Kubernetes' own types and are not expanded here: see `kubectl explain pod.spec`.";

/// The page for `crds` (CustomResourceDefinitions as JSON), one part per CRD in their order.
pub fn page(crds: &[Value]) -> String {
    let parts: Vec<Part> = crds.iter().map(Part::of).collect();
    // Headings take their anchors in page order, as GitHub gives them: a second `spec` is `spec-1`.
    let mut slugs = Slugs::default();
    slugs.take(TITLE);
    let anchors: Vec<(String, Vec<String>)> = parts
        .iter()
        .map(|p| (slugs.take(&p.kind), p.sections.iter().skip(1).map(|s| slugs.take(&s.path)).collect()))
        .collect();
    let mut out = format!("# {TITLE}\n\n{INTRO}\n\n");
    for (part, (kind_anchor, anchors)) in parts.iter().zip(&anchors) {
        let links: Vec<String> =
            part.sections.iter().skip(1).zip(anchors).map(|(s, a)| format!("[{}](#{a})", s.path)).collect();
        let _ = writeln!(out, "- [{}](#{kind_anchor}): {}", part.kind, links.join(", "));
    }
    for (part, (_, anchors)) in parts.iter().zip(&anchors) {
        part.render(anchors, &mut out);
    }
    out
}

/// One custom resource: its names and its objects, the root first, then depth-first.
struct Part<'a> {
    kind: String,
    plural: String,
    group: String,
    short_names: Vec<String>,
    versions: Vec<String>,
    root: &'a Value,
    sections: Vec<Section<'a>>,
}

/// An object with fields: its path as `kubectl explain` spells it (empty for the root) and the
/// schema that holds its `properties`.
struct Section<'a> {
    path: String,
    object: &'a Value,
}

impl<'a> Part<'a> {
    fn of(crd: &'a Value) -> Part<'a> {
        let spec = &crd["spec"];
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        let versions = spec["versions"].as_array().map(Vec::as_slice).unwrap_or_default();
        // Every served version of our CRDs has the same schema (see `crd::dijob_crd`).
        let root = &versions.first().unwrap_or(&Value::Null)["schema"]["openAPIV3Schema"];
        let mut sections = vec![];
        collect_sections(String::new(), root, &mut sections);
        Part {
            kind: text(&spec["names"]["kind"]),
            plural: text(&spec["names"]["plural"]),
            group: text(&spec["group"]),
            short_names: spec["names"]["shortNames"].as_array().into_iter().flatten().map(text).collect(),
            versions: versions.iter().map(|v| text(&v["name"])).collect(),
            root,
            sections,
        }
    }

    /// The part under its `## Kind` heading; `anchors` are its sections' but the root's.
    fn render(&self, anchors: &[String], out: &mut String) {
        let _ = writeln!(out, "\n## {}\n", self.kind);
        let mut versions = self.versions.iter().map(|v| format!("`{}/{v}`", self.group));
        let _ = write!(out, "`kubectl explain {}`; apiVersion {}", self.plural, versions.next().unwrap_or_default());
        let others: Vec<String> = versions.collect();
        if !others.is_empty() {
            let _ = write!(out, " (also served as {})", others.join(", "));
        }
        if !self.short_names.is_empty() {
            let _ = write!(out, "; short name `{}`", self.short_names.join("`, `"));
        }
        let _ = writeln!(out, ".\n");
        if let Some(text) = self.root["description"].as_str() {
            let _ = writeln!(out, "{}\n", cells::text(text));
        }
        let anchor_of: HashMap<&str, &str> =
            self.sections.iter().skip(1).map(|s| s.path.as_str()).zip(anchors.iter().map(String::as_str)).collect();
        for (i, section) in self.sections.iter().enumerate() {
            if i > 0 {
                let _ = writeln!(out, "\n### {}\n", section.path);
            }
            section.render(&anchor_of, out);
        }
    }
}

impl Section<'_> {
    /// The object's rules, then its table.
    fn render(&self, anchor_of: &HashMap<&str, &str>, out: &mut String) {
        let rules = self.object["x-kubernetes-validations"].as_array().map(Vec::as_slice).unwrap_or_default();
        if !rules.is_empty() {
            let _ = writeln!(out, "The API server refuses a write that breaks these rules:\n");
            for rule in rules {
                let _ = writeln!(out, "- {}", cells::rule(rule));
            }
            out.push('\n');
        }
        let _ = writeln!(out, "| Field | Type | Default | Limits | Description |\n|---|---|---|---|---|");
        let required = self.object["required"].as_array().map(Vec::as_slice).unwrap_or_default();
        for (name, field) in properties(self.object) {
            let path = join(&self.path, name);
            let mut limits = cells::limits(field, required.iter().any(|r| r == name));
            let shown = match anchor_of.get(path.as_str()) {
                // An object with a section of its own lists its rules there.
                Some(anchor) => format!("[`{path}`](#{anchor})"),
                None => {
                    let rules = field["x-kubernetes-validations"].as_array().into_iter().flatten();
                    limits.extend(rules.map(cells::rule));
                    format!("`{path}`")
                }
            };
            let _ = writeln!(
                out,
                "| {shown} | {} | {} | {} | {} |",
                cells::type_name(field),
                cells::default(field),
                limits.join("; "),
                cells::text(&description(field)),
            );
        }
    }
}

/// What `kubectl explain` prints as a field's description: its own, then that of its list's items
/// or its map's values.
fn description(field: &Value) -> String {
    let own = field["description"].as_str();
    let element = element(field).and_then(|e| e["description"].as_str());
    own.into_iter().chain(element).collect::<Vec<_>>().join("\n")
}

/// The schema of a list's items or a map's values.
fn element(field: &Value) -> Option<&Value> {
    field.get("items").or_else(|| field.get("additionalProperties").filter(|v| v.is_object()))
}

/// The object whose fields `field` has, through any lists and maps: `None` for a scalar, and for
/// an embedded Kubernetes object kept whole (no `properties`).
fn object_of(field: &Value) -> Option<&Value> {
    if field.get("properties").is_some() { Some(field) } else { element(field).and_then(object_of) }
}

/// An object's properties in name order (the CRD's own order depends on serde_json's features).
fn properties(object: &Value) -> Vec<(&String, &Value)> {
    let mut props: Vec<_> = object["properties"].as_object().into_iter().flatten().collect();
    props.sort_by_key(|(name, _)| *name);
    props
}

/// `object` (at `path`) as a section, then the sections of its fields, depth-first.
fn collect_sections<'a>(path: String, object: &'a Value, into: &mut Vec<Section<'a>>) {
    into.push(Section { path: path.clone(), object });
    for (name, field) in properties(object) {
        if let Some(inner) = object_of(field) {
            collect_sections(join(&path, name), inner, into);
        }
    }
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() { name.to_owned() } else { format!("{path}.{name}") }
}

/// GitHub's heading anchors: lower case, punctuation dropped, spaces as `-`, and `-1`, `-2`, ...
/// after a heading that repeats an earlier one.
#[derive(Default)]
struct Slugs(HashMap<String, usize>);

impl Slugs {
    fn take(&mut self, heading: &str) -> String {
        let slug: String = heading
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let seen = self.0.entry(slug.clone()).or_insert(0);
        *seen += 1;
        if *seen == 1 { slug } else { format!("{slug}-{}", *seen - 1) }
    }
}
