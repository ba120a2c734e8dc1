//! The pod contract shared with DI-orchestrator 0.2 and DI-engine: label keys, roles, default
//! ports, environment variable names and the names of the objects derived from a job.
//!
//! Everything that builds, selects or names a job's pods reads it from here, so the webhook, the
//! reconciler, the replica endpoint and the CLI can never disagree.

use std::fmt;

/// API group of both custom resources.
pub const GROUP: &str = "diengine.opendilab.org";
/// The stored version, and the one DI-orchestrator 0.2 served.
pub const VERSION: &str = "v1alpha1";
/// DI-orchestrator 1.x's version, served with the same schema (see docs/TASKS.md).
pub const TASKS_VERSION: &str = "v2alpha1";
/// The version a controller reference names its DIJob under: the group's preferred version (the
/// highest in Kubernetes' version order of those served), which is the one discovery offers and
/// the garbage collector watches DIJobs under. A reference under another version does not match
/// the DIJob the collector saw, so it checks every such pod and Service with two reads from etcd,
/// throttled by the controller manager's rate limit: 20 GETs of dijobs a second for minutes after
/// 100 jobs started, measured. Ownership itself is by UID, under any version. The orchestrator
/// asks the API server's discovery at start-up, which says this where our CRD is installed.
pub const OWNER_VERSION: &str = TASKS_VERSION;

/// The orchestrator's image, tagged with this build's version: what `kubectl di install`, the
/// sidecar and the install manifests default to, so a plugin never installs another release than
/// its own (`latest` would, and would change under a running cluster).
pub const IMAGE: &str = concat!("opendilab/di-orchestrator:", env!("CARGO_PKG_VERSION"));

/// Labels DI-orchestrator 0.2 put on every pod and service; DI-engine and users' tooling select on them.
/// Labels of other projects' that a DIJob carries.
pub mod kueue {
    /// Value: the Kueue LocalQueue of the job's namespace it waits in (see the guide's "Queues
    /// and quotas").
    pub const QUEUE_NAME: &str = "kueue.x-k8s.io/queue-name";
    /// The job's condition that is True while its queue holds it, False once admitted.
    pub const QUEUED: &str = "Queued";
    /// `spec.managedBy` of a job Kueue's MultiKueue runs on a worker cluster.
    pub const MULTIKUEUE: &str = "kueue.x-k8s.io/multikueue";
    /// `spec.managedBy` of a job this cluster's orchestrator runs (as unset).
    pub const ORCHESTRATOR: &str = "diengine.opendilab.org/di-orchestrator";
    /// Annotation MultiKueue puts on a job it copies to a worker: the Workload it made there.
    pub const PREBUILT_WORKLOAD: &str = "kueue.x-k8s.io/prebuilt-workload-name";
    /// Label MultiKueue puts on what it makes on a worker: the manager's origin name.
    pub const MULTIKUEUE_ORIGIN: &str = "kueue.x-k8s.io/multikueue-origin";
    /// The API version of every Kueue kind the orchestrator reads or writes.
    pub const API_VERSION: &str = "kueue.x-k8s.io/v1beta2";

    /// One of Kueue's kinds (of [`API_VERSION`]), for a dynamic client.
    pub fn resource(kind: &str, plural: &str) -> kube::core::ApiResource {
        let (group, version) = API_VERSION.split_once('/').expect("a group and a version");
        kube::core::ApiResource {
            group: group.into(),
            version: version.into(),
            api_version: API_VERSION.into(),
            kind: kind.into(),
            plural: plural.into(),
        }
    }
}

pub mod labels {
    /// Value: the API group ([`super::GROUP`]).
    pub const GROUP_NAME: &str = "group-name";
    /// Value: the DIJob's name.
    pub const JOB_NAME: &str = "dijob-name";
    /// Value: [`CONTROLLER_NAME`].
    pub const CONTROLLER_NAME: &str = "controller-name";
    /// Value: the role's label value ([`super::Role::label`]).
    pub const REPLICA_TYPE: &str = "replica-type";
    /// Value: the pod's own name, so a service can select exactly its pod.
    pub const POD_NAME: &str = "pod-name";
    /// Value: [`DDP_LEARNER_MASTER`] or [`DDP_LEARNER_WORKER`].
    pub const DDP_LEARNER_TYPE: &str = "ddp-learner-type";

    pub const CONTROLLER_NAME_VALUE: &str = "di-operator";
    pub const DDP_LEARNER_MASTER: &str = "ddp-learner-master";
    pub const DDP_LEARNER_WORKER: &str = "ddp-learner-worker";

    /// Recommended Kubernetes labels. `managed-by` is what the orchestrator watches on, so it
    /// never caches pods it does not own.
    pub const APP_NAME: &str = "app.kubernetes.io/name";
    pub const APP_INSTANCE: &str = "app.kubernetes.io/instance";
    pub const APP_COMPONENT: &str = "app.kubernetes.io/component";
    pub const APP_MANAGED_BY: &str = "app.kubernetes.io/managed-by";

    /// Index of a collector, logic learner or aggregator; DDP learners carry their logic
    /// learner's index, so an aggregator's learners are one selector away.
    pub const REPLICA_INDEX: &str = "diengine.opendilab.org/replica-index";

    pub const APP_NAME_VALUE: &str = "dijob";
    pub const MANAGED_BY_VALUE: &str = "di-orchestrator";
}

/// Environment variables injected into every container of a job's pods.
pub mod env {
    pub const POD_NAMESPACE: &str = "KUBERNETES_POD_NAMESPACE";
    pub const POD_NAME: &str = "KUBERNETES_POD_NAME";
    /// The replica endpoint sidecar only: its pod's UID, which the job's status names while that
    /// pod is the job's coordinator (`status.coordinatorUID`).
    pub const POD_UID: &str = "KUBERNETES_POD_UID";
    /// `host:port` without a scheme: where the job's replica endpoint answers. In the coordinator's
    /// pod, its own address that takes writes; in the others, the coordinator's Service (reads).
    pub const SERVER_URL: &str = "KUBERNETES_SERVER_URL";
    /// Coordinator only: its own URL.
    pub const COORDINATOR_URL: &str = "KUBERNETES_COORDINATOR_URL";
    /// DDP learners only: the URL of the aggregator they serve.
    pub const AGGREGATOR_URL: &str = "KUBERNETES_AGGREGATOR_URL";

    pub const COORDINATOR_PORT: &str = "COORDINATOR_PORT";
    pub const COLLECTOR_PORT: &str = "COLLECTOR_PORT";
    pub const LEARNER_PORT: &str = "LEARNER_PORT";
    pub const AGGREGATOR_PORT: &str = "AGGREGATOR_PORT";

    /// DDP learners: torch.distributed's rendezvous.
    pub const WORLD_SIZE: &str = "WORLD_SIZE";
    pub const LOCAL_WORLD_SIZE: &str = "LOCAL_WORLD_SIZE";
    pub const START_RANK: &str = "START_RANK";
    pub const MASTER_ADDR: &str = "MASTER_ADDR";
    pub const MASTER_PORT: &str = "MASTER_PORT";
}

/// Annotations the reconciler keeps on a replica's Service, which outlives the replica's pods:
/// how often the replica was replaced after failing, which failed pod was counted last, and
/// when the replacement may start (exponential backoff).
pub mod annotations {
    pub const RESTARTS: &str = "diengine.opendilab.org/restarts";
    pub const LAST_FAILED_UID: &str = "diengine.opendilab.org/last-failed-uid";
    pub const RESTART_AFTER: &str = "diengine.opendilab.org/restart-after";

    /// On the DIJob: pods the coordinator reported failed, as `pod=uid` pairs separated by
    /// commas. The UID names the incarnation, so a replacement is never replaced again.
    pub const REPLACE: &str = "diengine.opendilab.org/replace";

    /// The `(pod, uid)` pairs of a [`REPLACE`] value; malformed entries are skipped.
    pub fn parse_replace(value: &str) -> Vec<(String, String)> {
        value
            .split(',')
            .filter_map(|entry| entry.trim().split_once('='))
            .filter(|(pod, uid)| !pod.is_empty() && !uid.is_empty())
            .map(|(pod, uid)| (pod.to_owned(), uid.to_owned()))
            .collect()
    }

    pub fn format_replace(entries: &[(String, String)]) -> String {
        entries.iter().map(|(pod, uid)| format!("{pod}={uid}")).collect::<Vec<_>>().join(",")
    }
}

/// Port of the replica endpoint, the sidecar next to the coordinator, on the pod's network: where
/// the job's other pods read it (`KUBERNETES_SERVER_URL` in them points at it).
pub const REPLICAS_PORT: i32 = 22280;
/// The replica endpoint's address for the coordinator's own containers, where it also takes
/// writes: a loopback address other than `127.0.0.1`, so that only the pod's own network
/// namespace reaches it and a port-forward (which dials `localhost`) never does.
pub const COORDINATOR_ENDPOINT_IP: std::net::Ipv4Addr = std::net::Ipv4Addr::new(127, 0, 22, 80);
/// Port of [`COORDINATOR_ENDPOINT_IP`]'s listener.
pub const COORDINATOR_ENDPOINT_PORT: u16 = 22281;

/// `host:port` of the replica endpoint inside the coordinator's pod (its `KUBERNETES_SERVER_URL`).
pub fn coordinator_endpoint() -> std::net::SocketAddr {
    std::net::SocketAddr::from((COORDINATOR_ENDPOINT_IP, COORDINATOR_ENDPOINT_PORT))
}
/// Name of the sidecar container and of its port.
pub const REPLICAS_CONTAINER_NAME: &str = "di-replicas";

/// Name of the container port (and service port) that carries a replica's DI-engine traffic.
pub const PORT_NAME: &str = "di-port";
/// The container the contract applies to when a template has several.
pub const DEFAULT_CONTAINER_NAME: &str = "di-container";
/// torch.distributed master port on the DDP master learner.
pub const DEFAULT_MASTER_PORT: i32 = 10314;
/// Port names of the per-GPU processes of a DDP learner: `gpu-port-0`, `gpu-port-1`, ...
pub const DDP_GPU_PORT_PREFIX: &str = "gpu-port";
/// Extended resource name of NVIDIA GPUs.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";

/// The replica roles of a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    Coordinator,
    Collector,
    /// A logic learner: what the coordinator talks to.
    Learner,
    /// Fronts the DDP learners of a logic learner with more than one GPU.
    Aggregator,
    /// One data-parallel training process group behind an aggregator.
    DdpLearner,
}

impl Role {
    pub const ALL: [Role; 5] = [Role::Coordinator, Role::Collector, Role::Learner, Role::Aggregator, Role::DdpLearner];

    /// Value of the `replica-type` label and the middle part of pod names.
    pub const fn label(self) -> &'static str {
        match self {
            Role::Coordinator => "coordinator",
            Role::Collector => "collector",
            Role::Learner => "learner",
            Role::Aggregator => "aggregator",
            Role::DdpLearner => "ddp-learner",
        }
    }

    /// Key of `status.replicaStatus` (0.2's `ReplicaType`).
    pub const fn replica_type(self) -> &'static str {
        match self {
            Role::Coordinator => "Coordinator",
            Role::Collector => "Collector",
            Role::Learner => "Learner",
            Role::Aggregator => "Aggregator",
            Role::DdpLearner => "DDPLearner",
        }
    }

    /// Port given to the role's `di-port` when its template names none.
    pub const fn default_port(self) -> i32 {
        match self {
            Role::Collector => 22270,
            Role::Learner | Role::DdpLearner => 22271,
            Role::Aggregator => 22272,
            Role::Coordinator => 22273,
        }
    }

    /// Environment variable that tells the replica its own port.
    pub const fn port_env(self) -> &'static str {
        match self {
            Role::Coordinator => env::COORDINATOR_PORT,
            Role::Collector => env::COLLECTOR_PORT,
            Role::Learner | Role::DdpLearner => env::LEARNER_PORT,
            Role::Aggregator => env::AGGREGATOR_PORT,
        }
    }

    pub fn from_label(label: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.label() == label)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// Most collectors or logic learners a job may ask for. Bounds the names derived from the job
/// and catches typos such as `replicas: 10000000` before they flood a cluster.
pub const MAX_REPLICAS: i32 = 1000;
/// Most GPUs one logic learner may ask for.
pub const MAX_GPUS_PER_LEARNER: i32 = 256;

/// Kubernetes' limit for a DNS-1035 label, which a Service name must be.
pub const DNS_LABEL_MAX: usize = 63;

/// Deterministic names of the objects derived from a job. Every pod has a headless Service of the
/// same name, so each name must be a DNS-1035 label.
pub mod names {
    use super::Role;

    pub fn coordinator(job: &str) -> String {
        format!("{job}-{}", Role::Coordinator.label())
    }

    /// Collectors, logic learners and aggregators: `<job>-<role>-<index>`.
    pub fn replica(job: &str, role: Role, index: u32) -> String {
        format!("{job}-{}-{index}", role.label())
    }

    /// DDP learner `rank_group` behind the aggregator of logic learner `index`.
    pub fn ddp_learner(job: &str, index: u32, rank_group: u32) -> String {
        format!("{job}-{}-{index}-{rank_group}", Role::DdpLearner.label())
    }

    /// ServiceAccount, Role and RoleBinding the job's replica endpoint runs as.
    pub fn replicas_identity(job: &str) -> String {
        format!("{job}-replicas")
    }

    /// `<pod>.<namespace>:<port>`, the URL form DI-engine's client expects.
    pub fn url(pod: &str, namespace: &str, port: i32) -> String {
        format!("{pod}.{namespace}:{port}")
    }

    /// The longest name a job can derive: its DDP learner at the highest index and rank group.
    pub fn longest_suffix_len() -> usize {
        let index = (super::MAX_REPLICAS - 1) as u32;
        let rank_group = (super::MAX_GPUS_PER_LEARNER - 1) as u32;
        ddp_learner("", index, rank_group).len()
    }

    /// Longest job name whose derived names all stay valid DNS labels.
    pub fn max_job_name_len() -> usize {
        super::DNS_LABEL_MAX - longest_suffix_len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_deterministic_and_fit() {
        assert_eq!(names::coordinator("cartpole"), "cartpole-coordinator");
        assert_eq!(names::replica("cartpole", Role::Collector, 3), "cartpole-collector-3");
        assert_eq!(names::ddp_learner("j", 2, 1), "j-ddp-learner-2-1");
        assert_eq!(names::url("j-collector-0", "ns", 22270), "j-collector-0.ns:22270");
        assert_eq!(names::longest_suffix_len(), "-ddp-learner-999-255".len());
        let longest = "a".repeat(names::max_job_name_len());
        let name = names::ddp_learner(&longest, 999, 255);
        assert_eq!(name.len(), DNS_LABEL_MAX);
    }

    #[test]
    fn replace_annotation_round_trips() {
        let entries = vec![("j-collector-0".to_string(), "u1".to_string()), ("j-learner-1".into(), "u2".into())];
        let text = annotations::format_replace(&entries);
        assert_eq!(text, "j-collector-0=u1,j-learner-1=u2");
        assert_eq!(annotations::parse_replace(&text), entries);
        assert_eq!(
            annotations::parse_replace(" a=1 , junk, =2, b= ,c=3"),
            vec![("a".into(), "1".into()), ("c".into(), "3".into())]
        );
        assert_eq!(annotations::parse_replace(""), vec![]);
    }

    #[test]
    fn roles_keep_the_0_2_contract() {
        let ports: Vec<_> =
            [Role::Collector, Role::Learner, Role::Aggregator, Role::Coordinator].map(Role::default_port).into();
        assert_eq!(ports, vec![22270, 22271, 22272, 22273]);
        for role in Role::ALL {
            assert_eq!(Role::from_label(role.label()), Some(role));
        }
        assert_eq!(Role::Learner.port_env(), "LEARNER_PORT");
        assert_eq!(Role::from_label("actor"), None);
    }
}
