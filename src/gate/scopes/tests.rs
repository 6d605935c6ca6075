//! What the gate keeps of its scopes, on its own where it can be: whether a gate has limits
//! per scope at all, which decides whether its scoped calls may take the fast path.

use super::{Rule, ScopeLimits, Scopes};
use crate::gate::handle::Gate;

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
