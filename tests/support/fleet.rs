//! A fleet of worker processes calling one HTTP-served simulated API through gates that share
//! one Redis, shared by `examples/fleet.rs` (which prints the run) and `tests/redis/fleet.rs`
//! (which asserts on it); both declare `redis_server.rs` beside it. The workers are the
//! example's binary, run with `--worker`.
#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use paceline_sim::http::serve;
use paceline_sim::{Log, Policy, Server, Which};

use super::redis_server::RedisServer;

/// The API's limit: `LIMIT` requests in each fixed window of `WINDOW`.
pub const LIMIT: usize = 20;
pub const WINDOW: Duration = Duration::from_secs(1);
/// The limit of the API that announces its quota (in the IETF draft's `RateLimit` fields):
/// `ANNOUNCED_LIMIT` requests in each fixed window of `ANNOUNCED_WINDOW`.
pub const ANNOUNCED_LIMIT: usize = 40;
pub const ANNOUNCED_WINDOW: Duration = Duration::from_secs(4);
/// By when an adaptive fleet started at twice the limit has found it, with room to spare (it
/// took 19 s in the runs measured).
pub const SETTLED: Duration = Duration::from_secs(25);

/// How the workers' gates pace their calls.
#[derive(Debug, Clone, Copy)]
pub enum Pace {
    /// A fixed rate for the whole fleet, in calls per second.
    Fixed(f64),
    /// An adaptive rate that starts (and is capped) at this many calls per second.
    Adaptive(f64),
    /// No rate of their own: the workers spend the quota the API announces on every
    /// response, which they share through Redis.
    Announced,
}

#[derive(Debug, Clone)]
pub struct Fleet {
    pub workers: usize,
    pub calls_each: usize,
    pub pace: Pace,
    /// Runs the first worker with its clocks 2 s ahead (libfaketime preloaded).
    pub first_clock_ahead: bool,
}

/// What one worker said it did.
#[derive(Debug, Clone, Default)]
pub struct WorkerReport {
    pub id: usize,
    pub done: usize,
    pub gave_up: usize,
    pub failed: usize,
    pub throttled: u64,
    /// Call starts the store held back for a backoff another worker began.
    pub held_by_fleet: u64,
    /// Call starts that went ahead without the store's word (Redis did not answer).
    pub store_unanswered: u64,
    /// The fleet's live gates, as the worker's store last heard.
    pub members: Option<u64>,
    pub elapsed_ms: u64,
    pub rate: Option<f64>,
    pub clock_ahead: bool,
    /// How far the worker's wall clock, read as it started, was ahead of the coordinator's
    /// when it spawned the worker (so it includes the worker's start-up time).
    pub clock_offset_ms: i64,
}

/// What the fleet did, from the workers' side and the server's.
#[derive(Debug, Clone)]
pub struct FleetRun {
    pub workers: Vec<WorkerReport>,
    pub log: Log,
    /// The API's limit: this many requests in each fixed window of `window`.
    pub limit: usize,
    pub window: Duration,
}

impl FleetRun {
    /// From the first request's arrival to the last's.
    pub fn span(&self) -> Duration {
        let arrivals: Vec<_> = self.log.requests().iter().map(|r| r.arrived).collect();
        match (arrivals.iter().min(), arrivals.iter().max()) {
            (Some(first), Some(last)) => *last - *first,
            _ => Duration::ZERO,
        }
    }

    /// The rate of accepted requests over the run, as a share of the limit's rate.
    pub fn limit_used(&self) -> f64 {
        self.limit_used_after(Duration::ZERO)
    }

    /// Like [`limit_used`](Self::limit_used), from `from` into the run to its end.
    pub fn limit_used_after(&self, from: Duration) -> f64 {
        let Some(first) = self.log.requests().iter().map(|r| r.arrived).min() else {
            return 0.0;
        };
        let later: Vec<_> = self
            .log
            .requests()
            .iter()
            .filter(|r| r.arrived >= first + from && r.is_accepted())
            .map(|r| r.arrived)
            .collect();
        let (Some(start), Some(end)) = (later.iter().min(), later.iter().max()) else {
            return 0.0;
        };
        let per_second = (later.len() - 1) as f64 / (*end - *start).as_secs_f64();
        per_second * self.window.as_secs_f64() / self.limit as f64
    }

    /// The server's own windows (aligned at its start) in which more than its limit of
    /// requests arrived: each is a window where the server turned some away.
    pub fn windows_over(&self) -> usize {
        self.log
            .fixed_windows_over(self.window, Duration::ZERO, self.limit, Which::AllArrived)
    }

    /// Arrivals in each second of the run: (accepted, throttled).
    pub fn per_second(&self) -> Vec<(usize, usize)> {
        let Some(start) = self.log.requests().iter().map(|r| r.arrived).min() else {
            return Vec::new();
        };
        let mut seconds = vec![(0, 0); self.span().as_secs() as usize + 1];
        for request in self.log.requests() {
            let second = &mut seconds[(request.arrived - start).as_secs() as usize];
            if request.is_accepted() {
                second.0 += 1;
            } else {
                second.1 += 1;
            }
        }
        seconds
    }

    /// Requests (accepted or not) that came when a window of any phase already held the
    /// limit.
    pub fn over_limit(&self) -> usize {
        self.log
            .over_limit(self.window, self.limit, Which::AllArrived)
    }
}

/// Where libfaketime (Debian's package `faketime`) lives, if it is installed.
///
/// A worker whose clock runs ahead gets the library preloaded, rather than started by the
/// `faketime` wrapper: the wrapper leaves a named semaphore and a shared-memory file behind
/// in `/dev/shm` for each process it starts, and on a long-lived machine a new wrapper whose
/// pid matches one left behind fails to start (`sem_open: File exists`).
pub fn libfaketime() -> Option<PathBuf> {
    let arch = format!("{}-linux-gnu", std::env::consts::ARCH);
    [
        format!("/usr/lib/{arch}/faketime/libfaketime.so.1"),
        format!("/lib/{arch}/faketime/libfaketime.so.1"),
    ]
    .into_iter()
    .map(PathBuf::from)
    .find(|path| path.exists())
}

/// How long a fleet's workers may take, all together, before the run fails: many times what
/// they take on a loaded 2-core machine.
const WORKERS_MAY_TAKE: Duration = Duration::from_secs(300);

/// Runs the fleet: a fresh `redis-server`, the simulated API served on a loopback port, and
/// `fleet.workers` processes of `worker_exe --worker`; returns when every worker has ended.
///
/// # Panics
///
/// As [`Workers::wait`].
pub async fn run(worker_exe: &Path, fleet: &Fleet, namespace: &str) -> FleetRun {
    let redis = RedisServer::start();
    let (limit, window, policy) = match fleet.pace {
        Pace::Announced => {
            let policy = Policy::fixed_window(ANNOUNCED_LIMIT as u32, ANNOUNCED_WINDOW);
            (
                ANNOUNCED_LIMIT,
                ANNOUNCED_WINDOW,
                policy.announce_quota(true),
            )
        }
        _ => (LIMIT, WINDOW, Policy::fixed_window(LIMIT as u32, WINDOW)),
    };
    let api = Server::builder()
        .latency(Duration::from_millis(10))
        .global(policy)
        .build();
    let http = serve(api, "127.0.0.1:0").await.expect("a loopback port");
    let workers = Workers::spawn(
        worker_exe,
        fleet,
        (&http.url(None), &redis.url()),
        namespace,
    );
    let workers = workers.wait().await;
    let log = http.shutdown().await.log();
    drop(redis);
    FleetRun {
        workers,
        log,
        limit,
        window,
    }
}

/// The fleet's worker processes, running.
pub struct Workers {
    children: Vec<(bool, std::process::Child)>,
}

impl Workers {
    /// Starts `fleet.workers` processes of `worker_exe --worker`, calling `api` through gates
    /// on the namespace `namespace` of the Redis at `redis`.
    pub fn spawn(
        worker_exe: &Path,
        fleet: &Fleet,
        (api, redis): (&str, &str),
        namespace: &str,
    ) -> Self {
        let pace = match fleet.pace {
            Pace::Fixed(rate) => format!("--rate={rate}"),
            Pace::Adaptive(start) => format!("--adaptive={start}"),
            Pace::Announced => "--announced".to_owned(),
        };
        let children = (0..fleet.workers)
            .map(|id| {
                let clock_ahead = fleet.first_clock_ahead && id == 0;
                let mut command = Command::new(worker_exe);
                if clock_ahead {
                    let library = libfaketime().expect("libfaketime: apt-get install faketime");
                    command.env("LD_PRELOAD", library).env("FAKETIME", "+2s");
                }
                command
                    .arg("--worker")
                    .arg(format!("--id={id}"))
                    .arg(format!("--api={api}"))
                    .arg(format!("--redis={redis}"))
                    .arg(format!("--namespace={namespace}"))
                    .arg(format!("--calls={}", fleet.calls_each))
                    .arg(format!("--spawned-at-ms={}", unix_ms()))
                    .arg(&pace)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::inherit());
                let child = command.spawn().expect("the worker binary runs");
                (clock_ahead, child)
            })
            .collect();
        Self { children }
    }

    /// Waits for every worker to end; returns their reports.
    ///
    /// # Panics
    ///
    /// If a worker fails or its report cannot be read, or if the workers take longer than
    /// [`WORKERS_MAY_TAKE`].
    pub async fn wait(self) -> Vec<WorkerReport> {
        // A worker that never ends (seen once on a machine loaded far past its cores) fails
        // the run, rather than holding the test suite until CI gives up on it.
        let pids: Vec<String> = (self.children.iter())
            .map(|(_, child)| child.id().to_string())
            .collect();
        let deadline = tokio::time::Instant::now() + WORKERS_MAY_TAKE;
        let mut workers = Vec::new();
        for (clock_ahead, child) in self.children {
            let waited = tokio::time::timeout_at(
                deadline,
                tokio::task::spawn_blocking(move || child.wait_with_output()),
            )
            .await;
            let Ok(joined) = waited else {
                for pid in &pids {
                    let _ = Command::new("kill").args(["-9", pid]).status();
                }
                panic!("the fleet's workers had not all ended after {WORKERS_MAY_TAKE:?}: killed");
            };
            let output = joined.unwrap().expect("the worker ends");
            let stdout = String::from_utf8_lossy(&output.stdout);
            assert!(output.status.success(), "a worker failed: {stdout}");
            let mut report = parse(&stdout).unwrap_or_else(|| panic!("no report in {stdout:?}"));
            report.clock_ahead = clock_ahead;
            workers.push(report);
        }
        workers
    }
}

/// Milliseconds since the Unix epoch, by this process's wall clock.
pub fn unix_ms() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970");
    since.as_millis() as i64
}

/// Reads a worker's `REPORT key=value …` line.
fn parse(stdout: &str) -> Option<WorkerReport> {
    let line = stdout
        .lines()
        .find_map(|line| line.strip_prefix("REPORT "))?;
    let mut report = WorkerReport::default();
    for pair in line.split_whitespace() {
        let (key, value) = pair.split_once('=')?;
        match key {
            "id" => report.id = value.parse().ok()?,
            "done" => report.done = value.parse().ok()?,
            "gave_up" => report.gave_up = value.parse().ok()?,
            "failed" => report.failed = value.parse().ok()?,
            "throttled" => report.throttled = value.parse().ok()?,
            "held_by_fleet" => report.held_by_fleet = value.parse().ok()?,
            "store_unanswered" => report.store_unanswered = value.parse().ok()?,
            "members" => report.members = value.parse().ok(),
            "elapsed_ms" => report.elapsed_ms = value.parse().ok()?,
            "rate" => report.rate = value.parse().ok(),
            "clock_offset_ms" => report.clock_offset_ms = value.parse().ok()?,
            _ => {}
        }
    }
    Some(report)
}

/// Prints what each worker did and what the server saw.
pub fn print(title: &str, run: &FleetRun) {
    println!("{title}");
    println!(
        "  worker  clock     done  gave up  failed  throttled  held by others  \
         no answer  elapsed  final rate"
    );
    for w in &run.workers {
        println!(
            "  {:>6}  {:<8} {:>5}  {:>7}  {:>6}  {:>9}  {:>14}  {:>9}  {:>6.2}s  {}",
            w.id,
            format!("{:+.1} s", w.clock_offset_ms as f64 / 1000.0),
            w.done,
            w.gave_up,
            w.failed,
            w.throttled,
            w.held_by_fleet,
            w.store_unanswered,
            w.elapsed_ms as f64 / 1000.0,
            w.rate.map_or("-".to_owned(), |rate| format!("{rate:.2}/s")),
        );
    }
    let log = &run.log;
    println!(
        "  server: {} accepted, {} throttled in {:.2} s; {} of its windows over the limit of \
         {} per {:?}; most in any window of {:?} (any phase): {}",
        log.accepted(),
        log.rejected(),
        run.span().as_secs_f64(),
        run.windows_over(),
        run.limit,
        run.window,
        run.window,
        log.max_in_window(run.window, Which::AllArrived),
    );
    print!(
        "  limit used: {:.1} % over the run",
        run.limit_used() * 100.0
    );
    if run.span() > 2 * SETTLED {
        print!(
            ", {:.1} % after the first {} s",
            run.limit_used_after(SETTLED) * 100.0,
            SETTLED.as_secs()
        );
    }
    println!();
    let seconds: Vec<String> = run
        .per_second()
        .iter()
        .map(|&(accepted, throttled)| match throttled {
            0 => accepted.to_string(),
            _ => format!("{accepted}+{throttled}x"),
        })
        .collect();
    println!("  accepted(+throttled) per second: {}", seconds.join(" "));
}
