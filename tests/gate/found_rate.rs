//! A gate told nothing, against simulated servers whose 429s say nothing (no Retry-After, no
//! quota): the rate it finds (`GateBuilder::find_rate`, on by default) against one that only
//! backs off, on identical servers, in paused time.

use std::time::Duration;

use paceline::Gate;
use paceline_sim::{Policy, Rejected, Server};
use proptest::prelude::*;

use crate::support::pages::{SCENARIOS_MD, shown};
use crate::support::paused_runtime;
use crate::support::scenarios::{GATE_SEED, MS, SEC, calls_through, classify};

/// One run: how long, how many the server refused, the rate the gate paced at in the end.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Run {
    elapsed: Duration,
    refused: usize,
    rate: Option<f64>,
}

/// `calls` calls from `tasks` tasks through a gate told nothing (finding its rate or not)
/// against a server limited by `policy`, `latency` each way; every call must be done.
async fn run(policy: Policy, (tasks, calls): (usize, usize), latency: Duration, find: bool) -> Run {
    // Under a subscriber of this thread's own, which keeps nothing below an error: the
    // gate's warnings here, thousands a run, then meet no callsite that another test's
    // recording is reading (a callsite met first on a thread with no subscriber at all is
    // cached as wanted by none, and `tests/gate/gate.rs` reads its warnings).
    let _quiet = crate::support::events::record_up_to(tracing::Level::ERROR);
    let server = Server::builder()
        .latency(latency)
        .global(policy)
        .seed(0)
        .build();
    let gate: Gate<Rejected> = Gate::builder(classify)
        .max_in_flight(tasks)
        .max_retries(10_000)
        .find_rate(find)
        .seed(GATE_SEED)
        .build()
        .unwrap();
    let (elapsed, done, _) = calls_through(&gate, &server, tasks, calls).await;
    assert_eq!(done, calls, "every call done");
    let log = server.log();
    assert_eq!(
        log.accepted(),
        calls,
        "each accepted once, by the server's log"
    );
    Run {
        elapsed,
        refused: log.rejected(),
        rate: gate.stats().rate,
    }
}

/// A token bucket of 10 a second with a burst of 10, 200 calls from 16 tasks, 5 ms each way,
/// in paused time. The least time it allows is 19 s (the burst's 10 at once, then 10 a
/// second).
#[tokio::test(start_paused = true)]
async fn told_nothing_the_gate_finds_a_token_bucket_s_pace() {
    let bucket = || Policy::token_bucket(10.0, 10).retry_after(false);
    let found = run(bucket(), (16, 200), 5 * MS, true).await;
    let backing_off = run(bucket(), (16, 200), 5 * MS, false).await;
    println!("finding the rate: {found:?}\nbacking off only: {backing_off:?}");
    // Exactly, in paused time (the seeds are fixed).
    assert_eq!(
        (found.elapsed.as_millis(), found.refused),
        (19_346, 27),
        "{found:?}"
    );
    assert_eq!(
        (backing_off.elapsed.as_millis(), backing_off.refused),
        (102_144, 51),
        "{backing_off:?}"
    );
    let rate = found.rate.expect("a rate found");
    assert!((9.0..=10.5).contains(&rate), "{rate}");
    assert_eq!(backing_off.rate, None);
}

/// A fixed window of 20 per 2 s, otherwise as above: the gate finds a rate there too, under
/// the limit's (a backoff leaves a window's calls unspent, so what the gate measures is under
/// the limit, and it probes above only after a quiet while), with half the refusals of a
/// gate that backs off only, and slower than it: that one sends its whole line when a
/// window resets, which a fixed window takes at once.
#[tokio::test(start_paused = true)]
async fn told_nothing_the_gate_finds_a_fixed_window_s_pace() {
    let window = || Policy::fixed_window(20, 2 * SEC).retry_after(false);
    let found = run(window(), (16, 200), 5 * MS, true).await;
    let backing_off = run(window(), (16, 200), 5 * MS, false).await;
    println!("finding the rate: {found:?}\nbacking off only: {backing_off:?}");
    assert_eq!(
        (found.elapsed.as_millis(), found.refused),
        (36_123, 28),
        "{found:?}"
    );
    assert_eq!(
        (backing_off.elapsed.as_millis(), backing_off.refused),
        (29_241, 59),
        "{backing_off:?}"
    );
}

/// The least time a token bucket of `rate` a second and `burst` allows for `calls`: the burst
/// at once, then the bucket's pace.
fn least(rate: u32, burst: u32, calls: usize) -> Duration {
    Duration::from_secs_f64((calls - burst as usize) as f64 / f64::from(rate))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Any token bucket whose 429s say nothing: every call done once, fewer refused than by
    /// a gate that only backs off (which takes many times longer), and within 1.6 times the
    /// least time the bucket allows if it holds more than a round trip's calls, 4 times if
    /// not. (Tried over 200 cases: 1.09 times the least time on average, 1.49 at worst with
    /// a burst above a round trip's calls, 2.37 with one under it; 5,439 refused against
    /// 43,316. With a burst under a round trip's worth, a call sent right after a backoff
    /// meets the token that a call sent before the rate was found took, and the rate is cut
    /// for it.)
    #[test]
    fn any_token_bucket_s_pace_is_found(
        rate in 2u32..40,
        burst in 1u32..20,
        tasks in 4usize..32,
        latency_ms in 1u64..40,
    ) {
        let calls = rate as usize * 20;
        let bucket = || Policy::token_bucket(f64::from(rate), burst).retry_after(false);
        let latency = Duration::from_millis(latency_ms);
        let (found, backing_off) = paused_runtime().block_on(async {
            let found = run(bucket(), (tasks, calls), latency, true).await;
            (found, run(bucket(), (tasks, calls), latency, false).await)
        });
        let least = least(rate, burst, calls);
        let round_trip_calls = f64::from(rate) * 2.0 * latency.as_secs_f64();
        let slack = if f64::from(burst) > round_trip_calls { 1.6 } else { 4.0 };
        prop_assert!(
            found.elapsed.as_secs_f64() <= least.as_secs_f64() * slack,
            "{found:?}, least {least:?}; backing off only: {backing_off:?}"
        );
        prop_assert!(found.refused < backing_off.refused, "{found:?} {backing_off:?}");
    }
}

/// A sweep of 144 token buckets (rates of 3 to 35 a second, bursts of 1 to 19, 4 to 30 tasks,
/// 2 to 38 ms each way), 20 s of calls each: how much longer than the least time the gate
/// takes, told nothing, and how many refusals, beside a gate that only backs off. Exact, in
/// paused time; docs/scenarios.md gives the figures.
#[tokio::test(start_paused = true)]
async fn a_sweep_of_token_buckets() {
    let mut ratios = Vec::new();
    let (mut refused, mut refused_backing_off) = (0, 0);
    for rate in [3u32, 8, 20, 35] {
        for burst in [1u32, 3, 10, 19] {
            for tasks in [4usize, 16, 30] {
                for latency_ms in [2u64, 20, 38] {
                    let calls = rate as usize * 20;
                    let bucket = || Policy::token_bucket(f64::from(rate), burst).retry_after(false);
                    let latency = Duration::from_millis(latency_ms);
                    let found = run(bucket(), (tasks, calls), latency, true).await;
                    let backing_off = run(bucket(), (tasks, calls), latency, false).await;
                    let ratio =
                        found.elapsed.as_secs_f64() / least(rate, burst, calls).as_secs_f64();
                    ratios.push(ratio);
                    refused += found.refused;
                    refused_backing_off += backing_off.refused;
                }
            }
        }
    }
    ratios.sort_by(f64::total_cmp);
    let at = |q: f64| ratios[((ratios.len() - 1) as f64 * q).round() as usize];
    let figures = format!(
        "median {:.2}, 90th percentile {:.2}, worst {:.2} times the least time; {refused} \
         refused, against {refused_backing_off} backing off only",
        at(0.5),
        at(0.9),
        at(1.0)
    );
    println!("{figures}");
    assert!(at(0.5) <= 1.1 && at(0.9) <= 1.5, "{figures}");
    shown(SCENARIOS_MD, &figures);
}
