//! Jobs in a Kueue queue admitted at once, against the same jobs in no queue, on a control plane
//! of their own with Kueue v0.19.2 beside it (`di_e2e::kueue`) and one orchestrator started with
//! `--queues=kueue`. The ratio is what a queue costs a job that has room: its Workload made,
//! Kueue's admission, and the wait for it, before the first pod. Both sides' jobs ask for the
//! same CPU, and the queue's quota has room for every run's, so no job waits for another.

use di_api::DIJob;
use di_api::contract::kueue::QUEUE_NAME;
use di_e2e::binaries::{self, Unavailable};
use di_e2e::cluster::TestCluster;
use di_e2e::kueue;
use di_e2e::nodes::{Binding, SimulatedNodes};
use kube::api::{DynamicObject, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use super::Row;
use super::harness::{self, Bench, median};
use super::limit::paired_median;

/// Jobs, collectors per job and runs of each size.
const SIZES: [(usize, usize, usize); 3] = [(1, 10, 5), (1, 100, 3), (10, 10, 3)];

/// The LocalQueue the queued side's jobs wait in.
const QUEUE: &str = "bench";

pub async fn measure(rows: &mut Vec<Row>) -> anyhow::Result<()> {
    on_kueue("queue", ("bench-queues", "-queues"), async |bench: &Bench, client: &Client| {
        queue_in(client, &bench.jobs_ns).await?;
        on(bench, rows).await
    })
    .await
}

/// Runs `body` on a control plane of its own with Kueue v0.19.2 beside it and one orchestrator
/// started with `--queues=kueue` (`hint` and `instance` as [`Bench::start`]'s), then stops them.
/// Without Kueue it says why the `what` benchmark is skipped, and measures nothing.
pub(super) async fn on_kueue(
    what: &str,
    (hint, instance): (&str, &str),
    body: impl AsyncFnOnce(&Bench, &Client) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let root = binaries::repo_root();
    let (binary, module) = match kueue::obtain(&root)? {
        Ok(found) => found,
        Err(Unavailable(why)) => {
            eprintln!("SKIPPED: the {what} benchmark needs Kueue: {why}");
            return Ok(());
        }
    };
    let Some(mut plane) = harness::control_plane().await? else { return Ok(()) };
    let result = async {
        let client = plane.client().await?;
        let cluster = TestCluster { client: client.clone(), kubeconfig: plane.kubeconfig.clone() };
        cluster.install_crds().await;
        kueue::start(&mut plane, &cluster, &binary, &module).await?;
        let base_ns = cluster.namespace(&format!("{hint}-unused")).await;
        let _base_nodes = SimulatedNodes::start_with(client.clone(), &base_ns, Binding::Themselves);
        let (_o, bench, _n) = Bench::start(&plane, &cluster, hint, instance, &base_ns, &["--queues=kueue"]).await?;
        body(&bench, &client).await
    }
    .await;
    plane.stop().await;
    result
}

async fn on(bench: &Bench, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    // Each side's first job warms the caches of the kinds it makes (Kueue's Workloads too).
    bench.submit_shaped("qwarm", 1, 10, in_queue(QUEUE)).await?;
    bench.submit_shaped("uwarm", 1, 10, requested).await?;
    for (m, n, runs) in SIZES {
        let (mut ours, mut free) = (vec![], vec![]);
        for run in 0..runs {
            // Which side goes first alternates, as in `running`.
            if run % 2 == 1 {
                free.push(bench.submit_shaped(&format!("u{m}x{n}-{run}"), m, n, requested).await?.took());
            }
            ours.push(bench.submit_shaped(&format!("q{m}x{n}-{run}"), m, n, in_queue(QUEUE)).await?.took());
            if run % 2 == 0 {
                free.push(bench.submit_shaped(&format!("u{m}x{n}-{run}"), m, n, requested).await?.took());
            }
            bench.settle().await?;
        }
        let ratio = paired_median(&ours, &free);
        rows.push(Row {
            figure: format!(
                "time to running, a job in a Kueue queue admitted at once, {m} job(s) x {n} collectors, paired median \
                 of {runs} runs"
            ),
            value: format!("{:.3} s", median(&mut ours).as_secs_f64()),
            baseline: format!("{:.3} s (the same jobs in no queue)", median(&mut free).as_secs_f64()),
            ratio: Some(ratio),
            goal: "-".into(),
            met: None,
        });
    }
    Ok(())
}

/// CPU every pod asks for, which Kueue counts against the queue's quota.
pub(super) fn requested(job: &mut DIJob) {
    let resources = json!({"requests": {"cpu": "10m", "memory": "16Mi"}});
    let templates =
        [job.spec.coordinator.as_mut().map(|c| &mut c.template), job.spec.collector.as_mut().map(|c| &mut c.template)];
    for template in templates.into_iter().flatten() {
        for container in template.spec.iter_mut().flat_map(|s| s.containers.iter_mut()) {
            container.resources = serde_json::from_value(resources.clone()).ok();
        }
    }
}

/// The job shaped for LocalQueue `queue`, its pods asking for the CPU Kueue counts.
pub(super) fn in_queue(queue: &'static str) -> impl Fn(&mut DIJob) {
    move |job| {
        requested(job);
        job.labels_mut().insert(QUEUE_NAME.into(), queue.into());
    }
}

/// A flavor, a ClusterQueue with room for every run's jobs, and the LocalQueue `QUEUE` in `ns`.
async fn queue_in(client: &Client, ns: &str) -> anyhow::Result<()> {
    let quota = |name: &str, amount: &str| json!({"name": name, "nominalQuota": amount});
    let objects: [(&str, &str, Option<&str>, Value); 3] = [
        ("ResourceFlavor", "resourceflavors", None, json!({"metadata": {"name": "bench"}, "spec": {}})),
        (
            "ClusterQueue",
            "clusterqueues",
            None,
            json!({"metadata": {"name": "bench"}, "spec": {
                "namespaceSelector": {},
                "resourceGroups": [{"coveredResources": ["cpu", "memory"],
                    "flavors": [{"name": "bench", "resources": [quota("cpu", "100000"), quota("memory", "100000Gi")]}]}],
            }}),
        ),
        (
            "LocalQueue",
            "localqueues",
            Some(ns),
            json!({"metadata": {"name": QUEUE}, "spec": {"clusterQueue": "bench"}}),
        ),
    ];
    for (kind, plural, namespace, mut object) in objects {
        let resource = kueue::resource(kind, plural);
        object["apiVersion"] = json!(resource.api_version);
        object["kind"] = json!(kind);
        let api: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        api.create(&PostParams::default(), &serde_json::from_value(object)?).await?;
    }
    // Kueue admits from the ClusterQueue once it has seen its flavor: the warm runs wait for it.
    Ok(())
}
