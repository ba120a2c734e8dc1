//! A request to the replica endpoint of the local run on this machine, as DI-engine's client sends
//! it: a JSON body, one connection per request.

use anyhow::{Context, anyhow};
use di_api::contract::REPLICAS_PORT;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;

pub async fn call(method: &str, path: &str, body: &serde_json::Value) -> anyhow::Result<serde_json::Value> {
    let address = format!("127.0.0.1:{REPLICAS_PORT}");
    let stream = tokio::net::TcpStream::connect(&address)
        .await
        .with_context(|| format!("no local run answers at {address}; start one with kubectl di run --local"))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    let request = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, &address)
        .body(Full::new(Bytes::from(body.to_string())))?;
    let response = sender.send_request(request).await?;
    let bytes = response.into_body().collect().await?.to_bytes();
    serde_json::from_slice(&bytes).map_err(|e| anyhow!("the local run's answer is not JSON: {e}"))
}
