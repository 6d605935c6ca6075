//! What a call's end does to the core: its slot freed, its cost settled, and what its
//! success (the adaptive rate grows) or its throttle (a backoff, a cut rate, a retry or not)
//! teaches.

use std::time::Duration;

use tokio::time::Instant;

use super::super::adaptive::RateEvent;
use super::super::classify::{RateLimited, Scope};
use super::super::dimensions::Cost;
use super::super::pace::Seen;
use super::super::quota::{Announcement, Dimension};
use super::{Core, Sent, Throttled};

/// The longest a throttle that gave no Retry-After backs off a gate whose rate adapts. The
/// rate, cut at each throttle, is what keeps such a gate under the limit; the backoff only
/// lets the server recover. The schedule's backoff grows with every throttle, and at the
/// default cap would hold every call for up to 30 s against a limit that refills each
/// second (measured against token buckets the gate was told nothing of: the 90th percentile
/// of runs went from 1.83 to 1.43 times the least time, with as many refusals).
const ADAPTIVE_BACKOFF_CAP: Duration = Duration::from_secs(1);

impl<W> Core<W> {
    /// A call turned out to cost `extra` units more than it spent when it started: they are
    /// charged to the pace of the latest start and to each announced window of units.
    pub(crate) fn charge(&mut self, extra: u64) {
        self.pace.charge(extra);
        self.dims.charge(extra);
    }

    /// A call of `scopes` sent as `sent` turned out to cost `actual` units (its scopes' rates
    /// settle it alike): what it cost more is charged
    /// to the pace of the latest start; what it cost less is given back to the pace if no
    /// call started since. The announced budgets of units settle it with the other
    /// dimensions ([`Core::settle_dims`]).
    pub(crate) fn settle(&mut self, sent: &Sent, scopes: &[Scope], actual: u64) {
        self.pace.settle(sent.at, sent.cost, actual);
        self.scopes.settle(scopes, sent.at, sent.cost, actual);
    }

    /// A call of `scopes` sent as `sent` turned out to cost `actual` in the dimensions it
    /// names, as it ended at `now`: the budgets of each, the gate's and its scopes', settle it (see [`Dimensions::settle`](crate::gate::dimensions::Dimensions::settle)).
    pub(crate) fn settle_dims(
        &mut self,
        (sent, scopes): (&Sent, &[Scope]),
        actual: &Cost,
        now: Instant,
    ) {
        if let Some(at) = sent.at {
            let drawn = (sent.cost, &sent.draws);
            self.dims.settle((at, now), drawn, actual);
            if self.scopes.has_limits() {
                self.scopes.settle_dims(scopes, (at, now), drawn, actual);
            }
        }
    }

    /// A call sent as `sent` succeeded: counts it and frees its slot. An adaptive rate also
    /// grows, by [`Core::grow`].
    #[inline]
    pub(crate) fn succeeded(&mut self, sent: &Sent, scopes: &[Scope]) {
        self.free_slot(sent, scopes);
        self.counts.successes += 1;
        self.backoffs.succeeded();
    }

    /// A call of `scopes` sent as `sent` holds its slot no longer, nor one of each of its
    /// scopes: the waiters that waited for one come back in line.
    #[inline]
    pub(super) fn free_slot(&mut self, sent: &Sent, scopes: &[Scope]) {
        self.in_flight -= 1;
        self.in_flight_cost -= sent.cost;
        if !self.dims.is_empty() || !sent.draws.is_none() {
            self.dims.ended(sent.at, &sent.draws);
        }
        if self.scopes.has_limits() {
            let line = &mut self.line;
            let sent = (sent.at, sent.cost, &sent.draws);
            self.scopes
                .ended(scopes, sent, |ticket| line.step_in(ticket));
        }
    }

    /// Whether the gate's rate adapts.
    #[inline]
    pub(crate) fn is_adaptive(&self) -> bool {
        self.pace.adaptive().is_some()
    }

    /// Grows an adaptive rate after a success at `now`; returns the success as the rate
    /// counted it. A rate that the announced quota keeps calls below does not grow: its
    /// successes say nothing of it, and a rate grown to its ceiling meanwhile would be what
    /// the gate sends at if the server stopped announcing.
    pub(crate) fn grow(&mut self, now: Instant) -> Option<RateEvent> {
        if self.quota_bound {
            return None;
        }
        self.pace.grow(now)
    }

    /// A running call sent as `sent` was dropped: its slot is free again.
    #[inline]
    pub(crate) fn release(&mut self, sent: &Sent, scopes: &[Scope]) {
        self.free_slot(sent, scopes);
    }

    /// A call sent as `sent` failed with an error that is not a throttle: counts it and
    /// frees its slot.
    #[inline]
    pub(crate) fn failed(&mut self, sent: &Sent, scopes: &[Scope]) {
        self.free_slot(sent, scopes);
        self.counts.other_errors += 1;
    }

    /// The units of the calls in flight that went out to the server.
    pub(super) fn sent_cost(&self) -> u64 {
        self.in_flight_cost - self.unsent_cost
    }

    /// A call sent as `sent` was throttled at `now`, on its attempt number `attempt`: backs
    /// off (as the server said, or by the schedule), cuts an adaptive rate if the throttle
    /// teaches it something, frees the slot, and decides whether the call is tried again.
    pub(crate) fn throttled(
        &mut self,
        throttle: RateLimited,
        (sent, scopes): (&Sent, &[Scope]),
        attempt: u32,
        now: Instant,
    ) -> Throttled {
        if let (Some(at), false) = (sent.at, self.dims.is_empty()) {
            self.dims.refused((at, now), sent.cost, &sent.draws);
        }
        if let (Some(at), true) = (sent.at, self.scopes.has_limits()) {
            let drawn = (sent.cost, &sent.draws);
            self.scopes.refused(scopes, (at, now), drawn);
        }
        self.counts.throttles += 1;
        // A quota announced with the throttle is taken in before the throttled call frees its
        // slot: it is that call's answer (perhaps the one sent to learn the next window), and
        // the server counted its units, not those of the calls still out.
        let mut scopes_quota = false;
        let announced = throttle.quota.is_some();
        if let Some(quota) = &throttle.quota {
            let announced = Announcement::new(Dimension::UNITS, *quota);
            let answered = (sent.at, sent.cost);
            match &throttle.scope {
                // A quota announced with a scope's throttle is the scope's, if the gate keeps
                // it.
                Some(scope) if self.scopes.keeps(scope) => {
                    scopes_quota = true;
                    let line = &mut self.line;
                    self.scopes
                        .observe_dims(scope, (&announced, answered), now, |ticket| {
                            line.step_in(ticket)
                        });
                }
                _ => {
                    self.observe_answered(&announced, answered, now);
                }
            }
        }
        self.free_slot(sent, scopes);
        let mut length = self.backoffs.length(throttle.retry_after, sent.at, now);
        let gate_wide = throttle.scope.is_none();
        if gate_wide && throttle.retry_after.is_none() && self.pace.adaptive().is_some() {
            length = length.min(ADAPTIVE_BACKOFF_CAP);
        }
        let scope = throttle.scope;
        let (until, extended) = self.back_off(scope.clone(), now, length);
        // A scope's limit says nothing of the gate-wide rate; it cuts the scope's own, if
        // that adapts.
        let rate_event = match &scope {
            None => {
                // A throttle that says nothing of the limit, at a gate told nothing of it:
                // a gate told no rate finds one (see `Pace::cut`).
                let seen = Seen {
                    successes: self.counts.successes,
                    bare: throttle.retry_after.is_none() && !announced && self.dims.is_empty(),
                };
                self.pace.cut((sent.at, sent.rate.get()), seen, now, until)
            }
            Some(scope) => {
                self.scopes.throttled(scope, sent.at, now, until);
                None
            }
        };
        let gave_up = attempt > self.max_retries;
        if gave_up {
            self.counts.gave_up += 1;
        } else {
            self.counts.retries += 1;
        }
        Throttled {
            gave_up,
            scope,
            length,
            until,
            extended,
            rate_event,
            scopes_quota,
        }
    }

    /// Starts or extends a backoff (gate-wide, or of `scope`) of `length` from `now`; never
    /// shortens one: see [`Backoffs::back_off`].
    pub(crate) fn back_off(
        &mut self,
        scope: Option<Scope>,
        now: Instant,
        length: Duration,
    ) -> (Instant, bool) {
        self.backoffs.back_off(scope, now, length)
    }
}
