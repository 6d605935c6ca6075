//! Per-item cost of paceline's combinators beside the peer each one replaces.
//!
//! ```sh
//! cargo bench -p paceline-bench --bench peers
//! ```
//!
//! Every measurement drains the same always-ready upstream, `futures::stream::iter(0..N)`, to
//! its end through the same consumer loop, inside a current-thread tokio runtime on tokio's
//! real clock, built as in a user's release build (tokio without `test-util`). The timeouts
//! and windows ([`WITHIN`], one second) are far longer than a pass, which takes milliseconds,
//! so the comparison stays about CPU work: no timer ever fires, and what is measured is the
//! bookkeeping each combinator does on the fast path, which is what a caller pays on every
//! item when the limit is not the bottleneck.
//!
//! Criterion reports each benchmark as usual, and every timed pass also records its own
//! ns/item. After the criterion groups the bench prints one row per pair: both sides' median
//! ns/item, their ratio (paceline / peer), the target and whether it is met.
//!
//! Differences of a few tenths of a nanosecond per item are at stake, so three things keep
//! a busy machine and the accidents of memory layout from deciding the verdicts:
//! - a pass is timed by the CPU time of the thread that runs it (see `cpu_clock`), so time
//!   spent descheduled is not counted; criterion's "time" lines are that CPU time too;
//! - passes cycle through a range of stack depths (see [`at_stack_depth`]), so both sides of a
//!   pair are measured over the same memory layouts;
//! - the verdict is taken on a last, interleaved phase that runs the two sides of a pair
//!   alternately, pass for pass, so that both see the same load. The criterion medians are
//!   printed beside it: the two sides' criterion runs are seconds apart, and on a shared
//!   machine their ratio drifts by 20 % or more from run to run.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::pin::pin;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use criterion::{Criterion, Throughput};
use futures::{Stream, StreamExt as _, stream};
use governor::{Quota, RateLimiter, prelude::StreamRateLimitExt as _};
use paceline::prelude::*;
use tokio::runtime::{Builder, Runtime};

/// Items per timed pass: large enough that building the stream and entering the runtime
/// (a few microseconds) vanish against the per-item cost.
const N: u64 = 1_000_000;

/// The batch combinators' timeout: far longer than a pass, so it never elapses and batches
/// are closed by size alone on both sides.
const WITHIN: Duration = Duration::from_secs(1);

/// The throttles' allowance, twice the item count: neither side ever runs out, so both stay
/// on their fast path.
const ALLOWANCE: u64 = 2 * N;

/// Rounds of the interleaved phase (each runs both sides of a pair once).
const ROUNDS: usize = 3 * DEPTHS;

/// One side of a pair: a name for criterion (`group/bench`) and one timed pass at a given
/// stack depth.
struct Side {
    group: &'static str,
    bench: &'static str,
    pass: fn(&Runtime, usize) -> Duration,
}

impl Side {
    fn id(&self) -> String {
        format!("{}/{}", self.group, self.bench)
    }
}

/// A pair and its bar: paceline's median ns/item over the peer's must be at most `max_ratio`.
struct Pair {
    row: &'static str,
    paceline: Side,
    peer: Side,
    max_ratio: f64,
}

const PAIRS: &[Pair] = &[
    Pair {
        row: "grouped_within(16, 1s) vs chunks_timeout",
        paceline: Side {
            group: "grouped_within",
            bench: "paceline/16",
            pass: grouped_within::<16>,
        },
        peer: Side {
            group: "grouped_within",
            bench: "tokio-stream chunks_timeout/16",
            pass: chunks_timeout::<16>,
        },
        max_ratio: 0.8,
    },
    Pair {
        row: "grouped_within(128, 1s) vs chunks_timeout",
        paceline: Side {
            group: "grouped_within",
            bench: "paceline/128",
            pass: grouped_within::<128>,
        },
        peer: Side {
            group: "grouped_within",
            bench: "tokio-stream chunks_timeout/128",
            pass: chunks_timeout::<128>,
        },
        max_ratio: 0.8,
    },
    Pair {
        row: "interval_gate(0, 16) vs ready_chunks(16)",
        paceline: Side {
            group: "interval_gate_zero",
            bench: "paceline/16",
            pass: interval_gate_zero::<16>,
        },
        peer: Side {
            group: "interval_gate_zero",
            bench: "futures ready_chunks/16",
            pass: ready_chunks::<16>,
        },
        max_ratio: 1.1,
    },
    Pair {
        row: "interval_gate(0, 128) vs ready_chunks(128)",
        paceline: Side {
            group: "interval_gate_zero",
            bench: "paceline/128",
            pass: interval_gate_zero::<128>,
        },
        peer: Side {
            group: "interval_gate_zero",
            bench: "futures ready_chunks/128",
            pass: ready_chunks::<128>,
        },
        max_ratio: 1.1,
    },
    Pair {
        row: "timer_throttle(2N, 1s) vs governor stream",
        paceline: Side {
            group: "timer_throttle_unexhausted",
            bench: "paceline",
            pass: timer_throttle,
        },
        peer: Side {
            group: "timer_throttle_unexhausted",
            bench: "governor ratelimit_stream",
            pass: governor,
        },
        max_ratio: 0.25,
    },
];

/// The upstream and the consumer loop alone: the floor under both sides of every pair.
const BASELINE: Side = Side {
    group: "baseline",
    bench: "upstream alone",
    pass: upstream_alone,
};

fn grouped_within<const B: usize>(rt: &Runtime, depth: usize) -> Duration {
    timed_pass(rt, depth, || upstream().grouped_within(B, WITHIN))
}

fn chunks_timeout<const B: usize>(rt: &Runtime, depth: usize) -> Duration {
    timed_pass(rt, depth, || {
        tokio_stream::StreamExt::chunks_timeout(upstream(), B, WITHIN)
    })
}

fn interval_gate_zero<const B: usize>(rt: &Runtime, depth: usize) -> Duration {
    timed_pass(rt, depth, || upstream().interval_gate(Duration::ZERO, B))
}

fn ready_chunks<const B: usize>(rt: &Runtime, depth: usize) -> Duration {
    timed_pass(rt, depth, || upstream().ready_chunks(B))
}

fn timer_throttle(rt: &Runtime, depth: usize) -> Duration {
    let n = usize::try_from(ALLOWANCE).expect("fits usize");
    timed_pass(rt, depth, || {
        upstream().timer_throttle(n, Duration::from_secs(1))
    })
}

fn governor(rt: &Runtime, depth: usize) -> Duration {
    let burst = NonZeroU32::new(u32::try_from(ALLOWANCE).expect("fits u32")).expect("non-zero");
    // A fresh limiter per pass, made outside the timed region: its state is what a pass uses
    // up, and making it is not per-item work.
    let limiter = RateLimiter::direct(Quota::per_second(burst));
    timed_pass(rt, depth, || upstream().ratelimit_stream(&limiter))
}

fn upstream_alone(rt: &Runtime, depth: usize) -> Duration {
    timed_pass(rt, depth, upstream)
}

fn runtime() -> Runtime {
    Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a current-thread runtime")
}

/// The upstream of every measurement: always ready, so no combinator ever waits on it.
fn upstream() -> stream::Iter<std::ops::Range<u64>> {
    stream::iter(0..N)
}

/// The one consumer loop both sides of every pair go through. `black_box` keeps the optimiser
/// from dropping the items (or batches) unread.
async fn drain<S: Stream>(stream: S) {
    let mut stream = pin!(stream);
    while let Some(out) = stream.next().await {
        black_box(out);
    }
}

/// Times one pass of `drain(make())` on `rt`, run `depth` stack frames deeper than the
/// shallowest pass (see [`at_stack_depth`]). The stream is built inside the timed region on
/// both sides, which is fair and costs nothing measurable against `N` items.
fn timed_pass<S: Stream>(rt: &Runtime, depth: usize, make: impl FnOnce() -> S) -> Duration {
    let mut make = Some(make);
    at_stack_depth(depth, &mut || {
        let make = make.take().expect("one pass per call");
        let start = cpu_clock::now();
        rt.block_on(async { drain(make()).await });
        cpu_clock::now() - start
    })
}

/// What a bar that fails does (see the file).
#[path = "support/bars.rs"]
mod bars;
/// The clock passes are timed with: thread CPU time (see the file).
#[path = "support/cpu_clock.rs"]
mod cpu_clock;

/// How many stack depths the passes of one benchmark cycle through; with frames of about
/// 100 bytes this moves the stream across more than a whole 4 KiB page.
const DEPTHS: usize = 64;

/// Runs `f` `depth` frames further down the stack.
///
/// The stream under test lives in the `block_on` future on the stack, its batch buffer on the
/// heap, at an address the allocator hands back pass after pass. Sweeping the stack depth
/// showed that a few positions in every few dozen (different ones for each stream) make the
/// same code up to twice as slow, for paceline and the peers alike; most likely the stream's
/// state and the buffer then collide in the low 12 address bits and the CPU stalls loads
/// behind unrelated stores ("4K aliasing"; the VM this was written on has no hardware
/// counters to confirm it). Left alone, a whole run sits at one position, and a verdict
/// would hang on that accident of layout. Cycling every benchmark through the same depths
/// measures both sides of a pair over the same layouts; the median reports the typical one.
#[inline(never)]
fn at_stack_depth(depth: usize, f: &mut dyn FnMut() -> Duration) -> Duration {
    // A frame that cannot be optimised away, so each level really moves the stack.
    let frame = black_box([0u8; 64]);
    let elapsed = if depth == 0 {
        f()
    } else {
        at_stack_depth(depth - 1, f)
    };
    black_box(&frame);
    elapsed
}

/// ns/item of every timed pass, by phase and benchmark id. Criterion keeps its own statistics
/// per sample (a sample being many passes); the table wants per-pass medians of both sides.
static PASSES: Mutex<BTreeMap<(Phase, String), Vec<f64>>> = Mutex::new(BTreeMap::new());

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    Criterion,
    Interleaved,
}

fn record(phase: Phase, id: String, pass: Duration) {
    let ns_per_item = pass.as_nanos() as f64 / N as f64;
    PASSES
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .entry((phase, id))
        .or_default()
        .push(ns_per_item);
}

fn passes(phase: Phase, side: &Side) -> Option<Vec<f64>> {
    PASSES
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&(phase, side.id()))
        .cloned()
}

/// Registers `side` with criterion; every iteration is one pass, recorded as well as handed
/// to criterion. The passes cycle through `0..DEPTHS`.
fn bench(c: &mut Criterion, rt: &Runtime, side: &Side) {
    let mut group = c.benchmark_group(side.group);
    // One pass takes a few milliseconds; these settings give several hundred passes per
    // side, enough for stable medians on a busy machine.
    group
        .sample_size(60)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(6))
        .throughput(Throughput::Elements(N));
    let mut count = 0_usize;
    group.bench_function(side.bench, |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let elapsed = (side.pass)(rt, count % DEPTHS);
                count += 1;
                record(Phase::Criterion, side.id(), elapsed);
                total += elapsed;
            }
            total
        });
    });
    group.finish();
}

/// Runs the two sides of each pair that criterion ran, alternately: A B, B A, A B, … so that
/// neither always goes first, each round at the next stack depth.
fn interleave(rt: &Runtime, rounds: usize) {
    for pair in PAIRS {
        if passes(Phase::Criterion, &pair.paceline).is_none()
            || passes(Phase::Criterion, &pair.peer).is_none()
        {
            continue;
        }
        for round in 0..rounds {
            let depth = round % DEPTHS;
            let mut sides = [&pair.paceline, &pair.peer];
            if round % 2 == 1 {
                sides.reverse();
            }
            for side in sides {
                record(Phase::Interleaved, side.id(), (side.pass)(rt, depth));
            }
        }
    }
}

fn quartiles(passes: &[f64]) -> [f64; 3] {
    let mut sorted = passes.to_vec();
    sorted.sort_by(f64::total_cmp);
    let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
    [at(0.25), at(0.5), at(0.75)]
}

/// `median [p25-p75]`.
fn cell(passes: &[f64]) -> String {
    let [lo, med, hi] = quartiles(passes);
    format!("{med:>6.2} [{lo:>5.2}-{hi:>5.2}]")
}

/// Prints the table; without `verdicts` (test mode) the result column stays empty.
fn print_table(verdicts: bool) {
    println!();
    println!(
        "paceline vs peers, real clock: median ns/item over {N} items a pass, by thread CPU time \
         ([p25-p75])"
    );
    if let Some(floor) = passes(Phase::Criterion, &BASELINE) {
        println!(
            "floor (upstream + consumer loop, no combinator): {}",
            cell(&floor)
        );
    }
    println!(
        "{:<43} {:>6} {:>21} {:>21} {:>6} {:>7} {:>6}",
        "pair", "phase", "paceline ns/item", "peer ns/item", "ratio", "target", "result"
    );
    for pair in PAIRS {
        let run = |phase| Some((passes(phase, &pair.paceline)?, passes(phase, &pair.peer)?));
        let Some(criterion) = run(Phase::Criterion) else {
            println!("{:<43} (not run: filtered out)", pair.row);
            continue;
        };
        let ratio =
            |(ours, theirs): &(Vec<f64>, Vec<f64>)| quartiles(ours)[1] / quartiles(theirs)[1];
        println!(
            "{:<43} {:>6} {:>21} {:>21} {:>6.3}",
            pair.row,
            "crit.",
            cell(&criterion.0),
            cell(&criterion.1),
            ratio(&criterion),
        );
        if let Some(interleaved) = run(Phase::Interleaved) {
            let r = ratio(&interleaved);
            println!(
                "{:<43} {:>6} {:>21} {:>21} {:>6.3} {:>7} {:>6}",
                "",
                "inter.",
                cell(&interleaved.0),
                cell(&interleaved.1),
                r,
                format!("<={}", pair.max_ratio),
                if verdicts {
                    bars::judge(
                        &format!("peers: {} <= {}", pair.row, pair.max_ratio),
                        r <= pair.max_ratio,
                    )
                } else {
                    "-"
                },
            );
        }
    }
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let rt = runtime();
    for pair in PAIRS {
        bench(&mut c, &rt, &pair.paceline);
        bench(&mut c, &rt, &pair.peer);
    }
    bench(&mut c, &rt, &BASELINE);
    c.final_summary();

    // The same reading of the arguments as criterion's: without `--bench` (`cargo test
    // --benches`) or with `--test` it runs each benchmark once, and so does the interleaved
    // phase; `--list` only lists.
    let args: Vec<String> = std::env::args().collect();
    let has = |flag: &str| args.iter().any(|arg| arg == flag);
    if has("--list") {
        return;
    }
    let test_mode = !has("--bench") || has("--test");
    interleave(&rt, if test_mode { 2 } else { ROUNDS });
    if test_mode {
        println!("\ntest mode: one pass per benchmark, likely unoptimised; no verdicts");
    }
    print_table(!test_mode);
    bars::exit();
}
