//! The webhook asked to stop, as a rollout or a drain asks the orchestrator (SIGTERM): it goes on
//! answering for its drain, since the Service's endpoints and kube-proxy's rules forget a
//! stopping replica a moment later and the API server's calls still reach it; each connection is
//! closed after its next answer, so the API server's next call opens one to a replica that
//! stays, and an idle one at the drain's end; then the port is closed and the server returns.

mod serving;

use std::time::{Duration, Instant};

use di_webhook::limits::Limits;
use serving::{connect, head, post, review, start};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Reads the body of an answer whose head was read.
async fn body(stream: &mut (impl AsyncReadExt + Unpin), head: &str) {
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("a content-length");
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).await.expect("the answer's body");
}

/// Whether the server closes the connection (within 2 s), nothing more said.
async fn closes(stream: &mut (impl AsyncReadExt + Unpin)) -> bool {
    let mut more = [0u8; 1];
    matches!(tokio::time::timeout(Duration::from_secs(2), stream.read(&mut more)).await, Ok(Ok(0) | Err(_)))
}

/// Sends `request` and reads its answer; its head.
async fn call(stream: &mut (impl AsyncReadExt + AsyncWriteExt + Unpin), request: &[u8]) -> String {
    stream.write_all(request).await.unwrap();
    let head = head(stream).await.expect("an answer");
    assert!(head.starts_with("http/1.1 200"), "{head}");
    body(stream, &head).await;
    head
}

#[tokio::test]
async fn a_stopping_webhook_answers_through_its_drain_closing_each_connection_after_its_answer() {
    let drain = Duration::from_secs(3);
    let mut server = start(Limits { drain, ..Limits::default() }).await;
    let request = post(&serde_json::to_vec(&review(0)).unwrap());

    // Two kept connections, as the API server keeps them, answered and left open.
    let mut kept = connect(&server).await;
    let answer = call(&mut kept, &request).await;
    assert!(!answer.contains("connection: close"), "kept alive before the stop: {answer}");
    let mut idle = connect(&server).await;
    call(&mut idle, &request).await;

    server.stop();
    let stopped = Instant::now();
    // Calls routed here during the drain (the rules not yet updated) are answered, and once the
    // server has taken the stop in, each connection is closed after its answer.
    loop {
        let mut late = connect(&server).await;
        let answer = call(&mut late, &request).await;
        if answer.contains("connection: close") {
            assert!(closes(&mut late).await, "closed after its answer");
            break;
        }
        assert!(stopped.elapsed() < drain, "no answer in the drain closed its connection");
    }
    // So is a kept connection after its next call: the API server's call after opens one to a
    // replica that stays.
    let answer = call(&mut kept, &request).await;
    assert!(answer.contains("connection: close"), "{answer}");
    assert!(closes(&mut kept).await, "closed after its answer");
    // A connection opened and not yet used (its client is about to send) is never closed before
    // its call, not even at the drain's end; a connection left idle stays open through the drain
    // (closing it could cross a call on its way), and is closed at its end.
    let mut fresh = connect(&server).await;
    assert!(stopped.elapsed() < drain, "the calls above fit in the drain; make it longer");
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(drain.saturating_sub(stopped.elapsed()), idle.read(&mut byte)).await;
    assert!(read.is_err(), "the idle connection was closed during the drain: {read:?}");
    assert!(closes(&mut idle).await, "the idle connection closed at the drain's end");
    let answer = call(&mut fresh, &request).await;
    assert!(answer.contains("connection: close"), "{answer}");

    let took = server.served(stopped).await;
    assert!(took >= drain, "returned {took:?} after the stop, before the drain ended");
    assert!(took < drain + Duration::from_secs(2), "returned {took:?} after the stop");
    assert!(TcpStream::connect(server.addr).await.is_err(), "the port is closed after the drain");
}
