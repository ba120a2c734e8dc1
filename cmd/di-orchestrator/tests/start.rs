//! Start-up refuses an API server older than the oldest Kubernetes the orchestrator supports,
//! saying which and why, before it serves or reconciles anything.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{Running, kubeconfig, scratch};

#[test]
fn an_api_server_older_than_1_29_is_refused_at_start_up() {
    let dir = scratch("too-old");
    let after_version = Arc::new(AtomicUsize::new(0));
    let count = after_version.clone();
    let server = common::fake_api(move |target| {
        if target == "/version" {
            ("200 OK", common::version("1", "28"))
        } else {
            count.fetch_add(1, Ordering::SeqCst);
            common::failure()
        }
    });
    let mut orchestrator = Running::start(
        &dir,
        &kubeconfig(&dir, server),
        &["serve", "--probe-addr=127.0.0.1:0", "--replica-identity=per-job"],
    );
    let start = Instant::now();
    let status = loop {
        if let Some(status) = orchestrator.child.try_wait().unwrap() {
            break status;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "still running 30 s later:\n{}", orchestrator.said());
        std::thread::sleep(Duration::from_millis(20));
    };
    let said = orchestrator.said();
    assert!(!status.success(), "exit {status}:\n{said}");
    assert!(said.contains("Kubernetes v1.28.0, older than 1.29"), "names the version and the oldest: {said}");
    assert!(said.contains("native sidecars"), "says why: {said}");
    assert_eq!(after_version.load(Ordering::SeqCst), 0, "asked nothing else first:\n{said}");
}
