//! HTTPS with rustls only. The serving certificate sits behind a resolver that can be swapped
//! while serving, so rotated or re-mounted certificates take effect without a restart.

use std::path::{Path, PathBuf};
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
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
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
/// request its own).
pub async fn serve_with(
    listener: TcpListener,
    router: Router,
    resolver: Arc<CertResolver>,
    limits: &Limits,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let acceptor = TlsAcceptor::from(Arc::new(server_config(resolver)));
    let places = Arc::new(Semaphore::new(limits.connections));
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(limits.headers);
    let handshake = limits.handshake;
    tokio::pin!(shutdown);
    loop {
        let place = tokio::select! {
            place = places.clone().acquire_owned() => place.expect("the connection semaphore is never closed"),
            _ = &mut shutdown => return,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    warn!("accepting a webhook connection: {e}");
                    continue;
                }
            },
            _ = &mut shutdown => return,
        };
        let acceptor = acceptor.clone();
        let service = TowerToHyperService::new(router.clone());
        let http = http.clone();
        tokio::spawn(async move {
            let _place = place;
            // A client that never finishes its handshake must not hold a place for long.
            let tls = match tokio::time::timeout(handshake, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => return debug!(%peer, "TLS handshake failed: {e}"),
                Err(_) => return debug!(%peer, "TLS handshake timed out"),
            };
            if let Err(e) = http.serve_connection(TokioIo::new(tls), service).await {
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
