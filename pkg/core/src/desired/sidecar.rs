//! The coordinator and the replica endpoint that runs beside it: the sidecar (a native one, so
//! the pod ends with the coordinator), where it answers, and the identity the coordinator's pod
//! runs as so the sidecar may patch its job.

use std::collections::BTreeMap;

use di_api::contract::{REPLICAS_CONTAINER_NAME, REPLICAS_PORT, Role, coordinator_endpoint, env, names};
use di_api::resources::replica_port;
use k8s_openapi::api::core::v1::{
    Capabilities, Container, EnvVar, EnvVarSource, HTTPGetAction, ObjectFieldSelector, Probe, ResourceRequirements,
    SeccompProfile, SecurityContext,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::identity::default_account;
use super::{BuildError, Builder, Replica, container_port, inject_env, service_port};

/// The UID the sidecar runs as when the pod runs as root: the image's own user (`USER` in the
/// Dockerfile and kind/images/build.sh). Where the pod names none it is left unset, so the kubelet
/// checks `runAsNonRoot` against the image's numeric user, and a platform that assigns UIDs from
/// a range (OpenShift's restricted SCC) may set its own.
pub const SIDECAR_USER: i64 = 65532;

/// The replica endpoint's memory limit, in MiB: it holds the job's pods (their names, labels
/// and ports) while a request waits for them, a few MiB at 1,000 collectors (`make bench`).
pub const MEMORY_LIMIT_MIB: u32 = 64;

/// `host:port` of the job's replica endpoint for a pod of `role`: the coordinator's Service, on
/// the sidecar's port, where the endpoint only reads; in the coordinator's own pod, the loopback
/// address where it also writes (`di_replicas::access`).
pub(super) fn server_url(job: &str, namespace: &str, role: Role) -> String {
    match role {
        Role::Coordinator => coordinator_endpoint().to_string(),
        _ => names::url(&names::coordinator(job), namespace, REPLICAS_PORT),
    }
}

/// GET /healthz on the endpoint's port.
fn healthz() -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some("/healthz".into()),
            port: IntOrString::Int(REPLICAS_PORT),
            ..Default::default()
        }),
        ..Default::default()
    }
}

impl Builder<'_> {
    /// The coordinator's pod with the sidecar, and a Service that also exposes the sidecar.
    pub(super) fn coordinator(&self) -> Result<Replica, BuildError> {
        let template = &self.spec.coordinator.as_ref().ok_or(BuildError::NoCoordinator)?.template;
        let name = names::coordinator(&self.job);
        let url = names::url(&name, &self.namespace, replica_port(template, Role::Coordinator));
        let mut sidecar = self.sidecar();
        inject_env(&mut sidecar, &self.common_env(&name, Role::Coordinator));
        let mut replica = self.replica(Role::Coordinator, None, name, template, vec![(env::COORDINATOR_URL, url)]);
        let spec = replica.pod.spec.as_mut().expect("built pods have a spec");
        // A non-root UID the pod chose (or none: the image's own, or the platform's) is kept for
        // the sidecar too; root would fail the sidecar's runAsNonRoot.
        let pod_user = spec.security_context.as_ref().and_then(|c| c.run_as_user);
        if pod_user == Some(0) {
            sidecar.security_context.get_or_insert_default().run_as_user = Some(SIDECAR_USER);
        }
        // A template's own account is kept (and bound by `rbac`); otherwise the namespace's
        // shared one or the job's (`identity`).
        if spec.service_account_name.as_deref().is_none_or(str::is_empty) {
            spec.service_account_name = Some(default_account(&self.job, self.settings.identity));
        }
        // A native sidecar (an init container that keeps running, Kubernetes 1.29+): it answers
        // before the coordinator starts, and once the coordinator's own container exits the pod
        // ends with its outcome. As a plain container beside it, the pod would stay Running after
        // the coordinator finished, and the job with it.
        spec.init_containers.get_or_insert_with(Vec::new).insert(0, sidecar);
        let ports = replica.service.spec.as_mut().and_then(|s| s.ports.as_mut()).expect("built services have ports");
        ports.push(service_port(REPLICAS_CONTAINER_NAME, REPLICAS_PORT));
        Ok(replica)
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
                format!("--job-uid={}", self.owner.uid),
                format!("--port={REPLICAS_PORT}"),
                format!("--coordinator-address={}", coordinator_endpoint()),
            ]),
            ports: Some(vec![container_port(REPLICAS_CONTAINER_NAME, REPLICAS_PORT)]),
            env: Some(vec![from_field(env::POD_UID, "metadata.uid")]),
            restart_policy: Some("Always".into()),
            // The coordinator's container starts once the endpoint answers: DI-engine calls it at once.
            startup_probe: Some(Probe { period_seconds: Some(1), failure_threshold: Some(60), ..healthz() }),
            readiness_probe: Some(Probe { period_seconds: Some(5), ..healthz() }),
            resources: Some(ResourceRequirements {
                requests: Some(BTreeMap::from([
                    ("cpu".to_string(), Quantity("10m".into())),
                    ("memory".to_string(), Quantity("16Mi".into())),
                ])),
                limits: Some(BTreeMap::from([("memory".to_string(), Quantity(format!("{MEMORY_LIMIT_MIB}Mi")))])),
                ..Default::default()
            }),
            // Pod Security's `restricted` profile, on this container alone: a namespace that
            // enforces it admits the pod when the user's own containers comply.
            security_context: Some(SecurityContext {
                run_as_non_root: Some(true),
                read_only_root_filesystem: Some(true),
                allow_privilege_escalation: Some(false),
                capabilities: Some(Capabilities { drop: Some(vec!["ALL".into()]), add: None }),
                seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".into(), localhost_profile: None }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }
}

/// An environment variable the kubelet fills from the pod's own field (the downward API).
fn from_field(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector { field_path: path.into(), ..Default::default() }),
            ..Default::default()
        }),
    }
}
