//! The client against a scripted API server: a write decided again on conflict and given up on
//! after a few tries, the API server's refusals told apart, waits that answer on the watched
//! change or at their timeout, and objects applied where discovery puts them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use di_api::DIJob;
use di_client::Refusal;
use di_client::apply::apply;
use di_client::update::{UpdateError, WRITE_ATTEMPTS, update_job};
use di_client::wait::{Settled, WaitError, until_replaced, until_settled};
use di_testing::{Answer, Call, client, list, watch_event};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::DynamicObject;
use serde_json::{Value, json};

const JOB: &str = "/apis/diengine.opendilab.org/v1alpha1/namespaces/ns/dijobs";

fn job(version: &str, status: Value) -> Value {
    json!({
        "apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJob",
        "metadata": {"name": "j", "namespace": "ns", "resourceVersion": version},
        "spec": {"collector": {"replicas": 1, "template": {}}},
        "status": status,
    })
}

/// A job whose writes conflict `conflicts` times (another writer got there first) and are then
/// applied; the count of writes tried.
fn conflicting(conflicts: usize) -> (Api<DIJob>, Arc<AtomicUsize>) {
    let writes = Arc::new(AtomicUsize::new(0));
    let tried = writes.clone();
    let (client, _) = client(move |call| {
        let version = tried.load(Ordering::SeqCst).to_string();
        match call.method.as_str() {
            "GET" => Answer::json(200, job(&version, json!({}))),
            _ => {
                assert_eq!(
                    call.body["metadata"]["resourceVersion"],
                    version.as_str(),
                    "a write carries the version read"
                );
                if tried.fetch_add(1, Ordering::SeqCst) < conflicts {
                    return Answer::status(409, "the object has been modified");
                }
                let mut written = job("written", json!({}));
                written["spec"]["collector"]["replicas"] = call.body["spec"]["collector"]["replicas"].clone();
                Answer::json(200, written)
            }
        }
    });
    (Api::namespaced(client, "ns"), writes)
}

fn three_collectors(job: &DIJob) -> Result<(Value, i32), Refusal> {
    Ok((json!({"spec": {"collector": {"replicas": 3}}}), job.spec.collector_replicas()))
}

#[tokio::test]
async fn a_conflicting_write_is_decided_again() {
    let (api, writes) = conflicting(WRITE_ATTEMPTS - 1);
    let written = update_job(&api, "j", three_collectors).await.unwrap();
    assert_eq!(writes.load(Ordering::SeqCst), WRITE_ATTEMPTS);
    assert_eq!((written.result, written.after.spec.collector_replicas()), (1, 3));

    let (api, writes) = conflicting(usize::MAX);
    let error = update_job(&api, "j", three_collectors).await.err().unwrap();
    assert_eq!(writes.load(Ordering::SeqCst), WRITE_ATTEMPTS);
    assert_eq!(
        error.to_string(),
        format!(
            "DIJob j kept changing while this request was decided ({WRITE_ATTEMPTS} tries): nothing was changed; retry"
        )
    );
}

#[tokio::test]
async fn refusals_are_told_apart() {
    let answer = |get: u16, patch: u16| {
        let (client, log) = client(move |call| match (call.method.as_str(), get, patch) {
            ("GET", 200, _) => Answer::json(200, job("1", json!({}))),
            ("GET", code, _) | (_, _, code) => Answer::status(code, "spec.collector.replicas: Invalid value"),
        });
        (Api::<DIJob>::namespaced(client, "ns"), log)
    };
    let (api, _) = answer(404, 0);
    let error = update_job(&api, "j", three_collectors).await.err().unwrap();
    assert!(matches!(error, UpdateError::NotFound(_)), "{error:?}");
    assert_eq!(error.to_string(), "DIJob j does not exist");

    let (api, _) = answer(200, 422);
    let error = update_job(&api, "j", three_collectors).await.err().unwrap();
    assert_eq!(error.to_string(), "spec.collector.replicas: Invalid value");
    assert!(matches!(error, UpdateError::Invalid(_)), "{error:?}");

    let (api, _) = answer(200, 500);
    let error = update_job(&api, "j", three_collectors).await.err().unwrap();
    assert!(matches!(error, UpdateError::Kube(_)), "{error:?}");
    assert!(error.to_string().starts_with("kubernetes API: "), "{error}");

    // A request the rules refuse writes nothing.
    let (api, log) = answer(200, 200);
    let refuse = |_: &DIJob| Err::<(Value, ()), _>(Refusal::Conflict("no".into()));
    let error = update_job(&api, "j", refuse).await.err().unwrap();
    assert!(matches!(error, UpdateError::Refused(Refusal::Conflict(_))), "{error:?}");
    assert!(log.calls().iter().all(|c| c.method == "GET"));
}

/// A job listed as `first` and then changed by `then`, on a watch that stays open.
fn followed(first: Value, then: Vec<Value>) -> Api<DIJob> {
    let (client, _) = client(move |call| {
        assert_eq!(call.path, JOB);
        assert!(call.query.contains("fieldSelector=metadata.name%3Dj"), "{}", call.query);
        if call.is_watch() {
            Answer::watch(then.clone())
        } else {
            Answer::json(200, list("DIJob", "1", vec![first.clone()]))
        }
    });
    Api::namespaced(client, "ns")
}

#[tokio::test(start_paused = true)]
async fn a_job_is_followed_until_it_settles() {
    let running = job("3", json!({"phase": "Running", "collectors": "1/1"}));
    let api = followed(
        job("1", json!({"phase": "Created"})),
        vec![
            watch_event("MODIFIED", &job("2", json!({"phase": "Running", "collectors": "0/1"}))),
            watch_event("MODIFIED", &running),
        ],
    );
    let seen = Mutex::new(vec![]);
    let settled = until_settled(&api, "j", Duration::from_secs(60), |job| {
        seen.lock().unwrap().push(job.status.clone().unwrap().collectors);
    })
    .await
    .unwrap();
    assert!(matches!(settled, Settled::Running(_)), "{settled:?}");
    assert_eq!(seen.into_inner().unwrap(), [None, Some("0/1".to_owned()), Some("1/1".to_owned())]);

    let failed = json!({"phase": "Failed", "conditions": [{"type": "Failed", "status": "True", "message": "exit 1"}]});
    let api = followed(job("1", json!({})), vec![watch_event("MODIFIED", &job("2", failed))]);
    let settled = until_settled(&api, "j", Duration::from_secs(60), |_| {}).await.unwrap();
    assert!(matches!(&settled, Settled::Failed { reason } if reason == "exit 1"), "{settled:?}");

    let api = followed(job("1", json!({})), vec![watch_event("DELETED", &job("2", json!({})))]);
    let settled = until_settled(&api, "j", Duration::from_secs(60), |_| {}).await.unwrap();
    assert!(matches!(settled, Settled::Deleted), "{settled:?}");

    let api = followed(job("1", json!({"phase": "Created"})), vec![]);
    let error = until_settled(&api, "j", Duration::from_secs(60), |_| {}).await.unwrap_err();
    assert!(matches!(error, WaitError::TimedOut(_)), "{error:?}");
    assert_eq!(error.to_string(), "not within 60s");
}

fn pod(name: &str, uid: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": "1"}})
}

#[tokio::test(start_paused = true)]
async fn marked_pods_are_followed_until_replaced() {
    let (client, _) = client(|call| {
        let name =
            call.query.split("metadata.name%3D").nth(1).unwrap_or_default().split('&').next().unwrap().to_owned();
        match (name.as_str(), call.is_watch()) {
            // One pod comes back with a new UID, one was not replaced yet.
            ("p0", false) => Answer::json(200, list("Pod", "1", vec![pod("p0", "old")])),
            ("p0", true) => {
                Answer::watch(vec![watch_event("DELETED", &pod("p0", "old")), watch_event("ADDED", &pod("p0", "new"))])
            }
            (_, false) => Answer::json(200, list("Pod", "1", vec![pod(&name, "old")])),
            (_, true) => Answer::watch(vec![]),
        }
    });
    let pods: Api<Pod> = Api::namespaced(client, "ns");
    let marked = |names: &[&str]| names.iter().map(|n| (n.to_string(), Some("old".to_owned()))).collect::<Vec<_>>();
    until_replaced(&pods, &marked(&["p0"]), Duration::from_secs(10)).await.unwrap();
    let error = until_replaced(&pods, &marked(&["p0", "p1"]), Duration::from_secs(10)).await.unwrap_err();
    assert!(matches!(error, WaitError::TimedOut(_)), "{error:?}");
}

#[tokio::test]
async fn objects_are_applied_where_discovery_puts_them() {
    let (client, log) = client(|call| match (call.method.as_str(), call.path.as_str()) {
        ("GET", "/api/v1") => Answer::json(
            200,
            json!({"kind": "APIResourceList", "groupVersion": "v1", "resources": [
                {"name": "namespaces", "singularName": "namespace", "namespaced": false, "kind": "Namespace", "verbs": ["get", "patch"]},
                {"name": "configmaps", "singularName": "configmap", "namespaced": true, "kind": "ConfigMap", "verbs": ["get", "patch"]},
            ]}),
        ),
        ("GET", _) => Answer::status(404, "the server could not find the requested resource"),
        ("PATCH", "/api/v1/namespaces/ns/configmaps/forbidden") => Answer::status(403, "configmaps is forbidden"),
        _ => Answer::json(200, call.body.clone()),
    });
    let object = |kind: &str, meta: Value| {
        serde_json::from_value::<DynamicObject>(json!({"apiVersion": "v1", "kind": kind, "metadata": meta}))
    };
    apply(&client, &object("Namespace", json!({"name": "ns"})).unwrap(), "test").await.unwrap();
    apply(&client, &object("ConfigMap", json!({"name": "c"})).unwrap(), "test").await.unwrap();
    apply(&client, &object("ConfigMap", json!({"name": "c", "namespace": "ns"})).unwrap(), "test").await.unwrap();
    let log = log.calls();
    let patches: Vec<&Call> = log.iter().filter(|c| c.method == "PATCH").collect();
    let paths: Vec<&str> = patches.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(
        paths,
        ["/api/v1/namespaces/ns", "/api/v1/namespaces/default/configmaps/c", "/api/v1/namespaces/ns/configmaps/c"]
    );
    for patch in patches {
        assert!(patch.query.contains("fieldManager=test") && patch.query.contains("force=true"), "{patch:?}");
    }

    let error = apply(&client, &object("ConfigMap", json!({"name": "forbidden", "namespace": "ns"})).unwrap(), "test")
        .await
        .unwrap_err();
    assert_eq!(error.to_string(), "applying ConfigMap forbidden");
    let source = std::error::Error::source(&error).map(ToString::to_string).unwrap_or_default();
    assert!(source.contains("configmaps is forbidden"), "{source}");
    let unserved = serde_json::from_value::<DynamicObject>(
        json!({"apiVersion": "example.org/v1", "kind": "Thing", "metadata": {"name": "t"}}),
    )
    .unwrap();
    let error = apply(&client, &unserved, "test").await.unwrap_err();
    assert_eq!(error.to_string(), "the cluster does not serve Thing");
}
