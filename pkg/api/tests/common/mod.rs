//! Fixtures shared by the integration tests: the checked-in examples and a valid job to mutate.
#![allow(dead_code)]

use std::path::PathBuf;

use di_api::DIJob;
use di_api::defaults::default_dijob;
use di_api::validation::validate_dijob_update;
use k8s_openapi::api::core::v1::PodSpec;

/// Read when run, not compiled in: clones share one build target, which cargo does not rebuild
/// for a moved clone, so a compiled-in path may name another clone.
pub fn repo_root() -> PathBuf {
    PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("run by cargo")).join("../..")
}

/// Every document of a file under `manifests/examples/`, as raw JSON.
pub fn example_documents(name: &str) -> Vec<serde_json::Value> {
    let path = repo_root().join("manifests/examples").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    di_api::manifest::yaml_documents(&text).expect("example is YAML")
}

/// The DIJob document of an example.
pub fn example_job(name: &str) -> DIJob {
    let doc = example_documents(name).into_iter().find(|d| d["kind"] == "DIJob").expect("example has a DIJob");
    serde_json::from_value(doc).expect("example parses as a DIJob")
}

/// A small valid job: coordinator, collector and learner, each with one container.
pub fn valid_job() -> DIJob {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "diengine.opendilab.org/v1alpha1",
        "kind": "DIJob",
        "metadata": {"name": "job", "namespace": "default"},
        "spec": {
            "volumes": [{"name": "work-dir", "emptyDir": {}}],
            "coordinator": {"template": {"spec": {"containers": [
                {"name": "di-container", "image": "ding", "volumeMounts": [{"name": "work-dir", "mountPath": "/ding"}]}
            ]}}},
            "collector": {"replicas": 2, "template": {"spec": {"containers": [{"name": "di-container", "image": "ding"}]}}},
            "learner": {"replicas": 1, "template": {"spec": {"containers": [{"name": "di-container", "image": "ding"}]}}}
        }
    }))
    .expect("valid job parses")
}

/// `job` as stored: its defaults filled in.
pub fn defaulted(mut job: DIJob) -> DIJob {
    default_dijob(&mut job);
    job
}

/// What the webhook says of updating `old` to `new` (as stored), one line per problem.
pub fn update_errors(old: DIJob, new: DIJob) -> Vec<String> {
    match validate_dijob_update(&old, &defaulted(new)) {
        Ok(()) => vec![],
        Err(e) => e.0.into_iter().map(|e| e.to_string()).collect(),
    }
}

/// A change to a job, for the tables of rules.
pub type Mutation = fn(&mut DIJob);

/// The pod spec of `role`'s template in `job`.
pub fn pod<'a>(job: &'a mut DIJob, role: &str) -> &'a mut PodSpec {
    let template = match role {
        "coordinator" => &mut job.spec.coordinator.as_mut().unwrap().template,
        "collector" => &mut job.spec.collector.as_mut().unwrap().template,
        "learner" => &mut job.spec.learner.as_mut().unwrap().template,
        other => panic!("no role {other}"),
    };
    template.spec.as_mut().unwrap()
}

/// A value read from JSON.
pub fn set_json<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> T {
    serde_json::from_value(value).unwrap()
}

/// The errors `validate_dijob` finds in `job` once defaulted, as (path, message).
pub fn errors(job: DIJob) -> Vec<(String, String)> {
    match di_api::validation::validate_dijob(&defaulted(job)) {
        Ok(()) => vec![],
        Err(e) => e.0.into_iter().map(|e| (e.path, e.message)).collect(),
    }
}

/// Each case (name, what it breaks in a valid job, the field, words of the message) is refused
/// with exactly that one error.
pub fn each_refused_once(cases: Vec<(&str, Mutation, &str, &str)>) {
    for (name, mutate, path, message) in cases {
        let mut job = valid_job();
        mutate(&mut job);
        let got = errors(job);
        assert_eq!(got.len(), 1, "{name}: want exactly one error, got {got:#?}");
        assert_eq!(got[0].0, path, "{name}");
        assert!(got[0].1.contains(message), "{name}: message {:?} lacks {message:?}", got[0].1);
    }
}
