//! The CustomResourceDefinitions generated from the types, as checked in under `manifests/crds/`.

use kube::CustomResourceExt;

use crate::{AggregatorConfig, DIJob};

/// Client-side `kubectl apply` keeps the whole object in an annotation of at most this size.
pub const LAST_APPLIED_LIMIT: usize = 256 * 1024;

/// Every generated file as `(path from the repository root, YAML)`: one file per CRD under
/// `manifests/crds/` (for `kubectl apply -f manifests/crds/`), both in
/// `manifests/install/crds.yaml` (kustomize loads no file from outside its folder), and one file
/// per CRD in the Helm chart's `crds/` (Helm installs those before the templates).
pub fn generated_files() -> Vec<(String, String)> {
    let crds = crd_files();
    let mut files: Vec<(String, String)> = vec![];
    for dir in ["manifests/crds", "charts/di-orchestrator/crds"] {
        files.extend(crds.iter().map(|(name, yaml)| (format!("{dir}/{name}"), yaml.clone())));
    }
    let combined = crds.iter().map(|(_, yaml)| yaml.as_str()).collect::<Vec<_>>().join("---\n");
    files.push(("manifests/install/crds.yaml".into(), combined));
    files
}

/// Each CRD as `(file name, YAML)`, in the order they are installed.
pub fn crd_files() -> Vec<(&'static str, String)> {
    let header = "# Generated from pkg/api by `make manifests`; do not edit.\n";
    let yaml = |crd| format!("{header}{}", serde_yaml::to_string(&crd).expect("a CRD serialises to YAML"));
    vec![
        ("diengine.opendilab.org_dijobs.yaml", yaml(DIJob::crd())),
        ("diengine.opendilab.org_aggregatorconfigs.yaml", yaml(AggregatorConfig::crd())),
    ]
}
