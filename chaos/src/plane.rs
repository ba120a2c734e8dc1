//! The local control plane of di_e2e, plus what the restart faults need and it lacks: killing
//! one of its processes and starting it again as it was. The new process gets the old one's
//! command line (read from `/proc`), so it serves the same ports with the same certificates and
//! the same etcd data; its command line names the run's folder, so stopping the plane (or the
//! next start after a crash) kills it too.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use di_e2e::binaries::{self, Unavailable};
use di_e2e::cluster::TestCluster;
use di_e2e::controlplane::{ControlPlane, spawn_logged};
use kube::Client;
use tokio::process::Child;

use crate::process;

/// How long the API server may take to be ready again after a restart.
const READY: Duration = Duration::from_secs(120);

/// The pause before a process that found its port taken is started again.
const PORT_RETRY: Duration = Duration::from_secs(1);

/// A restart: how long the API server was not ready, and how often the process had to be
/// started before it could listen.
pub struct Restarted {
    pub down: Duration,
    pub starts: usize,
}

pub struct Plane {
    inner: ControlPlane,
    /// Processes started again after a restart, newest last.
    respawned: Mutex<Vec<(&'static str, Child)>>,
}

impl Plane {
    /// Starts the control plane, or says why it cannot run here.
    pub async fn start() -> anyhow::Result<Result<Plane, String>> {
        let root = binaries::repo_root();
        let binaries = match binaries::obtain(&root)? {
            Ok(b) => b,
            Err(Unavailable(why)) => return Ok(Err(why)),
        };
        let inner = ControlPlane::start(&binaries, &root.join(".cache/controlplane/runs")).await?;
        Ok(Ok(Plane { inner, respawned: Mutex::default() }))
    }

    pub async fn cluster(&self) -> anyhow::Result<TestCluster> {
        Ok(TestCluster { client: self.inner.client().await?, kubeconfig: self.inner.kubeconfig.clone() })
    }

    /// The process of `name` (`etcd`, `kube-apiserver`, `kube-controller-manager`) now.
    pub fn pid(&self, name: &str) -> Option<u32> {
        let respawned = self.respawned.lock().unwrap();
        match respawned.iter().rev().find(|(n, _)| *n == name) {
            Some((_, child)) => child.id(),
            None => self.inner.pid(name),
        }
    }

    /// Whether the process of `name` still runs.
    pub fn running(&self, name: &str) -> bool {
        self.pid(name).is_some_and(process::running)
    }

    /// Kills `name` with SIGKILL, starts it again with the same command line, and waits until
    /// the API server is ready again (which, for etcd, means it reaches etcd again).
    pub async fn restart(&self, name: &'static str) -> anyhow::Result<Restarted> {
        let pid = self.pid(name).with_context(|| format!("no {name} process"))?;
        let command = process::command_line(pid)?;
        let killed = Instant::now();
        process::signal(pid, "KILL")?;
        process::until_gone(pid, Duration::from_secs(10)).await?;
        let deadline = killed + READY;
        for start in 1.. {
            self.spawn_again(name, &command)?;
            match self.wait_ready(name, deadline).await {
                Ok(()) => return Ok(Restarted { down: killed.elapsed(), starts: start }),
                // Its port is in the ephemeral range, and a client that keeps connecting to it
                // while it is down can be given that very port as its own end (a TCP
                // self-connection), which then holds it for a while. A real server's port is
                // outside that range; here the process is started again until the port is free.
                Err(_) if !self.running(name) && self.log_tail(name, 1).contains("address already in use") => {
                    eprintln!("  {name} could not listen again (start {start}): {}", self.log_tail(name, 1));
                    if Instant::now() + PORT_RETRY >= deadline {
                        bail!("{name} could not listen again within {READY:?}");
                    }
                    tokio::time::sleep(PORT_RETRY).await;
                }
                Err(e) => {
                    let state = if self.running(name) { "runs" } else { "has exited" };
                    bail!(
                        "the API server after {name} was restarted: {e:#}; {name} {state}; its log ends:\n{}\nkube-apiserver's:\n{}",
                        self.log_tail(name, 15),
                        self.log_tail("kube-apiserver", 15)
                    );
                }
            }
        }
        unreachable!("the loop returns")
    }

    fn spawn_again(&self, name: &'static str, command: &[String]) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.log_path(name))?;
        // As di_e2e started it: a group of its own, gone with us.
        let child =
            spawn_logged(command[0].as_ref(), &command[1..], log).with_context(|| format!("starting {name} again"))?;
        self.respawned.lock().unwrap().push((name, child));
        Ok(())
    }

    fn log_path(&self, name: &str) -> std::path::PathBuf {
        self.inner.dir.join("logs").join(format!("{name}.log"))
    }

    /// The last `lines` lines of a process's log.
    fn log_tail(&self, name: &str, lines: usize) -> String {
        di_e2e::logs::last_lines(&std::fs::read_to_string(self.log_path(name)).unwrap_or_default(), lines)
    }

    /// Polls `/readyz` until `deadline` (the API server has no watch for its own readiness), and
    /// gives up at once when the process `name` has exited.
    async fn wait_ready(&self, name: &str, deadline: Instant) -> anyhow::Result<()> {
        let mut last = String::new();
        let client: Client = self.inner.client().await?;
        while Instant::now() < deadline {
            if !self.running(name) {
                bail!("{name} exited");
            }
            let request = http_request("/readyz")?;
            match tokio::time::timeout(Duration::from_secs(5), client.request_text(request)).await {
                Ok(Ok(body)) if body.trim() == "ok" => return Ok(()),
                Ok(Ok(body)) => last = body,
                Ok(Err(e)) => last = e.to_string(),
                Err(_) => last = "no answer in 5 s".into(),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        bail!("not ready after {READY:?}: {last}")
    }

    pub async fn stop(self) {
        // The respawned processes die with their handles; the plane kills whatever its folder
        // names, which covers them too.
        drop(self.respawned);
        self.inner.stop().await;
    }
}

fn http_request(path: &str) -> anyhow::Result<http::Request<Vec<u8>>> {
    Ok(http::Request::get(path).body(Vec::new())?)
}
