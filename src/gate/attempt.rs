//! One attempt of one call: wait for the gate to let it start, run it, and account for how it
//! ended. Retrying is up to the caller of the attempt ([`Gate::call`] or the streams), which
//! can make the next attempt's future.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use futures_util::future::BoxFuture;
use pin_project::{pin_project, pinned_drop};
use tokio::time::Instant;

use super::adaptive::RateEvent;
use super::state::{Admission, BackoffOrigin, NEW, Pace, RETRY, Ticket};
use super::{Gate, Scope};
use crate::store::Clearance;
use crate::timer::Timer;

/// How an attempt ended.
#[derive(Debug)]
pub(crate) enum Outcome<R, E> {
    Done(R),
    /// An error that is not a throttle: the caller gets it at once.
    Failed(E),
    /// A throttle: the gate is backing off; the call may be retried.
    Throttled(E),
}

/// Where an attempt stands. `Copy`, so that moving between stages drops nothing.
#[derive(Debug, Clone, Copy)]
enum Stage {
    /// Not yet asked the gate.
    Fresh,
    /// In line.
    Waiting(Ticket),
    /// Let through by this process's gate, holding a slot; the store has the last word
    /// (its part of the attempt is in [`Attempt::remote`]).
    Remote,
    /// Holding a slot since the instant given, at the given rate.
    Running {
        sent_at: Option<Instant>,
        sent_rate: f64,
    },
    Finished,
}

/// A call that this process's gate let through, at `sent_rate`, while the store decides.
#[derive(Debug)]
struct Remote {
    /// Its place in line, if it had one, to go back to if the fleet is backing off.
    ticket: Option<Ticket>,
    sent_rate: f64,
    step: RemoteStep,
}

enum RemoteStep {
    /// The store is asked whether the fleet lets the call through.
    Asking(BoxFuture<'static, Clearance>),
    /// The store reserved a slot of the fleet's rate budget for this instant.
    Reserved(Instant),
}

impl fmt::Debug for RemoteStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RemoteStep::Asking(_) => f.write_str("Asking"),
            RemoteStep::Reserved(at) => f.debug_tuple("Reserved").field(at).finish(),
        }
    }
}

/// One attempt: admission through the gate, then the user's future.
#[pin_project(PinnedDrop)]
pub(crate) struct Attempt<E, Fut> {
    gate: Gate<E>,
    scopes: Box<[Scope]>,
    retry: bool,
    stage: Stage,
    /// The store's part of the attempt while it is at [`Stage::Remote`]; boxed, so that a gate
    /// without a store carries none of it.
    remote: Option<Box<Remote>>,
    timer: Timer,
    #[pin]
    fut: Fut,
}

impl<E, Fut> Attempt<E, Fut> {
    pub(crate) fn new(gate: Gate<E>, scopes: Box<[Scope]>, retry: bool, fut: Fut) -> Self {
        Self {
            gate,
            scopes,
            retry,
            stage: Stage::Fresh,
            remote: None,
            timer: Timer::default(),
            fut,
        }
    }
}

impl<E, Fut: Future<Output = Result<R, E>>, R> Future for Attempt<E, Fut> {
    type Output = Outcome<R, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.stage {
                Stage::Fresh => {
                    let shared = &this.gate.shared;
                    let mut state = shared.lock();
                    // An uncontended gate with no backoff and no pace reads no clock at all.
                    let paced = state.pace.is_some();
                    if !*this.retry && state.try_start_at_once(this.scopes, Instant::now) {
                        let sent_rate = state.pace.as_ref().map_or(0.0, Pace::rate);
                        drop(state);
                        let sent_at = paced.then(Instant::now);
                        *this.stage =
                            this.gate
                                .started(this.remote, None, sent_at, sent_rate, this.scopes);
                    } else {
                        let class = if *this.retry { RETRY } else { NEW };
                        let ticket = state.enqueue(class, this.scopes.clone());
                        *this.stage = Stage::Waiting(ticket);
                    }
                }
                Stage::Waiting(ticket) => {
                    let ticket = *ticket;
                    let now = Instant::now();
                    let mut state = this.gate.shared.lock();
                    match state.admit(ticket, now, cx.waker()) {
                        Admission::Start => {
                            let sent_rate = state.pace.as_ref().map_or(0.0, Pace::rate);
                            drop(state);
                            *this.stage = this.gate.started(
                                this.remote,
                                Some(ticket),
                                Some(now),
                                sent_rate,
                                this.scopes,
                            );
                        }
                        Admission::Wait => return Poll::Pending,
                        Admission::WaitUntil(until) => {
                            drop(state);
                            ready!(this.timer.poll_until(until, cx));
                        }
                    }
                }
                Stage::Remote => {
                    let next = this.gate.poll_remote(
                        this.remote,
                        this.timer,
                        *this.retry,
                        this.scopes,
                        cx,
                    );
                    *this.stage = ready!(next);
                }
                Stage::Running { sent_at, sent_rate } => {
                    let (sent_at, sent_rate) = (*sent_at, *sent_rate);
                    let result = ready!(this.fut.as_mut().poll(cx));
                    // Still `Running` while the classifier runs: if it panics, drop frees the slot.
                    let outcome = this.gate.finish(result, sent_at, sent_rate);
                    *this.stage = Stage::Finished;
                    return Poll::Ready(outcome);
                }
                Stage::Finished => panic!("`Attempt` polled after it finished"),
            }
        }
    }
}

#[pinned_drop]
impl<E, Fut> PinnedDrop for Attempt<E, Fut> {
    /// A dropped attempt gives back its place in line or its slot, so the others carry on.
    /// This also runs when the user's future or the classifier panics.
    fn drop(self: Pin<&mut Self>) {
        let this = self.project();
        match *this.stage {
            Stage::Waiting(ticket) => this.gate.shared.lock().leave(ticket, Instant::now()),
            Stage::Remote => this.gate.dropped_uncleared(),
            Stage::Running { .. } => this.gate.shared.lock().release(Instant::now),
            Stage::Fresh | Stage::Finished => {}
        }
    }
}

impl<E, Fut> fmt::Debug for Attempt<E, Fut> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Attempt")
            .field("scopes", &self.scopes)
            .field("stage", &self.stage)
            .finish_non_exhaustive()
    }
}

impl<E> Gate<E> {
    /// The stage of a call this process's gate let start: running, or first asking the store
    /// (whose part of the attempt goes to `remote`).
    #[inline]
    fn started(
        &self,
        remote: &mut Option<Box<Remote>>,
        ticket: Option<Ticket>,
        sent_at: Option<Instant>,
        sent_rate: f64,
        scopes: &[Scope],
    ) -> Stage {
        match &self.shared.store {
            None => Stage::Running { sent_at, sent_rate },
            Some(store) => {
                *remote = Some(self.ask_store(&**store, ticket, sent_rate, scopes));
                Stage::Remote
            }
        }
    }

    /// Asks the store to clear a call this process's gate let start.
    #[cold]
    #[inline(never)]
    fn ask_store(
        &self,
        store: &dyn crate::store::Store,
        ticket: Option<Ticket>,
        sent_rate: f64,
        scopes: &[Scope],
    ) -> Box<Remote> {
        let interval = (sent_rate > 0.0).then(|| Duration::from_secs_f64(1.0 / sent_rate));
        // Taken out of the lock, so that the store's work does not hold up other callers.
        let adaptive = {
            let state = self.shared.lock();
            match &state.pace {
                Some(Pace::Adaptive(rate)) => Some((state.fleet_version, rate.clone())),
                _ => None,
            }
        };
        Box::new(Remote {
            ticket,
            sent_rate,
            step: RemoteStep::Asking(store.clear(scopes, interval, adaptive)),
        })
    }

    /// Drives a call the store is deciding on, to the stage it goes on to. Out of line, so
    /// that a gate without a store keeps its fast path small.
    #[cold]
    #[inline(never)]
    fn poll_remote(
        &self,
        remote_part: &mut Option<Box<Remote>>,
        timer: &mut Timer,
        retry: bool,
        scopes: &[Scope],
        cx: &mut Context<'_>,
    ) -> Poll<Stage> {
        let remote = remote_part
            .as_mut()
            .expect("an attempt at `Stage::Remote` holds the store's part");
        loop {
            let (ticket, sent_rate) = (remote.ticket, remote.sent_rate);
            let next = match &mut remote.step {
                RemoteStep::Asking(clear) => match ready!(clear.as_mut().poll(cx)) {
                    Clearance::Go { wait, fleet } => {
                        let sent_rate = match fleet {
                            Some(fleet) => self.adopt(fleet),
                            None => sent_rate,
                        };
                        if !wait.is_zero() {
                            remote.sent_rate = sent_rate;
                            remote.step = RemoteStep::Reserved(Instant::now() + wait);
                            continue;
                        }
                        self.cleared(sent_rate, true)
                    }
                    // The store did not answer: this process's own state decided.
                    Clearance::Unavailable => self.cleared(sent_rate, false),
                    Clearance::Held { scope, remaining } => {
                        let scope = scope.and_then(|i| scopes.get(i).cloned());
                        self.turned_back(ticket, retry, scopes, Some((scope, remaining)))
                    }
                },
                RemoteStep::Reserved(at) => {
                    ready!(timer.poll_until(*at, cx));
                    // A backoff this process learned of while the call waited for its slot
                    // still holds it back.
                    if self.shared.lock().is_held(scopes, Instant::now()) {
                        self.turned_back(ticket, retry, scopes, None)
                    } else {
                        self.cleared(sent_rate, true)
                    }
                }
            };
            *remote_part = None;
            return Poll::Ready(next);
        }
    }

    /// A call was dropped while the store decided on it: it gives back its slot uncounted.
    #[cold]
    fn dropped_uncleared(&self) {
        let now = Instant::now();
        let mut state = self.shared.lock();
        state.unstart(now);
        state.end_clearing(now);
    }

    /// Takes up the fleet's adaptive rate; returns the rate the call goes out at.
    fn adopt(&self, fleet: crate::store::FleetRate) -> f64 {
        let mut state = self.shared.lock();
        state.adopt_fleet_rate(fleet);
        state.pace.as_ref().map_or(0.0, Pace::rate)
    }

    /// Counts `event` in the adaptive rate, if the gate has one, and tells the fleet when the
    /// rate moved enough (or a throttle taught something) for the others to hear of it.
    fn adapt(&self, state: &mut super::state::State, event: RateEvent) {
        let Some(Pace::Adaptive(rate)) = &mut state.pace else {
            return;
        };
        let taught = event.apply(rate);
        if let Some(store) = &self.shared.store {
            let moved = (rate.rate() - state.shared_rate).abs() > state.shared_rate * 0.01;
            if taught || moved {
                state.shared_rate = rate.rate();
                store.share_rate(state.fleet_version, rate.clone(), event);
            }
        }
    }

    /// The call goes: the store let it (`answered`), or it did not answer and this process's
    /// own state let it. It runs, and the next call may ask.
    fn cleared(&self, sent_rate: f64, answered: bool) -> Stage {
        let now = Instant::now();
        let mut state = self.shared.lock();
        if !answered {
            state.stats.store_unanswered += 1;
        }
        state.end_clearing(now);
        drop(state);
        Stage::Running {
            sent_at: Some(now),
            sent_rate,
        }
    }

    /// The fleet is backing off (for `learned`: which scope, and for how long, as the store
    /// said): the call gives back its slot and goes back to its place in line.
    fn turned_back(
        &self,
        ticket: Option<Ticket>,
        retry: bool,
        scopes: &[Scope],
        learned: Option<(Option<Scope>, Duration)>,
    ) -> Stage {
        let now = Instant::now();
        let mut state = self.shared.lock();
        if let Some((scope, remaining)) = learned {
            state.stats.held_by_fleet += 1;
            state.back_off(scope, now + remaining, now, BackoffOrigin::Fleet);
        }
        state.unstart(now);
        state.end_clearing(now);
        let ticket = match ticket {
            Some(ticket) => {
                state.requeue(ticket, scopes.into());
                ticket
            }
            None => state.enqueue(if retry { RETRY } else { NEW }, scopes.into()),
        };
        Stage::Waiting(ticket)
    }

    /// Accounts for a finished attempt and frees its slot.
    fn finish<R>(
        &self,
        result: Result<R, E>,
        sent_at: Option<Instant>,
        sent_rate: f64,
    ) -> Outcome<R, E> {
        let error = match result {
            Ok(value) => {
                let mut state = self.shared.lock();
                state.stats.successes += 1;
                state.schedule.on_success();
                if matches!(state.pace, Some(Pace::Adaptive(_))) {
                    self.adapt(&mut state, RateEvent::Success(Instant::now()));
                }
                state.release(Instant::now);
                return Outcome::Done(value);
            }
            Err(error) => error,
        };
        // The user's classifier runs outside the lock; if it panics, the attempt's drop frees
        // the slot, since the stage is still `Running`.
        let throttle = (self.shared.classify)(&error);
        let mut state = self.shared.lock();
        let now = Instant::now();
        let Some(throttle) = throttle else {
            state.stats.other_errors += 1;
            state.release(|| now);
            return Outcome::Failed(error);
        };
        state.stats.throttles += 1;
        let length = match throttle.retry_after {
            Some(after) => after,
            None => {
                let state = &mut *state;
                state.schedule.next_with(&mut state.rng)
            }
        };
        let sent_at = sent_at.unwrap_or(now);
        let gate_wide = throttle.scope.is_none();
        if let Some(store) = &self.shared.store {
            store.back_off(throttle.scope.as_ref(), length);
        }
        state.back_off(throttle.scope, now + length, now, BackoffOrigin::Throttle);
        // A scope's limit says nothing of the gate-wide rate.
        if let (true, Some(resume)) = (gate_wide, state.backoff_end(now)) {
            let event = RateEvent::Throttle {
                sent_at,
                sent_rate,
                now,
                resume,
            };
            self.adapt(&mut state, event);
        }
        state.release(|| now);
        Outcome::Throttled(error)
    }
}
