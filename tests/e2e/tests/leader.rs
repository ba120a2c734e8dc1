//! Leader election against a real API server, with two orchestrator processes on one Lease: a
//! standby takes over from a killed leader once its Lease expires, and at once from one that shut
//! down; a leader cut off from the API server, or frozen, stops before the standby may take over
//! and never acts after; a short outage does not cost the leader its Lease, and a leader that
//! restarts under its old name takes its own stale Lease back.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use di_api::Phase;
use di_api::contract::labels;
use di_e2e::cluster::{TestCluster, within};
use di_e2e::orchestrator::LocalOrchestrator;
use di_e2e::scenario::{Scenario, WAIT, names};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{ListParams, Patch, PatchParams};
use kube::config::Kubeconfig;
use kube::runtime::wait::await_condition;
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

const LEASE_DURATION: Duration = Duration::from_secs(15);
const RENEW_DEADLINE: Duration = Duration::from_secs(10);
const RETRY_PERIOD: Duration = Duration::from_secs(2);
/// Room for a loaded machine on top of what the election itself allows.
const SLACK: Duration = Duration::from_secs(5);

fn election_args(lease: &str) -> Vec<String> {
    vec![
        "--leader-elect".into(),
        "--lease-namespace=di-system".into(),
        format!("--lease-name={lease}"),
        format!("--lease-duration-seconds={}", LEASE_DURATION.as_secs()),
        format!("--renew-deadline-seconds={}", RENEW_DEADLINE.as_secs()),
        format!("--retry-period-seconds={}", RETRY_PERIOD.as_secs()),
    ]
}

/// Two orchestrators on one Lease (named after the scenario's namespace): `orchestrator-a`
/// leads, reaching the API server through `leader_server` when given, and `orchestrator-b`
/// stands by, reconciling `standby_namespace`.
struct Election {
    s: Scenario,
    leases: Api<Lease>,
    leader: LocalOrchestrator,
    standby: LocalOrchestrator,
}

impl Election {
    async fn start(hint: &str, leader_server: Option<&str>, standby_namespace: Option<&str>) -> Option<Election> {
        if di_e2e::nodes::real_nodes() {
            di_e2e::cluster::not_applicable(
                "leader election needs local orchestrator processes (control-plane tier only)",
            );
            return None;
        }
        let mut s = Scenario::new(hint).await;
        // The scenario's own orchestrator is replaced by the two candidates.
        s.orchestrator.kill().await;
        let args = election_args(&s.ns);
        let leader = Box::pin(LocalOrchestrator::start_via(&s.cluster, &s.ns, "-a", &args, leader_server)).await;
        let leases: Api<Lease> = Api::namespaced(s.cluster.client.clone(), "di-system");
        holds(&leases, &s.ns, "orchestrator-a", WAIT, &[&leader]).await;
        let standby_namespace = standby_namespace.unwrap_or(&s.ns);
        let standby = Box::pin(LocalOrchestrator::start_with(&s.cluster, standby_namespace, "-b", &args)).await;
        stands_by(&standby, "orchestrator-a").await;
        Some(Election { s, leases, leader, standby })
    }

    /// A job of one collector, run by the leader.
    async fn run_job(&self, name: &str) {
        self.s.submit(name, 1, 0, json!({})).await;
        self.s.wait_pods(name, &names(name, &["coordinator", "collector-0"])).await;
        self.s.wait_phase(name, Phase::Running).await;
    }

    async fn scale(&self, job: &str, collectors: i32) {
        let patch = json!({"spec": {"collector": {"replicas": collectors}}});
        self.s.jobs.patch(job, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    }

    /// The job's pods, by name in order.
    async fn pods_of(&self, job: &str) -> Vec<String> {
        let params = ListParams::default().labels(&format!("{}={job}", labels::JOB_NAME));
        let mut names: Vec<String> =
            self.s.pods.list(&params).await.unwrap().items.iter().map(|p| p.name_any()).collect();
        names.sort();
        names
    }
}

fn holder(lease: Option<&Lease>) -> Option<String> {
    lease.and_then(|l| l.spec.as_ref()).and_then(|s| s.holder_identity.clone())
}

fn renewed(lease: &Lease) -> Timestamp {
    lease.spec.as_ref().and_then(|s| s.renew_time.as_ref()).expect("a held lease has a renewTime").0
}

fn acquired(lease: &Lease) -> Timestamp {
    lease.spec.as_ref().and_then(|s| s.acquire_time.as_ref()).expect("a held lease has an acquireTime").0
}

/// Waits until `who` holds the Lease `name`, and returns it; fails with the logs of `candidates`.
async fn holds(
    leases: &Api<Lease>,
    name: &str,
    who: &str,
    timeout: Duration,
    candidates: &[&LocalOrchestrator],
) -> Lease {
    let wanted = who.to_owned();
    let held = await_condition(leases.clone(), name, move |l: Option<&Lease>| holder(l).as_ref() == Some(&wanted));
    match tokio::time::timeout(timeout, held).await {
        Ok(lease) => lease.unwrap().expect("the lease exists"),
        Err(_) => {
            let logs: Vec<String> = candidates.iter().map(|c| c.log()).collect();
            panic!("{who} did not hold the lease within {timeout:?}; the candidates logged:\n{}", logs.join("\n---\n"))
        }
    }
}

/// Waits until the standby has read the Lease and found `leader` holding it.
async fn stands_by(standby: &LocalOrchestrator, leader: &str) {
    let line = format!("the lease is held by {leader}");
    within(WAIT, &format!("the standby to log \"{line}\""), async {
        while !standby.log().contains(&line) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn a_standby_takes_over_from_a_killed_leader_once_its_lease_expires() {
    let Some(mut e) = Election::start("takeover", None, None).await else { return };
    e.leader.kill().await;
    let killed = Instant::now();
    // The dead leader's last renewal: from it the Lease counts its expiry.
    let last = e.leases.get(&e.s.ns).await.unwrap();
    assert_eq!(holder(Some(&last)).as_deref(), Some("orchestrator-a"));

    let taken = holds(&e.leases, &e.s.ns, "orchestrator-b", LEASE_DURATION + RETRY_PERIOD + SLACK, &[&e.standby]).await;
    let took = killed.elapsed();
    eprintln!("kill -9 to the standby leading: {took:.1?}");
    let waited = acquired(&taken).duration_since(renewed(&last));
    assert!(
        waited >= LEASE_DURATION.try_into().unwrap(),
        "the standby took the lease {waited:?} after the leader's last renewal, before it expired"
    );
    assert!(
        took <= LEASE_DURATION + RETRY_PERIOD,
        "the standby led {took:?} after the leader died; the lease lasts {LEASE_DURATION:?}:\n{}",
        e.standby.log()
    );
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn a_leader_that_shuts_down_hands_over_at_once() {
    let Some(mut e) = Election::start("handover", None, None).await else { return };
    e.leader.signal("TERM");
    let signalled = Instant::now();
    holds(&e.leases, &e.s.ns, "orchestrator-b", LEASE_DURATION, &[&e.leader, &e.standby]).await;
    let took = signalled.elapsed();
    eprintln!("SIGTERM to the standby leading: {took:.1?}");
    let status = within(WAIT, "the old leader to exit", e.leader.wait()).await;
    assert!(status.success(), "the old leader exited with {status}:\n{}", e.leader.log());
    assert!(e.leader.log().contains("let go of the lease"), "{}", e.leader.log());
    let standby = e.standby.log();
    assert!(took < Duration::from_secs(3), "the standby led {took:?} after SIGTERM, not at once:\n{standby}");
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn a_leader_cut_off_from_the_api_server_stops_before_the_standby_takes_over() {
    let partition = Partition::to_api_server_of(&di_e2e::cluster::connect().await).await;
    let Some(mut e) = Election::start("partition", Some(&partition.url), None).await else { return };
    e.run_job("cut").await;

    partition.cut(true);
    let cut = Instant::now();
    let (leader, standby, leases, ns) = (&mut e.leader, &e.standby, &e.leases, &e.s.ns);
    let ((stopped, status), led) = tokio::join!(
        async {
            let status = within(LEASE_DURATION + SLACK, "the cut-off leader to stop", leader.wait()).await;
            (cut.elapsed(), status)
        },
        async {
            holds(leases, ns, "orchestrator-b", LEASE_DURATION + RETRY_PERIOD + SLACK, &[standby]).await;
            cut.elapsed()
        },
    );
    eprintln!("partition to the old leader exiting: {stopped:.1?}; to the standby leading: {led:.1?}");
    let log = e.leader.log();
    assert!(!status.success() && log.contains("lost leadership"), "the old leader exited with {status}:\n{log}");
    assert!(stopped <= RENEW_DEADLINE + SLACK / 5, "the cut-off leader went on for {stopped:?}:\n{log}");
    assert!(stopped < led, "the standby led ({led:?}) before the old leader stopped ({stopped:?})");

    // The standby carries on with the job.
    e.scale("cut", 2).await;
    e.s.wait_pods("cut", &names("cut", &["coordinator", "collector-0", "collector-1"])).await;
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn a_leader_frozen_past_its_lease_never_acts_after_the_standby_took_over() {
    let cluster = di_e2e::cluster::connect().await;
    // The standby reconciles another namespace: whatever happens to this job after the freeze is
    // the frozen leader's doing.
    let elsewhere = cluster.namespace("frozen-standby").await;
    let Some(mut e) = Election::start("frozen", None, Some(&elsewhere)).await else { return };
    e.run_job("frozen").await;

    e.leader.signal("STOP");
    holds(&e.leases, &e.s.ns, "orchestrator-b", LEASE_DURATION + RETRY_PERIOD + SLACK, &[&e.standby]).await;
    // Work the old leader would do the moment it runs again.
    e.scale("frozen", 2).await;
    e.leader.signal("CONT");
    let status = within(WAIT, "the thawed leader to exit", e.leader.wait()).await;
    let log = e.leader.log();
    assert!(!status.success() && log.contains("lost leadership"), "the thawed leader exited with {status}:\n{log}");
    assert_eq!(
        e.pods_of("frozen").await,
        names("frozen", &["collector-0", "coordinator"]),
        "the thawed leader acted after the standby took over:\n{log}"
    );
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn a_leader_keeps_its_lease_through_an_outage_shorter_than_the_renew_deadline() {
    let partition = Partition::to_api_server_of(&di_e2e::cluster::connect().await).await;
    let Some(mut e) = Election::start("outage", Some(&partition.url), None).await else { return };

    // The outage is the scenario, not a wait for something: as long as a request may take, well
    // within the renew deadline. The connections it caught stay dead after it.
    let outage = RETRY_PERIOD;
    let since = Timestamp::now();
    partition.cut(true);
    tokio::time::sleep(outage).await;
    partition.cut(false);

    // Still the leader past the time it would have stepped down at had it not renewed.
    let past_deadline = since + SignedDuration::try_from(RENEW_DEADLINE + RETRY_PERIOD).unwrap();
    let renewed_since = await_condition(e.leases.clone(), &e.s.ns, move |l: Option<&Lease>| {
        holder(l).as_deref() != Some("orchestrator-a") || l.is_some_and(|l| renewed(l) > past_deadline)
    });
    let lease = within(RENEW_DEADLINE + RETRY_PERIOD + SLACK, "a renewal after the outage", renewed_since).await;
    let lease = lease.unwrap().expect("the lease exists");
    let log = e.leader.log();
    assert_eq!(holder(Some(&lease)).as_deref(), Some("orchestrator-a"), "the leader lost its lease:\n{log}");
    assert!(e.leader.exited().is_none() && !log.contains("lost leadership"), "{log}");
}

#[tokio::test]
#[ignore = "control-plane tier: run with `make e2e-local`"]
async fn a_leader_restarted_under_its_old_name_takes_its_stale_lease_back() {
    if di_e2e::nodes::real_nodes() {
        di_e2e::cluster::not_applicable("leader election needs local orchestrator processes (control-plane tier only)");
        return;
    }
    let mut s = Scenario::new("rejoin").await;
    s.orchestrator.kill().await;
    let mut leader = Box::pin(LocalOrchestrator::start_with(&s.cluster, &s.ns, "-a", &election_args(&s.ns))).await;
    let leases: Api<Lease> = Api::namespaced(s.cluster.client.clone(), "di-system");
    holds(&leases, &s.ns, "orchestrator-a", WAIT, &[&leader]).await;
    leader.kill().await;

    // The pod stays down until its last renewal is past the renew deadline (the scenario, not a
    // wait for something): the Lease still names it, and nobody renews it.
    let last = renewed(&leases.get(&s.ns).await.unwrap());
    let stale = last + SignedDuration::try_from(RENEW_DEADLINE).unwrap();
    tokio::time::sleep(Duration::try_from(stale.duration_since(Timestamp::now())).unwrap_or_default()).await;
    leader.restart();
    let restarted = Timestamp::now();
    let renewed_again = await_condition(leases, &s.ns, move |l: Option<&Lease>| {
        holder(l).as_deref() == Some("orchestrator-a") && l.is_some_and(|l| renewed(l) > restarted)
    });
    let took = Instant::now();
    if tokio::time::timeout(RETRY_PERIOD + SLACK, renewed_again).await.is_err() {
        panic!("the restarted leader did not renew its lease:\n{}", leader.log());
    }
    eprintln!("restart to leading again: {:.1?}", took.elapsed());
    s.submit("rejoined", 1, 0, json!({})).await;
    s.wait_pods("rejoined", &names("rejoined", &["coordinator", "collector-0"])).await;
}

/// A TCP forwarder to the API server that can be cut, as a network partition would: the
/// connections open while it is cut pass nothing ever again (their peers' state is lost) but stay
/// open, and after it heals new connections pass again.
struct Partition {
    url: String,
    cut: watch::Sender<bool>,
}

impl Partition {
    async fn to_api_server_of(cluster: &TestCluster) -> Partition {
        let admin = Kubeconfig::read_from(&cluster.kubeconfig).expect("admin kubeconfig");
        let server = admin.clusters[0].cluster.as_ref().and_then(|c| c.server.clone()).expect("a server");
        let upstream: SocketAddr = server.trim_start_matches("https://").parse().expect("server is https://ip:port");
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}", listener.local_addr().unwrap());
        let (cut, _) = watch::channel(false);
        let cuts = cut.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(forward(client, upstream, cuts.subscribe()));
            }
        });
        Partition { url, cut }
    }

    fn cut(&self, cut: bool) {
        self.cut.send_replace(cut);
    }
}

async fn forward(mut client: TcpStream, upstream: SocketAddr, mut cut: watch::Receiver<bool>) {
    if *cut.borrow_and_update() {
        return std::future::pending().await;
    }
    let Ok(mut server) = TcpStream::connect(upstream).await else { return };
    let cut_off = async { cut.wait_for(|cut| *cut).await.is_ok() };
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
        // Black-holed: both ends stay open and nothing passes.
        true = cut_off => std::future::pending::<()>().await,
    }
}
