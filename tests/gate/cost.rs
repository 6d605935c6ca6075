//! Calls that cost different amounts: the rate and the announced quota are spent in units,
//! and a cost known only from the answer is settled afterwards; in paused time, over random
//! costs.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{StreamExt, stream};
use paceline::prelude::*;
use paceline::{CallOptions, ConfigError, Dimension, Gate, Quota, RateLimited};
use proptest::prelude::*;
use tokio::time::{self, Instant};

use crate::support;

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

#[test]
#[should_panic(expected = "`units` (the call's cost) must be at least 1")]
fn a_call_of_no_cost_in_units_is_refused_by_name() {
    let _ = CallOptions::new().cost_in(Dimension::UNITS, 0);
}

#[tokio::test(start_paused = true)]
async fn a_cost_read_from_configuration_is_refused_at_zero_and_spent_as_given_otherwise() {
    // Costs as a configuration file names them: a dimension by its name, and a number.
    let units = || Dimension::new("units");
    let refused = CallOptions::new().try_cost(0).unwrap_err();
    assert_eq!(refused, ConfigError::ZeroCost);
    let panicked = std::panic::catch_unwind(|| CallOptions::new().cost(0)).unwrap_err();
    assert_eq!(refused.to_string(), *panicked.downcast::<String>().unwrap());
    assert_eq!(
        CallOptions::new().try_cost_in(units(), 0).unwrap_err(),
        ConfigError::ZeroCost
    );
    // A call of 3 units, then one of 2, then one of 1, at a unit a second.
    let gate = Gate::builder(never).rate(1.0).build().unwrap();
    let start = Instant::now();
    let costs = [
        CallOptions::new().try_cost(3).unwrap(),
        CallOptions::new().try_cost_in(units(), 2).unwrap(),
        CallOptions::new(),
    ];
    let mut starts = Vec::new();
    for options in costs {
        let at = gate.call_with(options, || async { Ok::<_, ()>(start.elapsed()) });
        starts.push(at.await.unwrap());
    }
    assert_eq!(starts, [0, 3_000, 5_000].map(|n| MS * n));
}

#[tokio::test(start_paused = true)]
async fn a_call_waits_until_the_announced_quota_has_its_cost_left() {
    let gate = Gate::builder(never).quota_reserve(0).build().unwrap();
    let start = Instant::now();
    // 25 units left for 10 s.
    gate.observe(Quota::new(25, Duration::from_secs(10)));
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
    // A call of 5 makes the reserve 5 (room for a call that size in a window the gate
    // thinks over): 15 left after it, and the next waits its share, 5 / 20 of the 10 s.
    assert_eq!(call(5).await, Duration::ZERO);
    assert_eq!(gate.budget_left(&Dimension::UNITS), Some(15));
    assert_eq!(call(5).await, Duration::from_millis(2_500));
    // 10 left: a call of 10 goes at its share, and makes the reserve 10.
    assert_eq!(call(10).await, Duration::from_secs(5));
    assert_eq!(gate.budget_left(&Dimension::UNITS), Some(0));
    // Nothing left: the next waits for the reset.
    assert_eq!(call(1).await, Duration::from_secs(10));
}

proptest! {
    #![proptest_config(support::regressions_beside_the_file(ProptestConfig::with_cases(200)))]

    /// Over random costs, from several tasks: each start comes at least the previous
    /// start's cost, in intervals of the rate, after it; so the units started in any window
    /// of length `w` are at most `rate × w` and the cost of the window's first call.
    #[test]
    fn the_rate_is_never_overspent_in_units(
        rate in 1.0f64..200.0,
        costs in prop::collection::vec(1u64..20, 1..60),
        tasks in 1usize..8,
    ) {
        let starts = support::paused_runtime().block_on(async {
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
    /// with an estimate at least as high, settles when the answer says what it cost
    /// (charging only, through `Gate::settle`, or both ways, through `Gate::call_settled`,
    /// which gives back what the estimate was over), and reads the quota from every answer:
    /// the server never turns a call away. Given back to an announcement that had already
    /// counted the call at its real cost, units would be spent twice.
    #[test]
    fn an_announced_quota_is_never_overspent_in_units(
        limit in 20u64..200,
        window_ms in 1_000u64..10_000,
        latency_ms in 1u64..200,
        calls in prop::collection::vec((1u64..10, 0u64..5), 1..80),
        tasks_pick in 0u64..1_000,
        give_back in any::<bool>(),
    ) {
        // No more in the first burst, sent before any announcement, than a window holds.
        let tasks = usize::try_from(1 + tasks_pick % (limit / 13)).unwrap();
        let window = MS * u32::try_from(window_ms).unwrap();
        let latency = MS * u32::try_from(latency_ms).unwrap();
        let (rejected, done) = support::paused_runtime().block_on(async {
            let server = Arc::new(Mutex::new(Window::new(limit, window)));
            let gate = Gate::builder(|_: &Rejected| Some(RateLimited::new()))
                .max_in_flight(tasks)
                .build()
                .unwrap();
            let call = |actual: u64| {
                let (server, gate) = (Arc::clone(&server), gate.clone());
                async move {
                    time::sleep(latency).await;
                    let answer = server.lock().unwrap().request(actual);
                    time::sleep(latency).await;
                    gate.observe(answer?);
                    Ok::<_, Rejected>(actual)
                }
            };
            let done = if give_back {
                stream::iter(calls.clone())
                    .map(|(actual, over)| {
                        let estimate = CallOptions::new().cost(actual + over);
                        let gate = gate.clone();
                        let call = &call;
                        async move {
                            let made = || call(actual);
                            gate.call_settled(estimate, made, |used| *used).await
                        }
                    })
                    .buffer_unordered(tasks)
                    .filter(|result| std::future::ready(result.is_ok()))
                    .count()
                    .await
            } else {
                stream::iter(calls.clone())
                    .throttled_map_unordered(&gate, |(actual, over)| {
                        let gate = gate.clone();
                        let answered = call(actual);
                        async move {
                            let used = answered.await?;
                            gate.settle(actual + over, used);
                            Ok(())
                        }
                    })
                    .costed(|(actual, over): &(u64, u64)| actual + over)
                    .filter(|result| std::future::ready(result.is_ok()))
                    .count()
                    .await
            };
            let rejected = server.lock().unwrap().rejected;
            (rejected, done)
        });
        prop_assert_eq!(rejected, 0);
        prop_assert_eq!(done, calls.len());
    }
}

#[tokio::test(start_paused = true)]
async fn what_a_call_cost_less_is_given_back_to_the_rate_if_no_call_started_since() {
    let gate = Gate::builder(never).rate(10.0).build().unwrap();
    let start = Instant::now();
    let call = |cost: u64, actual: u64| {
        let gate = gate.clone();
        async move {
            let options = CallOptions::new().cost(cost);
            let at = || async { Ok::<_, ()>(start.elapsed()) };
            gate.call_settled(options, at, |_| actual).await.unwrap()
        }
    };
    // 5 units estimated, 2 used: the next waits 200 ms, not 500. 1 more than estimated: the
    // next waits 300 ms for the 3 used.
    assert_eq!(call(5, 2).await, Duration::ZERO);
    assert_eq!(call(2, 3).await, 200 * MS);
    assert_eq!(call(1, 1).await, 500 * MS);
    // Estimated at 4, used 1, but it ends after another call started, spaced by its 4: what
    // it cost less stays spent, and the call after that waits for the other's 5 units.
    let slow = gate.call_settled(
        CallOptions::new().cost(4),
        || async {
            let at = start.elapsed();
            time::sleep(500 * MS).await;
            Ok::<_, ()>(at)
        },
        |_| 1,
    );
    let (first, second) = tokio::join!(slow, call(5, 5));
    assert_eq!((first.unwrap(), second), (600 * MS, 1_000 * MS));
    assert_eq!(call(1, 1).await, 1_500 * MS);
}

#[tokio::test(start_paused = true)]
async fn what_a_call_cost_less_is_given_back_to_its_window_until_the_server_tells_again() {
    let gate = Gate::builder(never).quota_reserve(0).build().unwrap();
    gate.observe(Quota::new(30, Duration::from_secs(10)));
    let settled = |estimate: u64, used: u64| {
        let gate = gate.clone();
        async move {
            let options = CallOptions::new().cost(estimate);
            gate.call_settled(options, || async { Ok::<_, ()>(()) }, |_| used)
                .await
                .unwrap();
        }
    };
    // 30, less 3 started and 3 of reserve (the largest call so far), and 2 given back.
    settled(3, 1).await;
    assert_eq!(gate.budget_left(&Dimension::UNITS), Some(26));
    // 1 started, 2 more charged.
    settled(1, 3).await;
    assert_eq!(gate.budget_left(&Dimension::UNITS), Some(23));
    // An announcement made while a call was out counts it at its real cost: what it cost
    // less is not given back on top. (20 told, less the reserve of 3, less all but one of
    // the call's own units, which the server may not have counted yet.)
    let told = gate.call_settled(
        CallOptions::new().cost(2),
        || async {
            time::sleep(10 * MS).await;
            gate.observe(Quota::new(20, Duration::from_secs(9)));
            Ok::<_, ()>(())
        },
        |_| 1,
    );
    told.await.unwrap();
    assert_eq!(gate.budget_left(&Dimension::UNITS), Some(16));
}

#[test]
fn a_window_the_server_moved_past_keeps_room_for_the_call_that_learns_the_next() {
    // Found by the property above: a server of 20 units per 1.271 s, resets rounded up to
    // whole seconds, 196 ms each way; one call at a time, of the (real cost, estimate over
    // it) below. The gate's view of a window ended after the server's did, the calls it
    // spent meanwhile counted in the server's next window, and the call of 8 sent to learn
    // the next window landed in that same one, with 7 left: unless the gate keeps a reserve
    // as large as its largest call.
    let calls = [
        (1, 0),
        (5, 2),
        (1, 0),
        (1, 0),
        (5, 0),
        (5, 4),
        (4, 3),
        (1, 0),
        (1, 0),
        (1, 4),
        (9, 4),
        (2, 1),
        (5, 0),
        (8, 0),
        (8, 0),
    ];
    let latency = 196 * MS;
    let rejected = support::paused_runtime().block_on(async {
        let server = Arc::new(Mutex::new(Window::new(20, 1_271 * MS)));
        let gate = Gate::builder(|_: &Rejected| Some(RateLimited::new()))
            .max_retries(0)
            .build()
            .unwrap();
        for (actual, over) in calls {
            let call = || async {
                time::sleep(latency).await;
                let answer = server.lock().unwrap().request(actual);
                time::sleep(latency).await;
                gate.observe(answer?);
                Ok(actual)
            };
            let estimate = CallOptions::new().cost(actual + over);
            let _ = gate.call_with(estimate, call).await;
        }
        server.lock().unwrap().rejected
    });
    assert_eq!(rejected, 0);
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
