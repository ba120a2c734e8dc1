//! What only real nodes show (`make e2e`, kind): a coordinator container that scales its own job
//! through the replica-endpoint sidecar on localhost, as DI-engine does, and then reaches the new
//! collector by the `<pod>.<namespace>` name the endpoint handed out, over the cluster's DNS and
//! Service network; its exit then finishes the job. On simulated nodes nothing runs a container,
//! so these scenarios do not apply there.

use di_api::Phase;
use di_api::contract::REPLICAS_PORT;
use di_e2e::nodes::{REAL_IMAGE, WAIT_FOR_EXIT, real_nodes};
use di_e2e::scenario::{Scenario, names};
use kube::api::LogParams;
use serde_json::json;

/// The coordinator's program: wait for the sidecar, ask it for one more collector (the job has one,
/// so the new one is `net-collector-1`) with DI-engine's request, then fetch the page the new collector serves under the name the answer gave. Exits 0
/// only when the page names that collector's own pod. (No `wget -T`: busybox 1.35's crashes.)
fn coordinator_script(ns: &str) -> String {
    let endpoint = format!("http://localhost:{REPLICAS_PORT}");
    let request = format!(
        r#"{{"namespace":"{ns}","coordinator":"net-coordinator","collectors":{{"replicas":1}},"learners":{{"replicas":0}}}}"#
    );
    format!(
        r#"trap 'exit 143' TERM
until wget -q -O /dev/null {endpoint}/healthz; do sleep 0.5; done
wget -q -O /tmp/answer --header 'Content-Type: application/json' --post-data '{request}' {endpoint}/v1alpha1/replicas || exit 2
cat /tmp/answer; echo
address=$(sed -n 's/.*"collectors":\["\([^"]*\)".*/\1/p' /tmp/answer)
[ -n "$address" ] || exit 3
for i in $(seq 120); do
  if wget -q -O /tmp/page "http://$address/"; then
    echo "reached $address: $(cat /tmp/page)"
    [ "$(cat /tmp/page)" = net-collector-1 ] && exit 0
    exit 4
  fi
  sleep 0.5
done
exit 5"#
    )
}

/// A collector that serves its own hostname on the collector port, then waits to be told to end.
fn collector_script() -> String {
    format!("mkdir -p /www && hostname > /www/index.html && httpd -p 22270 -h /www && {WAIT_FOR_EXIT}")
}

#[tokio::test]
#[ignore = "kind tier: run with `make e2e`"]
async fn a_coordinator_scales_through_its_sidecar_and_reaches_the_new_collector_by_name() {
    if !real_nodes() {
        di_e2e::cluster::not_applicable("no container runs on simulated nodes (kind tier only)");
        return;
    }
    let s = Scenario::new("net").await;
    let container =
        |script: String| json!({"name": "di-container", "image": REAL_IMAGE, "command": ["sh", "-c", script]});
    let collectors = json!({"containers": [container(collector_script())]});
    let coordinator = json!({"containers": [container(coordinator_script(&s.ns))]});
    s.submit(
        "net",
        1,
        0,
        json!({"coordinator": {"template": {"spec": coordinator}}, "collector": {"template": {"spec": collectors}}}),
    )
    .await;

    // The coordinator asked for one collector; the reconciler made it; the coordinator reached it.
    let job = s.wait_phase("net", Phase::Succeeded).await;
    let params = LogParams { container: Some("di-container".into()), ..Default::default() };
    let log = s.pods.logs("net-coordinator", &params).await.unwrap_or_else(|e| format!("(no log: {e})"));
    assert!(
        log.contains(&format!("reached net-collector-1.{}:22270: net-collector-1", s.ns)),
        "coordinator said:\n{log}"
    );
    assert_eq!(job.spec.collector_replicas(), 2, "the sidecar's write is in the job");
    // Policy Running: the collectors that still ran are gone; the coordinator stays for its logs.
    s.wait_pods("net", &names("net", &["coordinator"])).await;
    s.wait_services("net", &[]).await;
}
