//! The webhook served over real TLS on loopback with a self-managed certificate: a client that
//! trusts only the generated CA gets answers; one that does not is refused; a swapped certificate
//! takes effect without a restart.

mod serving;

use std::sync::Arc;
use std::time::Duration;

use di_webhook::certs::Bundle;
use di_webhook::server::router;
use di_webhook::tls::{CertResolver, certified_key, serve};
use serde_json::Value;

fn client_trusting(ca_pem: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca_pem.as_bytes()).unwrap())
        .use_rustls_tls()
        .build()
        .unwrap()
}

async fn start(bundle: &Bundle) -> (String, Arc<CertResolver>, tokio::sync::oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://127.0.0.1:{}", listener.local_addr().unwrap().port());
    let resolver = CertResolver::new(certified_key(bundle.cert.as_bytes(), bundle.key.as_bytes()).unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve(listener, router(), resolver.clone(), async move {
        let _ = stopped.await;
    }));
    (url, resolver, stop)
}

#[tokio::test]
async fn serves_admission_reviews_to_clients_that_trust_the_ca() {
    let bundle = Bundle::generate(&["127.0.0.1".into(), "localhost".into()]).unwrap();
    let (url, _resolver, _stop) = start(&bundle).await;
    // As the API server sends it: JSON, no matter the headers.
    let reply: Value = client_trusting(&bundle.ca_cert)
        .post(format!("{url}/validate"))
        .body(serde_json::to_vec(&serving::review(0)).unwrap())
        .send()
        .await
        .expect("TLS handshake with the generated CA")
        .json()
        .await
        .unwrap();
    assert_eq!(reply["response"]["allowed"], true);

    let stranger = Bundle::generate(&["127.0.0.1".into()]).unwrap();
    let refused = client_trusting(&stranger.ca_cert).get(format!("{url}/healthz")).send().await;
    assert!(refused.is_err(), "a client that does not trust our CA must not connect");
}

#[tokio::test]
async fn a_swapped_certificate_is_served_without_a_restart() {
    let first = Bundle::generate(&["127.0.0.1".into()]).unwrap();
    let (url, resolver, _stop) = start(&first).await;
    assert!(client_trusting(&first.ca_cert).get(format!("{url}/healthz")).send().await.is_ok());

    let second = Bundle::generate(&["127.0.0.1".into()]).unwrap();
    resolver.set(certified_key(second.cert.as_bytes(), second.key.as_bytes()).unwrap());
    assert!(client_trusting(&second.ca_cert).get(format!("{url}/healthz")).send().await.is_ok());
    assert!(client_trusting(&first.ca_cert).get(format!("{url}/healthz")).send().await.is_err());
}

#[tokio::test]
async fn certificates_reload_from_files() {
    let dir = std::env::temp_dir().join(format!("di-webhook-files-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    let first = Bundle::generate(&["127.0.0.1".into()]).unwrap();
    std::fs::write(&cert, &first.cert).unwrap();
    std::fs::write(&key, &first.key).unwrap();
    // Mounted a minute ago: the swap below then has a later mtime, however coarse the file clock.
    let earlier = std::time::SystemTime::now() - Duration::from_secs(60);
    for file in [&cert, &key] {
        std::fs::File::options().write(true).open(file).unwrap().set_modified(earlier).unwrap();
    }
    // The server starts with a certificate the files do not hold, so being served the first one
    // shows the watcher has read the files: what it picks up after the swap is a change.
    let placeholder = Bundle::generate(&["127.0.0.1".into()]).unwrap();
    let resolver = CertResolver::new(certified_key(placeholder.cert.as_bytes(), placeholder.key.as_bytes()).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://127.0.0.1:{}", listener.local_addr().unwrap().port());
    tokio::spawn(serve(listener, router(), resolver.clone(), std::future::pending()));
    tokio::spawn(di_webhook::tls::watch_files(cert.clone(), key.clone(), resolver));
    served(&first, &url, "the certificate in the files").await;

    let second = Bundle::generate(&["127.0.0.1".into()]).unwrap();
    // Mounted Secrets change by an atomic swap; write beside and rename.
    std::fs::write(dir.join("tls.key.new"), &second.key).unwrap();
    std::fs::write(dir.join("tls.crt.new"), &second.cert).unwrap();
    std::fs::rename(dir.join("tls.key.new"), &key).unwrap();
    std::fs::rename(dir.join("tls.crt.new"), &cert).unwrap();
    served(&second, &url, "the swapped certificate").await;
    let _ = std::fs::remove_dir_all(dir);
}

/// Waits until `url` serves `bundle`'s certificate. The watcher looks at the files every few
/// seconds and tells no one, so this asks until it answers.
async fn served(bundle: &Bundle, url: &str, what: &str) {
    let client = client_trusting(&bundle.ca_cert);
    let answered = async {
        while client.get(format!("{url}/healthz")).send().await.is_err() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), answered).await.unwrap_or_else(|_| panic!("{what} was not served"));
}
