//! A slow network between a client and a server on loopback: a TCP proxy that holds every
//! byte for a while each way, to test how a client fares when its server is far away.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// A TCP proxy on a loopback port that passes each connection on to `upstream`, holding the
/// bytes `delay` in each direction: a round trip through it takes `2 × delay` longer than
/// one straight to the server, however many requests are in flight, and order is kept. It
/// runs on a thread of its own, in real time, so that it serves a synchronous program and
/// other processes alike; dropping it stops it and closes its connections.
///
/// Bandwidth is not limited, and the delay is the same for every byte: it models distance,
/// not a congested link.
///
/// # Examples
///
/// A Redis 10 ms away, each way:
///
/// ```no_run
/// use std::time::Duration;
/// use paceline_sim::SlowLink;
///
/// let link = SlowLink::start("127.0.0.1:6379".parse()?, Duration::from_millis(10))?;
/// let url = format!("redis://127.0.0.1:{}", link.port());
/// // ... connect to `url` instead of the server's own port.
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct SlowLink {
    port: u16,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SlowLink {
    /// Listens on a free loopback port and passes each connection on to `upstream`,
    /// `delay` each way.
    ///
    /// # Errors
    ///
    /// If no loopback port can be bound, or the thread cannot be started.
    pub fn start(upstream: SocketAddr, delay: Duration) -> io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("paceline-sim-slow-link")
            .enable_all()
            .build()?;
        // Bound here, so that the port is known and its error returned, from any context.
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let (stop, stopped) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("paceline-sim-slow-link".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let Ok(listener) = TcpListener::from_std(listener) else {
                        return;
                    };
                    tokio::select! {
                        _ = stopped => {}
                        () = accept(listener, upstream, delay) => {}
                    }
                });
                // Ends the connections' tasks.
                runtime.shutdown_background();
            })?;
        Ok(Self {
            port,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The loopback port to connect to instead of the server's.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for SlowLink {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn accept(listener: TcpListener, upstream: SocketAddr, delay: Duration) {
    while let Ok((client, _)) = listener.accept().await {
        tokio::spawn(async move {
            // A server that refuses the connection: the client's is closed as it ends.
            let Ok(server) = TcpStream::connect(upstream).await else {
                return;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let (client_in, client_out) = client.into_split();
            let (server_in, server_out) = server.into_split();
            tokio::spawn(carry(client_in, server_out, delay));
            tokio::spawn(carry(server_in, client_out, delay));
        });
    }
}

/// Carries what `from` reads to `to`, each read `delay` after it came: one task reads and
/// stamps, another writes when each is due, so that reading goes on while bytes wait.
async fn carry(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, delay: Duration) {
    let (held, mut due) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    tokio::spawn(async move {
        let mut buffer = vec![0; 64 * 1024];
        // An empty read is the end: it is passed on, as the rest, when due.
        loop {
            let read = from.read(&mut buffer).await.unwrap_or(0);
            let bytes = buffer[..read].to_vec();
            if held.send((Instant::now() + delay, bytes)).is_err() || read == 0 {
                return;
            }
        }
    });
    while let Some((at, bytes)) = due.recv().await {
        tokio::time::sleep_until(at).await;
        if bytes.is_empty() || to.write_all(&bytes).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes through the link come back in order, a round trip later by twice the delay at
    /// least; a server's close reaches the client.
    #[test]
    fn a_round_trip_through_the_link_takes_twice_its_delay_longer() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            // An echo server that closes after 3 writes.
            let server = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
            let upstream = server.local_addr().unwrap();
            tokio::spawn(async move {
                let (mut socket, _) = server.accept().await.unwrap();
                let mut buffer = [0; 16];
                for _ in 0..3 {
                    let read = socket.read(&mut buffer).await.unwrap();
                    socket.write_all(&buffer[..read]).await.unwrap();
                }
            });
            let delay = Duration::from_millis(20);
            let link = SlowLink::start(upstream, delay).unwrap();
            let mut client = TcpStream::connect((Ipv4Addr::LOCALHOST, link.port()))
                .await
                .unwrap();
            for word in [b"one", b"two", b"six"] {
                let sent = std::time::Instant::now();
                client.write_all(word).await.unwrap();
                let mut echoed = [0; 3];
                client.read_exact(&mut echoed).await.unwrap();
                assert_eq!(&echoed, word);
                assert!(sent.elapsed() >= 2 * delay, "{:?}", sent.elapsed());
            }
            let mut rest = Vec::new();
            client.read_to_end(&mut rest).await.unwrap();
            assert!(rest.is_empty(), "closed");
            drop(link);
        });
    }
}
