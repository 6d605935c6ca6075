//! start.lua leases a call's next slots of the fleet's rate to the gate that asks, on a
//! `redis-server` whose clock the test sets: as many as the gate asks for and the span holds,
//! each an interval after the one before, and the fleet's pace moves past them all; an
//! announced quota, told budgets and a scope's pace lease what they have room for, each
//! slot one of the rate's.

use std::time::Duration;

use super::FakeTimeRedis;
use crate::gate::classify::Scope;
use crate::gate::fleet::FleetAsk;
use crate::store::redis::{RedisStore, int, quota_draw};
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

    // A start of a scope paced 6 ms apart leases at the scope's pace: 3 in the span. They
    // take the rate's next 3 slots (the next unscoped start comes at 9 ms), and the scope's
    // next start comes 6 ms after the last (at 18 ms).
    let scope = Scope::from("acct");
    let scoped = FleetAsk {
        scope_paces: Box::new([Some(6 * MS)]),
        ..FleetAsk::default()
    };
    let scopes = [scope];
    assert_eq!(
        start(both, at(200), (&scopes, &scoped), (3 * MS, 5)),
        (0, 3, 6_000)
    );
    assert_eq!(start(both, at(200), (&[], &plain), (3 * MS, 1)).0, 9_000);
    let call = store.start_call(&scopes, Some(3 * MS), (&scoped, None, 1), (1, 20 * MS));
    let reply: Vec<redis::Value> = call.query(&mut redis.connect()).expect("it runs");
    assert_eq!((int(&reply, 0), int(&reply, 1)), (Some(3), Some(18_000)));
}

/// The quota's fields `l` (units left) and `s` (the last start, in microseconds of the
/// test's clock).
fn quota_left_and_last(redis: &FakeTimeRedis, store: &RedisStore) -> (i64, i64) {
    let (_, quota) = store.pace_and_quota_keys();
    let fields: Vec<i64> = redis::cmd("HMGET")
        .arg(quota)
        .arg(&["l", "s"][..])
        .query(&mut redis.connect())
        .expect("HMGET");
    let origin = i64::try_from(super::ORIGIN_SECS * 1_000_000).expect("microseconds");
    (fields[0], fields[1] - origin)
}

/// While the fleet spends a quota the server announced, a start leases slots spread as the
/// quota spreads starts, as many as the span holds and leave a span and a slot before the
/// reset; the quota counts them all spent.
#[test]
fn a_start_leases_an_announced_quota_as_it_spreads_starts() {
    let redis = FakeTimeRedis::start();
    let plain = FleetAsk {
        budgets: Box::new([quota_draw(1)]),
        ..FleetAsk::default()
    };
    let at = |ms: u64| Duration::from_millis(1_000 + ms);
    let announce = |store: &RedisStore, now: Duration, left: u64, resets_in: Duration| {
        redis.set_clock(now);
        let observe = store.quota_observe_call(None, left, resets_in);
        let _: Vec<redis::Value> = observe.query(&mut redis.connect()).expect("it runs");
    };

    // 100 left for a second: a slot each 10 ms, wider than the rate's 3 ms, so the 20 ms
    // span holds 2 of 10 asked.
    let store = RedisStore::open(&redis.url(), "quota-leases").expect("a store");
    store.load_scripts(&mut redis.connect()).expect("load");
    let both = (&redis, &store);
    announce(&store, at(0), 100, Duration::from_secs(1));
    assert_eq!(
        start(both, at(0), (&[], &plain), (3 * MS, 10)),
        (0, 2, 10_000)
    );
    assert_eq!(quota_left_and_last(&redis, &store), (98, 1_010_000));
    // The next start comes one spread after the last slot.
    assert_eq!(start(both, at(0), (&[], &plain), (3 * MS, 1)).0, 20_000);
    assert_eq!(quota_left_and_last(&redis, &store).0, 97);
    // Told at 5 ms that 60 are left, the fleet takes it as said: the two starts reserved
    // after then are as the calls in flight an announcement has not counted (the announcing
    // gate counts its own; the others' are within what the fleet leases out at once).
    announce(&store, at(5), 60, Duration::from_millis(995));
    assert_eq!(quota_left_and_last(&redis, &store).0, 60);

    // 100 left for 30 ms: the rate's 3 ms binds; of the 6 slots the span holds, those at 0,
    // 3 and 6 ms leave a slot and the span before the reset.
    let store = store.namespace("quota-reset").expect("a store");
    let both = (&redis, &store);
    announce(&store, at(100), 100, 30 * MS);
    assert_eq!(
        start(both, at(100), (&[], &plain), (3 * MS, 10)),
        (0, 3, 3_000)
    );
    assert_eq!(quota_left_and_last(&redis, &store), (97, 1_106_000));
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
        let draw = BudgetDraw::told(budget, 1);
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
