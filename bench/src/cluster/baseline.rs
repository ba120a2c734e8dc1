//! The baseline of time to running: the physical limit, a job's pods and services and nothing
//! more, created by a plain client with the orchestrator's identity (so the same authorization
//! checks), `CONCURRENCY` jobs at a time, each job's objects in the reconciler's order.

use std::sync::Arc;
use std::time::{Duration, Instant};

use di_controller::desired::identity::{self, Identity};
use di_controller::desired::{self, Settings};
use k8s_openapi::api::core::v1::{Pod, Service, ServiceAccount};
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use tokio::sync::Semaphore;

use super::harness::{Bench, Marks, RUN_LABEL, job, pod_running, took, watch_until};

/// Jobs reconciled at once by the orchestrator (its default), and so the baseline's concurrency.
const CONCURRENCY: usize = 16;

impl Bench {
    /// The objects of `m` jobs of `n` collectors, created plainly; the time until every pod runs.
    pub async fn baseline(&self, prefix: &str, m: usize, n: usize) -> anyhow::Result<Duration> {
        Ok(self.baseline_marks(prefix, m, n).await?.took())
    }

    /// As [`Bench::baseline`]; when each step was.
    pub async fn baseline_marks(&self, prefix: &str, m: usize, n: usize) -> anyhow::Result<Marks> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.base_ns);
        let total = m * (n + 1);
        let running = watch_until(pods.clone(), &format!("{RUN_LABEL}={prefix}"), move |all: &[Arc<Pod>]| {
            all.iter().filter(|p| pod_running(p)).count() == total
        })
        .await?;
        // The coordinators' ServiceAccount, which exists once per namespace (the orchestrator makes
        // it with the namespace's first job): made before the clock starts.
        let settings = Settings { identity: Identity::Policy, ..Settings::default() };
        let (account, _) = identity::namespace_identity(&self.base_ns);
        let accounts = Api::<ServiceAccount>::namespaced(self.base_client.clone(), &self.base_ns);
        if let Err(e) = accounts.create(&PostParams::default(), &account).await
            && !matches!(&e, kube::Error::Api(s) if s.code == 409)
        {
            return Err(e.into());
        }
        let permits = Arc::new(Semaphore::new(CONCURRENCY));
        let start = Instant::now();
        let mut tasks = vec![];
        for i in 0..m {
            let mut job = job(&format!("{prefix}-{i}"), n);
            job.metadata.namespace = Some(self.base_ns.clone());
            job.metadata.uid = Some(format!("baseline-{prefix}-{i}"));
            di_api::defaults::default_dijob(&mut job);
            let replicas = desired::replicas(&job, None, &settings)?;
            let client = self.base_client.clone();
            let ns = self.base_ns.clone();
            let (services, permits) = (Api::<Service>::namespaced(client.clone(), &ns), permits.clone());
            let pods = Api::<Pod>::namespaced(client.clone(), &ns);
            let prefix = prefix.to_owned();
            tasks.push(tokio::spawn(async move {
                let _permit = permits.acquire_owned().await?;
                let post = PostParams::default();
                // In the reconciler's order: each replica's Service, then its pod.
                for mut r in replicas {
                    // No owner: the job does not exist, and garbage collection must not interfere.
                    r.service.metadata.owner_references = None;
                    r.pod.metadata.owner_references = None;
                    r.pod.labels_mut().insert(RUN_LABEL.into(), prefix.clone());
                    services.create(&post, &r.service).await?;
                    pods.create(&post, &r.pod).await?;
                }
                Ok::<_, anyhow::Error>(())
            }));
        }
        for t in tasks {
            t.await??;
        }
        let posted = Instant::now();
        let took =
            took(running, start, Duration::from_secs(600), &format!("{prefix}: every baseline pod running")).await?;
        Ok(Marks { start, posted, done: start + took })
    }
}
