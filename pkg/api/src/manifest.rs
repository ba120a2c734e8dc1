//! Reading manifests the way kubectl does: a YAML stream of documents, each a Kubernetes object.

use serde::Deserialize;

/// The documents of a YAML stream as JSON values, empty documents (a stray `---`) left out.
pub fn yaml_documents(text: &str) -> Result<Vec<serde_json::Value>, serde_yaml::Error> {
    let mut docs = vec![];
    for doc in serde_yaml::Deserializer::from_str(text) {
        let value = serde_json::Value::deserialize(doc)?;
        if !value.is_null() {
            docs.push(value);
        }
    }
    Ok(docs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams() {
        let docs = yaml_documents("---\nkind: A\n---\n---\nkind: B\nn: 1\n").unwrap();
        assert_eq!(docs, vec![serde_json::json!({"kind": "A"}), serde_json::json!({"kind": "B", "n": 1})]);
        assert!(yaml_documents("kind: [unclosed").is_err());
        assert_eq!(yaml_documents("").unwrap(), Vec::<serde_json::Value>::new());
    }
}
