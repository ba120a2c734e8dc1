//! One fault's world: a namespace of its own on the shared control plane, simulated nodes for it,
//! live views of its jobs, pods and services, the pod history, and the checks every fault ends
//! with.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use di_api::DIJob;
use di_e2e::cluster::TestCluster;
use di_e2e::nodes::{Nodes, SimulatedNodes};
use di_e2e::orchestrator::LocalOrchestrator;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;

use crate::checks::{self, Expect, Verdict};
use crate::follow::{self, Follow, Ticks};
use crate::monitor::Monitor;
use crate::plain_http;
use crate::plane::Plane;

/// After every check holds, how long the world is watched further before it is judged: a wrong
/// action the orchestrator takes late (a stale pod created, a fresh one deleted) shows within it.
const OBSERVE: Duration = Duration::from_secs(3);

/// How often a slow wait for the checks to hold says what is still missing.
const PROGRESS: Duration = Duration::from_secs(30);

/// Jobs submitted at once, as that many users would.
const SUBMITTERS: usize = 16;

pub struct World {
    pub cluster: TestCluster,
    pub ns: String,
    pub jobs: Api<DIJob>,
    pub pods: Api<Pod>,
    pub services: Api<Service>,
    pub nodes: Nodes,
    /// Forced deletions recorded by nodes since replaced.
    forced_before: Vec<String>,
    pub monitor: Monitor,
    pub ticks: Ticks,
    pub job_view: Follow<DIJob>,
    pub pod_view: Follow<Pod>,
    pub service_view: Follow<Service>,
}

impl World {
    pub async fn new(plane: &Plane, hint: &str) -> anyhow::Result<World> {
        let cluster = plane.cluster().await?;
        Box::pin(cluster.install_crds()).await;
        let ns = Box::pin(cluster.namespace(&format!("chaos-{hint}"))).await;
        let client = cluster.client.clone();
        let ticks = follow::ticks();
        let (jobs, pods, services) =
            (Api::namespaced(client.clone(), &ns), Api::namespaced(client.clone(), &ns), Api::namespaced(client, &ns));
        Ok(World {
            nodes: Nodes::Simulated(SimulatedNodes::start(cluster.client.clone(), &ns)),
            forced_before: vec![],
            monitor: Monitor::start(pods.clone(), ticks.clone()),
            job_view: Follow::start(jobs.clone(), ticks.clone()),
            pod_view: Follow::start(pods.clone(), ticks.clone()),
            service_view: Follow::start(services.clone(), ticks.clone()),
            ticks,
            cluster,
            ns,
            jobs,
            pods,
            services,
        })
    }

    /// An orchestrator for this namespace (`instance` tells several apart).
    pub async fn orchestrator(&self, instance: &str, args: &[String]) -> LocalOrchestrator {
        Box::pin(LocalOrchestrator::start_with(&self.cluster, &self.ns, instance, args)).await
    }

    /// New simulated nodes in place of the old ones, whose watch ends at its first error (an API
    /// server or etcd restart): they take over from a fresh list. What the old ones recorded is
    /// kept.
    pub fn replace_nodes(&mut self) {
        self.forced_before.extend(self.nodes.force_deleted());
        self.nodes = Nodes::Simulated(SimulatedNodes::start(self.cluster.client.clone(), &self.ns));
    }

    /// Running pods the nodes saw removed by force, over every generation of nodes.
    pub fn force_deleted(&self) -> Vec<String> {
        let mut all = self.forced_before.clone();
        all.extend(self.nodes.force_deleted());
        all
    }

    pub async fn submit(&self, name: &str, collectors: i32, extra: serde_json::Value) -> anyhow::Result<DIJob> {
        create(self.jobs.clone(), name.to_owned(), collectors, extra).await
    }

    /// Submits jobs `<prefix>-0..count` of `collectors` each, several at a time.
    pub async fn submit_all(&self, prefix: &str, count: usize, collectors: i32) -> anyhow::Result<Vec<String>> {
        let names: Vec<String> = (0..count).map(|i| format!("{prefix}-{i}")).collect();
        let submits: Vec<_> =
            names.iter().map(|name| create(self.jobs.clone(), name.clone(), collectors, json!({}))).collect();
        futures::stream::iter(submits).buffer_unordered(SUBMITTERS).try_collect::<Vec<_>>().await?;
        Ok(names)
    }

    /// Waits at most `limit` until at least `count` pod UIDs have been seen; no error when not
    /// (the caller acts then anyway), but whether it happened.
    pub async fn until_created(&self, count: usize, limit: Duration) -> bool {
        follow::settle(&self.ticks, limit, || self.monitor.created() >= count).await
    }

    /// What the live views show, judged.
    fn judged(&self, expect: &[Expect]) -> Verdict {
        let (jobs, pods, services) = (self.job_view.state(), self.pod_view.state(), self.service_view.state());
        checks::judge(expect, &refs(&jobs), &refs(&pods), &refs(&services))
    }

    /// Waits at most `limit` for every job to be as expected, watches a little longer, and
    /// judges from fresh lists, adding what the pod history and the nodes saw. `created_once`:
    /// nothing in this fault should replace a pod, so no name may be created twice for a job.
    pub async fn verdict(&self, expect: &[Expect], limit: Duration, created_once: bool) -> anyhow::Result<Verdict> {
        let started = tokio::time::Instant::now();
        let mut settled = false;
        // In steps, saying what is still missing after each, for whoever watches a slow run.
        while !settled && started.elapsed() < limit {
            let step = PROGRESS.min(limit.saturating_sub(started.elapsed()));
            settled = follow::settle(&self.ticks, step, || self.judged(expect).lost.is_empty()).await;
            if !settled {
                let lost = self.judged(expect).lost;
                eprintln!("  after {:.0} s, still: {}", started.elapsed().as_secs_f64(), checks::some(&lost));
            }
        }
        let took = started.elapsed();
        tokio::time::sleep(OBSERVE).await;
        let all = ListParams::default();
        let jobs = self.jobs.list(&all).await?.items;
        let pods = self.pods.list(&all).await?.items;
        let services = self.services.list(&all).await?.items;
        let mut verdict = checks::judge(
            expect,
            &jobs.iter().collect::<Vec<_>>(),
            &pods.iter().collect::<Vec<_>>(),
            &services.iter().collect::<Vec<_>>(),
        );
        if settled {
            verdict.checks.insert(0, format!("settled {:.0} s after the fault", took.as_secs_f64()));
        } else {
            verdict.checks.insert(0, format!("NOT settled within {limit:?}"));
        }
        verdict.merge(self.alive_twice(created_once));
        Ok(verdict)
    }

    /// No replica name alive twice at once: from the pod history and from the nodes.
    fn alive_twice(&self, created_once: bool) -> Verdict {
        let mut verdict = Verdict::default();
        let (twice, forced, created_twice, gaps, uids) =
            self.monitor.read(|h| (h.twice.clone(), h.forced.clone(), h.created_twice(), h.gaps(), h.creations.len()));
        let by_nodes = self.force_deleted();
        let gaps = if gaps == 0 { String::new() } else { format!(", {gaps} watch gaps") };
        verdict.check(format!(
            "{} names alive twice ({uids} pod UIDs watched{gaps}; {} forced deletions by the watch, {} by the nodes)",
            twice.len() + forced.len() + by_nodes.len(),
            forced.len(),
            by_nodes.len()
        ));
        for entry in twice.into_iter().chain(forced) {
            verdict.lose(entry);
        }
        for pod in by_nodes {
            verdict.lose(format!("running pod {pod} was force-deleted (the nodes saw it)"));
        }
        if created_once {
            verdict.check(format!("{} pods created twice for one job", created_twice.len()));
            for entry in created_twice {
                verdict.lose(entry);
            }
        }
        verdict
    }
}

/// Owned arguments only: the futures of many submissions run at once.
async fn create(jobs: Api<DIJob>, name: String, collectors: i32, extra: serde_json::Value) -> anyhow::Result<DIJob> {
    let created = jobs.create(&PostParams::default(), &job(&name, collectors, extra)).await;
    created.with_context(|| format!("submitting job {name}"))
}

fn refs<K>(objects: &[Arc<K>]) -> Vec<&K> {
    objects.iter().map(Arc::as_ref).collect()
}

/// A job of `collectors` collectors; `extra` is merged into its spec.
pub fn job(name: &str, collectors: i32, extra: serde_json::Value) -> DIJob {
    let pod = json!({"containers": [{"name": "di-container", "image": "ding"}]});
    let mut job = json!({
        "apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJob",
        "metadata": {"name": name},
        "spec": {"coordinator": {"template": {"spec": pod}}, "collector": {"replicas": collectors, "template": {"spec": pod}}},
    });
    di_e2e::scenario::merge(&mut job["spec"], extra);
    serde_json::from_value(job).expect("a valid job")
}

/// Waits at most `limit` until the orchestrator whose probes are on `port` says it is ready (it
/// has no watch to offer: its probe is asked every 100 ms).
pub async fn until_ready(port: u16, limit: Duration) -> anyhow::Result<()> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let ready = async {
        loop {
            let answer = plain_http::call("GET", addr, "/readyz", None, Duration::from_secs(2)).await;
            if answer.is_ok_and(|a| a.status == 200) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(limit, ready).await.with_context(|| format!("the orchestrator was not ready within {limit:?}"))
}

/// Keeps an orchestrator's log beside the report, for looking into a row.
pub fn keep_log(file: &str, orchestrator: &LocalOrchestrator) {
    if let Ok(dir) = crate::out_dir() {
        let _ = std::fs::write(dir.join(format!("{file}.log")), orchestrator.log());
    }
}
