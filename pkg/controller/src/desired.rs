//! Desired state: the pods, services and RBAC a DIJob asks for, as a pure function of the job
//! (defaulted), its AggregatorConfig and the orchestrator's settings. Names are deterministic, so
//! building twice gives the same objects and creating them twice is harmless.

use std::collections::BTreeMap;

use di_api::contract::{
    DDP_GPU_PORT_PREFIX, DEFAULT_MASTER_PORT, GPU_RESOURCE, GROUP, PORT_NAME, REPLICAS_CONTAINER_NAME, REPLICAS_PORT,
    Role, env, labels, names,
};
use di_api::resources::{main_container_index, replica_port, template_gpus};
use di_api::{AggregatorConfig, DIJob};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction, ObjectFieldSelector, Pod, PodSpec, PodTemplateSpec,
    Probe, ResourceRequirements, SecurityContext, Service, ServiceAccount, ServicePort, ServiceSpec,
};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role as RbacRole, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};

/// How this orchestrator builds pods; the same for every job.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Image of the replica endpoint sidecar: the orchestrator's own image.
    pub replicas_image: String,
    /// GPUs one DDP learner pod may hold; a learner asking for more is split across pods.
    pub max_gpus_per_pod: i32,
    /// AggregatorConfig (`namespace/name`) for jobs that name none.
    pub default_aggregator_config: String,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            replicas_image: "opendilab/di-orchestrator:latest".into(),
            max_gpus_per_pod: 8,
            default_aggregator_config: "di-system/aggregator-config".into(),
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

/// The per-job identity of the replica endpoint sidecar.
#[derive(Clone, Debug, PartialEq)]
pub struct Rbac {
    pub service_account: ServiceAccount,
    pub role: RbacRole,
    pub binding: RoleBinding,
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

/// GPUs per logic learner: the spec's count, else the template's.
pub fn learner_gpus(job: &DIJob) -> Result<i32, BuildError> {
    let Some(learner) = &job.spec.learner else { return Ok(0) };
    if let Some(gpus) = learner.gpus {
        return Ok(gpus);
    }
    match template_gpus(&learner.template) {
        Ok(gpus) => Ok(gpus.unwrap_or(0) as i32),
        Err(q) => Err(BuildError::FractionalGpus(Role::Learner, q)),
    }
}

/// Whether the job's logic learners are aggregators in front of DDP learners.
pub fn needs_aggregator(job: &DIJob) -> bool {
    learner_gpus(job).is_ok_and(|g| g > 1)
}

/// Everything the job should have running right now, coordinator first, then by role and index.
/// `aggregator` is needed only when [`needs_aggregator`]; without it no learner is built.
pub fn replicas(
    job: &DIJob,
    aggregator: Option<&AggregatorConfig>,
    settings: &Settings,
) -> Result<Vec<Replica>, BuildError> {
    let builder = Builder::new(job, settings)?;
    let mut out = vec![builder.coordinator()?];
    if let Some(collector) = &job.spec.collector {
        for i in 0..job.spec.collector_replicas().max(0) as u32 {
            out.push(builder.replica(
                Role::Collector,
                Some(i),
                names::replica(&builder.job, Role::Collector, i),
                &collector.template,
                vec![],
            ));
        }
    }
    if let Some(learner) = &job.spec.learner {
        let gpus = learner_gpus(job)?;
        for i in 0..job.spec.learner_replicas().max(0) as u32 {
            if gpus > 1 {
                if let Some(config) = aggregator {
                    out.extend(builder.aggregated_learner(i, gpus, &learner.template, config));
                }
            } else {
                let mut replica = builder.replica(
                    Role::Learner,
                    Some(i),
                    names::replica(&builder.job, Role::Learner, i),
                    &learner.template,
                    vec![],
                );
                if learner.gpus.is_some() {
                    set_gpus(&mut replica.pod, gpus);
                }
                out.push(replica);
            }
        }
    }
    Ok(out)
}

/// The ServiceAccount, Role and RoleBinding of the job's replica endpoint: it may read and patch
/// its own DIJob and read the namespace's pods, nothing more.
pub fn rbac(job: &DIJob) -> Result<Rbac, BuildError> {
    let owner = owner_reference(job)?;
    let name = names::replicas_identity(&job.name_any());
    let meta = ObjectMeta {
        name: Some(name.clone()),
        namespace: job.namespace(),
        labels: Some(job_labels(&job.name_any(), None)),
        owner_references: Some(vec![owner]),
        ..Default::default()
    };
    let subject_account = coordinator_service_account(job).unwrap_or_else(|| name.clone());
    let rule = |groups: &[&str], resources: &[&str], verbs: &[&str], names: Option<Vec<String>>| PolicyRule {
        api_groups: Some(groups.iter().map(|s| s.to_string()).collect()),
        resources: Some(resources.iter().map(|s| s.to_string()).collect()),
        verbs: verbs.iter().map(|s| s.to_string()).collect(),
        resource_names: names,
        ..Default::default()
    };
    Ok(Rbac {
        service_account: ServiceAccount { metadata: meta.clone(), ..Default::default() },
        role: RbacRole {
            metadata: meta.clone(),
            rules: Some(vec![
                rule(&[GROUP], &["dijobs"], &["get", "watch", "patch"], Some(vec![job.name_any()])),
                rule(&[""], &["pods"], &["get", "list", "watch"], None),
            ]),
        },
        binding: RoleBinding {
            metadata: meta,
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".into(),
                kind: "Role".into(),
                name: name.clone(),
            },
            subjects: Some(vec![Subject {
                kind: "ServiceAccount".into(),
                name: subject_account,
                namespace: job.namespace(),
                ..Default::default()
            }]),
        },
    })
}

/// The ServiceAccount the coordinator's template asks for, if any.
fn coordinator_service_account(job: &DIJob) -> Option<String> {
    let spec = job.spec.coordinator.as_ref()?.template.spec.as_ref()?;
    spec.service_account_name.clone().filter(|s| !s.is_empty())
}

/// The controller reference every object of the job carries, so deleting the job deletes them.
pub fn owner_reference(job: &DIJob) -> Result<OwnerReference, BuildError> {
    let mut owner = job.controller_owner_ref(&()).ok_or(BuildError::NoUid)?;
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
    server_url: String,
}

impl<'a> Builder<'a> {
    fn new(job: &'a DIJob, settings: &'a Settings) -> Result<Self, BuildError> {
        let name = job.name_any();
        let namespace = job.namespace().unwrap_or_default();
        let server_url = names::url(&names::coordinator(&name), &namespace, REPLICAS_PORT);
        Ok(Builder { owner: owner_reference(job)?, job: name, namespace, spec: &job.spec, settings, server_url })
    }

    fn coordinator(&self) -> Result<Replica, BuildError> {
        let template = &self.spec.coordinator.as_ref().ok_or(BuildError::NoCoordinator)?.template;
        let name = names::coordinator(&self.job);
        let url = names::url(&name, &self.namespace, replica_port(template, Role::Coordinator));
        let mut sidecar = self.sidecar();
        inject_env(&mut sidecar, &self.common_env(&name));
        let mut replica = self.replica(Role::Coordinator, None, name, template, vec![(env::COORDINATOR_URL, url)]);
        let spec = replica.pod.spec.as_mut().expect("built pods have a spec");
        if spec.service_account_name.as_deref().is_none_or(str::is_empty) {
            spec.service_account_name = Some(names::replicas_identity(&self.job));
        }
        spec.containers.push(sidecar);
        let ports = replica.service.spec.as_mut().and_then(|s| s.ports.as_mut()).expect("built services have ports");
        ports.push(service_port(REPLICAS_CONTAINER_NAME, REPLICAS_PORT));
        Ok(replica)
    }

    /// An aggregator and the DDP learners that share a logic learner's GPUs.
    fn aggregated_learner(
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
        let mut spec: PodSpec = template.spec.clone().unwrap_or_default();
        if spec.priority_class_name.as_deref().is_none_or(str::is_empty)
            && let Some(class) = self.spec.priority_class_name.as_deref().filter(|c| !c.is_empty())
        {
            spec.priority_class_name = Some(class.to_owned());
        }
        if let Some(volumes) = &self.spec.volumes {
            spec.volumes.get_or_insert_default().extend(volumes.iter().cloned());
        }
        // Templates are defaulted, so the main container has its di-port; an undefaulted one
        // (no webhook installed) gets it here.
        let has_port =
            spec.containers.iter().flat_map(|c| c.ports.iter().flatten()).any(|p| p.name.as_deref() == Some(PORT_NAME));
        if !has_port && let Some(main) = main_container_index(&spec) {
            spec.containers[main].ports.get_or_insert_default().push(container_port(PORT_NAME, port));
        }
        let mut env_vars = self.common_env(&name);
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

    fn common_env(&self, pod: &str) -> Vec<(&'static str, String)> {
        vec![
            (env::POD_NAMESPACE, self.namespace.clone()),
            (env::POD_NAME, pod.to_owned()),
            (env::SERVER_URL, self.server_url.clone()),
        ]
    }

    /// The replica endpoint, serving this job only.
    fn sidecar(&self) -> Container {
        Container {
            name: REPLICAS_CONTAINER_NAME.into(),
            image: Some(self.settings.replicas_image.clone()),
            args: Some(vec![
                "replicas".into(),
                format!("--namespace={}", self.namespace),
                format!("--job={}", self.job),
                format!("--port={REPLICAS_PORT}"),
            ]),
            ports: Some(vec![container_port(REPLICAS_CONTAINER_NAME, REPLICAS_PORT)]),
            env: Some(vec![EnvVar {
                name: env::POD_IP.into(),
                value: None,
                value_from: Some(EnvVarSource {
                    field_ref: Some(ObjectFieldSelector { field_path: "status.podIP".into(), ..Default::default() }),
                    ..Default::default()
                }),
            }]),
            readiness_probe: Some(Probe {
                http_get: Some(HTTPGetAction {
                    path: Some("/healthz".into()),
                    port: IntOrString::Int(REPLICAS_PORT),
                    ..Default::default()
                }),
                period_seconds: Some(5),
                ..Default::default()
            }),
            resources: Some(ResourceRequirements {
                requests: Some(BTreeMap::from([
                    ("cpu".to_string(), Quantity("10m".into())),
                    ("memory".to_string(), Quantity("16Mi".into())),
                ])),
                limits: Some(BTreeMap::from([("memory".to_string(), Quantity("64Mi".into()))])),
                ..Default::default()
            }),
            security_context: Some(SecurityContext {
                run_as_non_root: Some(true),
                read_only_root_filesystem: Some(true),
                allow_privilege_escalation: Some(false),
                ..Default::default()
            }),
            ..Default::default()
        }
    }
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
