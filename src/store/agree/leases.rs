//! start.lua leases a call's next slots of the fleet's rate to the gate that asks, on a
//! `redis-server` whose clock the test sets: as many as the gate asks for and the span holds,
//! each an interval after the one before, and the fleet's pace moves past them all; a call
//! that more than the rate spaces (a quota the fleet spends, a budget, a scope's pace) leases
//! nothing.

use std::time::Duration;

use super::FakeTimeRedis;
use crate::gate::classify::Scope;
use crate::gate::fleet::FleetAsk;
use crate::store::redis::{RedisStore, int};
use crate::{Budget, Dimension};

const MS: Duration = Duration::from_millis(1);

/// What start.lua answered: (wait, starts leased with it, their interval), in microseconds.
fn start(
    (redis, store): (&FakeTimeRedis, &RedisStore),
    at: Duration,
    (scopes, asked): (&[Scope], &FleetAsk),
    (interval, starts): (Duration, u32),
) -> (i64, i64, i64) {
    let mut connection = redis.connect();
    redis.set_clock(at);
    let call = store.start_call(scopes, Some(interval), (asked, None, starts), (1, 20 * MS));
    let reply: Vec<redis::Value> = call.query(&mut connection).expect("the script runs");
    assert_eq!(int(&reply, 0), Some(1), "a start: {reply:?}");
    let field = |i| int(&reply, i).expect("a number");
    (field(1), field(7), field(8))
}

#[test]
fn a_start_leases_the_slots_after_its_own_as_many_as_asked_and_the_span_holds() {
    let redis = FakeTimeRedis::start();
    let plain = FleetAsk::default();
    let store = RedisStore::open(&redis.url(), "leases")
        .expect("a store")
        .lease(20 * MS);
    store
        .load_scripts(&mut redis.connect())
        .expect("the scripts load");
    let at = |ms: u64| Duration::from_millis(1_000 + ms);
    let both = (&redis, &store);
    // 5 asked, at 3 ms apart: 5 leased, and the next start is 15 ms on.
    assert_eq!(
        start(both, at(0), (&[], &plain), (3 * MS, 5)),
        (0, 5, 3_000)
    );
    assert_eq!(start(both, at(0), (&[], &plain), (3 * MS, 1)).0, 15_000);
    // 50 asked, but 20 ms holds 6 of 3 ms: 6 leased, from the slot at 18 ms.
    assert_eq!(
        start(both, at(18), (&[], &plain), (3 * MS, 50)),
        (0, 6, 3_000)
    );
    assert_eq!(start(both, at(18), (&[], &plain), (3 * MS, 1)).0, 18_000);
    // An interval longer than the span: one start, as without leases.
    assert_eq!(
        start(both, at(100), (&[], &plain), (30 * MS, 9)),
        (0, 1, 30_000)
    );

    // A start of a scope with a pace leases nothing.
    let scope = Scope::from("acct");
    let scoped = FleetAsk {
        scope_paces: Box::new([Some(3 * MS)]),
        ..FleetAsk::default()
    };
    assert_eq!(start(both, at(200), (&[scope], &scoped), (3 * MS, 5)).1, 1);

    // Nor while the fleet spends a quota the server announced.
    let mut connection = redis.connect();
    redis.set_clock(at(400));
    let observe = store.observe_call(100, 0, Duration::from_secs(60));
    let _: Vec<redis::Value> = observe.query(&mut connection).expect("the script runs");
    assert_eq!(start(both, at(400), (&[], &plain), (3 * MS, 5)).1, 1);
}

/// A start drawing from budgets leases as many slots as every budget has room for, each
/// spending its units at its own instant, in a window of each kind: a sliding and a fixed
/// window of 3 a second, a bucket of 3 that refills in a second. A leased slot's units go
/// back to a window where the call that took it settles, found at the slot's instant.
#[test]
fn a_start_drawing_from_budgets_leases_what_each_has_room_for_slot_by_slot() {
    use crate::Window;
    use crate::gate::dimensions::BudgetDraw;

    let redis = FakeTimeRedis::start();
    let store = RedisStore::open(&redis.url(), "budget-leases").expect("a store");
    store
        .load_scripts(&mut redis.connect())
        .expect("the scripts load");
    let at = |ms: u64| Duration::from_millis(1_000 + ms);
    let windows = [Window::Sliding, Window::Fixed, Window::Refilling];
    for (i, window) in windows.into_iter().enumerate() {
        let budget = Budget::new(Dimension::TOKENS, 3, Duration::from_secs(1)).window(window);
        let draw = BudgetDraw { budget, units: 1 };
        let asked = FleetAsk {
            budgets: Box::new([draw.clone()]),
            ..FleetAsk::default()
        };
        let from = 10_000 * i as u64;
        let mut connection = redis.connect();
        let ask = |starts| {
            let call = store.start_call(&[], Some(3 * MS), (&asked, None, starts), (1, 20 * MS));
            let reply: Vec<redis::Value> = call.query(&mut redis.connect()).expect("it runs");
            reply
        };
        // 5 asked at 3 ms apart, 3 fit the budget: the first slot and two leased.
        redis.set_clock(at(from));
        let reply = ask(5);
        let field = |i| int(&reply, i).expect("a number");
        assert_eq!(
            (field(0), field(1), field(7), field(8)),
            (1, 0, 3, 3_000),
            "{window:?}"
        );
        let first = field(5);
        // The budget is spent: the next call waits, and nothing is reserved.
        redis.set_clock(at(from + 9));
        assert_eq!(int(&ask(1), 0), Some(2), "{window:?}: spent");
        if window == Window::Refilling {
            // A bucket gives back nothing the refill since the slot may have covered.
            continue;
        }
        // The call that took the second slot (3 ms after the first) used nothing: its unit
        // goes back, and a call fits again.
        let settle = store.settle_budgets_call(&[draw], &[0], Some(first + 3_000));
        let _: Vec<redis::Value> = settle.query(&mut connection).expect("the script runs");
        assert_eq!(int(&ask(1), 0), Some(1), "{window:?}: given back");
    }
}
