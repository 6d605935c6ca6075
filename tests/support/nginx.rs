//! A real nginx on a free loopback port, rate-limited by `limit_req` (a token bucket that
//! every request shares, and if asked a bucket per account beside it), started for a test
//! and stopped when dropped. Its access log, in a format of our own, is the judge of what the
//! server saw.
//!
//! ```text
//! let nginx = Nginx::start(Limit { rate: 10, burst: 2, retry_after: 1 });
//! // GET nginx.url(): 200 "ok", or 429 with `Retry-After: 1` when the bucket is empty
//! nginx.stop(); // graceful: every request nginx took is in the log
//! let log = nginx.access_log();
//!
//! let nginx = Nginx::start(Limits { global, per_account: Some(account) });
//! // GET nginx.url() with `x-account: a`: 200, 429 when account a's bucket is empty, or 503
//! // when the bucket of all requests is
//! ```

use std::fmt::Write as _;
use std::fs::{self, File};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The path nginx answers on; every other path is 404 and outside the limit.
pub const PATH: &str = "/call";

/// A request header that nginx copies into its access log: the instant the client sent the
/// request, as seconds since the Unix epoch with a fraction (see [`sent_now`]).
pub const SENT_HEADER: &str = "x-sent";

/// A request header naming the caller's account: nginx copies it into its access log, and
/// keys the bucket of [`Limits::per_account`] by it. A request without it is outside that
/// limit (nginx skips a zone whose key is empty).
pub const ACCOUNT_HEADER: &str = "x-account";

/// One bucket: `limit_req` with `rate` requests per second and `burst` more at once,
/// `nodelay`; what it refuses gets `Retry-After: retry_after` (whole seconds), or no
/// Retry-After if `retry_after` is 0 (nginx's own default: a bare 429 that says nothing of
/// the limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub rate: u32,
    pub burst: u32,
    pub retry_after: u32,
}

/// What nginx enforces: `global`, one bucket for every request; and, if set, `per_account`,
/// a bucket of its own for each value of [`ACCOUNT_HEADER`], both on every request.
///
/// Alone, the global bucket refuses with a 429. Beside the accounts' buckets, an account's
/// refuses with a 429 ([`ACCOUNT_REFUSAL`]) and the global one with a 503
/// ([`GLOBAL_REFUSAL_BESIDE_ACCOUNTS`], `limit_req`'s own default), so that a client tells
/// which limit it met. nginx answers one status for every zone of a location
/// (`limit_req_status`), and applies `limit_req` once per request, not again after an internal
/// redirect; so the request passes the account's bucket in `/call`, which proxies it to
/// `/all` on the same nginx, a request of its own, where the global bucket is. A request that
/// the global bucket refuses has spent a token of its account's bucket; one that its account's
/// refuses never reaches the global one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub global: Limit,
    pub per_account: Option<Limit>,
}

impl From<Limit> for Limits {
    fn from(global: Limit) -> Self {
        Self {
            global,
            per_account: None,
        }
    }
}

/// The status of a refusal by an account's bucket.
pub const ACCOUNT_REFUSAL: u16 = 429;

/// The status of a refusal by the global bucket beside the accounts'.
pub const GLOBAL_REFUSAL_BESIDE_ACCOUNTS: u16 = 503;

/// The names of the zones, as nginx's error log gives them when it refuses a request
/// (see [`Nginx::refused_by_zone`]).
pub const GLOBAL_ZONE: &str = "all";
pub const ACCOUNT_ZONE: &str = "account";

/// One line of the access log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logged {
    /// When nginx logged the request (its `$msec`: time since the Unix epoch, to the
    /// millisecond, read from nginx's clock at the start of the event-loop turn that
    /// answered the request).
    pub at: Duration,
    pub status: u16,
    /// When the client sent it, from its [`SENT_HEADER`], if it had one.
    pub sent: Option<Duration>,
    /// Its [`ACCOUNT_HEADER`], if it had one.
    pub account: Option<String>,
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
    /// Starts nginx in the foreground (`daemon off`) on a free port with `limits` (a [`Limit`]
    /// for the global bucket alone), and waits until it accepts connections.
    ///
    /// # Panics
    ///
    /// If nginx is not installed, exits before it listens (the panic shows its error log), or
    /// does not listen within 10 s.
    pub fn start(limits: impl Into<Limits>) -> Self {
        let limits = limits.into();
        assert!(
            limits.global.rate > 0,
            "limits.global.rate must be positive"
        );
        assert!(
            limits.per_account.is_none_or(|limit| limit.rate > 0),
            "limits.per_account's rate must be positive"
        );
        let binary = binary().unwrap_or_else(|| {
            panic!("nginx is not installed (apt-get install nginx, or run scripts/test)")
        });
        // The port is free when probed, but another process may take it before nginx binds
        // it: then nginx says so, and another port is tried.
        for _ in 0..3 {
            let mut nginx = Self::spawn(&binary, limits);
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

    fn spawn(binary: &Path, limits: Limits) -> Self {
        let port = free_port();
        let dir =
            std::env::temp_dir().join(format!("paceline-nginx-{}-{port}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("html")).expect("a directory for nginx's files");
        for path in [PATH, INNER_PATH] {
            fs::write(dir.join("html").join(&path[1..]), "ok").expect("the answer's file");
        }
        // Run as root, nginx would run its worker as `nobody`, who may not be let into the
        // temporary directory: then the worker stays root (a test server on loopback).
        let root = fs::metadata(&dir).expect("the directory is there").uid() == 0;
        fs::write(dir.join("nginx.conf"), config(port, limits, root)).expect("nginx.conf");
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

    /// How many requests nginx refused by the limit of `zone` ([`GLOBAL_ZONE`] or
    /// [`ACCOUNT_ZONE`]), by its error log, where it names the zone of each refusal. A test
    /// checks by it that each status means the limit it stands for.
    pub fn refused_by_zone(&self, zone: &str) -> usize {
        let text = fs::read_to_string(self.dir.join("error.log")).unwrap_or_default();
        let by = format!("by zone \"{zone}\"");
        text.lines()
            .filter(|line| line.contains("limiting requests") && line.contains(&by))
            .count()
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
    ///
    /// Drop the clients first: nginx's graceful stop closes the idle keep-alive connections,
    /// but after a burst of requests at once it waited on some of a reqwest client's other
    /// connections until the 5 s here ran out; a client dropped first has closed them.
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

/// Where `/call` sends a request, beside the accounts' buckets, to meet the global one (see
/// [`Limits`]); outside the access log.
const INNER_PATH: &str = "/all";

/// The directive that adds a refusal's `Retry-After` of `seconds` (`always`: `add_header`
/// alone skips error statuses), or none for 0.
fn retry_after_header(seconds: u32) -> String {
    match seconds {
        0 => "# No Retry-After.".to_owned(),
        seconds => format!("add_header Retry-After {seconds} always;"),
    }
}

/// nginx's configuration, every path relative to its directory.
///
/// `limit_req` runs in nginx's preaccess phase, after the rewrite phase in which `return`
/// answers: a location that answered with `return 200 "ok"` would never be limited (tried on
/// nginx 1.22: every request got its 200). So the accepted answer is a static file, served in
/// the content phase, after the limit. A refusal is sent to a named location (`@limited`),
/// which adds the `Retry-After` (`always`: `add_header` alone skips error statuses) and
/// answers there.
///
/// Beside the accounts' buckets, `/call` holds the account's bucket and proxies what it lets
/// through to `/all`, which holds the global bucket and answers 503 when it is empty; the
/// proxy passes that answer on as it came (`proxy_intercept_errors` is off), its
/// `Retry-After` too. `/all` and its refusals stay out of the access log, which has one line
/// per request of the client's.
fn config(port: u16, limits: Limits, root: bool) -> String {
    let Limit {
        rate,
        burst,
        retry_after,
    } = limits.global;
    let user = if root { "user root root;" } else { "" };
    let retry_after = retry_after_header(retry_after);
    let account = ACCOUNT_HEADER.replace('-', "_");
    let (account_zone, locations) = match limits.per_account {
        None => (
            String::new(),
            format!(
                r#"        location = {PATH} {{
            root html;
            limit_req zone={GLOBAL_ZONE} burst={burst} nodelay;
            limit_req_status 429;
            error_page 429 = @limited;
        }}
        location @limited {{
            {retry_after}
            return 429 "slow down\n";
        }}"#
            ),
        ),
        Some(per_account) => (
            format!(
                "# A bucket for each account, keyed by its header.\n    \
                 limit_req_zone $http_{account} zone={ACCOUNT_ZONE}:1m rate={}r/s;",
                per_account.rate
            ),
            format!(
                r#"        location = {PATH} {{
            limit_req zone={ACCOUNT_ZONE} burst={account_burst} nodelay;
            limit_req_status {ACCOUNT_REFUSAL};
            error_page {ACCOUNT_REFUSAL} = @account_limited;
            proxy_pass http://127.0.0.1:{port}{INNER_PATH};
        }}
        location @account_limited {{
            {account_retry_after}
            return {ACCOUNT_REFUSAL} "slow down, account\n";
        }}
        location = {INNER_PATH} {{
            access_log off;
            root html;
            limit_req zone={GLOBAL_ZONE} burst={burst} nodelay;
            limit_req_status {GLOBAL_REFUSAL_BESIDE_ACCOUNTS};
            error_page {GLOBAL_REFUSAL_BESIDE_ACCOUNTS} = @limited;
        }}
        location @limited {{
            access_log off;
            {retry_after}
            return {GLOBAL_REFUSAL_BESIDE_ACCOUNTS} "slow down, everyone\n";
        }}"#,
                account_burst = per_account.burst,
                account_retry_after = retry_after_header(per_account.retry_after),
            ),
        ),
    };
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
    log_format paceline '$msec $status $http_{sent} $http_{account}';
    access_log access.log paceline;
    # One key for every request, so all share one bucket.
    limit_req_zone "all" zone={GLOBAL_ZONE}:1m rate={rate}r/s;
    {account_zone}
    server {{
        listen 127.0.0.1:{port};
{locations}
    }}
}}
"#,
        sent = SENT_HEADER.replace('-', "_"),
    )
}

/// `1700000000.123 429 1700000000.122456 a` (`-` for no sent instant, or no account). An
/// account's name is one field: it has no spaces.
pub fn parse_line(line: &str) -> Option<Logged> {
    let mut fields = line.split(' ');
    let at = seconds(fields.next()?)?;
    let status = fields.next()?.parse().ok()?;
    let sent = match fields.next()? {
        "-" => None,
        sent => Some(seconds(sent)?),
    };
    let account = match fields.next()? {
        "" => return None,
        "-" => None,
        account => Some(account.to_owned()),
    };
    fields.next().is_none().then_some(Logged {
        at,
        status,
        sent,
        account,
    })
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

/// Long enough after nginx logged a refusal for the client to have read it: a loopback round
/// trip is a fraction of a millisecond, and a wave of eight starts leaves the client within a
/// few (stamps 150 µs apart on a loaded 2-core machine); nginx logs by a clock read once per
/// turn of its event loop, to the millisecond, so a finer bound would count the wave's tail.
/// A request the client sent this long or more after the refusal was logged, and inside its
/// Retry-After, was sent into a Retry-After the client knew of.
pub const LATE: Duration = Duration::from_millis(10);

/// The most requests the client sent (by their stamps) within any `span`, of `log`.
pub fn most_sent_within<'a>(log: impl IntoIterator<Item = &'a Logged>, span: Duration) -> usize {
    let mut sent: Vec<Duration> = log.into_iter().filter_map(|entry| entry.sent).collect();
    sent.sort();
    (0..sent.len())
        .map(|i| {
            sent[i..]
                .iter()
                .take_while(|&&s| s < sent[i] + span)
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// One measurement against nginx at a time: they run in real time, and share two cores with
/// whatever else runs.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs a measurement on a runtime of its own (two worker threads), when no other measurement
/// runs.
pub fn alone<T>(measurement: impl Future<Output = T>) -> T {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(measurement)
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
