//! The gate: in-flight limit, shared and scoped backoff, retries, FIFO order, cancellation,
//! panics and bad settings, in paused time.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{FutureExt, StreamExt, stream};
use paceline::prelude::*;
use paceline::{CallOptions, ConfigError, Error, Gate, Jitter, RateLimited};
use tokio::time::{self, Instant};

use crate::support::{self, ms_since};

const MS: Duration = Duration::from_millis(1);

#[derive(Debug, Clone, PartialEq)]
enum ApiError {
    /// Rate-limited, maybe with Retry-After (ms), maybe for one account.
    Slow(Option<u64>, Option<&'static str>),
    NotFound,
}

fn classify(e: &ApiError) -> Option<RateLimited> {
    match e {
        ApiError::Slow(after, scope) => {
            let mut t = RateLimited::new();
            if let Some(ms) = after {
                t = t.retry_after(Duration::from_millis(*ms));
            }
            if let Some(scope) = scope {
                t = t.scope(*scope);
            }
            Some(t)
        }
        ApiError::NotFound => None,
    }
}

fn gate(max_in_flight: usize) -> Gate<ApiError> {
    Gate::builder(classify)
        .max_in_flight(max_in_flight)
        .build()
        .unwrap()
}

/// A gate of `max_in_flight` slots with a rate no test here reaches.
fn paced(max_in_flight: usize) -> Gate<ApiError> {
    Gate::builder(classify)
        .max_in_flight(max_in_flight)
        .rate(1e6)
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn at_most_max_in_flight_calls_run_at_once_and_they_start_in_arrival_order() {
    let gate = gate(3);
    let start = Instant::now();
    let log = Arc::new(Mutex::new(Vec::new()));
    let results: Vec<_> = stream::iter(0..7)
        .throttled_map(&gate, |i| {
            let log = Arc::clone(&log);
            async move {
                log.lock().unwrap().push((ms_since(start), i));
                time::sleep(100 * MS).await;
                Ok::<_, ApiError>(i * 10)
            }
        })
        .collect()
        .await;
    assert_eq!(results, (0..7).map(|i| Ok(i * 10)).collect::<Vec<_>>());
    let log = log.lock().unwrap().clone();
    assert_eq!(
        log,
        [
            (0, 0),
            (0, 1),
            (0, 2),
            (100, 3),
            (100, 4),
            (100, 5),
            (200, 6)
        ]
    );
    let stats = gate.stats();
    assert_eq!(
        (stats.calls, stats.successes, stats.in_flight, stats.queued),
        (7, 7, 0, 0)
    );
}

#[tokio::test(start_paused = true)]
async fn a_throttle_holds_every_caller_and_the_throttled_call_goes_first_when_it_lifts() {
    let gate = gate(10);
    let start = Instant::now();
    let log = Arc::new(Mutex::new(Vec::new()));
    let first_try = Arc::new(Mutex::new(true));
    // Call "a" is throttled once with Retry-After 1 s; "b" and "c" come later from another
    // task and must wait for the backoff too, behind the retry of "a".
    let api = {
        let log = Arc::clone(&log);
        move |name: &'static str| {
            let log = Arc::clone(&log);
            let first_try = Arc::clone(&first_try);
            async move {
                log.lock().unwrap().push((ms_since(start), name));
                time::sleep(10 * MS).await;
                let mut first = first_try.lock().unwrap();
                if name == "a" && *first {
                    *first = false;
                    return Err(ApiError::Slow(Some(1000), None));
                }
                Ok(name)
            }
        }
    };
    let other = {
        let gate = gate.clone();
        let api = api.clone();
        tokio::spawn(async move {
            time::sleep(50 * MS).await;
            stream::iter(["b", "c"])
                .throttled_map(&gate, api)
                .collect::<Vec<_>>()
                .await
        })
    };
    assert_eq!(gate.call(|| api("a")).await, Ok("a"));
    assert_eq!(other.await.unwrap(), [Ok("b"), Ok("c")]);
    let log = log.lock().unwrap().clone();
    // The throttle answer comes at 10 ms: backoff until 1010 ms. Then calls come back one
    // at a time (a second slot would open 111 ms later), each as the one before ends.
    assert_eq!(log, [(0, "a"), (1010, "a"), (1020, "b"), (1030, "c")]);
    let stats = gate.stats();
    assert_eq!((stats.throttles, stats.retries, stats.successes), (1, 1, 3));
}

#[tokio::test(start_paused = true)]
async fn a_throttle_scoped_to_one_account_does_not_hold_back_another() {
    let gate = gate(10);
    let start = Instant::now();
    let first_a = Arc::new(Mutex::new(true));
    let call = |account: &'static str| {
        let first_a = Arc::clone(&first_a);
        gate.call_in([account], move || {
            let first_a = Arc::clone(&first_a);
            async move {
                time::sleep(10 * MS).await;
                let mut first = first_a.lock().unwrap();
                if account == "A" && *first {
                    *first = false;
                    return Err(ApiError::Slow(Some(5000), Some("A")));
                }
                Ok(ms_since(start))
            }
        })
    };
    let a = call("A");
    let b = async {
        time::sleep(100 * MS).await;
        call("B").await
    };
    let (a, b) = futures::join!(a, b);
    assert_eq!(b, Ok(110), "B starts at once though A is backing off");
    assert_eq!(a, Ok(5020), "A is retried when its own backoff ends");
}

#[tokio::test(start_paused = true)]
async fn a_waiter_whose_scope_backs_off_while_it_waits_starts_when_the_backoff_ends() {
    // The waiter is parked in line (every slot taken) when its scope's backoff begins, and
    // the throttled call gives up: nothing else will happen at the gate, so the waiter must
    // learn of the backoff and wait for its end on its own.
    let gate = Gate::builder(classify)
        .max_in_flight(1)
        .max_retries(0)
        .build()
        .unwrap();
    let start = Instant::now();
    let throttled = tokio::spawn({
        let gate = gate.clone();
        async move {
            gate.call_in(["A"], || async {
                time::sleep(10 * MS).await;
                Err::<u64, _>(ApiError::Slow(Some(1000), Some("A")))
            })
            .await
        }
    });
    let waiting = tokio::spawn({
        let gate = gate.clone();
        async move {
            time::sleep(MS).await;
            gate.call_in(["A"], || async move { Ok::<_, ApiError>(ms_since(start)) })
                .await
        }
    });
    assert!(throttled.await.unwrap().is_err());
    let waited = time::timeout(Duration::from_secs(60), waiting).await;
    assert_eq!(
        waited.expect("the waiter was never woken").unwrap(),
        Ok(1010)
    );
}

#[tokio::test(start_paused = true)]
async fn other_errors_pass_through_at_once_unchanged() {
    let gate = gate(2);
    let result = gate
        .call(|| async { Err::<(), _>(ApiError::NotFound) })
        .await;
    assert_eq!(result, Err(Error::Call(ApiError::NotFound)));
    assert_eq!(gate.stats().other_errors, 1);
    assert_eq!(gate.stats().backoff_until, None);
}

#[tokio::test(start_paused = true)]
async fn gives_up_after_the_retry_limit_with_the_last_error() {
    let gate = Gate::builder(classify).max_retries(2).build().unwrap();
    let attempts = Arc::new(Mutex::new(0));
    let result = gate
        .call(|| {
            let attempts = Arc::clone(&attempts);
            async move {
                *attempts.lock().unwrap() += 1;
                Err::<(), _>(ApiError::Slow(Some(10), None))
            }
        })
        .await;
    assert_eq!(
        result,
        Err(Error::GaveUp {
            attempts: 3,
            last: ApiError::Slow(Some(10), None)
        })
    );
    assert_eq!(*attempts.lock().unwrap(), 3);
    assert_eq!(gate.stats().gave_up, 1);
}

#[tokio::test(start_paused = true)]
async fn a_fixed_rate_spaces_call_starts_never_early() {
    let gate = Gate::builder(classify)
        .max_in_flight(100)
        .rate(4.0)
        .build()
        .unwrap();
    let start = Instant::now();
    let starts: Vec<_> = stream::iter(0..5)
        .throttled_map(&gate, |_| async move { Ok::<_, ApiError>(ms_since(start)) })
        .map(Result::unwrap)
        .collect()
        .await;
    assert_eq!(starts, [0, 250, 500, 750, 1000]);
}

#[tokio::test(start_paused = true)]
async fn dropping_a_waiting_call_releases_its_place_and_a_running_one_its_slot() {
    let gate = gate(1);
    let slow = gate.call(|| async {
        time::sleep(1000 * MS).await;
        Ok::<_, ApiError>(())
    });
    let mut slow = Box::pin(slow);
    assert!((&mut slow).now_or_never().is_none()); // running, holds the one slot
    let mut waiting = Box::pin(gate.call(|| async { Ok::<_, ApiError>(()) }));
    assert!((&mut waiting).now_or_never().is_none());
    assert_eq!((gate.stats().in_flight, gate.stats().queued), (1, 1));
    drop(waiting);
    assert_eq!(gate.stats().queued, 0);
    drop(slow);
    assert_eq!(gate.stats().in_flight, 0);
    assert_eq!(gate.call(|| async { Ok::<_, ApiError>(7) }).await, Ok(7));
}

#[tokio::test(start_paused = true)]
async fn a_panicking_call_or_classifier_reaches_the_caller_and_frees_its_slot() {
    let gate = gate(1);
    let panicked = tokio::spawn({
        let gate = gate.clone();
        async move {
            gate.call(|| async { panic!("user future panicked") as Result<(), ApiError> })
                .await
        }
    })
    .await;
    assert!(panicked.unwrap_err().is_panic());
    assert_eq!(gate.stats().in_flight, 0);
    // The closure that makes the call's future panics, with and without a rate.
    for gate in [gate, paced(1)] {
        let panicked = tokio::spawn({
            let gate = gate.clone();
            async move {
                gate.call(|| -> std::future::Ready<Result<(), ApiError>> {
                    panic!("making the call panicked")
                })
                .await
            }
        })
        .await;
        assert!(panicked.unwrap_err().is_panic());
        assert_eq!(gate.stats().in_flight, 0);
    }

    let bad: Gate<ApiError> = Gate::builder(|_: &ApiError| panic!("classifier panicked"))
        .max_in_flight(1)
        .build()
        .unwrap();
    let panicked = tokio::spawn({
        let bad = bad.clone();
        async move {
            bad.call(|| async { Err::<(), _>(ApiError::NotFound) })
                .await
        }
    })
    .await;
    assert!(panicked.unwrap_err().is_panic());
    assert_eq!(bad.stats().in_flight, 0);
    assert_eq!(bad.call(|| async { Ok::<_, ApiError>(1) }).await, Ok(1));
}

#[test]
fn bad_settings_are_named_errors() {
    let err = |b: paceline::GateBuilder<ApiError>| b.build().unwrap_err();
    assert_eq!(
        err(Gate::builder(classify).max_in_flight(0)),
        ConfigError::ZeroInFlight
    );
    assert_eq!(
        err(Gate::builder(classify).rate(-1.0)),
        ConfigError::InvalidRate {
            which: "start",
            value: -1.0
        }
    );
    assert!(matches!(
        err(Gate::builder(classify).rate(f64::NAN)),
        ConfigError::InvalidRate { which: "start", .. }
    ));
    assert_eq!(
        err(Gate::builder(classify).rate(5.0).adaptive(10.0, 2.0)),
        ConfigError::FloorAboveCeiling {
            floor: 10.0,
            ceiling: 2.0
        }
    );
    assert_eq!(
        err(Gate::builder(classify).backoff(Duration::from_secs(2), Duration::from_secs(1))),
        ConfigError::BaseAboveCap
    );
    assert!(
        err(Gate::builder(classify).max_in_flight(0))
            .to_string()
            .contains("max_in_flight")
    );
}

#[tokio::test(start_paused = true)]
async fn dropping_a_stream_gives_back_its_slots_and_places_and_others_carry_on() {
    let gate = gate(2);
    let mut slow = stream::iter(0..10).throttled_map(&gate, |i| async move {
        time::sleep(1000 * MS).await;
        Ok::<_, ApiError>(i)
    });
    // Start it: two calls run, which is all its window (the in-flight limit) takes.
    assert!(futures::poll!(slow.next()).is_pending());
    assert_eq!((gate.stats().in_flight, gate.stats().queued), (2, 0));
    let other = gate.call(|| async { Ok::<_, ApiError>("other") });
    let mut other = Box::pin(other);
    assert!(futures::poll!(&mut other).is_pending());
    assert_eq!(gate.stats().queued, 1);
    drop(slow);
    assert_eq!(gate.stats().in_flight, 0);
    assert_eq!(other.await, Ok("other"));
    assert_eq!((gate.stats().in_flight, gate.stats().queued), (0, 0));
}

/// Start instants (ms) of calls made through `gate`, by name, in the order they started.
type StartLog = Arc<Mutex<Vec<(u64, &'static str)>>>;

#[tokio::test(start_paused = true)]
async fn the_throttled_call_goes_before_calls_that_queued_ahead_of_its_retry() {
    // One slot: "b" and "c" queue at 5 ms while "a" runs; "a" is throttled at 10 ms and its
    // retry joins the line after them, yet starts first when the backoff lifts.
    let gate = gate(1);
    let start = Instant::now();
    let log: StartLog = Arc::default();
    let first_try = Arc::new(Mutex::new(true));
    let api = |name: &'static str| {
        let (log, first_try) = (Arc::clone(&log), Arc::clone(&first_try));
        move || {
            let (log, first_try) = (Arc::clone(&log), Arc::clone(&first_try));
            async move {
                log.lock().unwrap().push((ms_since(start), name));
                time::sleep(10 * MS).await;
                let mut first = first_try.lock().unwrap();
                if name == "a" && std::mem::take(&mut *first) {
                    return Err(ApiError::Slow(Some(1000), None));
                }
                Ok(name)
            }
        }
    };
    let later = |name| {
        let call = gate.call(api(name));
        async move {
            time::sleep(5 * MS).await;
            call.await
        }
    };
    let (a, b, c) = futures::join!(gate.call(api("a")), later("b"), later("c"));
    assert_eq!((a, b, c), (Ok("a"), Ok("b"), Ok("c")));
    let log = log.lock().unwrap().clone();
    assert_eq!(log, [(0, "a"), (1010, "a"), (1020, "b"), (1030, "c")]);
}

#[tokio::test(start_paused = true)]
async fn backoffs_without_retry_after_are_exactly_base_then_doubled_and_successes_step_down() {
    // No jitter: base, 2 base, 4 base; then two successes in a row (`decay_after(2)`) step
    // the exponent down by one, so the next backoff is 4 base again, not 8 base. (The
    // backoffs alone: a rate found from these throttles would space the calls too.)
    let gate = Gate::builder(classify)
        .find_rate(false)
        .backoff(100 * MS, 10_000 * MS)
        .jitter(Jitter::None)
        .decay_after(2)
        .max_retries(0)
        .build()
        .unwrap();
    let mut lengths = Vec::new();
    let throttle = || async {
        let now = Instant::now();
        let result = gate
            .call(|| async { Err::<(), _>(ApiError::Slow(None, None)) })
            .await;
        assert!(result.unwrap_err().is_gave_up());
        let until = gate.stats().backoff_until.expect("a backoff runs");
        time::sleep_until(until).await;
        (until - now).as_millis()
    };
    for _ in 0..3 {
        lengths.push(throttle().await);
    }
    for _ in 0..2 {
        gate.call(|| async { Ok::<_, ApiError>(()) }).await.unwrap();
    }
    lengths.push(throttle().await);
    assert_eq!(lengths, [100, 200, 400, 400]);
}

#[tokio::test(start_paused = true)]
async fn an_absurd_retry_after_waits_the_documented_maximum_and_never_panics() {
    const YEAR: Duration = Duration::from_secs(365 * 24 * 60 * 60);
    for absurd in [Duration::MAX, Duration::from_secs(u64::MAX / 2)] {
        let gate = Gate::builder(move |_: &()| Some(RateLimited::new().retry_after(absurd)))
            .max_retries(1)
            .build()
            .unwrap();
        let start = Instant::now();
        let mut tries = 0;
        let result = gate
            .call(|| {
                tries += 1;
                let first = tries == 1;
                async move { if first { Err(()) } else { Ok(()) } }
            })
            .await;
        assert_eq!(result, Ok(()));
        assert_eq!(
            start.elapsed(),
            YEAR,
            "the retry waited the longest wait, a year"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn absurd_settings_are_clamped_and_never_panic() {
    let gate = Gate::builder(classify)
        .rate(f64::MIN_POSITIVE)
        .backoff(Duration::MAX, Duration::MAX)
        .jitter(Jitter::None)
        .max_retries(0)
        .build()
        .unwrap();
    gate.call(|| async { Ok::<_, ApiError>(()) }).await.unwrap();
    // The next start waits for a rate that slow: as long as the longest wait, and no panic.
    let next = gate.call(|| async { Err::<(), _>(ApiError::Slow(None, None)) });
    assert!(matches!(
        futures::poll!(Box::pin(next)),
        std::task::Poll::Pending
    ));
}

#[tokio::test(start_paused = true)]
async fn the_line_is_first_come_first_served_for_many_waiters_at_distinct_instants() {
    // One slot, calls of 7 ms, 60 callers arriving at distinct, shuffled instants: each
    // starts in the order of its arrival, none before the previous one ends.
    let gate = gate(1);
    let start = Instant::now();
    let mut arrivals: Vec<u64> = (0..60).map(|i| 1 + i * 3).collect();
    // A fixed shuffle of who arrives when (a multiplicative permutation of 0..60).
    let order: Vec<usize> = (0..60).map(|i| (i * 37) % 60).collect();
    arrivals = order.iter().map(|&i| arrivals[i]).collect();
    let log: Arc<Mutex<Vec<u64>>> = Arc::default();
    let calls = arrivals.iter().map(|&at| {
        let (gate, log) = (gate.clone(), Arc::clone(&log));
        async move {
            time::sleep(Duration::from_millis(at)).await;
            gate.call(|| async {
                // Logged and timed from the start, not from when the call was made.
                log.lock().unwrap().push(at);
                time::sleep(7 * MS).await;
                Ok::<_, ApiError>(())
            })
            .await
            .unwrap();
        }
    });
    futures::future::join_all(calls).await;
    let mut by_arrival = arrivals.clone();
    by_arrival.sort_unstable();
    assert_eq!(*log.lock().unwrap(), by_arrival);
    assert_eq!(ms_since(start), 1 + 7 * 60);
}

#[tokio::test(start_paused = true)]
async fn throttled_map_yields_in_input_order_when_calls_finish_in_reverse() {
    let gate = gate(5);
    let start = Instant::now();
    let finish: Vec<(u64, u64)> = stream::iter(0..5u64)
        .throttled_map(&gate, |i| async move {
            time::sleep(Duration::from_millis(50 - 10 * i)).await;
            Ok::<_, ApiError>(i)
        })
        .map(|r| (r.unwrap(), ms_since(start)))
        .collect()
        .await;
    // Item 0 finishes last, at 50 ms; every later one waits for it, then all come at once.
    assert_eq!(finish, [(0, 50), (1, 50), (2, 50), (3, 50), (4, 50)]);
}

#[tokio::test(start_paused = true)]
async fn throttled_map_unordered_yields_as_calls_finish_and_keeps_every_slot_busy() {
    let gate = gate(3);
    let start = Instant::now();
    let starts: Arc<Mutex<Vec<(u64, u64)>>> = Arc::default();
    let durations = [30, 10, 25, 10, 12, 10];
    let done: Vec<(u64, u64)> = stream::iter(0..6u64)
        .throttled_map_unordered(&gate, |i| {
            let starts = Arc::clone(&starts);
            async move {
                starts.lock().unwrap().push((i, ms_since(start)));
                time::sleep(Duration::from_millis(durations[i as usize])).await;
                Ok::<_, ApiError>(i)
            }
        })
        .map(|r| (r.unwrap(), ms_since(start)))
        .collect()
        .await;
    // Each freed slot takes the next item at once: three calls run whenever three wait.
    let starts = starts.lock().unwrap().clone();
    assert_eq!(starts, [(0, 0), (1, 0), (2, 0), (3, 10), (4, 20), (5, 25)]);
    assert_eq!(done, [(1, 10), (3, 20), (2, 25), (0, 30), (4, 32), (5, 35)]);
}

#[tokio::test(start_paused = true)]
async fn a_backoff_is_announced_once_when_it_begins_and_once_when_calls_resume() {
    let (events, _guard) = support::events::record();
    let gate = gate(4);
    // The first three calls to run are throttled together: one backoff, one warning; their
    // retries run when it ends, with one line as calls resume.
    let ran = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<_> = stream::iter(0..3)
        .throttled_map(&gate, |_| async {
            let order = ran.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            time::sleep(10 * MS).await;
            match order {
                0..3 => Err(ApiError::Slow(Some(1000), None)),
                _ => Ok(()),
            }
        })
        .collect()
        .await;
    assert!(results.iter().all(Result::is_ok));
    let warned = events.messages(tracing::Level::WARN, "paceline::gate");
    assert_eq!(warned, ["rate-limited: every call through the gate waits"]);
    let resumed = events.messages(tracing::Level::INFO, "paceline::gate");
    assert_eq!(resumed, ["backoff ended; calls resume"]);
}

#[tokio::test(start_paused = true)]
async fn a_paced_call_nothing_holds_starts_at_once_and_every_hold_still_holds_it() {
    // No span is wanted, so that a call nothing holds starts in the caller's own future.
    let (events, _guard) = support::events::record_up_to(tracing::Level::INFO);
    let gate = Gate::builder(classify)
        .rate(4.0)
        .max_retries(0)
        .build()
        .unwrap();
    let start = Instant::now();
    let call = |scope: &'static str, outcome: Result<(), ApiError>| {
        let options = CallOptions::new().scopes([scope]);
        gate.call_with(options, move || {
            let outcome = outcome.clone();
            async move { outcome.map(|()| ms_since(start)) }
        })
    };
    // The rate spaces calls made one after another, even with nothing else in the way.
    assert_eq!(call("a", Ok(())).await, Ok(0));
    assert_eq!(call("a", Ok(())).await, Ok(250));
    time::sleep(1000 * MS).await;
    assert_eq!(call("a", Ok(())).await, Ok(1250));
    // A throttle of account "a" at 1,500 holds its calls for the second it asks, and no
    // others, when the rate would let them go.
    let throttled = call("a", Err(ApiError::Slow(Some(1000), Some("a")))).await;
    assert!(throttled.unwrap_err().is_gave_up());
    time::sleep(250 * MS).await;
    assert_eq!(call("b", Ok(())).await, Ok(1750));
    time::sleep(250 * MS).await;
    assert_eq!(call("a", Ok(())).await, Ok(2500));
    // A throttle of every call at 2,750 holds every call; the first after it, 250 ms after
    // the backoff ended, says that calls resume.
    let throttled = call("b", Err(ApiError::Slow(Some(1000), None))).await;
    assert!(throttled.unwrap_err().is_gave_up());
    time::sleep(1250 * MS).await;
    assert_eq!(call("b", Ok(())).await, Ok(4000));
    let resumed = events.messages(tracing::Level::INFO, "paceline::gate");
    assert_eq!(resumed, ["backoff ended; calls resume"]);
    assert!(
        events
            .messages(tracing::Level::DEBUG, "paceline::gate")
            .is_empty()
    );
}

#[test]
fn a_gate_shows_its_state_when_debugged() {
    let gate = gate(3);
    let shown = format!("{gate:?}");
    assert!(shown.starts_with("Gate {"), "{shown}");
    assert!(shown.contains("max_in_flight: 3"), "{shown}");
}

#[tokio::test(start_paused = true)]
async fn mapped_streams_are_terminated_only_once_every_result_is_out() {
    use futures::stream::FusedStream;
    let gate = gate(2);
    let call = |i: u64| async move {
        time::sleep(Duration::from_millis(10 * (3 - i))).await;
        Ok::<_, ApiError>(i)
    };
    let mut ordered = Box::pin(stream::iter(0..3).throttled_map(&gate, call));
    assert!(!ordered.is_terminated(), "nothing pulled yet");
    assert_eq!(ordered.next().await, Some(Ok(0)));
    // Results waiting for their turn, or calls still running, keep it going.
    assert!(!ordered.is_terminated());
    assert_eq!(ordered.next().await, Some(Ok(1)));
    assert!(!ordered.is_terminated());
    assert_eq!(ordered.next().await, Some(Ok(2)));
    assert_eq!(ordered.next().await, None);
    assert!(ordered.is_terminated());

    let mut unordered = Box::pin(stream::iter(0..3).throttled_map_unordered(&gate, call));
    assert!(!unordered.is_terminated(), "nothing pulled yet");
    assert_eq!(unordered.next().await, Some(Ok(1)));
    assert!(!unordered.is_terminated(), "calls still run");
    let rest: Vec<_> = unordered.by_ref().collect().await;
    assert_eq!(rest, [Ok(0), Ok(2)]);
    assert!(unordered.is_terminated());
}

#[test]
fn settings_at_their_limits_are_taken_and_just_past_them_refused() {
    let ok = |b: paceline::GateBuilder<ApiError>| b.build().map(|_| ()).unwrap();
    let err = |b: paceline::GateBuilder<ApiError>| b.build().unwrap_err();
    // A base equal to its cap, a floor equal to its ceiling, the smallest positive rate.
    ok(Gate::builder(classify).backoff(Duration::from_secs(1), Duration::from_secs(1)));
    ok(Gate::builder(classify).rate(5.0).adaptive(5.0, 5.0));
    ok(Gate::builder(classify).rate(f64::MIN_POSITIVE));
    assert_eq!(
        err(Gate::builder(classify).rate(0.0)),
        ConfigError::InvalidRate {
            which: "start",
            value: 0.0
        }
    );
    assert_eq!(
        err(Gate::builder(classify).adaptive(0.0, 5.0)),
        ConfigError::InvalidRate {
            which: "floor",
            value: 0.0
        }
    );
    assert_eq!(
        err(Gate::builder(classify).decay_after(0)),
        ConfigError::ZeroDecay
    );
    let shown = format!("{:?}", Gate::builder(classify).max_in_flight(7));
    assert!(shown.contains("max_in_flight: 7"), "{shown}");
}

#[tokio::test(start_paused = true)]
async fn a_rate_set_after_adaptive_still_adapts() {
    // In either order, the rate is where it starts and the bounds are the adaptive ones.
    let gate = Gate::builder(classify)
        .adaptive(1.0, 100.0)
        .rate(40.0)
        .max_retries(0)
        .build()
        .unwrap();
    assert_eq!(gate.stats().rate, Some(40.0));
    let _ = gate
        .call(|| async { Err::<(), _>(ApiError::Slow(Some(100), None)) })
        .await;
    let cut = gate.stats().rate.unwrap();
    assert!(cut < 40.0, "a throttle cut the rate: {cut}");
}

#[test]
fn a_scope_is_its_name() {
    let scope = paceline::Scope::from("acct-7");
    assert_eq!(scope.as_str(), "acct-7");
    assert_eq!(format!("{scope:?}"), "\"acct-7\"");
    assert_eq!(paceline::Scope::from(String::from("acct-7")), scope);
}

#[tokio::test(start_paused = true)]
async fn a_waiting_call_polled_from_another_task_wakes_that_task() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Poll, Wake, Waker};
    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
    let gate = gate(1);
    // Another task holds the one slot for 100 ms.
    let holder = tokio::spawn({
        let gate = gate.clone();
        async move {
            gate.call(|| time::sleep(100 * MS).map(Ok::<_, ApiError>))
                .await
        }
    });
    tokio::task::yield_now().await;
    assert_eq!(gate.stats().in_flight, 1);
    let mut waiting: std::pin::Pin<Box<dyn Future<Output = Result<(), Error<ApiError>>>>> =
        Box::pin(gate.call(|| async { Ok::<_, ApiError>(()) }));
    let (first, second) = (
        Arc::new(Count(AtomicUsize::new(0))),
        Arc::new(Count(AtomicUsize::new(0))),
    );
    let poll_with = |waiting: &mut std::pin::Pin<Box<dyn Future<Output = _>>>,
                     count: &Arc<Count>| {
        let waker = Waker::from(Arc::clone(count));
        waiting.as_mut().poll(&mut Context::from_waker(&waker))
    };
    assert!(poll_with(&mut waiting, &first).is_pending());
    // The call moves to another task (another waker): that one must be woken, not the first.
    assert!(poll_with(&mut waiting, &second).is_pending());
    holder.await.unwrap().unwrap();
    assert_eq!(
        second.0.load(Ordering::Relaxed),
        1,
        "the task polling it now is woken"
    );
    assert_eq!(first.0.load(Ordering::Relaxed), 0);
    assert!(matches!(
        poll_with(&mut waiting, &second),
        Poll::Ready(Ok(()))
    ));
}

#[tokio::test(start_paused = true)]
async fn mapped_streams_give_up_after_the_retry_limit_with_the_attempt_count() {
    let gate = Gate::builder(classify).max_retries(2).build().unwrap();
    let always_slow = |_| async { Err::<(), _>(ApiError::Slow(Some(10), None)) };
    let gave_up = Err(Error::GaveUp {
        attempts: 3,
        last: ApiError::Slow(Some(10), None),
    });
    let ordered: Vec<_> = stream::iter(0..2)
        .throttled_map(&gate, always_slow)
        .collect()
        .await;
    assert_eq!(ordered, [gave_up.clone(), gave_up.clone()]);
    let unordered: Vec<_> = stream::iter(0..2)
        .throttled_map_unordered(&gate, always_slow)
        .collect()
        .await;
    assert_eq!(unordered, [gave_up.clone(), gave_up]);
    let stats = gate.stats();
    assert_eq!((stats.calls, stats.retries, stats.gave_up), (12, 8, 4));
}

#[tokio::test(start_paused = true)]
async fn mapped_streams_wait_for_an_upstream_that_is_slow_to_give_its_items() {
    // Each item comes 100 ms after the one before, and its call takes 10 ms: between items
    // nothing is in flight and upstream is pending, which is not its end.
    let gate = gate(4);
    let start = Instant::now();
    let arrivals = || {
        stream::iter(0..4u64).then(move |i| async move {
            time::sleep_until(start + Duration::from_millis(100 * i)).await;
            i
        })
    };
    let call = |i: u64| async move {
        time::sleep(10 * MS).await;
        Ok::<_, ApiError>(i)
    };
    let ordered: Vec<_> = arrivals().throttled_map(&gate, call).collect().await;
    assert_eq!(ordered, [Ok(0), Ok(1), Ok(2), Ok(3)]);
    let start = Instant::now();
    let mut unordered = Box::pin(
        stream::iter(0..4u64)
            .then(move |i| async move {
                time::sleep_until(start + Duration::from_millis(100 * i)).await;
                i
            })
            .throttled_map_unordered(&gate, call),
    );
    let shown = format!("{unordered:?}");
    assert!(shown.starts_with("ThrottledMapUnordered {"), "{shown}");
    let mut got = Vec::new();
    while let Some(result) = unordered.next().await {
        got.push((result.unwrap(), ms_since(start)));
    }
    assert_eq!(got, [(0, 10), (1, 110), (2, 210), (3, 310)]);
    let ordered = stream::iter(0..1u64).throttled_map(&gate, call);
    assert!(format!("{ordered:?}").starts_with("ThrottledMap {"));
}
