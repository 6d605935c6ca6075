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
    let tenant = ScopeLimits::new().budget(Budget::per_second(Dimension::TOKENS, 10));
    let mut scopes = Scopes::new(Some(Rule::Every(tenant)), 0);
    let (spent, untouched, told) = (
        Scope::from("spent"),
        Scope::from("untouched"),
        Scope::from("told"),
    );
    ran(&mut scopes, &spent, &tokens(10), t0);
    ran(&mut scopes, &untouched, &Draws::NONE, t0);
    ran(&mut scopes, &told, &Draws::NONE, t0);
    let empty = Announcement::new(Dimension::TOKENS, Quota::new(0, 10 * SEC)).window(Window::Fixed);
    assert!(scopes.observe_dims(&told, (&empty, None), t0, |_| {}));
    // Enough idle scopes that the next start sweeps.
    for n in 0..SWEEP_FROM {
        ran(
            &mut scopes,
            &Scope::from(format!("idle-{n}")),
            &Draws::NONE,
            t0,
        );
    }
    assert!(!scopes.keeps(&untouched), "its budget is full: forgotten");
    assert!(scopes.keeps(&spent) && scopes.keeps(&told));
    let held = |scope: &Scope| scopes.hold(scope, (1, &tokens(1)), t0);
    assert_eq!(held(&spent), Some(Some(t0 + SEC)), "its tokens still spent");
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
