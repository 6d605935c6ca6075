//! What only a gate with a store needs of the core: starts cleared one at a time by the
//! fleet's store, the units it has yet to let go, and the fleet's adaptive rate.

use std::time::Duration;

use tokio::time::Instant;

use super::super::adaptive::AdaptiveRate;
use super::super::classify::Scope;
use super::super::dimensions::{BudgetDraw, Cost, Draws, Reckoned};
use super::super::quota::Announcement;
use super::{Core, Sent};

/// What only a gate with a store needs: starts cleared one at a time, and the fleet's rate.
impl<W> Core<W> {
    /// The start being cleared was cleared (or turned back): the next may start.
    pub(crate) fn end_clearing(&mut self) -> bool {
        std::mem::take(&mut self.clearing)
    }

    /// A started call was turned back before it went out (after [`Core::send_unsent`] if the
    /// store had let it go): its slot is free again and it does not count as a call.
    pub(crate) fn unstart(&mut self, sent: &Sent, scopes: &[Scope]) {
        self.free_slot(sent, scopes);
        self.counts.calls -= 1;
    }

    /// The fleet's store did not answer (`Some`: the fleet's live members, as it last said) or
    /// did (`None`), as the call started last (of `scopes`) went out: while it does not, each start counts
    /// as one of each live member against the limits the fleet shares that this process
    /// keeps too, so that the fleet's processes, each on its own, keep to the fleet's limits
    /// together. The rate spaces the next start from the last by its new weight when it
    /// grows (every process finds the store silent at once, and their last starts were
    /// spaced by the fleet), and by the old when it falls (no burst as the fleet rejoins).
    /// Returns the weight if it changed.
    pub(crate) fn share_out(&mut self, members: Option<u64>, scopes: &[Scope]) -> Option<u64> {
        let weight = members.unwrap_or(1).max(1);
        let was = std::mem::replace(&mut self.fleet_weight, weight);
        if weight > was {
            self.pace.reweigh(was, weight);
            self.scopes.reweigh(scopes, was, weight);
        }
        (weight != was).then_some(weight)
    }

    /// The calls waiting in line that the fleet's store may lease starts for, behind a call
    /// of `scopes` that costs `cost` and draws `draws`: every call waiting in its lane, for
    /// a call that draws from no budget of another dimension (a slot leased for another
    /// cost is lost, but a lane's calls mostly cost alike); else those with the same cost,
    /// draws and scopes among the lane's first 64, whose leases spend budgets.
    pub(crate) fn waiting_alike(&self, (cost, draws, scopes): (u64, &Draws, &[Scope])) -> usize {
        if draws.is_none() {
            self.line.in_lane(scopes)
        } else {
            self.line.alike_in_line((cost, draws, scopes), 64)
        }
    }

    /// A call start was held back by a backoff the fleet began.
    pub(crate) fn count_held_by_fleet(&mut self) {
        self.counts.held_by_fleet += 1;
    }

    /// A call started without the store's answer.
    pub(crate) fn count_store_unanswered(&mut self) {
        self.counts.store_unanswered += 1;
    }

    /// The adaptive rate, if the gate has one.
    pub(crate) fn adaptive_rate(&self) -> Option<&AdaptiveRate> {
        self.pace.adaptive()
    }

    /// Takes up the fleet's adaptive rate.
    pub(crate) fn adopt_rate(&mut self, rate: AdaptiveRate) {
        self.pace.adopt(rate);
    }

    /// The gate let a call that costs `cost` units start, for the fleet's store to let go:
    /// until it does, neither the server nor the fleet's quota has counted it.
    pub(crate) fn hold_unsent(&mut self, cost: u64) {
        self.unsent_cost += cost;
    }

    /// The store let a call held by [`Core::hold_unsent`] go (or did not answer in time, and
    /// the call goes without it).
    pub(crate) fn send_unsent(&mut self, cost: u64) {
        self.unsent_cost -= cost;
    }

    /// The spacing each of `scopes` keeps between its starts, for a call of `cost` units,
    /// for the fleet's store (see
    /// [`Scopes::paces`](super::super::scopes::Scopes::paces)).
    pub(crate) fn scope_paces(&self, scopes: &[Scope], cost: u64) -> Box<[Option<Duration>]> {
        self.scopes.paces(scopes, cost)
    }

    /// What a call of `scopes` of `units` with `draws` spends of each budget the fleet
    /// shares, for its store: the gate's, and those announced for each of its scopes.
    pub(crate) fn fleet_draws(
        &self,
        scopes: &[Scope],
        (units, draws): (u64, &Draws),
    ) -> Box<[BudgetDraw]> {
        let gate = self.dims.fleet_draws(units, draws);
        if scopes.is_empty() || !self.scopes.has_limits() {
            return gate;
        }
        let scoped = self.scopes.fleet_draws(scopes, (units, draws));
        gate.into_iter().chain(scoped).collect()
    }

    /// The fleet's budgets (the gate's and its scopes') that a call of `scopes` sent as
    /// `sent` cost otherwise than it started with, and what it cost of each (`actual`
    /// says), for the fleet's store.
    pub(crate) fn fleet_settled(
        &self,
        (sent, scopes): (&Sent, &[Scope]),
        actual: &Cost,
    ) -> (Vec<BudgetDraw>, Vec<u64>) {
        let mut settled = (self.dims).fleet_settled((sent.at, sent.cost), &sent.draws, actual);
        if !scopes.is_empty() && self.scopes.has_limits() {
            let drawn = (sent.at, sent.cost, &sent.draws);
            settled.extend(self.scopes.fleet_settled(scopes, drawn, actual));
        }
        settled
    }

    /// The announced budget `announcement` is of, the gate's or `scope`'s, as this gate
    /// reckons it at `now`, for the fleet's store. Of a scope's, every unit of the gate's
    /// calls that waits for the store counts as its own, on the safe side: the gate keeps
    /// no count of them by scope.
    pub(crate) fn reckoned(
        &self,
        scope: Option<&Scope>,
        announcement: &Announcement,
        now: Instant,
    ) -> Option<Reckoned> {
        match scope {
            None => self.dims.reckoned(announcement, now, self.unsent_cost),
            Some(scope) => (self.scopes).reckoned(scope, announcement, (now, self.unsent_cost)),
        }
    }

    /// The fleet's next start of `scope` is at `next`, as its store said.
    pub(crate) fn paced_by_fleet(&mut self, scope: &Scope, next: Instant) {
        self.scopes.paced_by_fleet(scope, next);
    }

    /// Whether a backoff (gate-wide or of `scopes`) holds calls back at `now`.
    pub(crate) fn is_held(&self, scopes: &[Scope], now: Instant) -> bool {
        self.backoff_end(scopes, now).is_some()
    }
}
