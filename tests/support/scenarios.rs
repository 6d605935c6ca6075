//! The gate's scenarios against the simulated API, shared by `tests/gate/scenarios.rs` (which
//! asserts the figures) and `examples/scenarios.rs` (which prints them as a table).
//!
//! Every scenario runs in tokio's paused clock, on a fresh simulated server with a round trip
//! of 100 ms (50 ms each way), and its baseline runs on an identical server.
#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use paceline::{Gate, RateLimited};
use paceline_sim::{Log, Policy, Rejected, Server};
use tokio::time::{Instant, sleep, sleep_until};

pub const SEC: Duration = Duration::from_secs(1);
pub const MS: Duration = Duration::from_millis(1);

/// What one run did, from the caller's side and the server's.
#[derive(Debug, Clone)]
pub struct Report {
    pub who: &'static str,
    /// Virtual time until every call was done (or given up).
    pub elapsed: Duration,
    /// Calls that finished with the server's acceptance.
    pub done: usize,
    pub gave_up: usize,
    /// Requests the server rejected.
    pub throttled: usize,
    /// Requests that reached the server while a penalty ran.
    pub in_penalty: usize,
    /// Requests sent after the caller had been told of a penalty still running.
    pub sent_into_known_penalty: usize,
    /// The most of our requests the server accepted in any 1 s window.
    pub busiest_second: usize,
}

impl Report {
    fn new(
        who: &'static str,
        server: &Server,
        elapsed: Duration,
        done: usize,
        gave_up: usize,
    ) -> Self {
        let log = server.log();
        Report {
            who,
            elapsed,
            done,
            gave_up,
            throttled: log.rejected(),
            in_penalty: log.in_penalty(),
            sent_into_known_penalty: log.sent_into_known_penalty(),
            busiest_second: log.max_in_window(SEC, paceline_sim::Which::OursAccepted),
        }
    }
}

/// The simulated server's throttle as the gate's classifier sees it.
pub fn classify(e: &Rejected) -> Option<RateLimited> {
    let mut throttle = RateLimited::new();
    if let Some(after) = e.retry_after {
        throttle = throttle.retry_after(after);
    }
    if let Some(scope) = &e.scope {
        throttle = throttle.scope(scope.as_str());
    }
    Some(throttle)
}

/// `tasks` concurrent tasks share `calls` calls, each making its calls with `call_one`, which
/// reports whether the call got through. Returns the elapsed time, calls done, calls given up.
pub async fn run_tasks<F, Fut>(tasks: usize, calls: usize, call_one: F) -> (Duration, usize, usize)
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let start = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let (next, done, call_one) = (Arc::clone(&next), Arc::clone(&done), call_one.clone());
            tokio::spawn(async move {
                while next.fetch_add(1, Ordering::Relaxed) < calls {
                    if call_one().await {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for handle in handles {
        handle.await.expect("a task panicked");
    }
    let done = done.load(Ordering::Relaxed);
    (start.elapsed(), done, calls - done)
}

/// The seeds of the scenarios' gates (their backoffs' jitter) and servers, fixed here so that
/// the figures the tests assert repeat exactly whatever the defaults become. They are the
/// defaults of `GateBuilder::seed` and `paceline_sim::ServerBuilder::seed` when the figures
/// were pinned.
pub const GATE_SEED: u64 = 0x5EED;
pub const SERVER_SEED: u64 = 0;

/// The scenarios' gate: room for every task, an adaptive rate from `start_rate`, and 20
/// retries.
fn adaptive_gate<E>(
    classify: impl Fn(&E) -> Option<RateLimited> + Send + Sync + 'static,
    tasks: usize,
    start_rate: f64,
) -> Gate<E> {
    Gate::builder(classify)
        .max_in_flight(tasks)
        .rate(start_rate)
        .adaptive(0.1, 1000.0)
        .max_retries(20)
        .seed(GATE_SEED)
        .build()
        .expect("valid settings")
}

/// paceline: every task calls through one adaptive gate starting at `start_rate`.
pub async fn through_gate(
    who: &'static str,
    server: Server,
    tasks: usize,
    calls: usize,
    start_rate: f64,
) -> (Report, Gate<Rejected>) {
    let gate = adaptive_gate(classify, tasks, start_rate);
    let (elapsed, done, gave_up) = calls_through(&gate, &server, tasks, calls).await;
    (Report::new(who, &server, elapsed, done, gave_up), gate)
}

/// `tasks` concurrent tasks share `calls` calls to `server`, each through `gate`. Returns the
/// elapsed time, calls done, calls given up.
pub async fn calls_through(
    gate: &Gate<Rejected>,
    server: &Server,
    tasks: usize,
    calls: usize,
) -> (Duration, usize, usize) {
    run_tasks(tasks, calls, {
        let (gate, server) = (gate.clone(), server.clone());
        move || {
            let (gate, server) = (gate.clone(), server.clone());
            async move { gate.call(|| server.call(None)).await.is_ok() }
        }
    })
    .await
}

/// Baseline of S1: each task retries alone, with exponential backoff `2^k × 10 ms`, up to 10
/// retries.
pub async fn alone_with_backoff(server: Server, tasks: usize, calls: usize) -> Report {
    let (elapsed, done, gave_up) = run_tasks(tasks, calls, {
        let server = server.clone();
        move || {
            let server = server.clone();
            async move {
                for k in 0..=10u32 {
                    if server.call(None).await.is_ok() {
                        return true;
                    }
                    if k < 10 {
                        sleep(10 * MS * 2u32.pow(k)).await;
                    }
                }
                false
            }
        }
    })
    .await;
    Report::new(
        "each task alone, exp. backoff",
        &server,
        elapsed,
        done,
        gave_up,
    )
}

/// Baseline of S2: each task honours its own Retry-After, alone, up to 10 retries. (Without a
/// limit it never finishes: tasks told different penalty ends keep landing in a penalty that
/// another task's retry has just extended.)
pub async fn alone_with_retry_after(server: Server, tasks: usize, calls: usize) -> Report {
    let (elapsed, done, gave_up) = run_tasks(tasks, calls, {
        let server = server.clone();
        move || {
            let server = server.clone();
            async move {
                for k in 0..=10 {
                    match server.call(None).await {
                        Ok(_) => return true,
                        Err(e) if k < 10 => sleep(e.retry_after.unwrap_or(SEC)).await,
                        Err(_) => {}
                    }
                }
                false
            }
        }
    })
    .await;
    Report::new(
        "each task alone, Retry-After",
        &server,
        elapsed,
        done,
        gave_up,
    )
}

fn server(policy: Policy) -> Server {
    Server::builder()
        .latency(50 * MS)
        .global(policy)
        .seed(SERVER_SEED)
        .build()
}

/// S1: a token bucket of 4/s, burst 4, no Retry-After; 1000 calls from 50 tasks.
pub fn s1_server() -> Server {
    server(Policy::token_bucket(4.0, 4).retry_after(false))
}

/// S1b: as S1, but the limit is 2/s from t = 100 s to t = 200 s.
pub fn s1b_server() -> Server {
    server(
        Policy::token_bucket(4.0, 4)
            .rate_from(100 * SEC, 2.0)
            .rate_from(200 * SEC, 4.0)
            .retry_after(false),
    )
}

/// The least time S1b's schedule allows for `calls` calls (its burst of 4 aside).
pub fn s1b_ideal(calls: usize) -> Duration {
    let first = 100.0 * 4.0;
    let second = 100.0 * 2.0;
    let rest = calls as f64 - first - second;
    Duration::from_secs_f64(200.0 + rest / 4.0)
}

/// S2: capacity 20 per second; a request over it starts a 15 s penalty, and one arriving in a
/// penalty restarts it at twice its last length, up to 15 minutes; the penalty's end is sent
/// as Retry-After.
pub fn s2_server() -> Server {
    server(Policy::fixed_window(20, SEC).penalty(15 * SEC, 900 * SEC))
}

pub async fn s1() -> [Report; 2] {
    let (paceline, _) = through_gate("paceline gate", s1_server(), 50, 1000, 10.0).await;
    let alone = alone_with_backoff(s1_server(), 50, 1000).await;
    [paceline, alone]
}

pub async fn s1b() -> [Report; 2] {
    let (paceline, _) = through_gate("paceline gate", s1b_server(), 50, 1000, 10.0).await;
    let alone = alone_with_backoff(s1b_server(), 50, 1000).await;
    [paceline, alone]
}

pub async fn s2() -> [Report; 2] {
    let (paceline, _) = through_gate("paceline gate", s2_server(), 60, 3000, 25.0).await;
    let alone = alone_with_retry_after(s2_server(), 60, 3000).await;
    [paceline, alone]
}

/// One run's whole record, for a picture: its report, the server's log, and the gate's rate
/// as the run went (empty for a baseline, which has no gate).
#[derive(Debug, Clone)]
pub struct Run {
    pub report: Report,
    pub log: Log,
    /// `(time since the start, calls per second)`, read every [`RATE_EVERY`] and at the end.
    pub rate: Vec<(Duration, f64)>,
}

/// How often a traced run reads the gate's rate.
pub const RATE_EVERY: Duration = Duration::from_millis(100);

/// Runs `run` to its end, reading `probe` at its start, every `every` after that, and once
/// more when it ends; each reading with the time since the start. The readings are taken in
/// the caller's task (no task of their own), and reading a gate's stats changes nothing, so
/// the run goes exactly as it would unread.
pub async fn sampled<T, S>(
    every: Duration,
    mut probe: impl FnMut() -> S,
    run: impl std::future::Future<Output = T>,
) -> (T, Vec<(Duration, S)>) {
    let start = Instant::now();
    let mut readings = vec![(Duration::ZERO, probe())];
    let mut run = std::pin::pin!(run);
    let mut next = start + every;
    loop {
        tokio::select! {
            biased;
            out = &mut run => {
                readings.push((start.elapsed(), probe()));
                return (out, readings);
            }
            () = sleep_until(next) => {
                readings.push((start.elapsed(), probe()));
                next += every;
            }
        }
    }
}

/// [`through_gate`], with the gate's rate read as the run goes.
pub async fn through_gate_traced(
    who: &'static str,
    server: Server,
    tasks: usize,
    calls: usize,
    start_rate: f64,
) -> Run {
    let gate = adaptive_gate(classify, tasks, start_rate);
    let run = run_tasks(tasks, calls, {
        let (gate, server) = (gate.clone(), server.clone());
        move || {
            let (gate, server) = (gate.clone(), server.clone());
            async move { gate.call(|| server.call(None)).await.is_ok() }
        }
    });
    let probe = || gate.stats().rate.expect("the scenarios' gates pace");
    let ((elapsed, done, gave_up), rate) = sampled(RATE_EVERY, probe, run).await;
    Run {
        report: Report::new(who, &server, elapsed, done, gave_up),
        log: server.log(),
        rate,
    }
}

/// A baseline's run on `server`, with the server's log.
pub async fn traced(server: &Server, run: impl std::future::Future<Output = Report>) -> Run {
    let report = run.await;
    Run {
        report,
        log: server.log(),
        rate: Vec::new(),
    }
}

/// [`s1`], traced.
pub async fn s1_traced() -> [Run; 2] {
    let paceline = through_gate_traced("paceline gate", s1_server(), 50, 1000, 10.0).await;
    let server = s1_server();
    let alone = traced(&server, alone_with_backoff(server.clone(), 50, 1000)).await;
    [paceline, alone]
}

/// [`s1b`], traced.
pub async fn s1b_traced() -> [Run; 2] {
    let paceline = through_gate_traced("paceline gate", s1b_server(), 50, 1000, 10.0).await;
    let server = s1b_server();
    let alone = traced(&server, alone_with_backoff(server.clone(), 50, 1000)).await;
    [paceline, alone]
}

/// [`s2`], traced.
pub async fn s2_traced() -> [Run; 2] {
    let paceline = through_gate_traced("paceline gate", s2_server(), 60, 3000, 25.0).await;
    let server = s2_server();
    let alone = traced(&server, alone_with_retry_after(server.clone(), 60, 3000)).await;
    [paceline, alone]
}

/// The scenarios' titles, in the example's table and on their pictures.
pub const S1_TITLE: &str =
    "S1: token bucket 4/s burst 4, no Retry-After; 1000 calls from 50 tasks, start 10/s";
pub const S1B_TITLE: &str = "S1b: as S1, but 2/s from t = 100 s to 200 s";
pub const S2_TITLE: &str =
    "S2: 20/s, escalating penalty 15 s up to 15 min; 3000 calls from 60 tasks, start 25/s";
pub const S3_TITLE: &str = "S3: fixed window 100 per 10 s, announced on every answer; \
                            3000 calls from 60 tasks, start 25/s";

/// The servers' limits as rates, `(from, requests per second)`, for the pictures.
pub fn s1_limit() -> Vec<(Duration, f64)> {
    vec![(Duration::ZERO, 4.0)]
}

pub fn s1b_limit() -> Vec<(Duration, f64)> {
    vec![(Duration::ZERO, 4.0), (100 * SEC, 2.0), (200 * SEC, 4.0)]
}

pub fn s2_limit() -> Vec<(Duration, f64)> {
    vec![(Duration::ZERO, 20.0)]
}

/// 100 per 10 s, as a rate.
pub fn s3_limit() -> Vec<(Duration, f64)> {
    vec![(Duration::ZERO, 10.0)]
}

pub fn print(title: &str, ideal: Duration, reports: &[Report]) {
    println!("\n{title}  (ideal {:.0} s)", ideal.as_secs_f64());
    println!(
        "  {:<30} {:>8} {:>8} {:>6} {:>9} {:>10} {:>11} {:>9}",
        "who", "time s", "x ideal", "done", "gave up", "throttled", "in penalty", "busiest/s"
    );
    for r in reports {
        println!(
            "  {:<30} {:>8.1} {:>8.2} {:>6} {:>9} {:>10} {:>11} {:>9}",
            r.who,
            r.elapsed.as_secs_f64(),
            r.elapsed.as_secs_f64() / ideal.as_secs_f64(),
            r.done,
            r.gave_up,
            r.throttled,
            r.in_penalty,
            r.busiest_second
        );
    }
}

/// The figures docs/scenarios.md's table quotes for a run: seconds to a tenth, then calls
/// done, given up, throttled and in a penalty. The simulation is deterministic, so they
/// repeat exactly.
pub fn figures(r: &Report) -> (f64, usize, usize, usize, usize) {
    let tenths = (r.elapsed.as_secs_f64() * 10.0).round() / 10.0;
    (tenths, r.done, r.gave_up, r.throttled, r.in_penalty)
}

/// S3: a fixed window of 100 calls per 10 s, in windows of the server's own phase, that
/// announces its quota on every answer, accepted or rejected.
pub fn s3_server() -> Server {
    server(Policy::fixed_window(100, 10 * SEC).announce_quota(true))
}

/// S3's answers as the caller sees them over HTTP: the sim's announcement written in one
/// dialect of headers, and read back by `paceline::http`. Needs the `http` feature.
#[cfg(feature = "http")]
pub mod announced {
    use std::time::{Duration, SystemTime};

    use paceline::Quota;
    use paceline_sim::http::Dialect;
    use paceline_sim::{Announced, Limit, Rejected, Server};
    use tokio::time::Instant;

    use super::{Report, Run, run_tasks};

    /// A rejection, with the quota its headers announced.
    #[derive(Debug)]
    pub struct Turned {
        pub rejected: Rejected,
        pub quota: Option<Quota>,
    }

    /// The wall clock of a run in paused time: a fixed instant, moved on with the paused
    /// clock, so that a reset written as a Unix time reads back as the same delay and every
    /// run is the same. The server's windows start half a second past a whole second, so a
    /// reset written in whole seconds is rounded up by half a second.
    #[derive(Debug, Clone, Copy)]
    struct Wall {
        at: SystemTime,
        start: Instant,
    }

    impl Wall {
        fn now(self) -> SystemTime {
            self.at + self.start.elapsed()
        }
    }

    /// What `dialect`'s headers for `quotas` tell `paceline::http::quota_at`.
    fn read(dialect: Dialect, quotas: &[(Limit, Announced)], wall: Wall) -> Option<Quota> {
        let mut headers = http::HeaderMap::new();
        dialect.write(quotas, wall.now(), &mut headers);
        paceline::http::quota_at(&headers, wall.now())
    }

    /// paceline: S1's adaptive gate, starting at `start_rate`; with `dialect`, every answer's
    /// announced quota is read from its headers and handed to the gate.
    pub async fn through_gate(
        who: &'static str,
        server: Server,
        tasks: usize,
        calls: usize,
        start_rate: f64,
        dialect: Option<Dialect>,
    ) -> Report {
        let gate = super::adaptive_gate(classify, tasks, start_rate);
        run(
            who,
            (server, gate),
            (tasks, calls),
            dialect,
            (WALL_MS, false),
        )
        .await
        .report
    }

    /// A gate told no limit at all (no rate, `tasks` in flight) that reads every answer's
    /// announced quota from `dialect`'s headers, its wall clock `wall_ms` milliseconds past
    /// the Unix epoch as the run starts (what phase a reset rounded to the second has).
    pub async fn told_nothing(
        who: &'static str,
        server: Server,
        (tasks, calls): (usize, usize),
        dialect: Dialect,
        wall_ms: u64,
    ) -> Report {
        let gate = paceline::Gate::builder(classify)
            .max_in_flight(tasks)
            .max_retries(20)
            .seed(super::GATE_SEED)
            .build()
            .expect("valid settings");
        run(
            who,
            (server, gate),
            (tasks, calls),
            Some(dialect),
            (wall_ms, false),
        )
        .await
        .report
    }

    /// [`through_gate`], with the gate's rate read as the run goes.
    pub async fn through_gate_traced(
        who: &'static str,
        server: Server,
        tasks: usize,
        calls: usize,
        start_rate: f64,
        dialect: Option<Dialect>,
    ) -> Run {
        let gate = super::adaptive_gate(classify, tasks, start_rate);
        run(
            who,
            (server, gate),
            (tasks, calls),
            dialect,
            (WALL_MS, true),
        )
        .await
    }

    /// The wall clock at the start of a run, in milliseconds past the Unix epoch: half past
    /// a whole second.
    const WALL_MS: u64 = 1_800_000_000_500;

    /// What the gate's classifier makes of a rejection: a throttle, with the quota its
    /// headers announced.
    fn classify(e: &Turned) -> Option<paceline::RateLimited> {
        let limited = super::classify(&e.rejected)?;
        Some(match e.quota {
            Some(quota) => limited.quota(quota),
            None => limited,
        })
    }

    async fn run(
        who: &'static str,
        (server, gate): (Server, paceline::Gate<Turned>),
        (tasks, calls): (usize, usize),
        dialect: Option<Dialect>,
        (wall_ms, trace): (u64, bool),
    ) -> Run {
        let wall = Wall {
            at: SystemTime::UNIX_EPOCH + Duration::from_millis(wall_ms),
            start: Instant::now(),
        };
        let run = run_tasks(tasks, calls, {
            let (gate, server) = (gate.clone(), server.clone());
            move || {
                let (gate, server) = (gate.clone(), server.clone());
                async move {
                    let call = || async {
                        let answer = server.call(None).await;
                        let quotas = match &answer {
                            Ok(accepted) => &accepted.quotas,
                            Err(rejected) => &rejected.quotas,
                        };
                        let quota = dialect.and_then(|dialect| read(dialect, quotas, wall));
                        match answer {
                            Ok(_) => {
                                if let Some(quota) = quota {
                                    gate.observe(quota);
                                }
                                Ok(())
                            }
                            Err(rejected) => Err(Turned { rejected, quota }),
                        }
                    };
                    gate.call(call).await.is_ok()
                }
            }
        });
        let ((elapsed, done, gave_up), rate) = if trace {
            let probe = || gate.stats().rate.expect("the scenarios' gates pace");
            super::sampled(super::RATE_EVERY, probe, run).await
        } else {
            (run.await, Vec::new())
        };
        Run {
            report: Report::new(who, &server, elapsed, done, gave_up),
            log: server.log(),
            rate,
        }
    }
}

/// S3 traced: the gate reading IETF fields, and the same gate reading nothing.
#[cfg(feature = "http")]
pub async fn s3_traced() -> [Run; 2] {
    use paceline_sim::http::Dialect;
    let run =
        |who, dialect| announced::through_gate_traced(who, s3_server(), 60, 3000, 25.0, dialect);
    [
        run("paceline, IETF RateLimit", Some(Dialect::Ietf)).await,
        run("paceline, not reading", None).await,
    ]
}

/// S3 in each dialect, and without reading: IETF fields, `X-RateLimit-*` with the reset in
/// seconds and as a Unix time, and the same gate that reads nothing.
#[cfg(feature = "http")]
pub async fn s3() -> [Report; 4] {
    use paceline_sim::http::{Dialect, Reset};
    let run = |who, dialect| announced::through_gate(who, s3_server(), 60, 3000, 25.0, dialect);
    let (delta, unix) = (Reset::Delta, Reset::Epoch);
    [
        run("paceline, IETF RateLimit", Some(Dialect::Ietf)).await,
        run(
            "paceline, X-RateLimit, s",
            Some(Dialect::XRateLimit { reset: delta }),
        )
        .await,
        run(
            "paceline, X-RateLimit, Unix",
            Some(Dialect::XRateLimit { reset: unix }),
        )
        .await,
        run("paceline, not reading", None).await,
    ]
}
