//! The cells of a field's row, each read from the field's schema: its type as `kubectl explain`
//! names it, its default, its limits, and text made safe for one Markdown table cell.

use serde_json::Value;

/// The type as `kubectl explain` prints it (`integer`, `Object`, `[]Object`,
/// `map[string]integer`), with a string's or number's format after it.
pub(super) fn type_name(field: &Value) -> String {
    let base = kind(field);
    match field["format"].as_str() {
        // Every integer has one of these: they add nothing a reader needs.
        Some(format) if !matches!(format, "int32" | "int64") => format!("{base} ({format})"),
        _ => base,
    }
}

fn kind(field: &Value) -> String {
    if field["x-kubernetes-int-or-string"] == true {
        return "IntOrString".into();
    }
    match field["type"].as_str() {
        Some("array") => format!("[]{}", kind(&field["items"])),
        Some("object") => match field.get("additionalProperties").filter(|v| v.is_object()) {
            Some(values) => format!("map[string]{}", kind(values)),
            None => "Object".into(),
        },
        Some(other) => other.into(),
        None => "Object".into(),
    }
}

/// The value the API server fills in when the field is left out, as JSON.
pub(super) fn default(field: &Value) -> String {
    field.get("default").map(|d| code(&d.to_string())).unwrap_or_default()
}

/// Every limit the schema puts on the field, in words, but its CEL rules (see [`rule`]).
pub(super) fn limits(field: &Value, required: bool) -> Vec<String> {
    let mut out = vec![];
    if required {
        out.push("required".into());
    }
    let exclusive = |key: &str| field[key] == true;
    match (number(&field["minimum"]), number(&field["maximum"])) {
        (Some(min), Some(max)) if !exclusive("exclusiveMinimum") && !exclusive("exclusiveMaximum") => {
            out.push(format!("{min} to {max}"))
        }
        (min, max) => {
            if let Some(min) = min {
                out.push(if exclusive("exclusiveMinimum") {
                    format!("more than {min}")
                } else {
                    format!("at least {min}")
                });
            }
            if let Some(max) = max {
                out.push(if exclusive("exclusiveMaximum") {
                    format!("less than {max}")
                } else {
                    format!("at most {max}")
                });
            }
        }
    }
    out.extend(range(field, "minLength", "maxLength", "characters"));
    out.extend(range(field, "minItems", "maxItems", "items"));
    out.extend(range(field, "minProperties", "maxProperties", "entries"));
    if let Some(pattern) = field["pattern"].as_str() {
        out.push(format!("matches {}", code(pattern)));
    }
    let values: Vec<String> =
        field["enum"].as_array().into_iter().flatten().filter(|v| !v.is_null()).map(shown).collect();
    if !values.is_empty() {
        out.push(format!("one of {}", values.join(", ")));
    }
    match field["x-kubernetes-list-type"].as_str() {
        Some("map") => {
            let keys: Vec<String> = field["x-kubernetes-list-map-keys"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(code)
                .collect();
            out.push(format!("one item per {}", keys.join(" and ")));
        }
        Some("set") => out.push("no item twice".into()),
        _ => {}
    }
    out
}

/// `N to M <what>`, `at least N <what>` or `at most M <what>`, where the schema gives them.
fn range(field: &Value, min: &str, max: &str, what: &str) -> Option<String> {
    match (number(&field[min]), number(&field[max])) {
        (Some(min), Some(max)) => Some(format!("{min} to {max} {what}")),
        (Some(min), None) => Some(format!("at least {min} {what}")),
        (None, Some(max)) => Some(format!("at most {max} {what}")),
        (None, None) => None,
    }
}

/// A CEL rule as the API server reports it when it is broken: its message, else the rule.
pub(super) fn rule(rule: &Value) -> String {
    match rule["message"].as_str() {
        Some(message) => text(message),
        None => code(rule["rule"].as_str().unwrap_or_default()),
    }
}

/// A number as written in a manifest: `1000`, not the schema's `1000.0`.
fn number(v: &Value) -> Option<String> {
    let n = v.as_f64()?;
    Some(if n.fract() == 0.0 && n.abs() < 1e15 { format!("{}", n as i64) } else { n.to_string() })
}

/// An enum value: a string bare, anything else as JSON, in code.
fn shown(v: &Value) -> String {
    code(&v.as_str().map_or_else(|| v.to_string(), str::to_owned))
}

fn code(s: &str) -> String {
    format!("`{}`", s.replace('|', "\\|"))
}

/// `s` on one line for a table cell: its words one space apart, `|` escaped, and `<` escaped
/// outside code spans (GitHub would take `<name>` for an HTML tag and hide it).
pub(super) fn text(s: &str) -> String {
    let words = s.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out = String::with_capacity(words.len());
    let mut in_code = false;
    for c in words.chars() {
        match c {
            '`' => in_code = !in_code,
            '|' => out.push('\\'),
            '<' if !in_code => out.push('\\'),
            _ => {}
        }
        out.push(c);
    }
    out
}
