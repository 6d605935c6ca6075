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
    /// Arguments beyond the port and the no-persistence defaults (a cluster node's).
    extra: Vec<String>,
}

impl RedisServer {
    /// Starts `redis-server` (from `PATH`) on a free port, with no persistence, and waits until
    /// it logs that it accepts connections.
    ///
    /// # Panics
    ///
    /// If `redis-server` is not installed, exits first three times, or is not ready within
    /// 10 s.
    pub fn start() -> Self {
        Self::start_with(Vec::new)
    }

    /// Starts it with `extra()` arguments, on a free port. A port found free may be taken
    /// before the server binds it (by another test's server, or a connection's own port):
    /// a server that exits before it is ready is started again, on new ports, twice at most.
    fn start_with(extra: impl Fn() -> Vec<String>) -> Self {
        let mut tries = 0;
        loop {
            let mut server = Self {
                port: free_port(),
                child: None,
                extra: extra(),
            };
            match server.launch() {
                Ok(()) => return server,
                Err(Launch::Exited) if tries < 2 => tries += 1,
                Err(failure) => panic!("redis-server on port {} {failure}", server.port),
            }
        }
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts `redis-server` as [`start`](Self::start) does, but serving TLS only (its plain
    /// port off) with the files of `tls`, and with `more` arguments (ACL users: `--user NAME
    /// on >PASSWORD ~KEYS +COMMAND …`).
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start); also if this `redis-server` was built without TLS.
    pub fn start_tls(tls: &ServerTls, more: &[&str]) -> Self {
        let mut extra: Vec<String> = ["--port", "0", "--tls-port", "{port}"]
            .map(str::to_owned)
            .to_vec();
        extra.extend(tls.args());
        extra.extend(more.iter().map(|arg| (*arg).to_owned()));
        Self::start_with(move || extra.clone())
    }

    /// `rediss://127.0.0.1:PORT`, for a server started by [`start_tls`](Self::start_tls) or a
    /// node of [`RedisCluster::start_tls`].
    pub fn tls_url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.tls_port())
    }

    /// The port it serves TLS on.
    ///
    /// # Panics
    ///
    /// If it serves no TLS.
    pub fn tls_port(&self) -> u16 {
        let at = self
            .extra
            .iter()
            .position(|arg| arg == "--tls-port")
            .expect("a server started with TLS");
        match self.extra[at + 1].as_str() {
            "{port}" => self.port,
            port => port.parse().expect("a port"),
        }
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
    ///
    /// # Panics
    ///
    /// If it exits before it is ready, or is not ready within 10 s.
    pub fn restart(&mut self) {
        if let Err(failure) = self.launch() {
            panic!("redis-server on port {} {failure}", self.port);
        }
    }

    /// Starts the server on its port, and waits until it is ready.
    fn launch(&mut self) -> Result<(), Launch> {
        self.kill();
        let mut child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .args(
                self.extra
                    .iter()
                    .map(|arg| arg.replace("{port}", &self.port.to_string())),
            )
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
            Ok(()) => Ok(()),
            Err(RecvTimeoutError::Disconnected) => Err(Launch::Exited),
            Err(RecvTimeoutError::Timeout) => Err(Launch::NotReady),
        }
    }
}

/// How a server failed to start.
#[derive(Debug)]
enum Launch {
    Exited,
    NotReady,
}

impl std::fmt::Display for Launch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Launch::Exited => "exited before it was ready",
            Launch::NotReady => "was not ready within 10 s",
        })
    }
}

/// The PEM files a TLS `redis-server` reads.
#[derive(Debug, Clone)]
pub struct ServerTls {
    /// The server's certificate, for `127.0.0.1`.
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
    /// The CA whose certificates the server takes from clients.
    pub ca: std::path::PathBuf,
    /// Whether the server asks every client for a certificate.
    pub auth_clients: bool,
    /// The TLS versions it speaks (`"TLSv1.2"`), if not its default.
    pub protocols: Option<String>,
}

impl ServerTls {
    /// `redis-server`'s arguments for these files.
    fn args(&self) -> Vec<String> {
        let path = |file: &std::path::Path| file.to_str().expect("a UTF-8 path").to_owned();
        let mut args = vec![
            "--tls-cert-file".to_owned(),
            path(&self.cert),
            "--tls-key-file".to_owned(),
            path(&self.key),
            "--tls-ca-cert-file".to_owned(),
            path(&self.ca),
            "--tls-auth-clients".to_owned(),
            if self.auth_clients { "yes" } else { "no" }.to_owned(),
        ];
        if let Some(protocols) = &self.protocols {
            args.extend(["--tls-protocols".to_owned(), protocols.clone()]);
        }
        args
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

/// A Redis Cluster of `redis-server` nodes on free loopback ports, each serving a third of the
/// slots and no replica, made with `redis-cli --cluster create`; stopped when dropped.
#[derive(Debug)]
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
    /// Where the nodes keep their cluster configuration (which lets a restarted node rejoin).
    dir: std::path::PathBuf,
}

impl RedisCluster {
    /// Starts three nodes, joins them into a cluster and waits until every node says the
    /// cluster is ok.
    ///
    /// # Panics
    ///
    /// If `redis-server` or `redis-cli` is missing, or the cluster is not ok within 20 s.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts the cluster as [`start`](Self::start) does, each node with `more` arguments (ACL
    /// users: `--user NAME on >PASSWORD ~KEYS +COMMAND …`).
    pub fn start_with(more: &[&str]) -> Self {
        Self::start_nodes(|| more.iter().map(|arg| (*arg).to_owned()).collect())
    }

    /// Starts the cluster as [`start`](Self::start) does, each node serving TLS (its cluster
    /// bus too) on a port of its own beside its plain one, which the harness's `redis-cli`
    /// keeps using; `more` as in [`start_with`](Self::start_with).
    pub fn start_tls(tls: &ServerTls, more: &[&str]) -> Self {
        Self::start_nodes(|| {
            let mut args = vec![
                "--tls-port".to_owned(),
                free_port().to_string(),
                "--tls-cluster".to_owned(),
                "yes".to_owned(),
            ];
            args.extend(tls.args());
            args.extend(more.iter().map(|arg| (*arg).to_owned()));
            args
        })
    }

    /// The nodes' `rediss://` URLs, for a cluster started by [`start_tls`](Self::start_tls).
    pub fn tls_seeds(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::tls_url).collect()
    }

    fn start_nodes(more: impl Fn() -> Vec<String>) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "paceline-cluster-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).expect("a directory for the cluster's files");
        // Each node's cluster bus gets a free port of its own: by default it is the node's
        // port + 10000, which is past 65535 for a high free port, or taken.
        let node_args = || {
            [
                "--cluster-port",
                &free_port().to_string(),
                "--cluster-enabled",
                "yes",
                "--cluster-node-timeout",
                "2000",
                "--cluster-config-file",
                "nodes-{port}.conf",
                "--dir",
                dir.to_str().expect("a UTF-8 temporary directory"),
            ]
            .map(str::to_owned)
            .into_iter()
            .chain(more())
            .collect::<Vec<_>>()
        };
        let nodes: Vec<_> = (0..3).map(|_| RedisServer::start_with(node_args)).collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port()))
            .collect();
        let created = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(Stdio::null())
            .status()
            .expect("redis-cli must be installed (apt-get install redis-tools)");
        assert!(created.success(), "redis-cli --cluster create failed");
        let cluster = Self { nodes, dir };
        cluster.wait_until_ok();
        cluster
    }

    /// The nodes' URLs, to open the cluster from.
    pub fn seeds(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// Runs `redis-cli -p PORT args…` against node `i` and returns what it printed.
    pub fn cli(&self, i: usize, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &self.nodes[i].port().to_string()])
            .args(args)
            .output()
            .expect("redis-cli runs");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Waits until every node reports `cluster_state:ok` and agrees on the slots' owners.
    pub fn wait_until_ok(&self) {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let ok = (0..self.nodes.len()).all(|i| {
                self.cli(i, &["cluster", "info"])
                    .contains("cluster_state:ok")
            });
            let maps: Vec<String> = (0..self.nodes.len())
                .map(|i| self.cli(i, &["cluster", "slots"]))
                .collect();
            if ok
                && maps
                    .windows(2)
                    .all(|pair| pair[0].lines().count() == pair[1].lines().count())
            {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the cluster is not ok"
            );
            // Nodes gossip the new state among themselves; nothing here can hear of it sooner.
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The node id of node `i`.
    pub fn id(&self, i: usize) -> String {
        self.cli(i, &["cluster", "myid"])
    }

    /// The index of the node serving `slot`.
    pub fn owner(&self, slot: u16) -> usize {
        let nodes = self.cli(0, &["cluster", "nodes"]);
        let owner_port = nodes
            .lines()
            .find(|line| {
                line.split_whitespace()
                    .skip(8)
                    .any(|range| match range.split_once('-') {
                        Some((from, to)) => {
                            (from.parse::<u16>().unwrap()..=to.parse().unwrap()).contains(&slot)
                        }
                        None => range.parse::<u16>().ok() == Some(slot),
                    })
            })
            .and_then(|line| line.split_whitespace().nth(1))
            .and_then(|address| address.split([':', '@']).nth(1))
            .and_then(|port| port.parse::<u16>().ok())
            .expect("a node serves the slot");
        self.nodes
            .iter()
            .position(|node| node.port() == owner_port)
            .expect("the owner is one of ours")
    }

    /// The slot of `key`.
    pub fn slot(&self, key: &str) -> u16 {
        self.cli(0, &["cluster", "keyslot", key]).parse().unwrap()
    }

    /// Moves `slot` and its keys from the node that serves it to node `to`, the way
    /// `redis-cli --cluster reshard` does: importing and migrating states, `MIGRATE` of its
    /// keys, then the new owner told to every node.
    pub fn migrate(&self, slot: u16, to: usize) {
        let from = self.owner(slot);
        assert_ne!(from, to, "the slot is already there");
        let slot_arg = slot.to_string();
        let (from_id, to_id) = (self.id(from), self.id(to));
        self.cli(
            to,
            &["cluster", "setslot", &slot_arg, "importing", &from_id],
        );
        self.cli(
            from,
            &["cluster", "setslot", &slot_arg, "migrating", &to_id],
        );
        loop {
            let keys = self.cli(from, &["cluster", "getkeysinslot", &slot_arg, "100"]);
            if keys.is_empty() {
                break;
            }
            let to_port = self.nodes[to].port().to_string();
            let mut args = vec!["migrate", "127.0.0.1", &to_port, "", "0", "5000", "keys"];
            args.extend(keys.lines());
            self.cli(from, &args);
        }
        for i in 0..self.nodes.len() {
            self.cli(i, &["cluster", "setslot", &slot_arg, "node", &to_id]);
        }
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
