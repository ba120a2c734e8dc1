//! Kubernetes' naming rules (DNS labels and subdomains, port names), as messages that say what to
//! change.

/// Why `s` is not a DNS-1123 label (what container, volume and namespace names must be).
pub(super) fn dns1123_label_problem(s: &str) -> Option<String> {
    if s.is_empty() {
        return Some("must not be empty".into());
    }
    if s.len() > 63 {
        return Some(format!("must be at most 63 characters (it has {})", s.len()));
    }
    let ok_chars = s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !ok_chars || s.starts_with('-') || s.ends_with('-') {
        return Some(
            "must consist of lowercase letters, digits and '-', and start and end with a letter or digit".into(),
        );
    }
    None
}

/// Why `s` is not a DNS-1035 label (what a Service name must be).
pub(super) fn dns1035_problem(s: &str) -> Option<String> {
    dns1123_label_problem(s)
        .or_else(|| (!s.as_bytes()[0].is_ascii_lowercase()).then(|| "must start with a lowercase letter".to_owned()))
}

/// Why `s` is not a DNS-1123 subdomain (what most object names must be).
pub(super) fn dns1123_subdomain_problem(s: &str) -> Option<String> {
    if s.len() > 253 {
        return Some(format!("must be at most 253 characters (it has {})", s.len()));
    }
    s.split('.').find_map(dns1123_label_problem).map(|p| format!("{p} in every dot-separated part"))
}

/// Why `s` is not an IANA service name (what a port name must be).
pub(super) fn port_name_problem(s: &str) -> Option<String> {
    let valid = (1..=15).contains(&s.len())
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && s.bytes().any(|b| b.is_ascii_lowercase())
        && !s.starts_with('-')
        && !s.ends_with('-')
        && !s.contains("--");
    (!valid).then(|| {
        "must be 1 to 15 lowercase letters, digits and single '-', with at least one letter, e.g. \"di-port\"".into()
    })
}

pub(super) fn quoted(values: &[&str]) -> String {
    values.iter().map(|v| format!("{v:?}")).collect::<Vec<_>>().join(", ")
}
