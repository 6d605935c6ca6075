//! What a call's end does under the gate's lock beyond the core's part: the gauges it moves,
//! and what the fleet is told. Nothing here takes the lock; [`Shared`](super::Shared) passes
//! the state it holds.

use tokio::time::Instant;

use super::{Shared, State};
use crate::gate::classify::{RateLimited, Scope};
use crate::gate::core::{Sent, Throttled};
use crate::gate::line::{Class, Ticket};
use crate::gate::options::Priority;

impl<E> Shared<E> {
    /// Grows the adaptive rate after a success, and tells the fleet if it moved enough.
    #[cold]
    #[inline(never)]
    pub(super) fn grow(&self, state: &mut State) {
        let now = Instant::now();
        let event = state.core.grow(now);
        self.metrics.rate(|| state.core.stats(now).rate);
        if let (Some(fleet), Some(event)) = (&self.fleet, event) {
            if let Some(rate) = state.core.adaptive_rate() {
                fleet.share_rate(rate, &mut state.known, event, false);
            }
        }
    }

    /// Attempt `number` of a call of `scopes` sent as `sent` was throttled at `now` as
    /// `rate_limited` says: the core backs off and frees the slot, the gauges and the fleet
    /// learn of it, and the call's retry, unless it gives up, joins the line first: the
    /// throttle, and the retry's place in line with the end of the backoff that holds it.
    pub(super) fn throttle(
        &self,
        state: &mut State,
        rate_limited: RateLimited,
        (sent, scopes): (&Sent, &[Scope]),
        (number, priority): (u32, Priority),
        now: Instant,
    ) -> (Throttled, Option<(Ticket, Instant)>) {
        let announced = rate_limited.quota;
        let throttled = state
            .core
            .throttled(rate_limited, (sent, scopes), number, now);
        if throttled.rate_event.is_some() && !self.is_paced() {
            self.found_rate();
        }
        let retry = (!throttled.gave_up).then(|| {
            let ticket = state.core.join(
                (Class::Retry, priority),
                scopes.into(),
                (sent.cost, sent.draws.clone()),
            );
            (ticket, throttled.until)
        });
        let (metrics, gate_wide) = (&self.metrics, throttled.scope.is_none());
        metrics.throttled(throttled.gave_up, priority, scopes);
        metrics.backoff_until(|| gate_wide.then_some(throttled.until));
        metrics.rate(|| throttled.rate_event.and(state.core.stats(now).rate));
        if let Some(fleet) = &self.fleet {
            let State { core, known, .. } = state;
            fleet.tell_throttle(core, known, &throttled, announced);
        }
        (throttled, retry)
    }
}
