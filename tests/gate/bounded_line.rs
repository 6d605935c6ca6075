//! The gate's bounded line (`GateBuilder::max_queued`): a call that finds the line full is
//! turned away at once, its future never made; a call let in, and a throttled call's retry,
//! never are; nothing is lost; the line takes calls again as soon as it drains below its
//! bound. Through every way in: calls, mapped streams, a paged listing, the tower service, the
//! reqwest middleware. In paused time, exact to the millisecond; against a reference model
//! (a property test); and against the simulated API.

use crate::support;
use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use futures::{StreamExt, stream};
use paceline::prelude::*;
use paceline::{CallOptions, Error, Gate, Page, RateLimited};
use tokio::time::{Instant, sleep, sleep_until};

const MS: Duration = Duration::from_millis(1);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[derive(Debug, Clone, PartialEq)]
enum ApiError {
    /// Rate-limited, with a Retry-After of this many ms.
    Slow(u64),
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ApiError::Slow(after) = self;
        write!(f, "slow down for {after} ms")
    }
}

impl std::error::Error for ApiError {}

fn classify(e: &ApiError) -> Option<RateLimited> {
    let ApiError::Slow(after) = e;
    Some(RateLimited::new().retry_after(Duration::from_millis(*after)))
}

fn bounded(max_in_flight: usize, max_queued: usize) -> Gate<ApiError> {
    Gate::builder(classify)
        .max_in_flight(max_in_flight)
        .max_queued(max_queued)
        .build()
        .unwrap()
}

/// What became of one call, in ms since the test's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// It ran: its last attempt started and ended then, after this many attempts.
    Done {
        started: u64,
        ended: u64,
        attempts: u32,
    },
    /// The gate turned it away then; its future was never made.
    TurnedAway { at: u64 },
}

/// A call that arrives `arrive_ms` after `start` and whose attempts each take `work_ms`;
/// `throttled` of its first attempts are throttled, with a Retry-After of `retry_ms`.
async fn call_at(
    gate: &Gate<ApiError>,
    start: Instant,
    arrive_ms: u64,
    work_ms: u64,
    (throttled, retry_ms): (u32, u64),
) -> Fate {
    if arrive_ms > 0 {
        sleep_until(start + ms(arrive_ms)).await;
    }
    let attempts = Cell::new(0);
    let started = Cell::new(0);
    let answer = gate
        .call(|| {
            attempts.set(attempts.get() + 1);
            let attempt = attempts.get();
            let started = &started;
            async move {
                started.set(support::ms_since(start));
                sleep(ms(work_ms)).await;
                match attempt <= throttled {
                    true => Err(ApiError::Slow(retry_ms)),
                    false => Ok(()),
                }
            }
        })
        .await;
    match answer {
        Ok(()) => Fate::Done {
            started: started.get(),
            ended: support::ms_since(start),
            attempts: attempts.get(),
        },
        Err(Error::Overloaded(_)) => {
            assert_eq!(attempts.get(), 0, "a call turned away is never made");
            Fate::TurnedAway {
                at: support::ms_since(start),
            }
        }
        Err(other) => panic!("unexpected {other:?}"),
    }
}

/// A call's result, its `Overloaded` told by the bound it names.
fn told<T>(result: Result<T, Error<ApiError>>) -> Result<T, usize> {
    result.map_err(|error| match error {
        Error::Overloaded(overloaded) => overloaded.max_queued(),
        other => panic!("unexpected {other:?}"),
    })
}

const DONE: (u32, u64) = (0, 0);

fn done(started: u64, ended: u64) -> Fate {
    Fate::Done {
        started,
        ended,
        attempts: 1,
    }
}

#[tokio::test(start_paused = true)]
async fn a_full_line_turns_calls_away_at_once_and_takes_them_again_once_it_drains() {
    // One slot, two places in line; every call takes 100 ms.
    let gate = bounded(1, 2);
    let start = Instant::now();
    let fates = futures::join!(
        call_at(&gate, start, 0, 100, DONE),
        call_at(&gate, start, 0, 100, DONE),
        call_at(&gate, start, 0, 100, DONE),
        // Two wait: the fourth is turned away at once.
        call_at(&gate, start, 0, 100, DONE),
        // At 150 ms one waits (the second started at 100): one more may.
        call_at(&gate, start, 150, 100, DONE),
        call_at(&gate, start, 150, 100, DONE),
        // At 250 ms the third runs and one waits: room again.
        call_at(&gate, start, 250, 100, DONE),
    );
    assert_eq!(
        fates,
        (
            done(0, 100),
            done(100, 200),
            done(200, 300),
            Fate::TurnedAway { at: 0 },
            done(300, 400),
            Fate::TurnedAway { at: 150 },
            done(400, 500),
        )
    );
    let stats = gate.stats();
    assert_eq!((stats.calls, stats.successes, stats.turned_away), (5, 5, 2));
    assert_eq!((stats.queued, stats.in_flight), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_throttled_calls_retry_keeps_its_place_in_a_full_line_and_counts_in_it() {
    // One slot, one place in line. The first call is throttled once, for 500 ms.
    let gate = bounded(1, 1);
    let start = Instant::now();
    let fates = futures::join!(
        call_at(&gate, start, 0, 100, (1, 500)),
        call_at(&gate, start, 0, 100, DONE),
        // The line holds one: turned away.
        call_at(&gate, start, 0, 100, DONE),
        // At 200 ms the retry and the second call wait: two, over the bound.
        call_at(&gate, start, 200, 100, DONE),
        // At 650 ms the retry runs and the second call waits: full.
        call_at(&gate, start, 650, 100, DONE),
        // At 750 ms the second call runs: the line is empty, and takes this one.
        call_at(&gate, start, 750, 100, DONE),
    );
    assert_eq!(
        fates,
        (
            Fate::Done {
                started: 600,
                ended: 700,
                attempts: 2
            },
            done(700, 800),
            Fate::TurnedAway { at: 0 },
            Fate::TurnedAway { at: 200 },
            Fate::TurnedAway { at: 650 },
            done(800, 900),
        )
    );
    let stats = gate.stats();
    assert_eq!((stats.throttles, stats.retries, stats.gave_up), (1, 1, 0));
    assert_eq!((stats.successes, stats.turned_away), (3, 3));
}

#[tokio::test(start_paused = true)]
async fn while_a_retry_waits_over_the_bound_the_line_says_so() {
    let gate = bounded(1, 1);
    let start = Instant::now();
    let watch = async {
        sleep(200 * MS).await;
        let at_200 = gate.stats();
        sleep(500 * MS).await;
        (at_200, gate.stats())
    };
    let (_, _, (at_200, at_700)) = futures::join!(
        call_at(&gate, start, 0, 100, (1, 500)),
        call_at(&gate, start, 0, 100, DONE),
        watch,
    );
    // The retry and the call behind it: one over the bound, never more than the bound plus
    // the in-flight limit.
    assert_eq!((at_200.queued, at_200.in_flight), (2, 0));
    assert_eq!((at_700.queued, at_700.in_flight), (0, 1));
}

#[tokio::test(start_paused = true)]
async fn a_call_with_a_deadline_that_finds_the_line_full_is_overloaded_not_late() {
    let gate = bounded(1, 1);
    let start = Instant::now();
    let hurried = async {
        let options = CallOptions::new().max_wait(10 * MS);
        let made = Cell::new(false);
        let answer = gate
            .call_with(options, || {
                made.set(true);
                async { Ok::<_, ApiError>(()) }
            })
            .await;
        (answer, made.get(), support::ms_since(start))
    };
    let (_, _, (answer, made, at)) = futures::join!(
        call_at(&gate, start, 0, 100, DONE),
        call_at(&gate, start, 0, 100, DONE),
        hurried,
    );
    assert!(matches!(answer, Err(Error::Overloaded(_))), "{answer:?}");
    assert!(answer.unwrap_err().is_overloaded());
    assert_eq!((made, at), (false, 0));
}

#[tokio::test(start_paused = true)]
async fn a_waiting_call_dropped_gives_its_place_to_the_next() {
    let gate = bounded(1, 1);
    let start = Instant::now();
    let impatient = async {
        let call = call_at(&gate, start, 0, 100, DONE);
        assert!(tokio::time::timeout(50 * MS, call).await.is_err());
    };
    let (first, (), later) = futures::join!(
        call_at(&gate, start, 0, 100, DONE),
        impatient,
        call_at(&gate, start, 60, 100, DONE),
    );
    assert_eq!((first, later), (done(0, 100), done(100, 200)));
    assert_eq!(gate.stats().turned_away, 0);
}

#[tokio::test(start_paused = true)]
async fn a_bound_of_zero_turns_away_every_call_that_cannot_start_at_once() {
    // Ten calls a second, and no line.
    let gate = Gate::builder(classify)
        .rate(10.0)
        .max_queued(0)
        .build()
        .unwrap();
    let start = Instant::now();
    let fates = futures::join!(
        call_at(&gate, start, 0, 10, DONE),
        call_at(&gate, start, 50, 10, DONE),
        call_at(&gate, start, 100, 10, DONE),
        call_at(&gate, start, 150, 10, DONE),
        call_at(&gate, start, 230, 10, DONE),
    );
    assert_eq!(
        fates,
        (
            done(0, 10),
            Fate::TurnedAway { at: 50 },
            done(100, 110),
            Fate::TurnedAway { at: 150 },
            done(230, 240),
        )
    );
    assert_eq!(gate.stats().queued, 0);
}

#[tokio::test(start_paused = true)]
async fn overloaded_says_what_happened() {
    let gate = bounded(1, 3);
    let start = Instant::now();
    let late = async {
        sleep(MS).await;
        gate.call(|| async { Ok(()) }).await.unwrap_err()
    };
    let (.., error) = futures::join!(
        call_at(&gate, start, 0, 100, DONE),
        call_at(&gate, start, 0, 100, DONE),
        call_at(&gate, start, 0, 100, DONE),
        call_at(&gate, start, 0, 100, DONE),
        late,
    );
    assert_eq!(
        error.to_string(),
        "turned away: 3 calls were already waiting in the gate's line, its max_queued"
    );
    assert!(std::error::Error::source(&error).is_none());
    assert_eq!(error.clone().into_inner(), None);
    assert!(!error.is_deadline() && !error.is_gave_up());
    let Error::Overloaded(overloaded) = error else {
        panic!()
    };
    assert_eq!(overloaded.max_queued(), 3);
}

#[test]
fn overloaded_crosses_threads() {
    fn is_send_sync_unpin<T: Send + Sync + Unpin>() {}
    is_send_sync_unpin::<paceline::Overloaded>();
    is_send_sync_unpin::<Error<std::io::Error>>();
}

// ---------------------------------------------------------------------------------------------
// The streams and the paged listing

/// `n` calls holding as many of a gate's slots from 0 to 250 ms.
async fn occupy(gate: &Gate<ApiError>, n: usize) {
    let busy = (0..n).map(|_| {
        gate.call(|| async {
            sleep(250 * MS).await;
            Ok(())
        })
    });
    for done in futures::future::join_all(busy).await {
        done.unwrap();
    }
}

/// Three slots, two taken by other calls until 250 ms, one place in line; four items of 100
/// ms each.
async fn mapped<S>(
    gate: &Gate<ApiError>,
    map: impl FnOnce(&Gate<ApiError>) -> S,
) -> Vec<(u64, S::Item)>
where
    S: futures::Stream,
{
    let start = Instant::now();
    // The other calls are polled first, and take their slots.
    let ((), out) = futures::join!(occupy(gate, 2), support::record(start, map(gate)));
    out
}

#[tokio::test(start_paused = true)]
async fn throttled_map_yields_a_turned_away_item_in_its_place() {
    let gate = bounded(3, 1);
    let made = Rc::new(Cell::new(Vec::new()));
    let out = mapped(&gate, |gate| {
        let made = Rc::clone(&made);
        stream::iter(0..4u32).throttled_map(gate, move |i| {
            made.set([made.take(), vec![i]].concat());
            async move {
                sleep(100 * MS).await;
                Ok::<_, ApiError>(i)
            }
        })
    })
    .await;
    let out: Vec<_> = out
        .into_iter()
        .map(|(at, result)| (at, told(result)))
        .collect();
    // Item 0 takes the free slot, item 1 the place in line, item 2 finds it full. Item 2's
    // error waits for item 1's result; item 3 arrives when item 0 is done.
    assert_eq!(
        out,
        [(100, Ok(0)), (200, Ok(1)), (200, Err(1)), (300, Ok(3))]
    );
    assert_eq!(made.take(), [0, 1, 3], "item 2's call was never made");
    assert_eq!(gate.stats().turned_away, 1);
}

#[tokio::test(start_paused = true)]
async fn throttled_map_unordered_yields_a_turned_away_item_at_once() {
    let gate = bounded(3, 1);
    let out = mapped(&gate, |gate| {
        stream::iter(0..4u32).throttled_map_unordered(gate, |i| async move {
            sleep(100 * MS).await;
            Ok::<_, ApiError>(i)
        })
    })
    .await;
    let out: Vec<_> = out
        .into_iter()
        .map(|(at, result)| (at, told(result)))
        .collect();
    // Items 2 and 3 each find item 1 in line.
    assert_eq!(out, [(0, Err(1)), (0, Err(1)), (100, Ok(0)), (200, Ok(1))]);
}

#[tokio::test(start_paused = true)]
async fn a_paged_listing_turned_away_yields_its_rows_then_the_error_and_ends() {
    // One page a second, no line: the second page cannot start at once.
    let gate = Gate::builder(classify)
        .rate(1.0)
        .max_queued(0)
        .build()
        .unwrap();
    let fetched = Cell::new(Vec::new());
    let rows: Vec<_> = gate
        .paged(|token: Option<u32>| {
            fetched.set([fetched.take(), vec![token]].concat());
            async move {
                let from = token.unwrap_or(0);
                Ok::<_, ApiError>(Page {
                    rows: vec![from, from + 1],
                    next: Some(from + 2),
                })
            }
        })
        .collect()
        .await;
    let rows: Vec<_> = rows.into_iter().map(told).collect();
    assert_eq!(rows, [Ok(0), Ok(1), Err(0)]);
    assert_eq!(fetched.take(), [None], "the second page was never fetched");
}

// ---------------------------------------------------------------------------------------------
// The tower service and the reqwest middleware

#[cfg(feature = "tower")]
#[tokio::test(start_paused = true)]
async fn the_tower_service_fails_a_request_turned_away_and_never_sends_it() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use paceline::tower::{GateError, GateLayer, Outcome, classify_responses};
    use tower::{ServiceBuilder, ServiceExt};

    let gate: Gate<Outcome<u16, std::convert::Infallible>> =
        Gate::builder(classify_responses(|status: &u16| {
            (*status == 429).then(RateLimited::new)
        }))
        .max_in_flight(1)
        .max_queued(1)
        .build()
        .unwrap();
    let sent = Arc::new(AtomicUsize::new(0));
    let api = tower::service_fn({
        let sent = Arc::clone(&sent);
        move |_: ()| {
            sent.fetch_add(1, Ordering::SeqCst);
            async {
                sleep(100 * MS).await;
                Ok(200)
            }
        }
    });
    let service = ServiceBuilder::new()
        .layer(GateLayer::new(gate.clone()))
        .service(api);
    async fn timed<S: tower::Service<()>>(
        service: S,
        start: Instant,
    ) -> (Result<S::Response, S::Error>, u64) {
        let answer = service.oneshot(()).await;
        (answer, support::ms_since(start))
    }
    let start = Instant::now();
    let (a, b, (c, at)) = futures::join!(
        timed(service.clone(), start),
        timed(service.clone(), start),
        timed(service.clone(), start)
    );
    assert_eq!((a, b), ((Ok(200), 100), (Ok(200), 200)));
    let Err(GateError::Overloaded(overloaded)) = c else {
        panic!("{c:?}")
    };
    assert_eq!((overloaded.max_queued(), at), (1, 0));
    assert_eq!(
        sent.load(Ordering::SeqCst),
        2,
        "the third never reached the service"
    );
    let error: GateError<u16, std::convert::Infallible> = GateError::Overloaded(overloaded);
    assert_eq!(
        error.to_string(),
        "turned away: 1 call was already waiting in the gate's line, its max_queued"
    );
    assert!(error.into_outcome().is_none());
    // A response future says whether the gate let its request in.
    // (The inner `service_fn` is always ready.)
    let mut service = service;
    let mut call = || tower::Service::call(&mut service, ());
    let (running, waiting, refused) = (call(), call(), call());
    let told = format!("{running:?} {waiting:?}");
    assert!(told.contains("call: Call {"), "{told}");
    let told = format!("{refused:?}");
    assert!(told.contains(r#"call: "refused by the gate""#), "{told}");
}

#[cfg(feature = "reqwest-middleware")]
#[tokio::test]
async fn the_reqwest_middleware_fails_a_request_turned_away_and_never_sends_it() {
    use paceline::Overloaded;
    use paceline::reqwest::{GateMiddleware, GaveUp};
    use paceline_sim::Server;
    use paceline_sim::http::serve;
    use reqwest_middleware::ClientBuilder;

    let api = Server::builder().latency(50 * MS).build();
    let http = serve(api, "127.0.0.1:0").await.unwrap();
    let gate = paceline::reqwest::gate()
        .max_in_flight(1)
        .max_queued(1)
        .build()
        .unwrap();
    let client = ClientBuilder::new(reqwest::Client::builder().no_proxy().build().unwrap())
        .with(GateMiddleware::new(gate.clone()))
        .build();
    // Five at once: one is sent, one waits, three find the line full.
    let requests = (0..5).map(|_| client.get(http.url(None)).send());
    let answers = futures::future::join_all(requests).await;
    let mut overloaded = 0;
    for answer in answers {
        match answer {
            Ok(response) => assert_eq!(response.status(), 200),
            Err(error) => {
                // Not a throttle given up: the gate's own refusal.
                let error = GaveUp::try_from(error).unwrap_err();
                let turned_away = Overloaded::try_from(error).expect("turned away");
                assert_eq!(turned_away.max_queued(), 1);
                overloaded += 1;
            }
        }
    }
    assert_eq!(overloaded, 3);
    assert_eq!((gate.stats().calls, gate.stats().turned_away), (2, 3));
    let log = http.shutdown().await.log();
    assert_eq!(log.ours().count(), 2, "the server saw only the two let in");
}

#[cfg(feature = "reqwest-middleware")]
#[test]
fn an_error_that_is_not_overloaded_comes_back_unchanged() {
    use paceline::Overloaded;

    let error = reqwest_middleware::Error::middleware(std::io::Error::other("elsewhere"));
    let back = Overloaded::try_from(error).unwrap_err();
    assert_eq!(back.to_string(), "elsewhere");
}

// ---------------------------------------------------------------------------------------------
// Metrics

#[cfg(feature = "metrics")]
#[tokio::test(start_paused = true)]
async fn the_metrics_count_calls_turned_away_for_a_bounded_gate_only() {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let prometheus = recorder.handle();
    let (bounded, unbounded) = metrics::with_local_recorder(&recorder, || {
        let bounded = Gate::builder(classify)
            .name("bounded")
            .rate(1.0)
            .max_queued(0)
            .build()
            .unwrap();
        let unbounded = Gate::builder(classify).name("unbounded").build().unwrap();
        (bounded, unbounded)
    });
    for _ in 0..3 {
        let _ = bounded.call(|| async { Ok(()) }).await;
    }
    unbounded.call(|| async { Ok(()) }).await.unwrap();
    assert_eq!(bounded.stats().turned_away, 2);
    let scrape = prometheus.render();
    assert!(
        scrape.contains(r#"paceline_gate_turned_away_total{gate="bounded"} 2"#),
        "{scrape}"
    );
    assert!(scrape.contains(r#"paceline_gate_calls_total{gate="bounded"} 1"#));
    assert!(!scrape.contains(r#"paceline_gate_turned_away_total{gate="unbounded"}"#));
}

// ---------------------------------------------------------------------------------------------
// Against a reference model

mod model {
    use std::cell::Cell;
    use std::collections::VecDeque;
    use std::future::Future;
    use std::pin::Pin;
    use std::rc::Rc;
    use std::task::Poll;

    use futures::channel::oneshot;
    use paceline::{Error, Gate};
    use proptest::prelude::*;
    use tokio_test::task::{Spawn, spawn};

    /// What the schedule does next.
    #[derive(Debug, Clone)]
    pub enum Step {
        /// A call arrives.
        Arrive,
        /// The running call at this index (mod how many run) ends.
        Finish(usize),
        /// The waiting call at this index (mod how many wait) is dropped.
        Leave(usize),
    }

    /// Where a call stands.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Stand {
        Waiting,
        Running,
        Done,
        TurnedAway,
        Left,
    }

    /// A gate of `max_in_flight` slots whose line holds at most `max_queued` (FIFO), as the
    /// docs state it, with nothing else to hold a call.
    #[derive(Debug)]
    struct Reference {
        max_in_flight: usize,
        max_queued: usize,
        running: Vec<usize>,
        line: VecDeque<usize>,
    }

    impl Reference {
        /// A call arrives: it starts if a slot is free and nobody waits, waits if the line
        /// holds fewer than the bound, else is turned away.
        fn arrive(&mut self, id: usize) -> Stand {
            if self.running.len() < self.max_in_flight && self.line.is_empty() {
                self.running.push(id);
                Stand::Running
            } else if self.line.len() < self.max_queued {
                self.line.push_back(id);
                Stand::Waiting
            } else {
                Stand::TurnedAway
            }
        }

        /// A running call ends: the first in line takes its slot.
        fn finish(&mut self, id: usize) -> Option<usize> {
            self.running.retain(|&running| running != id);
            let next = self.line.pop_front()?;
            self.running.push(next);
            Some(next)
        }

        fn leave(&mut self, id: usize) {
            self.line.retain(|&waiting| waiting != id);
        }
    }

    type CallFuture = Pin<Box<dyn Future<Output = Result<(), Error<()>>>>>;

    /// One call through the real gate, polled by hand.
    struct Real {
        task: Option<Spawn<CallFuture>>,
        /// Set by the user's future when it first runs: the call started.
        started: Rc<Cell<bool>>,
        /// How often the user's closure was called.
        made: Rc<Cell<u32>>,
        /// Ends the user's future.
        finish: Option<oneshot::Sender<()>>,
        outcome: Option<Result<(), Error<()>>>,
    }

    /// Polls every call that is due until none is: the gate wakes the next waiter itself.
    fn settle(calls: &mut [Real]) {
        loop {
            let mut polled = false;
            for call in calls.iter_mut() {
                let Some(task) = &mut call.task else { continue };
                if !task.is_woken() {
                    continue;
                }
                polled = true;
                if let Poll::Ready(outcome) = task.poll() {
                    call.outcome = Some(outcome);
                    call.task = None;
                }
            }
            if !polled {
                return;
            }
        }
    }

    fn stand(call: &Real) -> Stand {
        match (&call.outcome, &call.task) {
            (Some(Ok(())), _) => Stand::Done,
            (Some(Err(Error::Overloaded(_))), _) => Stand::TurnedAway,
            (Some(Err(other)), _) => panic!("unexpected {other:?}"),
            (None, None) => Stand::Left,
            (None, Some(_)) if call.started.get() => Stand::Running,
            (None, Some(_)) => Stand::Waiting,
        }
    }

    pub fn run(
        max_in_flight: usize,
        max_queued: usize,
        steps: &[Step],
    ) -> Result<(), TestCaseError> {
        let gate = Gate::builder(|_: &()| None)
            .max_in_flight(max_in_flight)
            .max_queued(max_queued)
            .build()
            .unwrap();
        let mut model = Reference {
            max_in_flight,
            max_queued,
            running: Vec::new(),
            line: VecDeque::new(),
        };
        let mut expected: Vec<Stand> = Vec::new();
        let mut calls: Vec<Real> = Vec::new();
        for step in steps {
            match *step {
                Step::Arrive => {
                    let id = calls.len();
                    let waiting = model.line.len();
                    let fate = model.arrive(id);
                    if fate == Stand::TurnedAway {
                        // Only a call that found the line full.
                        prop_assert_eq!(waiting, max_queued);
                    }
                    expected.push(fate);
                    let (started, made) = (Rc::new(Cell::new(false)), Rc::new(Cell::new(0)));
                    let (finish, finished) = oneshot::channel::<()>();
                    let mut finished = Some(finished);
                    let gate = gate.clone();
                    let (on_start, on_make) = (Rc::clone(&started), Rc::clone(&made));
                    let future: CallFuture = Box::pin(async move {
                        gate.call(|| {
                            on_make.set(on_make.get() + 1);
                            let (started, finished) = (Rc::clone(&on_start), finished.take());
                            async move {
                                started.set(true);
                                finished.expect("one attempt").await.ok();
                                Ok(())
                            }
                        })
                        .await
                    });
                    let mut task = spawn(future);
                    let outcome = match task.poll() {
                        Poll::Ready(outcome) => Some(outcome),
                        Poll::Pending => None,
                    };
                    let task = outcome.is_none().then_some(task);
                    calls.push(Real {
                        task,
                        started,
                        made,
                        finish: Some(finish),
                        outcome,
                    });
                }
                Step::Finish(k) if !model.running.is_empty() => {
                    let id = model.running[k % model.running.len()];
                    if let Some(next) = model.finish(id) {
                        expected[next] = Stand::Running;
                    }
                    expected[id] = Stand::Done;
                    let _ = calls[id].finish.take().expect("running").send(());
                }
                Step::Leave(k) if !model.line.is_empty() => {
                    let id = model.line[k % model.line.len()];
                    model.leave(id);
                    expected[id] = Stand::Left;
                    calls[id].task = None;
                }
                Step::Finish(_) | Step::Leave(_) => {}
            }
            settle(&mut calls);
            let stands: Vec<_> = calls.iter().map(stand).collect();
            prop_assert_eq!(&stands, &expected);
            let stats = gate.stats();
            prop_assert!(stats.queued <= max_queued, "{} wait", stats.queued);
            prop_assert_eq!(stats.queued, model.line.len());
            prop_assert_eq!(stats.in_flight, model.running.len());
            let turned_away = expected.iter().filter(|s| **s == Stand::TurnedAway).count();
            prop_assert_eq!(stats.turned_away, turned_away as u64);
        }
        // Every call left ends, in line order.
        while let Some(&id) = model.running.first() {
            if let Some(next) = model.finish(id) {
                expected[next] = Stand::Running;
            }
            expected[id] = Stand::Done;
            let _ = calls[id].finish.take().expect("running").send(());
            settle(&mut calls);
        }
        for (call, expected) in calls.iter().zip(&expected) {
            // Either completed or turned away, never both, never neither (or dropped).
            let stand = stand(call);
            prop_assert_eq!(stand, *expected);
            let (made, started) = (call.made.get(), call.started.get());
            match stand {
                Stand::Done => prop_assert_eq!((made, started), (1, true)),
                Stand::TurnedAway => prop_assert_eq!((made, started), (0, false)),
                Stand::Left => prop_assert_eq!((made, started), (1, false)),
                other => prop_assert!(false, "a call still {other:?}"),
            }
        }
        Ok(())
    }

    pub fn steps() -> impl Strategy<Value = Vec<Step>> {
        let step = prop_oneof![
            4 => Just(Step::Arrive),
            3 => any::<usize>().prop_map(Step::Finish),
            1 => any::<usize>().prop_map(Step::Leave),
        ];
        proptest::collection::vec(step, 0..60)
    }
}

proptest::proptest! {
    #![proptest_config(crate::support::regressions_beside_the_file(
        proptest::prelude::ProptestConfig::default()
    ))]

    /// Random arrivals, ends and departures against random bounds: every call runs to its
    /// end or is turned away (its future never made), never both, never neither; it is turned
    /// away exactly when the reference model's line held `max_queued` waiting calls as it
    /// arrived; the line never holds more.
    #[test]
    fn the_line_never_holds_more_than_its_bound_and_turns_away_only_when_full(
        max_in_flight in 1usize..4,
        max_queued in 0usize..5,
        steps in model::steps(),
    ) {
        model::run(max_in_flight, max_queued, &steps)?;
    }
}

// ---------------------------------------------------------------------------------------------
// Against the simulated API

/// A burst beyond the bound against the simulated API (10 requests a second, a bucket of 10,
/// 50 ms each way), through a gate that keeps under it, beside the same gate with no bound:
/// two bursts of 100 calls, at 0 s and at 5 s.
#[tokio::test(start_paused = true)]
async fn a_burst_beyond_the_bound_against_the_simulated_api() {
    use paceline_sim::{Policy, Rejected, Server};

    #[derive(Debug, Default, PartialEq)]
    struct Figures {
        done: usize,
        turned_away: usize,
        /// The longest a call that ran waited for its start, in ms.
        longest_wait: u64,
        /// When the last answer came, in ms.
        last_answer: u64,
        /// Requests the server saw, and rejected.
        seen: usize,
        throttled: usize,
    }

    async fn run(max_queued: Option<usize>) -> Figures {
        let server = Server::builder()
            .latency(50 * MS)
            .global(Policy::token_bucket(10.0, 10))
            .build();
        let builder = Gate::builder(|_: &Rejected| Some(RateLimited::new()))
            .max_in_flight(4)
            .rate(10.0);
        let gate = match max_queued {
            Some(n) => builder.max_queued(n),
            None => builder,
        }
        .build()
        .unwrap();
        let start = Instant::now();
        let call = |arrive_ms: u64| {
            let (gate, server) = (gate.clone(), server.clone());
            async move {
                sleep_until(start + ms(arrive_ms)).await;
                let arrived = Instant::now();
                let waited = Cell::new(0);
                let answer = gate
                    .call(|| async {
                        // The future is made as the call arrives; it runs when it starts.
                        waited.set(support::ms_since(arrived));
                        server.call(None).await
                    })
                    .await;
                (answer.map(|_| waited.get()), support::ms_since(start))
            }
        };
        let burst = |at| futures::future::join_all((0..100).map(move |_| call(at)));
        let (first, second) = futures::join!(burst(0), burst(5_000));
        let mut figures = Figures::default();
        for (answer, at) in first.into_iter().chain(second) {
            match answer {
                Ok(waited) => {
                    figures.done += 1;
                    figures.longest_wait = figures.longest_wait.max(waited);
                    figures.last_answer = figures.last_answer.max(at);
                }
                Err(Error::Overloaded(_)) => figures.turned_away += 1,
                Err(other) => panic!("{other:?}"),
            }
        }
        assert_eq!(gate.stats().turned_away, figures.turned_away as u64);
        let log = server.log();
        (figures.seen, figures.throttled) = (log.ours().count(), log.rejected());
        figures
    }

    // Bound 20: of each burst, one starts at once and 20 wait their turn, 100 ms apart; the
    // other 79 are turned away at once, and the line takes the second burst as the first.
    let bounded = run(Some(20)).await;
    assert_eq!(
        bounded,
        Figures {
            done: 42,
            turned_away: 158,
            longest_wait: 2_000,
            last_answer: 7_100,
            seen: 42,
            throttled: 0,
        }
    );
    // Unbounded: every call waits its turn; the first burst's last starts at 9.9 s, and the
    // second burst queues behind it.
    let unbounded = run(None).await;
    assert_eq!(
        unbounded,
        Figures {
            done: 200,
            turned_away: 0,
            longest_wait: 14_900,
            last_answer: 20_000,
            seen: 200,
            throttled: 0,
        }
    );
}
