//! A real `redis-server` on a free loopback port, started for a test, an example or a bench
//! and stopped when dropped; it can be killed and restarted on the same port mid-run.
#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

/// What `redis-server` logs once its listeners are open.
const READY: &str = "Ready to accept connections";

/// A `redis-server` child process on `127.0.0.1:port`.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts `redis-server` (from `PATH`) on a free port, with no persistence, and waits until
    /// it logs that it accepts connections.
    ///
    /// # Panics
    ///
    /// If `redis-server` is not installed, exits first, or is not ready within 10 s.
    pub fn start() -> Self {
        let port = free_port();
        let mut server = Self { port, child: None };
        server.restart();
        server
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills the server at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // A paused server must go on to die.
            let _ = Command::new("kill")
                .args(["-CONT", &child.id().to_string()])
                .status();
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server without closing its sockets (SIGSTOP): it accepts and reads nothing
    /// and answers nothing, as a Redis stuck on a slow command or a full disk would.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Lets a paused server go on (SIGCONT); it answers what it was sent meanwhile.
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("the server runs").id();
        let sent = Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .expect("kill runs");
        assert!(sent.success(), "kill {signal} {pid}");
    }

    /// Starts the server again on the same port (empty: nothing was persisted).
    pub fn restart(&mut self) {
        self.kill();
        let mut child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (apt-get install redis-server)");
        // Its log says when it is ready; the reader then drains the rest, so that the server
        // never blocks on a full pipe, and ends with it.
        let log = BufReader::new(child.stdout.take().expect("stdout is piped"));
        let (ready, is_ready) = mpsc::channel();
        std::thread::spawn(move || {
            let mut ready = Some(ready);
            for line in log.lines().map_while(Result::ok) {
                if line.contains(READY) {
                    ready.take().map(|ready| ready.send(()));
                }
            }
        });
        self.child = Some(child);
        match is_ready.recv_timeout(Duration::from_secs(10)) {
            Ok(()) => {}
            Err(RecvTimeoutError::Disconnected) => {
                panic!(
                    "redis-server on port {} exited before it was ready",
                    self.port
                )
            }
            Err(RecvTimeoutError::Timeout) => {
                panic!(
                    "redis-server on port {} was not ready within 10 s",
                    self.port
                )
            }
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A loopback port nothing listens on (the OS picks it; it is free again once the probe closes).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port()
}
