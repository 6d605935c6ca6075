use std::time::Duration;

use proptest::prelude::*;
use tokio::time::Instant;

use super::super::super::quota::Window;
use super::Told;

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

/// Starts calls of `cost` as early as `told` lets them, from `from`, `n` of them; returns
/// their instants from `from`.
fn drain(told: &mut Told, from: Instant, cost: u64, n: usize) -> Vec<Duration> {
    let mut now = from;
    (0..n)
        .map(|_| {
            if let Some(at) = told.next_start(now, cost) {
                now = at;
            }
            assert_eq!(
                told.next_start(now, cost),
                None,
                "allowed at the instant it named"
            );
            told.started(now, cost);
            now - from
        })
        .collect()
}

#[test]
fn a_fixed_window_lets_its_budget_go_at_once_and_the_rest_at_the_next_window() {
    let t0 = Instant::now();
    let mut told = Told::new(3, SEC, Window::Fixed);
    let starts = drain(&mut told, t0, 1, 7);
    assert_eq!(starts, [0, 0, 0, 1000, 1000, 1000, 2000].map(|ms| ms * MS));
    assert_eq!(told.left(t0 + 2 * SEC), 2);
    assert_eq!(
        told.left(t0 + 3 * SEC),
        3,
        "a window later, all of it again"
    );
}

#[test]
fn a_fixed_window_runs_from_the_first_start_even_after_idle_windows() {
    let t0 = Instant::now();
    let mut told = Told::new(2, SEC, Window::Fixed);
    told.started(t0 + 300 * MS, 2);
    assert_eq!(told.next_start(t0 + 900 * MS, 1), Some(t0 + 1300 * MS));
    // Idle until 3.5 s: the window then began at 3.3 s, and ends at 4.3 s.
    told.started(t0 + 3500 * MS, 2);
    assert_eq!(told.next_start(t0 + 3500 * MS, 1), Some(t0 + 4300 * MS));
}

#[test]
fn a_sliding_window_lets_each_unit_come_back_a_window_after_it_went() {
    let t0 = Instant::now();
    let mut told = Told::new(3, SEC, Window::Sliding);
    told.started(t0, 1);
    told.started(t0 + 200 * MS, 1);
    told.started(t0 + 400 * MS, 1);
    // Full: the first comes back at 1 s, the second at 1.2 s.
    assert_eq!(told.next_start(t0 + 500 * MS, 1), Some(t0 + SEC));
    assert_eq!(told.next_start(t0 + 500 * MS, 2), Some(t0 + 1200 * MS));
    assert_eq!(told.left(t0 + 1100 * MS), 1);
    assert_eq!(told.next_start(t0 + SEC, 1), None);
    assert_eq!(
        told.left(t0 + SEC),
        1,
        "a unit spent at 0 is back at 1 s exactly"
    );
}

#[test]
fn a_refilling_bucket_bursts_its_budget_then_goes_at_its_pace() {
    let t0 = Instant::now();
    let mut told = Told::new(4, SEC, Window::Refilling);
    let starts = drain(&mut told, t0, 1, 7);
    assert_eq!(starts, [0, 0, 0, 0, 250, 500, 750].map(|ms| ms * MS));
    assert_eq!(told.left(t0 + 750 * MS), 0);
    assert_eq!(told.left(t0 + 1250 * MS), 2);
    assert_eq!(told.left(t0 + 10 * SEC), 4, "never more than it holds");
}

#[test]
fn a_call_dearer_than_the_whole_budget_starts_alone_in_an_empty_window() {
    let t0 = Instant::now();
    for window in [Window::Fixed, Window::Sliding, Window::Refilling] {
        let mut told = Told::new(10, SEC, window);
        told.started(t0, 4);
        let empty = told.next_start(t0, 25).expect("not with 4 spent");
        assert!(empty <= t0 + SEC, "{window:?}: {:?}", empty - t0);
        told.started(empty, 25);
        // What it overspent holds the next back: 2.5 windows' worth for the bucket, the
        // window's end for the others.
        let next = told.next_start(empty, 1).expect("held back");
        assert!(next >= empty + SEC, "{window:?}: {:?}", next - empty);
    }
}

#[test]
fn what_a_call_cost_more_is_charged_when_it_ends_and_less_given_back_to_its_window() {
    let t0 = Instant::now();
    // Sliding: 10 a second; a call estimated at 4 that used 1 gives 3 back while its
    // start is in the window, and one that used 9 holds the rest a second from its end.
    let mut told = Told::new(10, SEC, Window::Sliding);
    told.started(t0, 4);
    told.settle(t0, t0 + 500 * MS, 4, 1);
    assert_eq!(told.left(t0 + 500 * MS), 9);
    told.started(t0 + 600 * MS, 4);
    told.settle(t0 + 600 * MS, t0 + 800 * MS, 4, 9);
    assert_eq!(told.left(t0 + 900 * MS), 0);
    // The first call's one unit goes at 1 s; then the 4 from 0.6 s, at 1.6 s.
    assert_eq!(told.next_start(t0 + 900 * MS, 1), Some(t0 + SEC));
    assert_eq!(told.next_start(t0 + 900 * MS, 2), Some(t0 + 1600 * MS));
    // Given back after its window passed: nothing to give; else its start's units.
    told.settle(t0, t0 + 1500 * MS, 4, 0);
    assert_eq!(told.left(t0 + 1500 * MS), 1);
    told.settle(t0 + 600 * MS, t0 + 1500 * MS, 4, 0);
    assert_eq!(told.left(t0 + 1500 * MS), 5, "the 5 charged at 0.8 s stay");

    // Fixed: given back within its window only.
    let mut told = Told::new(10, SEC, Window::Fixed);
    told.started(t0, 6);
    told.settle(t0, t0 + 100 * MS, 6, 2);
    assert_eq!(told.left(t0 + 100 * MS), 8);
    told.started(t0 + 200 * MS, 6);
    told.settle(t0 + 200 * MS, t0 + 1100 * MS, 6, 1);
    assert_eq!(
        told.left(t0 + 1100 * MS),
        10,
        "the next window owes nothing"
    );
    told.settle(t0 + 200 * MS, t0 + 1200 * MS, 6, 13);
    assert_eq!(
        told.left(t0 + 1200 * MS),
        3,
        "but pays for what it cost more"
    );

    // Refilling: never past full.
    let mut told = Told::new(10, SEC, Window::Refilling);
    told.started(t0, 6);
    told.settle(t0, t0 + 100 * MS, 6, 0);
    assert_eq!(told.left(t0 + 100 * MS), 10);
    told.started(t0 + 100 * MS, 10);
    told.settle(t0 + 100 * MS, t0 + 100 * MS, 10, 15);
    // 5 in debt: one unit in 0.6 s.
    assert_eq!(told.next_start(t0 + 100 * MS, 1), Some(t0 + 700 * MS));
}

/// One call: arrives `gap` after the one before, estimated at `estimate`, costs `actual`,
/// and takes `takes` to end.
#[derive(Debug, Clone)]
struct Call {
    gap: Duration,
    estimate: u64,
    actual: u64,
    takes: Duration,
}

fn calls(limit: u64) -> impl Strategy<Value = Vec<Call>> {
    let call = (
        0u64..400,
        0..=limit + limit / 2,
        0..=limit + limit / 2,
        0u64..1500,
    )
        .prop_map(|(gap, estimate, actual, takes)| Call {
            gap: Duration::from_millis(gap),
            estimate,
            actual,
            takes: Duration::from_millis(takes),
        });
    prop::collection::vec(call, 1..60)
}

/// What the server's ledger holds: units at `at`, counted from `counted` on (a give-back is
/// counted from the end of its call).
#[derive(Debug, Clone, Copy)]
struct Entry {
    at: Duration,
    units: i128,
    counted: Duration,
}

/// The reference model of each window's rule: may a call of `cost` start at `t`, given
/// the ledger as it stood then?
fn allowed(
    window: Window,
    (limit, per): (u64, Duration),
    ledger: &[Entry],
    t: Duration,
    cost: u64,
) -> bool {
    let (limit, cost) = (i128::from(limit), i128::from(cost.min(limit)));
    let known = ledger.iter().filter(|e| e.counted <= t);
    match window {
        Window::Sliding => {
            let live: i128 = known
                .filter(|e| e.at + per > t && e.at <= t)
                .map(|e| e.units)
                .sum();
            live + cost <= limit
        }
        Window::Fixed => {
            let Some(first) = ledger.first() else {
                return true;
            };
            let index = |at: Duration| (at - first.at).as_nanos() / per.as_nanos();
            let used: i128 = known
                .filter(|e| index(e.at) == index(t))
                .map(|e| e.units)
                .sum();
            used + cost <= limit
        }
        Window::Refilling => {
            // In units times the window's nanoseconds: the bucket refills `limit` of them
            // each nanosecond and holds `limit * per`.
            let per = i128::try_from(per.as_nanos()).unwrap();
            let full = limit * per;
            let (mut level, mut then) = (full, Duration::ZERO);
            let mut events: Vec<_> = known.copied().collect();
            events.sort_by_key(|e| e.counted);
            let refill = |level: i128, then: Duration, now: Duration| {
                let nanos = i128::try_from((now - then).as_nanos()).unwrap();
                full.min(level + nanos * limit)
            };
            for e in events {
                level = refill(level, then, e.counted);
                then = e.counted;
                level = full.min(level - e.units * per);
            }
            refill(level, then, t) >= cost * per
        }
    }
}

/// 400 cases, failures kept beside this file.
fn config() -> ProptestConfig {
    ProptestConfig {
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::WithSource("proptest-regressions"),
        )),
        ..ProptestConfig::with_cases(400)
    }
}

proptest! {
    #![proptest_config(config())]

    /// Whatever the arrivals, estimates, actual costs and call lengths, and for each kind of
    /// window: every call starts when the reference model of its window allows it, for a
    /// server that charges the estimate at the start (what calls cost more charged as they
    /// ended, what they cost less given back) and for one that counts only what calls used,
    /// at their start; and, for the windows that give back exactly, no later than the first
    /// such instant after it could have started.
    #[test]
    fn each_start_keeps_to_its_window_and_none_starts_later_than_it_must(
        window in prop_oneof![Just(Window::Fixed), Just(Window::Sliding), Just(Window::Refilling)],
        limit in 1u64..20,
        per_ms in 1u64..3000,
        calls in calls(20),
    ) {
        let per = Duration::from_millis(per_ms);
        let t0 = Instant::now();
        let mut told = Told::new(limit, per, window);
        let mut ledger: Vec<Entry> = Vec::new();
        // What a server counting only what calls used saw: each at its start.
        let mut used: Vec<Entry> = Vec::new();
        // The calls in flight: when each ends, when it started, its estimate and its cost.
        let mut flying: Vec<(Duration, Duration, u64, u64)> = Vec::new();
        let (mut arrived, mut last_start) = (Duration::ZERO, Duration::ZERO);
        for call in calls {
            arrived += call.gap;
            let ready = arrived.max(last_start);
            let mut t = ready;
            loop {
                // Every call that ended by `t` settles first, in the order they ended.
                flying.sort_by_key(|f| f.0);
                while let Some(&(end, sent, estimate, actual)) = flying.first() {
                    if end > t {
                        break;
                    }
                    flying.remove(0);
                    told.settle(t0 + sent, t0 + end, estimate, actual);
                    let units = i128::from(actual) - i128::from(estimate);
                    let back = match window {
                        Window::Sliding => sent + per > end,
                        Window::Fixed => {
                            let first = ledger[0].at;
                            let index = |at: Duration| (at - first).as_nanos() / per.as_nanos();
                            index(sent) == index(end)
                        }
                        Window::Refilling => true,
                    };
                    if units > 0 {
                        ledger.push(Entry { at: end, units, counted: end });
                        used.push(Entry { at: end, units, counted: end });
                    } else if units < 0 && back {
                        ledger.push(Entry { at: sent, units, counted: end });
                    }
                }
                let Some(at) = told.next_start(t0 + t, call.estimate) else { break };
                let at = at - t0;
                prop_assert!(at > t);
                t = flying.first().map_or(at, |f| f.0.min(at));
            }
            prop_assert!(
                allowed(window, (limit, per), &ledger, t, call.estimate),
                "started at {:?} against its window", t
            );
            let spent = call.actual.min(call.estimate);
            prop_assert!(
                allowed(window, (limit, per), &used, t, spent),
                "started at {:?} against a window of what calls used", t
            );
            used.push(Entry { at: t, units: i128::from(spent), counted: t });
            if t > ready && window != Window::Refilling {
                let before = t.saturating_sub(Duration::from_nanos(1)).max(ready);
                prop_assert!(
                    before == ready || !allowed(window, (limit, per), &ledger, before, call.estimate),
                    "waited until {:?}, but could have started at {:?}", t, before
                );
            }
            told.started(t0 + t, call.estimate);
            ledger.push(Entry { at: t, units: i128::from(call.estimate), counted: t });
            flying.push((t + call.takes, t, call.estimate, call.actual));
            last_start = t;
        }
    }
}

/// A bucket whose refill slows (or quickens) from an instant keeps its level then, and
/// refills what it lacks at its new pace from there.
#[test]
fn a_bucket_repaced_keeps_its_level_and_refills_at_its_new_pace() {
    let t0 = Instant::now();
    let mut told = Told::new(100, 10 * SEC, Window::Refilling);
    told.set_level(t0, 50);
    // 50 lacking at 10 units a second: full at 5 s; at 5 units a second, at 10 s.
    told.repace(t0, 20 * SEC);
    assert_eq!(told.per(), 20 * SEC);
    assert_eq!(told.left(t0), 50);
    assert_eq!(told.left(t0 + 5 * SEC), 75);
    assert_eq!(told.left(t0 + 10 * SEC), 100);
    // Quicker again from 2 s (60 then): the 40 lacking at 20 a second take 2 s.
    told.repace(t0 + 2 * SEC, 5 * SEC);
    assert_eq!(told.left(t0 + 2 * SEC), 60);
    assert_eq!(told.left(t0 + 3 * SEC), 80);
    assert_eq!(told.left(t0 + 4 * SEC), 100);
}
