//! A server whose 429s say nothing: nginx's `limit_req` at 10 requests a second with a burst
//! of 10, `nodelay`, and no Retry-After (nginx's own default), no quota header. 200 calls
//! from 16 tasks through the reqwest middleware with README's gate, told nothing; beside it,
//! on a second nginx at the same time, the same gate with `find_rate(false)`, which only
//! backs off. nginx's access log, not the gate's counters, says what the server saw. About
//! 80 s of real time (the gate that only backs off takes that long; the other some 21 s).

use std::time::Duration;

use paceline::Gate;
use paceline::reqwest::Failure;

use crate::flask_limiter::gets_through;
use crate::support::nginx::{Limit, Logged, Nginx, alone};

/// nginx's limit: 10 a second, a burst of 10, no Retry-After.
const LIMIT: Limit = Limit {
    rate: 10,
    burst: 10,
    retry_after: 0,
};
const TASKS: usize = 16;
const CALLS: usize = 200;

/// What nginx saw of one run.
#[derive(Debug)]
struct Seen {
    /// From the first request nginx logged to the last.
    logged: Duration,
    requests: usize,
    refused: usize,
    /// The rate the gate paced at in the end, if it found one.
    rate: Option<f64>,
}

/// `CALLS` calls through `gate` against a fresh nginx: what its log says, once it has
/// checked that each call was accepted once.
async fn through(gate: Gate<Failure>) -> Seen {
    let mut nginx = Nginx::start(LIMIT);
    gets_through((&gate, true), nginx.url(), (TASKS, CALLS)).await;
    nginx.stop();
    let log = nginx.access_log();
    let accepted = log.iter().filter(|r| r.status == 200).count();
    assert_eq!(accepted, CALLS, "every call accepted once, by nginx's log");
    let refused = log.iter().filter(|r| r.status == 429).count();
    assert_eq!(accepted + refused, log.len(), "nginx answered 200 or 429");
    let at = |pick: fn(Duration, Duration) -> Duration| {
        log.iter().map(|r: &Logged| r.at).reduce(pick).unwrap()
    };
    Seen {
        logged: at(Duration::max) - at(Duration::min),
        requests: log.len(),
        refused,
        rate: gate.stats().rate,
    }
}

fn gate(find_rate: bool) -> Gate<Failure> {
    paceline::reqwest::gate()
        .max_in_flight(TASKS)
        .max_retries(1_000)
        .find_rate(find_rate)
        .build()
        .unwrap()
}

#[test]
fn told_nothing_by_bare_429s_the_gate_finds_the_pace() {
    let (found, backing_off) =
        alone(async { tokio::join!(through(gate(true)), through(gate(false))) });
    let ideal = Duration::from_secs((CALLS / LIMIT.rate as usize) as u64);
    println!(
        "nginx {} r/s burst {}, no Retry-After, {CALLS} calls from {TASKS} tasks (ideal \
         {ideal:?}):\n  finding the rate: {found:?}\n  backing off only: {backing_off:?}",
        LIMIT.rate, LIMIT.burst
    );
    // docs/scenarios.md's rows.
    for (who, seen) in [("finds the rate", &found), ("backs off only", &backing_off)] {
        let (logged, requests, refused) = (seen.logged.as_secs_f64(), seen.requests, seen.refused);
        println!("| {who} | {logged:.1} s | {requests} | {refused} |");
    }
    assert!(
        found.logged <= ideal * 13 / 10,
        "{:?}, over 1.3 times the ideal {ideal:?}",
        found.logged
    );
    assert!(
        found.refused < backing_off.refused,
        "found: {} refused; backing off only: {}",
        found.refused,
        backing_off.refused
    );
    let rate = found.rate.expect("the gate found a rate");
    assert!(
        (5.0..=15.0).contains(&rate),
        "paces at {rate:.2}/s, the limit is 10/s"
    );
}
