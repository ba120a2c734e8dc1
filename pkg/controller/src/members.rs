//! What the caches hold of one job, for a pass: its own pods and Services, the names others
//! hold, the AggregatorConfig its learners need; and whether the cached job is the stored one.

use std::collections::BTreeMap;

use di_api::{AggregatorConfig, DIJob};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};

use crate::context::Context;
use crate::decision::World;
use crate::desired;
use crate::error::Error;

/// The AggregatorConfig the job's learners need, if they need one: `(found, missing name)`.
pub(crate) fn aggregator_config(ctx: &Context, job: &DIJob) -> (Option<AggregatorConfig>, Option<String>) {
    if !di_api::resources::needs_aggregator(job) || job.spec.learner_replicas() == 0 {
        return (None, None);
    }
    let (namespace, name) = desired::aggregator_config_ref(job, &ctx.settings);
    match ctx.configs.get(&ObjectRef::new(&name).within(&namespace)) {
        Some(config) => {
            let mut config = AggregatorConfig::clone(&config);
            di_api::defaults::default_aggregator_config(&mut config);
            (Some(config), None)
        }
        None => (None, Some(format!("{namespace}/{name}"))),
    }
}

/// What the caches hold of a job: its own pods and Services (restart marks not yet seen laid
/// over), and the names of those its label names but another UID controls.
#[derive(Default)]
pub(crate) struct Members {
    pub(crate) pods: Vec<Pod>,
    pub(crate) services: Vec<Service>,
    pub(crate) taken: BTreeMap<String, String>,
}

impl Members {
    /// The members as a pass sees them now, before its AggregatorConfig is looked up.
    pub(crate) fn world(&self) -> World<'_> {
        World {
            pods: self.pods.iter().collect(),
            services: self.services.iter().collect(),
            taken: self.taken.clone(),
            aggregator_config: None,
            missing_aggregator_config: None,
            queue: None,
            now: Timestamp::now(),
        }
    }
}

pub(crate) fn members(ctx: &Context, job: &DIJob) -> Members {
    let (namespace, name, uid) = (job.namespace().unwrap_or_default(), job.name_any(), job.uid().unwrap_or_default());
    let pods = ctx.pod_index.members(&ctx.pods, &namespace, &name, &uid);
    let services = ctx.service_index.members(&ctx.services, &namespace, &name, &uid);
    let predecessor = format!("held by an earlier job named {name}");
    let taken = pods.foreign.into_iter().chain(services.foreign).map(|n| (n, predecessor.clone())).collect();
    let mut services: Vec<Service> = services.owned.iter().map(|s| s.to_service()).collect();
    ctx.marks.overlay(&namespace, &mut services);
    Members { pods: pods.owned.iter().map(|p| p.to_pod()).collect(), services, taken }
}

/// Fails with `StaleJob` unless the cached job is the stored one (a quorum read).
pub(crate) async fn confirm_current(ctx: &Context, job: &DIJob) -> Result<(), Error> {
    let api: Api<DIJob> = Api::namespaced(ctx.client.clone(), &job.namespace().unwrap_or_default());
    let stored = api.get_metadata_opt(&job.name_any()).await.map_err(|source| Error::ReadJob { source })?;
    match stored {
        Some(stored) if stored.metadata.resource_version == job.metadata.resource_version => Ok(()),
        _ => Err(Error::StaleJob),
    }
}
