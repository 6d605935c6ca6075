//! Calls that cost different amounts: the rate and the announced quota are spent in units,
//! and a cost known only from the answer is settled afterwards; in paused time, over random
//! costs.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{StreamExt, stream};
use paceline::prelude::*;
use paceline::{CallOptions, Gate, Quota, RateLimited};
use proptest::prelude::*;
use tokio::time::{self, Instant};

const MS: Duration = Duration::from_millis(1);

fn never(_: &()) -> Option<RateLimited> {
    None
}

#[tokio::test(start_paused = true)]
async fn a_rate_is_spent_in_units_and_settled_in_units() {
    let gate = Gate::builder(never).rate(10.0).build().unwrap();
    let start = Instant::now();
    let starts = Arc::new(Mutex::new(Vec::new()));
    let call = |cost: u64, actual: u64| {
        let (gate, starts) = (gate.clone(), Arc::clone(&starts));
        async move {
            let options = CallOptions::new().cost(cost);
            gate.call_with(options, || async {
                starts.lock().unwrap().push(start.elapsed());
                gate.settle(cost, actual);
                Ok::<_, ()>(())
            })
            .await
            .unwrap();
        }
    };
    // 3 units, then 1 that turned out to cost 5, then 4 of which 2 were used: what a call
    // cost less is not given back.
    call(3, 3).await;
    call(1, 5).await;
    call(4, 2).await;
    call(1, 1).await;
    let ms = |n| MS * n;
    assert_eq!(*starts.lock().unwrap(), [ms(0), ms(300), ms(800), ms(1200)]);
}

#[test]
#[should_panic(expected = "`units` (the call's cost) must be at least 1")]
fn a_call_of_no_cost_is_refused_by_name() {
    let _ = CallOptions::new().cost(0);
}

#[tokio::test(start_paused = true)]
async fn a_call_waits_until_the_announced_quota_has_its_cost_left() {
    let gate = Gate::builder(never).quota_reserve(0).build().unwrap();
    let start = Instant::now();
    // 10 units left for 10 s.
    gate.observe(Quota::new(10, Duration::from_secs(10)));
    let call = |cost: u64| {
        let gate = gate.clone();
        async move {
            gate.call_with(CallOptions::new().cost(cost), || async {
                Ok::<_, ()>(start.elapsed())
            })
            .await
            .unwrap()
        }
    };
    // 6 of the 10 at once; 4 then wait their share of the rest: 6 / 10 of the 10 s.
    assert_eq!(call(6).await, Duration::ZERO);
    assert_eq!(call(4).await, Duration::from_secs(6));
    // Nothing left: the next waits for the reset.
    assert_eq!(call(1).await, Duration::from_secs(10));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Over random costs, from several tasks: each start comes at least the previous
    /// start's cost, in intervals of the rate, after it; so the units started in any window
    /// of length `w` are at most `rate × w` and the cost of the window's first call.
    #[test]
    fn the_rate_is_never_overspent_in_units(
        rate in 1.0f64..200.0,
        costs in prop::collection::vec(1u64..20, 1..60),
        tasks in 1usize..8,
    ) {
        let starts = common::paused_runtime().block_on(async {
            let gate = Gate::builder(never).max_in_flight(tasks).rate(rate).build().unwrap();
            let start = Instant::now();
            let starts: Vec<_> = stream::iter(costs.clone())
                .throttled_map_unordered(&gate, |cost| async move {
                    let at = start.elapsed();
                    time::sleep(5 * MS).await;
                    Ok::<_, ()>((at, cost))
                })
                .costed(|cost: &u64| *cost)
                .map(Result::unwrap)
                .collect::<Vec<_>>()
                .await;
            starts
        });
        let mut starts = starts;
        starts.sort();
        prop_assert_eq!(starts.len(), costs.len());
        let interval = Duration::from_secs_f64(1.0 / rate);
        for pair in starts.windows(2) {
            let ((earlier, cost), (later, _)) = (pair[0], pair[1]);
            let owed = interval.saturating_mul(u32::try_from(cost).unwrap());
            // tokio's timer is late by up to a millisecond, never early; the interval is
            // rounded to the nanosecond.
            prop_assert!(
                later - earlier + Duration::from_nanos(cost) >= owed,
                "a start {:?} after one of {} units at {:?}/unit",
                later - earlier,
                cost,
                interval
            );
        }
    }

    /// A fixed-window server charges each call what it really cost; the gate starts each
    /// with an estimate at least as high, settles when the answer says what it cost, and
    /// reads the quota from every answer: the server never turns a call away.
    #[test]
    fn an_announced_quota_is_never_overspent_in_units(
        limit in 20u64..200,
        window_ms in 1_000u64..10_000,
        latency_ms in 1u64..200,
        calls in prop::collection::vec((1u64..10, 0u64..5), 1..80),
        tasks_pick in 0u64..1_000,
    ) {
        // No more in the first burst, sent before any announcement, than a window holds.
        let tasks = usize::try_from(1 + tasks_pick % (limit / 13)).unwrap();
        let window = MS * u32::try_from(window_ms).unwrap();
        let rejected = common::paused_runtime().block_on(async {
            let server = Arc::new(Mutex::new(Window::new(limit, window)));
            let gate = Gate::builder(|_: &Rejected| Some(RateLimited::new()))
                .max_in_flight(tasks)
                .build()
                .unwrap();
            stream::iter(calls.clone())
                .throttled_map_unordered(&gate, |(actual, over)| {
                    let (server, gate) = (Arc::clone(&server), gate.clone());
                    async move {
                        time::sleep(MS * u32::try_from(latency_ms).unwrap()).await;
                        let answer = server.lock().unwrap().request(actual);
                        time::sleep(MS * u32::try_from(latency_ms).unwrap()).await;
                        gate.settle(actual + over, actual);
                        let quota = answer?;
                        gate.observe(quota);
                        Ok(())
                    }
                })
                .costed(|(actual, over): &(u64, u64)| actual + over)
                .for_each(|_| async {})
                .await;
            server.lock().unwrap().rejected
        });
        prop_assert_eq!(rejected, 0);
    }
}

/// The server turned a call away.
#[derive(Debug)]
struct Rejected;

/// A fixed window of `limit` units per `window`, from the server's start, that announces
/// what is left (the reset rounded up to whole seconds) on every answer.
struct Window {
    start: Instant,
    limit: u64,
    window: Duration,
    index: u64,
    used: u64,
    rejected: u64,
}

impl Window {
    fn new(limit: u64, window: Duration) -> Self {
        Self {
            start: Instant::now(),
            limit,
            window,
            index: 0,
            used: 0,
            rejected: 0,
        }
    }

    fn request(&mut self, cost: u64) -> Result<Quota, Rejected> {
        let elapsed = Instant::now() - self.start;
        let index = u64::try_from(elapsed.as_nanos() / self.window.as_nanos()).unwrap();
        if index != self.index {
            (self.index, self.used) = (index, 0);
        }
        if self.used + cost > self.limit {
            self.rejected += 1;
            return Err(Rejected);
        }
        self.used += cost;
        let reset = self.window * u32::try_from(index + 1).unwrap() - elapsed;
        let resets_in = Duration::from_secs(reset.as_secs() + u64::from(reset.subsec_nanos() > 0));
        Ok(Quota::new(self.limit - self.used, resets_in))
    }
}
