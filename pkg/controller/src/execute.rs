//! Carrying out a pass's actions against the API server. Every call is safe to repeat: a create
//! that finds its object, or a delete that finds it gone, is success.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use di_api::DIJob;
use di_api::contract::names;
use di_client::is_status;
use k8s_openapi::api::core::v1::{Pod, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role as RbacRole, RoleBinding};
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;
use tracing::info;

use crate::context::{Context, publish_on};
use crate::created::Kind;
use crate::decision::{Action, Why};
use crate::desired::identity;
use crate::error::Error;
use crate::refusals::Stop;
use crate::writes::{create, create_owned, delete, delete_owned};

/// Carries out the actions; whether any pod was created.
pub(crate) async fn execute(ctx: &Arc<Context>, job: &DIJob, actions: &[Action]) -> Result<bool, Error> {
    let namespace = job.namespace().unwrap_or_default();
    let rbac = actions.iter().find_map(|a| match a {
        Action::CreateRbac(rbac) => Some(rbac),
        _ => None,
    });
    // The namespace's shared identity, when this process has not made or found it yet.
    let shared = actions.contains(&Action::EnsureNamespaceIdentity) && !ctx.namespaces.ready(&namespace);
    // The RoleBinding's create waits on the API server's escalation check, which lists bindings
    // from a cache that must first catch up with the writes just made (about 100 ms). So only the
    // coordinator pod waits for the RBAC (a coordinator that exists means its sidecar's RBAC does,
    // even after a crash); every other service and pod is created meanwhile.
    let coordinator = names::coordinator(&job.name_any());
    let (after_grants, others): (Vec<&Action>, Vec<&Action>) = actions.iter().partition(|a| {
        (rbac.is_some() || shared) && matches!(a, Action::CreatePod(pod) if pod.name_any() == coordinator)
    });
    let uid = job.uid().unwrap_or_default();
    let creates = actions.iter().any(|a| matches!(a, Action::CreatePod(_) | Action::CreateService(_)));
    let _creating = creates.then(|| ctx.pacer.creates.start());
    let stop = Stop::default();
    // Every gang's PodGroup before any pod that joins it.
    crate::podgroups::apply_all(ctx, job, actions).await?;
    // The core's disruption budget before the core pods it covers.
    crate::budgets::apply(ctx, job, actions).await?;
    if let Some(rbac) = rbac {
        let accounts = Api::<ServiceAccount>::namespaced(ctx.client.clone(), &namespace);
        create_owned(&accounts, &rbac.service_account, &uid).await?;
    }
    let grants_then_coordinator = async {
        if let Some(rbac) = rbac {
            create_owned(&Api::<RbacRole>::namespaced(ctx.client.clone(), &namespace), &rbac.role, &uid).await?;
            create_owned(&Api::<RoleBinding>::namespaced(ctx.client.clone(), &namespace), &rbac.binding, &uid).await?;
        }
        if shared {
            // Made once per namespace and never deleted; one that exists is taken as it is.
            let (account, binding) = identity::namespace_identity(&namespace);
            create(&Api::<ServiceAccount>::namespaced(ctx.client.clone(), &namespace), &account).await?;
            create(&Api::<RoleBinding>::namespaced(ctx.client.clone(), &namespace), &binding).await?;
            ctx.namespaces.mark_ready(&namespace);
        }
        carry_out(ctx, job, &after_grants, &stop).await
    };
    // Both to their end: a refused collector does not keep the coordinator from being created.
    let (mut done, more) = match futures::join!(grants_then_coordinator, carry_out(ctx, job, &others, &stop)) {
        (Ok(done), Ok(more)) => (done, more),
        (Err(e), _) | (_, Err(e)) => {
            // Someone may have deleted the namespace's shared identity (kubectl di uninstall):
            // the next pass makes sure of it again rather than trust what this process saw.
            if actions.contains(&Action::EnsureNamespaceIdentity) {
                ctx.namespaces.forget(&namespace);
            }
            return Err(e);
        }
    };
    done.created.extend(more.created);
    done.deleted.extend(more.deleted);
    done.replaced.extend(more.replaced);
    report(ctx, job, &done);
    Ok(!done.created.is_empty())
}

/// What a pass changed, for its events.
#[derive(Default)]
struct Done {
    created: Vec<String>,
    deleted: Vec<(String, Why)>,
    replaced: Vec<String>,
}

/// Every action but the replica identity's. What creates nothing goes first, one after another in
/// the plan's order (a replacement's restart is counted on its Service before the replacement
/// exists); then the creates, concurrently (`creates`, in the order of `in_order`).
async fn carry_out(ctx: &Arc<Context>, job: &DIJob, actions: &[&Action], stop: &Stop) -> Result<Done, Error> {
    let namespace = job.namespace().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    let services: Api<Service> = Api::namespaced(ctx.client.clone(), &namespace);
    let (mut deleted, mut replaced) = (vec![], vec![]);
    let (mut new_services, mut new_pods) = (vec![], vec![]);
    for &action in actions {
        match action {
            Action::CreateRbac(_)
            | Action::EnsureNamespaceIdentity
            | Action::ApplyPodGroup(_)
            | Action::ApplyDisruptionBudget(_) => {}
            Action::DeletePodGroup { name } => crate::podgroups::delete(ctx, job, name).await?,
            Action::DeleteDisruptionBudget { name } => {
                let budgets = Api::<PodDisruptionBudget>::namespaced(ctx.client.clone(), &namespace);
                delete_owned(&budgets, name, &job.uid().unwrap_or_default()).await?;
            }
            Action::CreateService(service) => new_services.push(&**service),
            Action::CreatePod(pod) => new_pods.push(&**pod),
            Action::MarkRestart { service, mark } => {
                // The UID, when known, makes this a write to the Service that was read.
                let patch = json!({"metadata": {"uid": mark.service_uid, "annotations": mark.annotations()}});
                match services.patch(service, &PatchParams::default(), &Patch::Merge(&patch)).await {
                    Ok(_) => {
                        ctx.marks.wrote(&namespace, service, mark.clone());
                        replaced.push(format!("{service} (restart {})", mark.restarts));
                    }
                    // Gone or replaced: the pass that sees the new Service counts afresh.
                    Err(e) if is_status(&e, 404) || is_status(&e, 409) => {}
                    Err(source) => return Err(Error::MarkRestart { service: service.clone(), source }),
                }
            }
            Action::DeletePod { name, uid, why } => {
                if delete(&pods, name, Some(uid)).await? {
                    ctx.metrics.pods_deleted.inc();
                    deleted.push((name.clone(), *why));
                }
            }
            Action::ReleaseStranded { name, uid, node } => {
                if crate::stranded::release(ctx, &pods, name, uid, node).await? {
                    ctx.metrics.pods_deleted.inc();
                    deleted.push((name.clone(), Why::NodeLost));
                }
            }
            Action::DeleteService { name, uid } => {
                delete(&services, name, Some(uid)).await?;
            }
            Action::DeleteRbac => {
                let identity = di_api::contract::names::replicas_identity(&job.name_any());
                // Job `di`'s own identity would be the namespace's shared one, which is no job's.
                if identity == crate::desired::identity::SHARED {
                    continue;
                }
                let uid = job.uid().unwrap_or_default();
                delete_owned(&Api::<RoleBinding>::namespaced(ctx.client.clone(), &namespace), &identity, &uid).await?;
                delete_owned(&Api::<RbacRole>::namespaced(ctx.client.clone(), &namespace), &identity, &uid).await?;
                delete_owned(&Api::<ServiceAccount>::namespaced(ctx.client.clone(), &namespace), &identity, &uid)
                    .await?;
            }
            Action::CreateWorkload(workload) => crate::workloads::create(ctx, job, workload).await?,
            Action::WriteWorkloadStatus(written) => crate::workloads::write_status(ctx, job, written).await?,
            Action::DeleteWorkload { name, uid, resource_version } => {
                crate::workloads::delete(ctx, job, name, uid, resource_version).await?
            }
            Action::AdoptWorkload { name, resource_version, owner } => {
                crate::workloads::adopt(ctx, job, name, resource_version, owner).await?
            }
            Action::SetWorkloadActive { name, resource_version, active } => {
                let spec = serde_json::json!({"active": active});
                crate::workloads::patch_spec(ctx, job, name, resource_version, spec).await?
            }
            Action::SetWorkloadPriority { name, resource_version, priority } => {
                let spec = serde_json::json!({"priority": priority});
                crate::workloads::patch_spec(ctx, job, name, resource_version, spec).await?
            }
            Action::DeleteJob => {
                let jobs: Api<DIJob> = Api::namespaced(ctx.client.clone(), &namespace);
                // This job, not one submitted again under its name since.
                let params = DeleteParams {
                    propagation_policy: Some(kube::api::PropagationPolicy::Background),
                    preconditions: Some(Preconditions { uid: job.uid(), ..Default::default() }),
                    ..Default::default()
                };
                match jobs.delete(&job.name_any(), &params).await {
                    Ok(_) => info!(job = %job.name_any(), "deleted after its TTL"),
                    Err(e) if is_status(&e, 404) || is_status(&e, 409) => {}
                    Err(source) => return Err(Error::DeleteJob { source }),
                }
            }
        }
    }
    let (first, then) = in_order(new_services, new_pods);
    create_all(ctx, job, (&pods, &services), first, stop).await?;
    let created = create_all(ctx, job, (&pods, &services), then, stop).await?;
    ctx.metrics.pods_created.inc_by(created.len() as u64);
    Ok(Done { created, deleted, replaced })
}

/// One create of a pass.
#[derive(Clone, Copy, Debug, PartialEq)]
enum New<'a> {
    Service(&'a Service),
    Pod(&'a Pod),
}

impl New<'_> {
    fn kind(self) -> Kind {
        match self {
            New::Service(_) => Kind::Service,
            New::Pod(_) => Kind::Pod,
        }
    }
}

/// The creates that go first, and those that go after them. A Service that is no pod's own (a
/// task job's headless Service) goes first: its pods look their peers up through it from their
/// first moment, so one that is refused leaves them to the pass after it. Then every pod, then
/// the pods' own Services: a pod takes far longer to run than a Service to exist, and nothing in
/// the pod needs its Service when it is created, so a big job's pods reach the nodes in half the
/// creates (as Kubeflow's training operator, pods before Services) and its Services come while
/// the pods start.
fn in_order<'a>(services: Vec<&'a Service>, pods: Vec<&'a Pod>) -> (Vec<New<'a>>, Vec<New<'a>>) {
    let names: HashSet<String> = pods.iter().map(|p| p.name_any()).collect();
    let (own, first): (Vec<&Service>, Vec<&Service>) =
        services.into_iter().partition(|s| names.contains(&s.name_any()));
    let mut own: HashMap<String, &Service> = own.into_iter().map(|s| (s.name_any(), s)).collect();
    // The Services in their pods' order, which is the plan's (replica order).
    let own: Vec<New> = pods.iter().filter_map(|pod| own.remove(&pod.name_any())).map(New::Service).collect();
    let then = pods.into_iter().map(New::Pod).chain(own).collect();
    (first.into_iter().map(New::Service).collect(), then)
}

/// Warnings of their own for a pass's failed creates beyond the first (whose Warning is the
/// pass's), at most: a quota that refuses a thousand pods is told by a few.
const MORE_WARNINGS: usize = 4;

/// Creates `objects` concurrently (`creates`), in their order; the names of the pods this call
/// made (not found existing). Every create is tried unless `stop` says it would be refused; a
/// failed one is told on the job by a Warning naming it, and the pass fails with the first
/// failure, to run again after its backoff. A namespace being deleted is told by no Warning:
/// the job goes with it (`teardown`).
async fn create_all(
    ctx: &Arc<Context>,
    job: &DIJob,
    (pods, services): (&Api<Pod>, &Api<Service>),
    objects: Vec<New<'_>>,
    stop: &Stop,
) -> Result<Vec<String>, Error> {
    let uid = job.uid().unwrap_or_default();
    let tasks: Vec<_> = objects
        .into_iter()
        .map(|object| {
            let uid = &uid;
            move || async move {
                let kind = object.kind();
                if stop.skips(kind) {
                    return Ok(None);
                }
                let made = match object {
                    New::Service(service) => create_one(ctx, services, uid, kind, service).await.map(|_| None),
                    New::Pod(pod) => create_one(ctx, pods, uid, kind, pod).await,
                };
                if let Err(e) = &made
                    && let Some(answer) = e.answer()
                {
                    stop.after(kind, answer);
                }
                made
            }
        })
        .collect();
    let results = ctx.creates.run_all(tasks).await;
    let (mut made, mut failed) = (vec![], vec![]);
    for result in results {
        match result {
            Ok(name) => made.extend(name),
            Err(e) => failed.push(e),
        }
    }
    let mut failed = failed.into_iter();
    let Some(first) = failed.next() else { return Ok(made) };
    for other in failed.filter(|e| !e.says_namespace_terminating()).take(MORE_WARNINGS) {
        publish_on(ctx, job, EventType::Warning, &other.kind(), "Reconcile", Some(other.to_string()));
    }
    Err(first)
}

/// One event per kind of change in a pass, not one per pod: a 500-replica job must not cost 500
/// events.
fn report(ctx: &Arc<Context>, job: &DIJob, done: &Done) {
    let Done { created, deleted, replaced } = done;
    if !created.is_empty() {
        publish_on(ctx, job, EventType::Normal, "Created", "CreatePods", Some(summary("created", created)));
    }
    if !replaced.is_empty() {
        publish_on(
            ctx,
            job,
            EventType::Warning,
            "Replaced",
            "ReplaceFailedPods",
            Some(summary("replacing failed", replaced)),
        );
    }
    for (why, reason) in [
        (Why::ScaledDown, "ScaledDown"),
        (Why::Suspended, "Suspended"),
        (Why::Cleanup, "CleanedUp"),
        (Why::AggregatorFailed, "AggregatorFailed"),
        (Why::Reported, "ReportedFailed"),
        (Why::Rebuilt, "Rebuilt"),
        (Why::JobRestart, "JobRestarted"),
        (Why::Disrupted, "Disrupted"),
        (Why::Reclaimed, "Reclaimed"),
        (Why::NodeLost, "NodeLost"),
    ] {
        let names: Vec<String> = deleted.iter().filter(|(_, w)| *w == why).map(|(n, _)| n.clone()).collect();
        if !names.is_empty() {
            publish_on(ctx, job, EventType::Normal, reason, "DeletePods", Some(summary("deleted", &names)));
        }
    }
}

fn summary(verb: &str, names: &[String]) -> String {
    const SHOWN: usize = 10;
    let mut text =
        format!("{verb} {} pod(s): {}", names.len(), names.iter().take(SHOWN).cloned().collect::<Vec<_>>().join(", "));
    if names.len() > SHOWN {
        text.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    text
}

/// Creates one object of the job `uid`; its name when this call made it.
async fn create_one<K>(ctx: &Context, api: &Api<K>, uid: &str, kind: Kind, object: &K) -> Result<Option<String>, Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let made = create_owned(api, object, uid).await?;
    // Created or found existing and the job's, either way it is there: no pass creates it again
    // before the cache shows it.
    ctx.created.wrote(uid, kind, &object.name_any());
    Ok(made.then(|| object.name_any()))
}

#[cfg(test)]
mod tests {
    use kube::api::ObjectMeta;

    use super::*;

    fn named<K: Resource + Default>(name: &str) -> K {
        let mut object = K::default();
        *object.meta_mut() = ObjectMeta { name: Some(name.into()), ..Default::default() };
        object
    }

    #[test]
    fn a_headless_service_goes_first_then_the_pods_then_their_own_services() {
        let services: Vec<Service> = ["di-job", "job-collector-1", "job-collector-0"].map(named).into();
        let pods: Vec<Pod> = ["job-collector-0", "job-collector-1", "job-collector-2"].map(named).into();
        let (first, then) = in_order(services.iter().collect(), pods.iter().collect());
        let names = |creates: &[New]| -> Vec<String> {
            let name = |create: &New| match create {
                New::Service(s) => format!("service {}", s.name_any()),
                New::Pod(p) => format!("pod {}", p.name_any()),
            };
            creates.iter().map(name).collect()
        };
        assert_eq!(names(&first), ["service di-job"]);
        assert_eq!(
            names(&then),
            [
                "pod job-collector-0",
                "pod job-collector-1",
                "pod job-collector-2",
                "service job-collector-0",
                "service job-collector-1"
            ]
        );
        // A replica's Service whose pod exists already is no pod's of this pass: it goes first.
        let (first, then) = in_order(services.iter().collect(), vec![]);
        assert_eq!(first.len(), 3);
        assert!(then.is_empty());
    }
}
