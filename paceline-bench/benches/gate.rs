//! Speed of the gate: the cost of one uncontended call, and admission under heavy contention.
//!
//! ```sh
//! cargo bench -p paceline-bench --bench gate
//! ```
//!
//! paceline and tokio are built as in a user's release build: tokio without `test-util`, whose
//! check for a paused clock every read of tokio's clock would otherwise pay (see README.md).
//!
//! Two measurements, each beside a `tokio::sync::Semaphore` doing the same job, and both sides
//! of each comparison measured in the same run:
//!
//! 1. **Uncontended**: [`CALLS`] calls, one after another, through a gate with no rate, no
//!    backoff and room for every call, around a future that is ready at once. This is the
//!    fast path every call pays when the gate is not the bottleneck; its peer is a bare
//!    semaphore acquire and release around the same future. Target: the gate costs at most
//!    [`MAX_RATIO`] times the semaphore.
//!    Beside it, a gate with a rate it never reaches ([`UNREACHABLE_RATE`]), which reads the
//!    clock and checks the rate on every call, against governor's `until_ready` on a quota
//!    that is never exhausted, which does the same, on std's clock (its `MonotonicClock`).
//!    Target: at most [`MAX_PACED_RATIO`] times. On its default clock governor reads the CPU's
//!    cycle counter (through `quanta`); the gate must read tokio's clock, which is
//!    `std::time::Instant` unless time is paused: that row has no bar (its gap is mostly the
//!    clock's, a third of a call's time on one machine and a half on another), and the run times
//!    one read of tokio's clock alone, to show how much of the gap is the clock.
//!    Beside both, throttle-net 2, the newest all-in-one peer: its `Bulkhead` (an in-flight
//!    limit) beside the gate without a rate (target at most [`MAX_BULKHEAD_RATIO`]), and a
//!    `Bulkhead` slot around its `Throttle` (a token bucket never emptied, on std's clock)
//!    beside the gate with a rate (target at most [`MAX_PACED_BULKHEAD_RATIO`]).
//! 2. **Contended**: [`TASKS`] tasks spawned at once on one gate of [`SLOTS`] slots, each making
//!    one call that sleeps [`CALL_TIME`] in real time (paused time needs tokio's `test-util`,
//!    which this build leaves out, as a user's does). Reported: throughput per second of wall
//!    time (which the sleeps bound: the FIFO ideal is [`SLOTS`] calls per [`CALL_TIME`]) and
//!    of the thread's CPU time (the runtime's own work per call: gate, scheduler and timers),
//!    the longest wait from spawn to the call's start beside the FIFO ideal (call `k` starts at
//!    `floor(k / SLOTS) * CALL_TIME`; target at most twice the ideal; tokio's timer, which
//!    counts whole milliseconds, makes each sleep a little longer), and how many pairs of calls
//!    started out of spawn order (target none).
//!
//! 3. **Scopes**: 10,000 and 100,000 calls waiting at once in the line of a gate of one slot,
//!    all in one scope or spread over 10,000 scopes, which take turns: the CPU time per call
//!    (its start taken from the line, its wake-up, its end), which stays flat if the line's
//!    work per start grows as the log of its length.
//!
//! The machine this runs on may be busy, so an uncontended pass is timed by the CPU time of the
//! thread that runs it (a current-thread runtime does all its work there; time spent
//! descheduled is left out), and every figure is a median over hundreds of passes. Other work
//! on the machine still slows both sides alike for seconds at a time, so after criterion's
//! groups the bench runs gate and semaphore passes back to back ([`paired`]) and takes the
//! verdict from the median of those rounds' ratios. Then it prints one summary table, and
//! exits with status 1 if any bar failed (see `support/bars.rs`).
//!
//! With the `metrics` feature, `PACELINE_BENCH_RECORDER=prometheus` installs a Prometheus
//! recorder first, to time the gate's counters and gauges as a scraped service pays for them.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use criterion::{BenchmarkGroup, Criterion, measurement::WallTime};
use paceline::Gate;
use tokio::runtime::{Builder, Runtime};
use tokio::sync::Semaphore;
use tokio::time::{Instant, sleep};

/// Calls per uncontended pass: enough that entering the runtime (a microsecond or two) vanishes
/// against the per-call cost, few enough that a pass takes milliseconds.
const CALLS: u64 = 100_000;

/// The uncontended bar: the gate's median ns/call over a bare semaphore's acquire and release
/// (the issue's bar for a call through a gate with an in-flight limit alone).
const MAX_RATIO: f64 = 0.85;

/// The uncontended bar over throttle-net's `Bulkhead`, the in-flight limit of the newest
/// all-in-one peer: the closest job a peer does to a gate's call without a rate.
const MAX_BULKHEAD_RATIO: f64 = 1.0;

/// The bar for a gate with a rate that never binds, over governor's `until_ready` on std's
/// clock on a quota that is never exhausted: both read the clock and check a rate on every
/// call.
const MAX_PACED_RATIO: f64 = 3.0;

/// No bar: the row is printed, and judges nothing (governor on its own clock, `quanta`, which
/// a gate cannot read: see the file).
const NO_BAR: f64 = f64::INFINITY;

/// The bar for a gate with a rate that never binds, over throttle-net's `Bulkhead` slot
/// around its `Throttle` (a token bucket never emptied): the all-in-one peer's way to the
/// same job.
const MAX_PACED_BULKHEAD_RATIO: f64 = 0.7;

/// The bar for a gate with a rate that never binds, over what does the same job put
/// together from peers: a semaphore's slot around governor's `until_ready` on std's clock.
/// The gate's call holds a slot and records how the call went, which governor alone does not.
const MAX_COMPOSED_RATIO: f64 = 1.3;

/// A rate no loop of trivial calls can reach (one start per nanosecond): the gate checks it
/// on every call and never waits.
const UNREACHABLE_RATE: f64 = 1e9;

/// Room for every call: the uncontended gate and semaphore never make a call wait.
const ROOMY: usize = 1 << 20;

/// Tasks in the contended run, all spawned at once.
const TASKS: usize = 10_000;

/// The contended gate's in-flight limit.
const SLOTS: usize = 64;

/// How long each contended call takes, in real time.
const CALL_TIME: Duration = Duration::from_millis(10);

/// The contended bar on the longest wait, as a multiple of the FIFO ideal.
const MAX_WAIT_FACTOR: u32 = 2;

/// Rounds of a gate pass and a semaphore pass back to back, after criterion; their median
/// ratio is the uncontended verdict (see [`paired`]).
const PAIRED_ROUNDS: usize = 401;

// Benchmark ids, as criterion prints them and as the summary looks them up.
const GATE_CALL: &str = "uncontended/paceline gate";
const SEMAPHORE_CALL: &str = "uncontended/tokio semaphore";
const FUTURE_ALONE: &str = "uncontended/future alone";
const PACED_GATE_CALL: &str = "uncontended/paceline gate, rate never binding";
const GOVERNOR_CALL: &str = "uncontended/governor until_ready";
const GOVERNOR_STD_CALL: &str = "uncontended/governor until_ready, std clock";
const GOVERNOR_SEMAPHORE_CALL: &str = "uncontended/governor (std clock) and semaphore";
const BULKHEAD_CALL: &str = "uncontended/throttle-net Bulkhead";
const BULKHEAD_THROTTLE_CALL: &str = "uncontended/throttle-net Bulkhead and Throttle";
const CLOCK_READ: &str = "uncontended/tokio clock read alone";
const GATE_CONTENDED: &str = "contended/paceline gate";
const SEMAPHORE_CONTENDED: &str = "contended/tokio semaphore";

/// ns/call of every uncontended pass, by benchmark id. Criterion keeps statistics per sample
/// (many passes); the summary wants the median pass of each side, so passes are filed here too.
static PASSES: Mutex<BTreeMap<&str, Vec<f64>>> = Mutex::new(BTreeMap::new());

/// Every contended run, by benchmark id.
static RUNS: Mutex<BTreeMap<&str, Vec<Contended>>> = Mutex::new(BTreeMap::new());

/// What a bar that fails does (see the file).
#[path = "support/bars.rs"]
mod bars;
/// The clock passes are timed with: thread CPU time (see the file).
#[path = "support/cpu_clock.rs"]
mod cpu_clock;
#[path = "support/quantiles.rs"]
mod quantiles;
use quantiles::quantiles;

fn never_throttled(_: &()) -> Option<paceline::RateLimited> {
    None
}

// ---------------------------------------------------------------------------------------------
// 1. Uncontended

/// The call every uncontended loop makes: ready at once, never fails.
async fn trivial() -> Result<(), ()> {
    Ok(())
}

/// One side of the uncontended comparison.
#[derive(Debug, Clone, Copy)]
enum Uncontended {
    Gate,
    Semaphore,
    FutureAlone,
    PacedGate,
    Governor,
    GovernorStdClock,
    GovernorStdAndSemaphore,
    Bulkhead,
    BulkheadThrottle,
    ClockRead,
}

/// governor's limiter for one quota, with its default clock.
type Governor = governor::DefaultDirectRateLimiter;

/// governor's limiter for one quota on a clock of its choosing, with no middleware.
type GovernorOn<C> = governor::RateLimiter<
    governor::state::NotKeyed,
    governor::state::InMemoryState,
    C,
    governor::middleware::NoOpMiddleware<<C as governor::clock::Clock>::Instant>,
>;

/// governor's limiter for one quota, on `std::time::Instant`: the clock tokio reads.
type GovernorStd = GovernorOn<governor::clock::MonotonicClock>;

/// What the uncontended loops run through, made once and used by every pass.
struct Fixture {
    rt: Runtime,
    gate: Gate<()>,
    semaphore: Semaphore,
    paced_gate: Gate<()>,
    governor: Governor,
    governor_std: GovernorStd,
    bulkhead: throttle_net::Bulkhead,
    throttle: throttle_net::Throttle,
}

impl Fixture {
    fn new() -> Self {
        let rt = Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a current-thread runtime");
        let gate = Gate::builder(never_throttled)
            .max_in_flight(ROOMY)
            .build()
            .expect("a valid gate");
        let paced_gate = Gate::builder(never_throttled)
            .max_in_flight(ROOMY)
            .rate(UNREACHABLE_RATE)
            .build()
            .expect("a valid gate");
        let never_exhausted = governor::Quota::per_second(std::num::NonZeroU32::MAX);
        Self {
            rt,
            gate,
            semaphore: Semaphore::new(ROOMY),
            paced_gate,
            governor: governor::RateLimiter::direct(never_exhausted),
            governor_std: governor::RateLimiter::direct_with_clock(
                never_exhausted,
                governor::clock::MonotonicClock,
            ),
            bulkhead: throttle_net::Bulkhead::new(u32::try_from(ROOMY).expect("fits")),
            // A bucket of 2^32 - 1 calls refilled at as many a second: never emptied (it reads
            // std's clock, as the gate's does in a user's build).
            throttle: throttle_net::Throttle::per_second(u32::MAX),
        }
    }

    /// Times one pass of [`CALLS`] calls by this thread's CPU time; returns ns/call.
    fn pass(&self, side: Uncontended) -> f64 {
        let start = cpu_clock::now();
        match side {
            Uncontended::Gate => self.rt.block_on(gate_loop(&self.gate)),
            Uncontended::Semaphore => self.rt.block_on(semaphore_loop(&self.semaphore)),
            Uncontended::FutureAlone => self.rt.block_on(future_loop()),
            Uncontended::PacedGate => self.rt.block_on(gate_loop(&self.paced_gate)),
            Uncontended::Governor => self.rt.block_on(governor_loop(&self.governor)),
            Uncontended::GovernorStdClock => {
                self.rt.block_on(governor_loop(&self.governor_std));
            }
            Uncontended::GovernorStdAndSemaphore => self
                .rt
                .block_on(governor_semaphore_loop(&self.governor_std, &self.semaphore)),
            Uncontended::Bulkhead => self.rt.block_on(bulkhead_loop(&self.bulkhead)),
            Uncontended::BulkheadThrottle => self
                .rt
                .block_on(bulkhead_throttle_loop(&self.bulkhead, &self.throttle)),
            Uncontended::ClockRead => self.rt.block_on(clock_loop()),
        }
        let elapsed = cpu_clock::now() - start;
        elapsed.as_nanos() as f64 / CALLS as f64
    }
}

async fn gate_loop(gate: &Gate<()>) {
    for _ in 0..CALLS {
        black_box(gate.call(trivial).await).expect("a trivial call succeeds");
    }
}

async fn semaphore_loop(semaphore: &Semaphore) {
    for _ in 0..CALLS {
        let permit = semaphore.acquire().await.expect("the semaphore stays open");
        let out = trivial().await;
        drop(permit);
        black_box(out).expect("a trivial call succeeds");
    }
}

async fn governor_loop<C: governor::clock::ReasonablyRealtime>(governor: &GovernorOn<C>) {
    for _ in 0..CALLS {
        governor.until_ready().await;
        black_box(trivial().await).expect("a trivial call succeeds");
    }
}

/// What a program would put together to do what a gate with a rate does: a slot of a
/// semaphore held for the call, and governor's rate (on the clock the gate reads) before it.
async fn governor_semaphore_loop(governor: &GovernorStd, semaphore: &Semaphore) {
    for _ in 0..CALLS {
        let permit = semaphore.acquire().await.expect("the semaphore stays open");
        governor.until_ready().await;
        let out = trivial().await;
        drop(permit);
        black_box(out).expect("a trivial call succeeds");
    }
}

/// throttle-net's in-flight limit: a `Bulkhead` slot held for the call.
async fn bulkhead_loop(bulkhead: &throttle_net::Bulkhead) {
    for _ in 0..CALLS {
        let permit = bulkhead.acquire().await.expect("a roomy bulkhead");
        let out = trivial().await;
        drop(permit);
        black_box(out).expect("a trivial call succeeds");
    }
}

/// What throttle-net puts together for a gate with a rate: a `Bulkhead` slot held for the
/// call, and a token from its `Throttle` before it.
async fn bulkhead_throttle_loop(
    bulkhead: &throttle_net::Bulkhead,
    throttle: &throttle_net::Throttle,
) {
    for _ in 0..CALLS {
        let permit = bulkhead.acquire().await.expect("a roomy bulkhead");
        throttle.acquire().await.expect("a bucket never emptied");
        let out = trivial().await;
        drop(permit);
        black_box(out).expect("a trivial call succeeds");
    }
}

/// One read of tokio's clock per call, in the runtime as the gate reads it: the floor under
/// any pacing that paused time drives.
async fn clock_loop() {
    for _ in 0..CALLS {
        black_box(Instant::now());
        black_box(trivial().await).expect("a trivial call succeeds");
    }
}

/// The loop and the future with nothing around them: the floor under both sides.
async fn future_loop() {
    for _ in 0..CALLS {
        black_box(trivial().await).expect("a trivial call succeeds");
    }
}

fn uncontended(c: &mut Criterion, fixture: &Fixture) {
    let mut group = c.benchmark_group("uncontended");
    // A pass takes a few milliseconds; this gives several hundred passes per side.
    group
        .sample_size(60)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(6))
        .throughput(criterion::Throughput::Elements(CALLS));
    for (id, side) in [
        (GATE_CALL, Uncontended::Gate),
        (SEMAPHORE_CALL, Uncontended::Semaphore),
        (FUTURE_ALONE, Uncontended::FutureAlone),
        (PACED_GATE_CALL, Uncontended::PacedGate),
        (GOVERNOR_CALL, Uncontended::Governor),
        (GOVERNOR_STD_CALL, Uncontended::GovernorStdClock),
        (
            GOVERNOR_SEMAPHORE_CALL,
            Uncontended::GovernorStdAndSemaphore,
        ),
        (BULKHEAD_CALL, Uncontended::Bulkhead),
        (BULKHEAD_THROTTLE_CALL, Uncontended::BulkheadThrottle),
        (CLOCK_READ, Uncontended::ClockRead),
    ] {
        bench_passes(&mut group, id, || fixture.pass(side));
    }
    group.finish();
}

/// Registers `id` (`group/name`), every iteration one timed pass, each pass filed in [`PASSES`].
fn bench_passes(
    group: &mut BenchmarkGroup<'_, WallTime>,
    id: &'static str,
    mut pass: impl FnMut() -> f64,
) {
    let name = id.split_once('/').map_or(id, |(_, name)| name);
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let ns_per_call = pass();
                PASSES
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .entry(id)
                    .or_default()
                    .push(ns_per_call);
                total += Duration::from_nanos((ns_per_call * CALLS as f64) as u64);
            }
            total
        });
    });
}

/// ns/call of passes of two sides run back to back (the gate and its peer), and each
/// round's ratio.
#[derive(Debug, Default)]
struct Paired {
    gate: Vec<f64>,
    peer: Vec<f64>,
    ratios: Vec<f64>,
}

/// [`PAIRED_ROUNDS`] rounds of one gate pass and one semaphore pass, the order flipped every
/// round. The load on a shared machine comes in phases that slow both sides alike (by half
/// again, on the machine this was written on); a round's two passes share a phase, so the
/// median of per-round ratios does not depend on how the phases fell.
fn paired(fixture: &Fixture, gate_side: Uncontended, peer_side: Uncontended) -> Paired {
    let mut paired = Paired::default();
    for round in 0..PAIRED_ROUNDS {
        let (gate, peer) = if round % 2 == 0 {
            let gate = fixture.pass(gate_side);
            (gate, fixture.pass(peer_side))
        } else {
            let peer = fixture.pass(peer_side);
            (fixture.pass(gate_side), peer)
        };
        paired.gate.push(gate);
        paired.peer.push(peer);
        paired.ratios.push(gate / peer);
    }
    paired
}

// ---------------------------------------------------------------------------------------------
// 2. Contended

/// One side of the contended comparison.
#[derive(Debug, Clone, Copy)]
enum Limiter {
    Gate,
    Semaphore,
}

/// What one contended run showed.
#[derive(Debug, Clone, PartialEq)]
struct Contended {
    /// Time by tokio's clock from the spawns to the last call's end.
    elapsed: Duration,
    /// Wall time of the same stretch.
    wall: Duration,
    /// This thread's CPU time over the same stretch: the runtime's whole work, without the
    /// time other processes had the core.
    cpu: Duration,
    /// The longest wait from spawn to a call's start.
    longest_wait: Duration,
    /// The most any call started after its FIFO-ideal instant.
    worst_lateness: Duration,
    /// Pairs of calls that started in the opposite order to their spawns.
    inversions: u64,
}

/// The FIFO ideal start of the `k`-th spawned call (0-based), after the spawns.
fn ideal_start(k: usize) -> Duration {
    CALL_TIME * u32::try_from(k / SLOTS).expect("few rounds")
}

/// The body of every contended call: note when and in which order it started, then take
/// [`CALL_TIME`].
async fn timed_call(order: &AtomicUsize) -> Result<(usize, Instant), ()> {
    let started = (order.fetch_add(1, Ordering::Relaxed), Instant::now());
    sleep(CALL_TIME).await;
    Ok(started)
}

/// Spawns [`TASKS`] calls at once through `limiter` on a fresh runtime and waits for them all.
/// Only the spawning and the waiting are timed; building the runtime is not.
fn contended_run(limiter: Limiter) -> Contended {
    let rt = Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a current-thread runtime");
    let gate = Gate::builder(never_throttled)
        .max_in_flight(SLOTS)
        .build()
        .expect("a valid gate");
    let semaphore = Arc::new(Semaphore::new(SLOTS));
    let order = Arc::new(AtomicUsize::new(0));

    let (wall, cpu) = (std::time::Instant::now(), cpu_clock::now());
    let (spawned_at, finished_at, starts) = rt.block_on(async {
        let spawned_at = Instant::now();
        let tasks: Vec<_> = (0..TASKS)
            .map(|_| {
                let order = Arc::clone(&order);
                match limiter {
                    Limiter::Gate => {
                        let gate = gate.clone();
                        tokio::spawn(async move {
                            gate.call(|| timed_call(&order))
                                .await
                                .expect("no call fails")
                        })
                    }
                    Limiter::Semaphore => {
                        let semaphore = Arc::clone(&semaphore);
                        tokio::spawn(async move {
                            let _permit = semaphore.acquire().await.expect("stays open");
                            timed_call(&order).await.expect("no call fails")
                        })
                    }
                }
            })
            .collect();
        let mut starts = Vec::with_capacity(TASKS);
        for task in tasks {
            starts.push(task.await.expect("no task panics"));
        }
        (spawned_at, Instant::now(), starts)
    });
    let (wall, cpu) = (wall.elapsed(), cpu_clock::now() - cpu);
    drop(rt);

    let waits = starts.iter().map(|&(_, at)| at - spawned_at);
    let lateness = waits
        .clone()
        .enumerate()
        .map(|(k, wait)| wait.saturating_sub(ideal_start(k)));
    let order: Vec<usize> = starts.iter().map(|&(seq, _)| seq).collect();
    Contended {
        elapsed: finished_at - spawned_at,
        wall,
        cpu,
        longest_wait: waits.max().expect("some calls"),
        worst_lateness: lateness.max().expect("some calls"),
        inversions: inversions(order),
    }
}

/// Pairs `i < j` with `seq[i] > seq[j]`, by merge sort.
fn inversions(mut seq: Vec<usize>) -> u64 {
    fn sort(seq: &mut [usize], scratch: &mut Vec<usize>) -> u64 {
        if seq.len() < 2 {
            return 0;
        }
        let mid = seq.len() / 2;
        let mut count = sort(&mut seq[..mid], scratch) + sort(&mut seq[mid..], scratch);
        scratch.clear();
        let (mut i, mut j) = (0, mid);
        while i < mid && j < seq.len() {
            if seq[j] < seq[i] {
                // Every element left in the left half is larger than `seq[j]`.
                count += (mid - i) as u64;
                scratch.push(seq[j]);
                j += 1;
            } else {
                scratch.push(seq[i]);
                i += 1;
            }
        }
        scratch.extend_from_slice(&seq[i..mid]);
        scratch.extend_from_slice(&seq[j..]);
        seq.copy_from_slice(scratch);
        count
    }
    let mut scratch = Vec::with_capacity(seq.len());
    sort(&mut seq, &mut scratch)
}

fn contended(c: &mut Criterion) {
    let mut group = c.benchmark_group("contended");
    // A run takes some 1.6 s of real time, most of it asleep; flat sampling makes criterion's
    // minimum of ten samples ten runs per side.
    group
        .sample_size(10)
        .sampling_mode(criterion::SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5))
        .throughput(criterion::Throughput::Elements(TASKS as u64));
    for (id, limiter) in [
        (GATE_CONTENDED, Limiter::Gate),
        (SEMAPHORE_CONTENDED, Limiter::Semaphore),
    ] {
        let name = id.split_once('/').map_or(id, |(_, name)| name);
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let run = contended_run(limiter);
                    total += run.wall;
                    RUNS.lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .entry(id)
                        .or_default()
                        .push(run);
                }
                total
            });
        });
    }
    group.finish();
}

// ---------------------------------------------------------------------------------------------
// Many scopes

/// The calls waiting in line in the runs of the `scopes` group, and the scopes they belong to.
const LINE_SIZES: [(usize, usize); 4] = [
    (10_000, 1),
    (10_000, 10_000),
    (100_000, 1),
    (100_000, 10_000),
];

/// Which limit holds the calls of the `scopes` group in line.
#[derive(Debug, Clone, Copy)]
enum Held {
    /// The gate's one slot.
    Gate,
    /// Each scope's one slot ([`paceline::ScopeLimits`]), under a gate that never binds.
    Scope,
}

/// `calls` tasks spawned at once, each making one call through a gate in one of `scopes`
/// scopes (the `k`-th in scope `k % scopes`), held by `held`: the gate's one slot, or each
/// scope's one slot. Each call holds its slot across one yield, so that every start but the
/// first (of each scope) is taken from the line. Returns the thread's CPU time from the
/// spawns to the last call's end.
fn scopes_run(calls: usize, scopes: &[paceline::Scope], held: Held) -> Duration {
    let rt = Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a current-thread runtime");
    let gate = Gate::builder(never_throttled);
    let gate = match held {
        Held::Gate => gate.max_in_flight(1),
        Held::Scope => gate
            .max_in_flight(usize::MAX)
            .per_scope(paceline::ScopeLimits::new().max_in_flight(1)),
    };
    let gate = gate.build().expect("a valid gate");
    let cpu = cpu_clock::now();
    rt.block_on(async {
        let tasks: Vec<_> = (0..calls)
            .map(|k| {
                let (gate, scope) = (gate.clone(), scopes[k % scopes.len()].clone());
                tokio::spawn(async move {
                    gate.call_in([scope], || async {
                        tokio::task::yield_now().await;
                        Ok::<_, ()>(())
                    })
                    .await
                    .expect("no call fails")
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("no task panics");
        }
    });
    let cpu = cpu_clock::now() - cpu;
    assert_eq!(gate.stats().successes, calls as u64);
    drop(rt);
    cpu
}

fn scopes(c: &mut Criterion) {
    let mut group = c.benchmark_group("scopes");
    group
        .sample_size(10)
        .sampling_mode(criterion::SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    for held in [Held::Gate, Held::Scope] {
        for (calls, scope_count) in LINE_SIZES {
            let names: Vec<paceline::Scope> = (0..scope_count)
                .map(|n| format!("tenant-{n}").into())
                .collect();
            group.throughput(criterion::Throughput::Elements(calls as u64));
            let name = format!("{calls} waiting, {scope_count} scopes, {held:?}'s slot");
            group.bench_function(name, |b| {
                let run = |_| scopes_run(calls, &names, held);
                b.iter_custom(|iters| (0..iters).map(run).sum());
            });
        }
    }
    group.finish();
}

// ---------------------------------------------------------------------------------------------
// Summary

fn print_quantiles(label: &str, values: &mut [f64], unit: &str) -> f64 {
    let q = quantiles(values);
    println!(
        "     {label:<28} {:>7.2} {unit:<8} [{:>6.2}-{:>6.2}]  over {} passes",
        q.median,
        q.p25,
        q.p75,
        values.len()
    );
    q.median
}

/// One uncontended comparison: the gate's side, its peer's, and the bar on their ratio.
struct Comparison {
    gate: &'static str,
    peer: &'static str,
    bar: f64,
    paired: Option<Paired>,
}

fn print_uncontended(comparisons: Vec<Comparison>) {
    let mut passes = PASSES.lock().unwrap_or_else(PoisonError::into_inner);
    println!();
    println!(
        "1. Uncontended: {CALLS} calls per pass, one after another, current-thread runtime; \
         median ns/call by thread CPU time [p25-p75]"
    );
    println!("   criterion's passes (each side in its own stretch of time):");
    let ids = [
        GATE_CALL,
        SEMAPHORE_CALL,
        FUTURE_ALONE,
        PACED_GATE_CALL,
        GOVERNOR_CALL,
        GOVERNOR_STD_CALL,
        GOVERNOR_SEMAPHORE_CALL,
        BULKHEAD_CALL,
        BULKHEAD_THROTTLE_CALL,
        CLOCK_READ,
    ];
    let medians: BTreeMap<&str, f64> = ids
        .into_iter()
        .filter_map(|id| match passes.get_mut(id) {
            Some(values) => Some((id, print_quantiles(id, values, "ns/call"))),
            None => {
                println!("     {id:<28} not run (filtered out)");
                None
            }
        })
        .collect();
    for Comparison {
        gate,
        peer,
        bar,
        paired,
    } in comparisons
    {
        println!("   {gate} beside {peer}:");
        let criterion_ratio = match (medians.get(gate), medians.get(peer)) {
            (Some(gate), Some(peer)) => {
                let ratio = gate / peer;
                println!("     {:<28} {ratio:>7.2}", "ratio of the medians");
                Some(ratio)
            }
            _ => None,
        };
        let verdict_from = match paired {
            Some(mut paired) => {
                println!(
                    "     paired rounds (a pass of each back to back, {} rounds):",
                    paired.ratios.len()
                );
                print_quantiles(gate, &mut paired.gate, "ns/call");
                print_quantiles(peer, &mut paired.peer, "ns/call");
                let ratio = print_quantiles("ratio", &mut paired.ratios, "");
                Some((ratio, "median of the paired rounds"))
            }
            None => criterion_ratio.map(|ratio| (ratio, "ratio of criterion's medians")),
        };
        match verdict_from {
            Some((ratio, source)) if bar == NO_BAR => {
                println!("     {ratio:.2} ({source}), no bar");
            }
            Some((ratio, source)) => println!(
                "     verdict: {ratio:.2} ({source}), target <= {bar}   {}",
                bars::judge(&format!("{gate} over {peer} <= {bar}"), ratio <= bar)
            ),
            None => println!("     verdict: not run (filtered out)"),
        }
    }
}

fn print_contended() {
    let runs = RUNS.lock().unwrap_or_else(PoisonError::into_inner);
    let ideal_longest = ideal_start(TASKS - 1);
    let ideal_elapsed = ideal_longest + CALL_TIME;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!();
    println!(
        "2. Contended: {TASKS} tasks spawned at once, {SLOTS} slots, each call {} ms of real time",
        ms(CALL_TIME)
    );
    println!(
        "   FIFO ideal: all done at {:.0} ms ({:.0} calls/s), longest wait {:.0} ms",
        ms(ideal_elapsed),
        TASKS as f64 / ideal_elapsed.as_secs_f64(),
        ms(ideal_longest)
    );
    for id in [GATE_CONTENDED, SEMAPHORE_CONTENDED] {
        let Some(runs) = runs.get(id).filter(|runs| !runs.is_empty()) else {
            println!("   {id}: not run (filtered out)");
            continue;
        };
        let per_second = |time: fn(&Contended) -> Duration| {
            let mut rates: Vec<f64> = runs
                .iter()
                .map(|run| TASKS as f64 / time(run).as_secs_f64())
                .collect();
            quantiles(&mut rates)
        };
        let (wall, cpu) = (per_second(|run| run.wall), per_second(|run| run.cpu));
        let mut elapsed: Vec<f64> = runs.iter().map(|run| ms(run.elapsed)).collect();
        let elapsed = quantiles(&mut elapsed);
        // The verdicts take the worst run.
        let longest_wait = runs.iter().map(|run| run.longest_wait).max();
        let longest_wait = longest_wait.expect("some runs");
        let worst_lateness = runs.iter().map(|run| run.worst_lateness).max();
        let worst_lateness = worst_lateness.expect("some runs");
        let inversions = runs.iter().map(|run| run.inversions).max();
        let inversions = inversions.expect("some runs");
        let wait_ok = longest_wait <= ideal_longest * MAX_WAIT_FACTOR;
        // A `--test` run (one run a side, likely unoptimised) judges nothing.
        let judge = |what: String, held: bool| {
            if runs.len() > 1 {
                bars::judge(&what, held)
            } else {
                "-"
            }
        };
        println!("   {id}  ({} runs)", runs.len());
        println!(
            "     all done at:     {:>9.0} ms        [{:.0}-{:.0}] (median, by tokio's clock)",
            elapsed.median, elapsed.p25, elapsed.p75
        );
        println!(
            "     throughput:      {:>9.0} calls/s   [{:.0}-{:.0}] (median, by wall time)",
            wall.median, wall.p25, wall.p75
        );
        println!(
            "                      {:>9.0} calls/s   [{:.0}-{:.0}] (median, by thread CPU time)",
            cpu.median, cpu.p25, cpu.p75
        );
        println!(
            "     longest wait spawn->start: {:.0} ms vs ideal {:.0} ms (x{:.3}); bar <= {MAX_WAIT_FACTOR} x ideal   {}",
            ms(longest_wait),
            ms(ideal_longest),
            longest_wait.as_secs_f64() / ideal_longest.as_secs_f64(),
            judge(
                format!("{id}: longest wait <= {MAX_WAIT_FACTOR} x ideal"),
                wait_ok
            )
        );
        println!(
            "     worst lateness vs a call's own ideal start: {:.0} ms",
            ms(worst_lateness)
        );
        println!(
            "     starts out of spawn order: {} inverted pairs   {}",
            inversions,
            judge(
                format!("{id}: no start out of spawn order"),
                inversions == 0
            )
        );
    }
}

/// Set to `prometheus`, the bench installs a Prometheus recorder before it builds its gates,
/// so that (with the `metrics` feature) every call updates real metric handles.
const RECORDER_VAR: &str = "PACELINE_BENCH_RECORDER";

fn main() {
    let mut c = Criterion::default().configure_from_args();
    match std::env::var(RECORDER_VAR).as_deref() {
        Ok("prometheus") => {
            metrics_exporter_prometheus::PrometheusBuilder::new()
                .install_recorder()
                .expect("the first recorder of this process");
            println!("{RECORDER_VAR}=prometheus: a Prometheus recorder is installed");
        }
        Ok(other) => panic!("{RECORDER_VAR} is `prometheus` or unset, not {other:?}"),
        Err(_) => {}
    }
    let fixture = Fixture::new();
    uncontended(&mut c, &fixture);
    // The paired rounds run right after criterion's uncontended passes, on the same warm
    // fixture. They only follow a measuring run of both sides: not a `--test` run (one pass
    // each), a filtered one, or a `--profile-time` one (the profile is of what was named).
    let profiling = std::env::args().any(|arg| arg.starts_with("--profile-time"));
    let measured = |ids: [&str; 2]| {
        let passes = PASSES.lock().unwrap_or_else(PoisonError::into_inner);
        !profiling
            && ids
                .iter()
                .all(|id| passes.get(id).is_some_and(|passes| passes.len() > 1))
    };
    let comparisons: Vec<Comparison> = [
        (
            GATE_CALL,
            Uncontended::Gate,
            SEMAPHORE_CALL,
            Uncontended::Semaphore,
            MAX_RATIO,
        ),
        (
            PACED_GATE_CALL,
            Uncontended::PacedGate,
            GOVERNOR_CALL,
            Uncontended::Governor,
            NO_BAR,
        ),
        (
            PACED_GATE_CALL,
            Uncontended::PacedGate,
            GOVERNOR_STD_CALL,
            Uncontended::GovernorStdClock,
            MAX_PACED_RATIO,
        ),
        (
            PACED_GATE_CALL,
            Uncontended::PacedGate,
            GOVERNOR_SEMAPHORE_CALL,
            Uncontended::GovernorStdAndSemaphore,
            MAX_COMPOSED_RATIO,
        ),
        (
            GATE_CALL,
            Uncontended::Gate,
            BULKHEAD_CALL,
            Uncontended::Bulkhead,
            MAX_BULKHEAD_RATIO,
        ),
        (
            PACED_GATE_CALL,
            Uncontended::PacedGate,
            BULKHEAD_THROTTLE_CALL,
            Uncontended::BulkheadThrottle,
            MAX_PACED_BULKHEAD_RATIO,
        ),
    ]
    .into_iter()
    .map(|(gate, gate_side, peer, peer_side, bar)| Comparison {
        gate,
        peer,
        bar,
        paired: measured([gate, peer]).then(|| paired(&fixture, gate_side, peer_side)),
    })
    .collect();
    contended(&mut c);
    scopes(&mut c);
    c.final_summary();
    print_uncontended(comparisons);
    print_contended();
    bars::exit();
}
