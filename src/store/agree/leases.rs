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

    // A start of a scope with a pace, or drawing from a budget, leases nothing.
    let scope = Scope::from("acct");
    let scoped = FleetAsk {
        scope_paces: Box::new([Some(3 * MS)]),
        ..FleetAsk::default()
    };
    assert_eq!(start(both, at(200), (&[scope], &scoped), (3 * MS, 5)).1, 1);
    let budgeted = FleetAsk {
        budgets: Box::new([crate::gate::dimensions::BudgetDraw {
            budget: Budget::new(Dimension::TOKENS, 100, 10 * MS),
            units: 1,
        }]),
        ..FleetAsk::default()
    };
    assert_eq!(start(both, at(300), (&[], &budgeted), (3 * MS, 5)).1, 1);

    // Nor while the fleet spends a quota the server announced.
    let mut connection = redis.connect();
    redis.set_clock(at(400));
    let observe = store.observe_call(100, 0, Duration::from_secs(60));
    let _: Vec<redis::Value> = observe.query(&mut connection).expect("the script runs");
    assert_eq!(start(both, at(400), (&[], &plain), (3 * MS, 5)).1, 1);
}
