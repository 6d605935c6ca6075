//! The `metrics` feature: every gate's counters agree with its `GateStats`, its gauges show
//! its state whenever they are read, its labels carry its name; and the `tracing` span of
//! every call, with its wait and its attempts. All in paused time, against the simulated API
//! where a server is needed.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use metrics_util::registry::{AtomicStorage, Registry};
use paceline::metrics as names;
use paceline::prelude::*;
use paceline::{Error, Gate, GateStats, Page, RateLimited};
use paceline_sim::{Policy, Rejected, Server};
use tokio::time::{Instant, advance, sleep};

#[cfg(feature = "redis")]
use crate::support::redis_server;
use crate::support::scenarios::{self, MS, SEC};

// ---------------------------------------------------------------------------------------------
// A recorder the tests read at any time

/// A recorder that keeps every value in place, so that a test can read a gauge in the
/// middle of a run without disturbing it (`metrics-util`'s debugging recorder resets what it
/// reads).
#[derive(Clone)]
struct Recorded {
    registry: Arc<Registry<Key, AtomicStorage>>,
}

impl Recorded {
    fn new() -> Self {
        Self {
            registry: Arc::new(Registry::atomic()),
        }
    }

    /// Builds a gate with this recorder as the thread's own, so that tests running side by
    /// side in one process do not count one another's calls.
    fn build<E>(&self, builder: paceline::GateBuilder<E>) -> Gate<E> {
        metrics::with_local_recorder(self, || builder.build().expect("valid settings"))
    }

    fn key(name: &'static str, gate: &str) -> Key {
        Key::from_parts(
            name,
            vec![metrics::Label::new(names::LABEL, gate.to_owned())],
        )
    }

    fn counter(&self, name: &'static str, gate: &str) -> u64 {
        let handle = self.registry.get_counter(&Self::key(name, gate));
        let handle = handle.unwrap_or_else(|| panic!("no counter {name} for gate {gate}"));
        handle.load(Ordering::SeqCst)
    }

    fn gauge(&self, name: &'static str, gate: &str) -> Option<f64> {
        let handle = self.registry.get_gauge(&Self::key(name, gate))?;
        Some(f64::from_bits(handle.load(Ordering::SeqCst)))
    }

    /// Every metric name recorded, with the `gate` label of each.
    fn keys(&self) -> BTreeSet<(String, String)> {
        let mut keys = BTreeSet::new();
        let mut add = |key: &Key| {
            let labels: Vec<_> = key.labels().map(|l| (l.key(), l.value())).collect();
            // The gate's name; and for the gauges by priority, the priority too.
            let by_priority = [names::QUEUED_BY_PRIORITY, names::IN_FLIGHT_BY_PRIORITY];
            let count = if by_priority.contains(&key.name()) {
                2
            } else {
                1
            };
            assert_eq!(labels.len(), count, "{key:?} has {count} labels");
            assert_eq!(labels[0].0, names::LABEL);
            keys.insert((key.name().to_owned(), labels[0].1.to_owned()));
        };
        self.registry.visit_counters(|key, _| add(key));
        self.registry.visit_gauges(|key, _| add(key));
        keys
    }

    /// The counters, as `GateStats` counts them.
    fn counted(&self, gate: &str) -> Counted {
        Counted {
            calls: self.counter(names::CALLS, gate),
            successes: self.counter(names::SUCCESSES, gate),
            other_errors: self.counter(names::ERRORS, gate),
            throttles: self.counter(names::THROTTLES, gate),
            retries: self.counter(names::RETRIES, gate),
            gave_up: self.counter(names::GAVE_UP, gate),
        }
    }

    /// The gauges, as `GateStats` shows them.
    fn shown(&self, gate: &str) -> Shown {
        let gauge = |name| {
            self.gauge(name, gate)
                .expect("the gate's gauges are set at build")
        };
        Shown {
            in_flight: gauge(names::IN_FLIGHT),
            queued: gauge(names::QUEUED),
            rate: self.gauge(names::RATE, gate),
            backing_off: gauge(names::BACKING_OFF),
        }
    }
}

impl Recorder for Recorded {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        self.registry
            .get_or_create_counter(key, |c| Counter::from_arc(Arc::clone(c)))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        self.registry
            .get_or_create_gauge(key, |g| Gauge::from_arc(Arc::clone(g)))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        self.registry
            .get_or_create_histogram(key, |h| Histogram::from_arc(Arc::clone(h)))
    }
}

#[derive(Debug, PartialEq)]
struct Counted {
    calls: u64,
    successes: u64,
    other_errors: u64,
    throttles: u64,
    retries: u64,
    gave_up: u64,
}

impl From<&GateStats> for Counted {
    fn from(stats: &GateStats) -> Self {
        Self {
            calls: stats.calls,
            successes: stats.successes,
            other_errors: stats.other_errors,
            throttles: stats.throttles,
            retries: stats.retries,
            gave_up: stats.gave_up,
        }
    }
}

#[derive(Debug, PartialEq)]
struct Shown {
    in_flight: f64,
    queued: f64,
    rate: Option<f64>,
    backing_off: f64,
}

impl Shown {
    /// What the gauges should show for `stats`, at the instant it was taken.
    fn of(stats: &GateStats) -> Self {
        Self {
            in_flight: stats.in_flight as f64,
            queued: stats.queued as f64,
            rate: stats.rate,
            backing_off: if stats.backoff_until.is_some() {
                1.0
            } else {
                0.0
            },
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Metrics

/// A call's failure: the server's throttle, or a request the API refused for itself.
#[derive(Debug)]
enum Failure {
    Server(Rejected),
    Invalid,
}

fn classify(failure: &Failure) -> Option<RateLimited> {
    match failure {
        Failure::Server(rejected) => scenarios::classify(rejected),
        Failure::Invalid => None,
    }
}

/// `tasks` tasks share `calls` calls through `gate` to `server`; every 25th is refused.
async fn run(gate: &Gate<Failure>, server: &Server, tasks: usize, calls: usize) {
    let next = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let (gate, server, next) = (gate.clone(), server.clone(), Arc::clone(&next));
            tokio::spawn(async move {
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= calls {
                        return;
                    }
                    let _ = gate
                        .call(|| {
                            let server = server.clone();
                            async move {
                                if n % 25 == 24 {
                                    return Err(Failure::Invalid);
                                }
                                server.call(None).await.map_err(Failure::Server)
                            }
                        })
                        .await;
                }
            })
        })
        .collect();
    for handle in handles {
        handle.await.expect("a task panicked");
    }
}

#[tokio::test(start_paused = true)]
async fn counters_agree_with_gate_stats_after_a_run_against_the_sim() {
    let recorded = Recorded::new();
    // S1's server (a token bucket of 4/s, no Retry-After), a gate that starts five times too
    // fast and retries once: throttles, retries, calls given up and refused calls.
    let server = scenarios::s1_server();
    let gate = recorded.build(
        Gate::builder(classify)
            .name("ads")
            .max_in_flight(10)
            .rate(20.0)
            .adaptive(0.5, 100.0)
            .max_retries(1),
    );
    let calls = tokio::spawn({
        let (gate, server) = (gate.clone(), server.clone());
        async move { run(&gate, &server, 10, 300).await }
    });
    // The gauges, the adaptive rate's among them, read while it moves.
    let readings = sample(&recorded, &gate, 10 * SEC).await;
    let rates: BTreeSet<_> = readings
        .iter()
        .filter_map(|(_, shown)| shown.rate.map(f64::to_bits))
        .collect();
    assert!(rates.len() > 10, "the rate moved: {} rates", rates.len());
    calls.await.expect("the calls' task");

    let stats = gate.stats();
    let counted = recorded.counted("ads");
    assert_eq!(counted, Counted::from(&stats));
    // Every counter moved, so each was compared with something.
    assert!(
        counted.successes > 0
            && counted.other_errors > 0
            && counted.throttles > 0
            && counted.retries > 0
            && counted.gave_up > 0,
        "{counted:?}"
    );
    // And the server saw the same.
    let log = server.log();
    assert_eq!(counted.throttles, log.rejected() as u64);
    assert_eq!(counted.successes, log.accepted() as u64);
    assert_eq!(counted.calls, counted.successes + counted.throttles + 12);
    // The rate gauge followed the adaptive rate down and back up to where it is now.
    assert_eq!(recorded.shown("ads"), Shown::of(&stats));
    assert_ne!(stats.rate, Some(20.0), "the rate moved");
}

/// Reads the gauges of `gate` every 10 ms until `until`, and checks that each reading shows
/// what `gate.stats()` says at that instant; returns the readings. They are taken 5 ms off
/// the whole 10 ms, where no timer of the run's is due, so that every task due at an instant
/// has run: a backoff's gauge falls in the task that its end wakes, and a reading taken in
/// the same instant before that task runs would see it still up.
async fn sample<E>(recorded: &Recorded, gate: &Gate<E>, until: Duration) -> Vec<(Duration, Shown)> {
    let start = Instant::now();
    let mut readings = Vec::new();
    sleep(5 * MS).await;
    while start.elapsed() < until {
        sleep(10 * MS).await;
        let shown = recorded.shown(gate.name());
        assert_eq!(shown, Shown::of(&gate.stats()), "at {:?}", start.elapsed());
        readings.push((start.elapsed(), shown));
    }
    readings
}

#[tokio::test(start_paused = true)]
async fn gauges_show_the_gate_whenever_they_are_read() {
    let recorded = Recorded::new();
    // 2 requests per second; a rejected one is told to retry when the window ends.
    let server = Server::builder()
        .latency(50 * MS)
        .global(Policy::fixed_window(2, SEC).retry_after(true))
        .build();
    let gate = recorded.build(
        Gate::builder(classify)
            .name("search")
            .max_in_flight(2)
            .max_retries(5),
    );
    let calls = tokio::spawn({
        let (gate, server) = (gate.clone(), server.clone());
        async move { run(&gate, &server, 6, 6).await }
    });
    let readings = sample(&recorded, &gate, 3 * SEC).await;
    calls.await.expect("the calls' task");

    let at = |ms: u64| {
        let (_, shown) = readings
            .iter()
            .find(|(at, _)| *at == Duration::from_millis(ms))
            .expect("a reading then");
        shown
    };
    // Two calls go, four wait.
    let waiting = Shown {
        in_flight: 2.0,
        queued: 4.0,
        rate: None,
        backing_off: 0.0,
    };
    assert_eq!(*at(55), waiting);
    // At 100 ms both were accepted and the next two went; the server's window was full, so
    // they were rejected (at 150 ms, answered at 200 ms) and told to wait until it ends.
    let backing_off = Shown {
        in_flight: 0.0,
        queued: 4.0,
        rate: None,
        backing_off: 1.0,
    };
    assert_eq!(*at(505), backing_off);
    // Every call is over: nothing in flight, nothing waiting, no backoff.
    let (_, last) = readings.last().expect("readings");
    let idle = Shown {
        in_flight: 0.0,
        queued: 0.0,
        rate: None,
        backing_off: 0.0,
    };
    assert_eq!(*last, idle);
    assert_eq!(recorded.counted("search"), Counted::from(&gate.stats()));
}

#[tokio::test(start_paused = true)]
async fn the_backoff_gauge_falls_when_the_backoff_ends_even_with_nothing_waiting() {
    let recorded = Recorded::new();
    let gate = recorded.build(
        Gate::builder(|after: &u64| {
            Some(RateLimited::new().retry_after(Duration::from_secs(*after)))
        })
        .max_retries(0),
    );
    let backing_off = || recorded.gauge(names::BACKING_OFF, "default");
    assert_eq!(backing_off(), Some(0.0));
    let start = Instant::now();
    // Two calls given up at once, so that nothing waits for the backoff's end: one throttled
    // at once (5 s), the other after 2 s (10 s, moving the end to 12 s).
    let at_once = gate.call(|| async { Err::<(), _>(5) });
    let later = gate.call(|| async {
        sleep(2 * SEC).await;
        Err::<(), _>(10)
    });
    let check = async {
        sleep(SEC).await;
        assert_eq!(backing_off(), Some(1.0), "at 1 s");
    };
    // `later` is polled first, so that it starts before the throttle.
    let (later, at_once, ()) = futures::join!(later, at_once, check);
    assert!(matches!(at_once, Err(Error::GaveUp { .. })));
    assert!(matches!(later, Err(Error::GaveUp { .. })));
    assert_eq!(start.elapsed(), 2 * SEC);
    advance(3 * SEC).await;
    assert_eq!(backing_off(), Some(1.0), "at 5 s");
    advance(6 * SEC).await;
    assert_eq!(backing_off(), Some(1.0), "at 11 s");
    assert!(gate.stats().backoff_until.is_some());
    advance(SEC - MS).await;
    assert_eq!(backing_off(), Some(1.0), "at 11.999 s");
    advance(MS).await;
    assert_eq!(gate.stats().backoff_until, None, "at 12 s");
    // The gauge falls in the task that the backoff's end wakes: let it run.
    tokio::task::yield_now().await;
    assert_eq!(backing_off(), Some(0.0), "at 12 s");
}

#[tokio::test(start_paused = true)]
async fn a_scope_s_backoff_is_not_the_gate_s() {
    let recorded = Recorded::new();
    let gate = recorded.build(Gate::builder(|scope: &&'static str| {
        Some(RateLimited::new().retry_after(SEC).scope(*scope))
    }));
    let mut tries = 0;
    gate.call_in(["acct-1"], || {
        tries += 1;
        let first = tries == 1;
        async move { if first { Err("acct-1") } else { Ok(()) } }
    })
    .await
    .expect("the retry succeeds");
    assert_eq!(recorded.gauge(names::BACKING_OFF, "default"), Some(0.0));
    assert_eq!(recorded.counted("default"), Counted::from(&gate.stats()));
    assert_eq!(recorded.counter(names::RETRIES, "default"), 1);
}

#[tokio::test(start_paused = true)]
async fn labels_carry_each_gate_s_name() {
    let recorded = Recorded::new();
    let ok = |_: &()| None;
    let ads = recorded.build(Gate::builder(ok).name("ads"));
    let search = recorded.build(Gate::builder(ok).name(format!("search-{}", 2)).rate(10.0));
    let unnamed = recorded.build(Gate::builder(ok));
    assert_eq!(unnamed.name(), names::DEFAULT_GATE_NAME);
    for (gate, calls) in [(&ads, 3), (&search, 2), (&unnamed, 1)] {
        for _ in 0..calls {
            gate.call(|| async { Ok::<_, ()>(()) }).await.unwrap();
        }
    }
    assert_eq!(recorded.counter(names::CALLS, "ads"), 3);
    assert_eq!(recorded.counter(names::CALLS, "search-2"), 2);
    assert_eq!(recorded.counter(names::CALLS, "default"), 1);
    assert_eq!(recorded.gauge(names::RATE, "search-2"), Some(10.0));
    assert_eq!(
        recorded.gauge(names::RATE, "ads"),
        None,
        "no rate, no gauge"
    );
    let keys = recorded.keys();
    let gates: BTreeSet<_> = keys.iter().map(|(_, gate)| gate.as_str()).collect();
    assert_eq!(gates, BTreeSet::from(["ads", "default", "search-2"]));
    let metrics: BTreeSet<_> = keys.iter().map(|(name, _)| name.as_str()).collect();
    let all = [
        names::CALLS,
        names::SUCCESSES,
        names::ERRORS,
        names::THROTTLES,
        names::RETRIES,
        names::GAVE_UP,
        names::IN_FLIGHT,
        names::QUEUED,
        names::QUEUED_BY_PRIORITY,
        names::IN_FLIGHT_BY_PRIORITY,
        names::RATE,
        names::BACKING_OFF,
    ];
    assert_eq!(metrics, BTreeSet::from(all));
}

#[tokio::test(start_paused = true)]
async fn streams_and_pages_are_counted_and_dropped_calls_leave_the_gauges() {
    let recorded = Recorded::new();
    let gate = recorded.build(Gate::builder(|_: &()| Some(RateLimited::new())).max_in_flight(2));
    let mapped: Vec<_> = futures::stream::iter(0..5)
        .throttled_map(&gate, |n| async move { Ok::<_, ()>(n) })
        .collect()
        .await;
    assert_eq!(mapped.len(), 5);
    let rows: Vec<_> = gate
        .paged(|token: Option<u32>| async move {
            let next = token.unwrap_or(0) + 1;
            Ok::<_, ()>(Page {
                rows: vec![next],
                next: (next < 3).then_some(next),
            })
        })
        .collect()
        .await;
    assert_eq!(rows.len(), 3);
    // Two calls that never end hold both slots; a third waits; all three are dropped.
    let mut stuck: Vec<_> = (0..3)
        .map(|_| Box::pin(gate.call(futures::future::pending::<Result<(), ()>>)))
        .collect();
    for call in &mut stuck {
        assert!(futures::poll!(call.as_mut()).is_pending());
    }
    assert_eq!(recorded.shown("default"), Shown::of(&gate.stats()));
    assert_eq!((gate.stats().in_flight, gate.stats().queued), (2, 1));
    drop(stuck);
    assert_eq!(recorded.shown("default"), Shown::of(&gate.stats()));
    assert_eq!((gate.stats().in_flight, gate.stats().queued), (0, 0));
    assert_eq!(recorded.counted("default"), Counted::from(&gate.stats()));
    assert_eq!(recorded.counter(names::CALLS, "default"), 5 + 3 + 2);
}

/// A fleet's backoff, begun by another process (here another gate on the same Redis
/// namespace), reaches the gate's gauges too; and a call the store turned back is counted
/// once, when it goes out. Real time: the store talks to a real `redis-server`.
#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backoff_the_fleet_began_is_shown_and_a_turned_back_call_counted_once() {
    let redis = redis_server::RedisServer::start();
    let recorded = Recorded::new();
    let store = || paceline::RedisStore::open(&redis.url(), "metrics-fleet").expect("a URL");
    let gate = |name: &'static str| {
        let classify = |ms: &u64| Some(RateLimited::new().retry_after(Duration::from_millis(*ms)));
        recorded.build(
            Gate::builder(classify)
                .name(name)
                .max_retries(0)
                .store(store()),
        )
    };
    let (a, b) = (gate("a"), gate("b"));
    // `a` is told to wait 2 s, and tells the fleet.
    let throttled = a.call(|| async { Err::<(), u64>(2_000) }).await;
    assert!(matches!(throttled, Err(Error::GaveUp { .. })));
    sleep(200 * MS).await;
    // `b` asks the store, which holds it back: its call waits in line for the fleet's end.
    let held = tokio::spawn({
        let b = b.clone();
        async move { b.call(|| async { Ok::<_, u64>(()) }).await }
    });
    sleep(500 * MS).await;
    let stats = b.stats();
    assert_eq!(
        (stats.held_by_fleet, stats.queued, stats.in_flight),
        (1, 1, 0)
    );
    assert_eq!(recorded.shown("b"), Shown::of(&stats));
    assert_eq!(recorded.shown("b").backing_off, 1.0);
    assert_eq!(
        recorded.counter(names::CALLS, "b"),
        0,
        "turned back before it went out"
    );
    held.await
        .expect("the held call's task")
        .expect("it went through");
    assert_eq!(recorded.counted("b"), Counted::from(&b.stats()));
    assert_eq!(recorded.counted("a"), Counted::from(&a.stats()));
    assert_eq!(recorded.counter(names::CALLS, "b"), 1);
}

/// A gate with a store counts, beside `GateStats`, the starts its store answered with
/// "held": reading that counter from the recorder gives what `GateStats::held_by_fleet`
/// says. Real time, against a real `redis-server`.
#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_the_fleet_held_back_are_counted_as_gate_stats_counts_them() {
    let redis = redis_server::RedisServer::start();
    let recorded = Recorded::new();
    let gate = |name: &'static str| {
        let classify = |ms: &u64| Some(RateLimited::new().retry_after(Duration::from_millis(*ms)));
        // Patient stores, so that a loaded machine's answers still come.
        let store = paceline::RedisStore::open(&redis.url(), "metrics-held")
            .expect("a URL")
            .timeout(5 * SEC);
        recorded.build(
            Gate::builder(classify)
                .name(name)
                .max_retries(0)
                .store(store),
        )
    };
    let (a, b) = (gate("a"), gate("b"));
    // A gate with a store has both counters from its build, at 0.
    assert_eq!(recorded.counter(names::HELD_BY_FLEET, "b"), 0);
    assert_eq!(recorded.counter(names::STORE_UNANSWERED, "b"), 0);
    // Each gate's connection is made and the scripts loaded before the backoff's clock runs.
    for gate in [&a, &b] {
        gate.call(|| async { Ok::<_, u64>(()) }).await.unwrap();
    }
    let throttled = a.call(|| async { Err::<(), u64>(1_000) }).await;
    assert!(matches!(throttled, Err(Error::GaveUp { .. })));
    // `a` tells the fleet without its call waiting for that: wait until Redis has the backoff.
    let client = redis::Client::open(redis.url()).expect("a URL");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("the test's own connection");
    let deadline = Instant::now() + 5 * SEC;
    loop {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("paceline:*backoff*")
            .query_async(&mut conn)
            .await
            .expect("KEYS");
        if !keys.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "the backoff never reached Redis");
        sleep(MS).await;
    }
    // Three calls of `b` start at once and each asks the store, which holds each back until
    // the fleet's backoff ends; then they go.
    let calls = (0..3).map(|_| b.call(|| async { Ok::<_, u64>(()) }));
    for call in futures::future::join_all(calls).await {
        call.expect("a held call goes once the backoff ends");
    }
    let stats = b.stats();
    assert!(stats.held_by_fleet >= 1, "{stats:?}");
    assert_eq!(
        recorded.counter(names::HELD_BY_FLEET, "b"),
        stats.held_by_fleet
    );
    assert_eq!(
        recorded.counter(names::STORE_UNANSWERED, "b"),
        stats.store_unanswered
    );
    // `a`'s own throttle held nothing of its own back: its counter stays where its stats are.
    assert_eq!(
        recorded.counter(names::HELD_BY_FLEET, "a"),
        a.stats().held_by_fleet
    );
    assert_eq!(recorded.counted("b"), Counted::from(&stats));
}

/// Starts that went ahead because the store did not answer are counted as
/// `GateStats::store_unanswered` counts them, and starts the store answered are not: a real
/// `redis-server` answers a few calls, then is killed, and the next calls go on without it.
#[cfg(feature = "redis")]
#[tokio::test]
async fn starts_the_store_left_unanswered_are_counted_as_gate_stats_counts_them() {
    let mut redis = redis_server::RedisServer::start();
    let recorded = Recorded::new();
    // A patient store, so that a loaded machine's first connection is still answered.
    let store = paceline::RedisStore::open(&redis.url(), "metrics-unanswered")
        .expect("a URL")
        .timeout(5 * SEC);
    let gate = recorded.build(
        Gate::builder(|_: &()| Some(RateLimited::new()))
            .name("c")
            .store(store),
    );
    let unanswered = || recorded.counter(names::STORE_UNANSWERED, "c");
    for _ in 0..3 {
        gate.call(|| async { Ok::<_, ()>(()) }).await.unwrap();
    }
    assert_eq!(gate.stats().store_unanswered, 0, "Redis answered");
    assert_eq!(unanswered(), 0);
    redis.kill();
    for _ in 0..5 {
        gate.call(|| async { Ok::<_, ()>(()) }).await.unwrap();
    }
    let stats = gate.stats();
    assert!(stats.store_unanswered >= 1, "{stats:?}");
    assert_eq!(unanswered(), stats.store_unanswered);
    assert_eq!(
        recorded.counter(names::HELD_BY_FLEET, "c"),
        stats.held_by_fleet
    );
    assert_eq!(recorded.counted("c"), Counted::from(&stats));
}

/// The line and the calls in flight by priority: each call counts in its own priority's
/// gauge, waiting from its arrival to its start (or its end, dropped), in flight from its
/// start to its end; the gauges add up to the line and to the calls in flight.
#[tokio::test(start_paused = true)]
async fn the_line_and_the_calls_in_flight_are_shown_by_priority() {
    use paceline::{CallOptions, Priority};

    let recorded = Recorded::new();
    let gate = recorded.build(Gate::builder(|_: &()| Some(RateLimited::new())).max_in_flight(1));
    let by = |name: &'static str, gate: &str| {
        ["interactive", "normal", "bulk"].map(|priority| {
            let key = Key::from_parts(
                name,
                vec![
                    metrics::Label::new(names::LABEL, gate.to_owned()),
                    metrics::Label::new(names::PRIORITY_LABEL, priority),
                ],
            );
            let handle = recorded.registry.get_gauge(&key).expect("set at build");
            f64::from_bits(handle.load(Ordering::SeqCst))
        })
    };
    let by_priority = |gate: &str| by(names::QUEUED_BY_PRIORITY, gate);
    let in_flight = |gate: &str| by(names::IN_FLIGHT_BY_PRIORITY, gate);
    assert_eq!(by_priority("default"), [0.0, 0.0, 0.0]);
    assert_eq!(in_flight("default"), [0.0, 0.0, 0.0]);
    let call = |priority| {
        Box::pin(gate.call_with(
            CallOptions::new().priority(priority),
            futures::future::pending::<Result<(), ()>>,
        ))
    };
    // One runs; then two bulk calls, one normal and one interactive wait.
    let mut calls = vec![
        call(Priority::Normal),
        call(Priority::Bulk),
        call(Priority::Bulk),
        call(Priority::Normal),
        call(Priority::Interactive),
    ];
    for call in &mut calls {
        assert!(futures::poll!(call.as_mut()).is_pending());
    }
    assert_eq!(by_priority("default"), [1.0, 1.0, 2.0]);
    assert_eq!(recorded.shown("default").queued, 4.0);
    assert_eq!(in_flight("default"), [0.0, 1.0, 0.0]);
    // The call running ends: the interactive one starts.
    drop(calls.remove(0));
    for call in &mut calls {
        assert!(futures::poll!(call.as_mut()).is_pending());
    }
    assert_eq!(by_priority("default"), [0.0, 1.0, 2.0]);
    assert_eq!(in_flight("default"), [1.0, 0.0, 0.0]);
    drop(calls);
    assert_eq!(by_priority("default"), [0.0, 0.0, 0.0]);
    assert_eq!(in_flight("default"), [0.0, 0.0, 0.0]);
    // An interactive call that nothing holds, ended by its value and by a throttle given up.
    let gate = recorded.build(
        Gate::builder(|_: &()| Some(RateLimited::new()))
            .name("ended")
            .max_retries(0),
    );
    let interactive = CallOptions::new().priority(Priority::Interactive);
    let ok = gate.call_with(interactive.clone(), || async { Ok::<_, ()>(()) });
    ok.await.unwrap();
    let throttled = gate.call_with(interactive, || async { Err::<(), _>(()) });
    assert!(throttled.await.is_err());
    assert_eq!(in_flight("ended"), [0.0, 0.0, 0.0]);
}

/// The calls of the scopes `scope_metrics` lists are counted apart, labelled `scope` beside
/// `gate`: each attempt that went out (a retry too) and each throttle, whatever the call's
/// other scopes. No other scope has a series.
#[tokio::test(start_paused = true)]
async fn the_scopes_listed_are_counted_apart_and_no_other() {
    let recorded = Recorded::new();
    let gate = recorded.build(
        Gate::builder(|scope: &&'static str| {
            Some(RateLimited::new().retry_after(SEC).scope(*scope))
        })
        .name("llm")
        .scope_metrics(["model:large"])
        .scope_metrics(["model:tiny"]),
    );
    let mut tries = 0;
    gate.call_in(["model:large"], || {
        tries += 1;
        let first = tries == 1;
        async move { if first { Err("model:large") } else { Ok(()) } }
    })
    .await
    .expect("the retry succeeds");
    let ok = || async { Ok::<_, &str>(()) };
    gate.call_in(["tenant-1", "model:large"], ok).await.unwrap();
    gate.call_in(["model:small"], ok).await.unwrap();
    let scoped = |name: &'static str, scope: &str| {
        let labels = vec![
            metrics::Label::new(names::LABEL, "llm"),
            metrics::Label::new(names::SCOPE_LABEL, scope.to_owned()),
        ];
        let handle = recorded
            .registry
            .get_counter(&Key::from_parts(name, labels));
        handle.map(|counter| counter.load(Ordering::SeqCst))
    };
    assert_eq!(scoped(names::SCOPE_CALLS, "model:large"), Some(3));
    assert_eq!(scoped(names::SCOPE_THROTTLES, "model:large"), Some(1));
    // Listed, and never called: there from the gate's build, at 0.
    assert_eq!(scoped(names::SCOPE_CALLS, "model:tiny"), Some(0));
    assert_eq!(scoped(names::SCOPE_CALLS, "model:small"), None);
    assert_eq!(scoped(names::SCOPE_CALLS, "tenant-1"), None);
    assert_eq!(recorded.counter(names::CALLS, "llm"), 4);
}
