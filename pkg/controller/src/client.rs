//! The orchestrator's client of the API server, for the reconciler, the Lease (a client of its
//! own, on connections apart) and the replica endpoint: kube's own stack (base URI, credentials,
//! extra headers, retries of 429, 503 and 504, the kubeconfig's timeouts and TLS server name),
//! over HTTP/1.1 by default, or HTTP/2 where the server offers it and `--api-http2` asks for it,
//! its sockets sending at once (`TCP_NODELAY`, which kube's own builder leaves off).
//!
//! HTTP/1.1 carries one request per connection at a time, so the creates in flight open as many
//! connections, each with its TLS handshake and buffers (about 37 KiB): at most `IDLE_KEPT` stay
//! open after a burst, and the allocator gives the rest back, so 256 creates in flight (the
//! default) held 56.7 MiB with a thousand running jobs (the goal is 64 MiB; commit ba1b477).
//! HTTP/2 carries every request and watch as a stream of one connection, but kube-apiserver, on
//! the same machine and saturated, spent about 0.4 s more CPU serving a hundred jobs starting over
//! one HTTP/2 connection than over HTTP/1.1 connections, and the jobs took that much longer to run
//! (`docs/PERFORMANCE.md`, commit 0aad621). kube-apiserver
//! grants an HTTP/2 connection 100 streams unless its `--http2-max-streams-per-connection` says
//! more; requests past that wait here for a stream. Pings every 30 s find an HTTP/2 connection
//! that died quietly, since no read timeout can (watches are quiet for minutes). A connection idle
//! for `IDLE_CLOSED_AFTER` is closed here before kube-apiserver closes it. Not carried over
//! from kube's builder: the expiry of an exec plugin's client certificate (kube keeps that to
//! itself); the orchestrator runs on a service account's token.

use std::time::Duration;

use hyper_rustls::FixedServerNameResolver;
use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::ConfigExt;
use kube::client::retry::RetryPolicy;
use tower::retry::RetryLayer;
use tower::{BoxError, ServiceBuilder};

use crate::timing::Timing;

/// How often an HTTP/2 connection with nothing to read is pinged, and how long its answer may take.
const PING_EVERY: Duration = Duration::from_secs(30);
const PING_ANSWERED_WITHIN: Duration = Duration::from_secs(15);

/// How long a connection may sit idle in the pool. kube-apiserver closes one idle for 90 s (its
/// `IdleTimeout`), which is also hyper's default here: a request sent on a connection taken from
/// the pool just as the server closes it fails with "connection closed before message completed",
/// and a create cannot be sent again blindly (a bench invocation's limit died of it at 100 jobs of
/// 10, whose wide windows took up connections the runs before had left idle). Go's transport
/// retries such a request; closing idle connections well before the server does avoids it.
const IDLE_CLOSED_AFTER: Duration = Duration::from_secs(60);

/// Idle connections kept for the next requests. Over HTTP/1.1 each create in flight opens a
/// connection (about 37 KiB of buffers and TLS state), and a burst of 256 creates in flight left
/// about 300 idle for a minute afterwards. Within a burst a connection that comes back is taken by
/// the next create at once; only what a burst leaves idle beyond this closes.
const IDLE_KEPT: usize = 64;

/// Which HTTP the client speaks to the API server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Http {
    /// HTTP/1.1 only: a connection per request in flight, up to `IDLE_KEPT` kept for the next.
    V1,
    /// HTTP/2 where the API server offers it in TLS's ALPN, HTTP/1.1 where it does not.
    V2,
}

/// A client for `config` speaking `version`, every request timed by `timing` when given. Its
/// sockets send at once (`TCP_NODELAY`), as Go's clients' do: kube's own builder leaves Nagle's
/// algorithm on, under which a request written in two pieces on a busy connection can wait up to
/// 40 ms for the API server's delayed ACK (`docs/PERFORMANCE.md`, "Nagle's algorithm").
pub fn client(config: &kube::Config, version: Http, timing: Option<Timing>) -> Result<kube::Client, kube::Error> {
    pooled(config, version, timing, Pool { idle_for: IDLE_CLOSED_AFTER, kept: IDLE_KEPT })
}

/// As [`client`] (HTTP/1.1, untimed), keeping every idle connection for its minute: for a test
/// harness's clients, which stand in for many clients of their own.
pub fn keeping_every_connection(config: &kube::Config) -> Result<kube::Client, kube::Error> {
    pooled(config, Http::V1, None, Pool { idle_for: IDLE_CLOSED_AFTER, kept: usize::MAX })
}

/// How long an idle connection is kept, and how many are.
struct Pool {
    idle_for: Duration,
    kept: usize,
}

fn pooled(
    config: &kube::Config,
    version: Http,
    timing: Option<Timing>,
    pool: Pool,
) -> Result<kube::Client, kube::Error> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    // A request's frames (HTTP/2: many streams' frames) must not wait for the last one's ACK.
    http.set_nodelay(true);
    let tls =
        hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(config.rustls_client_config()?).https_or_http();
    let tls = match &config.tls_server_name {
        Some(name) => {
            let name = name
                .clone()
                .try_into()
                .map_err(|e| kube::Error::Service(format!("tls-server-name {name:?}: {e}").into()))?;
            tls.with_server_name_resolver(FixedServerNameResolver::new(name))
        }
        None => tls,
    };
    let tls = tls.enable_http1();
    let connector = match version {
        Http::V1 => tls.wrap_connector(http),
        Http::V2 => tls.enable_http2().wrap_connector(http),
    };
    let mut connector = TimeoutConnector::new(connector);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let http = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(pool.idle_for)
        .pool_max_idle_per_host(pool.kept)
        .http2_keep_alive_interval(PING_EVERY)
        .http2_keep_alive_timeout(PING_ANSWERED_WITHIN)
        .build(connector);
    let service = ServiceBuilder::new()
        .option_layer(timing)
        .layer(config.base_uri_layer())
        .option_layer(config.default_retry.then(|| RetryLayer::new(RetryPolicy::server_retry())))
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(http);
    Ok(kube::Client::new(service, config.default_namespace.clone()))
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;

    use super::*;

    /// A plain HTTP/1.1 server on loopback that keeps every connection open: its URL, and how
    /// many connections it accepted.
    async fn server() -> (String, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                count.fetch_add(1, Ordering::SeqCst);
                let answer = service_fn(|request: http::Request<hyper::body::Incoming>| async move {
                    // Slow enough that requests sent together each need a connection.
                    if request.uri().path() == "/slow" {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Ok::<_, Infallible>(http::Response::new("ok".to_string()))
                });
                tokio::spawn(hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), answer));
            }
        });
        (url, accepted)
    }

    /// Asks the server at `path` (`/slow` answers after a moment).
    async fn ask(client: &kube::Client, path: &str) {
        let request = http::Request::get(path).body(Vec::new()).unwrap();
        assert_eq!(client.request_text(request).await.unwrap(), "ok");
    }

    #[tokio::test]
    async fn a_connection_idle_past_the_pool_limit_is_closed_not_reused() {
        let (url, accepted) = server().await;
        let config = kube::Config::new(url.parse().unwrap());
        let client = pooled(&config, Http::V1, None, Pool { idle_for: Duration::from_millis(300), kept: 8 }).unwrap();
        ask(&client, "/healthz").await;
        ask(&client, "/healthz").await;
        assert_eq!(accepted.load(Ordering::SeqCst), 1, "a connection used a moment ago is reused");
        tokio::time::sleep(Duration::from_millis(700)).await;
        ask(&client, "/healthz").await;
        assert_eq!(accepted.load(Ordering::SeqCst), 2, "a connection idle past the limit is not");
    }

    #[tokio::test]
    async fn connections_idle_beyond_those_kept_are_closed() {
        let (url, accepted) = server().await;
        let config = kube::Config::new(url.parse().unwrap());
        let client = pooled(&config, Http::V1, None, Pool { idle_for: Duration::from_secs(60), kept: 1 }).unwrap();
        let burst = || futures::future::join_all((0..3).map(|_| ask(&client, "/slow")));
        burst().await;
        assert_eq!(accepted.load(Ordering::SeqCst), 3, "three requests at once, three connections");
        burst().await;
        assert_eq!(accepted.load(Ordering::SeqCst), 5, "one kept idle and reused, two opened again");
    }
}
