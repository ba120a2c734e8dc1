//! The orchestrator on the local control plane, one module per figure: time to running against
//! the least any operator must do (`running`, with that client in `baseline`, judged over
//! several invocations in `limit`), API
//! requests per job against the minimum and where the orchestrator waited (`requests`), where one
//! job's time goes (`timeline`), how long each job's status trails its pods when many start
//! together (`lag`), the scaling curve (`curve`), the replica endpoint (`replicas`),
//! other jobs' status and events beside a big job being created (`fairness`), and memory and CPU
//! idle, at scale and among unrelated pods (`scale`); big jobs where etcd and the API server
//! answer as late as in production (`latency`); gang jobs placed by a real scheduler (`gangs`);
//! jobs in a Kueue queue against the same jobs in none (`queues`); a job's quota reclaimed from
//! another team's spare-room collectors, and those collectors filling idle quota (`reclaim`).
//! `harness` starts what they all measure, `jobs` is the job they submit and tells when it runs,
//! and `empty` clears a namespace between runs.

mod baseline;
mod curve;
mod empty;
mod fairness;
mod gangs;
mod harness;
mod jobs;
mod lag;
mod latency;
mod limit;
mod process;
mod queues;
mod reclaim;
mod replicas;
mod requests;
mod running;
mod scale;
mod timeline;

pub use running::{HEADLINE, VERDICT, sizes};

use di_e2e::cluster::TestCluster;
use di_e2e::controlplane::ControlPlane;
use di_e2e::nodes::{Binding, SimulatedNodes};

use harness::Bench;
use limit::Limit;
use process::{anon_rss_mib, cpu_seconds, rss_mib};

pub struct Row {
    pub figure: String,
    pub value: String,
    pub baseline: String,
    pub ratio: Option<f64>,
    pub goal: String,
    pub met: Option<bool>,
}

impl Row {
    /// A figure with nothing to compare it with.
    fn plain(figure: String, value: String) -> Row {
        Row { figure, value, baseline: "-".into(), ratio: None, goal: "-".into(), met: None }
    }
}

pub struct ClusterReport {
    pub rows: Vec<Row>,
    /// Time to running against the limit, without added latency: the headline table.
    pub headline: String,
    /// The orchestrator's RSS with no jobs, in MiB.
    pub idle_rss_mib: f64,
    /// Fitted over the curve, when it was measured.
    pub slope_ms_per_replica: Option<f64>,
    pub curve: Vec<(usize, f64, f64)>,
    /// Per scenario, where the orchestrator waited on the API server.
    pub waits: Vec<(String, Vec<RequestTime>)>,
    /// Per profiled scenario, where the orchestrator's CPU went (a markdown table), or why
    /// there is no profile.
    pub profiles: Vec<(String, Result<String, String>)>,
}

/// Requests of one verb and resource the orchestrator sent in a scenario, and the time until
/// they were answered.
pub struct RequestTime {
    pub request: String,
    pub count: f64,
    pub seconds: f64,
}

/// The parts of the cluster benchmark, in the order they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// Time to running and API requests per job, against the plain client and the minimum.
    Running,
    /// Time to running and RSS as one job grows.
    Curve,
    /// A coordinator's scale-up through its replica endpoint, against the reconciler alone.
    Replicas,
    /// Small jobs' time to running and first events while a job of 1,000 is being created.
    Fairness,
    /// RSS with 1,000 jobs and their pods, then among unrelated pods.
    Scale,
    /// Time to running against the limit with etcd's and the API server's answers late, as in
    /// production; and, for big jobs, one create at a time against the default window.
    Latency,
    /// Time to running of gang jobs placed by kube-scheduler, against the limit.
    Gangs,
    /// Time to running of jobs in a Kueue queue admitted at once, against the same jobs in none.
    Queues,
    /// Time to running of a job whose quota another team's spare-room collectors borrow, against
    /// the same job with its quota idle; and those collectors' time to fill idle quota.
    Reclaim,
}

/// What one `make bench` measures.
pub struct Plan {
    /// The scenarios to run; all when empty.
    pub only: Vec<Scenario>,
    /// Invocations of time to running against the limit.
    pub invocations: usize,
    /// Jobs, collectors and runs of each size of time to running.
    pub sizes: Vec<(usize, usize, usize)>,
    /// Whether the first invocation also takes what explains a figure rather than states it:
    /// a CPU profile, where one job's time goes, how long statuses trail their pods.
    pub detail: bool,
}

/// Everything `plan.only` names (all when empty) in the first of its invocations; time to
/// running against the limit (`Running`, `Latency`, `Gangs`) in each, every one on control
/// planes of its own.
pub async fn run(plan: &Plan) -> anyhow::Result<Option<ClusterReport>> {
    let only = &plan.only[..];
    let invocations = plan.invocations;
    let wanted = |s: Scenario| only.is_empty() || only.contains(&s);
    let mut report = None;
    let (mut plain, mut late) = (Limit::new("no added latency"), Limit::new("etcd +2 ms, API +0.5 ms"));
    let mut placed = gangs::limit();
    for invocation in 0..invocations.max(1) {
        let first = invocation == 0;
        if first || wanted(Scenario::Running) {
            let Some(plane) = harness::control_plane().await? else { return Ok(None) };
            let result = measure(&plane, plan, first, &mut plain).await;
            plane.stop().await;
            let measured = result?;
            report.get_or_insert(measured);
        }
        // On a control plane of its own, with the latency production has.
        if let Some(report) = report.as_mut().filter(|_| wanted(Scenario::Latency)) {
            let mut rows = vec![];
            latency::measure(&mut rows, &mut late, first, &plan.sizes).await?;
            if first {
                report.rows.extend(rows);
            }
        }
        // On a control plane of its own, with kube-scheduler and GPU nodes.
        if report.is_some() && wanted(Scenario::Gangs) {
            gangs::measure(&mut placed).await?;
        }
        // On a control plane of its own, with Kueue beside it; the first invocation only.
        if let Some(report) = report.as_mut().filter(|_| first && wanted(Scenario::Queues)) {
            queues::measure(&mut report.rows).await?;
        }
        if let Some(report) = report.as_mut().filter(|_| first && wanted(Scenario::Reclaim)) {
            reclaim::measure(&mut report.rows).await?;
        }
    }
    Ok(report.map(|mut r| {
        r.headline = plain.table();
        r.rows.extend(plain.rows());
        r.rows.extend(late.rows());
        r.rows.extend(placed.rows());
        r
    }))
}

/// One invocation on `plane`: only time to running after the first.
async fn measure(plane: &ControlPlane, plan: &Plan, first: bool, limit: &mut Limit) -> anyhow::Result<ClusterReport> {
    let only = &plan.only;
    let wanted = |s: Scenario| (first || s == Scenario::Running) && (only.is_empty() || only.contains(&s));
    let client = plane.client().await?;
    let cluster = TestCluster { client: client.clone(), kubeconfig: plane.kubeconfig.clone() };
    cluster.install_crds().await;
    let base_ns = cluster.namespace("bench-baseline").await;
    let _base_nodes = SimulatedNodes::start_with(client.clone(), &base_ns, Binding::Themselves);
    let (orchestrator, bench, _nodes) = Bench::start(plane, &cluster, "bench-jobs", "", &base_ns, &[]).await?;
    let idle_rss = rss_mib(bench.pid)?;
    let idle_anon = anon_rss_mib(bench.pid)?;
    let idle_cpu = cpu_seconds(bench.pid)?;
    let mut report = ClusterReport {
        rows: vec![Row {
            figure: "orchestrator RSS, no jobs".into(),
            value: format!("{idle_rss:.1} MiB ({idle_anon:.1} MiB anonymous, the rest its code's pages)"),
            baseline: "-".into(),
            ratio: None,
            goal: "< 15 MiB".into(),
            met: Some(idle_rss < 15.0),
        }],
        headline: String::new(),
        idle_rss_mib: idle_rss,
        slope_ms_per_replica: None,
        curve: vec![],
        waits: vec![],
        profiles: vec![],
    };
    if wanted(Scenario::Running) {
        running::measure(&bench, &mut report, limit, first.then_some(plan.detail), &plan.sizes).await?;
    }
    if wanted(Scenario::Curve) {
        curve::measure(&bench, &mut report).await?;
    }
    if wanted(Scenario::Replicas) {
        replicas::measure(&bench, &cluster, &mut report.rows).await?;
    }
    if wanted(Scenario::Fairness) {
        fairness::measure(&bench, &mut report.rows).await?;
    }
    if wanted(Scenario::Scale) {
        // A fresh orchestrator of its own, so its memory is that of these jobs alone.
        let (_scaled, scale, _scale_nodes) =
            Bench::start(plane, &cluster, "bench-scale", "-scale", &base_ns, &[]).await?;
        scale::measure(&scale, rss_mib(scale.pid)?, &mut report.rows).await?;
    }
    let cpu = cpu_seconds(bench.pid)? - idle_cpu;
    report.rows.push(Row::plain(
        "orchestrator CPU over every scenario but scale (which has its own)".into(),
        format!("{cpu:.1} s"),
    ));
    std::fs::write(crate::out::out_dir()?.join("orchestrator.log"), orchestrator.log())?;
    Ok(report)
}
