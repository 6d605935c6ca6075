//! The core's part in the limits of each scope: what of a call's own scopes holds it back,
//! how a waiter so held steps out of line, and what is told of a scope while the gate runs.

use tokio::time::Instant;

use super::super::classify::Scope;
use super::super::dimensions::Draws;
use super::super::line::{Apart, Ticket};
use super::super::quota::Announcement;
use super::super::scopes::ScopeLimits;
use super::Core;

impl<W> Core<W> {
    /// What of its own scopes holds a call of `scopes` that costs `cost` (units and draws) back at
    /// `now`, if anything: which of them (by index: the lane's own first), and until when
    /// (`None`: until one of that scope's calls in flight ends).
    pub(super) fn scope_hold(
        &self,
        scopes: &[Scope],
        cost: (u64, &Draws),
        now: Instant,
    ) -> Option<(usize, Option<Instant>)> {
        if self.backoffs.is_empty() && !self.scopes.has_limits() {
            return None;
        }
        scopes.iter().enumerate().find_map(|(index, scope)| {
            let backoff = self.scope_backoff_end(std::slice::from_ref(scope), now);
            let until = match (self.scopes.hold(scope, cost, now), backoff) {
                (None, None) => return None,
                (Some(None), _) => None,
                (Some(Some(paced)), backoff) => Some(backoff.map_or(paced, |end| end.max(paced))),
                (None, backoff) => backoff,
            };
            Some((index, until))
        })
    }

    /// The waiter holding `ticket` steps out of line for `hold` (see [`Core::scope_hold`]):
    /// with its lane if its lane's scope holds it. Held for a slot, the waiter that carries
    /// the hold (not those behind it in a lane held out) waits on the scope's list.
    pub(super) fn step_out(&mut self, ticket: Ticket, (index, until): (usize, Option<Instant>)) {
        let apart = if index == 0 {
            Apart::WithLane
        } else {
            Apart::Alone
        };
        let Some(newly) = self.line.step_out(ticket, apart) else {
            return;
        };
        if until.is_none() {
            let scope = &self.line.waiter(ticket).scopes[index];
            self.scopes.wait_for_slot(scope, ticket, newly);
        }
    }

    /// Sets the limits of `scope` to `limits` while the gate runs (see [`Scopes::set`]): the
    /// waiters it held come back in line, each given to `ask` if it holds its lane out, to ask
    /// again. `false` for a gate without limits per scope, which is left as it was.
    pub(crate) fn set_scope_limits(
        &mut self,
        scope: &Scope,
        limits: ScopeLimits,
        ask: impl FnMut(&mut W),
    ) -> bool {
        let weight = limits.share();
        let line = &mut self.line;
        if !self
            .scopes
            .set(scope, limits, |ticket| line.step_in(ticket))
        {
            return false;
        }
        self.line.set_weight(scope, weight);
        self.line.release_lanes(scope, ask);
        true
    }

    /// The server announced `announcement` for `scope` at `now`, in the answer to a call of
    /// it started at `dated` (see [`Scopes::observe_dims`]): the waiters it held for a slot
    /// come back in line. Nothing for a gate without limits per scope.
    pub(crate) fn observe_dims_in(
        &mut self,
        scope: &Scope,
        (announcement, dated): (&Announcement, Option<Instant>),
        now: Instant,
    ) {
        let line = &mut self.line;
        let announced = (announcement, (dated, 1));
        self.scopes
            .observe_dims(scope, announced, now, |ticket| line.step_in(ticket));
    }

    /// Whether scopes have limits of their own.
    pub(crate) fn has_scope_limits(&self) -> bool {
        self.scopes.has_limits()
    }

    /// Grows the adaptive rates of `scopes` that have one, after a success at `now`.
    pub(crate) fn grow_scopes(&mut self, scopes: &[Scope], now: Instant) {
        self.scopes.succeeded(scopes, now);
    }

    /// The rate calls of `scope` start at now, if it has one and the gate keeps its state.
    pub(crate) fn scope_rate(&self, scope: &Scope) -> Option<f64> {
        self.scopes.rate(scope)
    }
}
