//! The scripts keep a budget told the gates as the gate keeps it in one process: random
//! calls (of random units, after random waits, some costing more or less than they started
//! with, settled as they end) ask a budget of a random kind, limit and window, through
//! start.lua and settle_budgets.lua on a `redis-server` whose clock the test sets, and
//! through the gate's own budget (`gate/dimensions/told.rs`); each call must start at the
//! same instant on both, to the microseconds the scripts count in: a bucket's scripts round
//! each refill to a microsecond, where the gate rounds it to a nanosecond, so its starts may
//! come later by up to a microsecond for each start and settlement before (never earlier). A
//! call the script holds asks again when it says, as a gate's does.

use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use proptest::test_runner::TestRunner;
use tokio::time::Instant;

use super::FakeTimeRedis;
use crate::gate::budget::Spend;
use crate::gate::dimensions::{BudgetDraw, Dimensions, Draws};
use crate::gate::fleet::{Clearance, FleetAsk};
use crate::store::redis::{RedisStore, clearance};
use crate::{Budget, Cost, Dimension, Window};

/// What the scripts and the gate may differ by, beside a bucket's rounding: the scripts
/// count in microseconds, the gate in nanoseconds.
const ROUNDING: u64 = 2;

fn kind() -> impl Strategy<Value = Window> {
    prop::sample::select(vec![Window::Fixed, Window::Sliding, Window::Refilling])
}

/// One call, as the test runs it.
#[derive(Debug, Clone, Copy)]
struct Call {
    /// It asks this long after the one before ended.
    wait_ms: u64,
    /// It starts with these units.
    units: u64,
    /// It ends this long after it started...
    takes_ms: u64,
    /// ...having cost this many (`None`: what it started with).
    actual: Option<u64>,
}

fn calls() -> impl Strategy<Value = Vec<Call>> {
    let actual = prop::option::weighted(0.6, 0..45u64);
    let call = (0..1_500u64, 1..25u64, 0..800u64, actual).prop_map(
        |(wait_ms, units, takes_ms, actual)| Call {
            wait_ms,
            units,
            takes_ms,
            actual,
        },
    );
    prop::collection::vec(call, 1..30)
}

/// When each of `calls` starts, by the gate's budget, in microseconds since the first asked.
fn by_the_gate(budget: &Budget, calls: &[Call]) -> Vec<u64> {
    let t0 = Instant::now();
    let dimension = budget.dimension().clone();
    let mut dims = Dimensions::new(std::slice::from_ref(budget), 0);
    let mut at = Duration::ZERO;
    let mut starts = Vec::new();
    for call in calls {
        at += Duration::from_millis(call.wait_ms);
        let draws = Draws::NONE.with(dimension.clone(), call.units);
        let start = match dims.check(t0 + at, 1, &draws) {
            Spend::Now => at,
            Spend::NotBefore(start) => start - t0,
            Spend::AwaitAnswer => unreachable!("a told budget awaits no answer"),
        };
        dims.started(t0 + start, 1, &draws);
        starts.push(start.as_micros() as u64);
        at = start + Duration::from_millis(call.takes_ms);
        if let Some(actual) = call.actual {
            let cost = Cost::new().with(dimension.clone(), actual);
            dims.settle((t0 + start, t0 + at), (1, &draws), &cost);
        }
    }
    starts
}

/// When each of `calls` starts, by start.lua on `redis`, in the namespace `namespace`.
fn by_the_scripts(
    redis: &FakeTimeRedis,
    namespace: &str,
    budget: &Budget,
    calls: &[Call],
) -> Vec<u64> {
    let mut connection = redis.connect();
    let store = RedisStore::open(&redis.url(), namespace).expect("a store");
    store
        .load_scripts(&mut connection)
        .expect("the scripts load");
    let mut at = Duration::ZERO;
    let mut starts = Vec::new();
    let draw = |units| BudgetDraw::told(budget.clone(), units);
    for call in calls {
        at += Duration::from_millis(call.wait_ms);
        let asked = FleetAsk {
            known_rate: None,
            scope_paces: Box::default(),
            budgets: Box::new([draw(call.units)]),
            ..FleetAsk::default()
        };
        let asks = store.start_call(&[], None, (&asked, None, 1), (1, Duration::ZERO));
        let (start, reserved) = loop {
            redis.set_clock(at);
            let reply: Vec<redis::Value> = asks.query(&mut connection).expect("the script runs");
            match clearance(&reply) {
                Clearance::Go {
                    wait, at: reserved, ..
                } => break (at + wait, reserved),
                // Asked again when the script says, at least a microsecond on.
                Clearance::Later(wait) => at += wait.max(Duration::from_micros(1)),
                other => panic!("start.lua answered {other:?}"),
            }
        };
        starts.push(start.as_micros() as u64);
        at = start + Duration::from_millis(call.takes_ms);
        if let Some(actual) = call.actual.filter(|actual| *actual != call.units) {
            redis.set_clock(at);
            let settle = store.settle_budgets_call(&[draw(call.units)], &[actual], reserved);
            let _: Vec<redis::Value> = settle.query(&mut connection).expect("the script runs");
        }
    }
    starts
}

/// Whether each call starts at the same instant by the gate (`gate`) and by the scripts
/// (`scripts`), in microseconds, as a budget of `kind` lets the two differ: by the
/// microseconds they count in, and for a bucket, by a microsecond later for each start and
/// settlement before, which its scripts round and the gate does not.
fn start_alike(kind: Window, gate: &[u64], scripts: &[u64]) -> Result<(), TestCaseError> {
    for (i, (g, s)) in gate.iter().zip(scripts).enumerate() {
        let later = if kind == Window::Refilling {
            2 * i as u64
        } else {
            0
        };
        prop_assert!(
            *s + ROUNDING >= *g && *s <= *g + ROUNDING + later,
            "call {i} starts at {g} µs by the gate, {s} µs by the scripts\ngate:    \
             {gate:?}\nscripts: {scripts:?}"
        );
    }
    Ok(())
}

#[test]
fn the_scripts_keep_a_told_budget_as_the_gate_does() {
    let redis = FakeTimeRedis::start();
    let config = super::runs(600, file!());
    let cases = (kind(), 1..20u64, 100..3_000u64, calls());
    let case = std::sync::atomic::AtomicUsize::new(0);
    let result = TestRunner::new(config).run(&cases, |(kind, limit, per_ms, calls)| {
        let case = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let budget =
            Budget::new(Dimension::TOKENS, limit, Duration::from_millis(per_ms)).window(kind);
        let gate = by_the_gate(&budget, &calls);
        let scripts = by_the_scripts(&redis, &format!("budgets-{case}"), &budget, &calls);
        start_alike(kind, &gate, &scripts)
    });
    drop(redis);
    if let Err(failure) = result {
        panic!("{failure}");
    }
}

/// What keeps a budget for the calls of [`overlapping`]: the gate's own, or the scripts.
trait Keeper {
    /// Call `i`, of `units`, asks at `at`: `Ok` if it starts then, else when to ask again.
    fn ask(&mut self, i: usize, units: u64, at: Duration) -> Result<(), Duration>;
    /// Call `i`, started with `units`, ends at `at` having cost `actual`.
    fn settle(&mut self, i: usize, cost: (u64, u64), at: Duration);
}

/// When each of `calls` starts, by `keeper`, in microseconds since the first asked, where
/// each asks `wait_ms` after the one before asked (once that one started: they start in
/// turn, as a gate's line starts them) and ends `takes_ms` after its start, while later
/// ones start: ends and asks are taken in the order of their instants, and a call told to
/// wait asks again at once after an end that came first.
fn overlapping(keeper: &mut impl Keeper, calls: &[Call]) -> Vec<u64> {
    // The calls started and not ended, by when they end.
    let mut out: Vec<(Duration, usize)> = Vec::new();
    let (mut asks, mut starts) = (Duration::ZERO, Vec::<Duration>::new());
    for (i, call) in calls.iter().enumerate() {
        asks += Duration::from_millis(call.wait_ms);
        let mut at = asks.max(starts.last().copied().unwrap_or_default());
        let start = loop {
            out.sort_unstable();
            while let Some(&(ends, ended)) = out.first().filter(|(ends, _)| *ends <= at) {
                out.remove(0);
                let settled = calls[ended];
                if let Some(actual) = settled.actual {
                    keeper.settle(ended, (settled.units, actual), ends);
                }
            }
            match keeper.ask(i, call.units, at) {
                Ok(()) => break at,
                Err(again) => {
                    let next_end = out.first().map_or(again, |(ends, _)| *ends);
                    at = again.min(next_end);
                }
            }
        };
        starts.push(start);
        out.push((start + Duration::from_millis(call.takes_ms), i));
    }
    starts
        .iter()
        .map(|start| start.as_micros() as u64)
        .collect()
}

/// The gate's own budget, as a [`Keeper`].
struct GateKeeper {
    t0: Instant,
    dimension: Dimension,
    dims: Dimensions,
    sent: Vec<Duration>,
}

impl Keeper for GateKeeper {
    fn ask(&mut self, i: usize, units: u64, at: Duration) -> Result<(), Duration> {
        let draws = Draws::NONE.with(self.dimension.clone(), units);
        match self.dims.check(self.t0 + at, 1, &draws) {
            Spend::Now => {
                self.dims.started(self.t0 + at, 1, &draws);
                self.sent.resize(i + 1, at);
                Ok(())
            }
            Spend::NotBefore(start) => Err(start - self.t0),
            Spend::AwaitAnswer => unreachable!("a told budget awaits no answer"),
        }
    }

    fn settle(&mut self, i: usize, (units, actual): (u64, u64), at: Duration) {
        let draws = Draws::NONE.with(self.dimension.clone(), units);
        let cost = Cost::new().with(self.dimension.clone(), actual);
        let sent = self.t0 + self.sent[i];
        self.dims.settle((sent, self.t0 + at), (1, &draws), &cost);
    }
}

/// start.lua and settle_budgets.lua on a `redis-server` whose clock the test sets, as a
/// [`Keeper`].
struct ScriptKeeper<'a> {
    redis: &'a FakeTimeRedis,
    connection: redis::Connection,
    store: RedisStore,
    budget: Budget,
    /// Where the scripts put each call's start.
    reserved: Vec<Option<i64>>,
}

impl ScriptKeeper<'_> {
    fn draw(&self, units: u64) -> BudgetDraw {
        BudgetDraw::told(self.budget.clone(), units)
    }
}

impl Keeper for ScriptKeeper<'_> {
    fn ask(&mut self, i: usize, units: u64, at: Duration) -> Result<(), Duration> {
        let asked = FleetAsk {
            budgets: Box::new([self.draw(units)]),
            ..FleetAsk::default()
        };
        let asks = (self.store).start_call(&[], None, (&asked, None, 1), (1, Duration::ZERO));
        self.redis.set_clock(at);
        let reply: Vec<redis::Value> = asks.query(&mut self.connection).expect("it runs");
        match clearance(&reply) {
            Clearance::Go {
                wait, at: reserved, ..
            } if wait.is_zero() => {
                self.reserved.resize(i + 1, reserved);
                Ok(())
            }
            // Asked again when the script says, at least a microsecond on.
            Clearance::Later(wait) => Err(at + wait.max(Duration::from_micros(1))),
            other => panic!("start.lua answered {other:?}"),
        }
    }

    fn settle(&mut self, i: usize, (units, actual): (u64, u64), at: Duration) {
        if actual == units {
            return;
        }
        self.redis.set_clock(at);
        let draw = [self.draw(units)];
        let settle = (self.store).settle_budgets_call(&draw, &[actual], self.reserved[i]);
        let _: Vec<redis::Value> = settle.query(&mut self.connection).expect("it runs");
    }
}

fn overlapping_calls() -> impl Strategy<Value = Vec<Call>> {
    let actual = prop::option::weighted(0.6, 0..45u64);
    let call = (0..300u64, 1..25u64, 0..1_500u64, actual).prop_map(
        |(wait_ms, units, takes_ms, actual)| Call {
            wait_ms,
            units,
            takes_ms,
            actual,
        },
    );
    prop::collection::vec(call, 1..30)
}

/// As [`the_scripts_keep_a_told_budget_as_the_gate_does`], with calls that overlap: each
/// asks soon after the one before, and ends (and settles) while later ones start, so that a
/// call settles against a window other calls started in since, and calls told to wait for
/// one instant start at it together.
#[test]
fn the_scripts_keep_a_told_budget_as_the_gate_does_for_calls_that_overlap() {
    let redis = FakeTimeRedis::start();
    let config = super::runs(400, file!());
    let cases = (kind(), 1..20u64, 100..3_000u64, overlapping_calls());
    let case = std::sync::atomic::AtomicUsize::new(0);
    let result = TestRunner::new(config).run(&cases, |(kind, limit, per_ms, calls)| {
        let case = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let budget =
            Budget::new(Dimension::TOKENS, limit, Duration::from_millis(per_ms)).window(kind);
        let mut gate = GateKeeper {
            t0: Instant::now(),
            dimension: budget.dimension().clone(),
            dims: Dimensions::new(std::slice::from_ref(&budget), 0),
            sent: Vec::new(),
        };
        let store = RedisStore::open(&redis.url(), &format!("overlapping-{case}")).expect("store");
        let mut connection = redis.connect();
        store
            .load_scripts(&mut connection)
            .expect("the scripts load");
        let mut scripts = ScriptKeeper {
            redis: &redis,
            connection,
            store,
            budget,
            reserved: Vec::new(),
        };
        let by_gate = overlapping(&mut gate, &calls);
        let by_scripts = overlapping(&mut scripts, &calls);
        start_alike(kind, &by_gate, &by_scripts)
    });
    drop(redis);
    if let Err(failure) = result {
        panic!("{failure}");
    }
}

/// A settled call gives back to the fixed window it spent in, not to the one running when
/// it ends; and calls that started at one instant in a sliding window give back from each
/// other's units, the one settled first and then the next, no more than each spent.
#[test]
fn give_backs_reach_only_the_window_and_the_instant_the_call_spent_in() {
    let redis = FakeTimeRedis::start();
    let mut connection = redis.connect();
    let store = RedisStore::open(&redis.url(), "give-backs").expect("a store");
    store
        .load_scripts(&mut connection)
        .expect("the scripts load");
    let ms = Duration::from_millis;
    let mut ask = |budget: &Budget, units, at| {
        let asked = FleetAsk {
            budgets: Box::new([BudgetDraw::told(budget.clone(), units)]),
            ..FleetAsk::default()
        };
        redis.set_clock(at);
        let asks = store.start_call(&[], None, (&asked, None, 1), (1, Duration::ZERO));
        let reply: Vec<redis::Value> = asks.query(&mut connection).expect("the script runs");
        match clearance(&reply) {
            Clearance::Go { at: reserved, .. } => Some(reserved.expect("its instant")),
            Clearance::Later(_) => None,
            other => panic!("start.lua answered {other:?}"),
        }
    };
    let settle = |budget: &Budget, estimated, sent, at| {
        let draw = BudgetDraw::told(budget.clone(), estimated);
        redis.set_clock(at);
        let call = store.settle_budgets_call(&[draw], &[0], Some(sent));
        let _: Vec<redis::Value> = call.query(&mut redis.connect()).expect("the script runs");
    };

    // 5 a second in fixed windows from the first start, at 500 ms: 3 there, 3 in the next.
    let fixed = Budget::new(Dimension::TOKENS, 5, ms(1_000)).window(Window::Fixed);
    let first = ask(&fixed, 3, ms(500)).expect("room");
    ask(&fixed, 3, ms(1_600)).expect("a new window");
    // The first call, settled in the second window having used nothing, gives it nothing.
    settle(&fixed, 3, first, ms(1_700));
    assert_eq!(
        ask(&fixed, 3, ms(1_800)),
        None,
        "the second window holds 3 of 5"
    );

    // 6 in 10 s, sliding: two calls of 3 at one instant; one settled as having used nothing,
    // with an estimate of 5, gives back its 3 and 2 of the other's.
    let sliding = Budget::new(Dimension::TOKENS, 6, ms(10_000)).window(Window::Sliding);
    let at = ask(&sliding, 3, ms(30_000)).expect("room");
    assert_eq!(ask(&sliding, 3, ms(30_000)), Some(at), "one instant");
    // Each counts, though the two are alike.
    assert_eq!(ask(&sliding, 1, ms(30_000)), None, "6 of 6 spent");
    settle(&sliding, 5, at, ms(30_100));
    assert!(ask(&sliding, 5, ms(30_200)).is_some(), "1 of 6 spent");
}
