//! A job's Kueue queue (its label) changes only while no pod of it may run.

mod common;

use common::{update_errors, valid_job};
use di_api::DIJob;
use serde_json::json;

#[test]
fn a_jobs_queue_changes_only_while_no_pod_of_it_may_run() {
    use di_api::contract::kueue::{QUEUE_NAME, QUEUED};
    let in_queue = |job: &mut DIJob, queue: &str| {
        job.metadata.labels.get_or_insert_default().insert(QUEUE_NAME.into(), queue.into());
    };
    let with_status = |status: serde_json::Value| {
        let mut job = valid_job();
        in_queue(&mut job, "team");
        job.status = Some(serde_json::from_value(status).unwrap());
        job
    };
    let running = with_status(json!({"phase": "Running"}));
    let waiting = with_status(json!({"phase": "Created", "conditions": [{"type": QUEUED, "status": "True"}]}));
    let admitted = with_status(json!({"phase": "Created", "conditions": [{"type": QUEUED, "status": "False"}]}));
    let finished = with_status(json!({"phase": "Succeeded"}));
    let mut suspended = running.clone();
    suspended.spec.suspend = Some(true);
    let unseen = with_status(json!({}));

    let moved = |old: &DIJob| {
        let mut new = old.clone();
        in_queue(&mut new, "other");
        update_errors(old.clone(), new)
    };
    let taken_out = |old: &DIJob| {
        let mut new = old.clone();
        new.metadata.labels.as_mut().unwrap().remove(QUEUE_NAME);
        update_errors(old.clone(), new)
    };
    for (name, old) in [("waiting", &waiting), ("finished", &finished), ("suspended", &suspended), ("unseen", &unseen)]
    {
        assert_eq!(moved(old), Vec::<String>::new(), "{name}");
        assert_eq!(taken_out(old), Vec::<String>::new(), "{name}");
    }
    let want =
        format!("metadata.labels[{QUEUE_NAME}]: Forbidden: the queue of a job that may be running cannot change");
    for (name, old) in [("running", &running), ("admitted", &admitted)] {
        for got in [moved(old), taken_out(old)] {
            assert!(got.len() == 1 && got[0].starts_with(&want), "{name}: {got:?}");
        }
    }
    // Resumed and moved in one write: the job may run once it is written.
    let mut resumed = suspended.clone();
    resumed.spec.suspend = Some(false);
    in_queue(&mut resumed, "other");
    assert!(update_errors(suspended.clone(), resumed)[0].starts_with(&want));
    // Put in a queue while it runs.
    let mut bare = running.clone();
    bare.metadata.labels.as_mut().unwrap().remove(QUEUE_NAME);
    let mut queued = bare.clone();
    in_queue(&mut queued, "team");
    assert!(update_errors(bare, queued)[0].starts_with(&want));
}
