//! The uncontended fast path: a call's first attempt that nothing holds goes out in the
//! caller's own future, without the attempt machinery of a [`Call`](super::call::Call)(super::call::Call).

use super::call::{Turn, end_attempt};
use super::classify::Scope;
use super::core::Sent;
use super::ended::ActualCost;
use super::options::{Deadline, Priority, Terms};
use super::say;
use super::state::Shared;
use crate::metrics::Trace;

/// A call's first attempt that went out at once, in the caller's own future, because
/// nothing held it and nothing needs the attempt machinery: no fleet (whose store clears each
/// start), no span, nobody waiting, a free slot, no backoff or quota in the way, and the
/// rate's next start (if the gate has a rate) already due. While its future runs, dropping it
/// (the caller's future was dropped, or the user's panicked) frees its slot.
pub(crate) struct Unheld<'g, E> {
    shared: &'g Shared<E>,
    sent: Sent,
}

impl<'g, E> Unheld<'g, E> {
    /// Starts a call's first attempt of `scopes` that costs `cost` units, at `priority`, traced by
    /// `trace`, if nothing holds it: how it went out, for [`Unheld::armed`] to hold at once. `None`:
    /// it goes through a [`Call`](super::call::Call).
    ///
    /// What is returned is plain data, so that the caller's future keeps nothing of it
    /// while a [`Call`](super::call::Call) runs instead.
    #[inline]
    pub(crate) fn start(
        shared: &Shared<E>,
        scopes: &[Scope],
        (cost, priority): (u64, Priority),
        trace: &Trace,
    ) -> Option<Sent> {
        // A call with scopes through a gate with limits per scope must end through the
        // state that counts its scopes' calls in flight, and an `Unheld` keeps no scopes;
        // nor a priority, so that a call of another than the default's goes as a `Call`.
        if trace.get().is_some() || (!scopes.is_empty() && shared.has_scope_limits()) {
            return None;
        }
        if priority != Priority::Normal {
            return None;
        }
        if !shared.is_paced() {
            if cost == 1 && scopes.is_empty() && shared.start_on_loan() {
                return Some(Sent::untimed(cost));
            }
            return (shared.start_untimed(scopes, cost)).then_some(Sent::untimed(cost));
        }
        let granted = shared.start_paced(scopes, cost)?;
        say::if_resumed(&granted);
        Some(granted.sent)
    }

    /// The attempt that [`Unheld::start`] let go out as `sent`, holding its slot.
    #[inline]
    pub(crate) fn armed(shared: &'g Shared<E>, sent: Sent) -> Self {
        Self { shared, sent }
    }

    /// Hands the attempt's `result` to the gate, as a [`Call`](super::call::Call) does: what it came to.
    #[inline]
    pub(crate) fn finish<R, S: ActualCost<R>, D: Deadline>(
        self,
        result: Result<R, E>,
        (mut scopes, terms, mut trace, actual): (Box<[Scope]>, Terms<D>, Trace, S),
    ) -> Turn<R, E, &'g Shared<E>, S, D> {
        let shared = self.shared;
        // Still armed while the user's code runs: if it panics, drop frees the slot.
        let end = end_attempt(
            shared,
            result,
            &self.sent,
            (1, terms.priority.into()),
            &scopes,
            &actual,
        );
        std::mem::forget(self);
        let turn = end.into_turn(shared, 1, terms, (&mut scopes, &mut trace, actual));
        // An empty box owns no allocation: forgetting it spares a call without scopes the
        // slice's out-of-line drop.
        if scopes.is_empty() {
            std::mem::forget(scopes);
        }
        turn
    }
}

impl<E> Drop for Unheld<'_, E> {
    fn drop(&mut self) {
        // Its scopes were not counted, and its priority is the default (see `Unheld::start`).
        self.shared.release(&self.sent, (&[], Priority::Normal));
    }
}
