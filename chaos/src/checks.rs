//! What every fault checks at its end, as a pure function of the namespace's jobs, pods and
//! services: every job in the phase it should be in with the desired counts it was given, exactly
//! the pods and services its desired counts call for (none missing, none extra, none still
//! terminating), and every pod and service owned by a job that exists.

use std::collections::{BTreeMap, BTreeSet};

use di_api::contract::{Role, labels, names};
use di_api::{DIJob, Phase};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::{Resource, ResourceExt};

/// How one job should end up.
#[derive(Clone, Debug)]
pub struct Expect {
    pub job: String,
    pub phase: Phase,
    /// Desired collectors: what was submitted, plus what accepted requests added.
    pub collectors: i32,
    /// The pods, and the services, that should exist (each pod has a service of its name).
    pub objects: BTreeSet<String>,
}

impl Expect {
    /// Running with its coordinator and every collector.
    pub fn running(job: &str, collectors: i32) -> Expect {
        let mut objects: BTreeSet<String> =
            (0..collectors as u32).map(|i| names::replica(job, Role::Collector, i)).collect();
        objects.insert(names::coordinator(job));
        Expect { job: job.into(), phase: Phase::Running, collectors, objects }
    }

    /// Finished with nothing left (cleanPodPolicy All).
    pub fn finished_clean(job: &str, phase: Phase, collectors: i32) -> Expect {
        Expect { job: job.into(), phase, collectors, objects: BTreeSet::new() }
    }
}

/// What a fault checked (each a short line of the table) and what it lost (empty: nothing).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Verdict {
    pub checks: Vec<String>,
    pub lost: Vec<String>,
}

impl Verdict {
    pub fn check(&mut self, line: impl Into<String>) {
        self.checks.push(line.into());
    }

    pub fn lose(&mut self, what: impl Into<String>) {
        self.lost.push(what.into());
    }

    pub fn merge(&mut self, other: Verdict) {
        self.checks.extend(other.checks);
        self.lost.extend(other.lost);
    }
}

/// Judges the namespace's state against what every job should have come to.
pub fn judge(expect: &[Expect], jobs: &[&DIJob], pods: &[&Pod], services: &[&Service]) -> Verdict {
    let mut verdict = Verdict::default();
    let by_name: BTreeMap<String, &DIJob> = jobs.iter().map(|j| (j.name_any(), *j)).collect();

    let mut in_phase = 0;
    for e in expect {
        let Some(job) = by_name.get(&e.job) else {
            verdict.lose(format!("job {} is gone", e.job));
            continue;
        };
        let status = job.status.as_ref();
        let phase = status.and_then(|s| s.phase);
        let desired = job.spec.collector_replicas();
        let counts = status.and_then(|s| s.collectors.as_deref()).unwrap_or("-");
        let full = format!("{0}/{0}", e.collectors);
        if phase != Some(e.phase) {
            verdict.lose(format!("job {} is {phase:?}, not {:?}", e.job, e.phase));
        } else if desired != e.collectors {
            verdict.lose(format!("job {} wants {desired} collectors, not {}", e.job, e.collectors));
        } else if e.phase == Phase::Running && counts != full {
            verdict.lose(format!("job {} has {counts} collectors ready, not {full}", e.job));
        } else {
            in_phase += 1;
        }
    }
    let phases: BTreeSet<String> = expect.iter().map(|e| format!("{:?}", e.phase)).collect();
    let phases = phases.into_iter().collect::<Vec<_>>().join("/");
    verdict.check(format!("{in_phase}/{} jobs {phases} with the desired counts given", expect.len()));

    let wanted: usize = expect.iter().map(|e| e.objects.len()).sum();
    let pods_exact = exact(expect, "pod", pods, &mut verdict);
    let services_exact = exact(expect, "service", services, &mut verdict);
    verdict.check(format!(
        "pods {} (of {wanted} wanted), services {} (of {wanted})",
        count_line(pods.len(), pods_exact),
        count_line(services.len(), services_exact)
    ));

    let uids: BTreeMap<String, String> = jobs.iter().map(|j| (j.uid().unwrap_or_default(), j.name_any())).collect();
    let mut orphans = 0;
    for (kind, meta) in pods.iter().map(|p| ("pod", p.meta())).chain(services.iter().map(|s| ("service", s.meta()))) {
        let name = meta.name.clone().unwrap_or_default();
        let controller = meta.owner_references.iter().flatten().find(|r| r.controller == Some(true));
        let label = meta.labels.as_ref().and_then(|l| l.get(labels::JOB_NAME));
        let problem = match controller {
            None => Some("has no owner".to_string()),
            Some(owner) => match uids.get(&owner.uid) {
                None => Some(format!("is owned by UID {}, which no job has", owner.uid)),
                Some(job) if Some(job) != label => Some(format!("is owned by job {job} but labelled {label:?}")),
                Some(_) => None,
            },
        };
        if let Some(problem) = problem {
            orphans += 1;
            verdict.lose(format!("{kind} {name} {problem}"));
        }
    }
    verdict.check(format!("{orphans} pods or services without their job"));
    verdict
}

fn count_line(found: usize, exact: bool) -> String {
    if exact { format!("{found} exact") } else { format!("{found} NOT exact") }
}

/// Whether the objects of one kind are exactly the expected ones, none terminating; says what
/// differs when not.
fn exact<K: Resource>(expect: &[Expect], kind: &str, objects: &[&K], verdict: &mut Verdict) -> bool {
    let mut ok = true;
    let mut by_job: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for object in objects {
        let job = object.meta().labels.as_ref().and_then(|l| l.get(labels::JOB_NAME)).cloned().unwrap_or_default();
        by_job.entry(job).or_default().insert(object.meta().name.clone().unwrap_or_default());
        if object.meta().deletion_timestamp.is_some() {
            ok = false;
            verdict.lose(format!("{kind} {} is still terminating", object.meta().name.as_deref().unwrap_or("")));
        }
    }
    for e in expect {
        let found = by_job.remove(&e.job).unwrap_or_default();
        let missing: Vec<String> = e.objects.difference(&found).cloned().collect();
        let extra: Vec<String> = found.difference(&e.objects).cloned().collect();
        if !missing.is_empty() {
            ok = false;
            verdict.lose(format!("job {}: {} {kind}s missing: {}", e.job, missing.len(), some(&missing)));
        }
        if !extra.is_empty() {
            ok = false;
            verdict.lose(format!("job {}: {} {kind}s extra: {}", e.job, extra.len(), some(&extra)));
        }
    }
    for (job, left) in by_job {
        ok = false;
        let left: Vec<String> = left.into_iter().collect();
        verdict.lose(format!("{} {kind}s of job {job:?}, which no check expects: {}", left.len(), some(&left)));
    }
    ok
}

/// The first few of a long list of names.
pub fn some(names: &[String]) -> String {
    const SHOWN: usize = 5;
    let mut text = names.iter().take(SHOWN).cloned().collect::<Vec<_>>().join(", ");
    if names.len() > SHOWN {
        text.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    text
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn job(name: &str, uid: &str, collectors: i32, phase: &str, ready: &str) -> DIJob {
        let pod = json!({"containers": [{"name": "di-container", "image": "ding"}]});
        serde_json::from_value(json!({
            "apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJob",
            "metadata": {"name": name, "uid": uid},
            "spec": {"coordinator": {"template": {"spec": pod}}, "collector": {"replicas": collectors, "template": {"spec": pod}}},
            "status": {"phase": phase, "collectors": ready},
        }))
        .unwrap()
    }

    fn owned(name: &str, job: &str, uid: &str) -> serde_json::Value {
        json!({"metadata": {"name": name, "labels": {labels::JOB_NAME: job},
               "ownerReferences": [{"apiVersion": "v1", "kind": "DIJob", "name": job, "uid": uid, "controller": true}]}})
    }

    #[test]
    fn a_job_with_exactly_its_objects_loses_nothing() {
        let jobs = [job("a", "u1", 1, "Running", "1/1")];
        let names = ["a-coordinator", "a-collector-0"];
        let pods: Vec<Pod> = names.iter().map(|n| serde_json::from_value(owned(n, "a", "u1")).unwrap()).collect();
        let services: Vec<Service> =
            names.iter().map(|n| serde_json::from_value(owned(n, "a", "u1")).unwrap()).collect();
        let verdict = judge(
            &[Expect::running("a", 1)],
            &jobs.iter().collect::<Vec<_>>(),
            &pods.iter().collect::<Vec<_>>(),
            &services.iter().collect::<Vec<_>>(),
        );
        assert_eq!(verdict.lost, Vec::<String>::new());
        assert_eq!(verdict.checks[1], "pods 2 exact (of 2 wanted), services 2 exact (of 2)");
    }

    #[test]
    fn missing_extra_and_orphaned_objects_are_lost() {
        let jobs = [job("a", "u1", 2, "Running", "1/2")];
        let pods: Vec<Pod> = [owned("a-coordinator", "a", "u1"), owned("a-collector-5", "a", "old")]
            .into_iter()
            .map(|v| serde_json::from_value(v).unwrap())
            .collect();
        let verdict =
            judge(&[Expect::running("a", 2)], &jobs.iter().collect::<Vec<_>>(), &pods.iter().collect::<Vec<_>>(), &[]);
        let lost = verdict.lost.join("\n");
        assert!(lost.contains("1/2 collectors ready"), "{lost}");
        assert!(lost.contains("2 pods missing: a-collector-0, a-collector-1"), "{lost}");
        assert!(lost.contains("1 pods extra: a-collector-5"), "{lost}");
        assert!(lost.contains("3 services missing"), "{lost}");
        assert!(lost.contains("pod a-collector-5 is owned by UID old, which no job has"), "{lost}");
    }

    #[test]
    fn long_lists_are_cut_short() {
        let names: Vec<String> = (0..7).map(|i| format!("p{i}")).collect();
        assert_eq!(some(&names), "p0, p1, p2, p3, p4 and 2 more");
    }
}
