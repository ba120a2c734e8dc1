//! Memory and CPU of an orchestrator of its own: idle, with 1,000 jobs and their 11,000 pods,
//! then while and after 100,000 more pods that are not the orchestrator's are created.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;
use tokio::sync::Semaphore;

use super::Row;
use super::harness::Bench;
use super::process::{cpu_seconds, rss_mib};

pub async fn measure(bench: &Bench, idle_rss: f64, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    const WINDOW: Duration = Duration::from_secs(10);
    let idle_cpu = bench.cpu_percent(WINDOW).await?;
    rows.push(Row::plain("orchestrator CPU, no jobs".into(), format!("{idle_cpu:.2} % of a core")));
    let (m, n) = (1000, 10);
    let took = bench.time_to_running("s", m, n).await?;
    let managed = count_pods(bench, &bench.jobs_ns).await?;
    rows.push(Row::plain(
        format!("time to running, {m} jobs x {n} collectors"),
        format!("{:.1} s", took.as_secs_f64()),
    ));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let scale_rss = rss_mib(bench.pid)?;
    rows.push(Row {
        figure: format!("orchestrator RSS, {managed} managed pods"),
        value: format!("{scale_rss:.1} MiB"),
        baseline: format!("{idle_rss:.1} MiB idle"),
        ratio: Some(scale_rss / idle_rss),
        goal: "< 64 MiB at 10,000 pods".into(),
        met: Some(scale_rss < 64.0),
    });
    let settled_cpu = bench.cpu_percent(WINDOW).await?;
    rows.push(Row::plain(
        format!("orchestrator CPU, {managed} managed pods, settled"),
        format!("{settled_cpu:.2} % of a core"),
    ));

    let unrelated = 100_000;
    let before = cpu_seconds(bench.pid)?;
    let start = Instant::now();
    unrelated_pods(bench, unrelated).await?;
    let busy = 100.0 * (cpu_seconds(bench.pid)? - before) / start.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let among = rss_mib(bench.pid)?;
    rows.push(Row {
        figure: format!("orchestrator RSS, plus {unrelated} unrelated pods"),
        value: format!("{among:.1} MiB"),
        baseline: format!("{scale_rss:.1} MiB before them"),
        ratio: Some(among / scale_rss),
        goal: "flat (ratio <= 1.05)".into(),
        met: Some(among / scale_rss <= 1.05),
    });
    rows.push(Row {
        figure: format!("orchestrator CPU while {unrelated} unrelated pods are created"),
        value: format!("{busy:.2} % of a core"),
        baseline: format!("{settled_cpu:.2} % settled"),
        ratio: None,
        goal: "-".into(),
        met: None,
    });
    Ok(())
}

async fn count_pods(bench: &Bench, ns: &str) -> anyhow::Result<usize> {
    let pods: Api<Pod> = Api::namespaced(bench.client.clone(), ns);
    Ok(pods.list_metadata(&ListParams::default()).await?.items.len())
}

/// Pods the orchestrator has no business with, in a namespace of their own.
async fn unrelated_pods(bench: &Bench, count: usize) -> anyhow::Result<()> {
    let ns = "bench-unrelated";
    let namespaces: Api<Namespace> = Api::all(bench.client.clone());
    namespaces.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": ns}}))?).await?;
    // Its default ServiceAccount must exist before pods are admitted.
    let accounts: Api<ServiceAccount> = Api::namespaced(bench.client.clone(), ns);
    while accounts.get_opt("default").await?.is_none() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let pods: Api<Pod> = Api::namespaced(bench.client.clone(), ns);
    let permits = Arc::new(Semaphore::new(64));
    let mut tasks = vec![];
    for i in 0..count {
        let (pods, permits) = (pods.clone(), permits.clone());
        tasks.push(tokio::spawn(async move {
            let _permit = permits.acquire_owned().await?;
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": format!("unrelated-{i}"), "labels": {"app": "unrelated"}},
                "spec": {"containers": [{"name": "c", "image": "unrelated"}]},
            }))?;
            pods.create(&PostParams::default(), &pod).await?;
            Ok::<_, anyhow::Error>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}
