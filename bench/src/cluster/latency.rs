//! Time to running where production has its latency, on a control plane of its own: etcd's every
//! answer 2 ms late (about a cloud disk's fsync, which `--unsafe-no-fsync` otherwise leaves out)
//! and every client's API answers 0.5 ms late (a network hop; tokio's timer makes it about a
//! millisecond, and the report gives what the proxies measured). The orchestrator against the
//! limit at every size (see `limit`), and in the first invocation, at 500 collectors and more,
//! against an orchestrator creating a job's objects one at a time (`--creates-per-job=1`, as
//! before commit 8efa7b9), and where one job of 100's time goes on each side (`timeline`).

use std::time::Duration;

use di_e2e::cluster::TestCluster;
use di_e2e::delay::DelayProxy;
use di_e2e::nodes::{Binding, SimulatedNodes};

use super::Row;
use super::harness::{self, Bench};
use super::limit::{Limit, Pairs};

const ETCD: Duration = Duration::from_millis(2);
const API: Duration = Duration::from_micros(500);
/// Jobs this big are also measured against serial creates.
const SERIAL_FROM: usize = 500;

pub async fn measure(
    rows: &mut Vec<Row>,
    limit: &mut Limit,
    first: bool,
    sizes: &[(usize, usize, usize)],
) -> anyhow::Result<()> {
    let Some(plane) = harness::control_plane_with(harness::unscheduled(Some(ETCD))).await? else { return Ok(()) };
    let result = on(&plane, rows, limit, first, sizes).await;
    plane.stop().await;
    result
}

async fn on(
    plane: &di_e2e::controlplane::ControlPlane,
    rows: &mut Vec<Row>,
    limit: &mut Limit,
    first: bool,
    sizes: &[(usize, usize, usize)],
) -> anyhow::Result<()> {
    let server: std::net::SocketAddr = plane.server.trim_start_matches("https://").parse()?;
    let api = DelayProxy::start(server, API).await?;
    let kubeconfig = through(&plane.kubeconfig, &format!("https://{}", api.addr))?;
    let cluster = TestCluster { client: di_e2e::controlplane::admin_client(&kubeconfig).await?, kubeconfig };
    cluster.install_crds().await;
    let base_ns = cluster.namespace("latency-baseline").await;
    let _base_nodes = SimulatedNodes::start_with(cluster.client.clone(), &base_ns, Binding::Themselves);
    let (_b, window, _bn) = Bench::start(plane, &cluster, "latency-window", "-window", &base_ns, &[]).await?;
    window.time_to_running("warm", 1, 10).await?;
    window.empty(&window.jobs_ns).await?;
    window.baseline("bwarm", 1, 10, 16).await?;
    window.empty(&base_ns).await?;
    for &(m, n, runs) in sizes {
        let (best, swept) = window.sweep(&format!("lsw{m}x{n}"), m, n).await?;
        let (mut ours, mut base) = (vec![], vec![]);
        for run in 0..runs {
            // Which side goes first alternates, as in `running`.
            if run % 2 == 1 {
                base.push(window.baseline(&format!("lb{m}x{n}-{run}"), m, n, best).await?);
                window.empty(&base_ns).await?;
            }
            ours.push(window.until_running(&format!("lw{m}x{n}-{run}"), m, n).await?);
            window.empty(&window.jobs_ns).await?;
            if run % 2 == 0 {
                base.push(window.baseline(&format!("lb{m}x{n}-{run}"), m, n, best).await?);
                window.empty(&base_ns).await?;
            }
        }
        let pairs = Pairs::of(ours, base, best, swept);
        if first && m == 1 && n >= SERIAL_FROM {
            rows.push(serial_against(plane, &cluster, &base_ns, n, pairs.ours).await?);
        }
        limit.add(m, n, pairs);
    }
    if first {
        // With latency one job of 100 is the size furthest behind the limit (README).
        super::timeline::measure(&window, rows, "latency: ", "lt", 100).await?;
    }
    let etcd = plane.etcd_proxy.as_ref().map_or(Duration::ZERO, DelayProxy::added);
    rows.push(Row::plain(
        "latency: delay the proxies added, mean per answer".into(),
        format!("etcd {:.2} ms, API server {:.2} ms", ms(etcd), ms(api.added())),
    ));
    Ok(())
}

/// One job of `n` created one object at a time, by an orchestrator of its own, against the
/// default window's median (`many`).
async fn serial_against(
    plane: &di_e2e::controlplane::ControlPlane,
    cluster: &TestCluster,
    base_ns: &str,
    n: usize,
    many: Duration,
) -> anyhow::Result<Row> {
    let hint = format!("latency-serial{n}");
    let (_a, serial, _an) =
        Bench::start(plane, cluster, &hint, &format!("-serial{n}"), base_ns, &["--creates-per-job=1"]).await?;
    let one = serial.until_running(&format!("s{n}"), 1, n).await?;
    serial.settle().await?;
    Ok(Row {
        figure: format!("latency (etcd +2 ms, API +0.5 ms): time to running, 1 job x {n} collectors"),
        value: format!("{:.2} s (default window)", many.as_secs_f64()),
        baseline: format!("{:.2} s (one create at a time)", one.as_secs_f64()),
        ratio: Some(one.as_secs_f64() / many.as_secs_f64()),
        goal: "ratio >= 2".into(),
        met: Some(one.as_secs_f64() / many.as_secs_f64() >= 2.0),
    })
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
