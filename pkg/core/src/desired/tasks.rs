//! A task job's objects: one pod per member (`<job>-<task>-<i>`, with its host name and the
//! job's subdomain) and one headless Service, `di-<job>`, that gives every pod its FQDN. The
//! names, ranks and environment are di-api's (`di_api::tasks`); here they become objects.

use std::collections::BTreeMap;

use di_api::DIJob;
use di_api::contract::{env, labels};
use di_api::task::TaskType;
use di_api::tasks::{self, Member, TASK_LABEL, annotations};
use k8s_openapi::api::core::v1::{Pod, Service, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use super::{BuildError, Settings, inject_env, job_labels, owner_reference, pod_spec};

/// One pod of a task job.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskPod {
    pub member: Member,
    /// Whether its success decides the job's.
    pub completion: bool,
    pub pod: Pod,
}

/// Everything a task job should have: its pods in rank order and its Service.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskObjects {
    pub pods: Vec<TaskPod>,
    pub service: Service,
    /// The peer set the pods are built for ([`annotations::PEERS`]).
    pub peers: String,
}

pub fn task_objects(job: &DIJob, settings: &Settings) -> Result<TaskObjects, BuildError> {
    let name = job.name_any();
    let namespace = job.namespace().unwrap_or_default();
    let owner = owner_reference(job, &settings.owner_version)?;
    let tasks = tasks::tasks(job);
    let peers = tasks::peers(&tasks);
    let total = tasks::pod_count(&tasks).to_string();
    let subdomain = tasks::subdomain(&name);
    let mut pods = vec![];
    for (member, contract) in tasks::environment(job, &tasks, &settings.cluster_domain) {
        let task = tasks.iter().find(|t| t.name == member.task).expect("every member comes from a task");
        let template = task.template;
        let tmeta = template.metadata.clone().unwrap_or_default();
        let mut pod_labels = tmeta.labels.unwrap_or_default();
        pod_labels.extend(job_labels(&name, None));
        pod_labels.insert(labels::APP_COMPONENT.into(), member.task.clone());
        pod_labels.insert(TASK_LABEL.into(), member.task.clone());
        pod_labels.insert(labels::REPLICA_INDEX.into(), member.index.to_string());
        pod_labels.insert(labels::POD_NAME.into(), member.pod.clone());
        let mut pod_annotations = tmeta.annotations.unwrap_or_default();
        pod_annotations.extend([
            (annotations::RANK.to_owned(), member.rank.to_string()),
            (annotations::TASK_RANK.to_owned(), member.index.to_string()),
            (annotations::REPLICAS.to_owned(), total.clone()),
            (annotations::PEERS.to_owned(), peers.clone()),
        ]);

        let mut spec = pod_spec(&job.spec, template);
        if task.type_ == TaskType::Collector {
            crate::node_loss::tolerate(&mut spec);
        }
        spec.hostname = Some(member.pod.clone());
        spec.subdomain = Some(subdomain.clone());
        let mut vars: Vec<(&str, String)> =
            vec![(env::POD_NAMESPACE, namespace.clone()), (env::POD_NAME, member.pod.clone())];
        vars.extend(contract.iter().map(|(k, v)| (k.as_str(), v.clone())));
        for container in spec.containers.iter_mut().chain(spec.init_containers.iter_mut().flatten()) {
            inject_env(container, &vars);
        }
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some(member.pod.clone()),
                namespace: Some(namespace.clone()),
                labels: Some(pod_labels),
                annotations: Some(pod_annotations),
                owner_references: Some(vec![owner.clone()]),
                ..Default::default()
            },
            spec: Some(spec),
            ..Default::default()
        };
        pods.push(TaskPod { member, completion: task.completion, pod });
    }

    let service = Service {
        metadata: ObjectMeta {
            name: Some(subdomain),
            namespace: Some(namespace),
            labels: Some(job_labels(&name, None)),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            // Headless, without ports: it exists for the pods' DNS records.
            cluster_ip: Some("None".into()),
            // Peers resolve each other before they are ready.
            publish_not_ready_addresses: Some(true),
            selector: Some(BTreeMap::from([
                (labels::JOB_NAME.to_string(), name),
                (labels::APP_MANAGED_BY.to_string(), labels::MANAGED_BY_VALUE.to_string()),
            ])),
            ..Default::default()
        }),
        ..Default::default()
    };
    Ok(TaskObjects { pods, service, peers })
}
