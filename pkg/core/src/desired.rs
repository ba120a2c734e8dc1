//! Desired state: the pods, services and RBAC a DIJob asks for, as a pure function of the job
//! (defaulted), its AggregatorConfig and the orchestrator's settings. Names are deterministic, so
//! building twice gives the same objects and creating them twice is harmless.
//!
//! Here: which replicas a job has, and any replica built from its template under the pod
//! contract. What only some replicas have lives next door: the coordinator's replica-endpoint
//! sidecar (`sidecar`), who that sidecar is to the API server (`identity`: the namespace's shared
//! account held by an admission policy, or the job's own ServiceAccount, Role and RoleBinding,
//! `rbac`), and a
//! multi-GPU learner's aggregator and DDP learners (`ddp`); a task job's pods and Service
//! (`tasks`); and the PodGroups of a job's gangs, and how its pods join them (`gang`).

mod ddp;
pub mod gang;
pub mod identity;
mod rbac;
mod sidecar;
mod tasks;

use std::collections::BTreeMap;

use di_api::contract::{GPU_RESOURCE, GROUP, OWNER_VERSION, PORT_NAME, Role, env, labels, names};
use di_api::resources::{di_port, learner_gpus, main_container_index, replica_port};
use di_api::{AggregatorConfig, DIJob};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EnvVar, Pod, PodSpec, PodTemplateSpec, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};

// The rule is di-api's, shared with the replica endpoint; re-exported for this crate's callers.
use di_api::resources::needs_aggregator;
pub use rbac::{Rbac, rbac};
pub use sidecar::{MEMORY_LIMIT_MIB, SIDECAR_USER};
pub use tasks::{TaskObjects, TaskPod, task_objects};

/// How this orchestrator builds pods; the same for every job.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Image of the replica endpoint sidecar: the orchestrator's own image.
    pub replicas_image: String,
    /// GPUs one DDP learner pod may hold; a learner asking for more is split across pods.
    pub max_gpus_per_pod: i32,
    /// AggregatorConfig (`namespace/name`) for jobs that name none.
    pub default_aggregator_config: String,
    /// DNS domain of the cluster, in task pods' FQDNs.
    pub cluster_domain: String,
    /// Who replica endpoints are to the API server (chosen at start-up).
    pub identity: identity::Identity,
    /// The version controller references name a DIJob under: the group's preferred version as
    /// this API server's discovery says (read at start-up, see [`OWNER_VERSION`]).
    pub owner_version: String,
    /// The gang scheduler jobs' gangs are made for (chosen at start-up, see `crate::gangs`).
    pub gang: gang::Backend,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            replicas_image: di_api::contract::IMAGE.into(),
            max_gpus_per_pod: 8,
            default_aggregator_config: "di-system/aggregator-config".into(),
            cluster_domain: di_api::tasks::DEFAULT_CLUSTER_DOMAIN.into(),
            identity: identity::Identity::default(),
            owner_version: OWNER_VERSION.into(),
            gang: gang::Backend::None,
        }
    }
}

/// Why a job's objects cannot be built. The job is marked with it, never retried blindly.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    #[error("the job has no coordinator")]
    NoCoordinator,
    #[error("the job has no UID yet")]
    NoUid,
    #[error("the {0} template's GPU count {1:?} is not a whole number")]
    FractionalGpus(Role, String),
}

/// One pod of the job with its headless Service.
#[derive(Clone, Debug, PartialEq)]
pub struct Replica {
    pub role: Role,
    /// Index of a collector, logic learner or aggregator (a DDP learner's logic learner).
    pub index: Option<u32>,
    pub pod: Pod,
    pub service: Service,
}

impl Replica {
    pub fn name(&self) -> String {
        self.pod.name_any()
    }
}

/// Which AggregatorConfig a job's multi-GPU learners use, as `(namespace, name)`.
pub fn aggregator_config_ref(job: &DIJob, settings: &Settings) -> (String, String) {
    let reference = job.spec.learner.as_ref().and_then(|l| l.aggregator_config.clone());
    let reference = reference.unwrap_or_else(|| settings.default_aggregator_config.clone());
    match reference.split_once('/') {
        Some((ns, name)) => (ns.to_owned(), name.to_owned()),
        None => (job.namespace().unwrap_or_default(), reference),
    }
}

/// Everything the job should have running right now, coordinator first, then by role and index.
/// `aggregator` is needed only when [`needs_aggregator`]; without it no learner is built.
pub fn replicas(
    job: &DIJob,
    aggregator: Option<&AggregatorConfig>,
    settings: &Settings,
) -> Result<Vec<Replica>, BuildError> {
    Ok(wanted(job, aggregator, settings, |_| true)?.into_iter().filter_map(|w| w.built).collect())
}

/// A replica the job should have: who it is, and its objects where they were asked for.
#[derive(Clone, Debug, PartialEq)]
pub struct Wanted {
    pub role: Role,
    /// As [`Replica::index`].
    pub index: Option<u32>,
    pub name: String,
    pub built: Option<Replica>,
}

/// Every replica the job should have, in [`replicas`]' order, with its pod and Service built only
/// where `build` says so of its name. A pass over a job of a thousand replicas needs the objects
/// of the few it creates, and building the rest again each pass cost most of its CPU.
pub fn wanted(
    job: &DIJob,
    aggregator: Option<&AggregatorConfig>,
    settings: &Settings,
    build: impl Fn(&str) -> bool,
) -> Result<Vec<Wanted>, BuildError> {
    let builder = Builder::new(job, settings)?;
    // A collector or a single-GPU learner is built only where asked for.
    let lazily = |role, index, name: String, built: &dyn Fn(String) -> Replica| {
        let built = build(&name).then(|| built(name.clone()));
        Wanted { role, index, name, built }
    };
    // The coordinator (one pod) and a multi-GPU learner's few pods are built whole, then kept
    // where asked for.
    let mut out = vec![Wanted::kept(builder.coordinator()?, &build)];
    if let Some(collector) = &job.spec.collector {
        for i in 0..job.collector_slots().max(0) as u32 {
            let name = names::replica(&builder.job, Role::Collector, i);
            let make = |name| builder.replica(Role::Collector, Some(i), name, &collector.template, vec![]);
            out.push(lazily(Role::Collector, Some(i), name, &make));
        }
    }
    if let Some(learner) = &job.spec.learner {
        let gpus = learner_gpus(job).map_err(|q| BuildError::FractionalGpus(Role::Learner, q))?;
        let aggregated = needs_aggregator(job);
        for i in 0..job.spec.learner_replicas().max(0) as u32 {
            if aggregated {
                if let Some(config) = aggregator {
                    let group = builder.aggregated_learner(i, gpus, &learner.template, config);
                    out.extend(group.into_iter().map(|r| Wanted::kept(r, &build)));
                }
            } else {
                let name = names::replica(&builder.job, Role::Learner, i);
                let make = |name| {
                    let mut replica = builder.replica(Role::Learner, Some(i), name, &learner.template, vec![]);
                    if learner.gpus.is_some() {
                        set_gpus(&mut replica.pod, gpus);
                    }
                    replica
                };
                out.push(lazily(Role::Learner, Some(i), name, &make));
            }
        }
    }
    Ok(out)
}

impl Wanted {
    /// `replica`, its objects kept if `build` asks for them.
    fn kept(replica: Replica, build: &impl Fn(&str) -> bool) -> Wanted {
        let (role, index, name) = (replica.role, replica.index, replica.name());
        let built = build(&name).then_some(replica);
        Wanted { role, index, name, built }
    }
}

/// The controller reference every object of the job carries, so deleting the job deletes them,
/// naming the job under `version` (the group's preferred one) whichever version it was written in.
pub fn owner_reference(job: &DIJob, version: &str) -> Result<OwnerReference, BuildError> {
    let mut owner = job.controller_owner_ref(&()).ok_or(BuildError::NoUid)?;
    owner.api_version = format!("{GROUP}/{version}");
    owner.block_owner_deletion = Some(true);
    Ok(owner)
}

/// Labels of every object of a job; `role` adds the role's.
pub fn job_labels(job: &str, role: Option<Role>) -> BTreeMap<String, String> {
    let mut l = BTreeMap::from([
        (labels::GROUP_NAME.to_string(), GROUP.to_string()),
        (labels::JOB_NAME.to_string(), job.to_string()),
        (labels::CONTROLLER_NAME.to_string(), labels::CONTROLLER_NAME_VALUE.to_string()),
        (labels::APP_NAME.to_string(), labels::APP_NAME_VALUE.to_string()),
        (labels::APP_INSTANCE.to_string(), job.to_string()),
        (labels::APP_MANAGED_BY.to_string(), labels::MANAGED_BY_VALUE.to_string()),
    ]);
    if let Some(role) = role {
        l.insert(labels::REPLICA_TYPE.into(), role.label().into());
        l.insert(labels::APP_COMPONENT.into(), role.label().into());
    }
    l
}

/// Label selector of everything the orchestrator manages (what it watches).
pub fn managed_selector() -> String {
    format!("{}={}", labels::APP_MANAGED_BY, labels::MANAGED_BY_VALUE)
}

struct Builder<'a> {
    job: String,
    namespace: String,
    spec: &'a di_api::DIJobSpec,
    owner: OwnerReference,
    settings: &'a Settings,
}

impl<'a> Builder<'a> {
    fn new(job: &'a DIJob, settings: &'a Settings) -> Result<Self, BuildError> {
        let name = job.name_any();
        let namespace = job.namespace().unwrap_or_default();
        Ok(Builder {
            owner: owner_reference(job, &settings.owner_version)?,
            job: name,
            namespace,
            spec: &job.spec,
            settings,
        })
    }

    /// A pod from `template` for `role`, with the contract applied, and its Service.
    fn replica(
        &self,
        role: Role,
        index: Option<u32>,
        name: String,
        template: &PodTemplateSpec,
        extra_env: Vec<(&str, String)>,
    ) -> Replica {
        let port = replica_port(template, role);
        let mut labels = job_labels(&self.job, Some(role));
        labels.insert(labels::POD_NAME.into(), name.clone());
        if let Some(i) = index {
            labels.insert(labels::REPLICA_INDEX.into(), i.to_string());
        }
        let tmeta = template.metadata.clone().unwrap_or_default();
        let mut pod_labels = tmeta.labels.unwrap_or_default();
        pod_labels.extend(labels.clone());
        let mut spec = pod_spec(self.spec, template);
        if role == Role::Collector {
            crate::node_loss::tolerate(&mut spec);
        }
        // Templates are defaulted, so the main container has its di-port; an undefaulted one
        // (no webhook installed) gets it here.
        if di_port(&spec).is_none()
            && let Some(main) = main_container_index(&spec)
        {
            spec.containers[main].ports.get_or_insert_default().push(container_port(PORT_NAME, port));
        }
        let mut env_vars = self.common_env(&name, role);
        env_vars.push((role.port_env(), port.to_string()));
        env_vars.extend(extra_env);
        for container in spec.containers.iter_mut().chain(spec.init_containers.iter_mut().flatten()) {
            inject_env(container, &env_vars);
        }

        let meta = ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(self.namespace.clone()),
            labels: Some(pod_labels),
            annotations: tmeta.annotations,
            owner_references: Some(vec![self.owner.clone()]),
            ..Default::default()
        };
        let service = Service {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(self.namespace.clone()),
                labels: Some(labels),
                owner_references: Some(vec![self.owner.clone()]),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                cluster_ip: Some("None".into()),
                // Peers resolve each other before they are ready.
                publish_not_ready_addresses: Some(true),
                selector: Some(BTreeMap::from([
                    (labels::JOB_NAME.to_string(), self.job.clone()),
                    (labels::POD_NAME.to_string(), name),
                ])),
                ports: Some(vec![service_port(PORT_NAME, port)]),
                ..Default::default()
            }),
            ..Default::default()
        };
        Replica { role, index, pod: Pod { metadata: meta, spec: Some(spec), ..Default::default() }, service }
    }

    fn common_env(&self, pod: &str, role: Role) -> Vec<(&'static str, String)> {
        vec![
            (env::POD_NAMESPACE, self.namespace.clone()),
            (env::POD_NAME, pod.to_owned()),
            (env::SERVER_URL, sidecar::server_url(&self.job, &self.namespace, role)),
        ]
    }
}

/// A pod's spec from its template, with what the job gives every pod: its PriorityClass where the
/// template names none, and its volumes.
fn pod_spec(job: &di_api::DIJobSpec, template: &PodTemplateSpec) -> PodSpec {
    let mut spec: PodSpec = template.spec.clone().unwrap_or_default();
    if spec.priority_class_name.as_deref().is_none_or(str::is_empty)
        && let Some(class) = job.priority_class_name.as_deref().filter(|c| !c.is_empty())
    {
        spec.priority_class_name = Some(class.to_owned());
    }
    if let Some(volumes) = &job.volumes {
        spec.volumes.get_or_insert_default().extend(volumes.iter().cloned());
    }
    spec
}

/// Sets (or replaces) the contract's variables in a container.
fn inject_env(container: &mut Container, vars: &[(&str, String)]) {
    let list = container.env.get_or_insert_default();
    for (name, value) in vars {
        let var = EnvVar { name: (*name).to_owned(), value: Some(value.clone()), value_from: None };
        match list.iter_mut().find(|e| e.name == *name) {
            Some(existing) => *existing = var,
            None => list.push(var),
        }
    }
}

/// Gives the main container exactly `gpus` GPUs (limit, and request when it sets requests).
fn set_gpus(pod: &mut Pod, gpus: i32) {
    let Some(spec) = pod.spec.as_mut() else { return };
    let Some(main) = main_container_index(spec) else { return };
    let resources = spec.containers[main].resources.get_or_insert_default();
    let quantity = Quantity(gpus.to_string());
    if gpus == 0 {
        resources.limits.iter_mut().for_each(|l| {
            l.remove(GPU_RESOURCE);
        });
        resources.requests.iter_mut().for_each(|r| {
            r.remove(GPU_RESOURCE);
        });
        return;
    }
    resources.limits.get_or_insert_default().insert(GPU_RESOURCE.into(), quantity.clone());
    if let Some(requests) = resources.requests.as_mut() {
        requests.insert(GPU_RESOURCE.into(), quantity);
    }
}

fn container_port(name: &str, port: i32) -> ContainerPort {
    ContainerPort { name: Some(name.into()), container_port: port, protocol: Some("TCP".into()), ..Default::default() }
}

fn service_port(name: &str, port: i32) -> ServicePort {
    ServicePort {
        name: Some(name.into()),
        port,
        target_port: Some(IntOrString::Int(port)),
        protocol: Some("TCP".into()),
        ..Default::default()
    }
}
