//! How close to the allowed rate `interval_gate` gets on a real clock, and what precise mode
//! costs in CPU time.
//!
//! ```sh
//! cargo run --release --example spacing
//! ```
//!
//! tokio's timer fires on millisecond ticks and rounds every deadline up, so a gap meant to be
//! 10 ms comes out somewhere above 10 ms, and a sender paced that way loses part of the rate
//! the server allows. This example drives 300 emissions from an always-ready upstream through
//!
//! - `interval_gate(10 ms, 1)` in its default mode,
//! - the same gate with `.precise()`,
//! - tokio-stream's `throttle(10 ms)`, the usual peer,
//!
//! on tokio's real clock (not paused: the point is what the OS and the runtime really do), and
//! prints the gaps between consecutive emissions, the efficiency (10 ms / mean gap: the share
//! of the allowed rate actually used) and the CPU time each run took.
//!
//! It exits non-zero if a paceline gap is provably below 10 ms (see [`Run::min_upper`]), if
//! the default mode's efficiency is more than 0.05 away from tokio-stream's, or if precise
//! mode's is below 0.97.

use std::future::poll_fn;
use std::pin::pin;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use futures::{Stream, stream};
use paceline::prelude::*;

const INTERVAL: Duration = Duration::from_millis(10);
const EMISSIONS: usize = 300;

/// One emission as the consumer saw it: the poll of the stream that returned the item
/// started at `polled` and returned at `ready`. The stream read its own clock for the
/// emission somewhere in between.
#[derive(Clone, Copy)]
struct Emission {
    polled: Instant,
    ready: Instant,
}

/// One measured run.
struct Run {
    name: &'static str,
    emissions: Vec<Emission>,
    wall: Duration,
    /// CPU time (user + system) of the whole process during the run, where the OS tells.
    cpu: Option<Duration>,
}

impl Run {
    /// Gaps between consecutive emissions, each stamped when its poll returned: the
    /// emission instant as the crate defines it.
    fn gaps(&self) -> impl Iterator<Item = Duration> + '_ {
        self.emissions.windows(2).map(|w| w[1].ready - w[0].ready)
    }

    fn min(&self) -> Duration {
        self.gaps().min().expect("at least one gap")
    }

    fn max(&self) -> Duration {
        self.gaps().max().expect("at least one gap")
    }

    fn mean(&self) -> Duration {
        self.gaps().sum::<Duration>() / (self.emissions.len() - 1) as u32
    }

    /// The share of the allowed rate the run achieved.
    fn efficiency(&self) -> f64 {
        INTERVAL.as_secs_f64() / self.mean().as_secs_f64()
    }

    /// The smallest gap the stream's own clock readings can have had.
    ///
    /// A stream reads its clock inside the poll that emits, then returns; the consumer can
    /// only stamp before or after that poll. Stamps taken after it shift each emission late by
    /// a different few hundred nanoseconds (more if the thread is interrupted there), so two
    /// stamps can come out a microsecond or so closer than the stream's own readings were:
    /// precise mode, which emits right at its deadline, shows exactly that. What the stamps
    /// do prove is an upper bound: the stream read its clock for emission `k` no later than
    /// that poll returned, and for emission `k - 1` no earlier than that poll started. Only
    /// if this bound falls below the interval was an emission certainly early.
    fn min_upper(&self) -> Duration {
        self.emissions
            .windows(2)
            .map(|w| w[1].ready - w[0].polled)
            .min()
            .expect("at least one gap")
    }

    /// The longest poll that emitted: how far apart the two ends of an emission's bracket
    /// can be.
    fn max_emitting_poll(&self) -> Duration {
        self.emissions
            .iter()
            .map(|e| e.ready - e.polled)
            .max()
            .expect("at least one emission")
    }
}

/// CPU time (user + system) this process has used so far, from `CLOCK_PROCESS_CPUTIME_ID`,
/// which counts in nanoseconds rather than `/proc`'s 10 ms ticks.
#[cfg(unix)]
fn process_cpu_time() -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, exclusively borrowed `timespec` for the call to fill in.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    (rc == 0).then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

#[cfg(not(unix))]
fn process_cpu_time() -> Option<Duration> {
    None
}

/// Drives the stream `make` builds to its end on a fresh current-thread runtime with a real
/// clock, bracketing every emission between the start and the return of the poll that made
/// it.
fn run<S: Stream>(name: &'static str, make: impl FnOnce() -> S) -> Run {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a current-thread runtime");
    let cpu_before = process_cpu_time();
    let start = Instant::now();
    let emissions = rt.block_on(async {
        let mut paced = pin!(make());
        let mut emissions = Vec::with_capacity(EMISSIONS);
        loop {
            let mut polled = start;
            let next = poll_fn(|cx| {
                polled = Instant::now();
                paced.as_mut().poll_next(cx)
            })
            .await;
            let ready = Instant::now();
            if next.is_none() {
                break emissions;
            }
            emissions.push(Emission { polled, ready });
        }
    });
    let wall = start.elapsed();
    let cpu = process_cpu_time()
        .zip(cpu_before)
        .map(|(after, before)| after.saturating_sub(before));
    assert_eq!(emissions.len(), EMISSIONS, "{name}: every item comes out");
    Run {
        name,
        emissions,
        wall,
        cpu,
    }
}

/// An always-ready upstream: every wait is the pacer's own.
fn upstream() -> impl Stream<Item = usize> {
    stream::iter(0..EMISSIONS)
}

fn ms(d: Duration) -> String {
    format!("{:.4}", d.as_secs_f64() * 1e3)
}

fn main() -> ExitCode {
    let default = run("interval_gate(10ms, 1)", || {
        upstream().interval_gate(INTERVAL, 1)
    });
    let precise = run("interval_gate(10ms, 1).precise()", || {
        upstream().interval_gate(INTERVAL, 1).precise()
    });
    let peer = run("tokio-stream throttle(10ms)", || {
        tokio_stream::StreamExt::throttle(upstream(), INTERVAL)
    });

    println!(
        "{EMISSIONS} emissions from an always-ready upstream, target gap {} ms, real clock",
        INTERVAL.as_millis()
    );
    println!(
        "{:<33} {:>8} {:>8} {:>8} {:>10} {:>7} {:>7} {:>6} {:>9} {:>8}",
        "run",
        "min ms",
        "mean ms",
        "max ms",
        "efficiency",
        "wall s",
        "CPU ms",
        "CPU %",
        "bound ms",
        "poll µs"
    );
    for r in [&default, &precise, &peer] {
        let (cpu_ms, cpu_pct) = match r.cpu {
            Some(cpu) => (
                format!("{:.1}", cpu.as_secs_f64() * 1e3),
                format!("{:.1}", 100.0 * cpu.as_secs_f64() / r.wall.as_secs_f64()),
            ),
            None => ("n/a".into(), "n/a".into()),
        };
        println!(
            "{:<33} {:>8} {:>8} {:>8} {:>10.4} {:>7.3} {:>7} {:>6} {:>9} {:>8.1}",
            r.name,
            ms(r.min()),
            ms(r.mean()),
            ms(r.max()),
            r.efficiency(),
            r.wall.as_secs_f64(),
            cpu_ms,
            cpu_pct,
            ms(r.min_upper()),
            r.max_emitting_poll().as_secs_f64() * 1e6,
        );
    }
    println!(
        "gaps are stamped when the emitting poll returned; \"bound\" is the least gap the \
         stream's own clock can have seen (next return - previous poll start); \"poll\" the \
         longest emitting poll"
    );

    let checks = [
        (
            format!(
                "default never early: gap bound {} ms >= 10 ms (stamped min {} ms)",
                ms(default.min_upper()),
                ms(default.min())
            ),
            default.min_upper() >= INTERVAL,
        ),
        (
            format!(
                "precise never early: gap bound {} ms >= 10 ms (stamped min {} ms)",
                ms(precise.min_upper()),
                ms(precise.min())
            ),
            precise.min_upper() >= INTERVAL,
        ),
        (
            format!(
                "default efficiency {:.4} within 0.05 of tokio-stream's {:.4}",
                default.efficiency(),
                peer.efficiency()
            ),
            (default.efficiency() - peer.efficiency()).abs() <= 0.05,
        ),
        (
            format!("precise efficiency {:.4} >= 0.97", precise.efficiency()),
            precise.efficiency() >= 0.97,
        ),
    ];
    println!();
    let mut all_pass = true;
    for (what, pass) in &checks {
        println!("{}  {what}", if *pass { "PASS" } else { "FAIL" });
        all_pass &= pass;
    }
    if all_pass {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
