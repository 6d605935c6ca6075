//! A real `redis-server` on a free loopback port, started for a test, an example or a bench
//! and stopped when dropped; it can be killed and restarted on the same port mid-run.
#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` child process on `127.0.0.1:port`.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts `redis-server` (from `PATH`) on a free port, with no persistence, and waits until
    /// it answers `PING`.
    ///
    /// # Panics
    ///
    /// If `redis-server` is not installed or does not answer within 10 s.
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
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (apt-get install redis-server)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.answers_ping() {
            assert!(
                Instant::now() < deadline,
                "redis-server did not answer on port {} within 10 s",
                self.port
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Whether the server answers `PING` with `+PONG`, over a plain socket.
    pub fn answers_ping(&self) -> bool {
        let Ok(mut socket) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = socket.set_read_timeout(Some(Duration::from_secs(1)));
        if socket.write_all(b"PING\r\n").is_err() {
            return false;
        }
        let mut line = String::new();
        BufReader::new(socket).read_line(&mut line).is_ok() && line.starts_with("+PONG")
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
