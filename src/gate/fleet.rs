//! The gate's side of a fleet: a call this process's gate let start is cleared by the store
//! (the fleet's backoffs, its rate budget), throttles are told to it, and the adaptive rate is
//! shared through it. Only a gate built with a [store](super::GateBuilder::store) comes here.
//!
//! What runs where: the store's answer to a call start is awaited inside the call's own
//! future; telling the fleet of a backoff or of a new rate does not hold up the call that
//! learnt it, so each is a task spawned on the caller's tokio runtime.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::time::Instant;

use super::adaptive::{AdaptiveRate, RateEvent};
use super::attempt::{Line, wake_next};
use super::core::{Class, Sent, Ticket, interval};
use super::{Gate, Scope};
use crate::store::{Clearance, FleetRate, Replaced, Store};
use crate::time::after;
use crate::timer::Timer;

/// How many times a change to the fleet's rate is applied again when another process changed
/// it first, before this one gives up (the others' changes stand).
const SHARE_ATTEMPTS: usize = 4;

/// A rate that moved by more than this fraction since the fleet last heard of it is told.
const TELL_AFTER: f64 = 0.01;

/// The store, and what this gate knows of the fleet's rate.
pub(crate) struct Fleet {
    pub(super) store: Arc<dyn Store>,
    known: Mutex<Known>,
}

#[derive(Debug, Default)]
struct Known {
    /// The version of the fleet's adaptive rate this gate last heard of (0: none yet).
    version: u64,
    /// The adaptive rate last told to the fleet.
    told: f64,
}

impl Fleet {
    pub(crate) fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            known: Mutex::default(),
        }
    }

    fn known(&self) -> std::sync::MutexGuard<'_, Known> {
        self.known.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Tells the fleet the adaptive rate `event` led to, if it moved enough or a throttle
    /// `taught` something, so that the others take it up; the store applies `event` to a
    /// newer fleet rate if another process changed it first.
    pub(super) fn share_rate(&self, line: &Line, event: RateEvent, taught: bool) {
        let Some(rate) = line.adaptive_rate() else {
            return;
        };
        let mut known = self.known();
        let moved = (rate.rate() - known.told).abs() > known.told * TELL_AFTER;
        if !(taught || moved) {
            return;
        }
        known.told = rate.rate();
        let (store, version, rate) = (Arc::clone(&self.store), known.version, rate.clone());
        tokio::spawn(replace_rate(store, version, rate, event));
    }

    /// Tells the fleet that the call sent as `sent` cost `actual` units.
    pub(super) fn settle(&self, sent: Sent, actual: u64) {
        let more = i128::from(actual) - i128::from(sent.cost);
        let more = i64::try_from(more).unwrap_or(if more > 0 { i64::MAX } else { i64::MIN });
        if more != 0 {
            self.store.settle(more, sent.rate.map(interval), sent.at);
        }
    }

    /// The fleet's rate in `fleet`, read on this process's clock within `template`'s bounds.
    fn decode(&self, fleet: &FleetRate, template: &AdaptiveRate) -> Option<AdaptiveRate> {
        let clock = self.store.clock()?;
        template.decode(&fleet.state, |micros| clock.to_local(micros))
    }
}

/// Stores `rate` as the fleet's, based on its `version`; if another process stored one
/// since, applies `event` to theirs and tries again.
async fn replace_rate(store: Arc<dyn Store>, version: u64, rate: AdaptiveRate, event: RateEvent) {
    let (mut version, mut rate) = (version, rate);
    for _ in 0..SHARE_ATTEMPTS {
        let Some(clock) = store.clock() else { return };
        let state = rate.encode(|at| clock.to_store(at));
        match store.replace_rate(version, rate.rate(), state).await {
            None | Some(Replaced::Stored) => return,
            // The fleet's rate expired meanwhile: this one starts it again.
            Some(Replaced::Expired) => version = 0,
            Some(Replaced::Stale(fleet)) => {
                let Some(clock) = store.clock() else { return };
                let Some(theirs) = rate.decode(&fleet.state, |micros| clock.to_local(micros))
                else {
                    return;
                };
                (version, rate) = (fleet.version, theirs);
                event.apply(&mut rate);
            }
        }
    }
}

impl fmt::Debug for Fleet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fleet")
            .field("store", &self.store)
            .field("known", &*self.known())
            .finish()
    }
}

/// A call this process's gate let start, while the store decides.
pub(crate) struct Clearing {
    /// Its place in line, if it had one, to go back to if the fleet is backing off.
    ticket: Option<Ticket>,
    sent: Sent,
    step: Step,
}

enum Step {
    /// The store is asked whether the fleet lets the call through.
    Asking(BoxFuture<'static, Clearance>),
    /// The store reserved a slot of the fleet's rate budget for this instant.
    Reserved(Instant),
    /// The fleet's announced quota has nothing for the call before this instant: it asks
    /// again then.
    Later(Instant),
}

impl fmt::Debug for Clearing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let step = match self.step {
            Step::Asking(_) => "asking",
            Step::Reserved(_) => "reserved",
            Step::Later(_) => "later",
        };
        f.debug_struct("Clearing")
            .field("ticket", &self.ticket)
            .field("step", &step)
            .finish_non_exhaustive()
    }
}

impl<E> Gate<E> {
    /// Asks the store to clear a call this process's gate let start.
    #[cold]
    #[inline(never)]
    pub(super) fn begin_clearing(
        &self,
        fleet: &Fleet,
        sent: Sent,
        ticket: Option<Ticket>,
        scopes: &[Scope],
    ) -> Box<Clearing> {
        Box::new(Clearing {
            ticket,
            sent,
            step: Step::Asking(self.ask_store(fleet, sent, scopes)),
        })
    }

    /// Asks the store whether the call sent as `sent` may start.
    fn ask_store(
        &self,
        fleet: &Fleet,
        sent: Sent,
        scopes: &[Scope],
    ) -> BoxFuture<'static, Clearance> {
        let units = u32::try_from(sent.cost).unwrap_or(u32::MAX);
        let pace = sent.rate.map(|rate| interval(rate).saturating_mul(units));
        let known = {
            let line = self.shared.lock();
            line.adaptive_rate().map(|_| fleet.known().version)
        };
        fleet.store.clear(scopes, pace, known, sent.cost)
    }

    /// Drives a call the store is deciding on, to the stage it goes on to: running, or back
    /// in line if the fleet is backing off.
    #[cold]
    #[inline(never)]
    pub(super) fn poll_clearing(
        &self,
        clearing: &mut Clearing,
        timer: &mut Timer,
        number: u32,
        scopes: &[Scope],
        cx: &mut Context<'_>,
    ) -> Poll<super::attempt::Stage> {
        let fleet = self
            .shared
            .fleet
            .as_ref()
            .expect("a clearing gate has a fleet");
        loop {
            let next = match &mut clearing.step {
                Step::Asking(asking) => match ready!(asking.as_mut().poll(cx)) {
                    Clearance::Go { wait, fleet: rate } => {
                        if let Some(rate) = rate {
                            clearing.sent.rate = self.adopt(fleet, &rate).or(clearing.sent.rate);
                        }
                        if !wait.is_zero() {
                            clearing.step = Step::Reserved(after(Instant::now(), wait));
                            continue;
                        }
                        self.cleared(clearing.sent, true)
                    }
                    // The store did not answer: this process's own state decided.
                    Clearance::Unavailable => self.cleared(clearing.sent, false),
                    Clearance::Held { scope, remaining } => {
                        let scope = scope.and_then(|i| scopes.get(i).cloned());
                        let learned = Some((scope, remaining));
                        self.turned_back(clearing, number, scopes, learned)
                    }
                    Clearance::Later(wait) => {
                        self.shared.lock().hold_unsent(clearing.sent.cost, true);
                        clearing.step = Step::Later(after(Instant::now(), wait));
                        continue;
                    }
                },
                Step::Later(at) => {
                    ready!(timer.poll_until(*at, cx));
                    let mut line = self.shared.lock();
                    line.hold_unsent(clearing.sent.cost, false);
                    let held = line.is_held(scopes, Instant::now());
                    drop(line);
                    if held {
                        self.turned_back(clearing, number, scopes, None)
                    } else {
                        clearing.step = Step::Asking(self.ask_store(fleet, clearing.sent, scopes));
                        continue;
                    }
                }
                Step::Reserved(at) => {
                    ready!(timer.poll_until(*at, cx));
                    // A backoff this process learnt of while the call waited for its slot
                    // still holds it back.
                    if self.shared.lock().is_held(scopes, Instant::now()) {
                        self.turned_back(clearing, number, scopes, None)
                    } else {
                        self.cleared(clearing.sent, true)
                    }
                }
            };
            return Poll::Ready(next);
        }
    }

    /// A call was dropped while the store decided on it: it gives back its slot uncounted.
    #[cold]
    pub(super) fn drop_clearing(&self, clearing: &Clearing) {
        let mut line = self.shared.lock();
        if let Step::Later(_) = clearing.step {
            line.hold_unsent(clearing.sent.cost, false);
        }
        line.unstart(clearing.sent);
        line.end_clearing();
        wake_next(&mut line, Instant::now());
    }

    /// Takes up the fleet's adaptive rate if it is newer than this gate's; returns the rate
    /// calls now start at.
    fn adopt(&self, fleet: &Fleet, rate: &FleetRate) -> Option<f64> {
        let mut line = self.shared.lock();
        let mut known = fleet.known();
        let template = line.adaptive_rate()?;
        if rate.version > known.version {
            if let Some(theirs) = fleet.decode(rate, template) {
                known.version = rate.version;
                known.told = theirs.rate();
                line.adopt_rate(theirs);
            }
        }
        line.adaptive_rate().map(AdaptiveRate::rate)
    }

    /// The call goes: the store let it (`answered`), or it did not answer and this process's
    /// own state let it. It runs, and the next call may ask.
    fn cleared(&self, sent: Sent, answered: bool) -> super::attempt::Stage {
        let now = Instant::now();
        let mut line = self.shared.lock();
        if !answered {
            line.count_store_unanswered();
            self.shared.metrics.store_unanswered();
        }
        if line.end_clearing() {
            wake_next(&mut line, now);
        }
        super::attempt::Stage::Running(Sent {
            at: Some(now),
            ..sent
        })
    }

    /// The fleet is backing off (for `learned`: which scope, and for how long, as the store
    /// said): the call gives back its slot and goes back to its place in line.
    fn turned_back(
        &self,
        clearing: &Clearing,
        number: u32,
        scopes: &[Scope],
        learned: Option<(Option<Scope>, Duration)>,
    ) -> super::attempt::Stage {
        let now = Instant::now();
        let mut line = self.shared.lock();
        if let Some((scope, remaining)) = learned {
            line.count_held_by_fleet();
            self.shared.metrics.held_by_fleet();
            let (end, _) = line.back_off(scope.clone(), now, remaining);
            tracing::debug!(
                target: "paceline::gate",
                scope = scope.as_ref().map(Scope::as_str),
                backoff_ms = (end - now).as_millis() as u64,
                "the fleet is backing off: calls wait"
            );
        }
        line.unstart(clearing.sent);
        line.end_clearing();
        let cost = clearing.sent.cost;
        let ticket = match clearing.ticket {
            Some(ticket) => {
                line.rejoin(ticket, scopes.into(), cost);
                ticket
            }
            None => {
                let class = if number == 1 {
                    Class::New
                } else {
                    Class::Retry
                };
                line.join(class, scopes.into(), cost)
            }
        };
        wake_next(&mut line, now);
        super::attempt::Stage::Waiting(ticket)
    }
}
