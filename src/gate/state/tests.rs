//! How often a call takes the gate's lock, with and without a store, against a store that
//! answers from a script (no Redis): the fleet's side of the gate, on its own.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio::time::{self, Instant};

use crate::error::Error;
use crate::gate::GateBuilder;
use crate::gate::adaptive::AdaptiveRate;
use crate::gate::classify::{RateLimited, Scope};
use crate::gate::dimensions::{BudgetDraw, Reckoned};
use crate::gate::fleet::{
    Clearance, ClockPair, FleetAsk, FleetRate, FleetStore, PerUnit, Replaced,
};
use crate::gate::handle::Gate;
use crate::gate::pace::interval;
use crate::gate::scopes::ScopeLimits;

/// A store that answers each start as its script says (then "go" at once), and notes what
/// the gate told it. Once stalled, it answers each start only when given a permit.
#[derive(Debug, Default)]
struct Scripted {
    answers: Mutex<VecDeque<Clearance>>,
    told: Mutex<Vec<String>>,
    stalled: Mutex<Option<Arc<Semaphore>>>,
    /// The interval each start asked the fleet's pace for.
    intervals: Mutex<Vec<Option<Duration>>>,
    /// The paces of its scopes each start told the store of.
    scope_paces: Mutex<Vec<Box<[Option<Duration>]>>>,
    /// The budgets each start drew on.
    budgets: Mutex<Vec<Box<[BudgetDraw]>>>,
    /// The clocks, read once, if the store is to have answered already.
    clock: Option<ClockPair>,
    /// The fleet's live members, as the store says it last heard.
    members: u64,
}

impl Scripted {
    fn answering(answers: impl IntoIterator<Item = Clearance>) -> Arc<Self> {
        Arc::new(Self {
            answers: Mutex::new(answers.into_iter().collect()),
            ..Self::default()
        })
    }

    /// From now on, each start is answered only when `permits` gives it a permit.
    fn stall(&self, permits: &Arc<Semaphore>) {
        *self.stalled.lock().unwrap() = Some(Arc::clone(permits));
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
        asked: &FleetAsk,
        _cost: u64,
    ) -> BoxFuture<'static, Clearance> {
        self.intervals.lock().unwrap().push(interval);
        let paces = asked.scope_paces.clone();
        self.scope_paces.lock().unwrap().push(paces);
        self.budgets.lock().unwrap().push(asked.budgets.clone());
        let answer = self.answers.lock().unwrap().pop_front();
        let answer = answer.unwrap_or(Clearance::Go {
            wait: Duration::ZERO,
            fleet: None,
            at: None,
        });
        let stalled = self.stalled.lock().unwrap().clone();
        Box::pin(async move {
            if let Some(permits) = stalled {
                permits.acquire().await.unwrap().forget();
            }
            answer
        })
    }

    fn settle(&self, more: i64, _per_unit: &PerUnit<'_>) {
        self.told(format!("settle {more}"));
    }

    fn observe_budget(&self, budget: &Reckoned) -> Option<JoinHandle<()>> {
        self.told(format!("observe {budget:?}"));
        None
    }

    fn settle_budgets(&self, budgets: &[BudgetDraw], actual: &[u64], _: Option<i64>) {
        self.told(format!("settle {budgets:?} at {actual:?}"));
    }

    fn back_off(&self, scope: Option<&Scope>, length: Duration) {
        self.told(format!("back off {scope:?} {length:?}"));
    }

    fn replace_rate(&self, _: u64, _: f64, _: String) -> BoxFuture<'static, Option<Replaced>> {
        Box::pin(async { None })
    }

    fn members(&self) -> u64 {
        self.members
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

/// Starts on the fast path: (without a clock read, with one).
fn fast_starts<E>(gate: &Gate<E>) -> (usize, usize) {
    let [untimed, paced] = &gate.shared().fast_starts;
    (
        untimed.load(Ordering::Relaxed),
        paced.load(Ordering::Relaxed),
    )
}

/// A call that nothing holds starts in the caller's own future, with no clock read if the
/// gate has no rate; one that must wait, or whose start a store clears, goes through the
/// attempt machinery.
#[tokio::test(start_paused = true)]
async fn a_call_nothing_holds_takes_the_fast_path_that_reads_the_clock_only_for_a_rate() {
    let ok = || async { Ok::<_, Throttle>(()) };
    let unpaced = Gate::builder(|_: &Throttle| None).build().unwrap();
    unpaced.call(ok).await.unwrap();
    assert_eq!(fast_starts(&unpaced), (1, 0));
    let paced = builder().build().unwrap();
    paced.call(ok).await.unwrap();
    // The next start is 100 ms away: this call waits in line for it.
    let start = Instant::now();
    paced.call(ok).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(100));
    assert_eq!(fast_starts(&paced), (0, 1));
    // A fleet's store clears every start, with a rate or without.
    let fleet = builder().fleet(Scripted::answering([])).build().unwrap();
    fleet.call(ok).await.unwrap();
    assert_eq!(fast_starts(&fleet), (0, 0));
    let unpaced_fleet = Gate::builder(|_: &Throttle| None)
        .fleet(Scripted::answering([]))
        .build()
        .unwrap();
    // Nor does a call after the first, which a loan of slots would start unheard.
    unpaced_fleet.call(ok).await.unwrap();
    unpaced_fleet.call(ok).await.unwrap();
    assert_eq!(fast_starts(&unpaced_fleet), (0, 0));
    assert_eq!(
        acquisitions(&unpaced_fleet) % 3,
        0,
        "three locks a call, none skipped"
    );
}

/// A gate told nothing paces its calls once a throttle that said nothing starts a rate: its
/// calls read the clock from then on; with `find_rate(false)`, or with a store, it finds none
/// and stays unpaced.
#[tokio::test(start_paused = true)]
async fn a_gate_told_nothing_paces_its_calls_once_a_bare_throttle_starts_a_rate() {
    #[derive(Debug)]
    struct Bare;
    let bare = |find: bool| {
        Gate::builder(|_: &Bare| Some(RateLimited::new()))
            .max_retries(0)
            .find_rate(find)
    };
    let ok = || async { Ok::<_, Bare>(()) };
    let refused = || async { Err::<(), _>(Bare) };
    let finding = bare(true).build().unwrap();
    let t0 = Instant::now();
    finding.call(ok).await.unwrap();
    time::sleep(Duration::from_secs(1)).await;
    assert!(finding.call(refused).await.is_err());
    let rate = finding.stats().rate.expect("a rate found");
    // One success from the first start, whose instant no clock was read for but this one,
    // to the throttle's resume; cut as the rate that failed.
    let resume = finding.stats().backoff_until.expect("a backoff");
    let expected = 0.7 / (resume - t0).as_secs_f64();
    assert!((rate - expected).abs() < 1e-9, "{rate}, not {expected}");
    assert!(finding.shared().is_paced());
    time::sleep(Duration::from_secs(60)).await;
    finding.call(ok).await.unwrap();
    assert_eq!(
        fast_starts(&finding),
        (2, 1),
        "the call after the rate reads the clock"
    );
    assert!(format!("{:?}", bare(false)).contains("find_rate: false"));
    for gate in [
        bare(false).build().unwrap(),
        bare(true).fleet(Scripted::answering([])).build().unwrap(),
    ] {
        gate.call(ok).await.unwrap();
        assert!(gate.call(refused).await.is_err());
        assert_eq!(gate.stats().rate, None);
        assert!(!gate.shared().is_paced());
    }
}

/// A throttle that says something of the limit starts no rate: one with a Retry-After, one
/// announcing a quota, and a bare one at a gate that reads a quota still in force.
#[tokio::test(start_paused = true)]
async fn a_throttle_that_says_something_of_the_limit_starts_no_rate() {
    use crate::gate::quota::{Announcement, Dimension, Quota};
    #[derive(Debug)]
    struct Refused;
    let ok = || async { Ok::<_, Refused>(()) };
    let refused = || async { Err::<(), _>(Refused) };
    let quota = Quota::new(100, Duration::from_secs(60));
    let told: [fn() -> RateLimited; 3] = [
        || RateLimited::new().retry_after(Duration::from_secs(1)),
        || RateLimited::new().quota(Quota::new(0, Duration::from_secs(1))),
        RateLimited::new,
    ];
    for (i, throttle) in told.into_iter().enumerate() {
        let gate = Gate::builder(move |_: &Refused| Some(throttle()))
            .max_retries(0)
            .build()
            .unwrap();
        gate.call(ok).await.unwrap();
        if i == 2 {
            gate.observe_all([Announcement::new(Dimension::UNITS, quota)]);
        }
        assert!(gate.call(refused).await.is_err());
        assert_eq!(gate.stats().rate, None, "throttle {i}");
    }
}

/// A first call that nothing holds takes the lock to start, and ends on the loan its start
/// opened; with a store, three times: to start, for the store's answer, and to end.
#[tokio::test(start_paused = true)]
async fn a_call_takes_the_lock_to_start_and_to_end_and_once_more_for_the_stores_answer() {
    let alone = builder().build().unwrap();
    alone
        .call(|| async { Ok::<_, Throttle>(()) })
        .await
        .unwrap();
    assert_eq!(acquisitions(&alone), 1);
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

/// While its store does not answer, a gate of a fleet of 4 keeps to a quarter of the
/// fleet's rate (10 a second: one start each 400 ms): the start that found it so (at 300 ms)
/// goes back in line and waits for that, and to the whole rate again once the store
/// answers (at 2,700 ms), spaced from its last start as that counted: no burst as it
/// rejoins. A scope's rate, which the fleet shares too, is
/// shared the same way.
#[tokio::test(start_paused = true)]
async fn a_gate_whose_store_does_not_answer_keeps_to_its_share_of_the_fleets_rate() {
    let go = || Clearance::Go {
        wait: Duration::ZERO,
        fleet: None,
        at: None,
    };
    let answers = [go(), go(), go()]
        .into_iter()
        .chain(std::iter::repeat_with(|| Clearance::Unavailable).take(6))
        .chain([go(), go(), go()]);
    let store = Arc::new(Scripted {
        members: 4,
        ..Arc::into_inner(Scripted::answering(answers)).unwrap()
    });
    let gate = builder().fleet(store).build().unwrap();
    let t0 = Instant::now();
    let mut starts = Vec::new();
    for _ in 0..12 {
        let started = gate
            .call(|| async { Ok::<_, Throttle>(t0.elapsed().as_millis()) })
            .await;
        starts.push(started.unwrap());
    }
    assert_eq!(
        starts,
        [
            0, 100, 200, 700, 1_100, 1_500, 1_900, 2_300, 2_700, 3_100, 3_200, 3_300
        ]
    );
    let stats = gate.stats();
    // The start turned back is not counted: it went out on the next answer; the members are
    // those the store heard (none heard: `None`).
    let unheard = builder().fleet(Scripted::answering([])).build().unwrap();
    assert_eq!(unheard.stats().fleet_members, None);
    assert_eq!((stats.store_unanswered, stats.fleet_members), (5, Some(4)));

    // A scope with a rate of 5 a second, through a store of a fleet of 2 that does not answer:
    // 400 ms apart, from the first start, which found it so and waited its share.
    let store = Arc::new(Scripted {
        members: 2,
        ..Arc::into_inner(Scripted::answering(
            std::iter::repeat_with(|| Clearance::Unavailable).take(4),
        ))
        .unwrap()
    });
    let gate = Gate::builder(|_: &Throttle| None)
        .per_scope(ScopeLimits::new().rate(5.0))
        .fleet(store)
        .build()
        .unwrap();
    let t0 = Instant::now();
    let mut starts = Vec::new();
    for _ in 0..4 {
        let started = gate
            .call_in(["acct"], || async {
                Ok::<_, Throttle>(t0.elapsed().as_millis())
            })
            .await;
        starts.push(started.unwrap());
    }
    assert_eq!(starts, [400, 800, 1_200, 1_600]);
}

/// While the store does not answer, an adaptive rate goes on adapting in this process, and
/// the process starts its share of it: a fleet of 4 that had found 20 calls a second (the
/// first start's answer) starts 4 of the rate's intervals apart, each as the rate stands
/// after the call before (it grows with each success, and a throttle cuts it), and one
/// interval apart again once the store answers. With the weight kept at 1 (each process at
/// the whole rate), the gaps are a quarter of these.
#[tokio::test(start_paused = true)]
async fn an_adaptive_rate_goes_on_adapting_through_an_outage_and_each_process_keeps_its_share() {
    let clock = ClockPair {
        local: Instant::now(),
        store_micros: 1_000_000,
    };
    let found = Clearance::Go {
        wait: Duration::ZERO,
        fleet: Some(FleetRate {
            version: 1,
            state: AdaptiveRate::new(20.0, 1.0, 100.0).encode(|at| clock.to_store(at)),
        }),
        at: None,
    };
    let answers =
        std::iter::once(found).chain(std::iter::repeat_with(|| Clearance::Unavailable).take(8));
    let store = Arc::new(Scripted {
        members: 4,
        clock: Some(clock),
        ..Arc::into_inner(Scripted::answering(answers)).unwrap()
    });
    let gate = builder()
        .adaptive(1.0, 100.0)
        .max_retries(0)
        .fleet(store)
        .build()
        .unwrap();
    let t0 = Instant::now();
    // Each call's start, and the rate once it ended; the fifth is throttled.
    let started = Arc::new(Mutex::new(Duration::ZERO));
    let mut calls = Vec::new();
    for call in 0..12 {
        let stamp = Arc::clone(&started);
        let ended = gate
            .call(move || {
                let stamp = Arc::clone(&stamp);
                async move {
                    *stamp.lock().unwrap() = t0.elapsed();
                    if call == 4 { Err(Throttle) } else { Ok(()) }
                }
            })
            .await;
        assert_eq!(ended.is_err(), call == 4);
        calls.push((*started.lock().unwrap(), gate.stats().rate.unwrap()));
    }
    assert_eq!(
        calls[0].1.round(),
        20.0,
        "the fleet's rate, taken up: {calls:?}"
    );
    let (before, cut) = (calls[3].1, calls[4].1);
    assert!(cut < before * 0.9, "the throttle cut the rate: {calls:?}");
    const MS: Duration = Duration::from_millis(1);
    for (i, pair) in calls.windows(2).enumerate() {
        let ((last, rate), (next, _)) = (pair[0], pair[1]);
        let start = i + 1;
        // The second start found the store silent at its slot, and waited its share from
        // there; then the fleet's share, to the start after the first the store answered
        // again (the ninth, which counted as a share as it started), then the whole.
        let intervals = match start {
            1 => 5.0,
            2..=9 => 4.0,
            _ => 1.0,
        };
        let share = Duration::from_secs_f64(intervals / rate);
        let gap = next - last;
        if start == 5 {
            // The throttle's Retry-After (1 s) holds the next start longer.
            assert!(gap >= Duration::from_secs(1), "start {start}: {gap:?}");
        } else {
            assert!(
                gap.abs_diff(share) <= MS,
                "start {start}: {gap:?}, not {share:?}"
            );
        }
    }
}

/// A retry that its front-end does not make (a request it cannot copy) gives back its place
/// in line at once: the calls behind it are not held up by a waiter that will never ask.
#[tokio::test(start_paused = true)]
async fn a_retry_never_made_gives_back_its_place_in_line() {
    use crate::gate::call::{Arrival, Turn};
    use crate::gate::ended::Estimated;
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

/// A call that cost what it was estimated at, or less, tells the fleet nothing; one that
/// cost more tells its paces and its generic quota the difference. (And the gate goes by
/// the name it was given.)
#[tokio::test(start_paused = true)]
async fn settling_tells_the_fleet_only_of_a_cost_above_the_estimate() {
    let store = Scripted::answering([]);
    let gate = builder()
        .name("ads")
        .fleet(Arc::clone(&store) as _)
        .build()
        .unwrap();
    assert_eq!(gate.name(), "ads");
    gate.settle(3, 3);
    gate.settle(3, 2);
    gate.settle(3, 5);
    let quota = "Budget { dimension: Dimension(\"units\"), limit: 1, per: 1s, window: Fixed }";
    let quota = format!(
        "settle [BudgetDraw {{ budget: {quota}, units: 0, source: Announced(None) }}] at [2]"
    );
    assert_eq!(*store.told.lock().unwrap(), ["settle 2".to_owned(), quota]);
}

/// The server announces its quota while the gate's other calls wait for the store: those it
/// has not let go yet are not what the server left uncounted (the fleet's quota spends them
/// as the store lets them go, and told whole they would be spent twice), but they go to the
/// store apart, for a window it knew nothing of; those it let go, to wait for their slot, are.
#[tokio::test(start_paused = true)]
async fn the_quota_told_to_the_fleet_leaves_out_the_calls_the_store_has_not_let_go() {
    let told_with_three_waiting = |reserved: bool| async move {
        // The first call goes at once; each of the other three, once the store answers it,
        // waits a second for its slot (or goes at once).
        let wait = Duration::from_secs(u64::from(reserved));
        let go = |wait| Clearance::Go {
            wait,
            fleet: None,
            at: None,
        };
        let store = Scripted::answering([go(Duration::ZERO), go(wait), go(wait), go(wait)]);
        let gate = Gate::builder(|_: &Throttle| None)
            .max_in_flight(4)
            .fleet(Arc::clone(&store) as _)
            .build()
            .unwrap();
        let permits = Arc::new(Semaphore::new(0));
        let answered = Arc::new(tokio::sync::Notify::new());
        let first = tokio::spawn({
            let (gate, answered) = (gate.clone(), Arc::clone(&answered));
            async move {
                gate.call(|| {
                    let answered = Arc::clone(&answered);
                    async move {
                        answered.notified().await;
                        Ok::<_, Throttle>(())
                    }
                })
                .await
            }
        });
        tokio::task::yield_now().await;
        store.stall(&permits);
        let others: Vec<_> = (0..3)
            .map(|_| {
                let gate = gate.clone();
                tokio::spawn(async move { gate.call(|| async { Ok::<_, Throttle>(()) }).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(10)).await;
        if reserved {
            permits.add_permits(3);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(gate.stats().in_flight, 4);
        // The first call's answer: 10 left, in a window of 10 s; the reserve is 1.
        gate.observe(crate::gate::quota::Quota::new(10, Duration::from_secs(10)));
        answered.notify_one();
        first.await.unwrap().unwrap();
        permits.add_permits(3);
        for other in others {
            other.await.unwrap().unwrap();
        }
        store.told.lock().unwrap().clone()
    };
    // Waiting for the store's answer: not taken off, but told apart.
    assert_eq!(told_with_three_waiting(false).await, [told_quota(9, 3)]);
    // Let go, waiting for their slots: taken off.
    assert_eq!(told_with_three_waiting(true).await, [told_quota(6, 0)]);
}

/// What the gate tells its store of the generic quota: `left` of it until a reset in 10 s,
/// beside `unsent` units waiting for the store, the server having said 10 in the answer to
/// a call started outside the store.
fn told_quota(left: u64, unsent: u64) -> String {
    told_quota_of((left, unsent), (10, None))
}

/// The same, the server having said `said` in the answer to a call the store started at
/// `dated`.
fn told_quota_of((left, unsent): (u64, u64), (said, dated): (u64, Option<u64>)) -> String {
    let quota = "budget: Budget { dimension: Dimension(\"units\"), limit: 1, per: 1s, window: Fixed }, source: Announced(None)";
    let dated = dated.map_or("None".to_owned(), |at| format!("Some({at})"));
    format!(
        "observe Reckoned {{ {quota}, left: {left}, resets_in: 10s, unsent: {unsent}, said: {said}, dated: {dated} }}"
    )
}

/// A quota announced in the answer to a call goes to the store dated by the start the
/// store reserved for that call: the fleet's window knows which of its words the server
/// spoke after that call was counted.
#[tokio::test(start_paused = true)]
async fn the_quota_told_to_the_fleet_is_dated_by_the_start_the_store_reserved() {
    let go = Clearance::Go {
        wait: Duration::ZERO,
        fleet: None,
        at: Some(5_000_000),
    };
    let store = Scripted::answering([go]);
    let gate = Gate::builder(|_: &Throttle| None)
        .fleet(Arc::clone(&store) as _)
        .build()
        .unwrap();
    gate.call(|| {
        let answered = gate.clone();
        async move {
            answered.observe(crate::gate::quota::Quota::new(4, Duration::from_secs(10)));
            Ok::<_, Throttle>(())
        }
    })
    .await
    .unwrap();
    // Less the reserve of 1.
    let told = store.told.lock().unwrap().clone();
    assert!(
        told.contains(&told_quota_of((3, 0), (4, Some(5_000_000)))),
        "{told:?}"
    );
}

async fn ok() -> Result<(), Throttle> {
    Ok(())
}

/// A call the full line turns away takes the lock once as it arrives, and never again: its
/// future is never made. Through `Gate::call`, once more before that, for the start that
/// nothing holds, which finds someone waiting.
#[tokio::test(start_paused = true)]
async fn a_call_turned_away_takes_the_lock_once_as_it_arrives() {
    use crate::gate::call::Arrival;
    use crate::gate::ended::Estimated;
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
        at: None,
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

/// A start the fleet turns back, while the store had yet to let it go, gives back its cost
/// as unsent with its slot: what the gate tells the fleet of a quota afterwards leaves
/// nothing out for it.
#[tokio::test(start_paused = true)]
async fn a_start_the_fleet_turned_back_leaves_no_unsent_cost_behind() {
    let held = Clearance::Held {
        scope: None,
        remaining: Duration::from_millis(700),
    };
    let store = Scripted::answering([held]);
    let gate = builder().fleet(Arc::clone(&store) as _).build().unwrap();
    gate.call(ok).await.unwrap();
    assert_eq!(gate.stats().held_by_fleet, 1);
    // 10 left, in a window of 10 s; the reserve is 1, and no call is in flight.
    gate.observe(crate::gate::quota::Quota::new(10, Duration::from_secs(10)));
    assert_eq!(*store.told.lock().unwrap(), [told_quota(9, 0)]);
}

/// An answer that brings the fleet's rate at the version this process has taken up already
/// (to a start that asked before it took it up) leaves the rate as this process has had it
/// since: here, cut by a throttle of its own.
#[tokio::test(start_paused = true)]
async fn a_fleets_rate_already_taken_up_is_not_taken_up_again() {
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
        at: None,
    };
    let store = Arc::new(Scripted {
        answers: Mutex::new([fleets(7, 5.0), fleets(7, 5.0)].into()),
        clock: Some(clock),
        ..Scripted::default()
    });
    let gate = builder()
        .adaptive(1.0, 100.0)
        .max_retries(0)
        .fleet(Arc::clone(&store) as _)
        .build()
        .unwrap();
    let throttled = gate.call(|| async { Err::<(), _>(Throttle) }).await;
    assert!(throttled.unwrap_err().is_gave_up());
    let cut = gate.stats().rate.unwrap();
    assert!(cut < 5.0, "the fleet's 5 a second, cut to {cut}");
    gate.call(ok).await.unwrap();
    assert_eq!(gate.stats().rate, Some(cut));
}

/// Each start of a scope with a rate tells the fleet's store the scope's pace for its cost.
/// A start that the fleet's pace of its scope holds back gives back its slot and waits out
/// of line until the scope's next start, while a call of another scope takes the slot.
#[tokio::test(start_paused = true)]
async fn a_start_the_fleets_pace_of_its_scope_holds_back_waits_out_of_line() {
    let paced = Clearance::Paced {
        scope: 0,
        wait: Duration::from_millis(600),
    };
    let store = Scripted::answering([paced]);
    let gate = builder()
        .max_in_flight(1)
        .rate(100.0)
        .per_scope(ScopeLimits::new().rate(2.0))
        .fleet(Arc::clone(&store) as _)
        .build()
        .unwrap();
    let start = Instant::now();
    let call = |scope: &'static str| {
        let gate = gate.clone();
        async move {
            gate.call_in([scope], || async {
                tokio::time::sleep(Duration::from_millis(100)).await;
                Ok::<_, Throttle>(())
            })
            .await
            .unwrap();
            start.elapsed()
        }
    };
    let held = tokio::spawn(call("a"));
    tokio::task::yield_now().await;
    let other = tokio::spawn(call("b"));
    let (held, other) = (held.await.unwrap(), other.await.unwrap());
    // The other scope's call took the slot at the gate's next start (10 ms: the start turned
    // back spent the first); the held one started at 600 ms.
    assert_eq!(other, Duration::from_millis(110));
    assert_eq!(held, Duration::from_millis(700));
    let paces = store.scope_paces.lock().unwrap().clone();
    let half_a_second = Some(Duration::from_millis(500));
    assert_eq!(
        paces,
        [
            [half_a_second].into(),
            [half_a_second].into(),
            [half_a_second].into(),
        ],
        "each start told the store its scopes' paces: the held call, the other, the held again"
    );
    let stats = gate.stats();
    assert_eq!((stats.calls, stats.held_by_fleet), (2, 0));
}

/// A quota announced with a scope's throttle, on a gate with limits per scope, is the
/// scope's: the fleet is told of the backoff, then of the quota, as the scope's.
#[tokio::test(start_paused = true)]
async fn a_scopes_quota_announced_with_its_throttle_is_told_the_fleet_as_the_scopes() {
    use crate::gate::quota::Quota;
    let store = Scripted::answering([]);
    let quota = Quota::new(0, Duration::from_secs(2));
    let throttle = RateLimited::new()
        .retry_after(Duration::from_secs(1))
        .scope("acct")
        .quota(quota);
    let gate = Gate::builder(move |_: &Throttle| Some(throttle.clone()))
        .max_retries(0)
        .per_scope(ScopeLimits::new().max_in_flight(4))
        .fleet(Arc::clone(&store) as _)
        .build()
        .unwrap();
    let result = gate
        .call_in(["acct"], || async { Err::<(), _>(Throttle) })
        .await;
    assert!(result.unwrap_err().is_gave_up());
    let told = store.told.lock().unwrap().clone();
    assert_eq!(told.len(), 2, "{told:?}");
    assert_eq!(told[0], r#"back off Some("acct") 1s"#);
    let scopes = r#"source: AnnouncedIn("acct", None), left: 0, resets_in: 2s"#;
    assert!(
        told[1].starts_with("observe ") && told[1].contains(scopes),
        "{told:?}"
    );
}

/// A window a server announced for a scope is told the fleet as the scope's, and every call
/// of that scope draws on it at its start, beside the gate's quota; a call of another scope
/// draws on that scope's quota alone.
#[tokio::test(start_paused = true)]
async fn a_scopes_announced_window_is_told_the_fleet_and_drawn_on_by_the_scopes_calls() {
    use crate::gate::dimensions::Source;
    use crate::gate::quota::{Announcement, Dimension, Quota};
    let store = Scripted::answering([]);
    let gate = Gate::builder(|_: &Throttle| None)
        .per_scope(ScopeLimits::new())
        .quota_reserve(0)
        .fleet(Arc::clone(&store) as _)
        .build()
        .unwrap();
    let minute = Quota::new(5, Duration::from_secs(60));
    let announced = Announcement::new(Dimension::TOKENS, minute).policy("minute");
    let tokens = |n| crate::CallOptions::new().cost_in(Dimension::TOKENS, n);
    let call = |tenant: &'static str, n| {
        let gate = gate.clone();
        let announced = announced.clone();
        async move {
            let options = tokens(n).scopes([tenant]);
            (gate.call_with(options, || async {
                gate.observe_all_in(tenant, [announced.clone()]).unwrap();
                ok().await
            }))
            .await
        }
    };
    call("a", 1).await.unwrap();
    call("a", 2).await.unwrap();
    call("b", 1).await.unwrap();
    let told = store.told.lock().unwrap().clone();
    assert!(
        told[0].contains(r#"AnnouncedIn("a", Some("minute"))"#),
        "{told:?}"
    );
    let drawn = |start: usize| {
        let budgets = store.budgets.lock().unwrap()[start].clone();
        let drawn = budgets.iter().map(|draw| (draw.source.clone(), draw.units));
        drawn.collect::<Vec<_>>()
    };
    let quota = |scope: Option<&str>, units| match scope {
        None => (Source::Announced(None), units),
        Some(scope) => (Source::AnnouncedIn(scope.into(), None), units),
    };
    let minute_of = |scope: &str, units| {
        (
            Source::AnnouncedIn(scope.into(), Some("minute".into())),
            units,
        )
    };
    // Before a's first answer, its call draws on the quotas every call draws on alone;
    // after it, a's minute too, and b's call on b's quota and not a's minute.
    assert_eq!(drawn(0), [quota(None, 1), quota(Some("a"), 1)]);
    assert_eq!(
        drawn(1),
        [quota(None, 1), quota(Some("a"), 1), minute_of("a", 2)]
    );
    assert_eq!(drawn(2), [quota(None, 1), quota(Some("b"), 1)]);
}

/// A gate without a rate: a call of one unit that nothing holds starts and ends in the slots
/// the state lent to its loan, with no lock after the first call's start, and the counts stay
/// exact: whatever takes the lock takes back what was lent first.
#[tokio::test(start_paused = true)]
async fn calls_that_nothing_holds_start_and_end_on_loan_without_the_lock() {
    let gate = Gate::builder(|_: &Throttle| None).build().unwrap();
    gate.call(ok).await.unwrap();
    assert_eq!(acquisitions(&gate), 1, "the first start opens a loan");
    for _ in 0..10 {
        gate.call(ok).await.unwrap();
    }
    assert_eq!(acquisitions(&gate), 1);
    assert_eq!(fast_starts(&gate), (11, 0));
    let stats = gate.stats();
    assert_eq!((stats.calls, stats.successes, stats.in_flight), (11, 11, 0));
    // The lock closed the loan: the next start takes it, and lends again.
    gate.call(ok).await.unwrap();
    gate.call(ok).await.unwrap();
    assert_eq!(acquisitions(&gate), 3);
    let stats = gate.stats();
    assert_eq!((stats.calls, stats.successes, stats.in_flight), (13, 13, 0));
}

/// The loan lends no more slots than are free: the third of three calls through a gate of two
/// waits for a slot, as it would without the loan; an error ends under the lock and counts.
#[tokio::test(start_paused = true)]
async fn the_loan_lends_only_the_free_slots_and_an_error_ends_under_the_lock() {
    let gate = Gate::builder(|_: &Throttle| None)
        .max_in_flight(2)
        .build()
        .unwrap();
    gate.call(ok).await.unwrap();
    let start = Instant::now();
    let second = || async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        Ok::<_, Throttle>(start.elapsed())
    };
    let (a, b, c) = futures::join!(gate.call(second), gate.call(second), gate.call(second));
    let s = Duration::from_secs;
    assert_eq!((a, b, c), (Ok(s(1)), Ok(s(1)), Ok(s(2))));
    let failed = gate.call(|| async { Err::<(), _>(Throttle) }).await;
    assert!(matches!(failed, Err(Error::Call(Throttle))));
    let stats = gate.stats();
    assert_eq!(
        (
            stats.calls,
            stats.successes,
            stats.other_errors,
            stats.in_flight
        ),
        (5, 4, 1, 0)
    );
}

/// A throttle, taken in under the lock, closes the loan: the next call waits out the backoff,
/// and successes step the backoff's streak down as before, under the lock.
#[tokio::test(start_paused = true)]
async fn a_throttle_closes_the_loan() {
    let gate =
        Gate::builder(|_: &Throttle| Some(RateLimited::new().retry_after(Duration::from_secs(1))))
            .max_retries(0)
            .build()
            .unwrap();
    gate.call(ok).await.unwrap();
    gate.call(ok).await.unwrap();
    let throttled = gate.call(|| async { Err::<(), _>(Throttle) }).await;
    assert!(throttled.unwrap_err().is_gave_up());
    let start = Instant::now();
    gate.call(ok).await.unwrap();
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(1),
        "held by the backoff"
    );
    let before = acquisitions(&gate);
    gate.call(ok).await.unwrap();
    assert!(
        acquisitions(&gate) - before >= 2,
        "a streak of throttles to step down: the call starts and ends under the lock"
    );
}

/// A call started on loan and dropped while its future runs gives its slot back under the
/// lock, and is not counted a success.
#[tokio::test(start_paused = true)]
async fn a_dropped_call_of_the_loan_gives_its_slot_back() {
    let gate = Gate::builder(|_: &Throttle| None)
        .max_in_flight(1)
        .build()
        .unwrap();
    // A first call of a gate of one slot lends nothing (its own holds the one); its end lends.
    gate.call(ok).await.unwrap();
    let mut pending =
        tokio_test::task::spawn(gate.call(std::future::pending::<Result<(), Throttle>>));
    tokio_test::assert_pending!(pending.poll());
    assert_eq!(fast_starts(&gate), (2, 0));
    drop(pending);
    let stats = gate.stats();
    assert_eq!((stats.calls, stats.successes, stats.in_flight), (2, 1, 0));
    gate.call(ok).await.unwrap();
}

/// Many threads through a gate of three slots: never more than three calls in progress, and
/// every call counted, whether it started and ended on loan or under the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loan_keeps_the_in_flight_limit_across_threads() {
    use std::sync::atomic::AtomicUsize;
    const TASKS: usize = 8;
    const CALLS: usize = 2_000;
    let gate = Gate::builder(|_: &Throttle| None)
        .max_in_flight(3)
        .build()
        .unwrap();
    let (inside, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (gate, inside, most) = (gate.clone(), Arc::clone(&inside), Arc::clone(&most));
            tokio::spawn(async move {
                for k in 0..CALLS {
                    gate.call(|| async {
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        if k % 3 == 0 {
                            tokio::task::yield_now().await;
                        }
                        inside.fetch_sub(1, Ordering::SeqCst);
                        Ok::<_, Throttle>(())
                    })
                    .await
                    .unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert!(most.load(Ordering::SeqCst) <= 3);
    let stats = gate.stats();
    let all = (TASKS * CALLS) as u64;
    assert_eq!(
        (stats.calls, stats.successes, stats.in_flight),
        (all, all, 0)
    );
}

/// A gate with a fixed rate lends its pace with its slots: a call of one unit that nothing
/// holds starts on loan once its start is due, with no lock, and the counts stay exact. A call
/// that comes too soon takes the lock, which takes back the last start made on loan, and
/// waits exactly one interval after it.
#[tokio::test(start_paused = true)]
async fn paced_calls_start_on_a_lent_pace_and_the_lock_takes_back_their_last_start() {
    let gate = builder().build().unwrap();
    let t0 = Instant::now();
    let interval = Duration::from_millis(100);
    gate.call(ok).await.unwrap();
    assert_eq!(acquisitions(&gate), 1, "the first start lends the pace");
    for k in 1..=5 {
        time::sleep_until(t0 + interval * k).await;
        gate.call(ok).await.unwrap();
    }
    assert_eq!(acquisitions(&gate), 1);
    assert_eq!(fast_starts(&gate), (0, 6));
    // Too soon: 50 ms after the start at 500 ms, which only the loan saw.
    time::sleep(interval / 2).await;
    gate.call(ok).await.unwrap();
    assert_eq!(
        Instant::now() - t0,
        interval * 6,
        "an interval after the loan's last start"
    );
    assert_eq!(fast_starts(&gate), (0, 6), "it waited in line");
    let stats = gate.stats();
    assert_eq!((stats.calls, stats.successes, stats.in_flight), (7, 7, 0));
    // A call that costs more is no call on loan, though due: it takes the lock, and pays its
    // units.
    time::sleep(interval).await;
    let t1 = Instant::now();
    let three = crate::CallOptions::new().cost(3);
    gate.call_with(three, ok).await.unwrap();
    gate.call(ok).await.unwrap();
    assert_eq!(Instant::now() - t1, interval * 3);
}

/// An adaptive rate lends no pace, nor slots: each start and each end must reach it.
#[tokio::test(start_paused = true)]
async fn an_adaptive_rate_lends_nothing() {
    let gate = Gate::builder(|_: &Throttle| Some(RateLimited::new()))
        .rate(10.0)
        .adaptive(1.0, 20.0)
        .build()
        .unwrap();
    for _ in 0..3 {
        gate.call(ok).await.unwrap();
        time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(acquisitions(&gate), 2 * 3, "two locks a call");
    assert_eq!(fast_starts(&gate), (0, 3));
}

/// Many threads through a gate paced at 2,000 calls a second, on loan and off it: the calls
/// that started never outran the rate over the run (a start for each interval, and the
/// first), whatever the threads' speed, and every call was counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lent_pace_keeps_the_rate_across_threads() {
    const TASKS: usize = 6;
    const CALLS: usize = 100;
    let interval = Duration::from_micros(500);
    let gate = Gate::builder(|_: &Throttle| None)
        .max_in_flight(4)
        .rate(2_000.0)
        .build()
        .unwrap();
    let first = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let gate = gate.clone();
            tokio::spawn(async move {
                for _ in 0..CALLS {
                    gate.call(ok).await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let span = first.elapsed();
    let all = TASKS * CALLS;
    let most = 1 + (span.as_nanos() / interval.as_nanos()) as usize;
    assert!(all <= most, "{all} starts in {span:?}: at most {most}");
    let stats = gate.stats();
    let all = all as u64;
    assert_eq!(
        (stats.calls, stats.successes, stats.in_flight),
        (all, all, 0)
    );
    assert!(fast_starts(&gate).1 > 0, "some started on loan");
}

/// A success that ends while a backoff runs, with nobody waiting, opens no loan: a call that
/// comes then waits for the backoff's end.
#[tokio::test(start_paused = true)]
async fn a_success_during_a_backoff_opens_no_loan() {
    let gate =
        Gate::builder(|_: &Throttle| Some(RateLimited::new().retry_after(Duration::from_secs(1))))
            .max_retries(0)
            .build()
            .unwrap();
    let start = Instant::now();
    let slow = gate.call(|| async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        Ok::<_, Throttle>(())
    });
    let throttled = gate.call(|| async { Err::<(), _>(Throttle) });
    let (slow, throttled) = futures::join!(slow, throttled);
    slow.unwrap();
    assert!(throttled.unwrap_err().is_gave_up());
    assert_eq!(start.elapsed(), Duration::from_millis(500));
    gate.call(ok).await.unwrap();
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(1),
        "held by the backoff"
    );
}

/// What the loan lent and took back leaves no unit counted in flight: an announcement read
/// once the calls are done takes none of its units as spent by calls still out.
#[tokio::test(start_paused = true)]
async fn the_loan_taken_back_leaves_no_cost_in_flight() {
    let gate = Gate::builder(|_: &Throttle| None)
        .max_in_flight(8)
        .quota_reserve(0)
        .build()
        .unwrap();
    for _ in 0..3 {
        gate.call(ok).await.unwrap();
    }
    assert!(gate.shared().loan.is_open(), "the calls went on loan");
    gate.observe(crate::Quota::new(10, Duration::from_secs(1)));
    // Less a call's room alone: none in flight.
    assert_eq!(gate.budget_left(&crate::Dimension::UNITS), Some(9));
}

/// A policy announced in a scope's answer goes to the gate while it may be the gate's:
/// kept as both until a second scope's answer shows whose it is. The gate's, it stays the
/// gate's budget as it was (a higher word later changes nothing); the scope's, the gate no
/// longer keeps it.
#[tokio::test(start_paused = true)]
async fn a_scoped_answers_policy_is_the_gates_until_shown_the_scopes() {
    use crate::gate::quota::{Announcement, Dimension, Quota};
    let gate = Gate::builder(|_: &Throttle| None)
        .per_scope(ScopeLimits::new())
        .build()
        .unwrap();
    let (a, b) = (Scope::from("a"), Scope::from("b"));
    let of = |policy: &str, left, key: &[u8]| {
        let quota = Quota::new(left, Duration::from_secs(10));
        Announcement::new(Dimension::UNITS, quota)
            .policy(policy)
            .partition(key)
    };
    let left = || gate.shared().budget_left(&Dimension::UNITS);
    // The whole key's 8 left, and the account's 3: both kept as the gate's too.
    gate.shared()
        .observe_all_for(Some(&a), [of("key", 8, b"k"), of("account", 3, b"a")]);
    assert_eq!(left(), Some(2), "the account's 3, less a call's room");
    let scopes = gate.shared().budget_left_in(&a, &Dimension::UNITS);
    assert_eq!(scopes, Some(2), "and the scope's");
    // Account b's answer shows the account's policy b's own (another key): the gate keeps
    // the whole key's alone, still at 8 (its word of 9 is higher).
    gate.shared()
        .observe_all_for(Some(&b), [of("key", 9, b"k"), of("account", 4, b"b")]);
    assert_eq!(left(), Some(7));
}

/// Calls that nothing holds start at once, outside the line: of no scope through a gate
/// with limits per scope, on the fast path; of a scope, with the lock taken once to start
/// (its scope's limits read, and none holds it) and once to end.
#[tokio::test(start_paused = true)]
async fn calls_nothing_holds_start_outside_the_line_whatever_the_limits_per_scope() {
    use crate::CallOptions;
    let per_scope = || {
        Gate::builder(|_: &Throttle| None)
            .per_scope(ScopeLimits::new())
            .build()
            .unwrap()
    };
    let unscoped = per_scope();
    unscoped.call(ok).await.unwrap();
    assert_eq!(fast_starts(&unscoped), (1, 0));
    let scoped = per_scope();
    let in_scope = CallOptions::new().scopes(["tenant"]);
    scoped.call_with(in_scope, ok).await.unwrap();
    assert_eq!(acquisitions(&scoped), 2);
}

/// Of a scoped answer, whether a policy that ran out is the scope's alone (a refusal of the
/// call is then its scope's) or the gate's too; `None` if none ran out.
#[tokio::test(start_paused = true)]
async fn a_scoped_answer_says_whether_what_ran_out_is_the_scopes_alone() {
    use crate::PolicyOf;
    use crate::gate::quota::{Announcement, Dimension, Quota};
    let gate = Gate::builder(|_: &Throttle| None)
        .per_scope(ScopeLimits::new())
        .policy_of("key", PolicyOf::Gate)
        .policy_of("account", PolicyOf::Scope)
        .build()
        .unwrap();
    let tenant = Scope::from("tenant");
    let of = |policy: &str, left| {
        let quota = Quota::new(left, Duration::from_secs(10));
        Announcement::new(Dimension::UNITS, quota).policy(policy)
    };
    let ran_out =
        |announced: Vec<Announcement>| gate.shared().observe_all_for(Some(&tenant), announced);
    assert_eq!(ran_out(vec![of("key", 5), of("account", 3)]), None);
    assert_eq!(ran_out(vec![of("key", 5), of("account", 0)]), Some(true));
    assert_eq!(ran_out(vec![of("key", 0), of("account", 3)]), Some(false));
    assert_eq!(ran_out(vec![of("account", 0), of("key", 0)]), Some(false));
}

/// The answer to the call sent to learn a new window, read while that call is still out,
/// wakes the calls that wait for it: they start as the new window's spread lets them, not
/// when that call ends. The gate's window, and a scope's, read as a front-end reads a
/// scoped answer.
#[tokio::test(start_paused = true)]
async fn the_answer_that_learns_a_new_window_wakes_the_calls_waiting_for_it() {
    learns_a_new_window_and_wakes_the_waiting(None).await;
    learns_a_new_window_and_wakes_the_waiting(Some(Scope::from("tenant"))).await;
}

async fn learns_a_new_window_and_wakes_the_waiting(scope: Option<Scope>) {
    use crate::CallOptions;
    use crate::gate::quota::{Announcement, Dimension, Quota};
    let mut builder = Gate::builder(|_: &Throttle| None).max_in_flight(4);
    if scope.is_some() {
        builder = builder.per_scope(ScopeLimits::new());
    }
    let gate = builder.build().unwrap();
    let options = || CallOptions::new().scopes(scope.clone());
    let announce = |gate: &Gate<Throttle>, left, resets_in| {
        let quota = Quota::new(left, Duration::from_secs(resets_in));
        let announced = [Announcement::new(Dimension::UNITS, quota)];
        gate.shared().observe_all_for(scope.as_ref(), announced);
    };
    let t0 = Instant::now();
    // Nothing left until 1 s from now.
    gate.call_with(options(), || async {
        announce(&gate, 0, 1);
        Ok::<_, Throttle>(())
    })
    .await
    .unwrap();
    let learning = gate.call_with(options(), || async {
        time::sleep(Duration::from_millis(100)).await;
        announce(&gate, 100, 10);
        time::sleep(Duration::from_secs(1)).await;
        Ok::<_, Throttle>(())
    });
    // Once the learning call is out, this one waits for its answer.
    let waiting = async {
        time::sleep(Duration::from_millis(1_010)).await;
        gate.call_with(options(), || async { Ok::<_, Throttle>(Instant::now()) })
            .await
    };
    let (learnt, started) = tokio::join!(learning, waiting);
    learnt.unwrap();
    // The answer came at 1.1 s; 99 left of 10 s spread after the learning call's start at 1 s.
    let after = started.unwrap() - t0;
    assert!(
        after >= Duration::from_millis(1_100) && after < Duration::from_millis(1_300),
        "{scope:?}: started {after:?} in"
    );
}

/// A gate without a rate that keeps an announced quota lends no slots: every start is
/// spent from the quota, spread until its reset.
#[tokio::test(start_paused = true)]
async fn a_gate_keeping_an_announced_quota_lends_no_slots() {
    let gate = Gate::builder(|_: &Throttle| None).build().unwrap();
    gate.observe(crate::gate::quota::Quota::new(3, Duration::from_secs(10)));
    let start = Instant::now();
    for _ in 0..3 {
        gate.call(ok).await.unwrap();
    }
    // 3 left less a call's room, spread over 10 s: the second a third of the way, the
    // third at the reset, to learn the next window.
    assert_eq!(start.elapsed(), Duration::from_secs(10));
    assert_eq!(fast_starts(&gate), (0, 0));
}

/// A scope's call ends through the lock even while the loan is open (opened by a call of no
/// scope that started while it was out): its scope's slot comes back, and the scope's next
/// call starts.
#[tokio::test(start_paused = true)]
async fn a_scopes_call_gives_its_scopes_slot_back_while_the_loan_is_open() {
    use crate::CallOptions;
    let gate = Gate::builder(|_: &Throttle| None)
        .per_scope(ScopeLimits::new().max_in_flight(1))
        .build()
        .unwrap();
    let in_scope = || CallOptions::new().scopes(["tenant"]);
    let scoped = gate.call_with(in_scope(), || async {
        time::sleep(Duration::from_millis(100)).await;
        Ok::<_, Throttle>(())
    });
    let unscoped = async {
        time::sleep(Duration::from_millis(10)).await;
        gate.call(ok).await
    };
    let (scoped, unscoped) = tokio::join!(scoped, unscoped);
    scoped.unwrap();
    unscoped.unwrap();
    let next = gate.call_with(in_scope(), ok);
    time::timeout(Duration::from_secs(1), next)
        .await
        .expect("the scope's slot came back")
        .unwrap();
}
