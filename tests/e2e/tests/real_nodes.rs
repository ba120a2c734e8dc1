//! What only real nodes show (`make e2e`, kind): a coordinator container that scales its own job
//! through the replica-endpoint sidecar at `KUBERNETES_SERVER_URL`, as DI-engine does, and then
//! reaches the new collector, on another node, by the `<pod>.<namespace>` name the endpoint handed
//! out, over the cluster's DNS, Service and pod network; its exit then finishes the job. And a port-forward to the
//! coordinator, which reaches the endpoint as the pod's own loopback does, reads it and changes
//! nothing. On simulated nodes nothing runs a container, so these scenarios do not apply there.

use di_api::Phase;
use di_api::contract::labels::{JOB_NAME, REPLICA_TYPE};
use di_api::contract::{COORDINATOR_ENDPOINT_PORT, REPLICAS_PORT};
use di_e2e::cluster::within;
use di_e2e::nodes::{REAL_IMAGE, WAIT_FOR_EXIT, real_nodes};
use di_e2e::ports::free_port;
use di_e2e::scenario::{Scenario, names};
use kube::api::LogParams;
use serde_json::json;

/// The coordinator's program: wait for the sidecar, ask it for one more collector (the job has one,
/// so the new one is `net-collector-1`) with DI-engine's request, then fetch the page the new
/// collector serves under the name the answer gave. Exits 0 only when the page names that
/// collector's own pod. (No `wget -T`: busybox 1.35's crashes.)
fn coordinator_script(ns: &str) -> String {
    let endpoint = "http://$KUBERNETES_SERVER_URL";
    let request = format!(
        r#"{{"namespace":"{ns}","coordinator":"net-coordinator","collectors":{{"replicas":1}},"learners":{{"replicas":0}}}}"#
    );
    format!(
        r#"trap 'exit 143' TERM
echo "endpoint: $KUBERNETES_SERVER_URL"
until wget -q -O /dev/null {endpoint}/healthz; do sleep 0.5; done
wget -q -O /tmp/answer --header 'Content-Type: application/json' --post-data '{request}' {endpoint}/v1alpha1/replicas || exit 2
cat /tmp/answer; echo
address=$(sed -n 's/.*"collectors":\["\([^"]*\)".*/\1/p' /tmp/answer)
[ -n "$address" ] || exit 3
for i in $(seq 120); do
  if wget -q -O /tmp/page "http://$address/"; then
    echo "reached $address: $(cat /tmp/page)"
    case "$(cat /tmp/page)" in "net-collector-1 on "*) exit 0;; esac
    exit 4
  fi
  sleep 0.5
done
exit 5"#
    )
}

/// A collector that serves its own hostname and its node's name on the collector port, then
/// waits to be told to end.
fn collector_script() -> String {
    format!(
        "mkdir -p /www && echo \"$(hostname) on $NODE\" > /www/index.html && httpd -p 22270 -h /www && {WAIT_FOR_EXIT}"
    )
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
    // The collectors are kept off the coordinator's node: what they say crosses nodes.
    let mut collector = container(collector_script());
    collector["env"] = json!([{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]);
    let apart = json!({"requiredDuringSchedulingIgnoredDuringExecution": [{
        "labelSelector": {"matchLabels": {JOB_NAME: "net", REPLICA_TYPE: "coordinator"}},
        "topologyKey": "kubernetes.io/hostname",
    }]});
    let collectors = json!({"containers": [collector], "affinity": {"podAntiAffinity": apart}});
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
    let reached = format!("reached net-collector-1.{}:22270: net-collector-1 on ", s.ns);
    let collector_node = log.lines().find_map(|l| l.strip_prefix(reached.as_str())).map(str::to_owned);
    let coordinator = s.pods.get("net-coordinator").await.unwrap();
    let coordinator_node = coordinator.spec.and_then(|s| s.node_name);
    assert!(
        collector_node.is_some() && collector_node != coordinator_node,
        "the collector answered from another node than the coordinator's ({coordinator_node:?}):\n{log}"
    );
    assert_eq!(job.spec.collector_replicas(), 2, "the sidecar's write is in the job");
    // Policy Running: the collectors that still ran are gone; the coordinator stays for its logs.
    s.wait_pods("net", &names("net", &["coordinator"])).await;
    s.wait_services("net", &[]).await;
}

/// `kubectl port-forward` reaches a pod's ports from the pod's own loopback, where the endpoint
/// used to trust every caller. Forwarded, the endpoint's network port reads and refuses writes,
/// and the coordinator's own address, on a loopback address the forward never dials, is not
/// reached at all: the job stays as it was.
#[tokio::test]
#[ignore = "kind tier: run with `make e2e`"]
async fn a_port_forward_to_the_coordinator_reads_its_endpoint_and_changes_nothing() {
    if !real_nodes() {
        di_e2e::cluster::not_applicable("a port-forward needs a kubelet and a container runtime (kind tier only)");
        return;
    }
    let s = Scenario::new("forward").await;
    let waiting =
        json!({"containers": [{"name": "di-container", "image": REAL_IMAGE, "command": ["sh", "-c", WAIT_FOR_EXIT]}]});
    s.submit(
        "fwd",
        1,
        0,
        json!({"coordinator": {"template": {"spec": waiting}}, "collector": {"template": {"spec": waiting}}}),
    )
    .await;
    s.wait_phase("fwd", Phase::Running).await;
    let (network, own) = (free_port().unwrap(), free_port().unwrap());
    let mut forward = tokio::process::Command::new("kubectl")
        .args(["port-forward", "-n", &s.ns, "pod/fwd-coordinator"])
        .arg(format!("{network}:{REPLICAS_PORT}"))
        .arg(format!("{own}:{COORDINATOR_ENDPOINT_PORT}"))
        .env("KUBECONFIG", &s.cluster.kubeconfig)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("kubectl port-forward");
    // kubectl says "Forwarding from 127.0.0.1:<port> -> <port>" once it listens on each port.
    let said = forward.stdout.take().expect("kubectl's output");
    let listening = async {
        let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(said));
        let mut waiting: Vec<String> =
            [network, own].iter().map(|p| format!("Forwarding from 127.0.0.1:{p} ")).collect();
        while !waiting.is_empty() {
            let line = lines.next_line().await.unwrap().expect("kubectl port-forward exited");
            waiting.retain(|w| !line.starts_with(w.as_str()));
        }
        lines
    };
    let _kept_open = within(std::time::Duration::from_secs(60), "the port-forward to listen", listening).await;
    let http = reqwest::Client::builder().timeout(std::time::Duration::from_secs(10)).build().unwrap();
    let health = http.get(format!("http://127.0.0.1:{network}/healthz")).send().await.unwrap();
    assert!(health.status().is_success(), "the endpoint answered {} through the port-forward", health.status());

    let ns = &s.ns;
    let list = format!("http://127.0.0.1:{network}/v1alpha1/replicas?namespace={ns}&coordinator=fwd-coordinator");
    let reply: serde_json::Value = http.get(&list).send().await.unwrap().json().await.unwrap();
    assert_eq!(reply["data"]["collectors"], json!([format!("fwd-collector-0.{ns}:22270")]), "{reply}");
    let scale = json!({"namespace": ns, "coordinator": "fwd-coordinator", "collectors": {"replicas": 5}});
    let refused = http
        .post(format!("http://127.0.0.1:{network}/v1alpha1/replicas"))
        .body(scale.to_string())
        .send()
        .await
        .unwrap();
    let status = refused.status().as_u16();
    let reply: serde_json::Value = refused.json().await.unwrap();
    assert_eq!((status, reply["success"].clone()), (403, json!(false)), "{reply}");
    // The coordinator's own address: the forward dials the pod's localhost, where nothing of the
    // endpoint listens, so the request gets no answer of the endpoint's.
    let own_answer =
        http.post(format!("http://127.0.0.1:{own}/v1alpha1/replicas")).body(scale.to_string()).send().await;
    assert!(own_answer.is_err(), "the coordinator's own address answered through a port-forward: {own_answer:?}");
    let job = s.jobs.get("fwd").await.unwrap();
    assert_eq!(job.spec.collector_replicas(), 1, "nothing written through the port-forward");
    forward.kill().await.ok();
}
