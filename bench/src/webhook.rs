//! Webhook latency and throughput, TLS against plain HTTP.

use std::sync::Arc;
use std::time::{Duration, Instant};

use di_webhook::certs::Bundle;
use di_webhook::server::router;
use di_webhook::tls::{CertResolver, certified_key, serve};

/// Connections kept busy at once, like the API server's concurrent admission calls.
const CONNECTIONS: usize = 8;
/// Reviews sent per measurement, after a warm-up of a tenth as many.
const REQUESTS: usize = 4000;

pub struct Figures {
    pub p50: Duration,
    pub p99: Duration,
    pub per_second: f64,
}

pub struct Webhook {
    pub plain: Figures,
    pub tls: Figures,
}

impl Webhook {
    pub fn json(&self) -> serde_json::Value {
        let f = |x: &Figures| serde_json::json!({"p50_us": x.p50.as_micros(), "p99_us": x.p99.as_micros(), "requests_per_second": x.per_second.round()});
        serde_json::json!({
            "connections": CONNECTIONS, "requests": REQUESTS,
            "plain": f(&self.plain), "tls": f(&self.tls),
            "ratio_p50": ratio(self.tls.p50, self.plain.p50),
            "ratio_p99": ratio(self.tls.p99, self.plain.p99),
            "ratio_throughput": self.tls.per_second / self.plain.per_second,
            "goal_p99_under_us": 2000, "goal_met": self.tls.p99 < Duration::from_millis(2),
        })
    }

    pub fn markdown(&self) -> String {
        let row = |what: &str, tls: String, plain: String, r: f64| format!("| {what} | {tls} | {plain} | {r:.2} |\n");
        let us = |d: Duration| format!("{} µs", d.as_micros());
        let mut text = format!(
            "## Webhook\n\nOne DIJob validation review per request; {CONNECTIONS} connections, {REQUESTS} requests each way, on loopback.\n\n| figure | TLS | plain HTTP (baseline) | ratio |\n|---|---|---|---|\n"
        );
        text += &row("p50 latency", us(self.tls.p50), us(self.plain.p50), ratio(self.tls.p50, self.plain.p50));
        text += &row("p99 latency", us(self.tls.p99), us(self.plain.p99), ratio(self.tls.p99, self.plain.p99));
        text += &row(
            "throughput",
            format!("{:.0}/s", self.tls.per_second),
            format!("{:.0}/s", self.plain.per_second),
            self.tls.per_second / self.plain.per_second,
        );
        let verdict = if self.tls.p99 < Duration::from_millis(2) { "met" } else { "MISSED" };
        text += &format!("\nGoal: p99 over TLS under 2 ms: {verdict} ({}).\n", us(self.tls.p99));
        text
    }
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(1e-9)
}

/// A validation review of the CartPole example, as the API server would send it.
fn review() -> anyhow::Result<Vec<u8>> {
    let text = std::fs::read_to_string(di_e2e::binaries::repo_root().join("manifests/examples/cartpole-dqn.yaml"))?;
    let object =
        di_api::manifest::yaml_documents(&text)?.into_iter().next().ok_or_else(|| anyhow::anyhow!("empty example"))?;
    Ok(serde_json::to_vec(&serde_json::json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "bench", "operation": "CREATE", "userInfo": {"username": "bench"}, "namespace": "default",
            "kind": {"group": "diengine.opendilab.org", "version": "v1alpha1", "kind": "DIJob"},
            "resource": {"group": "diengine.opendilab.org", "version": "v1alpha1", "resource": "dijobs"},
            "object": object,
        }
    }))?)
}

pub async fn run() -> anyhow::Result<Webhook> {
    let body = review()?;
    let plain_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let plain_url = format!("http://{}/validate", plain_listener.local_addr()?);
    tokio::spawn(async move { axum::serve(plain_listener, router()).await });

    let bundle = Bundle::generate(&["127.0.0.1".into()])?;
    let resolver = CertResolver::new(certified_key(bundle.cert.as_bytes(), bundle.key.as_bytes())?);
    let tls_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let tls_url = format!("https://{}/validate", tls_listener.local_addr()?);
    tokio::spawn(serve(tls_listener, router(), resolver, std::future::pending()));

    let plain_client = reqwest::Client::builder().pool_max_idle_per_host(CONNECTIONS).build()?;
    let tls_client = reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(bundle.ca_cert.as_bytes())?)
        .use_rustls_tls()
        .pool_max_idle_per_host(CONNECTIONS)
        .build()?;
    let plain = measure(&plain_client, &plain_url, &body).await?;
    let tls = measure(&tls_client, &tls_url, &body).await?;
    Ok(Webhook { plain, tls })
}

async fn measure(client: &reqwest::Client, url: &str, body: &[u8]) -> anyhow::Result<Figures> {
    let body = Arc::new(body.to_vec());
    load(client, url, &body, REQUESTS / 10).await?;
    let start = Instant::now();
    let mut latencies = load(client, url, &body, REQUESTS).await?;
    let elapsed = start.elapsed();
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() as f64 - 1.0) * q).round() as usize];
    Ok(Figures { p50: at(0.50), p99: at(0.99), per_second: latencies.len() as f64 / elapsed.as_secs_f64() })
}

/// Sends `total` requests over `CONNECTIONS` workers; returns each request's latency.
async fn load(client: &reqwest::Client, url: &str, body: &Arc<Vec<u8>>, total: usize) -> anyhow::Result<Vec<Duration>> {
    let mut workers = vec![];
    for w in 0..CONNECTIONS {
        let (client, url, body) = (client.clone(), url.to_owned(), body.clone());
        let count = total / CONNECTIONS + usize::from(w < total % CONNECTIONS);
        workers.push(tokio::spawn(async move {
            let mut out = Vec::with_capacity(count);
            for _ in 0..count {
                let start = Instant::now();
                let response = client.post(&url).body(body.as_ref().clone()).send().await?;
                anyhow::ensure!(response.status().is_success(), "the webhook answered {}", response.status());
                response.bytes().await?;
                out.push(start.elapsed());
            }
            Ok::<_, anyhow::Error>(out)
        }));
    }
    let mut all = Vec::with_capacity(total);
    for w in workers {
        all.extend(w.await??);
    }
    Ok(all)
}
