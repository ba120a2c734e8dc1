//! Hostile and well-formed clients of the webhook, over TLS on loopback: connections that send
//! their headers a byte at a time, connections that never say a word, AdmissionReviews of 7 MiB
//! (the costliest shape: many small annotations) and ones declared too large, and the ordinary
//! small review whose answer time is measured meanwhile.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// What the hostile clients did, counted as they go.
#[derive(Default)]
pub struct Counts {
    pub slow_opened: AtomicUsize,
    pub silent_opened: AtomicUsize,
    pub large_sent: AtomicUsize,
    pub large_answered: AtomicUsize,
    pub oversized_refused: AtomicUsize,
}

#[derive(Clone)]
pub struct Target {
    pub addr: SocketAddr,
    connector: TlsConnector,
}

impl Target {
    /// The webhook at `addr`, trusted through the CA `ca_pem`.
    pub fn new(addr: SocketAddr, ca_pem: &str) -> anyhow::Result<Target> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(CertificateDer::from_pem_slice(ca_pem.as_bytes())?)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Target { addr, connector: TlsConnector::from(Arc::new(config)) })
    }

    async fn connect(&self) -> anyhow::Result<TlsStream<TcpStream>> {
        let tcp = TcpStream::connect(self.addr).await?;
        Ok(self.connector.connect(ServerName::IpAddress(self.addr.ip().into()), tcp).await?)
    }

    /// One well-formed admission on a connection of its own, as an API server's first call:
    /// how long until its answer, which must allow the job.
    pub async fn admission(&self, body: &[u8]) -> anyhow::Result<Duration> {
        let sent = Instant::now();
        let mut stream = self.connect().await?;
        stream.write_all(&request(body, "close")).await?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.or_else(|e| {
            // A peer that closes without TLS's close_notify still sent its whole answer.
            if e.kind() == std::io::ErrorKind::UnexpectedEof { Ok(0) } else { Err(e) }
        })?;
        let text = String::from_utf8_lossy(&answer);
        if !text.starts_with("HTTP/1.1 200") || !text.contains("\"allowed\":true") {
            bail!("not allowed: {}", text.lines().next().unwrap_or("no answer"));
        }
        Ok(sent.elapsed())
    }
}

fn request(body: &[u8], connection: &str) -> Vec<u8> {
    let head = format!(
        "POST /validate HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: {connection}\r\n\r\n",
        body.len()
    );
    [head.as_bytes(), body].concat()
}

/// A review of a valid job about `bytes` long: `bytes / 16` annotations of a few bytes each.
pub fn review(bytes: usize) -> Vec<u8> {
    let annotations: serde_json::Map<String, Value> =
        (0..bytes / 16).map(|i| (format!("a{i:09}"), json!("v"))).collect();
    let pod = json!({"containers": [{"name": "di-container", "image": "ding"}]});
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "chaos", "operation": "CREATE", "userInfo": {"username": "chaos"},
            "kind": {"group": "diengine.opendilab.org", "version": "v1alpha1", "kind": "DIJob"},
            "resource": {"group": "diengine.opendilab.org", "version": "v1alpha1", "resource": "dijobs"},
            "object": {"apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJob",
                       "metadata": {"name": "flood", "annotations": annotations},
                       "spec": {"coordinator": {"template": {"spec": pod}}}},
        }
    }))
    .expect("a review serialises")
}

/// Until `until`: a connection that sends a request's headers one byte every 500 ms and never
/// ends them, opened again each time the webhook cuts it.
pub async fn slowloris(target: Target, counts: Arc<Counts>, until: Instant) {
    while Instant::now() < until {
        let Ok(stream) = target.connect().await else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        counts.slow_opened.fetch_add(1, Ordering::Relaxed);
        let (mut read, mut write) = tokio::io::split(stream);
        let trickle = async {
            write.write_all(b"POST /validate HTTP/1.1\r\nHost: webhook\r\n").await?;
            while Instant::now() < until {
                write.write_all(b"X").await?;
                write.flush().await?;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Ok::<(), std::io::Error>(())
        };
        let mut buf = [0u8; 256];
        tokio::select! {
            _ = trickle => {}
            _ = read.read(&mut buf) => {}
        }
    }
}

/// Until `until`: a TCP connection that never starts its TLS handshake, opened again when cut.
pub async fn silent(addr: SocketAddr, counts: Arc<Counts>, until: Instant) {
    while Instant::now() < until {
        let Ok(mut stream) = TcpStream::connect(addr).await else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        counts.silent_opened.fetch_add(1, Ordering::Relaxed);
        let mut buf = [0u8; 16];
        let left = until.saturating_duration_since(Instant::now());
        let _ = tokio::time::timeout(left, stream.read(&mut buf)).await;
    }
}

/// Until `until`: 7 MiB reviews, one after another, each on a keep-alive connection.
pub async fn large(target: Target, body: Arc<Vec<u8>>, counts: Arc<Counts>, until: Instant) {
    let request = request(&body, "keep-alive");
    while Instant::now() < until {
        let Ok(mut stream) = target.connect().await else { continue };
        while Instant::now() < until {
            if stream.write_all(&request).await.is_err() {
                break;
            }
            counts.large_sent.fetch_add(1, Ordering::Relaxed);
            match answer_status(&mut stream).await {
                Ok(_) => counts.large_answered.fetch_add(1, Ordering::Relaxed),
                Err(_) => break,
            };
        }
    }
}

/// Until `until`: requests that declare 64 MiB and send a little of it; each must get 413.
pub async fn oversized(target: Target, counts: Arc<Counts>, until: Instant) {
    let head = "POST /validate HTTP/1.1\r\nHost: webhook\r\nContent-Length: 67108864\r\n\r\n{";
    while Instant::now() < until {
        let Ok(mut stream) = target.connect().await else { continue };
        if stream.write_all(head.as_bytes()).await.is_ok() && matches!(answer_status(&mut stream).await, Ok(413)) {
            counts.oversized_refused.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Reads one answer whole (by its Content-Length) and gives its status.
async fn answer_status(stream: &mut TlsStream<TcpStream>) -> anyhow::Result<u16> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).await? == 0 {
            bail!("closed before the answer's end");
        }
        head.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&head);
    let status = text.split_whitespace().nth(1).and_then(|s| s.parse().ok()).context("no status")?;
    let length: usize = text
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned()))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).await?;
    Ok(status)
}

/// The `q` quantile (0..=1) of `samples`, sorted in place.
pub fn quantile(samples: &mut [Duration], q: f64) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    samples.sort();
    let rank = ((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len());
    samples[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_take_the_nearest_rank() {
        let mut samples: Vec<Duration> = (1..=100).rev().map(Duration::from_millis).collect();
        assert_eq!(quantile(&mut samples, 0.99), Duration::from_millis(99));
        assert_eq!(quantile(&mut samples, 0.5), Duration::from_millis(50));
        assert_eq!(quantile(&mut samples, 1.0), Duration::from_millis(100));
        assert_eq!(quantile(&mut [], 0.99), Duration::ZERO);
    }

    #[test]
    fn a_large_review_is_about_its_size_and_valid_json() {
        let body = review(7 << 20);
        assert!((6 << 20..8 << 20).contains(&body.len()), "{}", body.len());
        let parsed: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(parsed["request"]["object"]["metadata"]["name"], "flood");
    }
}
