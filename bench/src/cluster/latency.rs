//! Time to running where production has its latency, on a control plane of its own: etcd's every
//! answer 2 ms late (about a cloud disk's fsync, which `--unsafe-no-fsync` otherwise leaves out)
//! and every client's API answers 0.5 ms late (a network hop; tokio's timer makes it about a
//! millisecond, and the report gives what the proxies measured). Two orchestrators side by side,
//! one creating a job's objects one at a time (`--creates-per-job=1`, as before commit 8efa7b9)
//! and one with the default window, each run of one next to a run of the other.

use std::time::Duration;

use di_e2e::cluster::TestCluster;
use di_e2e::controlplane::admin_client;
use di_e2e::delay::DelayProxy;
use di_e2e::nodes::SimulatedNodes;

use super::Row;
use super::harness::{self, Bench, median};

const ETCD: Duration = Duration::from_millis(2);
const API: Duration = Duration::from_micros(500);
/// Collectors of the one job, and runs a side.
const SIZES: [(usize, usize); 3] = [(100, 3), (500, 3), (1000, 1)];

pub async fn measure(rows: &mut Vec<Row>) -> anyhow::Result<()> {
    let Some(plane) = harness::control_plane_with(Some(ETCD)).await? else { return Ok(()) };
    let result = on(&plane, rows).await;
    plane.stop().await;
    result
}

async fn on(plane: &di_e2e::controlplane::ControlPlane, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    let server: std::net::SocketAddr = plane.server.trim_start_matches("https://").parse()?;
    let api = DelayProxy::start(server, API).await?;
    let kubeconfig = through(&plane.kubeconfig, &format!("https://{}", api.addr))?;
    let cluster = TestCluster { client: admin_client(&kubeconfig).await?, kubeconfig };
    cluster.install_crds().await;
    let base_ns = cluster.namespace("latency-baseline").await;
    let _base_nodes = SimulatedNodes::start(cluster.client.clone(), &base_ns);
    let serial_flags = ["--creates-per-job=1"];
    let (_a, serial, _an) = Bench::start(plane, &cluster, "latency-serial", "-serial", &base_ns, &serial_flags).await?;
    let (_b, window, _bn) = Bench::start(plane, &cluster, "latency-window", "-window", &base_ns, &[]).await?;
    serial.time_to_running("warm", 1, 10).await?;
    window.time_to_running("warm", 1, 10).await?;
    for (n, runs) in SIZES {
        let (mut one, mut many) = (vec![], vec![]);
        for run in 0..runs {
            serial.settle().await?;
            one.push(serial.until_running(&format!("s{n}-{run}"), 1, n).await?);
            window.settle().await?;
            many.push(window.until_running(&format!("w{n}-{run}"), 1, n).await?);
        }
        let (one, many) = (median(&mut one), median(&mut many));
        let runs_note = if runs > 1 { format!(", median of {runs}") } else { String::new() };
        rows.push(Row {
            figure: format!("latency (etcd +2 ms, API +0.5 ms): time to running, 1 job x {n} collectors{runs_note}"),
            value: format!("{:.2} s (default window)", many.as_secs_f64()),
            baseline: format!("{:.2} s (one create at a time)", one.as_secs_f64()),
            ratio: Some(one.as_secs_f64() / many.as_secs_f64()),
            goal: "-".into(),
            met: None,
        });
    }
    let etcd = plane.etcd_proxy.as_ref().map_or(Duration::ZERO, DelayProxy::added);
    rows.push(Row::plain(
        "latency: delay the proxies added, mean per answer".into(),
        format!("etcd {:.2} ms, API server {:.2} ms", ms(etcd), ms(api.added())),
    ));
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// A copy of `kubeconfig` whose cluster is reached at `server`: the API server's certificate
/// names 127.0.0.1, which the proxy's address is too.
fn through(kubeconfig: &std::path::Path, server: &str) -> anyhow::Result<std::path::PathBuf> {
    let mut config = kube::config::Kubeconfig::read_from(kubeconfig)?;
    for named in &mut config.clusters {
        if let Some(cluster) = named.cluster.as_mut() {
            cluster.server = Some(server.to_owned());
        }
    }
    let path = kubeconfig.with_file_name("latency.kubeconfig");
    // JSON is YAML: kube reads it back.
    std::fs::write(&path, serde_json::to_string(&config)?)?;
    Ok(path)
}
