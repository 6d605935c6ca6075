//! Calls with a deadline: they fail at once, naming the earliest start, when the gate knows
//! they cannot start in time, and wait otherwise; in paused time.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use paceline::{CallOptions, Error, Gate, Quota, RateLimited};
use tokio::time::{self, Instant};

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

/// "slow N": throttled, come back in N ms.
fn classify(e: &str) -> Option<RateLimited> {
    let ms = e.strip_prefix("slow ")?.parse().ok()?;
    Some(RateLimited::new().retry_after(Duration::from_millis(ms)))
}

fn within(wait: Duration) -> CallOptions {
    CallOptions::new().max_wait(wait)
}

async fn ok() -> Result<(), String> {
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_call_that_a_backoff_holds_past_its_deadline_fails_at_once_unmade() {
    let gate = Gate::builder(|e: &String| classify(e))
        .max_retries(0)
        .build()
        .unwrap();
    let start = Instant::now();
    let _ = gate
        .call(|| async { Err::<(), _>("slow 10000".to_owned()) })
        .await;
    let ran = AtomicU32::new(0);
    let answer = gate
        .call_with(within(9 * SEC), || async {
            ran.fetch_add(1, Ordering::Relaxed);
            Ok::<_, String>(())
        })
        .await;
    match answer {
        Err(Error::Deadline { earliest, last }) => {
            assert_eq!((*earliest - start, last), (10 * SEC, None));
        }
        other => panic!("expected a missed deadline, got {other:?}"),
    }
    assert_eq!(start.elapsed(), Duration::ZERO, "failed at once");
    assert_eq!(ran.load(Ordering::Relaxed), 0, "the call never ran");
    // One that can make it waits for the backoff and goes.
    gate.call_with(within(10 * SEC), ok).await.unwrap();
    assert_eq!(start.elapsed(), 10 * SEC);
}

#[tokio::test(start_paused = true)]
async fn the_calls_ahead_in_line_each_spend_an_interval_of_the_rate() {
    let gate = Gate::builder(|e: &String| classify(e))
        .rate(1.0)
        .build()
        .unwrap();
    let start = Instant::now();
    gate.call(ok).await.unwrap();
    // Three wait behind it, to start at 1 s, 2 s and 3 s.
    let queue: Vec<_> = (0..3)
        .map(|_| {
            let gate = gate.clone();
            tokio::spawn(async move { gate.call(ok).await })
        })
        .collect();
    tokio::task::yield_now().await;
    assert_eq!(gate.stats().queued, 3);
    assert_eq!(gate.earliest_start() - start, 4 * SEC);
    let late = gate.call_with(within(3500 * MS), ok).await;
    assert!(matches!(late, Err(Error::Deadline { earliest, .. }) if *earliest - start == 4 * SEC));
    assert_eq!(start.elapsed(), Duration::ZERO);
    gate.call_with(within(4 * SEC), ok).await.unwrap();
    assert_eq!(start.elapsed(), 4 * SEC);
    for call in queue {
        call.await.unwrap().unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_call_the_in_flight_limit_holds_fails_when_its_deadline_comes() {
    let gate = Gate::builder(|e: &String| classify(e))
        .max_in_flight(1)
        .build()
        .unwrap();
    let start = Instant::now();
    let long = tokio::spawn({
        let gate = gate.clone();
        async move {
            gate.call(|| async {
                time::sleep(10 * SEC).await;
                Ok::<_, String>(())
            })
            .await
        }
    });
    tokio::task::yield_now().await;
    // The gate cannot tell when the slot frees: the call waits, and fails at its deadline.
    assert_eq!(gate.earliest_start(), start);
    let late = gate.call_with(within(SEC), ok).await;
    assert!(matches!(late, Err(Error::Deadline { earliest, .. }) if *earliest - start == SEC));
    assert_eq!(start.elapsed(), SEC);
    assert_eq!(gate.stats().queued, 0, "it left the line");
    long.await.unwrap().unwrap();
    assert_eq!(gate.stats().calls, 1);
}

#[tokio::test(start_paused = true)]
async fn a_waiting_call_fails_as_soon_as_a_backoff_past_its_deadline_begins() {
    let gate = Gate::builder(|e: &String| classify(e))
        .max_in_flight(1)
        .max_retries(0)
        .build()
        .unwrap();
    let start = Instant::now();
    let throttled = tokio::spawn({
        let gate = gate.clone();
        async move {
            gate.call(|| async {
                time::sleep(SEC).await;
                Err::<(), _>("slow 60000".to_owned())
            })
            .await
        }
    });
    tokio::task::yield_now().await;
    let late = gate.call_with(within(30 * SEC), ok).await;
    assert!(matches!(late, Err(Error::Deadline { earliest, .. }) if *earliest - start == 61 * SEC));
    assert_eq!(
        start.elapsed(),
        SEC,
        "it failed when the throttle came, not at its deadline"
    );
    assert!(throttled.await.unwrap().unwrap_err().is_gave_up());
}

#[tokio::test(start_paused = true)]
async fn a_retry_that_cannot_make_the_deadline_carries_the_throttle() {
    let gate = Gate::builder(|e: &String| classify(e)).build().unwrap();
    let start = Instant::now();
    let answer = gate
        .call_with(within(2 * SEC), || async {
            Err::<(), _>("slow 5000".to_owned())
        })
        .await;
    match answer {
        Err(Error::Deadline { earliest, last }) => {
            assert_eq!(*earliest - start, 5 * SEC);
            assert_eq!(last.as_deref(), Some("slow 5000"));
        }
        other => panic!("expected a missed deadline, got {other:?}"),
    }
    assert_eq!(gate.stats().calls, 1);
}

#[tokio::test(start_paused = true)]
async fn a_spent_announced_quota_holds_a_call_until_the_reset() {
    let gate = Gate::builder(|e: &String| classify(e))
        .quota_reserve(0)
        .build()
        .unwrap();
    let start = Instant::now();
    gate.observe(Quota::new(0, 20 * SEC));
    let before = gate.stats();
    assert_eq!(gate.earliest_start() - start, 20 * SEC);
    assert_eq!(gate.stats(), before, "asking spends nothing");
    let late = gate.call_with(within(19 * SEC), ok).await;
    assert!(matches!(late, Err(Error::Deadline { earliest, .. }) if *earliest - start == 20 * SEC));
    let deadline = CallOptions::new().deadline(start + 20 * SEC);
    gate.call_with(deadline, ok).await.unwrap();
    assert_eq!(start.elapsed(), 20 * SEC);
}

#[tokio::test(start_paused = true)]
async fn a_call_waits_for_its_own_scopes_and_its_deadline_is_an_instant() {
    let gate = Gate::builder(|e: &String| {
        let scope = e.strip_prefix("slow ")?;
        Some(RateLimited::new().retry_after(10 * SEC).scope(scope))
    })
    .max_retries(0)
    .build()
    .unwrap();
    let start = Instant::now();
    let _ = gate
        .call(|| async { Err::<(), _>("slow acct-1".to_owned()) })
        .await;
    // acct-1 backs off for 10 s; a call of acct-1 that must start within 1 s fails at once.
    let by = CallOptions::new().scopes(["acct-1"]).deadline(start + SEC);
    let late = gate.call_with(by, ok).await;
    assert!(matches!(late, Err(Error::Deadline { earliest, .. }) if *earliest - start == 10 * SEC));
    // Another account's call goes at once.
    let other = CallOptions::new().scopes(["acct-2"]).deadline(start + SEC);
    gate.call_with(other, ok).await.unwrap();
    assert_eq!(start.elapsed(), Duration::ZERO);
}
