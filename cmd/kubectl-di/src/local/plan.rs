//! What a local run starts, decided without I/O: one process per pod the orchestrator would
//! create, with that pod's main container's command, arguments and environment (built by the
//! reconciler's own code), and the contract's names turned into local addresses.
//!
//! How replicas never collide: every replica gets a loopback address of its own (127.0.0.2,
//! 127.0.0.3, ...), and a role replica also a port of its own, handed out through its port
//! variable (`COLLECTOR_PORT`, ...) and every URL naming it. A DI-engine collector that binds
//! `0.0.0.0:$COLLECTOR_PORT` and a `ditask` worker that binds the address it finds for itself in
//! `DI_NODES` both work unchanged. Names the contract hands out (`<pod>.<namespace>:<port>`, task
//! FQDNs) are written as these addresses, since nothing resolves the cluster's names here.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail};
use di_api::contract::{REPLICAS_CONTAINER_NAME, REPLICAS_PORT, Role, coordinator_endpoint, names};
use di_api::resources::{di_port, main_container_index};
use di_api::{DIJob, JobRestartPolicy};
use di_core::desired::{self, Settings};
use k8s_openapi::api::core::v1::{Pod, PodSpec};
use kube::ResourceExt;

use super::mounts::{ConfigMaps, Mounts, mounts, rewrite};

/// What decides a replica's fate when its process exits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    /// A 0.2 role; the coordinator's exit is the job's outcome.
    Role { role: Role, index: Option<u32> },
    /// A task's pod; `decides`: its success is (part of) the job's.
    Task { task: String, rank: u32, decides: bool },
}

/// One local process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalReplica {
    /// The pod's name: the log prefix and the working directory's name.
    pub name: String,
    pub part: Part,
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub workdir: PathBuf,
    pub address: Ipv4Addr,
    /// A role replica's port (its `di-port` on the cluster is another).
    pub port: Option<u16>,
    /// Seconds between SIGTERM and SIGKILL.
    pub grace: u64,
    /// Its volumes, as directories of this machine.
    pub mounts: Mounts,
}

/// How failures are handled, from the job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Restarts {
    /// A role job: each collector or learner is replaced after failing, at most this often
    /// (`None`: no limit); the coordinator never is.
    PerReplica(Option<u32>),
    /// A task job: replacements in all count against the backoff limit.
    Tasks { policy: JobRestartPolicy, limit: u32 },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub replicas: Vec<LocalReplica>,
    pub restarts: Restarts,
    /// What the run cannot honour, each named.
    pub warnings: Vec<String>,
}

/// The first replica address' last octet: 127.0.0.1 stays for the run's own endpoint.
const FIRST_HOST: u8 = 2;

/// Where role replicas' ports come from: counted up from `first`, past every port `in_use` says
/// something on this machine listens on (the default, 32000, is in Kubernetes' NodePort range,
/// which kind, minikube and kube-proxy listen in on a developer's machine).
#[derive(Clone, Copy)]
pub struct Ports {
    pub first: u16,
    pub in_use: fn(u16) -> bool,
}

/// Plans `job` (defaulted and valid) in `run_dir`; role replicas get free ports from `ports`,
/// and volumes of `config_maps` (the ConfigMaps of the job's file) are written as files. The
/// replicas of `previous`, an earlier plan of the same run, keep their addresses and ports.
pub fn plan(
    job: &DIJob,
    run_dir: &Path,
    ports: Ports,
    config_maps: &ConfigMaps,
    previous: &[LocalReplica],
) -> anyhow::Result<Plan> {
    let settings = Settings::default();
    let namespace = job.namespace().unwrap_or_else(|| "default".into());
    let mut job = job.clone();
    job.metadata.namespace = Some(namespace.clone());
    job.metadata.uid.get_or_insert_with(|| "local".into());
    let name = job.name_any();

    // The pods the orchestrator would create, in its order, with what decides each one's fate.
    let (pods, restarts): (Vec<(Pod, Part)>, Restarts) = if job.spec.is_task_job() {
        let objects = desired::task_objects(&job, &settings)?;
        let pods = objects
            .pods
            .into_iter()
            .map(|p| {
                let part = Part::Task { task: p.member.task.clone(), rank: p.member.rank, decides: p.completion };
                (p.pod, part)
            })
            .collect();
        let restarts =
            Restarts::Tasks { policy: di_api::tasks::restart_policy(&job), limit: di_api::tasks::backoff_limit(&job) };
        (pods, restarts)
    } else {
        if di_api::resources::needs_aggregator(&job) {
            bail!(
                "multi-GPU learners (aggregator and DDP learners) do not run locally; set spec.learner.gpus to 0 or 1"
            );
        }
        let replicas = desired::replicas(&job, None, &settings)?;
        let pods = replicas.into_iter().map(|r| (r.pod, Part::Role { role: r.role, index: r.index })).collect();
        (pods, Restarts::PerReplica(job.spec.restart_limit.map(|l| l.max(0) as u32)))
    };
    // Every name the contract hands out, and what it is here. A replica of an earlier plan of
    // this run keeps its address and port; a new one takes the lowest free.
    let mut hosts: BTreeSet<u8> = previous.iter().map(|r| r.address.octets()[3]).collect();
    let mut given: BTreeSet<u16> = previous.iter().filter_map(|r| r.port).collect();
    let mut addresses: Vec<(String, String)> = vec![];
    let mut locals = vec![];
    for (pod, part) in &pods {
        let pod_name = pod.name_any();
        let spec = pod.spec.as_ref().ok_or_else(|| anyhow!("{pod_name} has no pod spec"))?;
        let cluster_port = di_port(spec).filter(|_| matches!(part, Part::Role { .. }));
        let (address, port) = match previous.iter().find(|r| r.name == pod_name) {
            Some(earlier) => (earlier.address, earlier.port),
            None => {
                let host = (FIRST_HOST..=u8::MAX - 1).find(|h| !hosts.contains(h)).ok_or_else(|| {
                    anyhow!("more pods than 127.0.0.0/24 holds; run at most {} locally", u8::MAX - FIRST_HOST)
                })?;
                hosts.insert(host);
                let port = match cluster_port {
                    Some(_) => {
                        let first = ports.first;
                        let free = (first..=u16::MAX).find(|p| !given.contains(p) && !(ports.in_use)(*p));
                        let port = free.ok_or_else(|| anyhow!("no free port left from {first} up"))?;
                        given.insert(port);
                        Some(port)
                    }
                    None => None,
                };
                (Ipv4Addr::new(127, 0, 0, host), port)
            }
        };
        if let (Some(cluster), Some(local)) = (cluster_port, port) {
            addresses.push((names::url(&pod_name, &namespace, cluster), format!("{address}:{local}")));
        }
        if job.spec.is_task_job() {
            let fqdn = di_api::tasks::fqdn(&pod_name, &name, &namespace, &settings.cluster_domain);
            addresses.push((fqdn, address.to_string()));
        }
        locals.push((address, port));
    }
    let endpoint_url = names::url(&names::coordinator(&name), &namespace, REPLICAS_PORT);

    let mut warnings: Vec<(String, String)> = vec![];
    let mut out = vec![];
    for ((pod, part), (address, port)) in pods.into_iter().zip(locals) {
        let pod_name = pod.name_any();
        let spec = pod.spec.unwrap_or_default();
        warn_unsupported(&pod_name, &spec, &mut warnings);
        let main = main_container_index(&spec).ok_or_else(|| anyhow!("{pod_name} has no container"))?;
        let container = &spec.containers[main];
        let mut warn = |what: String| warnings.push((pod_name.clone(), what));
        let mounts = mounts(&pod_name, &spec, container, run_dir, config_maps, &mut warn);
        let mut argv: Vec<String> = container.command.clone().unwrap_or_default();
        argv.extend(container.args.clone().unwrap_or_default());
        let argv: Vec<String> = argv.iter().map(|a| rewrite(a, &mounts.paths)).collect();
        if container.command.as_ref().is_none_or(Vec::is_empty) {
            bail!(
                "{pod_name}: container {:?} sets no command, so what runs is its image's entrypoint, which a local run \
                 cannot know without the image; set command (and args) in the template",
                container.name
            );
        }
        let mut vars: BTreeMap<String, String> = BTreeMap::new();
        for var in container.env.iter().flatten() {
            match &var.value {
                Some(value) => {
                    let local = localize(value, &addresses, &endpoint_url);
                    vars.insert(var.name.clone(), rewrite(&local, &mounts.paths));
                }
                None if var.value_from.is_some() => {
                    let what = format!("{} comes from valueFrom, which a local run cannot read; it is unset", var.name);
                    warnings.push((pod_name.clone(), what));
                }
                None => {
                    vars.insert(var.name.clone(), String::new());
                }
            }
        }
        if let (Part::Role { role, .. }, Some(port)) = (&part, port) {
            vars.insert(role.port_env().to_owned(), port.to_string());
        }
        let grace = spec.termination_grace_period_seconds.unwrap_or(30).max(0) as u64;
        out.push(LocalReplica {
            workdir: run_dir.join(&pod_name),
            name: pod_name,
            part,
            argv,
            env: vars.into_iter().collect(),
            address,
            port,
            grace,
            mounts,
        });
    }
    Ok(Plan { replicas: out, restarts, warnings: grouped(warnings) })
}

/// Each problem once, with the pods it concerns: `images are not pulled (a, b, c)`.
fn grouped(warnings: Vec<(String, String)>) -> Vec<String> {
    let mut by_message: Vec<(String, Vec<String>)> = vec![];
    for (pod, message) in warnings {
        match by_message.iter_mut().find(|(m, _)| *m == message) {
            Some((_, pods)) => pods.push(pod),
            None => by_message.push((message, vec![pod])),
        }
    }
    by_message.into_iter().map(|(message, pods)| format!("{message} ({})", pods.join(", "))).collect()
}

/// A contract value with every cluster name replaced by its local address.
fn localize(value: &str, addresses: &[(String, String)], endpoint_url: &str) -> String {
    // The run's one endpoint takes the coordinator's writes too, at the same address.
    let local_endpoint = format!("127.0.0.1:{REPLICAS_PORT}");
    let mut value =
        value.replace(endpoint_url, &local_endpoint).replace(&coordinator_endpoint().to_string(), &local_endpoint);
    // Longest first: a task FQDN `j-a-1...` must not be cut by `j-a-1` of another.
    let mut ordered: Vec<&(String, String)> = addresses.iter().collect();
    ordered.sort_by_key(|(name, _)| std::cmp::Reverse(name.len()));
    for (name, address) in ordered {
        value = value.replace(name.as_str(), address);
    }
    value
}

/// Names each pod feature a local process does not get.
fn warn_unsupported(pod: &str, spec: &PodSpec, warnings: &mut Vec<(String, String)>) {
    let mut warn = |what: String| warnings.push((pod.to_owned(), what));
    let init: Vec<&str> = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.name != REPLICAS_CONTAINER_NAME)
        .map(|c| c.name.as_str())
        .collect();
    if !init.is_empty() {
        warn(format!("init containers are not run locally: {}", init.join(", ")));
    }
    let main = main_container_index(spec).unwrap_or(0);
    for (_, c) in spec.containers.iter().enumerate().filter(|(i, _)| *i != main) {
        warn(format!("only the main container runs locally; {:?} does not", c.name));
    }
    if let Some(c) = spec.containers.get(main) {
        if c.image.is_some() {
            warn("images are not pulled; the command runs on this machine as it is".into());
        }
        if c.liveness_probe.is_some() || c.readiness_probe.is_some() || c.startup_probe.is_some() {
            warn("probes are not run locally".into());
        }
        if let Some(dir) = &c.working_dir {
            warn(format!("workingDir {dir:?} is a path in the image; each process runs in its own run directory"));
        }
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
