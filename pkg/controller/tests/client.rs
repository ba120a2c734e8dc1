//! The reconciler's client against a TLS server on loopback: over HTTP/1.1 by default, even where
//! the server offers HTTP/2; asked for HTTP/2, many requests at once share one connection where the
//! server offers it, and go over HTTP/1.1 where it does not.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use di_controller::client::{Http, client};
use di_controller::metrics::Metrics;
use di_controller::timing::Timing;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio_rustls::TlsAcceptor;

/// The HTTP version of every request the server answered, by the connection it came on.
type Served = Arc<Mutex<HashMap<usize, Vec<http::Version>>>>;

/// A TLS server for 127.0.0.1 offering `alpn`: its URL, its certificate, and what it served.
async fn server(alpn: &[&[u8]]) -> (String, Vec<u8>, Served) {
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).unwrap();
    let der = cert.cert.der().to_vec();
    let key = rustls::pki_types::PrivateKeyDer::try_from(cert.signing_key.serialize_der()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![der.clone().into()], key)
        .unwrap();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://127.0.0.1:{}", listener.local_addr().unwrap().port());
    let served = Served::default();
    let record = served.clone();
    tokio::spawn(async move {
        for connection in 0usize.. {
            let (stream, _) = listener.accept().await.unwrap();
            let (acceptor, record) = (acceptor.clone(), record.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else { return };
                let answer = service_fn(move |request: http::Request<hyper::body::Incoming>| {
                    record.lock().unwrap().entry(connection).or_default().push(request.version());
                    async { Ok::<_, Infallible>(http::Response::new("ok".to_string())) }
                });
                let _ = auto::Builder::new(TokioExecutor::new()).serve_connection(TokioIo::new(tls), answer).await;
            });
        }
    });
    (url, der, served)
}

/// Sends `requests` requests at once to `url` over `version`, trusting `cert`; each is answered.
async fn ask(url: &str, cert: Vec<u8>, version: Http, requests: usize) {
    let mut config = kube::Config::new(url.parse().unwrap());
    config.root_cert = Some(vec![cert]);
    let client = client(&config, version, Some(Timing::new(Arc::new(Metrics::new())))).unwrap();
    let asks = (0..requests).map(|_| client.request_text(http::Request::get("/healthz").body(Vec::new()).unwrap()));
    for answer in futures::future::join_all(asks).await {
        assert_eq!(answer.unwrap(), "ok");
    }
}

#[tokio::test]
async fn requests_at_once_share_one_http2_connection_where_the_server_offers_it() {
    let (url, cert, served) = server(&[b"h2", b"http/1.1"]).await;
    ask(&url, cert, Http::V2, 50).await;
    let served = served.lock().unwrap();
    // Connections opened while the first was negotiating are dropped unused: one carries all.
    assert_eq!(served.len(), 1, "requests served on {} connections", served.len());
    let versions = served.values().next().unwrap();
    assert_eq!(versions.len(), 50);
    assert!(versions.iter().all(|v| *v == http::Version::HTTP_2), "{versions:?}");
}

#[tokio::test]
async fn asked_for_http2_a_server_without_it_is_asked_over_http1() {
    let (url, cert, served) = server(&[b"http/1.1"]).await;
    ask(&url, cert, Http::V2, 5).await;
    let versions: Vec<_> = served.lock().unwrap().values().flatten().copied().collect();
    assert_eq!(versions.len(), 5);
    assert!(versions.iter().all(|v| *v == http::Version::HTTP_11), "{versions:?}");
}

#[tokio::test]
async fn over_http1_requests_at_once_take_connections_of_their_own_though_http2_is_offered() {
    let (url, cert, served) = server(&[b"h2", b"http/1.1"]).await;
    ask(&url, cert, Http::V1, 20).await;
    let served = served.lock().unwrap();
    let versions: Vec<_> = served.values().flatten().copied().collect();
    assert_eq!(versions.len(), 20);
    assert!(versions.iter().all(|v| *v == http::Version::HTTP_11), "{versions:?}");
    // Twenty at once cannot share one HTTP/1.1 connection.
    assert!(served.len() > 1, "requests served on {} connection", served.len());
}
