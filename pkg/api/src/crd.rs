//! The CustomResourceDefinitions generated from the types, as checked in under `manifests/crds/`.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::contract::TASKS_VERSION;
use crate::{AggregatorConfig, DIJob};

/// The DIJob CRD: one schema, stored as `v1alpha1` and served under that version (0.2's) and
/// `v2alpha1` (1.x's) with no conversion, so an object reads back whole under either version.
/// Why no conversion webhook: docs/TASKS.md.
pub fn dijob_crd() -> CustomResourceDefinition {
    let mut crd = DIJob::crd();
    let mut tasks = crd.spec.versions[0].clone();
    tasks.name = TASKS_VERSION.to_owned();
    tasks.storage = false;
    crd.spec.versions.push(tasks);
    crd
}

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
        ("diengine.opendilab.org_dijobs.yaml", yaml(dijob_crd())),
        ("diengine.opendilab.org_aggregatorconfigs.yaml", yaml(AggregatorConfig::crd())),
    ]
}

#[cfg(test)]
mod tests {
    use kube::core::Version;

    use super::*;
    use crate::contract::OWNER_VERSION;

    /// Discovery prefers the served version that ranks highest in Kubernetes' version order; the
    /// garbage collector watches DIJobs under it, so controller references must name it.
    #[test]
    fn owner_references_name_the_preferred_version() {
        let crd = dijob_crd();
        let served = crd.spec.versions.iter().filter(|v| v.served).map(|v| v.name.as_str());
        let preferred = served.max_by_key(|v| Version::parse(v).priority());
        assert_eq!(preferred, Some(OWNER_VERSION));
    }
}
