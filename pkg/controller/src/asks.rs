//! What asks for a job's pass: each watch's reports turned into the jobs they concern (the
//! job itself, its pods and Services by their job label, the configs its learners use, its
//! Workload), and the filter that lets through only the reports that need a pass now
//! (`triggers`), sending those that may wait to `later`.

use std::sync::Arc;

use di_api::AggregatorConfig;
use futures::StreamExt;
use futures::stream::BoxStream;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use tracing::warn;

use crate::desired::{self, Settings};
use crate::later::Later;
use crate::triggers::{Changes, Trigger};
use crate::view::{JobMember, JobView};

/// The jobs whose learners need `config`: a config that appears or changes brings their pass
/// at once, instead of at their next periodic look.
pub(crate) fn jobs_using(
    jobs: &[Arc<JobView>],
    config: &AggregatorConfig,
    settings: &Settings,
) -> Vec<ObjectRef<JobView>> {
    let wanted = (config.namespace().unwrap_or_default(), config.name_any());
    let uses = |view: &JobView| {
        let Ok(job) = view.to_job() else { return false };
        di_api::resources::needs_aggregator(&job) && desired::aggregator_config_ref(&job, settings) == wanted
    };
    jobs.iter().filter(|view| uses(view)).map(|view| ObjectRef::from_obj(view.as_ref())).collect()
}

/// A watch's reports as the jobs they ask a pass for (`to_jobs`: none, one or several). A
/// (re)list asks for every job once it is done, when its cache holds what was listed: asked for
/// object by object while it lists, a pass would find the cache of before (a job listed at
/// start-up not in it at all). A watch's error is logged, and the watch goes on after its backoff.
pub(crate) fn asks_for<K, J>(
    stream: impl futures::Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static,
    jobs: &Store<JobView>,
    to_jobs: impl Fn(K) -> J + Send + 'static,
) -> BoxStream<'static, ObjectRef<JobView>>
where
    J: IntoIterator<Item = ObjectRef<JobView>>,
{
    let jobs = jobs.clone();
    stream
        .flat_map(move |event| {
            let asked: Vec<ObjectRef<JobView>> = match event {
                Ok(Event::Apply(object) | Event::Delete(object)) => to_jobs(object).into_iter().collect(),
                Ok(Event::Init | Event::InitApply(_)) => vec![],
                Ok(Event::InitDone) => jobs.state().iter().map(|job| ObjectRef::from_obj(job.as_ref())).collect(),
                Err(e) => {
                    warn!("watch: {e}");
                    vec![]
                }
            };
            futures::stream::iter(asked)
        })
        .boxed()
}

/// A watch's filter of reports: what starts a pass at once goes on to the dispatcher, what may
/// wait goes to `later` (see `triggers`), the rest nowhere; errors go on, for `asks_for` to log.
pub(crate) fn paced<K: JobMember, E>(
    mut changes: impl Changes<K>,
    later: Later,
) -> impl FnMut(&Result<Event<K>, E>) -> std::future::Ready<bool> {
    move |event| {
        let Ok(event) = event else { return std::future::ready(true) };
        let asked = changes.trigger(event);
        if let (Trigger::Later, Event::Apply(object)) = (asked, event)
            && let Some(job) = job_of(object)
        {
            later.wait(job);
        }
        std::future::ready(asked == Trigger::Now)
    }
}

/// The job an object belongs to, by its label: the trigger of a pass when the object changes.
pub(crate) fn job_of<K: JobMember>(object: &K) -> Option<ObjectRef<JobView>> {
    Some(ObjectRef::new(object.job()?).within(&object.namespace()?))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Pod, Service};
    use serde_json::json;

    use super::*;

    #[test]
    fn objects_trigger_the_job_their_label_names() {
        let labelled = json!({"metadata": {"name": "job-collector-0", "namespace": "ns",
                                          "labels": {di_api::contract::labels::JOB_NAME: "job"}}});
        let pod: Pod = serde_json::from_value(labelled.clone()).unwrap();
        let service: Service = serde_json::from_value(labelled).unwrap();
        assert_eq!(job_of(&pod), Some(ObjectRef::new("job").within("ns")));
        assert_eq!(job_of(&service), Some(ObjectRef::new("job").within("ns")));
        assert_eq!(job_of(&Pod::default()), None);
    }

    #[tokio::test]
    async fn a_list_asks_for_every_job_once_it_is_done_and_a_change_for_its_own() {
        let view = |name: &str| -> JobView {
            let container = json!({"containers": [{"name": "di-container", "image": "ding"}]});
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ns"},
                "spec": {"coordinator": {"template": {"spec": container}}},
            }))
            .unwrap()
        };
        let (jobs, mut writer) = kube::runtime::reflector::store();
        for name in ["x", "y"] {
            writer.apply_watcher_event(&Event::Apply(view(name)));
        }
        let pod = |job: &str| -> Pod {
            serde_json::from_value(json!({"metadata": {"name": format!("{job}-collector-0"), "namespace": "ns",
                                                       "labels": {di_api::contract::labels::JOB_NAME: job}}}))
            .unwrap()
        };
        let events = vec![
            Ok(Event::Init),
            Ok(Event::InitApply(pod("x"))),
            Ok(Event::InitDone),
            Err(watcher::Error::NoResourceVersion),
            Ok(Event::Apply(pod("z"))),
            Ok(Event::Delete(pod("y"))),
        ];
        let asked: Vec<String> =
            asks_for(futures::stream::iter(events), &jobs, |pod| job_of(&pod)).map(|job| job.name).collect().await;
        let mut listed = asked[..2].to_vec();
        listed.sort();
        assert_eq!(listed, ["x", "y"], "every job, once the list is done");
        assert_eq!(asked[2..], ["z", "y"], "then each change's job");
    }

    #[test]
    fn a_config_triggers_the_jobs_whose_learners_need_it() {
        let job = |name: &str, gpus: i32, config: Option<&str>| -> Arc<JobView> {
            let container = json!({"containers": [{"name": "di-container", "image": "ding"}]});
            let view = json!({
                "metadata": {"name": name, "namespace": "ns"},
                "spec": {"coordinator": {"template": {"spec": container}},
                         "learner": {"replicas": 1, "gpus": gpus, "aggregatorConfig": config, "template": {"spec": container}}},
            });
            Arc::new(serde_json::from_value(view).unwrap())
        };
        let jobs = [
            job("named", 2, Some("agg")),
            job("qualified", 4, Some("ns/agg")),
            job("elsewhere", 2, Some("other/agg")),
            job("single-gpu", 1, Some("agg")),
            job("default", 2, None),
        ];
        let config = |namespace: &str, name: &str| -> AggregatorConfig {
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": namespace}, "spec": {}})).unwrap()
        };
        let names = |config: &AggregatorConfig| -> Vec<String> {
            jobs_using(&jobs, config, &Settings::default()).into_iter().map(|r| r.name).collect()
        };
        assert_eq!(names(&config("ns", "agg")), ["named", "qualified"]);
        assert_eq!(names(&config("other", "agg")), ["elsewhere"]);
        let (namespace, name) = Settings::default()
            .default_aggregator_config
            .split_once('/')
            .map(|(n, c)| (n.to_owned(), c.to_owned()))
            .unwrap();
        assert_eq!(names(&config(&namespace, &name)), ["default"]);
    }
}
