//! Running a plan: one process group per replica, restarted by the job's rules, stopped by its
//! clean pod policy or by Ctrl-C (SIGTERM to every group, SIGKILL after the grace period), and
//! the job's outcome as the exit code. No process outlives the run unless `cleanPodPolicy: None`
//! keeps it, and then the run waits for it.

use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use di_api::contract::Role;
use di_api::defaults::CleanPodPolicy;
use di_api::{DIJob, JobRestartPolicy};
use nix::sys::signal::Signal;
use tokio::process::Command;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::groups::{Groups, alive, stop_later};
use super::output::Output;
use super::plan::{LocalReplica, Part, Plan, Restarts};

/// Exit code of a run stopped by Ctrl-C or SIGTERM, as a shell reports SIGINT.
pub const INTERRUPTED: i32 = 130;

/// How a run ended: the job's outcome and the exit code it maps to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub code: i32,
    pub what: String,
}

struct Slot {
    /// The running process's id, which is also its group's.
    pid: Option<i32>,
    /// Bumped on every start, so the exit of an earlier incarnation is told apart.
    generation: u64,
    restarts: u32,
    /// When a replaced process starts again.
    due: Option<Instant>,
    /// The last exit code, once it ended for good.
    ended: Option<i32>,
    /// The group of an incarnation asked to stop for a whole-job restart.
    old: Option<i32>,
    /// Scaled away: stopped, and never started again unless the job wants it back.
    removed: bool,
}

impl Slot {
    fn new() -> Slot {
        Slot { pid: None, generation: 0, restarts: 0, due: None, ended: None, old: None, removed: false }
    }
}

/// What the run's replica endpoint asks of the supervisor.
pub enum Request {
    /// The job as scaled: what it has more is started, what it has less stopped. Answers with the
    /// replicas it runs now.
    Job(Box<DIJob>, oneshot::Sender<anyhow::Result<Vec<LocalReplica>>>),
    /// Replicas reported failed: each is killed and started again at once (not counted, as on a
    /// cluster). Answers with those it replaced.
    Replace(Vec<String>, oneshot::Sender<Vec<LocalReplica>>),
    /// The replicas it runs now.
    List(oneshot::Sender<Vec<LocalReplica>>),
}

/// Plans the job again, keeping the addresses of the replicas given (`plan::plan`).
pub type Replan = Box<dyn Fn(&DIJob, &[LocalReplica]) -> anyhow::Result<Plan> + Send>;

pub async fn run(
    mut plan: Plan,
    policy: CleanPodPolicy,
    backoff: Duration,
    out: Output,
    mut requests: mpsc::UnboundedReceiver<Request>,
    replan: Replan,
) -> anyhow::Result<Outcome> {
    let (exits_tx, mut exits) = mpsc::unbounded_channel::<(usize, u64, i32)>();
    let mut slots: Vec<Slot> = plan.replicas.iter().map(|_| Slot::new()).collect();
    let mut guard = Groups::default();
    for (i, slot) in slots.iter_mut().enumerate() {
        start(&plan, i, slot, &out, &exits_tx, &mut guard)?;
    }
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut pause = signal(SignalKind::user_defined1())?;
    let mut resume = signal(SignalKind::user_defined2())?;
    let mut job_restarts = 0u32;
    let mut paused = false;

    let outcome = loop {
        out.summary(&summary(&slots, job_restarts, paused));
        let next_due = slots.iter().filter_map(|s| s.due).min();
        let sleep = async {
            match next_due {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = interrupt.recv() => break Outcome { code: INTERRUPTED, what: "was interrupted (SIGINT)".into() },
            _ = terminate.recv() => break Outcome { code: INTERRUPTED, what: "was stopped (SIGTERM)".into() },
            _ = pause.recv() => { guard.signal_all(Signal::SIGSTOP); paused = true; out.status("paused every process (SIGUSR2 resumes)"); }
            _ = resume.recv() => { guard.signal_all(Signal::SIGCONT); paused = false; out.status("resumed every process"); }
            _ = sleep => {
                let now = Instant::now();
                for (i, slot) in slots.iter_mut().enumerate() {
                    if slot.due.is_some_and(|d| d <= now) {
                        slot.due = None;
                        start(&plan, i, slot, &out, &exits_tx, &mut guard)?;
                    }
                }
            }
            Some(request) = requests.recv() => {
                handle(request, &mut plan, &mut slots, &replan, &out, &exits_tx, &mut guard)?;
            }
            Some((i, generation, code)) = exits.recv() => {
                if slots[i].generation != generation { continue; }
                if let Some(pid) = slots[i].pid.take() { guard.forget(pid); }
                if slots[i].removed { continue; }
                let name = &plan.replicas[i].name;
                out.status(&format!("{name} exited with code {code}"));
                if let Some(outcome) = decide(&plan, i, code, &mut slots, &mut job_restarts, backoff, &out, &mut guard) {
                    break outcome;
                }
            }
        }
    };

    out.summary("");
    out.status(&format!("the job {}", outcome.what));
    // What is left goes by the job's clean pod policy; an interrupted run leaves nothing.
    if outcome.code == INTERRUPTED || policy != CleanPodPolicy::None {
        stop_all(&plan, &mut slots, &mut guard, &out).await;
    } else {
        out.status("cleanPodPolicy None: waiting for the processes still running");
        while slots.iter().any(|s| s.pid.is_some()) {
            tokio::select! {
                _ = interrupt.recv() => { stop_all(&plan, &mut slots, &mut guard, &out).await; return Ok(Outcome { code: INTERRUPTED, what: "was interrupted (SIGINT)".into() }); }
                Some((i, generation, _)) = exits.recv() => if slots[i].generation == generation { slots[i].pid = None; }
            }
        }
    }
    Ok(outcome)
}

/// The terminal's status line: where the replicas are, and how to stop the run.
fn summary(slots: &[Slot], job_restarts: u32, paused: bool) -> String {
    let count = |f: fn(&Slot) -> bool| slots.iter().filter(|s| !s.removed && f(s)).count();
    let (total, running) = (count(|_| true), count(|s| s.pid.is_some()));
    let (waiting, ended) = (count(|s| s.pid.is_none() && s.due.is_some()), count(|s| s.ended.is_some()));
    let restarts = job_restarts + slots.iter().map(|s| s.restarts).sum::<u32>();
    let state = if paused { "PAUSED (SIGUSR2 resumes) · " } else { "" };
    format!(
        "{state}{running}/{total} running · {waiting} to restart · {ended} ended · {restarts} restarts · Ctrl-C stops"
    )
}

/// Carries out a request of the endpoint.
fn handle(
    request: Request,
    plan: &mut Plan,
    slots: &mut Vec<Slot>,
    replan: &Replan,
    out: &Output,
    exits: &mpsc::UnboundedSender<(usize, u64, i32)>,
    guard: &mut Groups,
) -> anyhow::Result<()> {
    let live = |plan: &Plan, slots: &[Slot]| -> Vec<LocalReplica> {
        plan.replicas.iter().zip(slots).filter(|(_, s)| !s.removed).map(|(r, _)| r.clone()).collect()
    };
    match request {
        Request::List(reply) => {
            let _ = reply.send(live(plan, slots));
        }
        Request::Job(job, reply) => {
            let wanted = match replan(&job, &plan.replicas) {
                Ok(wanted) => wanted,
                Err(e) => {
                    let _ = reply.send(Err(e));
                    return Ok(());
                }
            };
            for replica in &wanted.replicas {
                let i = match plan.replicas.iter().position(|r| r.name == replica.name) {
                    Some(i) if !slots[i].removed => continue,
                    Some(i) => i,
                    None => {
                        plan.replicas.push(replica.clone());
                        slots.push(Slot::new());
                        plan.replicas.len() - 1
                    }
                };
                slots[i].removed = false;
                start(plan, i, &mut slots[i], out, exits, guard)?;
            }
            for (replica, slot) in plan.replicas.iter().zip(slots.iter_mut()) {
                if slot.removed || wanted.replicas.iter().any(|r| r.name == replica.name) {
                    continue;
                }
                slot.removed = true;
                slot.due = None;
                if let Some(pid) = slot.pid.take() {
                    out.status(&format!("{} scaled away: stopping it", replica.name));
                    stop_later(pid, replica.grace);
                }
            }
            let _ = reply.send(Ok(live(plan, slots)));
        }
        Request::Replace(names, reply) => {
            let mut replaced = vec![];
            for (i, slot) in slots.iter_mut().enumerate() {
                let replica = &plan.replicas[i];
                if slot.removed || !names.contains(&replica.name) {
                    continue;
                }
                if let Some(pid) = slot.pid.take() {
                    out.status(&format!("{} reported failed: replacing it", replica.name));
                    guard.kill(pid, Signal::SIGKILL);
                }
                slot.due = None;
                start(plan, i, slot, out, exits, guard)?;
                replaced.push(replica.clone());
            }
            let _ = reply.send(replaced);
        }
    }
    Ok(())
}

/// What an exit means under the job's rules; `Some` when the job is over.
#[allow(clippy::too_many_arguments)]
fn decide(
    plan: &Plan,
    i: usize,
    code: i32,
    slots: &mut [Slot],
    job_restarts: &mut u32,
    backoff: Duration,
    out: &Output,
    guard: &mut Groups,
) -> Option<Outcome> {
    let name = plan.replicas[i].name.clone();
    match (&plan.replicas[i].part, &plan.restarts) {
        (Part::Role { role: Role::Coordinator, .. }, _) => {
            let what = if code == 0 {
                "is Succeeded".to_owned()
            } else {
                format!("is Failed: the coordinator exited with {code}")
            };
            Some(Outcome { code, what })
        }
        (Part::Role { .. }, Restarts::PerReplica(limit)) => {
            let slot = &mut slots[i];
            if code == 0 {
                slot.ended = Some(0);
            } else if limit.is_some_and(|l| slot.restarts >= l) {
                out.status(&format!("{name} failed again; restartLimit reached, it stays failed"));
                slot.ended = Some(code);
            } else {
                slot.restarts += 1;
                let wait = di_core::plan::backoff(backoff, slot.restarts);
                out.status(&format!("{name} is replaced in {wait:?} (restart {})", slot.restarts));
                slot.due = Some(Instant::now() + wait);
            }
            None
        }
        (Part::Task { .. }, Restarts::Tasks { policy, limit }) => {
            if code == 0 {
                slots[i].ended = Some(0);
                let deciding: Vec<usize> = plan
                    .replicas
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| matches!(r.part, Part::Task { decides: true, .. }))
                    .map(|(j, _)| j)
                    .collect();
                let done = deciding.iter().all(|j| slots[*j].ended == Some(0));
                return done.then(|| Outcome {
                    code: 0,
                    what: "is Succeeded: every pod of the deciding tasks succeeded".into(),
                });
            }
            if *job_restarts >= *limit {
                return Some(Outcome {
                    code,
                    what: format!("is Failed: {name} exited with {code} past backoffLimit {limit}"),
                });
            }
            *job_restarts += 1;
            let wait = di_core::plan::backoff(backoff, *job_restarts);
            let due = Some(Instant::now() + wait);
            if *policy == JobRestartPolicy::Job {
                out.status(&format!("{name} failed: every process is replaced in {wait:?} (restart {job_restarts})"));
                for slot in slots.iter_mut() {
                    if let Some(pid) = slot.pid.take() {
                        // Asked to stop now; whatever is left when the new round is due is
                        // killed then (`start`). Their exits belong to the old round.
                        guard.kill(pid, Signal::SIGTERM);
                        slot.old = Some(pid);
                    }
                    slot.generation += 1;
                    slot.ended = None;
                    slot.due = due;
                }
            } else {
                out.status(&format!("{name} failed: replaced in {wait:?} (restart {job_restarts})"));
                slots[i].due = due;
            }
            None
        }
        _ => unreachable!("a plan's parts match its restart rules"),
    }
}

fn start(
    plan: &Plan,
    i: usize,
    slot: &mut Slot,
    out: &Output,
    exits: &mpsc::UnboundedSender<(usize, u64, i32)>,
    guard: &mut Groups,
) -> anyhow::Result<()> {
    let replica = &plan.replicas[i];
    if let Some(old) = slot.old.take() {
        // A new round never runs beside a process of the last one.
        guard.kill(old, Signal::SIGKILL);
    }
    std::fs::create_dir_all(&replica.workdir).with_context(|| format!("creating {}", replica.workdir.display()))?;
    for dir in &replica.mounts.dirs {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    for (file, text) in &replica.mounts.files {
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(file, text).with_context(|| format!("writing {}", file.display()))?;
    }
    let mut command = Command::new(&replica.argv[0]);
    command
        .args(&replica.argv[1..])
        .envs(replica.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&replica.workdir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // A group of its own: signals reach whatever it starts, and Ctrl-C on the terminal
        // reaches only the runner, which stops the groups in order.
        .process_group(0)
        .kill_on_drop(true);
    let mut child = command.spawn().with_context(|| format!("starting {}: {}", replica.name, replica.argv[0]))?;
    let pid = child.id().map(|p| p as i32);
    out.attach(&replica.name, child.stdout.take(), child.stderr.take());
    slot.generation += 1;
    slot.pid = pid;
    if let Some(pid) = pid {
        guard.add(pid);
    }
    let (generation, exits) = (slot.generation, exits.clone());
    // The child is waited for here; the slot keeps its pid to signal it.
    tokio::spawn(async move {
        let status = child.wait().await;
        let code = status
            .ok()
            .and_then(|s| s.code().or_else(|| std::os::unix::process::ExitStatusExt::signal(&s).map(|n| 128 + n)))
            .unwrap_or(1);
        let _ = exits.send((i, generation, code));
    });
    slot.ended = None;
    out.status(&format!("started {} (pid {}) at {}", replica.name, pid.unwrap_or_default(), replica.address));
    Ok(())
}

/// SIGTERM to every group still running, SIGKILL to those left after their grace period.
async fn stop_all(plan: &Plan, slots: &mut [Slot], guard: &mut Groups, out: &Output) {
    let running: Vec<(usize, i32)> = slots.iter().enumerate().filter_map(|(i, s)| s.pid.map(|p| (i, p))).collect();
    if running.is_empty() {
        return;
    }
    out.status(&format!("stopping {} process(es)", running.len()));
    for (_, pid) in &running {
        guard.kill(*pid, Signal::SIGCONT);
        guard.kill(*pid, Signal::SIGTERM);
    }
    let grace = running.iter().map(|(i, _)| plan.replicas[*i].grace).max().unwrap_or(0);
    let deadline = Instant::now() + Duration::from_secs(grace);
    while Instant::now() < deadline && running.iter().any(|(_, pid)| alive(*pid)) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for &(i, pid) in &running {
        if alive(pid) {
            out.status(&format!("{} did not stop within {grace}s: SIGKILL", plan.replicas[i].name));
        }
        guard.kill(pid, Signal::SIGKILL);
        slots[i].pid = None;
    }
    guard.groups.clear();
    // A SIGKILL is sent, not yet done: the run ends once the groups are gone (their exit watchers
    // reap them), so no process outlives it, not even for the moment a loaded machine takes.
    let killed_by = Instant::now() + Duration::from_secs(5);
    while Instant::now() < killed_by && running.iter().any(|(_, pid)| alive(*pid)) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
