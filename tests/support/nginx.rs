//! A real nginx on a free loopback port, rate-limited by `limit_req` (a token bucket that
//! every request shares), started for a test and stopped when dropped. Its access log, in a
//! format of our own, is the judge of what the server saw.
//!
//! ```text
//! let nginx = Nginx::start(Limit { rate: 10, burst: 2, retry_after: 1 });
//! // GET nginx.url(): 200 "ok", or 429 with `Retry-After: 1` when the bucket is empty
//! nginx.stop(); // graceful: every request nginx took is in the log
//! let log = nginx.access_log();
//! ```

use std::fmt::Write as _;
use std::fs::{self, File};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The path nginx answers on; every other path is 404 and outside the limit.
pub const PATH: &str = "/call";

/// A request header that nginx copies into its access log: the instant the client sent the
/// request, as seconds since the Unix epoch with a fraction (see [`sent_now`]).
pub const SENT_HEADER: &str = "x-sent";

/// The limit nginx enforces: `limit_req` with `rate` requests per second and `burst` more
/// at once, `nodelay`, on one bucket for every request; what it refuses gets a 429 with
/// `Retry-After: retry_after` (whole seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub rate: u32,
    pub burst: u32,
    pub retry_after: u32,
}

/// One line of the access log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Logged {
    /// When nginx logged the request (its `$msec`: time since the Unix epoch, to the
    /// millisecond, read from nginx's clock at the start of the event-loop turn that
    /// answered the request).
    pub at: Duration,
    pub status: u16,
    /// When the client sent it, from its [`SENT_HEADER`], if it had one.
    pub sent: Option<Duration>,
}

/// An nginx master process (and its one worker) on `127.0.0.1:port`, with its
/// configuration, logs and pid file in a directory of its own, removed on drop.
#[derive(Debug)]
pub struct Nginx {
    port: u16,
    child: Option<Child>,
    dir: PathBuf,
}

/// How long nginx may take to listen, or to stop.
const PATIENCE: Duration = Duration::from_secs(10);

impl Nginx {
    /// Starts nginx in the foreground (`daemon off`) on a free port with `limit`, and waits
    /// until it accepts connections.
    ///
    /// # Panics
    ///
    /// If nginx is not installed, exits before it listens (the panic shows its error log), or
    /// does not listen within 10 s.
    pub fn start(limit: Limit) -> Self {
        assert!(limit.rate > 0, "limit.rate must be positive");
        let binary = binary().unwrap_or_else(|| {
            panic!("nginx is not installed (apt-get install nginx, or run scripts/test)")
        });
        // The port is free when probed, but another process may take it before nginx binds
        // it: then nginx says so, and another port is tried.
        for _ in 0..3 {
            let mut nginx = Self::spawn(&binary, limit);
            match nginx.wait_until_listening() {
                Ok(()) => return nginx,
                Err(log) if log.contains("Address already in use") => continue,
                Err(log) => panic!(
                    "nginx ({}) did not start on port {}:\n{log}",
                    binary.display(),
                    nginx.port
                ),
            }
        }
        panic!("nginx found its port taken three times");
    }

    fn spawn(binary: &Path, limit: Limit) -> Self {
        let port = free_port();
        let dir =
            std::env::temp_dir().join(format!("paceline-nginx-{}-{port}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("html")).expect("a directory for nginx's files");
        fs::write(dir.join("html").join(&PATH[1..]), "ok").expect("the answer's file");
        // Run as root, nginx would run its worker as `nobody`, who may not be let into the
        // temporary directory: then the worker stays root (a test server on loopback).
        let root = fs::metadata(&dir).expect("the directory is there").uid() == 0;
        fs::write(dir.join("nginx.conf"), config(port, limit, root)).expect("nginx.conf");
        let stderr = File::create(dir.join("stderr.log")).expect("a file for nginx's stderr");
        // Relative paths, in the configuration too, are relative to the prefix (`-p`);
        // `-e` sends the errors of the start, before the configuration is read, there too.
        let child = Command::new(binary)
            .arg("-p")
            .arg(&dir)
            .args(["-c", "nginx.conf", "-e", "error.log", "-g", "daemon off;"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("could not run {}: {e}", binary.display()));
        Self {
            port,
            child: Some(child),
            dir,
        }
    }

    /// Polls the port until it accepts a connection (nginx has bound it; the worker takes
    /// what waits in the backlog), or fails with nginx's logs if it exits or takes too long.
    fn wait_until_listening(&mut self) -> Result<(), String> {
        let address = SocketAddr::from(([127, 0, 0, 1], self.port));
        let deadline = Instant::now() + PATIENCE;
        loop {
            let child = self.child.as_mut().expect("nginx was started");
            if let Some(status) = child.try_wait().expect("nginx's status") {
                self.child = None;
                return Err(format!("nginx exited ({status})\n{}", self.error_log()));
            }
            if TcpStream::connect_timeout(&address, Duration::from_millis(100)).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                self.stop();
                return Err(format!(
                    "not listening within {PATIENCE:?}\n{}",
                    self.error_log()
                ));
            }
            // Nothing tells when the socket is bound; a short pause between connects.
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The limited path's URL, `http://127.0.0.1:PORT/call`.
    pub fn url(&self) -> String {
        format!("{}{PATH}", self.base_url())
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The access log so far, in the order nginx finished the requests. nginx writes a line
    /// once it has sent the answer, so the last answers' lines may still be on their way:
    /// [`stop`](Self::stop) first for the whole log.
    ///
    /// # Panics
    ///
    /// On a line that is not in the harness's format.
    pub fn access_log(&self) -> Vec<Logged> {
        let text = fs::read_to_string(self.dir.join("access.log")).unwrap_or_default();
        text.lines()
            .map(|line| parse_line(line).unwrap_or_else(|| panic!("access log: {line:?}")))
            .collect()
    }

    /// What nginx wrote to its error log and to its stderr.
    pub fn error_log(&self) -> String {
        let mut all = String::new();
        for name in ["error.log", "stderr.log"] {
            let text = fs::read_to_string(self.dir.join(name)).unwrap_or_default();
            let _ = write!(all, "--- {name}\n{text}");
        }
        all
    }

    /// Stops nginx gracefully (SIGQUIT: it finishes and logs the requests it has taken), then
    /// harder if it lingers; its files stay until the drop. Stopping twice does nothing.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        // SIGQUIT, then SIGTERM (fast shutdown: the master still takes its worker down),
        // then SIGKILL of the master as a last resort.
        for signal in ["-QUIT", "-TERM"] {
            let _ = Command::new("kill")
                .args([signal, &child.id().to_string()])
                .status();
            let deadline = Instant::now() + PATIENCE / 2;
            while Instant::now() < deadline {
                if child.try_wait().ok().flatten().is_some() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        self.stop();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// nginx's configuration, every path relative to its directory.
///
/// `limit_req` runs in nginx's preaccess phase, after the rewrite phase in which `return`
/// answers: a location that answered with `return 200 "ok"` would never be limited (tried on
/// nginx 1.22: every request got its 200). So the accepted answer is a static file, served in
/// the content phase, after the limit. A refusal is sent to `@limited`, which adds the
/// `Retry-After` (`always`: `add_header` alone skips error statuses) and answers 429 there.
fn config(port: u16, limit: Limit, root: bool) -> String {
    let Limit {
        rate,
        burst,
        retry_after,
    } = limit;
    let user = if root { "user root root;" } else { "" };
    format!(
        r#"# Written by paceline's tests/support/nginx.rs.
{user}
worker_processes 1;
error_log error.log info;
pid nginx.pid;
events {{ worker_connections 256; }}
http {{
    # Not the packaged paths under /var/lib/nginx, which a user may not write.
    client_body_temp_path client_body_temp;
    proxy_temp_path proxy_temp;
    fastcgi_temp_path fastcgi_temp;
    uwsgi_temp_path uwsgi_temp;
    scgi_temp_path scgi_temp;
    default_type text/plain;
    log_format paceline '$msec $status $http_{sent}';
    access_log access.log paceline;
    # One key for every request, so all share one bucket.
    limit_req_zone "all" zone=paceline:1m rate={rate}r/s;
    server {{
        listen 127.0.0.1:{port};
        location = {PATH} {{
            root html;
            limit_req zone=paceline burst={burst} nodelay;
            limit_req_status 429;
            error_page 429 = @limited;
        }}
        location @limited {{
            add_header Retry-After {retry_after} always;
            return 429 "slow down\n";
        }}
    }}
}}
"#,
        sent = SENT_HEADER.replace('-', "_"),
    )
}

/// `1700000000.123 429 1700000000.122456` (or `-` for no sent instant).
pub fn parse_line(line: &str) -> Option<Logged> {
    let mut fields = line.split(' ');
    let at = seconds(fields.next()?)?;
    let status = fields.next()?.parse().ok()?;
    let sent = match fields.next()? {
        "-" => None,
        sent => Some(seconds(sent)?),
    };
    fields
        .next()
        .is_none()
        .then_some(Logged { at, status, sent })
}

/// Seconds with an optional fraction of up to nine digits.
fn seconds(text: &str) -> Option<Duration> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !digits(whole) || !digits(fraction) || fraction.len() > 9 {
        return None;
    }
    let nanos = format!("{fraction:0<9}").parse().ok()?;
    Some(Duration::new(whole.parse().ok()?, nanos))
}

/// The value of [`SENT_HEADER`] for a request sent now: microseconds since the Unix epoch,
/// on the clock nginx logs by.
pub fn sent_now() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is past 1970");
    format!("{}.{:06}", now.as_secs(), now.subsec_micros())
}

/// The nginx binary: `nginx` on `PATH`, else where packages put it (Debian's `/usr/sbin` is
/// not on every user's `PATH`).
fn binary() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default();
    on_path
        .into_iter()
        .chain(["/usr/sbin", "/usr/local/sbin", "/usr/local/nginx/sbin"].map(PathBuf::from))
        .map(|dir| dir.join("nginx"))
        .find(|candidate| candidate.is_file())
}

/// A loopback port nothing listens on (the OS picks it; it is free again once the probe closes).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port()
}
