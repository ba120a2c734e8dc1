//! The fake's defaults and scripted answers, through a real kube client.

use std::time::Duration;

use di_testing::{Answer, client, list, watch_event};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

fn config_map(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns"}, "data": {"k": "v"}})).unwrap()
}

#[tokio::test]
async fn by_default_writes_are_echoed_deletes_succeed_and_reads_find_nothing() {
    let (client, log) = client(|_| None);
    let maps: Api<ConfigMap> = Api::namespaced(client, "ns");
    let created = maps.create(&PostParams::default(), &config_map("c")).await.unwrap();
    assert_eq!(created.data.unwrap()["k"], "v");
    maps.delete("c", &DeleteParams::default()).await.unwrap();
    let error = maps.get("c").await.unwrap_err();
    assert!(matches!(&error, kube::Error::Api(status) if status.code == 404), "{error:?}");

    let calls = log.calls();
    let seen: Vec<(&str, &str)> = calls.iter().map(|c| (c.method.as_str(), c.path.as_str())).collect();
    let one = "/api/v1/namespaces/ns/configmaps/c";
    assert_eq!(seen, [("POST", "/api/v1/namespaces/ns/configmaps"), ("DELETE", one), ("GET", one)]);
    assert_eq!(calls[0].body["data"]["k"], "v", "the body is recorded parsed");
    assert_eq!(calls[1].last_segment(), "c");
}

#[tokio::test]
async fn a_route_answers_where_it_says_and_the_default_elsewhere() {
    let (client, _) = client(|call| (call.method == "POST").then(|| Answer::status(409, "already exists")));
    let maps: Api<ConfigMap> = Api::namespaced(client, "ns");
    let error = maps.create(&PostParams::default(), &config_map("c")).await.unwrap_err();
    assert!(matches!(&error, kube::Error::Api(s) if s.code == 409 && s.reason == "Conflict"), "{error:?}");
    maps.delete("c", &DeleteParams::default()).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_watch_streams_its_events_and_stays_open() {
    let map = serde_json::to_value(config_map("c")).unwrap();
    let events = vec![watch_event("ADDED", &map)];
    let (client, log) = client(move |call| {
        if call.is_watch() { Answer::watch(events.clone()) } else { Answer::json(200, list("ConfigMap", "1", vec![])) }
    });
    let maps: Api<ConfigMap> = Api::namespaced(client, "ns");
    let mut stream = maps.watch(&WatchParams::default(), "0").await.unwrap().boxed();
    let first = stream.next().await.unwrap().unwrap();
    assert!(matches!(first, WatchEvent::Added(m) if m.metadata.name.as_deref() == Some("c")));
    let more = tokio::time::timeout(Duration::from_secs(60), stream.next()).await;
    assert!(more.is_err(), "held open");
    assert!(log.calls()[0].is_watch());
}

#[tokio::test(start_paused = true)]
async fn an_answer_can_take_its_time() {
    let (client, _) = client(|call| Answer::json(200, call.body.clone()).after(Duration::from_secs(5)));
    let maps: Api<ConfigMap> = Api::namespaced(client, "ns");
    let start = tokio::time::Instant::now();
    maps.create(&PostParams::default(), &config_map("c")).await.unwrap();
    assert!(start.elapsed() >= Duration::from_secs(5));
}
