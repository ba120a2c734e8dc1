//! A TCP proxy that hands on every chunk of the upstream's answers `delay` after it arrived, as a
//! disk's fsync behind etcd or a network hop in front of the API server would: latency, not a cap
//! on throughput (chunks queue, each with its own due time), and the bytes untouched, so TLS and
//! gRPC pass through. tokio's timer counts whole milliseconds, so the delay added is at least the
//! one asked for and is measured (`added`), not assumed.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

pub struct DelayProxy {
    pub addr: SocketAddr,
    pub delay: Duration,
    added: Arc<Added>,
    task: JoinHandle<()>,
}

/// Chunks the timer held, and the time they were held in all, in microseconds.
#[derive(Default)]
struct Added {
    chunks: AtomicU64,
    micros: AtomicU64,
}

impl DelayProxy {
    /// Listens on loopback and forwards to `upstream`, holding what the upstream answers.
    pub async fn start(upstream: SocketAddr, delay: Duration) -> std::io::Result<DelayProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let added = Arc::new(Added::default());
        let counted = added.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let added = counted.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(upstream).await else { return };
                    let _ = (client.set_nodelay(true), server.set_nodelay(true));
                    let ((client_read, client_write), (server_read, server_write)) =
                        (client.into_split(), server.into_split());
                    tokio::join!(
                        pipe(client_read, server_write, Duration::ZERO, None),
                        pipe(server_read, client_write, delay, Some(&added)),
                    );
                });
            }
        });
        Ok(DelayProxy { addr, delay, added, task })
    }

    /// The mean time the proxy held an answer's chunk, as measured; chunks held up by a slow
    /// reader are not counted.
    pub fn added(&self) -> Duration {
        let chunks = self.added.chunks.load(Ordering::Relaxed).max(1);
        Duration::from_micros(self.added.micros.load(Ordering::Relaxed) / chunks)
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Copies `from` to `to`, each chunk `delay` after it was read; counts the time held in `added`.
async fn pipe(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, delay: Duration, added: Option<&Added>) {
    let (chunks, mut due) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let read = async move {
        let mut buffer = vec![0u8; 64 * 1024];
        while let Ok(n @ 1..) = from.read(&mut buffer).await {
            if chunks.send((Instant::now(), buffer[..n].to_vec())).is_err() {
                break;
            }
        }
    };
    let write = async {
        while let Some((arrived, chunk)) = due.recv().await {
            // A chunk already due when its turn comes waited for the reader to take the ones
            // before it, not for the proxy: only the others say what the proxy's timer added.
            let early = Instant::now() < arrived + delay;
            if !delay.is_zero() {
                tokio::time::sleep_until(arrived + delay).await;
            }
            if let Some(added) = added.filter(|_| early) {
                added.chunks.fetch_add(1, Ordering::Relaxed);
                added.micros.fetch_add(arrived.elapsed().as_micros() as u64, Ordering::Relaxed);
            }
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(read, write);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn answers_arrive_late_and_whole() {
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let upstream = echo.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut socket, _) = echo.accept().await.unwrap();
            let mut buffer = [0u8; 1024];
            while let Ok(n @ 1..) = socket.read(&mut buffer).await {
                socket.write_all(&buffer[..n]).await.unwrap();
            }
        });
        let proxy = DelayProxy::start(upstream, Duration::from_millis(20)).await.unwrap();
        let mut client = TcpStream::connect(proxy.addr).await.unwrap();
        let start = Instant::now();
        client.write_all(b"ping").await.unwrap();
        let mut answer = [0u8; 4];
        client.read_exact(&mut answer).await.unwrap();
        assert_eq!(&answer, b"ping");
        assert!(start.elapsed() >= Duration::from_millis(20), "{:?}", start.elapsed());
        assert!(proxy.added() >= Duration::from_millis(20), "{:?}", proxy.added());
    }
}
