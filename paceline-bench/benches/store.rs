//! What the Redis store adds to a call start, beside the round trip to Redis it cannot avoid.
//!
//! ```sh
//! cargo bench -p paceline-bench --bench store --features redis
//! ```
//!
//! A `redis-server` is started on a free loopback port (it must be installed), and every row
//! runs on one current-thread tokio runtime, against that server, one operation after another:
//!
//! - **PING**: a bare `PING` round trip through the same client the store uses (the `redis`
//!   crate's `ConnectionManager`, configured as the store configures its own). The floor: no
//!   store can answer in less than one round trip.
//! - **EVALSHA**: the store's start script (`src/store/start.lua`) sent straight through a
//!   `ConnectionManager`, with an invocation prepared once: the round trip plus what the script
//!   costs inside Redis, without the store's own work around it.
//! - **gate**: `gate.call(|| async { Ok(()) })` through a gate without a store, with no rate and
//!   with a rate (1e9/s: the pacing work is done, but the pace never binds).
//! - **gate + store**: the same call through a gate with a [`RedisStore`], with no rate and
//!   with a rate of 1e6/s, so that the start script reserves a pace slot (1 µs apart: the slot
//!   is always free by the next call, so no call waits for it).
//!
//! What the store adds to one call start is (gate + store) - (gate), for each rate; its bar is
//! at most [`MAX_RATIO`] times the PING round trip. This is network latency, so everything is
//! timed in real (wall-clock) time. After criterion's groups the bench runs its own
//! interleaved rounds ([`ROUNDS`] rounds of one pass of [`OPS`] operations per row, in an
//! order that rotates every round) and takes each row's figure and each round's difference and
//! ratio from the medians, so that load on the machine, which comes and goes in phases, falls
//! on every row alike. Beside the wall time, the summary gives the client's CPU time and its
//! heap allocations per operation (this thread does all the client's work, the connection's
//! driver task included), and it checks through `INFO commandstats` that Redis ran the start
//! script once for every store call start (a store that timed out would go on without Redis,
//! and its calls would look cheap).
//!
//! Criterion's rows are each measured in a stretch of time of their own: on a loaded machine a
//! round trip waits for a core, and a row can come out several times slower than in the
//! summary. Take the verdict from the summary.
//!
//! Then, as a nice-to-have, [`CALLERS`] callers at once on one gate (or one connection), as
//! wall time per operation: without a rate the store's round trips overlap on the connection;
//! with one, a process clears one call start at a time (so that a backoff begun elsewhere
//! reaches its next call), and they cannot.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::LazyCell;
use std::collections::BTreeMap;
use std::future::Future;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkGroup, Criterion, measurement::WallTime};
use futures::future::join_all;
use paceline::{Gate, RateLimited, RedisStore};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, Cmd, Script, Value};
use tokio::runtime::{Builder, Runtime};

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;

#[path = "support/bars.rs"]
mod bars;
/// The client's CPU time: this thread's (see the file).
#[path = "support/cpu_clock.rs"]
mod cpu_clock;
#[path = "support/quantiles.rs"]
mod quantiles;
use quantiles::quantiles;

use redis_server::RedisServer;

/// The bar: what the store adds to one call start, over one PING round trip.
const MAX_RATIO: f64 = 1.5;

/// Operations per pass of the summary's rounds: a pass takes some 10-20 ms against Redis.
const OPS: usize = 400;

/// Rounds of one pass per row, after criterion.
const ROUNDS: usize = 41;

/// Callers at once in the concurrent rows.
const CALLERS: usize = 4;

/// The paced store's rate: a start slot every microsecond, the finest the script counts in.
const STORE_RATE: f64 = 1e6;

/// The paced gate's rate without a store: fine enough that calls a few hundred nanoseconds
/// apart are never held (at 1e6/s they would wait for tokio's millisecond timer).
const GATE_RATE: f64 = 1e9;

/// The store's start script, sent bare by the EVALSHA rows.
const START: &str = include_str!("../../src/store/start.lua");

/// The TTL of the fleet's rate key the store sends with the start script (15 minutes).
const RATE_TTL_MS: u64 = 15 * 60 * 1000;

// ---------------------------------------------------------------------------------------------
// Allocations

/// Counts heap allocations, so the summary can show what each row allocates per operation.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every method forwards to the system allocator under the caller's own contract; the
// count is a relaxed atomic increment beside it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller keeps `GlobalAlloc::alloc`'s contract, which is `System`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: `ptr` came from this allocator, which is `System`'s, with `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, which is `System`'s, with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

// ---------------------------------------------------------------------------------------------
// The rows

/// One row: what one operation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Row {
    Ping,
    Script,
    ScriptPaced,
    Gate,
    GatePaced,
    Store,
    StorePaced,
}

impl Row {
    const ALL: [Self; 7] = [
        Self::Ping,
        Self::Script,
        Self::ScriptPaced,
        Self::Gate,
        Self::GatePaced,
        Self::Store,
        Self::StorePaced,
    ];

    /// The benchmark's name in criterion's groups and the summary.
    fn name(self) -> &'static str {
        match self {
            Self::Ping => "PING round trip",
            Self::Script => "EVALSHA start.lua, no pace",
            Self::ScriptPaced => "EVALSHA start.lua, pace slot",
            Self::Gate => "gate, no store",
            Self::GatePaced => "gate, no store, rate 1e9",
            Self::Store => "gate + store",
            Self::StorePaced => "gate + store, rate 1e6",
        }
    }

    /// Whether each operation runs the start script once in Redis.
    fn runs_script(self) -> bool {
        matches!(
            self,
            Self::Script | Self::ScriptPaced | Self::Store | Self::StorePaced
        )
    }
}

fn never_throttled(_: &()) -> Option<RateLimited> {
    None
}

/// The call every gate row makes: ready at once, never fails.
async fn trivial() -> Result<(), ()> {
    Ok(())
}

/// Everything the rows run through, made once: the clients keep their connections (and their
/// driver tasks) on this runtime for the whole run.
struct Fixture {
    /// Runs until the fixture is dropped.
    _redis: RedisServer,
    rt: Runtime,
    /// A `ConnectionManager` of its own, configured as the store's, for PING and EVALSHA.
    manager: ConnectionManager,
    ping: Cmd,
    script: Script,
    /// The keys the store's start script gets for an unscoped call (pace, fleet rate,
    /// gate-wide backoff).
    script_keys: [String; 3],
    gate: Gate<()>,
    gate_paced: Gate<()>,
    store: Gate<()>,
    store_paced: Gate<()>,
}

impl Fixture {
    fn new() -> Self {
        let redis = RedisServer::start();
        let rt = Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a current-thread runtime");
        // As `RedisStore` configures its own (its default 50 ms timeout raised to 250 ms).
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_millis(250)))
            .set_response_timeout(Some(Duration::from_millis(250)))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(200));
        let client = Client::open(redis.url()).expect("a valid URL");
        let manager = rt
            .block_on(ConnectionManager::new_with_config(client, config))
            .expect("a connection to the bench's redis-server");
        let store = |namespace| RedisStore::open(&redis.url(), namespace).expect("a valid URL");
        let plain = || Gate::builder(never_throttled);
        let fixture = Self {
            manager,
            ping: redis::cmd("PING"),
            script: Script::new(START),
            script_keys: ["pace", "rate", "backoff"].map(|key| format!("paceline:{{bare}}:{key}")),
            gate: plain().build().expect("a valid gate"),
            gate_paced: plain().rate(GATE_RATE).build().expect("a valid gate"),
            store: plain().store(store("bench")).build().expect("a valid gate"),
            store_paced: plain()
                .rate(STORE_RATE)
                .store(store("bench-paced"))
                .build()
                .expect("a valid gate"),
            rt,
            _redis: redis,
        };
        // Connect the stores and load the script, so that no timed operation does either. The
        // first `EVALSHA` fails (the script is not loaded yet) but counts as run: the count of
        // runs to expect starts from what Redis counted here.
        for row in Row::ALL {
            fixture.rt.block_on(fixture.sequential(row, 10, None));
        }
        EXPECTED_SCRIPTS.store(fixture.scripts_run(), Ordering::Relaxed);
        fixture
    }

    /// `count` operations of `row`, one after another; each one's wall time into `times`.
    async fn sequential(&self, row: Row, count: usize, times: Option<&mut Vec<f64>>) {
        if row.runs_script() {
            EXPECTED_SCRIPTS.fetch_add(count as u64, Ordering::Relaxed);
        }
        self.run(row, count, times).await;
    }

    /// [`CALLERS`] callers at once, `count` operations of `row` between them.
    async fn concurrent(&self, row: Row, count: usize) {
        if row.runs_script() {
            EXPECTED_SCRIPTS.fetch_add(count as u64, Ordering::Relaxed);
        }
        let callers = (0..CALLERS).map(|caller| {
            // The first callers make the remainder's operations.
            let count = count / CALLERS + usize::from(caller < count % CALLERS);
            self.run(row, count, None)
        });
        join_all(callers).await;
    }

    async fn run(&self, row: Row, count: usize, times: Option<&mut Vec<f64>>) {
        match row {
            Row::Ping => timed(count, times, || self.ping()).await,
            Row::Script => timed(count, times, || self.script(0)).await,
            Row::ScriptPaced => timed(count, times, || self.script(1)).await,
            Row::Gate => timed(count, times, || call(&self.gate)).await,
            Row::GatePaced => timed(count, times, || call(&self.gate_paced)).await,
            Row::Store => timed(count, times, || call(&self.store)).await,
            Row::StorePaced => timed(count, times, || call(&self.store_paced)).await,
        }
    }

    async fn ping(&self) {
        let mut manager = self.manager.clone();
        let pong: String = self
            .ping
            .query_async(&mut manager)
            .await
            .expect("redis-server answers PING");
        black_box(pong);
    }

    /// The start script as the store sends it for an unscoped call of a gate with a fixed
    /// rate, `interval` microseconds between starts (0: no pace).
    async fn script(&self, interval: u64) {
        let mut manager = self.manager.clone();
        let mut invocation = self.script.prepare_invoke();
        for key in &self.script_keys {
            invocation.key(key);
        }
        // The caller's interval; no fleet rate known (-1: a fixed rate); the rate key's TTL.
        invocation.arg(interval).arg(-1).arg(RATE_TTL_MS);
        let answer: Vec<Value> = invocation
            .invoke_async(&mut manager)
            .await
            .expect("redis-server runs the start script");
        assert_eq!(
            answer.first(),
            Some(&Value::Int(1)),
            "the script lets it go"
        );
        black_box(answer);
    }

    /// How many times Redis has run the start script (`EVALSHA`) since it started.
    fn scripts_run(&self) -> u64 {
        let mut manager = self.manager.clone();
        let info: String = self
            .rt
            .block_on(
                redis::cmd("INFO")
                    .arg("commandstats")
                    .query_async(&mut manager),
            )
            .expect("redis-server answers INFO");
        info.lines()
            .find_map(|line| line.strip_prefix("cmdstat_evalsha:calls="))
            .and_then(|rest| rest.split(',').next())
            .and_then(|calls| calls.parse().ok())
            .unwrap_or(0)
    }

    fn redis_version(&self) -> String {
        let mut manager = self.manager.clone();
        let info: String = self
            .rt
            .block_on(redis::cmd("INFO").arg("server").query_async(&mut manager))
            .expect("redis-server answers INFO");
        info.lines()
            .find_map(|line| line.strip_prefix("redis_version:"))
            .unwrap_or("?")
            .trim()
            .to_owned()
    }
}

/// Runs `op` `count` times, one after another, timing each by the wall clock into `times`.
async fn timed<Fut: Future<Output = ()>>(
    count: usize,
    times: Option<&mut Vec<f64>>,
    mut op: impl FnMut() -> Fut,
) {
    match times {
        Some(times) => {
            for _ in 0..count {
                let start = Instant::now();
                op().await;
                times.push(start.elapsed().as_nanos() as f64);
            }
        }
        None => {
            for _ in 0..count {
                op().await;
            }
        }
    }
}

async fn call(gate: &Gate<()>) {
    black_box(gate.call(trivial).await).expect("a trivial call succeeds");
}

/// Start-script runs every row asked for, to check against what Redis counted.
static EXPECTED_SCRIPTS: AtomicU64 = AtomicU64::new(0);

// ---------------------------------------------------------------------------------------------
// Criterion's groups

fn criterion_groups(c: &mut Criterion, fixture: &LazyCell<Fixture>) {
    let mut group = c.benchmark_group("store");
    for row in Row::ALL {
        bench(&mut group, row.name(), |iters| {
            let start = Instant::now();
            fixture.rt.block_on(fixture.sequential(row, iters, None));
            start.elapsed()
        });
    }
    group.finish();

    let mut group = c.benchmark_group(format!("store, {CALLERS} callers"));
    for row in [Row::Ping, Row::Store, Row::StorePaced] {
        bench(&mut group, row.name(), |iters| {
            let start = Instant::now();
            fixture.rt.block_on(fixture.concurrent(row, iters));
            start.elapsed()
        });
    }
    group.finish();
}

/// Registers `name`, every iteration one operation, timed by the wall clock.
fn bench(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    mut run: impl FnMut(usize) -> Duration,
) {
    group.bench_function(name, |b| {
        b.iter_custom(|iters| run(usize::try_from(iters).expect("iterations fit a usize")));
    });
}

// ---------------------------------------------------------------------------------------------
// The summary's interleaved rounds

/// One row's passes: each pass's median and mean wall time per operation, client CPU time
/// and allocations per operation.
#[derive(Debug, Default)]
struct Passes {
    median: Vec<f64>,
    mean: Vec<f64>,
    cpu: Vec<f64>,
    allocations: Vec<f64>,
}

/// Every row's passes, one per round, and the passes whose start scripts Redis did not all run.
#[derive(Debug, Default)]
struct Rounds {
    rows: BTreeMap<&'static str, Passes>,
    concurrent: BTreeMap<&'static str, Vec<f64>>,
    short_of_redis: usize,
}

fn rounds(fixture: &Fixture, rounds: usize, ops: usize) -> Rounds {
    let mut out = Rounds::default();
    let mut times = Vec::with_capacity(ops);
    for round in 0..rounds {
        for k in 0..Row::ALL.len() {
            let row = Row::ALL[(round + k) % Row::ALL.len()];
            times.clear();
            let scripts_before = fixture.scripts_run();
            let (allocations, cpu) = (ALLOCATIONS.load(Ordering::Relaxed), cpu_clock::now());
            fixture
                .rt
                .block_on(fixture.sequential(row, ops, Some(&mut times)));
            let cpu = cpu_clock::now() - cpu;
            let allocations = ALLOCATIONS.load(Ordering::Relaxed) - allocations;
            let scripts = fixture.scripts_run() - scripts_before;
            if row.runs_script() && scripts != ops as u64 {
                out.short_of_redis += 1;
            }
            let passes = out.rows.entry(row.name()).or_default();
            passes.mean.push(times.iter().sum::<f64>() / ops as f64);
            passes.median.push(quantiles(&mut times).median);
            passes.cpu.push(cpu.as_nanos() as f64 / ops as f64);
            passes.allocations.push(allocations as f64 / ops as f64);
        }
        for k in 0..3 {
            let row = [Row::Ping, Row::Store, Row::StorePaced][(round + k) % 3];
            let start = Instant::now();
            fixture.rt.block_on(fixture.concurrent(row, ops));
            let per_call = start.elapsed().as_nanos() as f64 / ops as f64;
            out.concurrent.entry(row.name()).or_default().push(per_call);
        }
    }
    out
}

fn us(ns: f64) -> f64 {
    ns / 1e3
}

fn print_summary(fixture: &Fixture, rounds: &mut Rounds, ops: usize, judged: bool) {
    let count = rounds
        .rows
        .get(Row::Ping.name())
        .map_or(0, |p| p.median.len());
    println!();
    println!(
        "Store: one call start against redis-server {} on loopback, current-thread runtime;",
        fixture.redis_version()
    );
    println!(
        "{count} rounds of one pass of {ops} operations per row, row order rotating every round"
    );
    println!(
        "  {:<30} {:>10} {:>17} {:>10} {:>14} {:>10}",
        "row", "median µs", "[p25-p75]", "mean µs", "client CPU µs", "allocs/op"
    );
    let mut medians = BTreeMap::new();
    for row in Row::ALL {
        let passes = rounds.rows.get_mut(row.name()).expect("every row ran");
        let median = quantiles(&mut passes.median.clone());
        let mean = quantiles(&mut passes.mean).median;
        let cpu = quantiles(&mut passes.cpu).median;
        let allocations = quantiles(&mut passes.allocations).median;
        println!(
            "  {:<30} {:>10.2} {:>17} {:>10.2} {:>14.2} {:>10.1}",
            row.name(),
            us(median.median),
            format!("[{:.2}-{:.2}]", us(median.p25), us(median.p75)),
            us(mean),
            us(cpu),
            allocations
        );
        medians.insert(row.name(), (median.median, cpu, allocations));
    }

    // Per round: a sum of rows' pass figures, alone or over the round's PING.
    let per_round = |terms: &[(f64, Row)], figure: fn(&Passes) -> &Vec<f64>, over_ping: bool| {
        let mut values: Vec<f64> = (0..count)
            .map(|round| {
                let value = |row: Row| figure(&rounds.rows[row.name()])[round];
                let sum: f64 = terms.iter().map(|&(sign, row)| sign * value(row)).sum();
                if over_ping {
                    sum / value(Row::Ping)
                } else {
                    sum
                }
            })
            .collect();
        quantiles(&mut values)
    };
    let wall: fn(&Passes) -> &Vec<f64> = |passes| &passes.median;
    let cpu: fn(&Passes) -> &Vec<f64> = |passes| &passes.cpu;
    println!();
    println!(
        "What the store adds to one call start, (gate + store) - (gate, no store), per round;"
    );
    println!("median [p25-p75] over the rounds (in parentheses: from the rows' medians above)");
    for (label, with, without) in [
        ("no rate", Row::Store, Row::Gate),
        ("rate 1e6 (1e9 without)", Row::StorePaced, Row::GatePaced),
    ] {
        let terms = [(1.0, with), (-1.0, without)];
        let added = per_round(&terms, wall, false);
        let ratio = per_round(&terms, wall, true);
        let added_cpu = per_round(&terms, cpu, false);
        let (with_median, _, with_allocations) = medians[with.name()];
        let (without_median, _, without_allocations) = medians[without.name()];
        let (ping, ..) = medians[Row::Ping.name()];
        println!(
            "  {label:<24} {:>6.2} µs [{:.2}-{:.2}] = {:.3} x PING [{:.3}-{:.3}]  bar <= {MAX_RATIO}  {}  \
             ({:.2} µs, {:.3} x)",
            us(added.median),
            us(added.p25),
            us(added.p75),
            ratio.median,
            ratio.p25,
            ratio.p75,
            if judged {
                bars::judge(
                    &format!(
                        "store: what it adds to a call start ({label}) over a PING <= {MAX_RATIO}"
                    ),
                    ratio.median <= MAX_RATIO,
                )
            } else {
                "-"
            },
            us(with_median - without_median),
            (with_median - without_median) / ping,
        );
        println!(
            "  {:<24} client CPU +{:.2} µs [{:.2}-{:.2}], +{:.1} allocations",
            "",
            us(added_cpu.median),
            us(added_cpu.p25),
            us(added_cpu.p75),
            with_allocations - without_allocations
        );
    }
    println!("  of which, wall and client CPU:");
    for (label, terms) in [
        (
            "start.lua over PING, no pace",
            &[(1.0, Row::Script), (-1.0, Row::Ping)][..],
        ),
        (
            "start.lua over PING, pace slot",
            &[(1.0, Row::ScriptPaced), (-1.0, Row::Ping)],
        ),
        (
            "the store around the bare script, no rate",
            &[(1.0, Row::Store), (-1.0, Row::Gate), (-1.0, Row::Script)],
        ),
        (
            "the store around the bare script, rate",
            &[
                (1.0, Row::StorePaced),
                (-1.0, Row::GatePaced),
                (-1.0, Row::ScriptPaced),
            ],
        ),
    ] {
        let (wall, cpu) = (per_round(terms, wall, false), per_round(terms, cpu, false));
        println!(
            "    {label:<42} {:>6.2} µs [{:.2}-{:.2}]   CPU {:>5.2} µs [{:.2}-{:.2}]",
            us(wall.median),
            us(wall.p25),
            us(wall.p75),
            us(cpu.median),
            us(cpu.p25),
            us(cpu.p75)
        );
    }

    println!();
    println!(
        "{CALLERS} callers at once, {ops} operations between them per pass: wall time per operation"
    );
    for row in [Row::Ping, Row::Store, Row::StorePaced] {
        let Some(values) = rounds.concurrent.get_mut(row.name()) else {
            continue;
        };
        let q = quantiles(values);
        println!(
            "  {:<30} {:>10.2} µs [{:.2}-{:.2}]",
            row.name(),
            us(q.median),
            us(q.p25),
            us(q.p75)
        );
    }

    println!();
    let (expected, run) = (
        EXPECTED_SCRIPTS.load(Ordering::Relaxed),
        fixture.scripts_run(),
    );
    println!(
        "Redis ran the start script {run} times for {expected} asked, over the whole run; {} of {} \
         summary passes that run it fell short{}",
        rounds.short_of_redis,
        count * Row::ALL.iter().filter(|row| row.runs_script()).count(),
        if run == expected && rounds.short_of_redis == 0 {
            ""
        } else {
            "   WARNING: some store calls went on without Redis"
        }
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let listing = args.iter().any(|arg| arg == "--list");
    let testing = args.iter().any(|arg| arg == "--test");
    let profiling = args.iter().any(|arg| arg.starts_with("--profile-time"));
    // Criterion's defaults for this bench; its command-line flags still override them.
    let mut c = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    // Made when a benchmark first runs: `--list` starts no redis-server.
    let fixture: LazyCell<Fixture> = LazyCell::new(Fixture::new);
    criterion_groups(&mut c, &fixture);
    c.final_summary();
    if listing || profiling {
        return;
    }
    // A `--test` run (`cargo test --benches`) checks that the rounds work, quickly.
    let (count, ops) = if testing { (1, 20) } else { (ROUNDS, OPS) };
    let mut measured = rounds(&fixture, count, ops);
    // One round judges nothing.
    print_summary(&fixture, &mut measured, ops, !testing);
    bars::exit();
}
