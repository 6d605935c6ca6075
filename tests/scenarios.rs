//! The gate against the simulated API: S1, S1b and S2 of the gate's issue, each beside its
//! baseline on an identical server, in paused time.
#![cfg(feature = "sim")]

#[path = "support/scenarios.rs"]
mod scenarios;

use std::time::Duration;

use scenarios::*;

#[tokio::test(start_paused = true)]
async fn s1_finds_an_unknown_token_bucket_limit() {
    let [gate, alone] = s1().await;
    print(
        "S1: token bucket 4/s burst 4, no Retry-After, 1000 calls, 50 tasks",
        250 * SEC,
        &[gate.clone(), alone],
    );
    assert_eq!(gate.done, 1000);
    assert!(
        gate.elapsed <= Duration::from_secs(275),
        "took {:?}",
        gate.elapsed
    );
    assert!(
        gate.throttled <= 50,
        "{} throttled responses",
        gate.throttled
    );
}

#[tokio::test(start_paused = true)]
async fn s1b_follows_the_limit_down_and_back_up() {
    let [gate, alone] = s1b().await;
    let ideal = s1b_ideal(1000);
    print(
        "S1b: as S1, limit 2/s from 100 s to 200 s",
        ideal,
        &[gate.clone(), alone],
    );
    assert_eq!(gate.done, 1000);
    assert!(
        gate.elapsed.as_secs_f64() <= 1.10 * ideal.as_secs_f64(),
        "took {:?}",
        gate.elapsed
    );
    assert!(
        gate.throttled <= 50,
        "{} throttled responses",
        gate.throttled
    );
}

#[tokio::test(start_paused = true)]
async fn s2_learns_from_the_first_penalty() {
    let [gate, alone] = s2().await;
    print(
        "S2: 20/s, escalating penalty 15 s .. 15 min, 3000 calls, 60 tasks",
        150 * SEC,
        &[gate.clone(), alone.clone()],
    );
    assert_eq!(gate.done, 3000);
    assert_eq!(
        gate.sent_into_known_penalty, 0,
        "a request was sent into a penalty the gate knew of"
    );
    assert!(
        gate.elapsed <= Duration::from_secs(375),
        "took {:?}",
        gate.elapsed
    );
    assert!(
        alone.elapsed.as_secs_f64() >= 3.0 * gate.elapsed.as_secs_f64(),
        "only {:?} vs {:?}",
        gate.elapsed,
        alone.elapsed
    );
    assert!(
        alone.in_penalty >= 10 * gate.in_penalty.max(1),
        "{} vs {} in penalty",
        gate.in_penalty,
        alone.in_penalty
    );
}
