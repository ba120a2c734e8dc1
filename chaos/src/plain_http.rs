//! Just enough HTTP/1.1 over loopback for the orchestrator's probes and the replica endpoint. A
//! raw socket, not an HTTP client library, because the replica fault needs clients that send a
//! whole request and then hang up before the answer, which a client library does not let one do
//! deterministically.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// An answer: the status code and the body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: String,
}

/// The bytes of a request that asks the server to close the connection after its answer, so the
/// answer ends where the stream does.
pub fn request_bytes(method: &str, addr: SocketAddr, path: &str, body: Option<&str>) -> Vec<u8> {
    let body = body.unwrap_or("");
    format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Connects and sends a request; the caller reads the answer, or hangs up instead.
pub async fn send(addr: SocketAddr, request: &[u8]) -> anyhow::Result<TcpStream> {
    let mut stream = TcpStream::connect(addr).await.with_context(|| format!("connecting to {addr}"))?;
    stream.write_all(request).await?;
    stream.flush().await?;
    Ok(stream)
}

/// Reads an answer to its end.
pub async fn read_answer(mut stream: TcpStream) -> anyhow::Result<Answer> {
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await?;
    parse(&raw)
}

/// A whole exchange, bounded by `limit`.
pub async fn call(
    method: &str,
    addr: SocketAddr,
    path: &str,
    body: Option<&str>,
    limit: Duration,
) -> anyhow::Result<Answer> {
    let exchange = async { read_answer(send(addr, &request_bytes(method, addr, path, body)).await?).await };
    tokio::time::timeout(limit, exchange).await.with_context(|| format!("{method} {path}: no answer in {limit:?}"))?
}

/// The status code and the body of a complete answer (identity or chunked body).
pub fn parse(raw: &[u8]) -> anyhow::Result<Answer> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").context("an answer without a header's end")?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .with_context(|| format!("no status in {:?}", head.lines().next()))?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let body = if chunked { unchunk(body)? } else { body.to_owned() };
    Ok(Answer { status, body })
}

fn unchunk(mut rest: &str) -> anyhow::Result<String> {
    let mut body = String::new();
    loop {
        let (size, after) = rest.split_once("\r\n").context("a chunk without its size")?;
        let size = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16)?;
        if size == 0 {
            return Ok(body);
        }
        if after.len() < size {
            bail!("a chunk shorter than its size");
        }
        body.push_str(&after[..size]);
        rest = after[size..].trim_start_matches("\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_parse_with_either_body_encoding() {
        let plain = parse(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").unwrap();
        assert_eq!((plain.status, plain.body.as_str()), (200, "ok"));
        let chunked =
            parse(b"HTTP/1.1 409 Conflict\r\ntransfer-encoding: chunked\r\n\r\n3\r\n{\"a\r\n2\r\n\"}\r\n0\r\n\r\n")
                .unwrap();
        assert_eq!((chunked.status, chunked.body.as_str()), (409, "{\"a\"}"));
        assert!(parse(b"HTTP/1.1 200 OK\r\n").is_err(), "an answer cut short is no answer");
    }
}
