//! SIGTERM ends the orchestrator and the sidecar within seconds in every state: before its caches
//! ever synced, while its API server does not answer, with a request in flight. A rollout or
//! `kubectl delete pod` waits on it. (A pass in flight is the control-plane tier's, in
//! `tests/e2e/tests/leader.rs`.)

mod common;

use common::{Running, kubeconfig, scratch, wait_for};

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

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

/// An API server that answers the start-up's version check and one list of DIJobs, and fails
/// everything else with 500 (which kube does not retry in place), so the reconciler's watches
/// never list anything: its caches never sync. Counts the requests for pods, which only the
/// reconciler's watch sends.
fn never_syncs() -> (SocketAddr, Arc<AtomicUsize>) {
    let pods = Arc::new(AtomicUsize::new(0));
    let count = pods.clone();
    let addr = common::fake_api(move |target| {
        if target.starts_with("/api/v1/pods") || target.contains("/pods?") {
            count.fetch_add(1, Ordering::SeqCst);
        }
        if target == "/version" {
            ("200 OK", common::version("1", "37"))
        } else if target.starts_with("/apis/diengine.opendilab.org/v1alpha1/dijobs?") {
            (
                "200 OK",
                r#"{"apiVersion":"meta.k8s.io/v1","kind":"PartialObjectMetadataList","metadata":{},"items":[]}"#.into(),
            )
        } else {
            common::failure()
        }
    });
    (addr, pods)
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
        &["serve", "--probe-addr=127.0.0.1:0", "--replica-identity=per-job", "--gang-scheduler=none", "--queues=none"],
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
            "--job-uid=job-uid",
            "--pod-uid=uid",
            "--bind-address=127.0.0.1",
            &format!("--port={port}"),
            // The same port on another address: free where the first is.
            &format!("--coordinator-address=127.0.22.80:{port}"),
        ],
    );
    let network = SocketAddr::from(([127, 0, 0, 1], port));
    let endpoint = SocketAddr::from(([127, 0, 22, 80], port));
    wait_for(
        "listening endpoint",
        || TcpStream::connect(network).is_ok() && TcpStream::connect(endpoint).is_ok(),
        &sidecar,
    );
    // A coordinator's request, which waits on the silent API server.
    let mut client = TcpStream::connect(endpoint).unwrap();
    let request = "GET /v1alpha1/replicas?namespace=ns&coordinator=job-coordinator HTTP/1.1\r\nhost: x\r\n\r\n";
    std::io::Write::write_all(&mut client, request.as_bytes()).unwrap();
    wait_for("request to the API server", || accepted.load(Ordering::SeqCst) > 0, &sidecar);
    let took = sidecar.terminate();
    eprintln!("stopped {took:.1?} after SIGTERM, a request in flight");
}
