//! What the locked state does with the fleet's store's answers: a start the gate let go waits
//! for the store uncounted, then goes out, goes back in line, or waits on. Nothing here takes
//! the lock; [`Shared`](super::Shared) calls these with it held.

use std::time::Duration;

use tokio::time::Instant;

use super::{State, wake_next};
use crate::gate::classify::Scope;
use crate::gate::core::{Granted, Sent};
use crate::gate::fleet::{Clearing, FleetAsk, Heard};
use crate::gate::line::{Class, LinePlace, Ticket};
use crate::gate::say;
use crate::metrics::GateMetrics;

/// Where a call the fleet's store decided on goes next.
#[derive(Debug)]
pub(crate) enum Cleared {
    /// Out, as sent.
    Go(Sent),
    /// Back in line, at this place.
    Back(Ticket),
    /// It waits on the clearing still.
    Pending,
}

impl State {
    /// The gate let `granted` (of `scopes`) start, for the fleet's store to let go: it waits
    /// for the store uncounted. Returns what the start tells the store.
    pub(super) fn hold_for_store(&mut self, granted: &Granted, scopes: &[Scope]) -> FleetAsk {
        self.core.hold_unsent(granted.sent.cost);
        self.fleet_ask(scopes, &granted.sent)
    }

    /// What a start of `scopes`, as `sent`, tells the fleet's store: the version of the
    /// fleet's rate the gate knows, if it adapts its rate, its scopes' paces, what it spends
    /// of each budget the fleet shares (the gate's and its scopes'), and how many calls wait
    /// behind it.
    pub(super) fn fleet_ask(&self, scopes: &[Scope], sent: &Sent) -> FleetAsk {
        FleetAsk {
            known_rate: self.core.adaptive_rate().map(|_| self.known.version),
            scope_paces: self.core.scope_paces(scopes, sent.cost),
            budgets: self.core.fleet_draws(scopes, (sent.cost, &sent.draws)),
            waiting: u32::try_from(self.core.waiting_alike((sent.cost, &sent.draws, scopes)))
                .unwrap_or(u32::MAX),
        }
    }

    /// What the store said of a call of `scopes` the gate let start, at `now`: it goes, goes
    /// back in line, or waits on the clearing still. (A [`Heard::AskAgain`] reaches here only
    /// when a backoff holds the call: the store is asked again without the lock.)
    pub(super) fn heard(
        &mut self,
        clearing: &mut Clearing,
        heard: Heard,
        scopes: &[Scope],
        (now, metrics): (Instant, &GateMetrics),
    ) -> Cleared {
        // Whether the store answered: while it does not, this process keeps to its share.
        let unanswered = matches!(
            heard,
            Heard::Go {
                answered: false,
                ..
            }
        );
        let mut shared_out = false;
        if !matches!(heard, Heard::AskAgain) {
            let members = unanswered.then(|| clearing.fleet.store().sharing());
            if let Some(weight) = self.core.share_out(members, scopes) {
                say::fleet_share(weight);
                shared_out = weight > 1;
            }
        }
        let cleared = match heard {
            // The call that found the store silent started at the fleet's pace, which no
            // longer holds: it waits for this process's share of it, in line.
            Heard::Go { .. } if shared_out => {
                self.turn_back(clearing, scopes, None, (now, metrics))
            }
            Heard::Go {
                rate,
                answered,
                reserved,
            } => {
                if let Some(rate) = rate {
                    let adopted = clearing.fleet.adopt(&mut self.core, &mut self.known, &rate);
                    clearing.sent.rate = adopted.or(clearing.sent.rate.get()).into();
                }
                // A backoff this process learnt of while the call waited for its slot still
                // holds it back.
                if reserved && self.core.is_held(scopes, now) {
                    self.turn_back(clearing, scopes, None, (now, metrics))
                } else {
                    self.go((clearing, scopes), (reserved, answered), (now, metrics))
                }
            }
            Heard::Paced { scope, next } => {
                if let Some(scope) = scopes.get(scope) {
                    self.core.paced_by_fleet(scope, next);
                }
                self.turn_back(clearing, scopes, None, (now, metrics))
            }
            Heard::Held { scope, remaining } => {
                let scope = scope.and_then(|i| scopes.get(i).cloned());
                let learned = Some((scope, remaining));
                self.turn_back(clearing, scopes, learned, (now, metrics))
            }
            Heard::Granted => {
                self.core.send_unsent(clearing.sent.cost);
                return Cleared::Pending;
            }
            Heard::Later(at) => {
                clearing.wait_until(at);
                return Cleared::Pending;
            }
            Heard::AskAgain => self.turn_back(clearing, scopes, None, (now, metrics)),
        };
        metrics.rate(|| self.core.stats(now).rate);
        metrics.backoff_until(|| self.core.stats(now).backoff_until);
        cleared
    }

    /// The store let the call (of `scopes`) go (`reserved`: it had let it go before, to wait
    /// for its slot; `answered`: it said so in time).
    fn go(
        &mut self,
        (clearing, scopes): (&Clearing, &[Scope]),
        (reserved, answered): (bool, bool),
        (now, metrics): (Instant, &GateMetrics),
    ) -> Cleared {
        if !reserved {
            self.core.send_unsent(clearing.sent.cost);
        }
        if !answered {
            self.core.count_store_unanswered();
            metrics.store_unanswered();
        }
        if self.core.end_clearing() {
            wake_next(&mut self.core, now);
        }
        metrics.went_out(scopes);
        Cleared::Go(Sent {
            at: Some(now),
            ..clearing.sent.clone()
        })
    }

    /// The fleet is backing off (for `learned`: which scope, and for how long, as the store
    /// said): the call gives back its slot and goes back to its place in line (a first
    /// attempt that went out at once takes one; a retry always had one).
    fn turn_back(
        &mut self,
        clearing: &Clearing,
        scopes: &[Scope],
        learned: Option<(Option<Scope>, Duration)>,
        (now, metrics): (Instant, &GateMetrics),
    ) -> Cleared {
        if let Some((scope, remaining)) = learned {
            self.core.count_held_by_fleet();
            metrics.held_by_fleet();
            let (end, _) = self.core.back_off(scope.clone(), now, remaining);
            say::fleet_backs_off(scope.as_ref(), end - now);
        }
        self.give_back(clearing, scopes);
        let cost = (clearing.sent.cost, clearing.sent.draws.clone());
        let ticket = match clearing.place {
            LinePlace::Taken(ticket) => {
                self.core.rejoin(ticket, scopes.into(), cost);
                ticket
            }
            LinePlace::Arriving(priority) => {
                self.core.join((Class::New, priority), scopes.into(), cost)
            }
        };
        wake_next(&mut self.core, now);
        metrics.unstarted(ticket.priority());
        metrics.joined(ticket.priority());
        Cleared::Back(ticket)
    }

    /// A call of `scopes` the store had yet to let go (or had let go, to wait for its slot)
    /// gives back its slot, uncounted, and the next start may be cleared.
    pub(super) fn give_back(&mut self, clearing: &Clearing, scopes: &[Scope]) {
        if clearing.is_unsent() {
            self.core.send_unsent(clearing.sent.cost);
        }
        self.core.unstart(&clearing.sent, scopes);
        self.core.end_clearing();
    }
}
