//! What the gate keeps of its scopes, on its own where it can be: whether a gate has limits
//! per scope at all, which decides whether its scoped calls may take the fast path; which
//! scopes a sweep forgets; what limits set again keep of a scope's budgets.

use std::time::Duration;

use tokio::time::Instant;

use super::{Rule, SWEEP_FROM, ScopeLimits, Scopes};
use crate::gate::dimensions::Draws;
use crate::gate::handle::Gate;
use crate::{Announcement, Budget, Dimension, Quota, Scope, Window};

const SEC: Duration = Duration::from_secs(1);

fn tokens(n: u64) -> Draws {
    Draws::NONE.with(Dimension::TOKENS, n)
}

/// A call of `scope` with `draws` started and ended at `at`.
fn ran(scopes: &mut Scopes, scope: &Scope, draws: &Draws, at: Instant) {
    let one = std::slice::from_ref(scope);
    scopes.started(one, at, (1, draws), 1);
    scopes.ended(one, (Some(at), 1, draws), |_| {});
}

/// Kills `Scopes::has_limits` and `Core::has_scope_limits` replaced by `true`: a gate built
/// without limits per scope would send every call that names a scope the slow way, through
/// the line, for limits it does not have.
#[test]
fn only_a_gate_built_with_limits_per_scope_has_them() {
    let without = Scopes::new(None, 1);
    assert!(!without.has_limits());
    let with = Scopes::new(Some(Rule::Every(ScopeLimits::new())), 1);
    assert!(with.has_limits());
    let plain = Gate::builder(|_: &()| None).build().unwrap();
    assert!(
        !plain.shared().has_scope_limits(),
        "its scoped calls may start on the fast path"
    );
    let per_scope = Gate::builder(|_: &()| None)
        .per_scope(ScopeLimits::new())
        .build()
        .unwrap();
    assert!(per_scope.shared().has_scope_limits());
}

/// A sweep forgets the scopes whose budgets are as new ones' would be, and keeps those whose
/// budgets still hold: a told budget spent, or an announced one whose window runs.
#[test]
fn a_sweep_keeps_the_scopes_whose_budgets_hold() {
    let t0 = Instant::now();
    let tenant = ScopeLimits::new().budget(Budget::per_minute(Dimension::TOKENS, 10));
    let mut scopes = Scopes::new(Some(Rule::Every(tenant)), 0);
    let scope = |name: &str| Scope::from(name);
    let (spent, untouched, told) = (scope("spent"), scope("untouched"), scope("told"));
    ran(&mut scopes, &spent, &tokens(10), t0);
    ran(&mut scopes, &untouched, &Draws::NONE, t0);
    // An announced window empty for 10 s, one that has reset by the sweep, an announced
    // bucket that is empty (refilling in a minute), and one that is full.
    let window = |resets_in| {
        let quota = Quota::new(0, resets_in);
        Announcement::new(Dimension::TOKENS, quota).window(Window::Fixed)
    };
    let bucket = |left, resets_in| {
        let quota = Quota::new(left, resets_in).with_limit(600);
        Announcement::new(Dimension::TOKENS, quota).window(Window::Refilling)
    };
    let (reset, drained, full) = (scope("reset"), scope("drained"), scope("full"));
    for (scope, announced) in [
        (&told, window(10 * SEC)),
        (&reset, window(SEC)),
        (&drained, bucket(0, 60 * SEC)),
        (&full, bucket(600, Duration::ZERO)),
    ] {
        ran(&mut scopes, scope, &Draws::NONE, t0);
        scopes.observe_dims(scope, (&announced, (None, 1)), t0, |_| {});
    }
    // Enough idle scopes, 2 s on, that the last start sweeps.
    let sweep = t0 + 2 * SEC;
    for n in 0..SWEEP_FROM {
        let idle = Scope::from(format!("idle-{n}"));
        ran(&mut scopes, &idle, &Draws::NONE, sweep);
    }
    for forgotten in [&untouched, &reset, &full] {
        assert!(
            !scopes.keeps(forgotten),
            "{forgotten:?}: as a new one, forgotten"
        );
    }
    for kept in [&spent, &told, &drained] {
        assert!(scopes.keeps(kept), "{kept:?}: its budget holds, kept");
    }
    let held = |scope: &Scope| scopes.hold(scope, (1, &tokens(1)), sweep);
    assert_eq!(
        held(&spent),
        Some(Some(t0 + 60 * SEC)),
        "its tokens still spent"
    );
    assert!(held(&told).is_some(), "its window still empty");
}

/// Limits set again keep the spending of each budget told before, and add the new ones.
#[test]
fn limits_set_again_keep_what_each_budget_told_before_spent() {
    let t0 = Instant::now();
    let words = Budget::per_second(Dimension::TOKENS, 10);
    let mut scopes = Scopes::new(
        Some(Rule::Every(ScopeLimits::new().budget(words.clone()))),
        0,
    );
    let tenant = Scope::from("tenant");
    ran(&mut scopes, &tenant, &tokens(10), t0);
    let requests = Budget::per_second(Dimension::REQUESTS, 1);
    let again = ScopeLimits::new().budget(words).budget(requests);
    assert!(scopes.set(&tenant, again, |_| {}));
    assert_eq!(
        scopes.hold(&tenant, (1, &tokens(1)), t0),
        Some(Some(t0 + SEC))
    );
    // The new budget counts from the next start: a request a second.
    let later = t0 + 2 * SEC;
    ran(&mut scopes, &tenant, &Draws::NONE, later);
    assert_eq!(
        scopes.hold(&tenant, (1, &Draws::NONE), later),
        Some(Some(later + SEC))
    );
}

/// A call of a scope that the server refused spent nothing of the scope's announced bucket:
/// an answer dated before it, read after the refusal, does not count it among the starts
/// since.
#[test]
fn a_refused_call_is_not_spent_again_from_its_scopes_bucket() {
    let t0 = Instant::now() + SEC;
    let ms = Duration::from_millis;
    let mut scopes = Scopes::new(Some(Rule::Every(ScopeLimits::new())), 0);
    let a = Scope::from("a");
    let one = std::slice::from_ref(&a);
    // 590 of 600 left, full in a second: 10 tokens a second.
    let bucket = |left| {
        let quota = Quota::new(left, SEC).with_limit(600);
        Announcement::new(Dimension::TOKENS, quota).window(Window::Refilling)
    };
    scopes.observe_dims(&a, (&bucket(590), (None, 1)), t0 - ms(2), |_| {});
    // W, X and Y start; the server refuses X.
    scopes.started(one, t0 - ms(1), (1, &tokens(10)), 1);
    scopes.started(one, t0, (1, &tokens(500)), 1);
    scopes.started(one, t0 + ms(1), (1, &tokens(50)), 1);
    scopes.ended(one, (Some(t0), 1, &tokens(500)), |_| {});
    scopes.refused(one, (t0, t0 + ms(2)), (1, &tokens(500)));
    // W's answer, read now, says 580 were left as it came: Y's 50 came since, not X's 500.
    scopes.observe_dims(
        &a,
        (&bucket(580), (Some(t0 - ms(1)), 1)),
        t0 + ms(3),
        |_| {},
    );
    assert_eq!(scopes.hold(&a, (1, &tokens(500)), t0 + ms(3)), None);
}

/// Each limit a scope may be given is taken as given, and one that cannot work is refused
/// by name: a rate that is not a positive, finite number, a floor above the ceiling (one
/// equal to it is a fixed rate), no call in flight, a weight outside 1 to 1024.
#[test]
fn a_scopes_limits_are_taken_as_given_and_those_that_cannot_work_refused() {
    use crate::error::ConfigError;
    let limits = ScopeLimits::new();
    assert_eq!(limits.clone().try_rate(2.5).map(|l| l.rate), Ok(Some(2.5)));
    for value in [0.0, -1.0, f64::INFINITY] {
        let refused = ConfigError::InvalidScopeRate {
            which: "per_second",
            value,
        };
        assert_eq!(limits.clone().try_rate(value), Err(refused));
    }
    assert!(limits.clone().try_rate(f64::NAN).is_err());
    let fixed = limits.clone().try_adaptive(5.0, 5.0).map(|l| l.adaptive);
    assert_eq!(fixed, Ok(Some((5.0, 5.0))));
    assert_eq!(limits.clone().max_in_flight(3).max_in_flight, Some(3));
    assert_eq!(
        limits.clone().try_max_in_flight(0),
        Err(ConfigError::ZeroScopeInFlight)
    );
    assert_eq!(limits.clone().weight(3).weight, 3);
    assert_eq!(
        limits
            .clone()
            .try_weight(ScopeLimits::MAX_WEIGHT)
            .map(|l| l.weight),
        Ok(1024)
    );
    for weight in [0, ScopeLimits::MAX_WEIGHT + 1] {
        let refused = ConfigError::InvalidWeight { weight };
        assert_eq!(limits.clone().try_weight(weight), Err(refused));
    }
}

/// A scope's call that ends gives back its slot and its units in flight.
#[test]
fn a_scopes_call_that_ends_gives_back_its_slot_and_units() {
    let t0 = Instant::now();
    let limits = ScopeLimits::new().max_in_flight(2);
    let mut scopes = Scopes::new(Some(Rule::Every(limits)), 0);
    let tenant = [Scope::from("tenant")];
    scopes.started(&tenant, t0, (3, &Draws::NONE), 1);
    scopes.started(&tenant, t0, (4, &Draws::NONE), 1);
    let kept = |scopes: &Scopes| {
        let kept = &scopes.kept[&tenant[0]];
        (kept.in_flight, kept.in_flight_cost)
    };
    assert_eq!(kept(&scopes), (2, 7));
    scopes.ended(&tenant, (Some(t0), 3, &Draws::NONE), |_| {});
    assert_eq!(kept(&scopes), (1, 4));
}

/// A scope's call that cost otherwise than it started with settles with the fleet the
/// budgets announced for that scope, named by it, that the fleet shared when it started.
#[test]
fn a_scopes_call_settles_with_the_fleet_its_scopes_announced_budgets() {
    use crate::Cost;
    use crate::gate::dimensions::Source;
    let t0 = Instant::now();
    let mut scopes = Scopes::new(Some(Rule::Every(ScopeLimits::new())), 0);
    let tenant = [Scope::from("tenant")];
    let words = Announcement::new(Dimension::TOKENS, Quota::new(1_000, 60 * SEC));
    scopes.observe_dims(&tenant[0], (&words, (None, 0)), t0, |_| {});
    scopes.started(&tenant, t0 + SEC, (1, &tokens(300)), 1);
    let used = Cost::new().with(Dimension::TOKENS, 120);
    let settled = scopes.fleet_settled(&tenant, (Some(t0 + SEC), 1, &tokens(300)), &used);
    let settled: Vec<_> = (settled.iter())
        .map(|(draw, used)| {
            (
                draw.budget.dimension().clone(),
                draw.units,
                draw.source.clone(),
                *used,
            )
        })
        .collect();
    let source = Source::AnnouncedIn(tenant[0].clone(), None);
    assert_eq!(settled, [(Dimension::TOKENS, 300, source, 120)]);
    // A scope the gate keeps nothing of has nothing to settle.
    let other = [Scope::from("other")];
    assert!(
        scopes
            .fleet_settled(&other, (Some(t0), 1, &tokens(300)), &used)
            .is_empty()
    );
}
