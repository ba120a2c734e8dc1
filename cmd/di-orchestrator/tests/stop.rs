//! SIGTERM ends the orchestrator and the sidecar within seconds in every state: before its caches
//! ever synced, while its API server does not answer, with a request in flight. A rollout or
//! `kubectl delete pod` waits on it. (A pass in flight is the control-plane tier's, in
//! `tests/e2e/tests/leader.rs`.)

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The process's own grace (5 s) and a margin for a loaded machine.
const STOPS_WITHIN: Duration = Duration::from_secs(12);

/// A child that is killed if the test fails before it exits.
struct Running {
    child: Child,
    log: PathBuf,
}

impl Running {
    fn start(dir: &Path, kubeconfig: &Path, args: &[&str]) -> Running {
        let log = dir.join("orchestrator.log");
        let child = Command::new(env!("CARGO_BIN_EXE_di-orchestrator"))
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(Stdio::from(std::fs::File::create(dir.join("orchestrator.err")).unwrap()))
            .spawn()
            .expect("the di-orchestrator binary starts");
        Running { child, log }
    }

    fn said(&self) -> String {
        let err = self.log.with_file_name("orchestrator.err");
        format!(
            "{}{}",
            std::fs::read_to_string(&self.log).unwrap_or_default(),
            std::fs::read_to_string(err).unwrap_or_default()
        )
    }

    /// Sends SIGTERM and returns how long the process took to exit; fails past `STOPS_WITHIN`.
    fn terminate(&mut self) -> Duration {
        assert!(self.child.try_wait().unwrap().is_none(), "exited before the signal:\n{}", self.said());
        let sent = Instant::now();
        let status = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().unwrap();
        assert!(status.success());
        while sent.elapsed() < STOPS_WITHIN {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "exit {status} after SIGTERM:\n{}", self.said());
                return sent.elapsed();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("still running {STOPS_WITHIN:?} after SIGTERM:\n{}", self.said());
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A kubeconfig for an API server at `server` (plain HTTP, on loopback).
fn kubeconfig(dir: &Path, server: SocketAddr) -> PathBuf {
    let path = dir.join("kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: test\n\
         clusters: [{{name: test, cluster: {{server: 'http://{server}'}}}}]\n\
         users: [{{name: test, user: {{token: test}}}}]\n\
         contexts: [{{name: test, context: {{cluster: test, user: test, namespace: default}}}}]\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("di-stop-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// An API server that accepts connections and never answers; counts the connections.
fn black_hole() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    std::thread::spawn(move || {
        let mut held: Vec<TcpStream> = vec![];
        for stream in listener.incoming().flatten() {
            count.fetch_add(1, Ordering::SeqCst);
            held.push(stream);
        }
    });
    (addr, accepted)
}

/// An API server that answers the start-up's one list of DIJobs and fails everything else with
/// 500 (which kube does not retry in place), so the reconciler's watches never list anything:
/// its caches never sync. Counts the requests for pods, which only the reconciler's watch sends.
fn never_syncs() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let pods = Arc::new(AtomicUsize::new(0));
    let count = pods.clone();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let count = count.clone();
            std::thread::spawn(move || {
                // One request per connection is enough: the answer closes it.
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).is_ok_and(|n| n == 1) {
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head);
                let target = head.split_whitespace().nth(1).unwrap_or_default().to_owned();
                if target.starts_with("/api/v1/pods") || target.contains("/pods?") {
                    count.fetch_add(1, Ordering::SeqCst);
                }
                let (status, body) = if target.starts_with("/apis/diengine.opendilab.org/v1alpha1/dijobs?") {
                    (
                        "200 OK",
                        r#"{"apiVersion":"meta.k8s.io/v1","kind":"PartialObjectMetadataList","metadata":{},"items":[]}"#,
                    )
                } else {
                    (
                        "500 Internal Server Error",
                        r#"{"kind":"Status","apiVersion":"v1","status":"Failure","code":500}"#,
                    )
                };
                let answer = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = std::io::Write::write_all(&mut stream, answer.as_bytes());
            });
        }
    });
    (addr, pods)
}

fn wait_for(what: &str, done: impl Fn() -> bool, running: &Running) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(30), "no {what} within 30 s:\n{}", running.said());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigterm_ends_the_orchestrator_whose_api_server_never_answers() {
    let dir = scratch("silent");
    let (server, accepted) = black_hole();
    let mut orchestrator = Running::start(
        &dir,
        &kubeconfig(&dir, server),
        &["serve", "--probe-addr=127.0.0.1:0", "--leader-elect", "--lease-namespace=default"],
    );
    wait_for("request to the API server", || accepted.load(Ordering::SeqCst) > 0, &orchestrator);
    let took = orchestrator.terminate();
    eprintln!("stopped {took:.1?} after SIGTERM, its API server silent");
}

#[test]
fn sigterm_ends_the_orchestrator_whose_caches_never_synced() {
    let dir = scratch("unsynced");
    let (server, pod_requests) = never_syncs();
    let mut orchestrator = Running::start(
        &dir,
        &kubeconfig(&dir, server),
        &["serve", "--probe-addr=127.0.0.1:0", "--replica-identity=per-job"],
    );
    wait_for("watch of pods", || pod_requests.load(Ordering::SeqCst) > 0, &orchestrator);
    let took = orchestrator.terminate();
    eprintln!("stopped {took:.1?} after SIGTERM, its caches never synced");
}

#[test]
fn sigterm_ends_the_sidecar_with_a_request_waiting_on_the_api_server() {
    let dir = scratch("sidecar");
    let (server, accepted) = black_hole();
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut sidecar = Running::start(
        &dir,
        &kubeconfig(&dir, server),
        &[
            "replicas",
            "--namespace=ns",
            "--job=job",
            "--pod-uid=uid",
            "--bind-address=127.0.0.1",
            &format!("--port={port}"),
        ],
    );
    let endpoint = SocketAddr::from(([127, 0, 0, 1], port));
    wait_for("listening endpoint", || TcpStream::connect(endpoint).is_ok(), &sidecar);
    // A coordinator's request, which waits on the silent API server.
    let mut client = TcpStream::connect(endpoint).unwrap();
    let request = "GET /v1alpha1/replicas?namespace=ns&coordinator=job-coordinator HTTP/1.1\r\nhost: x\r\n\r\n";
    std::io::Write::write_all(&mut client, request.as_bytes()).unwrap();
    wait_for("request to the API server", || accepted.load(Ordering::SeqCst) > 0, &sidecar);
    let took = sidecar.terminate();
    eprintln!("stopped {took:.1?} after SIGTERM, a request in flight");
}
