//! Fuzzing the admission webhook in-process: any bytes, mangled reviews, and well-formed
//! AdmissionReviews of DIJobs mutated at random (wrong types, huge numbers, deep nesting,
//! unknown and missing fields, odd unicode). Whatever comes in, the answer is the documented
//! one: a 400 that says the body is not an AdmissionReview, or a 200 review that echoes the uid
//! and, when it denies, says why (the field of an invalid object, what could not be read
//! otherwise). A mutation's patch applies to the object it was computed for, and defaulting
//! twice changes nothing more.

#[path = "../../../fuzz/support.rs"]
mod support;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use di_webhook::server::router;
use http_body_util::BodyExt;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionReview;
use proptest::prelude::*;
use serde_json::{Value, json};
use support::Edit;
use tower::ServiceExt;

const UID: &str = "2b4a8f0e-fuzz-4c1e-9d7a-5f0c3e2a1b99";
const PATHS: [&str; 2] = ["/mutate", "/validate"];

async fn post(path: &str, body: Vec<u8>) -> (StatusCode, Vec<u8>) {
    let request = Request::post(path).body(Body::from(body)).unwrap();
    let response = router().oneshot(request).await.unwrap();
    let status = response.status();
    (status, response.into_body().collect().await.unwrap().to_bytes().to_vec())
}

fn block_on<T>(future: impl Future<Output = T>) -> T {
    // With timers: every request has a deadline.
    tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(future)
}

fn review(operation: &str, kind: &str, object: Value, old: Option<Value>) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": UID,
            "kind": {"group": "diengine.opendilab.org", "version": "v1alpha1", "kind": kind},
            "resource": {"group": "diengine.opendilab.org", "version": "v1alpha1", "resource": format!("{}s", kind.to_lowercase())},
            "namespace": "default",
            "operation": operation,
            "userInfo": {"username": "fuzz"},
            "object": object,
            "oldObject": old,
        }
    })
}

/// The objects of the examples, with their kinds.
fn examples() -> Vec<(String, Value)> {
    let docs = support::examples().into_iter().flat_map(|(_, text)| di_api::manifest::yaml_documents(&text).unwrap());
    docs.map(|doc| (doc["kind"].as_str().unwrap().to_owned(), doc)).collect()
}

/// The objects of the examples and of the corpus's reviews, with their kinds: what mutations
/// start from.
fn seeds() -> Vec<(String, Value)> {
    let mut seeds = examples();
    for (_, bytes) in support::corpus("webhook") {
        let Ok(review) = serde_json::from_slice::<Value>(&bytes) else { continue };
        let request = &review["request"];
        if let (Some(kind), true) = (request["kind"]["kind"].as_str(), request["object"].is_object()) {
            seeds.push((kind.to_owned(), request["object"].clone()));
        }
    }
    seeds
}

fn seed() -> impl Strategy<Value = (String, Value)> {
    prop::sample::select(seeds())
}

/// How deeply `value` nests arrays and objects (a scalar is 0).
fn depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// Whether kube reads `object` as a Kubernetes object at all (a map whose metadata is an
/// ObjectMeta); the API server never sends anything else, and the webhook answers 400 to it.
fn is_object(object: &Value) -> bool {
    serde_json::from_value::<DynamicObject>(object.clone()).is_ok()
}

/// Checks the answer to any body: 400 saying it is not an AdmissionReview, or a review. Returns
/// the review's response part, if any.
async fn answer_to(path: &str, body: &[u8]) -> Result<Option<Value>, TestCaseError> {
    let (status, reply) = post(path, body.to_vec()).await;
    let text = String::from_utf8_lossy(&reply);
    match status {
        StatusCode::BAD_REQUEST => {
            prop_assert!(text.starts_with("the body is not an AdmissionReview: "), "{text}");
            Ok(None)
        }
        StatusCode::OK => check_reply(body, &reply).map(Some),
        other => Err(TestCaseError::fail(format!("status {other}: {text}"))),
    }
}

/// A 200 answer: a review whose response allows or denies with a reason, in the request's
/// version and with its uid when there was a request.
fn check_reply(body: &[u8], reply: &[u8]) -> Result<Value, TestCaseError> {
    let text = String::from_utf8_lossy(reply);
    // Syntax only: parts kube ignores may nest deeper than a `Value` can.
    let json = serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok();
    prop_assert!(json, "a body that is not JSON was taken: {text}");
    let reply: Value = serde_json::from_slice(reply).map_err(|e| TestCaseError::fail(format!("{e}: {text}")))?;
    let response = reply["response"].clone();
    prop_assert!(response["allowed"].is_boolean(), "{reply}");
    if response["allowed"] == false {
        check_denial(&response)?;
    }
    let Ok(sent) = serde_json::from_slice::<Value>(body) else { return Ok(response) };
    if sent["request"].is_object() {
        prop_assert_eq!(&reply["apiVersion"], &sent["apiVersion"]);
        prop_assert_eq!(&reply["kind"], &sent["kind"]);
        prop_assert_eq!(&response["uid"], &sent["request"]["uid"], "{}", reply);
    } else {
        prop_assert_eq!(&reply["apiVersion"], "admission.k8s.io/v1");
        prop_assert_eq!(&reply["kind"], "AdmissionReview");
    }
    Ok(response)
}

/// A denial has a client error's code and a message that says what to fix: the field for an
/// invalid object, what could not be read otherwise.
fn check_denial(response: &Value) -> Result<(), TestCaseError> {
    let status = &response["status"];
    let message = status["message"].as_str().unwrap_or_default();
    let code = status["code"].as_u64().unwrap_or_default();
    // kube's answer to a review without a request carries no code (the API server always sends
    // a request, so only a hand-made review gets it).
    let no_request = message == "the AdmissionReview carries no request" && code == 0;
    prop_assert!(code == 400 || code == 422 || no_request, "code {code}: {response}");
    let explained = ["spec.", "metadata."].iter().any(|p| message.starts_with(p))
        || message.starts_with("the object cannot be read as a ")
        || message.starts_with("the old object cannot be read as a ")
        || message.starts_with("the admission request carries no ")
        || message.starts_with("the AdmissionReview carries no request")
        || message.starts_with("this webhook serves diengine.opendilab.org DIJob and AggregatorConfig only");
    prop_assert!(explained, "unexplained denial: {message:?}");
    Ok(())
}

/// The JSON patch of a mutation's answer, when it has one.
fn patch_of(response: &Value) -> Option<json_patch::Patch> {
    let bytes: Vec<u8> = match &response["patch"] {
        Value::String(s) => {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.decode(s).unwrap()
        }
        Value::Array(a) => a.iter().map(|b| b.as_u64().unwrap() as u8).collect(),
        _ => return None,
    };
    Some(serde_json::from_slice(&bytes).unwrap())
}

/// A well-formed review of `object`: answered with 200 whenever kube can read the object, and a
/// mutation's patch applies to it and is the last one needed.
async fn check_review(path: &str, operation: &str, kind: &str, object: Value, old: Value) -> Result<(), TestCaseError> {
    let sent = review(operation, kind, object.clone(), Some(old.clone()));
    let body = serde_json::to_vec(&sent).unwrap();
    // kube decides what an AdmissionReview is; a review of real objects (a null one is absent)
    // nested well within serde_json's limit of 128 levels always is one.
    let readable = serde_json::from_slice::<AdmissionReview<DynamicObject>>(&body).is_ok();
    let real = ["CREATE", "UPDATE", "DELETE", "CONNECT"].contains(&operation)
        && [&object, &old].iter().all(|o| o.is_null() || is_object(o));
    prop_assert!(readable || !real || depth(&sent) > 100, "kube cannot read a review of real objects");
    let response = answer_to(path, &body).await?;
    prop_assert_eq!(response.is_some(), readable, "{:?}", response);
    let Some(response) = response else { return Ok(()) };
    if path == "/mutate"
        && let Some(patch) = patch_of(&response)
    {
        let mut patched = object.clone();
        json_patch::patch(&mut patched, &patch).map_err(|e| TestCaseError::fail(format!("the patch fails: {e}")))?;
        let again = review(operation, kind, patched, Some(old));
        let response = answer_to(path, &serde_json::to_vec(&again).unwrap()).await?.unwrap();
        prop_assert_eq!(&response["allowed"], true);
        prop_assert!(patch_of(&response).is_none(), "defaulting is not idempotent: {}", response);
    }
    Ok(())
}

fn operations() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["CREATE", "CREATE", "UPDATE", "UPDATE", "DELETE", "CONNECT"])
}

proptest! {
    #![proptest_config(support::config("webhook"))]

    #[test]
    fn any_bytes_are_answered(path in prop::sample::select(&PATHS[..]), body in prop::collection::vec(any::<u8>(), 0..300)) {
        block_on(answer_to(path, &body))?;
    }

    #[test]
    fn any_json_is_answered(path in prop::sample::select(&PATHS[..]), value in support::any_json()) {
        block_on(answer_to(path, &serde_json::to_vec(&value).unwrap()))?;
    }

    #[test]
    fn mangled_reviews_are_answered(
        path in prop::sample::select(&PATHS[..]),
        (kind, object) in seed(),
        edits in support::byte_edits(),
    ) {
        let body = serde_json::to_vec(&review("CREATE", &kind, object, None)).unwrap();
        block_on(answer_to(path, &support::apply_bytes(body, &edits)))?;
    }

    #[test]
    fn mutated_jobs_are_answered_with_the_reason(
        path in prop::sample::select(&PATHS[..]),
        operation in operations(),
        (kind, object) in seed(),
        edits in support::edits(),
    ) {
        let mutated = support::apply(object.clone(), &edits);
        block_on(check_review(path, operation, &kind, mutated, object))?;
    }

    /// The request around the object mutated too: its kind, operation, uid.
    #[test]
    fn mutated_requests_are_answered(
        path in prop::sample::select(&PATHS[..]),
        (kind, object) in seed(),
        edits in support::edits(),
        under in prop::sample::select(vec!["/request", "/request/kind", "/request/operation", "/request/uid", ""]),
    ) {
        let mut sent = review("CREATE", &kind, object, None);
        let part = sent.pointer_mut(under).unwrap();
        *part = support::apply(part.take(), &edits);
        block_on(answer_to(path, &serde_json::to_vec(&sent).unwrap()))?;
    }
}

/// Every seed of the corpus as it is, on both paths.
#[test]
fn the_corpus_is_answered() {
    for (name, bytes) in support::corpus("webhook") {
        let request = serde_json::from_slice::<Value>(&bytes).map(|r| r["request"].clone()).unwrap_or_default();
        for path in PATHS {
            let outcome = block_on(answer_to(path, &bytes));
            assert!(outcome.is_ok(), "fuzz/corpus/webhook/{name} on {path}: {outcome:?}");
            // Its objects in a review of ours, so that a mutation's patch is checked too.
            if let (Some(operation), Some(kind)) = (request["operation"].as_str(), request["kind"]["kind"].as_str()) {
                let (object, old) = (request["object"].clone(), request["oldObject"].clone());
                let outcome = block_on(check_review(path, operation, kind, object, old));
                assert!(outcome.is_ok(), "fuzz/corpus/webhook/{name}'s objects on {path}: {outcome:?}");
            }
        }
    }
}

/// The examples, and each of them with a wrong type at every node in turn: no randomness, so it
/// covers what a small random sample may miss.
#[test]
fn every_field_of_the_examples_with_a_wrong_type_is_answered() {
    let wrong = [json!(null), json!("text"), json!(i64::MAX), json!([{}])];
    block_on(async {
        for (kind, object) in examples() {
            for node in 0..support::node_count(&object) {
                for value in &wrong {
                    let mut mutated = object.clone();
                    support::edit_node(&mut mutated, node, &Edit::Replace(value.clone()));
                    let outcome = check_review("/validate", "CREATE", &kind, mutated.clone(), object.clone()).await;
                    assert!(outcome.is_ok(), "{kind} with {value} at node {node}: {outcome:?}\n{mutated}");
                }
            }
        }
    });
}

/// A quantity whose zero mantissa has a huge exponent: `di_api::resources::whole_number` counts
/// the exponent down one step at a time, seconds of CPU for a few bytes (reported; the fuzz
/// strategies keep exponents within ±400 until it is fixed).
#[test]
fn a_huge_exponent_is_answered_at_once() {
    let mut job = examples().into_iter().find(|(kind, _)| kind == "DIJob").unwrap().1;
    let container = &mut job["spec"]["coordinator"]["template"]["spec"]["containers"][0];
    container["resources"] = json!({"limits": {"nvidia.com/gpu": "0e2147483647"}});
    let started = std::time::Instant::now();
    let outcome = block_on(check_review("/validate", "CREATE", "DIJob", job, Value::Null));
    assert!(outcome.is_ok(), "{outcome:?}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "took {:?} (the spin took a minute; a loaded machine takes milliseconds)",
        started.elapsed()
    );
}

/// An object that cannot be read is denied with the field that does not fit, as kubectl di's
/// check does (serde_json's own message names no field; serde_path_to_error adds it).
#[test]
fn unreadable_objects_name_the_field() {
    let mut job = examples().into_iter().find(|(kind, _)| kind == "DIJob").unwrap().1;
    job["spec"]["collector"]["replicas"] = json!("two");
    let body = serde_json::to_vec(&review("CREATE", "DIJob", job, None)).unwrap();
    for path in PATHS {
        let response = block_on(answer_to(path, &body)).unwrap().unwrap();
        let message = response["status"]["message"].as_str().unwrap();
        assert!(message.contains("spec.collector.replicas"), "{path}: {message}");
    }
}
