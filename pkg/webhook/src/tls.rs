//! HTTPS with rustls only. The serving certificate sits behind a resolver that can be swapped
//! while serving, so rotated or re-mounted certificates take effect without a restart.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use rustls::ServerConfig;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio_rustls::TlsAcceptor;
use tracing::{debug, info, warn};

use crate::limits::Limits;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("no certificate in the PEM")]
    NoCertificate,
    #[error("reading PEM: {0}")]
    Pem(#[from] rustls_pki_types::pem::Error),
    #[error("the private key: {0}")]
    Key(#[from] rustls::Error),
    #[error("{0}: {1}")]
    File(PathBuf, std::io::Error),
}

/// Parses a PEM certificate chain and private key into what rustls serves.
pub fn certified_key(cert_pem: &[u8], key_pem: &[u8]) -> Result<CertifiedKey, TlsError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem).collect::<Result<_, _>>()?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate);
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem)?;
    let provider = rustls::crypto::ring::default_provider();
    Ok(CertifiedKey::from_der(chain, key, &provider)?)
}

/// The certificate currently served; [`CertResolver::set`] swaps it for new handshakes.
#[derive(Debug)]
pub struct CertResolver {
    current: RwLock<Arc<CertifiedKey>>,
}

impl CertResolver {
    pub fn new(key: CertifiedKey) -> Arc<Self> {
        Arc::new(CertResolver { current: RwLock::new(Arc::new(key)) })
    }

    pub fn set(&self, key: CertifiedKey) {
        *self.current.write().expect("certificate lock") = Arc::new(key);
    }
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().expect("certificate lock").clone())
    }
}

pub fn server_config(resolver: Arc<CertResolver>) -> ServerConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    // HTTP/1.1 only, as kubebuilder's webhook servers: the API server speaks it, and HTTP/2's
    // streams would each need the deadlines HTTP/1.1's header read timeout gives for free
    // (and bring rapid-reset floods).
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config
}

/// Serves `router` over TLS on `listener` until `shutdown` resolves, within the default limits.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    resolver: Arc<CertResolver>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    serve_with(listener, router, resolver, &Limits::default(), shutdown).await
}

/// As [`serve`], within `limits`: a connection waits for a place before it is accepted, its
/// handshake and each request's headers have deadlines (`router_with` gives the rest of the
/// request its own). Once `shutdown` resolves it goes on answering for `limits.drain`, closing
/// each connection after its next answer, then returns when the last is closed (at most
/// [`LAST_ANSWERS`] later).
pub async fn serve_with(
    listener: TcpListener,
    router: Router,
    resolver: Arc<CertResolver>,
    limits: &Limits,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let places = Arc::new(Semaphore::new(limits.connections));
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(limits.headers);
    let (closing, closed) = watch::channel(false);
    let serving = Serving {
        acceptor: TlsAcceptor::from(Arc::new(server_config(resolver))),
        router,
        http,
        handshake: limits.handshake,
        draining: Arc::new(AtomicBool::new(false)),
        closing: closed,
    };
    accept_until(&listener, &places, shutdown, &serving).await;

    // Asked to stop: every answer now closes its connection, so each of the API server's kept
    // connections ends after its next call, and the call after opens one to a replica that
    // stays. An idle connection is closed only at the drain's end: closing it at once could cross
    // a call the API server is sending on it, which it would not send again.
    info!(drain = ?limits.drain, "stopping: answering admissions a while longer");
    serving.draining.store(true, Ordering::Relaxed);
    accept_until(&listener, &places, tokio::time::sleep(limits.drain), &serving).await;
    drop(listener);
    let _ = closing.send(true);
    // Every place back is every connection closed.
    let all = u32::try_from(limits.connections).unwrap_or(u32::MAX);
    let _ = tokio::time::timeout(LAST_ANSWERS, places.acquire_many(all)).await;
}

/// How long a stopping webhook waits, after its drain, for the answers still in flight.
pub const LAST_ANSWERS: Duration = Duration::from_secs(1);

/// Accepts connections, each once it has a place, and serves them, until `until`.
async fn accept_until(
    listener: &TcpListener,
    places: &Arc<Semaphore>,
    until: impl std::future::Future<Output = ()>,
    serving: &Serving,
) {
    tokio::pin!(until);
    loop {
        let place = tokio::select! {
            place = places.clone().acquire_owned() => place.expect("the connection semaphore is never closed"),
            _ = &mut until => return,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    warn!("accepting a webhook connection: {e}");
                    continue;
                }
            },
            _ = &mut until => return,
        };
        serving.spawn(stream, peer, place);
    }
}

/// What serving a connection needs, shared by all of them.
struct Serving {
    acceptor: TlsAcceptor,
    router: Router,
    http: http1::Builder,
    handshake: Duration,
    /// Set once asked to stop: every answer then closes its connection.
    draining: Arc<AtomicBool>,
    /// Turns true at the drain's end: a connection that has answered is then closed.
    closing: watch::Receiver<bool>,
}

impl Serving {
    /// Serves one connection on a task of its own, holding `place` until it closes; gracefully
    /// closed (after the answer in flight, an idle one at once) at the drain's end, if it has
    /// answered before.
    fn spawn(&self, stream: TcpStream, peer: SocketAddr, place: OwnedSemaphorePermit) {
        let acceptor = self.acceptor.clone();
        // Whether this connection has answered: one that has not is never closed before its first
        // call (its client opened it to send one), which then closes it (`Connection: close`).
        let answered = Arc::new(AtomicBool::new(false));
        let (seen, draining) = (answered.clone(), self.draining.clone());
        let router =
            self.router.clone().layer(axum::middleware::map_response(move |mut response: axum::response::Response| {
                seen.store(true, Ordering::Relaxed);
                if draining.load(Ordering::Relaxed) {
                    let close = axum::http::HeaderValue::from_static("close");
                    response.headers_mut().insert(axum::http::header::CONNECTION, close);
                }
                std::future::ready(response)
            }));
        let service = TowerToHyperService::new(router);
        let (http, mut closing) = (self.http.clone(), self.closing.clone());
        let handshake = self.handshake;
        tokio::spawn(async move {
            let _place = place;
            // A client that never finishes its handshake must not hold a place for long.
            let tls = match tokio::time::timeout(handshake, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => return debug!(%peer, "TLS handshake failed: {e}"),
                Err(_) => return debug!(%peer, "TLS handshake timed out"),
            };
            let connection = http.serve_connection(TokioIo::new(tls), service);
            tokio::pin!(connection);
            tokio::select! {
                biased;
                served = connection.as_mut() => {
                    if let Err(e) = served {
                        debug!(%peer, "webhook connection: {e}");
                    }
                    return;
                }
                _ = closing.wait_for(|closing| *closing) => {
                    if answered.load(Ordering::Relaxed) {
                        connection.as_mut().graceful_shutdown();
                    }
                }
            }
            if let Err(e) = connection.await {
                debug!(%peer, "webhook connection: {e}");
            }
        });
    }
}

/// Serves certificates mounted from files (cert-manager or the user's own Secret), reloading them
/// when the files change. It loads them once at the start, so a change between the caller's first
/// load and this watch is not missed.
pub async fn watch_files(cert: PathBuf, key: PathBuf, resolver: Arc<CertResolver>) {
    let mut seen = None;
    loop {
        let now = modified(&cert, &key);
        if seen != Some(now) {
            match load_files(&cert, &key) {
                Ok(k) => {
                    resolver.set(k);
                    if seen.is_some() {
                        info!(cert = %cert.display(), "reloaded the webhook's serving certificate");
                    }
                    seen = Some(now);
                }
                // Half-written files: try again on the next tick.
                Err(e) => warn!("reloading the webhook certificate: {e}"),
            }
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

pub fn load_files(cert: &Path, key: &Path) -> Result<CertifiedKey, TlsError> {
    let read = |p: &Path| std::fs::read(p).map_err(|e| TlsError::File(p.to_owned(), e));
    certified_key(&read(cert)?, &read(key)?)
}

fn modified(cert: &Path, key: &Path) -> (Option<SystemTime>, Option<SystemTime>) {
    let m = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    (m(cert), m(key))
}
