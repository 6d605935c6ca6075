//! A rate limiter from another ecosystem's registry on a free loopback port, started for a
//! test and stopped when dropped: Flask-Limiter (`flask_limiter_app.py` beside this file,
//! under `python3`), express-rate-limit (`express_rate_limit/app.js`, under `node`) or
//! NestJS's throttler (`nestjs_throttler/app.mjs`, under `node`). Its
//! request log, written by the server process as it answers, is the judge of what the server
//! saw.
//!
//! ```text
//! let flask = LimiterApp::start("20 per 2 seconds");
//! // GET flask.url(): 200 "ok", or 429 with Flask-Limiter's `Retry-After` (seconds, rounded down)
//! let log = flask.stop(); // every request the server answered
//! ```

use std::fs::{self, File};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

/// The server's script, and the pinned packages it needs (which `scripts/test` installs).
const APP: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/support/flask_limiter_app.py"
);
const REQUIREMENTS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/support/flask_limiter_requirements.txt"
);
/// slowapi's app (FastAPI under uvicorn), beside Flask-Limiter's.
const SLOWAPI: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/slowapi_app.py");
/// express-rate-limit's app, in its directory with its pinned packages (`npm ci` there).
const EXPRESS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/support/express_rate_limit"
);

/// NestJS's throttler's app, in its directory with its pinned packages (`npm ci` there).
const NESTJS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/support/nestjs_throttler"
);

/// How long the server may take to listen.
const PATIENCE: Duration = Duration::from_secs(20);

/// One line of the server's log: a request to the limited path, as the server answered it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Logged {
    /// When it arrived, since the Unix epoch (Python's `time.time()` at the first hook).
    pub arrived: Duration,
    pub status: u16,
    /// The `Retry-After` the answer carried, in whole seconds.
    pub retry_after: Option<u64>,
}

/// A rate limiter's app on `127.0.0.1:port`, its log and stderr in a directory of its own,
/// removed on drop.
#[derive(Debug)]
pub struct LimiterApp {
    port: u16,
    child: Option<Child>,
    dir: PathBuf,
}

impl LimiterApp {
    /// Starts the app with a fixed window of `limit` (Flask-Limiter's notation, e.g. `"20 per
    /// 2 seconds"`) on every request, and waits until it listens.
    ///
    /// # Panics
    ///
    /// If `python3` or the Python packages are missing (the message says how to install
    /// them), or the app exits before it listens (the panic shows its stderr), or it does not
    /// listen within 20 s.
    pub fn start(limit: &str) -> Self {
        Self::start_with(limit, "fixed-window")
    }

    /// Starts the app as [`LimiterApp::start`] does, with Flask-Limiter's `strategy`
    /// (`"fixed-window"`, `"moving-window"` or `"sliding-window-counter"`).
    ///
    /// # Panics
    ///
    /// As [`LimiterApp::start`].
    pub fn start_with(limit: &str, strategy: &str) -> Self {
        require_packages("flask, flask_limiter");
        let mut python = Command::new("python3");
        python
            .arg(APP)
            .args(["--limit", limit, "--strategy", strategy]);
        Self::spawn(python)
    }

    /// Starts slowapi's app (`slowapi_app.py`: FastAPI under uvicorn) with `limit` by
    /// `strategy`, as [`LimiterApp::start_with`] starts Flask-Limiter's.
    ///
    /// # Panics
    ///
    /// As [`LimiterApp::start`].
    pub fn slowapi(limit: &str, strategy: &str) -> Self {
        require_packages("slowapi, fastapi, uvicorn");
        let mut python = Command::new("python3");
        python
            .arg(SLOWAPI)
            .args(["--limit", limit, "--strategy", strategy]);
        Self::spawn(python)
    }

    /// Starts express-rate-limit's app (see `express_rate_limit/app.js`: a burst limit and a
    /// sustained one, each announced as a policy of the IETF draft's eighth revision), and
    /// waits until it listens.
    ///
    /// # Panics
    ///
    /// If `node` or the app's packages are missing (the message says how to install them),
    /// or as [`LimiterApp::start`].
    pub fn express_rate_limit() -> Self {
        Self::express(&[])
    }

    /// Starts express-rate-limit's app with its limiters stacked as a service that limits
    /// the whole key and each account keeps them (`--stacked`: 20 a second for every
    /// request, 5 a second for each `X-Account`), and waits until it listens.
    ///
    /// # Panics
    ///
    /// As [`LimiterApp::express_rate_limit`].
    pub fn express_stacked() -> Self {
        Self::express(&["--stacked"])
    }

    /// Starts NestJS's throttler's app (see `nestjs_throttler/app.mjs`: two named
    /// throttlers, "short", 20 per 2 s, and "long", 1000 per 60 s, each announced in the
    /// `X-RateLimit-*` fields its name ends), and waits until it listens.
    ///
    /// # Panics
    ///
    /// As [`LimiterApp::express_rate_limit`].
    pub fn nestjs_throttler() -> Self {
        let modules = std::path::Path::new(NESTJS).join("node_modules/@nestjs/throttler");
        assert!(
            modules.exists(),
            "NestJS's throttler is not installed: npm ci --prefix {NESTJS}, or run scripts/test"
        );
        let mut node = Command::new("node");
        node.arg(format!("{NESTJS}/app.mjs"));
        Self::spawn(node)
    }

    fn express(args: &[&str]) -> Self {
        let modules = std::path::Path::new(EXPRESS).join("node_modules/express-rate-limit");
        assert!(
            modules.exists(),
            "express-rate-limit is not installed: npm ci --prefix {EXPRESS}, or run scripts/test"
        );
        let mut node = Command::new("node");
        node.arg(format!("{EXPRESS}/app.js")).args(args);
        Self::spawn(node)
    }

    /// Runs `command` with `--log` and the log's path, and waits until it listens.
    fn spawn(mut command: Command) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "paceline-limiter-{}-{}",
            std::process::id(),
            unique()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("a directory for the app's files");
        let stderr = File::create(dir.join("stderr.log")).expect("a file for the app's stderr");
        let mut child = command
            .arg("--log")
            .arg(dir.join("requests.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("could not run {command:?}: {e}"));
        // The app binds a port the OS picks, then says which: no other process can take it
        // between a probe and the bind. The reader then drains stdout until the app ends.
        let out = BufReader::new(child.stdout.take().expect("stdout is piped"));
        let (port, listening) = mpsc::channel();
        std::thread::spawn(move || {
            let mut port = Some(port);
            for line in out.lines().map_while(Result::ok) {
                if let Some(number) = line.strip_prefix("listening on ") {
                    port.take()
                        .map(|port| port.send(number.trim().parse::<u16>()));
                }
            }
        });
        let mut server = Self {
            port: 0,
            child: Some(child),
            dir,
        };
        match listening.recv_timeout(PATIENCE) {
            Ok(Ok(port)) => server.port = port,
            Ok(Err(e)) => panic!("the app said an unreadable port: {e}"),
            Err(RecvTimeoutError::Disconnected) => {
                server.stop_process();
                panic!("the app exited before it listened:\n{}", server.stderr())
            }
            Err(RecvTimeoutError::Timeout) => {
                server.stop_process();
                panic!(
                    "the app was not listening within {PATIENCE:?}:\n{}",
                    server.stderr()
                )
            }
        }
        server
    }

    /// The limited path's URL, `http://127.0.0.1:PORT/call`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/call", self.port)
    }

    /// Stops the server and returns its log: every request it answered, in the order it
    /// wrote them. (Each line is written before its answer is sent, so the log holds every
    /// request a client has an answer to.)
    ///
    /// # Panics
    ///
    /// On a line that is not in the app's format.
    pub fn stop(&mut self) -> Vec<Logged> {
        self.stop_process();
        let text = fs::read_to_string(self.dir.join("requests.log")).unwrap_or_default();
        text.lines()
            .map(|line| parse_line(line).unwrap_or_else(|| panic!("request log: {line:?}")))
            .collect()
    }

    /// What the app wrote to its stderr.
    pub fn stderr(&self) -> String {
        fs::read_to_string(self.dir.join("stderr.log")).unwrap_or_default()
    }

    fn stop_process(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for LimiterApp {
    fn drop(&mut self) {
        self.stop_process();
        // A test that failed on an answer (a 500, say) shows what the app said of it.
        let said = self.stderr();
        if std::thread::panicking() && !said.trim().is_empty() {
            eprintln!("the limiter's app wrote to its stderr:\n{said}");
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Panics with the way to install them unless `python3` can import `modules`.
fn require_packages(modules: &str) {
    let install = format!("python3 -m pip install -r {REQUIREMENTS}, or run scripts/test");
    let check = Command::new("python3")
        .args(["-c", &format!("import {modules}")])
        .stdout(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("python3 is not installed ({e}): apt-get install python3 python3-pip, then {install}"));
    assert!(
        check.status.success(),
        "python3 cannot import {modules} ({install}):\n{}",
        String::from_utf8_lossy(&check.stderr)
    );
}

/// A number no other server of this process has had.
fn unique() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// `1700000000.123456 429 0` (or `-` for no Retry-After).
pub fn parse_line(line: &str) -> Option<Logged> {
    let mut fields = line.split(' ');
    let (seconds, micros) = fields.next()?.split_once('.')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(seconds) || !digits(micros) || micros.len() != 6 {
        return None;
    }
    let arrived =
        Duration::from_secs(seconds.parse().ok()?) + Duration::from_micros(micros.parse().ok()?);
    let status = fields.next()?.parse().ok()?;
    let retry_after = match fields.next()? {
        "-" => None,
        after => Some(after.parse().ok()?),
    };
    fields.next().is_none().then_some(Logged {
        arrived,
        status,
        retry_after,
    })
}
