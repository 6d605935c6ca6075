//! How often a call takes the gate's lock, with and without a store, against a store that
//! answers from a script (no Redis): the fleet's side of the gate, on its own.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::time::Instant;

use crate::error::Error;
use crate::gate::GateBuilder;
use crate::gate::adaptive::AdaptiveRate;
use crate::gate::classify::{RateLimited, Scope};
use crate::gate::fleet::{Clearance, ClockPair, FleetRate, FleetStore, Replaced};
use crate::gate::handle::Gate;
use crate::gate::pace::interval;

/// A store that answers each start as its script says (then "go" at once), and notes what
/// the gate told it.
#[derive(Debug, Default)]
struct Scripted {
    answers: Mutex<VecDeque<Clearance>>,
    told: Mutex<Vec<String>>,
    /// The interval each start asked the fleet's pace for.
    intervals: Mutex<Vec<Option<Duration>>>,
    /// The clocks, read once, if the store is to have answered already.
    clock: Option<ClockPair>,
}

impl Scripted {
    fn answering(answers: impl IntoIterator<Item = Clearance>) -> Arc<Self> {
        Arc::new(Self {
            answers: Mutex::new(answers.into_iter().collect()),
            ..Self::default()
        })
    }

    fn told(&self, what: String) {
        self.told.lock().unwrap().push(what);
    }
}

impl FleetStore for Scripted {
    fn clear(
        &self,
        _scopes: &[Scope],
        interval: Option<Duration>,
        _known_rate: Option<u64>,
        _cost: u64,
    ) -> BoxFuture<'static, Clearance> {
        self.intervals.lock().unwrap().push(interval);
        let answer = self.answers.lock().unwrap().pop_front();
        let answer = answer.unwrap_or(Clearance::Go {
            wait: Duration::ZERO,
            fleet: None,
        });
        Box::pin(async move { answer })
    }

    fn settle(&self, more: i64, _per_unit: Option<Duration>, _sent: Option<Instant>) {
        self.told(format!("settle {more}"));
    }

    fn observe(&self, left: u64, _resets_in: Duration) {
        self.told(format!("observe {left}"));
    }

    fn back_off(&self, scope: Option<&Scope>, length: Duration) {
        self.told(format!("back off {scope:?} {length:?}"));
    }

    fn replace_rate(&self, _: u64, _: f64, _: String) -> BoxFuture<'static, Option<Replaced>> {
        Box::pin(async { None })
    }

    fn clock(&self) -> Option<ClockPair> {
        self.clock
    }

    fn spawn(&self, task: BoxFuture<'static, ()>) {
        drop(task);
    }
}

/// Throttled once (for 1 s), then a success.
#[derive(Debug, PartialEq)]
struct Throttle;

fn builder() -> GateBuilder<Throttle> {
    Gate::builder(|_: &Throttle| Some(RateLimited::new().retry_after(Duration::from_secs(1))))
        .max_in_flight(4)
        .rate(10.0)
}

fn acquisitions<E>(gate: &Gate<E>) -> usize {
    gate.shared().acquisitions.load(Ordering::Relaxed)
}

/// The lock is taken twice by a call that nothing holds: to start and to end; three times
/// with a store, whose answer is taken in under the lock too.
#[tokio::test(start_paused = true)]
async fn a_call_takes_the_lock_to_start_and_to_end_and_once_more_for_the_stores_answer() {
    let alone = builder().build().unwrap();
    alone
        .call(|| async { Ok::<_, Throttle>(()) })
        .await
        .unwrap();
    assert_eq!(acquisitions(&alone), 2);
    let store = Scripted::answering([]);
    let fleet = builder().fleet(store).build().unwrap();
    fleet
        .call(|| async { Ok::<_, Throttle>(()) })
        .await
        .unwrap();
    assert_eq!(acquisitions(&fleet), 3);
}

/// A call throttled once and then let through: each attempt takes the lock at most three
/// times with a store (two without). The retry takes its place in line with the throttle
/// and asks once its backoff is over.
#[tokio::test(start_paused = true)]
async fn each_attempt_of_a_throttled_call_takes_the_lock_at_most_three_times() {
    let throttled_once = |gate: Gate<Throttle>| async move {
        let mut tries = 0;
        let start = Instant::now();
        gate.call(|| {
            tries += 1;
            let first = tries == 1;
            async move { if first { Err(Throttle) } else { Ok(()) } }
        })
        .await
        .unwrap();
        assert_eq!(start.elapsed(), Duration::from_secs(1));
        acquisitions(&gate)
    };
    assert_eq!(throttled_once(builder().build().unwrap()).await, 4);
    let store = Scripted::answering([]);
    let fleet = builder().fleet(Arc::clone(&store) as _).build().unwrap();
    assert_eq!(throttled_once(fleet).await, 6);
    let told = store.told.lock().unwrap().clone();
    assert_eq!(told, ["back off None 1s"], "the fleet heard of the backoff");
}

/// A start the fleet holds back goes back to its place in line, behind no one, and waits
/// out the fleet's backoff.
#[tokio::test(start_paused = true)]
async fn a_start_the_fleet_holds_back_waits_for_the_fleets_backoff_and_goes_again() {
    let held = Clearance::Held {
        scope: None,
        remaining: Duration::from_millis(700),
    };
    let store = Scripted::answering([held]);
    let gate = builder().fleet(store).build().unwrap();
    let start = Instant::now();
    gate.call(|| async { Ok::<_, Throttle>(()) }).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(700));
    let stats = gate.stats();
    assert_eq!(
        (stats.calls, stats.successes, stats.held_by_fleet),
        (1, 1, 1)
    );
}

/// A gate whose store does not answer goes on with its own state, and counts it.
#[tokio::test(start_paused = true)]
async fn a_start_the_store_leaves_unanswered_goes_on_the_gates_own_state() {
    let store = Scripted::answering([Clearance::Unavailable]);
    let gate = builder().fleet(store).build().unwrap();
    gate.call(|| async { Ok::<_, Throttle>(()) }).await.unwrap();
    assert_eq!(gate.stats().store_unanswered, 1);
}

/// A retry that its front-end does not make (a request it cannot copy) gives back its place
/// in line at once: the calls behind it are not held up by a waiter that will never ask.
#[tokio::test(start_paused = true)]
async fn a_retry_never_made_gives_back_its_place_in_line() {
    use crate::gate::call::{Arrival, Estimated, Turn};
    use crate::gate::options::Terms;

    let gate = builder().build().unwrap();
    let shared = &**gate.shared();
    let arrival = Arrival::new(
        shared,
        Box::new(["acct".into()]),
        Terms::<std::convert::Infallible>::default(),
        Estimated,
    )
    .unwrap();
    let throttled = arrival.attempt(async { Err::<(), _>(Throttle) });
    let told = format!("{throttled:?}");
    assert!(
        told.contains(r#"scopes: ["acct"], number: 1, stage: Running(Sent"#),
        "{told}"
    );
    let Turn::Again(retry) = throttled.await else {
        panic!("the call was throttled and may be tried again");
    };
    assert_eq!(
        gate.stats().queued,
        1,
        "the retry holds its place from the throttle on"
    );
    let told = format!("{retry:?}");
    assert!(
        told.contains("place: Held(BackingOff(Ticket { class: Retry"),
        "{told}"
    );
    drop(retry);
    assert_eq!(gate.stats().queued, 0);
    let start = Instant::now();
    gate.call(|| async { Ok::<_, Throttle>(()) }).await.unwrap();
    // It waited for the backoff only, not for the retry that was never made.
    assert_eq!(start.elapsed(), Duration::from_secs(1));
}

async fn ok() -> Result<(), Throttle> {
    Ok(())
}

/// A call the full line turns away takes the lock once as it arrives, and never again: its
/// future is never made. Through `Gate::call`, once more before that, for the start that
/// nothing holds, which finds someone waiting.
#[tokio::test(start_paused = true)]
async fn a_call_turned_away_takes_the_lock_once_as_it_arrives() {
    use crate::gate::call::{Arrival, Estimated};
    use crate::gate::options::Terms;

    let gate = builder().max_in_flight(1).max_queued(0).build().unwrap();
    let shared = &**gate.shared();
    // A call in flight, started outside the line: two acquisitions, to start and to end.
    let running = Arrival::new(
        shared,
        Box::default(),
        Terms::<Instant>::default(),
        Estimated,
    );
    let running = running
        .unwrap()
        .attempt(std::future::pending::<Result<(), Throttle>>());
    assert_eq!(acquisitions(&gate), 1);
    let refused = Arrival::new(
        shared,
        Box::default(),
        Terms::<Instant>::default(),
        Estimated,
    );
    assert!(refused.is_err());
    assert_eq!(acquisitions(&gate), 2);
    let mut made = false;
    let answer = gate
        .call(|| {
            made = true;
            ok()
        })
        .await;
    assert!(matches!(answer, Err(Error::Overloaded(_))));
    assert!(!made);
    assert_eq!(acquisitions(&gate), 4);
    assert_eq!(gate.stats().turned_away, 2);
    drop(running);
}

/// Changing a limit takes the lock once, and wakes the next waiter inside it; asking a gate
/// without a rate for a new one takes it not at all.
#[tokio::test(start_paused = true)]
async fn a_new_limit_takes_the_lock_once() {
    let gate = builder().build().unwrap();
    gate.set_max_in_flight(2).unwrap();
    assert_eq!(acquisitions(&gate), 1);
    gate.set_rate(20.0).unwrap();
    assert_eq!(acquisitions(&gate), 2);
    // Refused before the lock: a bad value, or a gate with no rate to change.
    assert!(gate.set_rate(f64::NAN).is_err());
    assert!(gate.set_max_in_flight(0).is_err());
    assert_eq!(acquisitions(&gate), 2);
    let unpaced = Gate::builder(|_: &Throttle| None).build().unwrap();
    assert!(unpaced.set_rate(20.0).is_err());
    assert_eq!(acquisitions(&unpaced), 0);
}

/// With a store, a new rate is this process's: the interval it asks the fleet's pace for at
/// each start follows it.
#[tokio::test(start_paused = true)]
async fn a_new_rate_is_the_interval_this_process_asks_the_fleet_for() {
    let store = Scripted::answering([]);
    let gate = builder().fleet(Arc::clone(&store) as _).build().unwrap();
    gate.call(ok).await.unwrap();
    gate.set_rate(4.0).unwrap();
    gate.call(ok).await.unwrap();
    let asked = store.intervals.lock().unwrap().clone();
    assert_eq!(asked, [Some(interval(10.0)), Some(interval(4.0))]);
}

/// An adaptive rate this process takes up from the fleet is held under the ceiling a new
/// rate set.
#[tokio::test(start_paused = true)]
async fn a_fleets_faster_adaptive_rate_is_held_under_the_new_ceiling() {
    let clock = ClockPair {
        local: Instant::now(),
        store_micros: 1_000_000,
    };
    let fleets = |version, rate| Clearance::Go {
        wait: Duration::ZERO,
        fleet: Some(FleetRate {
            version,
            state: AdaptiveRate::new(rate, 1.0, 100.0).encode(|at| clock.to_store(at)),
        }),
    };
    let store = Arc::new(Scripted {
        answers: Mutex::new([fleets(7, 50.0), fleets(8, 5.0)].into()),
        clock: Some(clock),
        ..Scripted::default()
    });
    let gate = builder()
        .adaptive(1.0, 100.0)
        .fleet(Arc::clone(&store) as _)
        .build()
        .unwrap();
    gate.set_rate(8.0).unwrap();
    gate.call(ok).await.unwrap();
    assert_eq!(
        gate.stats().rate,
        Some(8.0),
        "the fleet's 50 a second, held at 8"
    );
    // One under the ceiling is taken up as it is.
    gate.call(ok).await.unwrap();
    assert_eq!(gate.stats().rate, Some(5.0));
}
