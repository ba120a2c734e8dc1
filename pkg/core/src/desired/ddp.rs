//! A logic learner with more than one GPU: an aggregator (from the AggregatorConfig's template) in
//! front of DDP learners (from the learner's template) that split its GPUs, at most
//! `max_gpus_per_pod` to a pod, and meet in one torch.distributed rendezvous.

use di_api::AggregatorConfig;
use di_api::contract::{DDP_GPU_PORT_PREFIX, DEFAULT_MASTER_PORT, Role, env, labels, names};
use di_api::resources::{main_container_index, replica_port};
use k8s_openapi::api::core::v1::PodTemplateSpec;

use super::{Builder, Replica, container_port, service_port, set_gpus};

impl Builder<'_> {
    /// The aggregator of logic learner `index` and the DDP learners that share its `gpus`.
    pub(super) fn aggregated_learner(
        &self,
        index: u32,
        gpus: i32,
        learner: &PodTemplateSpec,
        config: &AggregatorConfig,
    ) -> Vec<Replica> {
        let aggregator_template = &config.spec.aggregator.template;
        let aggregator_name = names::replica(&self.job, Role::Aggregator, index);
        let aggregator_url =
            names::url(&aggregator_name, &self.namespace, replica_port(aggregator_template, Role::Aggregator));
        let mut out = vec![self.replica(Role::Aggregator, Some(index), aggregator_name, aggregator_template, vec![])];

        let per_pod = self.settings.max_gpus_per_pod.max(1);
        let pods = (gpus + per_pod - 1) / per_pod;
        let master = names::ddp_learner(&self.job, index, 0);
        let mut start_rank = 0;
        for group in 0..pods {
            let local = per_pod.min(gpus - start_rank);
            let name = names::ddp_learner(&self.job, index, group as u32);
            let is_master = group == 0;
            let master_addr = if is_master { "localhost".to_string() } else { master.clone() };
            let extra = vec![
                (env::WORLD_SIZE, gpus.to_string()),
                (env::LOCAL_WORLD_SIZE, local.to_string()),
                (env::START_RANK, start_rank.to_string()),
                (env::MASTER_ADDR, master_addr),
                (env::MASTER_PORT, DEFAULT_MASTER_PORT.to_string()),
                (env::AGGREGATOR_URL, aggregator_url.clone()),
            ];
            let mut replica = self.replica(Role::DdpLearner, Some(index), name, learner, extra);
            set_gpus(&mut replica.pod, local);
            let kind = if is_master { labels::DDP_LEARNER_MASTER } else { labels::DDP_LEARNER_WORKER };
            for meta in [&mut replica.pod.metadata, &mut replica.service.metadata] {
                meta.labels.get_or_insert_default().insert(labels::DDP_LEARNER_TYPE.into(), kind.into());
            }
            // Process k of the pod listens on LEARNER_PORT + k; the master also serves the rendezvous.
            let port = replica_port(learner, Role::DdpLearner);
            let mut extra_ports: Vec<(String, i32)> =
                (1..local).map(|k| (format!("{DDP_GPU_PORT_PREFIX}-{k}"), port + k)).collect();
            if is_master {
                extra_ports.push(("master-port".into(), DEFAULT_MASTER_PORT));
            }
            add_ports(&mut replica, &extra_ports);
            out.push(replica);
            start_rank += local;
        }
        out
    }
}

/// Adds ports to the replica's main container and to its Service alike.
fn add_ports(replica: &mut Replica, ports: &[(String, i32)]) {
    if let Some(spec) = replica.pod.spec.as_mut()
        && let Some(main) = main_container_index(spec)
    {
        let list = spec.containers[main].ports.get_or_insert_default();
        list.extend(ports.iter().map(|(n, p)| container_port(n, *p)));
    }
    if let Some(list) = replica.service.spec.as_mut().and_then(|s| s.ports.as_mut()) {
        list.extend(ports.iter().map(|(n, p)| service_port(n, *p)));
    }
}
