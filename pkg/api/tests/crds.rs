//! The checked-in CRDs are what the types generate, small enough for `kubectl apply`, and
//! structural as the API server requires.

mod common;

use di_api::crd::{LAST_APPLIED_LIMIT, crd_files, generated_files};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;

#[test]
fn checked_in_crds_match_the_types() {
    for (name, yaml) in generated_files() {
        let path = common::repo_root().join(name);
        let on_disk =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}; run `make manifests`", path.display()));
        assert!(on_disk == yaml, "{} differs from what pkg/api generates; run `make manifests`", path.display());
    }
}

#[test]
fn crds_fit_in_the_last_applied_annotation() {
    for (name, yaml) in crd_files() {
        let crd: CustomResourceDefinition = serde_yaml::from_str(&yaml).unwrap();
        // kubectl stores the object as compact JSON in the annotation.
        let stored = serde_json::to_string(&crd).unwrap().len();
        assert!(stored < LAST_APPLIED_LIMIT / 4, "{name}: {stored} bytes; keep it well under {LAST_APPLIED_LIMIT}");
    }
}

#[test]
fn crds_describe_the_resources() {
    let crds: Vec<CustomResourceDefinition> =
        crd_files().iter().map(|(_, y)| serde_yaml::from_str(y).unwrap()).collect();
    let names: Vec<_> = crds
        .iter()
        .map(|c| (c.spec.names.kind.as_str(), c.spec.names.short_names.clone().unwrap_or_default()))
        .collect();
    assert_eq!(names, vec![("DIJob", vec!["dijob".to_string()]), ("AggregatorConfig", vec!["agconfig".to_string()])]);
    for crd in &crds {
        assert_eq!(crd.spec.group, "diengine.opendilab.org");
        assert_eq!(crd.spec.scope, "Namespaced");
        let version = &crd.spec.versions[0];
        assert_eq!((version.name.as_str(), version.served, version.storage), ("v1alpha1", true, true));
    }
    // One schema under 0.2's version (stored) and 1.x's (served only): a round trip through
    // either loses nothing, and no conversion webhook stands between them.
    let versions: Vec<_> = crds[0].spec.versions.iter().map(|v| (v.name.as_str(), v.served, v.storage)).collect();
    assert_eq!(versions, [("v1alpha1", true, true), ("v2alpha1", true, false)]);
    assert_eq!(crds[0].spec.versions[0].schema, crds[0].spec.versions[1].schema);
    assert!(crds[0].spec.conversion.as_ref().is_none_or(|c| c.strategy == "None"));
    for dijob in &crds[0].spec.versions {
        assert!(dijob.subresources.as_ref().and_then(|s| s.status.as_ref()).is_some(), "status subresource");
        let columns: Vec<_> = dijob.additional_printer_columns.iter().flatten().map(|c| c.name.as_str()).collect();
        assert_eq!(columns, ["Phase", "Ready", "Replicas", "Restarts", "Collectors", "Learners", "Suspended", "Age"]);
    }
}

/// What `kubectl explain` prints for our own fields: every property outside the embedded
/// Kubernetes objects has a description.
#[test]
fn own_fields_are_documented() {
    for (name, yaml) in crd_files() {
        let crd: Value = serde_yaml::from_str(&yaml).unwrap();
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        let mut undocumented = vec![];
        walk(schema, "", &mut |path, node| {
            let container_node = path.ends_with("[]") || path.ends_with("{}");
            if !path.is_empty()
                && !path.starts_with(".metadata")
                && !container_node
                && node.get("description").is_none()
            {
                undocumented.push(path.to_owned());
            }
        });
        assert!(undocumented.is_empty(), "{name}: no description for {undocumented:?}");
    }
}

#[test]
fn crds_are_structural() {
    for (name, yaml) in crd_files() {
        let crd: Value = serde_yaml::from_str(&yaml).unwrap();
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        let problems = structural_problems(schema);
        assert!(problems.is_empty(), "{name} is not structural: {problems:#?}");
    }
}

#[test]
fn the_structural_check_can_fail() {
    let bad: Value = serde_json::json!({
        "type": "object",
        "properties": {
            "untyped": {"description": "no type"},
            "ref": {"$ref": "#/definitions/x"},
            "both": {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "string"}},
            "junctor": {"type": "object", "anyOf": [{"type": "string"}]},
            "metadata": {"type": "object", "properties": {"labels": {"type": "object"}}},
        }
    });
    let problems = structural_problems(&bad);
    for want in [".untyped", ".ref", ".both", ".junctor", ".metadata"] {
        assert!(problems.iter().any(|p| p.starts_with(&format!("{want}:"))), "{want} not caught: {problems:#?}");
    }
}

/// Visits every schema node with its path (`.spec.collector`, `.spec.volumes[]`).
fn walk(node: &Value, path: &str, visit: &mut dyn FnMut(&str, &Value)) {
    visit(path, node);
    if let Some(props) = node.get("properties").and_then(Value::as_object) {
        for (key, child) in props {
            walk(child, &format!("{path}.{key}"), visit);
        }
    }
    if let Some(items) = node.get("items") {
        walk(items, &format!("{path}[]"), visit);
    }
    if let Some(extra) = node.get("additionalProperties").filter(|v| v.is_object()) {
        walk(extra, &format!("{path}{{}}"), visit);
    }
}

/// The rules of a structural schema the API server enforces, as far as they can be checked
/// without one (the control-plane tier loads the CRDs into a real API server).
fn structural_problems(root: &Value) -> Vec<String> {
    let mut problems = vec![];
    walk(root, "", &mut |path, node| {
        let mut problem = |what: &str| problems.push(format!("{path}: {what}"));
        let preserve = node.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
        let int_or_string = node.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
        match node.get("type") {
            Some(Value::String(t)) if !t.is_empty() => {}
            None if preserve || int_or_string => {}
            other => problem(&format!("needs a single non-empty type, has {other:?}")),
        }
        for forbidden in ["$ref", "definitions", "$defs", "allOf", "anyOf", "oneOf", "not"] {
            if node.get(forbidden).is_some() {
                problem(&format!("uses {forbidden}"));
            }
        }
        if node.get("properties").is_some() && node.get("additionalProperties").is_some() {
            problem("has both properties and additionalProperties");
        }
        if node.get("additionalProperties") == Some(&Value::Bool(false)) {
            problem("sets additionalProperties: false");
        }
        if node.get("uniqueItems") == Some(&Value::Bool(true)) {
            problem("sets uniqueItems");
        }
        if let Some(items) = node.get("items")
            && !items.is_object()
        {
            problem("items must be a single schema");
        }
        if path == ".metadata"
            && let Some(props) = node.get("properties").and_then(Value::as_object)
            && props.keys().any(|k| k != "name" && k != "generateName")
        {
            problem("only metadata.name and metadata.generateName may be restricted");
        }
        if let Some(keys) = node.get("x-kubernetes-list-map-keys").and_then(Value::as_array) {
            let required = node["items"].get("required").and_then(Value::as_array).cloned().unwrap_or_default();
            for key in keys {
                if !required.contains(key) {
                    problem(&format!("list map key {key} must be required"));
                }
            }
        }
    });
    problems
}
