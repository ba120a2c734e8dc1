//! The webhook under hostile clients, over real TLS on loopback and on one thread, as the
//! orchestrator runs it: a client that sends its headers byte by byte is cut off, an oversized
//! body is refused before it is read, and with many such clients at once an ordinary admission
//! still answers, and the thread stays free for the rest of the process (the Lease's renewals).

mod serving;

use std::sync::Arc;
use std::time::{Duration, Instant};

use di_webhook::limits::{Limits, MAX_BODY};
use serde_json::Value;
use serving::{Server, connect, post, review, start, status};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends a request's headers one byte every 100 ms, never ending them; says when the server
/// closed the connection, or that it did not within `limit`.
async fn slowloris(server: &Server, limit: Duration) -> Option<Duration> {
    let stream = connect(server).await;
    let started = Instant::now();
    let (mut read, mut write) = tokio::io::split(stream);
    let trickle = async {
        write.write_all(b"POST /validate HTTP/1.1\r\nHost: webhook\r\n").await?;
        loop {
            write.write_all(b"X").await?;
            write.flush().await?;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let closed = async {
        let mut buf = [0u8; 256];
        // Whatever the server says (a 408 or nothing), it ends with the connection closing.
        while matches!(read.read(&mut buf).await, Ok(n) if n > 0) {}
    };
    let cut = async {
        tokio::select! {
            r = trickle => { let _: std::io::Result<()> = r; }
            () = closed => {}
        }
    };
    tokio::time::timeout(limit, cut).await.ok().map(|()| started.elapsed())
}

#[tokio::test]
async fn a_client_that_sends_its_headers_byte_by_byte_is_cut_off() {
    let server = start(Limits { headers: Duration::from_secs(1), ..Limits::default() }).await;
    let cut = slowloris(&server, Duration::from_secs(20)).await;
    assert!(cut.is_some(), "a client still sending its headers after 20 s was never cut off");
}

#[tokio::test]
async fn an_oversized_body_is_refused_before_it_is_read() {
    let server = start(Limits::default()).await;
    let mut stream = connect(&server).await;
    let declared = 100 * MAX_BODY;
    let head = format!("POST /validate HTTP/1.1\r\nHost: webhook\r\nContent-Length: {declared}\r\n\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&vec![b' '; 64 * 1024]).await.unwrap();
    stream.flush().await.unwrap();
    // Answered with 64 KiB of the 800 MiB sent: the server did not wait for the rest.
    let answered = tokio::time::timeout(Duration::from_secs(10), status(&mut stream)).await;
    assert_eq!(answered.expect("no answer while the body was still to come"), Some(413));

    // A body without a length is read only up to the limit.
    let mut stream = connect(&server).await;
    let head = "POST /validate HTTP/1.1\r\nHost: webhook\r\nTransfer-Encoding: chunked\r\n\r\n";
    stream.write_all(head.as_bytes()).await.unwrap();
    let chunk = [format!("{:x}\r\n", 1 << 20).into_bytes(), vec![b' '; 1 << 20], b"\r\n".to_vec()].concat();
    let send = async {
        for _ in 0..(declared >> 20) {
            if stream.write_all(&chunk).await.is_err() {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(30), send).await;
    assert_eq!(status(&mut stream).await, Some(413));
}

#[tokio::test]
async fn admissions_answer_while_hostile_clients_flood_the_webhook() {
    let server = Arc::new(start(Limits::default()).await);
    let mut hostile = tokio::task::JoinSet::new();
    for _ in 0..60 {
        let server = server.clone();
        hostile.spawn(async move {
            slowloris(&server, Duration::from_secs(60)).await;
        });
    }
    // Connections that never say a word, not even a TLS hello.
    let mut silent = vec![];
    for _ in 0..30 {
        silent.push(TcpStream::connect(server.addr).await.unwrap());
    }
    let big = Arc::new(post(&serde_json::to_vec(&review(7 << 20)).unwrap()));
    for _ in 0..4 {
        let (server, big) = (server.clone(), big.clone());
        hostile.spawn(async move {
            loop {
                let mut stream = connect(&server).await;
                if stream.write_all(&big).await.is_ok() {
                    let _ = status(&mut stream).await;
                }
            }
        });
    }
    // The Lease's renewals stand for every other task on the thread: how late a tick comes.
    let lateness = tokio::spawn(async {
        let mut worst = Duration::ZERO;
        let (started, mut last) = (Instant::now(), Instant::now());
        while started.elapsed() < Duration::from_secs(8) {
            tokio::time::sleep(Duration::from_millis(100)).await;
            worst = worst.max(last.elapsed().saturating_sub(Duration::from_millis(100)));
            last = Instant::now();
        }
        worst
    });

    let client = reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(server.ca.as_bytes()).unwrap())
        .use_rustls_tls()
        .build()
        .unwrap();
    let body = serde_json::to_vec(&review(0)).unwrap();
    let mut slowest = Duration::ZERO;
    for _ in 0..20 {
        let sent = Instant::now();
        let reply = client.post(format!("https://{}/validate", server.addr)).body(body.clone()).send();
        let reply =
            tokio::time::timeout(Duration::from_secs(5), reply).await.expect("an admission not answered in 5 s");
        let reply: Value = reply.unwrap().json().await.unwrap();
        assert_eq!(reply["response"]["allowed"], true, "{reply}");
        slowest = slowest.max(sent.elapsed());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let worst = lateness.await.unwrap();
    eprintln!("slowest admission {slowest:?}; the thread was busy for at most {worst:?} at once");
    // Parsing a 7 MiB review in a debug build takes seconds; done on the thread, it shows here.
    assert!(worst < Duration::from_secs(2), "the thread was held for {worst:?} at once");
    hostile.abort_all();
    drop(silent);
}
