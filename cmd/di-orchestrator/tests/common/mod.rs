//! What the binary's tests share: the process under test, its kubeconfig, and a fake API server
//! that answers each request from its target alone.

// Each test binary uses a part of it.
#![allow(dead_code)]

use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The process's own grace (5 s) and a margin for a loaded machine.
pub const STOPS_WITHIN: Duration = Duration::from_secs(12);

/// A child that is killed if the test fails before it exits.
pub struct Running {
    pub child: Child,
    log: PathBuf,
}

impl Running {
    pub fn start(dir: &Path, kubeconfig: &Path, args: &[&str]) -> Running {
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

    pub fn said(&self) -> String {
        let err = self.log.with_file_name("orchestrator.err");
        format!(
            "{}{}",
            std::fs::read_to_string(&self.log).unwrap_or_default(),
            std::fs::read_to_string(err).unwrap_or_default()
        )
    }

    /// Sends SIGTERM and returns how long the process took to exit; fails past `STOPS_WITHIN`.
    pub fn terminate(&mut self) -> Duration {
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
pub fn kubeconfig(dir: &Path, server: SocketAddr) -> PathBuf {
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

pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("di-stop-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// An API server on loopback that answers every request with `route(target)`: a status line's
/// status and a JSON body. One request per connection: the answer closes it.
pub fn fake_api(route: impl Fn(&str) -> (&'static str, String) + Send + Sync + 'static) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let route = std::sync::Arc::new(route);
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let route = route.clone();
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).is_ok_and(|n| n == 1) {
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head);
                let target = head.split_whitespace().nth(1).unwrap_or_default().to_owned();
                let (status, body) = route(&target);
                let answer = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = std::io::Write::write_all(&mut stream, answer.as_bytes());
            });
        }
    });
    addr
}

/// `/version`'s answer for Kubernetes `major.minor`.
pub fn version(major: &str, minor: &str) -> String {
    format!(
        r#"{{"major":"{major}","minor":"{minor}","gitVersion":"v{major}.{minor}.0","gitCommit":"","gitTreeState":"clean","buildDate":"2026-01-01T00:00:00Z","goVersion":"go1.26","compiler":"gc","platform":"linux/amd64"}}"#
    )
}

/// A 500, which kube does not retry in place.
pub fn failure() -> (&'static str, String) {
    ("500 Internal Server Error", r#"{"kind":"Status","apiVersion":"v1","status":"Failure","code":500}"#.into())
}

/// Waits for `done`; fails after 30 s with what the process said.
pub fn wait_for(what: &str, done: impl Fn() -> bool, running: &Running) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(30), "no {what} within 30 s:\n{}", running.said());
        std::thread::sleep(Duration::from_millis(20));
    }
}
