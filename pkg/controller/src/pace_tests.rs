use di_api::ReplicaStatus;

use super::*;

const PERIOD: Duration = Duration::from_secs(1);
const RECENT: Option<Duration> = Some(Duration::from_millis(200));

fn status(phase: Phase, collectors: &str, failed: i32) -> DIJobStatus {
    DIJobStatus {
        phase: Some(phase),
        collectors: Some(collectors.into()),
        replica_status: [("Collector".to_string(), ReplicaStatus { active: 10, succeeded: 0, failed })].into(),
        ..Default::default()
    }
}

#[test]
fn counts_alone_wait_for_the_period() {
    let old = status(Phase::Running, "3/10", 0);
    let new = status(Phase::Running, "4/10", 0);
    assert_eq!(decide(Some(&old), &new, RECENT, PERIOD), Write::After(Duration::from_millis(800)));
    assert_eq!(decide(Some(&old), &new, None, PERIOD), Write::Progress, "no recent write");
    assert_eq!(decide(Some(&old), &new, Some(PERIOD), PERIOD), Write::Progress, "period over");
    assert_eq!(decide(Some(&new), &new, RECENT, PERIOD), Write::Unchanged);
}

#[test]
fn what_a_user_acts_on_is_written_at_once() {
    let old = status(Phase::Created, "3/10", 0);
    let cases = [
        ("first status, a failure", None, status(Phase::Failed, "0/10", 0)),
        ("new phase", Some(&old), status(Phase::Failed, "3/10", 0)),
        ("running with every replica", Some(&old), status(Phase::Running, "10/10", 0)),
        ("a replica failed", Some(&old), status(Phase::Created, "3/10", 1)),
        ("every replica ready", Some(&old), status(Phase::Created, "10/10", 0)),
    ];
    for (what, old, new) in cases {
        assert_eq!(decide(old, &new, RECENT, PERIOD), Write::Now, "{what}");
    }
    let mut conditioned = old.clone();
    conditioned.conditions.push(DIJobCondition {
        type_: "Suspended".into(),
        status: "True".into(),
        ..Default::default()
    });
    assert_eq!(decide(Some(&old), &conditioned, RECENT, PERIOD), Write::Now, "new condition");
    let mut regenerated = old.clone();
    regenerated.observed_generation = Some(2);
    assert_eq!(decide(Some(&old), &regenerated, RECENT, PERIOD), Write::Now, "new generation");
}

#[test]
fn the_way_up_is_progress() {
    let created = |collectors: &str| {
        let mut s = status(Phase::Created, collectors, 0);
        s.observed_generation = Some(1);
        s.conditions.push(DIJobCondition { type_: "Created".into(), status: "True".into(), ..Default::default() });
        s
    };
    assert_eq!(decide(None, &created("0/10"), None, PERIOD), Write::Progress, "first status");
    let mut pending = created("0/10");
    pending.phase = Some(Phase::Pending);
    let mut starting = created("4/10");
    (starting.phase, starting.conditions[0].type_) = (Some(Phase::Starting), "Starting".into());
    assert_eq!(decide(Some(&pending), &starting, RECENT, PERIOD), Write::After(Duration::from_millis(800)));
    let mut coordinator_up = created("4/10");
    coordinator_up.phase = Some(Phase::Running);
    coordinator_up.conditions.push(DIJobCondition {
        type_: "Running".into(),
        status: "True".into(),
        ..Default::default()
    });
    assert_eq!(decide(Some(&created("3/10")), &coordinator_up, None, PERIOD), Write::Progress, "collectors starting");
    let mut suspended = created("0/10");
    suspended.conditions.push(DIJobCondition {
        type_: "Suspended".into(),
        status: "True".into(),
        ..Default::default()
    });
    assert_eq!(decide(None, &suspended, RECENT, PERIOD), Write::Now, "a condition beyond the way up");
    assert_eq!(decide(None, &created("0/0"), None, PERIOD), Write::Now, "nothing to wait for");
}

#[test]
fn progress_waits_while_objects_are_created() {
    let pacer = Pacer::new(PERIOD, 100.0);
    let creating = pacer.creates.start();
    assert_eq!(pacer.take_budget("a"), Err(PERIOD));
    drop(creating);
    assert_eq!(pacer.take_budget("a"), Ok(()));
}

#[test]
fn progress_waits_for_creates_at_most_the_hold() {
    let pacer = Pacer::new(PERIOD, 100.0);
    let _creating = pacer.creates.start();
    let start = Instant::now();
    assert_eq!(pacer.take_budget_at("a", start), Err(PERIOD));
    let late = start + HOLD - Duration::from_millis(300);
    assert_eq!(pacer.take_budget_at("a", late), Err(Duration::from_millis(300)), "asked again as the hold ends");
    assert_eq!(pacer.take_budget_at("b", late), Err(PERIOD), "each job's hold is its own");
    assert_eq!(pacer.take_budget_at("a", start + HOLD), Ok(()), "creates still going on");
    pacer.wrote("a");
    assert_eq!(pacer.take_budget_at("a", start + HOLD), Err(PERIOD), "a new hold after a write");
}

#[test]
fn each_job_waiting_for_the_budget_gets_a_turn_of_its_own() {
    let pacer = Pacer::new(PERIOD, 2.0);
    let start = Instant::now();
    assert_eq!(pacer.take_budget_at("a", start), Ok(()));
    assert_eq!(pacer.take_budget_at("b", start), Ok(()), "a burst of the rate");
    assert_eq!(pacer.take_budget_at("c", start), Err(Duration::from_millis(500)));
    assert_eq!(pacer.take_budget_at("d", start), Err(PERIOD), "after c's turn, not at the same token");
    let half = start + Duration::from_millis(500);
    assert_eq!(pacer.take_budget_at("d", half), Err(Duration::from_millis(500)), "d's turn is kept");
    assert_eq!(pacer.take_budget_at("c", half), Ok(()), "c's turn");
    assert_eq!(pacer.take_budget_at("e", half), Err(Duration::from_millis(1000)), "after d's");
    pacer.wrote("e");
    assert_eq!(pacer.take_budget_at("d", start + PERIOD), Ok(()));
}

#[test]
fn at_desired_needs_every_figure_full() {
    let mut s = status(Phase::Running, "10/10", 0);
    assert!(at_desired(&s));
    s.learners = Some("1/2".into());
    assert!(!at_desired(&s));
    s.learners = Some("2/2".into());
    assert!(at_desired(&s));
    (s.ready_replicas, s.replicas) = (Some(5), Some(12));
    assert!(!at_desired(&s), "a task job with pods not ready");
}

#[test]
fn a_job_waits_for_its_pods_only_on_its_way_up() {
    let mut s = status(Phase::Starting, "3/10", 0);
    s.replicas = Some(11);
    assert_eq!(waits_for(&s), Some(11));
    s.phase = Some(Phase::Running);
    assert_eq!(waits_for(&s), Some(11), "a role job's coordinator runs, its collectors not yet");
    s.collectors = Some("10/10".into());
    assert_eq!(waits_for(&s), None, "at desired");
    (s.phase, s.collectors) = (Some(Phase::Failed), Some("3/10".into()));
    assert_eq!(waits_for(&s), None, "ended");
}

#[test]
fn a_bucket_gives_its_rate_and_says_when_the_next_token_comes() {
    let bucket = Bucket::new(2.0);
    let start = bucket.state.lock().unwrap().1;
    assert_eq!(bucket.take_at(start), Ok(()));
    assert_eq!(bucket.take_at(start), Ok(()), "a burst of its rate");
    assert_eq!(bucket.take_at(start), Err(Duration::from_millis(500)));
    let later = start + Duration::from_millis(500);
    assert_eq!(bucket.take_at(later), Ok(()), "refilled at its rate");
    assert_eq!(bucket.take_at(later), Err(Duration::from_millis(500)));
    assert_eq!(Bucket::new(0.0).take_at(TokioInstant::now()), Ok(()), "at least one a second");
    let bursty = Bucket::with_burst(1.0, 3.0);
    let start = bursty.state.lock().unwrap().1;
    for _ in 0..3 {
        assert_eq!(bursty.take_at(start), Ok(()), "a burst of three");
    }
    assert_eq!(bursty.take_at(start), Err(Duration::from_secs(1)), "then one a second");
}

#[test]
fn the_pacer_forgets_after_a_period() {
    let pacer = Pacer::new(Duration::from_millis(50), 10.0);
    assert_eq!(pacer.since_last("a"), None);
    pacer.wrote("a");
    assert!(pacer.since_last("a").is_some());
    std::thread::sleep(Duration::from_millis(60));
    assert_eq!(pacer.since_last("a"), None);
}
