//! The Lua scripts and the in-process gate agree: random sequences of calls (of costs and
//! scopes), throttles, announced quotas, settlements and waits go through a gate without a
//! store and through the scripts on a real `redis-server`, and the two must decide alike:
//! when each call starts (within the 1 ms of tokio's timers), the units left of an announced
//! window (the gate's, and where scopes have limits each scope's), and when a gate-wide
//! backoff ends.
//!
//! The gate runs in tokio's paused time; Redis's clock is set to the same instant before every
//! script call, by running `redis-server` under libfaketime with its time read from a file.
//! A call asks the fleet when it asks the gate, and what the fleet wrote is put back; when the
//! gate starts it (on tokio's 1 ms timers, so up to 1 ms after its rules let it), the fleet
//! clears it there, so that both spread the next calls from the same start. The fleet keeps
//! the announced quota as it keeps every announced window (observe_budget.lua, budgets.lua's
//! kind q): the calls draw on it as a gate with a store draws, and `announced.rs` holds a
//! policy's window to the same scripts. A scope's quota (announced in a successful answer for
//! the call's first scope, or by a scope's throttle) is the same budget at a key of its
//! scope's, kept by the same scripts: each call of the scope draws on it and settles it.
//!
//! Where the fleet differs by design, the test says why and compares what it can:
//! - One call asks at a time, and at most two are in flight: the in-flight limit, the line
//!   and the ramp after a gate-wide backoff stay in each process, and the fleet has no say in
//!   them (two calls go together only when the ramp cannot hold the second back).
//! - After a window's reset, the call sent to learn the next one may end without an
//!   announcement: the process then forgets the quota at once, while the fleet (which cannot
//!   tell that another process's call has ended) waits up to 5 s for its answer. The test
//!   lets those 5 s pass before the next step, for the gate's quota and each scope's.
//! - A call that cost less than it started with gives its pace back in the process (no call
//!   started since); the fleet's pace keeps it, and one that cost more pushes the fleet's
//!   next start back from now rather than from the call's start: other processes' starts
//!   were spaced by the pace as it stood. The test lets the later of the two pass.
//! - The reserve grows to the largest call in the process only; every call here costs at
//!   most the reserve the gate is built with, so that it never grows.
//! - A scope's pace settles as the gate's does: the fleet keeps what a call cost less, and
//!   pushes what it cost more from now. The test lets the latest of them pass.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use futures::channel::oneshot;
use proptest::prelude::*;
use proptest::test_runner::{FileFailurePersistence, TestRunner};
use tokio::time::Instant;

use super::redis::{RedisStore, clearance, int, quota_draw_in};

mod announced;
mod budgets;
mod leases;
use crate::gate::dimensions::BudgetDraw;
use crate::gate::fleet::{Clearance, FleetAsk, PerUnit};
use crate::{Dimension, Gate, Jitter, Quota, RateLimited, Scope, ScopeLimits};

/// Redis's clock at the start of every case: 2030-01-01T00:00:00Z.
const ORIGIN_SECS: u64 = 1_893_456_000;
/// The largest cost of a call, and the gate's reserve (see the module's docs).
const MAX_COST: u64 = 3;
/// How long the fleet waits for the answer of the call sent to learn a new window
/// (`PROBE_ANSWER_WITHIN` in redis.rs).
const PROBE_ANSWER_WITHIN: Duration = Duration::from_secs(5);
/// A case spans less than this, so that no key outlives what it holds by expiring (the
/// announced quota is kept 60 s after its reset).
const CASE_SPAN: Duration = Duration::from_secs(50);
const MS: Duration = Duration::from_millis(1);

/// A server's announcement: units left, and milliseconds until its window resets.
#[derive(Debug, Clone, Copy)]
struct Announced {
    remaining: u64,
    resets_in_ms: u64,
}

impl Announced {
    fn quota(self) -> Quota {
        Quota::new(self.remaining, Duration::from_millis(self.resets_in_ms))
    }
}

/// How a call ends.
#[derive(Debug, Clone)]
enum Answer {
    /// It succeeded, announcing a quota if any, and one for the call's first scope if any
    /// (taken in where scopes have limits), and cost `actual` units.
    Ok {
        quota: Option<Announced>,
        scoped: Option<Announced>,
        actual: u64,
    },
    /// It was throttled for `retry_after_ms` (of scope `scope` of the call's, or gate-wide),
    /// announcing a quota if any.
    Throttled {
        scope: Option<usize>,
        retry_after_ms: u64,
        quota: Option<Announced>,
    },
}

#[derive(Debug, Clone)]
enum Step {
    /// A call of `cost` units in `scopes` asks to start, waits as told and goes out; its
    /// answer comes `takes_ms` later.
    Call {
        cost: u64,
        scopes: Vec<usize>,
        takes_ms: u64,
        answer: Answer,
    },
    /// Two calls of `cost` units in `scopes` ask to start one after the other and go out
    /// together; `takes_ms` later the first is answered, then the second.
    Together {
        cost: u64,
        scopes: Vec<usize>,
        takes_ms: u64,
        answers: [Answer; 2],
    },
    /// Time passes.
    Wait { ms: u64 },
}

const SCOPES: [&str; 2] = ["acct-1", "acct-2"];

fn announced() -> impl Strategy<Value = Option<Announced>> {
    let resets_in_ms = prop_oneof![1 => Just(0u64), 6 => 1..8_000u64];
    prop::option::weighted(0.5, (0..40u64, resets_in_ms)).prop_map(|quota| {
        quota.map(|(remaining, resets_in_ms)| Announced {
            remaining,
            resets_in_ms,
        })
    })
}

fn answer() -> impl Strategy<Value = Answer> {
    prop_oneof![
        4 => (announced(), announced(), 0..=MAX_COST)
            .prop_map(|(quota, scoped, actual)| Answer::Ok { quota, scoped, actual }),
        1 => (prop::option::of(0..2usize), 1..3_000u64, announced()).prop_map(
            |(scope, retry_after_ms, quota)| Answer::Throttled {
                scope,
                retry_after_ms,
                quota,
            }
        ),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (1..=MAX_COST, prop::sample::subsequence(vec![0, 1], 0..=2), 0..300u64, answer())
            .prop_map(|(cost, scopes, takes_ms, answer)| Step::Call {
                cost,
                scopes,
                takes_ms,
                answer,
            }),
        1 => (1..=MAX_COST, prop::sample::subsequence(vec![0, 1], 0..=2), 0..300u64, [answer(), answer()])
            .prop_map(|(cost, scopes, takes_ms, answers)| Step::Together {
                cost,
                scopes,
                takes_ms,
                answers,
            }),
        1 => (0..3_000u64).prop_map(|ms| Step::Wait { ms }),
    ]
}

/// Each scope's calls per second, if scopes have a rate.
fn scope_rate() -> impl Strategy<Value = Option<f64>> {
    prop::option::weighted(0.5, prop::sample::select(vec![2.0, 8.0, 25.0]))
}

/// Calls per second. A gate with a store reads the clock at every start (the fleet clears
/// each); one without reads none while nothing could hold a call back, and settles nothing
/// of a call it did not time with the announced quota (it cannot tell whether the
/// announcement counted the call). A million a second never holds a call back, and makes
/// the gate time every call, as a fleet's gate does.
fn rate() -> impl Strategy<Value = f64> {
    prop::sample::select(vec![1e6, 4.0, 10.0, 40.0])
}

/// Where libfaketime and glibc's plain allocator live on this machine's Debian layout.
fn preload() -> String {
    let arch = format!("{}-linux-gnu", std::env::consts::ARCH);
    let find = |file: &str| {
        [
            format!("/usr/lib/{arch}/{file}"),
            format!("/lib/{arch}/{file}"),
        ]
        .into_iter()
        .find(|path| Path::new(path).exists())
        .unwrap_or_else(|| panic!("{file} not found: apt-get install faketime"))
    };
    // Debian's redis-server allocates with jemalloc, which reads the clock while libfaketime
    // sets itself up, and hangs it (libfaketime's issue 130). glibc's allocator, preloaded
    // first, takes malloc over; jemalloc only answers redis's statistics.
    let malloc = find("libc_malloc_debug.so.0");
    let faketime = find("faketime/libfaketime.so.1");
    format!("{malloc} {faketime}")
}

/// A `redis-server` on a free loopback port whose clock reads what [`FakeClock::set`] wrote
/// last; stopped when dropped.
struct FakeTimeRedis {
    child: Child,
    port: u16,
    clock: PathBuf,
    _dir: TempDir,
}

/// A directory removed when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl FakeTimeRedis {
    fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free loopback port")
            .port();
        let name = format!("paceline-agree-{}-{port}", std::process::id());
        let dir = std::env::temp_dir().join(name);
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let server = Self {
            child: Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .env("LD_PRELOAD", preload())
                .env("FAKETIME_TIMESTAMP_FILE", dir.join("now"))
                // Read the file at every clock reading, not once a while.
                .env("FAKETIME_NO_CACHE", "1")
                // The event loop's timers run on the real monotonic clock.
                .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
                .env("TZ", "UTC")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server must be installed (apt-get install redis-server)"),
            port,
            clock: dir.join("now"),
            _dir: TempDir(dir),
        };
        server.set_clock(Duration::ZERO);
        server
    }

    fn connect(&self) -> redis::Connection {
        let client = redis::Client::open(self.url()).expect("a Redis URL");
        for _ in 0..200 {
            if let Ok(connection) = client.get_connection() {
                return connection;
            }
            // Polls an outside process as it comes up: paused time cannot drive it, and no
            // assertion rests on how long it takes.
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!("redis-server under faketime did not accept connections within 5 s");
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Sets Redis's clock to `since` past the origin. The file is replaced whole, so that
    /// Redis never reads half of it.
    fn set_clock(&self, since: Duration) {
        assert!(
            since < Duration::from_secs(86_400),
            "a case spans less than a day"
        );
        let secs = since.as_secs();
        // libfaketime reads the fraction as a floating-point number: the 500 ns past the
        // microsecond keep it from rounding down to the one before.
        let text = format!(
            "2030-01-01 {:02}:{:02}:{:02}.{:06}500\n",
            secs / 3600,
            secs / 60 % 60,
            secs % 60,
            since.subsec_micros()
        );
        let staged = self.clock.with_extension("new");
        std::fs::write(&staged, text).expect("the clock file is written");
        std::fs::rename(&staged, &self.clock).expect("the clock file is replaced");
    }
}

impl Drop for FakeTimeRedis {
    /// Stops the server with `SIGTERM`, so that it exits and libfaketime's destructor
    /// removes the semaphore and shared memory it made in `/dev/shm`, named by the server's
    /// process id. Killed outright, it leaves them behind; a later process preloading
    /// libfaketime that is given the same id then finds a semaphore held by the dead one,
    /// and waits on it for ever (a fleet test's worker did). `SIGKILL` only if it has not
    /// exited within 5 s.
    fn drop(&mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        for _ in 0..200 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            // Waits on an outside process to exit: paused time cannot drive it, and no
            // assertion rests on how long it takes.
            std::thread::sleep(Duration::from_millis(25));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Redis's `TIME`, in microseconds since the origin.
fn redis_time(connection: &mut redis::Connection) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(connection).expect("TIME");
    (secs - ORIGIN_SECS) * 1_000_000 + micros
}

/// What the server at the other end of a call does: the error a throttle is.
#[derive(Debug, Clone)]
struct Throttle(RateLimited);

/// One case: the gate, the scripts on Redis, and the clock they share.
struct Case<'a> {
    gate: Gate<Throttle>,
    store: RedisStore,
    redis: &'a FakeTimeRedis,
    connection: &'a mut redis::Connection,
    /// Instant zero of the case, on tokio's clock; the origin on Redis's.
    t0: Instant,
    rate: f64,
    /// Each scope's rate, if scopes have one.
    scope_rate: Option<f64>,
    /// What happened so far, printed with a failure.
    log: Vec<String>,
    /// The units of the gate's calls in flight, and of each scope's.
    in_flight_cost: u64,
    in_flight_in: [u64; 2],
    /// The longest gate-wide backoff since the last start, if one was: after it, the gate's
    /// in-flight limit grows back for as long (the ramp), in this process only.
    ramp_pending: Option<Duration>,
    /// Until when the gate's in-flight limit may be growing back.
    ramp_until: Duration,
}

/// A call the gate started and the fleet cleared, not yet answered.
struct InFlight {
    cost: u64,
    scopes: Vec<Scope>,
    /// The indices of its scopes in [`SCOPES`].
    indices: Vec<usize>,
    /// When the fleet cleared it.
    fleet_start: Duration,
    /// Each quota (see [`Case::quotas`]) the fleet sent it to learn the next window of, and
    /// when.
    probes: Vec<(Option<usize>, Duration)>,
    /// Where the test sends the server's answer.
    answer_tx: oneshot::Sender<Result<u64, Throttle>>,
    /// The gate's call, running.
    call: tokio::task::JoinHandle<Result<u64, crate::Error<Throttle>>>,
}

/// What a side decided of a call.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Decision {
    /// It starts at this instant since the origin.
    Starts(Duration),
    /// It waits for the answer of the call sent to learn the server's new window.
    AwaitsAnswer,
}

impl Case<'_> {
    fn since(&self) -> Duration {
        Instant::now() - self.t0
    }

    /// Runs `call` of a script with Redis's clock at `at`.
    fn run(&mut self, at: Duration, call: &redis::Cmd) -> Vec<redis::Value> {
        self.redis.set_clock(at);
        call.query(self.connection).expect("the script runs")
    }

    fn interval(&self, cost: u64) -> Option<Duration> {
        Some(spacing(self.rate, cost))
    }

    /// What a start of `scopes` that costs `cost` units tells the fleet's store of its
    /// scopes' paces, as the gate tells it.
    fn scope_paces(&self, scopes: &[Scope], cost: u64) -> FleetAsk {
        let scope_paces = match self.scope_rate {
            Some(rate) => scopes.iter().map(|_| Some(spacing(rate, cost))).collect(),
            None => Box::default(),
        };
        FleetAsk {
            scope_paces,
            budgets: self.quota_draws(scopes, cost).into(),
            ..FleetAsk::default()
        }
    }

    /// What a call of `scopes` that costs `cost` units draws of the quotas: the gate's, and
    /// where scopes have limits (the gate keeps each scope's quota as the fleet's) each of
    /// its scopes'.
    fn quota_draws(&self, scopes: &[Scope], cost: u64) -> Vec<BudgetDraw> {
        let scoped = self.scope_rate.map(|_| scopes.iter().map(Some));
        let quotas = std::iter::once(None).chain(scoped.into_iter().flatten());
        quotas.map(|scope| quota_draw_in(scope, cost)).collect()
    }

    /// The fleet's decision on a call asking at `at`: it asks again when a backoff or the
    /// announced quota holds it, as the gate does.
    fn fleet_start(&mut self, scopes: &[Scope], cost: u64, at: Duration) -> Decision {
        let mut at = at;
        let asked = self.scope_paces(scopes, cost);
        let call = self.store.start_call(
            scopes,
            self.interval(cost),
            (&asked, None, 1),
            (cost, Duration::ZERO),
        );
        for _ in 0..1000 {
            let reply = self.run(at, &call);
            match clearance(&reply) {
                Clearance::Go { wait, .. } => return Decision::Starts(at + wait),
                Clearance::Held { remaining, .. } => at += remaining,
                Clearance::Later(_) if self.learning(scopes) => {
                    return Decision::AwaitsAnswer;
                }
                Clearance::Later(wait) | Clearance::Paced { wait, .. } => at += wait,
                Clearance::Unavailable => panic!("start.lua answered {reply:?}"),
            }
        }
        panic!("the fleet kept a call waiting past 1000 answers");
    }

    /// The quotas the fleet keeps, as indices of [`SCOPES`]: the gate's (`None`), and each
    /// scope's where scopes have limits.
    fn quotas(&self) -> Vec<Option<usize>> {
        let scoped = self.scope_rate.map(|_| (0..SCOPES.len()).map(Some));
        std::iter::once(None)
            .chain(scoped.into_iter().flatten())
            .collect()
    }

    /// Whether the fleet waits for the answer of a call sent to learn a new window of a
    /// quota that a call of `scopes` draws on.
    fn learning(&mut self, scopes: &[Scope]) -> bool {
        let of_call = |which: &Option<usize>| match which {
            None => true,
            Some(i) => scopes.iter().any(|scope| scope.as_str() == SCOPES[*i]),
        };
        let quotas: Vec<_> = self.quotas().into_iter().filter(of_call).collect();
        quotas
            .into_iter()
            .any(|which| self.fleet_probe(which).is_some())
    }

    /// A quota (see [`Case::quotas`]) as the scripts keep it: units left, its reset, and the
    /// start of the call sent to learn the next window, in microseconds since the origin.
    fn fleet_quota(&mut self, which: Option<usize>) -> [Option<i64>; 3] {
        let quota = match which {
            None => self.store.pace_and_quota_keys().1,
            Some(i) => self.store.quota_key_in(&Scope::from(SCOPES[i])),
        };
        let fields: Vec<Option<i64>> = redis::cmd("HMGET")
            .arg(quota)
            .arg(&["l", "e", "p"][..])
            .query(self.connection)
            .expect("HMGET");
        let origin = i64::try_from(ORIGIN_SECS * 1_000_000).unwrap();
        [
            fields[0],
            fields[1].map(|e| e - origin),
            fields[2].map(|p| p - origin),
        ]
    }

    fn fleet_probe(&mut self, which: Option<usize>) -> Option<Duration> {
        self.fleet_quota(which)[2].map(|p| Duration::from_micros(p.unsigned_abs()))
    }

    /// Every key and how long it has to live, at `at`.
    fn snapshot(&mut self, at: Duration) -> Vec<(String, i64, Vec<u8>)> {
        self.redis.set_clock(at);
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(self.connection).unwrap();
        keys.into_iter()
            .map(|key| {
                let ttl: i64 = redis::cmd("PTTL").arg(&key).query(self.connection).unwrap();
                let dump: Vec<u8> = redis::cmd("DUMP").arg(&key).query(self.connection).unwrap();
                (key, ttl.max(0), dump)
            })
            .collect()
    }

    /// Puts back the keys of `snapshot`, taken at `at`, and only those.
    fn restore(&mut self, at: Duration, snapshot: Vec<(String, i64, Vec<u8>)>) {
        self.redis.set_clock(at);
        redis::cmd("FLUSHALL").query::<()>(self.connection).unwrap();
        for (key, ttl, dump) in snapshot {
            redis::cmd("RESTORE")
                .arg(key)
                .arg(ttl)
                .arg(dump)
                .query::<()>(self.connection)
                .unwrap();
        }
    }

    /// The fleet's pace: the earliest next start, since the origin.
    fn fleet_pace(&mut self) -> Option<Duration> {
        let (pace, _) = self.store.pace_and_quota_keys();
        let pace: Option<u64> = redis::cmd("GET")
            .arg(pace)
            .query(self.connection)
            .expect("GET");
        pace.map(|at| Duration::from_micros(at - ORIGIN_SECS * 1_000_000))
    }

    /// The fleet's pace of `scope`: the earliest next start of its calls, since the origin.
    fn fleet_scope_pace(&mut self, scope: &Scope) -> Option<Duration> {
        let key = self.store.scope_pace_key(scope);
        let pace: Option<u64> = redis::cmd("GET")
            .arg(key)
            .query(self.connection)
            .expect("GET");
        pace.map(|at| Duration::from_micros(at - ORIGIN_SECS * 1_000_000))
    }

    /// Sleeps until `at` since the origin, if it is ahead.
    async fn sleep_until(&self, at: Duration) {
        tokio::time::sleep_until(self.t0 + at).await;
    }

    /// Compares what is left of each announced window on both sides.
    fn compare_budgets(&mut self) -> Result<(), TestCaseError> {
        for which in self.quotas() {
            self.compare_budget(which)?;
        }
        Ok(())
    }

    /// Compares what is left of one announced window (see [`Case::quotas`]) on both sides.
    fn compare_budget(&mut self, which: Option<usize>) -> Result<(), TestCaseError> {
        let now = self.since();
        let [left, reset, probe] = self.fleet_quota(which);
        let core = match which {
            None => self.gate.budget_left(&Dimension::UNITS),
            Some(i) => (self.gate).budget_left_in(&Scope::from(SCOPES[i]), &Dimension::UNITS),
        };
        let now_us = i64::try_from(now.as_micros()).unwrap();
        match (left, reset, probe) {
            // The fleet's window is open: the gate's must be the same.
            (Some(left), Some(reset), None) if reset > now_us => {
                prop_assert_eq!(
                    core,
                    Some(left.unsigned_abs()),
                    "units left of {:?} at {:?}\n{}",
                    which,
                    now,
                    self.log.join("\n")
                );
            }
            // A call learns the new window: the gate's is not open either.
            (_, _, Some(_)) => {
                prop_assert_eq!(
                    core,
                    None,
                    "learning {:?} at {:?}\n{}",
                    which,
                    now,
                    self.log.join("\n")
                );
            }
            // Reset, or never announced: the gate may keep the reset window until a call
            // asks (it reports what was left of it), or have moved on.
            _ => {}
        }
        Ok(())
    }

    async fn step(&mut self, step: &Step) -> Result<(), TestCaseError> {
        match step {
            Step::Wait { ms } => {
                tokio::time::sleep(Duration::from_millis(*ms)).await;
                self.log.push(format!("{:?}: waited {ms} ms", self.since()));
                Ok(())
            }
            Step::Call {
                cost,
                scopes,
                takes_ms,
                answer,
            } => {
                let Some(call) = self.go(*cost, scopes).await? else {
                    return Ok(());
                };
                tokio::time::sleep(Duration::from_millis(*takes_ms)).await;
                self.end(call, answer).await
            }
            Step::Together {
                cost,
                scopes,
                takes_ms,
                answers: [first, second],
            } => {
                // By design: after a gate-wide backoff, the gate lets its calls back one at
                // a time at first (its in-flight limit is its own): then one goes alone.
                let together = self.ramp_pending.is_none() && self.since() >= self.ramp_until;
                let Some(one) = self.go(*cost, scopes).await? else {
                    return Ok(());
                };
                let two = match together {
                    true => self.go(*cost, scopes).await?,
                    false => None,
                };
                tokio::time::sleep(Duration::from_millis(*takes_ms)).await;
                self.end(one, first).await?;
                if let Some(two) = two {
                    self.end(two, second).await?;
                }
                Ok(())
            }
        }
    }

    /// A call of `cost` units in `scopes` asks to start now: the gate and the fleet must
    /// decide alike; if they let it start, it is in flight.
    async fn go(
        &mut self,
        cost: u64,
        indices: &[usize],
    ) -> Result<Option<InFlight>, TestCaseError> {
        let asked = self.since();
        let scopes: Vec<Scope> = indices.iter().map(|&i| Scope::from(SCOPES[i])).collect();
        // The fleet's decision, asked when the call asks; what it wrote is undone, and the
        // call is cleared again below when the gate starts it.
        let before = self.snapshot(asked);
        let fleet = self.fleet_start(&scopes, cost, asked);
        self.restore(asked, before);
        // The gate's: the call is made, and tells when it goes out.
        let (started_tx, started) = oneshot::channel();
        let (answer_tx, answer_rx) = oneshot::channel::<Result<u64, Throttle>>();
        let mut parts = Some((started_tx, answer_rx));
        let options = crate::CallOptions::new().cost(cost).scopes(scopes.clone());
        let gate = self.gate.clone();
        let call = tokio::spawn(async move {
            gate.call_settled(
                options,
                move || {
                    let (started, answer) = parts.take().expect("one attempt: no retries");
                    async move {
                        let _ = started.send(Instant::now());
                        answer.await.expect("the test answers")
                    }
                },
                |actual: &u64| *actual,
            )
            .await
        });
        // Long enough for any start the fleet makes; the gate's timers move paused time on.
        let patience = match fleet {
            Decision::Starts(at) => at.saturating_sub(asked) + Duration::from_secs(1),
            Decision::AwaitsAnswer => 20 * MS,
        };
        let core = match tokio::time::timeout(patience, started).await {
            Ok(started) => Decision::Starts(started.expect("the call starts") - self.t0),
            Err(_) => {
                call.abort();
                Decision::AwaitsAnswer
            }
        };
        self.log.push(format!(
            "{asked:?}: a call of {cost} in {scopes:?}: gate {core:?}, fleet {fleet:?}"
        ));
        match (core, fleet) {
            (Decision::Starts(core), Decision::Starts(fleet)) => {
                prop_assert!(
                    core.abs_diff(fleet) <= MS,
                    "starts differ\n{}",
                    self.log.join("\n")
                );
            }
            (core, fleet) => prop_assert_eq!(core, fleet, "\n{}", self.log.join("\n")),
        }
        let Decision::Starts(started) = core else {
            self.compare_budgets()?;
            return Ok(None);
        };
        if let Some(length) = self.ramp_pending.take() {
            self.ramp_until = self.ramp_until.max(started + length);
        }
        self.in_flight_cost += cost;
        for &i in indices {
            self.in_flight_in[i] += cost;
        }
        // The gate starts a call on tokio's timers, up to 1 ms after its rules let it, and
        // spreads the next calls from there: the fleet clears the call where the gate
        // started it, so that both count on from the same start.
        let probes_before: Vec<_> = (self.quotas().into_iter())
            .map(|which| (which, self.fleet_probe(which)))
            .collect();
        let fleet_start = match self.fleet_start(&scopes, cost, started) {
            Decision::Starts(at) => at,
            Decision::AwaitsAnswer => unreachable!("the fleet let the call start before"),
        };
        prop_assert!(
            fleet_start - started <= MS,
            "cleared at {:?} when the gate started it at {:?}\n{}",
            fleet_start,
            started,
            self.log.join("\n")
        );
        self.sleep_until(fleet_start).await;
        // Each quota this call is the one the fleet sent to learn a new window of.
        let probes = (probes_before.into_iter())
            .filter_map(|(which, before)| {
                let probe = self.fleet_probe(which)?;
                (Some(probe) != before).then_some((which, probe))
            })
            .collect();
        self.compare_budgets()?;
        Ok(Some(InFlight {
            cost,
            scopes,
            indices: indices.to_vec(),
            fleet_start,
            probes,
            answer_tx,
            call,
        }))
    }

    /// The server answers `flight` now, as `answer` says.
    async fn end(&mut self, flight: InFlight, answer: &Answer) -> Result<(), TestCaseError> {
        let cost = flight.cost;
        let now = self.since();
        // Where scopes have limits, a quota for a scope of the call's is that scope's.
        let kept_scope = |i: Option<usize>| i.filter(|_| self.scope_rate.is_some());
        let (outcome, quota, scoped) = match answer {
            Answer::Ok {
                quota,
                scoped,
                actual,
            } => {
                let first = kept_scope(flight.indices.first().copied());
                (Ok(*actual), *quota, first.zip(*scoped))
            }
            Answer::Throttled {
                scope,
                retry_after_ms,
                quota,
            } => {
                let mut throttle =
                    RateLimited::new().retry_after(Duration::from_millis(*retry_after_ms));
                let index = scope.and_then(|i| flight.indices.get(i).copied());
                if let Some(i) = index {
                    throttle = throttle.scope(Scope::from(SCOPES[i]));
                }
                if let Some(quota) = quota {
                    throttle = throttle.quota(quota.quota());
                }
                // A scope's throttle's quota is the scope's where scopes have limits.
                match kept_scope(index) {
                    Some(i) => (Err(Throttle(throttle)), None, quota.map(|q| (i, q))),
                    None => (Err(Throttle(throttle)), *quota, None),
                }
            }
        };
        self.log.push(format!("{now:?}: answered {answer:?}"));
        // The announcement in a successful answer comes while the call is in flight: the
        // gate counts all but one of its units as not yet counted by the server.
        if let (Ok(_), Some(quota)) = (&outcome, quota) {
            self.gate.observe(quota.quota());
            let left = spendable(quota, self.in_flight_cost - 1);
            let call = self
                .store
                .quota_observe_call(None, left, quota.quota().resets_in());
            self.run(now, &call);
        }
        if let (Ok(_), Some((i, quota))) = (&outcome, scoped) {
            let scope = Scope::from(SCOPES[i]);
            self.gate
                .observe_in(scope.clone(), quota.quota())
                .expect("scopes have limits");
            let left = spendable(quota, self.in_flight_in[i] - 1);
            let call =
                (self.store).quota_observe_call(Some(&scope), left, quota.quota().resets_in());
            self.run(now, &call);
        }
        let _ = flight.answer_tx.send(outcome.clone());
        let _ = flight.call.await.expect("the call's task ends");
        self.in_flight_cost -= cost;
        for &i in &flight.indices {
            self.in_flight_in[i] -= cost;
        }
        match &outcome {
            Ok(actual) if *actual != cost => {
                let more = i64::try_from(*actual).unwrap() - i64::try_from(cost).unwrap();
                let sent = i64::try_from(ORIGIN_SECS * 1_000_000).unwrap()
                    + i64::try_from(flight.fleet_start.as_micros()).unwrap();
                let per_unit = PerUnit {
                    gate: self.interval(1),
                    scopes: match self.scope_rate {
                        Some(rate) => flight
                            .scopes
                            .iter()
                            .map(|s| (s, spacing(rate, 1)))
                            .collect(),
                        None => Vec::new(),
                    },
                };
                if let Ok(more @ 1..) = u64::try_from(more) {
                    let call = self.store.settle_call(more, &per_unit);
                    self.run(now, &call);
                }
                let settle = self.quota_draws(&flight.scopes, cost);
                let actuals = vec![*actual; settle.len()];
                let call = self
                    .store
                    .settle_budgets_call(&settle, &actuals, Some(sent));
                self.run(now, &call);
                self.log
                    .push(format!("{now:?}: settled {more:+} units with the fleet"));
            }
            Ok(_) => {}
            Err(Throttle(throttle)) => {
                let call = self
                    .store
                    .back_off_call(throttle.scope.as_ref(), throttle.retry_after.unwrap());
                let reply = self.run(now, &call);
                let left = int(&reply, 0).expect("back_off.lua's reply");
                let fleet_end = now + Duration::from_micros(left.unsigned_abs());
                if throttle.scope.is_none() {
                    let length = self.ramp_pending.unwrap_or_default().max(fleet_end - now);
                    self.ramp_pending = Some(length);
                    let core_end = self.gate.stats().backoff_until.map(|end| end - self.t0);
                    prop_assert_eq!(
                        core_end,
                        Some(fleet_end),
                        "gate-wide backoff ends\n{}",
                        self.log.join("\n")
                    );
                }
                // The throttled call is no longer in flight; the others may be uncounted.
                if let Some(quota) = quota {
                    let left = spendable(quota, self.in_flight_cost);
                    let call = self
                        .store
                        .quota_observe_call(None, left, quota.quota().resets_in());
                    self.run(now, &call);
                }
                if let Some((i, quota)) = scoped {
                    let scope = Scope::from(SCOPES[i]);
                    let left = spendable(quota, self.in_flight_in[i]);
                    let resets_in = quota.quota().resets_in();
                    let call = self.store.quota_observe_call(Some(&scope), left, resets_in);
                    self.run(now, &call);
                }
            }
        }
        self.compare_budgets()?;
        // By design (see the module's docs): the fleet's paces keep what a settled call
        // cost less, and push what it cost more from now; let them pass.
        if matches!(outcome, Ok(actual) if actual != cost) {
            let scope_paces: Vec<_> = (flight.scopes.iter())
                .filter_map(|scope| self.fleet_scope_pace(scope))
                .collect();
            if let Some(pace) = self.fleet_pace().into_iter().chain(scope_paces).max() {
                self.sleep_until(pace).await;
            }
        }
        // By design: the call sent to learn the new window ended without an announcement;
        // the gate forgot the quota, the fleet waits for the answer until its deadline.
        for (which, probe) in flight.probes {
            if self.fleet_probe(which) == Some(probe) {
                self.sleep_until(probe + PROBE_ANSWER_WITHIN).await;
                self.log.push(format!(
                    "{:?}: the fleet's wait for an answer of {which:?} is over",
                    self.since()
                ));
            }
        }
        Ok(())
    }
}

/// The time `per_second` takes to pay for `cost` units: the gate's own interval rule
/// (gate/pace.rs), as `Fleet::ask` sends it.
fn spacing(per_second: f64, cost: u64) -> Duration {
    let per_call = Duration::try_from_secs_f64(per_second.recip()).expect("a finite interval");
    per_call * u32::try_from(cost).expect("a small cost")
}

/// What the gate may spend of `quota`, as `Gate::observe` tells its store: what the server
/// said is left, less the reserve and `uncounted` units of the gate's calls in flight.
fn spendable(quota: Announced, uncounted: u64) -> u64 {
    quota
        .remaining
        .saturating_sub(MAX_COST)
        .saturating_sub(uncounted)
}

fn run_case(
    redis: &FakeTimeRedis,
    (rate, scope_rate): (f64, Option<f64>),
    steps: &[Step],
) -> Result<(), TestCaseError> {
    let mut connection = redis.connect();
    redis::cmd("FLUSHALL")
        .query::<()>(&mut connection)
        .expect("FLUSHALL");
    let store = RedisStore::open(&redis.url(), "agree").expect("a store");
    store
        .load_scripts(&mut connection)
        .expect("the scripts load");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let builder = Gate::builder(|throttle: &Throttle| Some(throttle.0.clone()))
            .max_in_flight(8)
            .max_retries(0)
            .quota_reserve(MAX_COST)
            // Every throttle here carries a Retry-After of at least 1 ms, never shorter than
            // this schedule's 1 ms: the gate keeps each whole, and tells the fleet that very
            // length, as the scripts below are told.
            .backoff(MS, 2_000 * MS)
            .jitter(Jitter::None)
            .rate(rate)
            // The quota as a fleet's member keeps it, by the rules the scripts keep: a fixed
            // window, no others' pace read from its answers.
            .fleet_quota();
        let builder = match scope_rate {
            Some(rate) => builder.per_scope(ScopeLimits::new().rate(rate)),
            None => builder,
        };
        let mut case = Case {
            gate: builder.build().expect("a gate"),
            store,
            redis,
            connection: &mut connection,
            t0: Instant::now(),
            rate,
            scope_rate,
            log: vec![format!("rate {rate} a second, each scope {scope_rate:?}")],
            in_flight_cost: 0,
            in_flight_in: [0; 2],
            ramp_pending: None,
            ramp_until: Duration::ZERO,
        };
        for step in steps {
            if case.since() >= CASE_SPAN {
                break;
            }
            case.step(step).await?;
        }
        Ok(())
    })
}

#[test]
fn redis_reads_the_clock_the_test_sets() {
    let redis = FakeTimeRedis::start();
    let mut connection = redis.connect();
    for at in [0, 1, 999_999, 7_600_000, 3_599_123_456] {
        let at = Duration::from_micros(at);
        redis.set_clock(at);
        assert_eq!(redis_time(&mut connection), at.as_micros() as u64);
    }
}

/// `cases` cases of the property test in `source`, keeping those that failed beside it.
fn runs(cases: u32, source: &'static str) -> ProptestConfig {
    ProptestConfig {
        cases,
        source_file: Some(source),
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..ProptestConfig::default()
    }
}

#[test]
fn the_scripts_decide_as_the_gate_does() {
    let redis = FakeTimeRedis::start();
    let config = runs(96, file!());
    let cases = (rate(), scope_rate(), prop::collection::vec(step(), 1..24));
    let result = TestRunner::new(config).run(&cases, |(rate, scope_rate, steps)| {
        run_case(&redis, (rate, scope_rate), &steps)
    });
    // The server stops before the failure is told.
    drop(redis);
    if let Err(failure) = result {
        panic!("{failure}");
    }
}

/// Runs `steps` through both at `rate`, and fails where they differ.
fn check(rate: f64, steps: &[Step]) {
    let redis = FakeTimeRedis::start();
    let result = run_case(&redis, (rate, None), steps);
    drop(redis);
    if let Err(failure) = result {
        panic!("{failure}");
    }
}

/// A call of `cost` that the server answers at once, that cost `actual` and announced
/// `quota`.
fn answered(cost: u64, actual: u64, quota: Option<Announced>) -> Step {
    Step::Call {
        cost,
        scopes: Vec::new(),
        takes_ms: 0,
        answer: Answer::Ok {
            quota,
            scoped: None,
            actual,
        },
    }
}

#[test]
fn a_settled_last_start_spreads_the_next_by_its_real_cost() {
    let quota = Some(Announced {
        remaining: 9,
        resets_in_ms: 703,
    });
    // 6 units until 703 ms; the call of 2 at 100 ms cost 3: the next waits for its share of
    // 3 units, until 401.5 ms, not of the 2 it started with (until 341.2 ms).
    let steps = [
        answered(1, 1, quota),
        answered(2, 3, None),
        answered(1, 1, None),
    ];
    check(10.0, &steps);
}

#[test]
fn an_announcement_after_an_unasked_reset() {
    let announces = |remaining, resets_in_ms| {
        Some(Announced {
            remaining,
            resets_in_ms,
        })
    };
    // A window of 100 ms; a call started within it answers at 150 ms, of the next window.
    let late = Step::Call {
        cost: 1,
        scopes: Vec::new(),
        takes_ms: 150,
        answer: Answer::Ok {
            quota: announces(20, 1_000),
            scoped: None,
            actual: 1,
        },
    };
    check(1e6, &[answered(1, 1, announces(10, 100)), late]);
}
