//! A webhook served as the orchestrator serves it (real TLS on loopback, `serve_with`), and a
//! client's side of it, for the tests of how it serves.
// Each test crate that includes this uses a part of it.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use di_webhook::certs::Bundle;
use di_webhook::limits::Limits;
use di_webhook::server::router_with;
use di_webhook::tls::{CertResolver, certified_key, serve_with};
use rustls_pki_types::ServerName;
use rustls_pki_types::pem::PemObject;
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

pub struct Server {
    pub addr: std::net::SocketAddr,
    pub ca: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    served: Option<tokio::task::JoinHandle<()>>,
}

impl Server {
    /// Asks the server to stop, as SIGTERM asks the orchestrator.
    pub fn stop(&mut self) {
        self.stop.take();
    }

    /// Waits until the server has returned, and for how long after `since`.
    pub async fn served(&mut self, since: Instant) -> Duration {
        self.served.take().expect("served once").await.expect("the server returned");
        since.elapsed()
    }
}

/// Serves the webhook's router with `limits` on a loopback port, over TLS of a fresh CA.
pub async fn start(limits: Limits) -> Server {
    let bundle = Bundle::generate(&["127.0.0.1".into()]).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let resolver = CertResolver::new(certified_key(bundle.cert.as_bytes(), bundle.key.as_bytes()).unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(async move {
        serve_with(listener, router_with(&limits), resolver, &limits, async move {
            let _ = stopped.await;
        })
        .await
    });
    Server { addr, ca: bundle.ca_cert, stop: Some(stop), served: Some(served) }
}

pub fn connector(ca: &str) -> TlsConnector {
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

pub async fn connect(server: &Server) -> TlsStream<TcpStream> {
    let tcp = TcpStream::connect(server.addr).await.unwrap();
    let name = ServerName::IpAddress(server.addr.ip().into());
    connector(&server.ca).connect(name, tcp).await.expect("TLS handshake")
}

/// A review about `bytes` long: many small annotations, the costliest shape to parse per byte.
pub fn review(bytes: usize) -> Value {
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

pub fn post(body: &[u8]) -> Vec<u8> {
    let head = format!("POST /validate HTTP/1.1\r\nHost: webhook\r\nContent-Length: {}\r\n\r\n", body.len());
    [head.as_bytes(), body].concat()
}

/// The head of the answer on `stream` (status line and headers, lowercased), or none when it
/// closed without one.
pub async fn head(stream: &mut (impl AsyncReadExt + Unpin)) -> Option<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte).await {
            Ok(1) => head.push(byte[0]),
            _ => return None,
        }
    }
    Some(String::from_utf8_lossy(&head).to_lowercase())
}

/// The status code of the answer on `stream`, or none when it closed without one.
pub async fn status(stream: &mut TlsStream<TcpStream>) -> Option<u16> {
    head(stream).await?.split_whitespace().nth(1)?.parse().ok()
}
