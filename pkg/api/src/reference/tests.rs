use serde_json::{Value, json};

use super::*;

/// A CRD as JSON with `schema` as its only version's.
fn crd(kind: &str, plural: &str, schema: Value) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "spec": {
            "group": "example.org",
            "names": {"kind": kind, "plural": plural, "shortNames": [kind.to_lowercase()]},
            "versions": [{"name": "v1", "schema": {"openAPIV3Schema": schema}}, {"name": "v2"}],
        }
    })
}

fn widget() -> Value {
    crd(
        "Widget",
        "widgets",
        json!({
            "type": "object", "description": "A widget.",
            "properties": {"spec": {
                "type": "object", "description": "What the widget is.",
                "x-kubernetes-validations": [{"rule": "self.a <= 3", "message": "a is 3 at most"}, {"rule": "has(self.b)"}],
                "required": ["size"],
                "properties": {
                    "size": {"type": "integer", "format": "int32", "minimum": 0.0, "maximum": 1000.0,
                             "description": "How big.\nIn units."},
                    "name": {"type": "string", "pattern": "^a|b$", "minLength": 1, "maxLength": 63,
                             "description": "Pods are `<job>-<name>` | <name>."},
                    "mode": {"type": "string", "enum": ["Pod", "Job", null], "nullable": true, "description": "Mode."},
                    "template": {"type": "object", "default": {}, "x-kubernetes-preserve-unknown-fields": true,
                                 "description": "A pod template; see `kubectl explain pod.spec`."},
                    "parts": {"type": "array", "description": "The parts.", "minItems": 1,
                              "items": {"type": "object", "description": "One part.",
                                        "properties": {"weight": {"type": "number", "exclusiveMinimum": true,
                                                                  "minimum": 0.5, "description": "Weight."}}}},
                    "counts": {"type": "object", "description": "Counts.",
                               "additionalProperties": {"type": "integer"}},
                    "when": {"type": "string", "format": "date-time", "description": "When.",
                             "x-kubernetes-validations": [{"rule": "self != ''", "message": "not empty"}]},
                },
            }},
        }),
    )
}

fn gadget() -> Value {
    crd(
        "Gadget",
        "gadgets",
        json!({"type": "object", "properties": {"spec": {
            "type": "object", "description": "A gadget's spec.",
            "properties": {"parts": {"type": "object", "description": "Its parts.",
                                     "properties": {"n": {"type": "integer", "description": "How many."}}}},
        }}}),
    )
}

fn row<'a>(page: &'a str, path: &str) -> &'a str {
    let cell = format!("`{path}`");
    page.lines().find(|l| l.starts_with('|') && l.split('|').nth(1).is_some_and(|c| c.contains(&cell))).unwrap()
}

#[test]
fn each_object_gets_a_section_with_its_rules_and_a_row_per_field() {
    let page = page(&[widget()]);
    assert!(page.starts_with("# DIJob reference\n"), "{page}");
    assert!(page.contains("make manifests"));
    assert!(page.contains("\n## Widget\n\n`kubectl explain widgets`; apiVersion `example.org/v1` (also served as `example.org/v2`); short name `widget`.\n\nA widget.\n"), "{page}");
    let headings: Vec<&str> = page.lines().filter(|l| l.starts_with("### ")).collect();
    assert_eq!(headings, ["### spec", "### spec.parts"]);
    assert!(page.contains("- a is 3 at most\n- `has(self.b)`\n"), "{page}");
    assert_eq!(row(&page, "spec.size"), "| `spec.size` | integer |  | required; 0 to 1000 | How big. In units. |");
    assert_eq!(row(&page, "spec.mode"), "| `spec.mode` | string |  | one of `Pod`, `Job` | Mode. |");
    assert_eq!(
        row(&page, "spec.template"),
        "| `spec.template` | Object | `{}` |  | A pod template; see `kubectl explain pod.spec`. |"
    );
    assert_eq!(
        row(&page, "spec.parts"),
        "| [`spec.parts`](#specparts) | []Object |  | at least 1 items | The parts. One part. |"
    );
    assert_eq!(row(&page, "spec.parts.weight"), "| `spec.parts.weight` | number |  | more than 0.5 | Weight. |");
    assert_eq!(row(&page, "spec.counts"), "| `spec.counts` | map[string]integer |  |  | Counts. |");
    assert_eq!(row(&page, "spec.when"), "| `spec.when` | string (date-time) |  | not empty | When. |");
    assert_eq!(
        row(&page, "spec"),
        "| [`spec`](#spec) | Object |  |  | What the widget is. |",
        "rules stay in the section"
    );
}

#[test]
fn table_cells_escape_what_markdown_would_eat() {
    let page = page(&[widget()]);
    assert_eq!(
        row(&page, "spec.name"),
        "| `spec.name` | string |  | 1 to 63 characters; matches `^a\\|b$` | Pods are `<job>-<name>` \\| \\<name>. |"
    );
}

#[test]
fn a_page_reads_back_as_its_fields() {
    let page = page(&[widget(), gadget()]);
    let fields = fields(&page);
    let paths: Vec<(&str, &str)> = fields.iter().map(|f| (f.kind.as_str(), f.path.as_str())).collect();
    assert_eq!(
        paths,
        [
            ("Widget", "spec"),
            ("Widget", "spec.counts"),
            ("Widget", "spec.mode"),
            ("Widget", "spec.name"),
            ("Widget", "spec.parts"),
            ("Widget", "spec.size"),
            ("Widget", "spec.template"),
            ("Widget", "spec.when"),
            ("Widget", "spec.parts.weight"),
            ("Gadget", "spec"),
            ("Gadget", "spec.parts"),
            ("Gadget", "spec.parts.n"),
        ]
    );
    let name = fields.iter().find(|f| f.path == "spec.name").unwrap();
    assert_eq!(name.description, "Pods are `<job>-<name>` | <name>.");
    assert_eq!(name.type_name, "string");
}

#[test]
fn a_heading_repeated_gets_the_anchor_github_gives_it() {
    let page = page(&[widget(), gadget()]);
    assert!(page.contains("- [Widget](#widget): [spec](#spec), [spec.parts](#specparts)\n"), "{page}");
    assert!(page.contains("- [Gadget](#gadget): [spec](#spec-1), [spec.parts](#specparts-1)\n"), "{page}");
    assert!(row(&page, "spec.parts").contains("(#specparts)"));
    let gadget_part = &page[page.find("## Gadget").unwrap()..];
    assert!(row(gadget_part, "spec.parts").starts_with("| [`spec.parts`](#specparts-1) |"), "{gadget_part}");
}

/// The CRDs as `crdgen` reads them.
fn our_crds() -> Vec<Value> {
    crate::crd::crd_files().iter().map(|(_, yaml)| serde_yaml::from_str(yaml).unwrap()).collect()
}

#[test]
fn our_page_lists_every_field_with_its_description() {
    let page = page(&our_crds());
    let fields = fields(&page);
    let kinds: Vec<&str> = fields.iter().map(|f| f.kind.as_str()).collect();
    assert!(kinds.contains(&"DIJob") && kinds.contains(&"AggregatorConfig"), "{kinds:?}");
    for wanted in ["spec.collector.maxReplicas", "spec.tasks.minAvailable", "status.replicaStatus.active"] {
        assert!(fields.iter().any(|f| f.path == wanted), "{wanted} missing");
    }
    let undescribed: Vec<&str> = fields.iter().filter(|f| f.description.is_empty()).map(|f| f.path.as_str()).collect();
    assert!(undescribed.is_empty(), "no description for {undescribed:?}");
}

/// An embedded Kubernetes object is one row, not expanded: its description must say which type it
/// is and where its fields are documented.
#[test]
fn our_embedded_objects_point_to_kubectl_explain() {
    fn embedded<'a>(path: String, node: &'a Value, into: &mut Vec<(String, &'a Value)>) {
        for (name, field) in properties(node) {
            let path = join(&path, name);
            let kept = |n: &Value| n["x-kubernetes-preserve-unknown-fields"] == true && n.get("properties").is_none();
            if kept(field) || field.get("items").is_some_and(kept) {
                into.push((path.clone(), field));
            }
            if let Some(inner) = object_of(field) {
                embedded(path, inner, into);
            }
        }
    }
    let crds = our_crds();
    let mut found = vec![];
    for crd in &crds {
        embedded(String::new(), &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"], &mut found);
    }
    let paths: Vec<&str> = found.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(paths.len(), 6, "{paths:?}");
    for (path, field) in &found {
        let said = description(field).split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(said.contains("core/v1 ") && said.contains("`kubectl explain pod.spec"), "{path}: {said}");
    }
    let page = page(&crds);
    assert!(!fields(&page).iter().any(|f| f.path.starts_with("spec.coordinator.template.")), "a template is expanded");
}
