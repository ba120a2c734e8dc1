//! The webhook under hostile clients, over real TLS on loopback and on one thread, as the
//! orchestrator runs it: a client that sends its headers byte by byte is cut off, an oversized
//! body is refused before it is read, and with many such clients at once an ordinary admission
//! still answers, and the thread stays free for the rest of the process (the Lease's renewals).

use std::sync::Arc;
use std::time::{Duration, Instant};

use di_webhook::certs::Bundle;
use di_webhook::limits::{Limits, MAX_BODY};
use di_webhook::server::router_with;
use di_webhook::tls::{CertResolver, certified_key, serve_with};
use rustls_pki_types::ServerName;
use rustls_pki_types::pem::PemObject;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

struct Server {
    addr: std::net::SocketAddr,
    ca: String,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn start(limits: Limits) -> Server {
    let bundle = Bundle::generate(&["127.0.0.1".into()]).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let resolver = CertResolver::new(certified_key(bundle.cert.as_bytes(), bundle.key.as_bytes()).unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        serve_with(listener, router_with(&limits), resolver, &limits, async move {
            let _ = stopped.await;
        })
        .await
    });
    Server { addr, ca: bundle.ca_cert, _stop: stop }
}

fn connector(ca: &str) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(rustls_pki_types::CertificateDer::from_pem_slice(ca.as_bytes()).unwrap()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
}

async fn connect(server: &Server) -> TlsStream<TcpStream> {
    let tcp = TcpStream::connect(server.addr).await.unwrap();
    let name = ServerName::IpAddress(server.addr.ip().into());
    connector(&server.ca).connect(name, tcp).await.expect("TLS handshake")
}

/// A review about `bytes` long: many small annotations, the costliest shape to parse per byte.
fn review(bytes: usize) -> Value {
    let annotations: serde_json::Map<String, Value> =
        (0..bytes / 16).map(|i| (format!("a{i:09}"), json!("v"))).collect();
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "1", "operation": "CREATE", "userInfo": {},
            "kind": {"group": "diengine.opendilab.org", "version": "v1alpha1", "kind": "DIJob"},
            "resource": {"group": "diengine.opendilab.org", "version": "v1alpha1", "resource": "dijobs"},
            "object": {"apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJob",
                       "metadata": {"name": "j", "annotations": annotations},
                       "spec": {"coordinator": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}},
        }
    })
}

fn post(body: &[u8]) -> Vec<u8> {
    let head = format!("POST /validate HTTP/1.1\r\nHost: webhook\r\nContent-Length: {}\r\n\r\n", body.len());
    [head.as_bytes(), body].concat()
}

/// The status code of the answer on `stream`, or none when it closed without one.
async fn status(stream: &mut TlsStream<TcpStream>) -> Option<u16> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n") {
        match stream.read(&mut byte).await {
            Ok(1) => head.push(byte[0]),
            _ => return None,
        }
    }
    String::from_utf8_lossy(&head).split_whitespace().nth(1)?.parse().ok()
}

/// Sends a request's headers one byte every 100 ms, never ending them; says when the server
/// closed the connection, or that it did not within `limit`.
async fn slowloris(server: &Server, limit: Duration) -> Option<Duration> {
    let stream = connect(server).await;
    let started = Instant::now();
    let (mut read, mut write) = tokio::io::split(stream);
    let trickle = async {
        write.write_all(b"POST /validate HTTP/1.1\r\nHost: webhook\r\n").await?;
        loop {
            write.write_all(b"X").await?;
            write.flush().await?;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let closed = async {
        let mut buf = [0u8; 256];
        // Whatever the server says (a 408 or nothing), it ends with the connection closing.
        while matches!(read.read(&mut buf).await, Ok(n) if n > 0) {}
    };
    let cut = async {
        tokio::select! {
            r = trickle => { let _: std::io::Result<()> = r; }
            () = closed => {}
        }
    };
    tokio::time::timeout(limit, cut).await.ok().map(|()| started.elapsed())
}

#[tokio::test]
async fn a_client_that_sends_its_headers_byte_by_byte_is_cut_off() {
    let server = start(Limits { headers: Duration::from_secs(1), ..Limits::default() }).await;
    let cut = slowloris(&server, Duration::from_secs(20)).await;
    assert!(cut.is_some(), "a client still sending its headers after 20 s was never cut off");
}

#[tokio::test]
async fn an_oversized_body_is_refused_before_it_is_read() {
    let server = start(Limits::default()).await;
    let mut stream = connect(&server).await;
    let declared = 100 * MAX_BODY;
    let head = format!("POST /validate HTTP/1.1\r\nHost: webhook\r\nContent-Length: {declared}\r\n\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&vec![b' '; 64 * 1024]).await.unwrap();
    stream.flush().await.unwrap();
    // Answered with 64 KiB of the 800 MiB sent: the server did not wait for the rest.
    let answered = tokio::time::timeout(Duration::from_secs(10), status(&mut stream)).await;
    assert_eq!(answered.expect("no answer while the body was still to come"), Some(413));

    // A body without a length is read only up to the limit.
    let mut stream = connect(&server).await;
    let head = "POST /validate HTTP/1.1\r\nHost: webhook\r\nTransfer-Encoding: chunked\r\n\r\n";
    stream.write_all(head.as_bytes()).await.unwrap();
    let chunk = [format!("{:x}\r\n", 1 << 20).into_bytes(), vec![b' '; 1 << 20], b"\r\n".to_vec()].concat();
    let send = async {
        for _ in 0..(declared >> 20) {
            if stream.write_all(&chunk).await.is_err() {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(30), send).await;
    assert_eq!(status(&mut stream).await, Some(413));
}

#[tokio::test]
async fn admissions_answer_while_hostile_clients_flood_the_webhook() {
    let server = Arc::new(start(Limits::default()).await);
    let mut hostile = tokio::task::JoinSet::new();
    for _ in 0..60 {
        let server = server.clone();
        hostile.spawn(async move {
            slowloris(&server, Duration::from_secs(60)).await;
        });
    }
    // Connections that never say a word, not even a TLS hello.
    let mut silent = vec![];
    for _ in 0..30 {
        silent.push(TcpStream::connect(server.addr).await.unwrap());
    }
    let big = Arc::new(post(&serde_json::to_vec(&review(7 << 20)).unwrap()));
    for _ in 0..4 {
        let (server, big) = (server.clone(), big.clone());
        hostile.spawn(async move {
            loop {
                let mut stream = connect(&server).await;
                if stream.write_all(&big).await.is_ok() {
                    let _ = status(&mut stream).await;
                }
            }
        });
    }
    // The Lease's renewals stand for every other task on the thread: how late a tick comes.
    let lateness = tokio::spawn(async {
        let mut worst = Duration::ZERO;
        let (started, mut last) = (Instant::now(), Instant::now());
        while started.elapsed() < Duration::from_secs(8) {
            tokio::time::sleep(Duration::from_millis(100)).await;
            worst = worst.max(last.elapsed().saturating_sub(Duration::from_millis(100)));
            last = Instant::now();
        }
        worst
    });

    let client = reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(server.ca.as_bytes()).unwrap())
        .use_rustls_tls()
        .build()
        .unwrap();
    let body = serde_json::to_vec(&review(0)).unwrap();
    let mut slowest = Duration::ZERO;
    for _ in 0..20 {
        let sent = Instant::now();
        let reply = client.post(format!("https://{}/validate", server.addr)).body(body.clone()).send();
        let reply =
            tokio::time::timeout(Duration::from_secs(5), reply).await.expect("an admission not answered in 5 s");
        let reply: Value = reply.unwrap().json().await.unwrap();
        assert_eq!(reply["response"]["allowed"], true, "{reply}");
        slowest = slowest.max(sent.elapsed());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let worst = lateness.await.unwrap();
    eprintln!("slowest admission {slowest:?}; the thread was busy for at most {worst:?} at once");
    // Parsing a 7 MiB review in a debug build takes seconds; done on the thread, it shows here.
    assert!(worst < Duration::from_secs(2), "the thread was held for {worst:?} at once");
    hostile.abort_all();
    drop(silent);
}
