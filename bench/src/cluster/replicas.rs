//! The replica endpoint: `POST /replicas` for 1 and 10 more collectors, from the request to the
//! answer with their URLs, against the reconciler's own time to create the same pods when the
//! job's spec is changed directly (medians of a few runs); then its memory while the coordinator
//! scales the job to 1,000 collectors, 100 at a time, and lists them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use di_api::DIJob;
use di_api::contract::{labels, names};
use di_controller::desired::MEMORY_LIMIT_MIB;
use di_e2e::cluster::TestCluster;
use di_e2e::orchestrator::Sidecar;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::Row;
use super::harness::{Bench, median, took, watch_until};
use super::process::{peak_rss_mib, rss_mib};

pub async fn measure(bench: &Bench, cluster: &TestCluster, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    const RUNS: usize = 3;
    let (job, ns) = ("scaler", bench.jobs_ns.clone());
    bench.time_to_running(job, 1, 1).await?;
    let job = format!("{job}-0");
    let sidecar = Sidecar::start(cluster, &ns, &job).await;
    let url = format!("{}/v1alpha1/replicas", sidecar.url);
    let http = reqwest::Client::new();
    for _ in 0..100 {
        if http.get(format!("{}/healthz", sidecar.url)).send().await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let jobs: Api<DIJob> = Api::namespaced(bench.client.clone(), &ns);
    let mut collectors = 1;
    for add in [1, 10] {
        let (mut endpoint, mut reconciler) = (vec![], vec![]);
        for _ in 0..RUNS {
            settle(&jobs, &job, collectors).await?;
            let start = Instant::now();
            let reply = add_collectors(&http, &url, &ns, &job, add).await?;
            endpoint.push(start.elapsed());
            let urls = reply["data"]["collectors"].as_array().map_or(0, Vec::len);
            if reply["success"] != true || urls != add {
                bail!("the replica endpoint answered {reply}\n{}", sidecar.log());
            }
            collectors += add;

            settle(&jobs, &job, collectors).await?;
            let pods: Api<Pod> = Api::namespaced(bench.client.clone(), &ns);
            let want = collectors + add + 1;
            let created = watch_until(pods, &format!("{}={job}", labels::JOB_NAME), move |all: &[Arc<Pod>]| {
                all.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).count() == want
            })
            .await?;
            let start = Instant::now();
            let scale = json!({"spec": {"collector": {"replicas": collectors + add}}});
            jobs.patch(&job, &PatchParams::default(), &Patch::Merge(&scale)).await?;
            reconciler.push(took(created, start, Duration::from_secs(60), "scaling by the spec").await?);
            collectors += add;
        }
        let (e, r) = (median(&mut endpoint), median(&mut reconciler));
        let ratio = e.as_secs_f64() / r.as_secs_f64();
        rows.push(Row {
            figure: format!("replica endpoint, +{add} collector(s): request to answer with URLs"),
            value: format!("{:.0} ms", e.as_secs_f64() * 1000.0),
            baseline: format!("{:.0} ms (spec changed directly, until the pods exist)", r.as_secs_f64() * 1000.0),
            ratio: Some(ratio),
            goal: "-".into(),
            met: None,
        });
    }
    rows.push(scale_to(bench, &sidecar, &http, &url, &job, collectors, BIG).await?);
    Ok(())
}

/// Asks the endpoint at `url` for `add` more collectors of `job`, as its coordinator; the answer.
async fn add_collectors(
    http: &reqwest::Client,
    url: &str,
    ns: &str,
    job: &str,
    add: usize,
) -> anyhow::Result<serde_json::Value> {
    let body = json!({"namespace": ns, "coordinator": names::coordinator(job), "collectors": {"replicas": add}});
    Ok(http.post(url).json(&body).send().await?.json().await?)
}

/// Collectors the coordinator scales its job to, for the endpoint's memory.
const BIG: usize = 1000;

/// Scales the job from `collectors` to `target` through the endpoint, 100 at a time, then lists
/// them; the endpoint's peak RSS meanwhile against its pod's memory limit.
async fn scale_to(
    bench: &Bench,
    sidecar: &Sidecar,
    http: &reqwest::Client,
    url: &str,
    job: &str,
    collectors: usize,
    target: usize,
) -> anyhow::Result<Row> {
    let ns = &bench.jobs_ns;
    let pid = sidecar.pid().context("the endpoint's pid")?;
    let before = rss_mib(pid)?;
    let mut at = collectors;
    while at < target {
        let add = (target - at).min(100);
        let reply = add_collectors(http, url, ns, job, add).await?;
        if reply["success"] != true {
            bail!("the replica endpoint answered {reply}\n{}", sidecar.log());
        }
        at += add;
    }
    let coordinator = names::coordinator(job);
    let listed: serde_json::Value = http
        .get(url)
        .query(&[("namespace", ns.as_str()), ("coordinator", coordinator.as_str())])
        .send()
        .await?
        .json()
        .await?;
    let urls = listed["data"]["collectors"].as_array().map_or(0, Vec::len);
    if urls != target {
        bail!("the endpoint listed {urls} collectors of {target}: {listed}");
    }
    let peak = peak_rss_mib(pid)?;
    let limit = f64::from(MEMORY_LIMIT_MIB);
    Ok(Row {
        figure: format!("replica endpoint's peak RSS, its job scaled to {target} collectors and listed"),
        value: format!("{peak:.1} MiB ({before:.1} MiB before)"),
        baseline: format!("{limit} MiB (its container's memory limit)"),
        ratio: Some(peak / limit),
        goal: "well within: ratio <= 0.5".into(),
        met: Some(peak / limit <= 0.5),
    })
}

/// Waits until the job runs its `collectors` and its status says so, then a little longer,
/// so a measurement does not start in the wake of the one before.
async fn settle(jobs: &Api<DIJob>, job: &str, collectors: usize) -> anyhow::Result<()> {
    let want = format!("{collectors}/{collectors}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while jobs.get(job).await?.status.and_then(|s| s.collectors).as_deref() != Some(want.as_str()) {
        if Instant::now() > deadline {
            bail!("{job} did not settle at {want} collectors");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    Ok(())
}
