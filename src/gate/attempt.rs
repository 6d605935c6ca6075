//! One attempt of one call, as a future: wait in line until the core lets it start, run the
//! user's future, and hand its end to the core, which decides: done, failed, retry or gave up.
//! Every way into the gate (`Gate::call`, the mapped streams, `Gate::paged`) makes its
//! attempts here and only says how to make the next one.

use std::borrow::Borrow;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll, Waker, ready};

use pin_project::{pin_project, pinned_drop};
use tokio::time::Instant;

use super::core::{Admission, Class, Core, Sent, Started, Ticket};
use super::{Gate, Scope};
use crate::error::Error;
use crate::metrics::{self, CallTrace, Trace};
use crate::timer::Timer;

/// The core as the gate keeps it: each waiter parks its waker there.
pub(super) type Line = Core<Option<Waker>>;

/// How an attempt ended, for whoever makes the next one.
#[derive(Debug)]
pub(crate) enum Step<R, E> {
    /// The call is over: its value or its error.
    Finished(Result<R, Error<E>>),
    /// It was throttled (with this error): make the next attempt, which goes first in line.
    Retry(E),
    /// It cannot start by its deadline: the earliest the gate could start it.
    Late(Box<Instant>),
}

/// Where an attempt stands; each stage carries what it needs.
#[derive(Debug)]
pub(super) enum Stage {
    /// Not yet asked the gate.
    Fresh,
    /// In line.
    Waiting(Ticket),
    /// Let through by this process's gate, holding a slot, while the fleet's store decides.
    #[cfg(feature = "redis")]
    Clearing(Box<super::fleet::Clearing>),
    /// Holding a slot: the user's future runs.
    Running(Sent),
    Finished,
}

/// What a call's value says it really cost, for a call that settles its cost
/// ([`Gate::call_settled`]).
pub(crate) trait Settle<R> {
    fn actual(&self, value: &R) -> Option<u64>;
}

/// Calls that do not settle: nothing to read, and nothing left of it once compiled.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NoSettle;

impl<R> Settle<R> for NoSettle {
    #[inline(always)]
    fn actual(&self, _: &R) -> Option<u64> {
        None
    }
}

/// A call's value read by the user's function of what it cost.
#[derive(Clone, Copy)]
pub(crate) struct SettleBy<F>(pub(crate) F);

impl<R, F: Fn(&R) -> u64> Settle<R> for SettleBy<F> {
    fn actual(&self, value: &R) -> Option<u64> {
        Some((self.0)(value))
    }
}

/// One attempt: admission through the gate, then the user's future.
///
/// It holds the gate as `G`: lent (`&Gate<E>`) by `Gate::call`, which outlives its attempts,
/// so that a call touches no reference count; owned by the streams, whose attempts run apart.
#[pin_project(PinnedDrop)]
pub(crate) struct Attempt<G: Borrow<Gate<E>>, E, Fut, S = NoSettle> {
    gate: G,
    error: PhantomData<fn(E)>,
    scopes: Box<[Scope]>,
    /// 1 for a call's first attempt.
    number: u32,
    /// When it must start by, if it must.
    deadline: Option<Instant>,
    /// The units it spends of the rate and the announced quota.
    cost: u64,
    stage: Stage,
    timer: Timer,
    /// The call's span, if a subscriber wants it: handed from attempt to attempt.
    trace: Trace,
    /// What the call's value says it really cost.
    settle: S,
    #[pin]
    fut: Fut,
}

/// What a call asks of each of its attempts: to start by a deadline, if it has one, and to
/// spend its cost. Given whole to the constructor: set one by one on the built attempt,
/// each setter moved the whole attempt, the user's future included.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Terms {
    pub(crate) deadline: Option<Instant>,
    pub(crate) cost: u64,
}

impl Default for Terms {
    fn default() -> Self {
        Self {
            deadline: None,
            cost: 1,
        }
    }
}

impl<G: Borrow<Gate<E>>, E, Fut> Attempt<G, E, Fut> {
    /// Attempt `number` (from 1) of a call of `scopes` traced by `trace`, running `fut` once
    /// the gate lets it.
    pub(crate) fn new(gate: G, scopes: Box<[Scope]>, number: u32, trace: Trace, fut: Fut) -> Self {
        Attempt::settled(gate, scopes, number, trace, fut, NoSettle, Terms::default())
    }
}

impl<G: Borrow<Gate<E>>, E, Fut, S> Attempt<G, E, Fut, S> {
    /// Like [`Attempt::new`], for a call whose value says what it really cost, through
    /// `settle`: the gate settles the difference with what it started with as it ends.
    pub(crate) fn settled(
        gate: G,
        scopes: Box<[Scope]>,
        number: u32,
        trace: Trace,
        fut: Fut,
        settle: S,
        terms: Terms,
    ) -> Self {
        Self {
            gate,
            error: PhantomData,
            scopes,
            number,
            deadline: terms.deadline,
            cost: terms.cost,
            stage: Stage::Fresh,
            timer: Timer::default(),
            trace,
            settle,
            fut,
        }
    }

    /// The call's span, for its next attempt, once this one is over.
    pub(crate) fn take_trace(self: Pin<&mut Self>) -> Trace {
        std::mem::take(self.project().trace)
    }

    /// The call's scopes, for its next attempt, once this one is over.
    pub(crate) fn take_scopes(self: Pin<&mut Self>) -> Box<[Scope]> {
        std::mem::replace(self.project().scopes, Box::new([]))
    }
}

impl<G, E, Fut, R, S> Future for Attempt<G, E, Fut, S>
where
    G: Borrow<Gate<E>>,
    Fut: Future<Output = Result<R, E>>,
    S: Settle<R>,
{
    type Output = Step<R, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let gate: &Gate<E> = (*this.gate).borrow();
        let trace = this.trace.get();
        // The user's future, and whatever the gate says of the call, run inside its span.
        let _entered = metrics::enter(trace);
        let number = *this.number;
        loop {
            match this.stage {
                Stage::Fresh => {
                    let first = number == 1;
                    let paced_now = gate.shared.paced.then(Instant::now);
                    let mut line = gate.shared.lock();
                    // Uncontended, with no rate and no backoff: no clock is read, and the lock
                    // is let go before anything else is written (its release waits for them).
                    if first && paced_now.is_none() && line.try_start_unheld(*this.cost) {
                        drop(line);
                        let started = Started::untimed(*this.cost);
                        *this.stage = gate.started(started, None, this.scopes, trace, number);
                        continue;
                    }
                    let at_once = match first {
                        true => line.try_start_now(
                            this.scopes,
                            *this.cost,
                            paced_now.unwrap_or_else(Instant::now),
                        ),
                        false => None,
                    };
                    if let Some(started) = at_once {
                        drop(line);
                        *this.stage = gate.started(started, None, this.scopes, trace, number);
                        continue;
                    }
                    if let Some(deadline) = *this.deadline {
                        let now = paced_now.unwrap_or_else(Instant::now);
                        let earliest = line.earliest_start(None, this.scopes, *this.cost, now);
                        if earliest > deadline {
                            *this.stage = Stage::Finished;
                            metrics::ended(trace, number);
                            return Poll::Ready(Step::Late(Box::new(earliest)));
                        }
                    }
                    let class = if first { Class::New } else { Class::Retry };
                    *this.stage = Stage::Waiting(line.join(class, this.scopes.clone(), *this.cost));
                    gate.shared.metrics.joined();
                }
                Stage::Waiting(ticket) => {
                    let ticket = *ticket;
                    let now = Instant::now();
                    let mut line = gate.shared.lock();
                    let until = match line.admit(ticket, now) {
                        Admission::Start(started) => {
                            // The next in line may start too, or must arm its timer.
                            wake_next(&mut line, now);
                            drop(line);
                            gate.shared.metrics.left_line();
                            let ticket = Some(ticket);
                            *this.stage = gate.started(started, ticket, this.scopes, trace, number);
                            continue;
                        }
                        Admission::Wait => None,
                        Admission::WaitUntil(until, _) => Some(until),
                    };
                    let Some(deadline) = *this.deadline else {
                        park(&mut line, ticket, cx.waker());
                        drop(line);
                        match until {
                            Some(until) => ready!(this.timer.poll_until(until, cx)),
                            None => return Poll::Pending,
                        }
                        continue;
                    };
                    let earliest = line.earliest_start(Some(ticket), this.scopes, *this.cost, now);
                    if earliest > deadline || now >= deadline {
                        line.leave(ticket);
                        wake_next(&mut line, now);
                        drop(line);
                        gate.shared.metrics.left_line();
                        *this.stage = Stage::Finished;
                        metrics::ended(trace, number);
                        return Poll::Ready(Step::Late(Box::new(earliest.max(now))));
                    }
                    park(&mut line, ticket, cx.waker());
                    drop(line);
                    let wake_at = until.map_or(deadline, |until| until.min(deadline));
                    ready!(this.timer.poll_until(wake_at, cx));
                }
                #[cfg(feature = "redis")]
                Stage::Clearing(clearing) => {
                    let next = gate.poll_clearing(clearing, this.timer, number, this.scopes, cx);
                    let next = ready!(next);
                    gate.after_clearing(&next, trace, number);
                    *this.stage = next;
                }
                Stage::Running(sent) => {
                    let result = ready!(this.fut.as_mut().poll(cx));
                    // Still `Running` while the classifier runs: if it panics, drop frees the slot.
                    let step = gate.finish(result, sent, number, this.settle);
                    *this.stage = Stage::Finished;
                    if !matches!(step, Step::Retry(_)) {
                        metrics::ended(trace, number);
                    }
                    return Poll::Ready(step);
                }
                Stage::Finished => panic!("`Attempt` polled after it finished"),
            }
        }
    }
}

#[pinned_drop]
impl<G: Borrow<Gate<E>>, E, Fut, S> PinnedDrop for Attempt<G, E, Fut, S> {
    /// A dropped attempt gives back its place in line or its slot, so the others carry on.
    /// This also runs when the user's future or the classifier panics.
    fn drop(self: Pin<&mut Self>) {
        let this = self.project();
        let gate: &Gate<E> = (*this.gate).borrow();
        match this.stage {
            Stage::Waiting(ticket) => {
                let mut line = gate.shared.lock();
                line.leave(*ticket);
                wake_next(&mut line, Instant::now());
                drop(line);
                gate.shared.metrics.left_line();
            }
            #[cfg(feature = "redis")]
            Stage::Clearing(clearing) => {
                gate.drop_clearing(clearing);
                gate.shared.metrics.unstarted();
            }
            Stage::Running(sent) => gate.release(*sent),
            Stage::Fresh | Stage::Finished => {}
        }
    }
}

impl<G: Borrow<Gate<E>>, E, Fut, S> fmt::Debug for Attempt<G, E, Fut, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Attempt")
            .field("scopes", &self.scopes)
            .field("number", &self.number)
            .field("stage", &self.stage)
            .finish_non_exhaustive()
    }
}

/// Says that calls resume, `late` after the gate-wide backoff ended: out of line, so that
/// the log's code stays off every call's path.
#[cold]
#[inline(never)]
fn resumed(late: std::time::Duration) {
    let ended_ms_ago = late.as_millis() as u64;
    tracing::info!(target: "paceline::gate", ended_ms_ago, "backoff ended; calls resume");
}

/// Wakes the waiter that may start next, if one waits.
pub(super) fn wake_next(line: &mut Line, now: Instant) {
    if let Some(waker) = line.next_waiter(now).and_then(Option::take) {
        waker.wake();
    }
}

/// Parks `waker` for the waiter holding `ticket`, keeping the one it has if it wakes the same.
fn park(line: &mut Line, ticket: Ticket, waker: &Waker) {
    match line.parked(ticket) {
        Some(old) if old.will_wake(waker) => {}
        slot => *slot = Some(waker.clone()),
    }
}

/// A call's first attempt that went out at once, with nothing that could hold it, outside
/// the attempt machinery: its future runs in the caller's. Dropped while it runs (the
/// caller's future was dropped, or the user's panicked), it frees its slot.
#[must_use]
pub(super) struct Unheld<'g, E> {
    gate: &'g Gate<E>,
    /// Its cost: all there is to know of how it went out (no clock was read, no rate
    /// applied). Kept alone, so that the call's future holds two words for it.
    cost: u64,
}

impl<E> Unheld<'_, E> {
    /// Hands the end of the call to the gate, as an attempt does.
    #[inline]
    pub(super) fn finish<R>(self, result: Result<R, E>, settle: &impl Settle<R>) -> Step<R, E> {
        // Still armed while the classifier runs: if it panics, drop frees the slot.
        let step = self
            .gate
            .finish(result, &Started::untimed(self.cost).sent, 1, settle);
        std::mem::forget(self);
        step
    }
}

impl<E> Drop for Unheld<'_, E> {
    fn drop(&mut self) {
        self.gate.release(Started::untimed(self.cost).sent);
    }
}

impl<E> Gate<E> {
    /// Starts a call's first attempt of `cost` units at once if nothing could hold it (see
    /// [`Core::try_start_unheld`]) and nothing needs the attempt machinery: no rate (whose
    /// clock the attempt reads), no fleet (whose store clears each start), no span.
    #[inline]
    pub(super) fn start_unheld(&self, cost: u64, trace: &Trace) -> Option<Unheld<'_, E>> {
        #[cfg(feature = "redis")]
        if self.shared.fleet.is_some() {
            return None;
        }
        if self.shared.paced || trace.get().is_some() {
            return None;
        }
        let mut line = self.shared.lock();
        if !line.try_start_unheld(cost) {
            return None;
        }
        drop(line);
        self.shared.metrics.started();
        self.shared.metrics.went_out();
        Some(Unheld { gate: self, cost })
    }

    /// A running call sent as `sent` was dropped: frees its slot and wakes the next in line.
    fn release(&self, sent: Sent) {
        let mut line = self.shared.lock();
        line.release(sent);
        wake_next(&mut line, Instant::now());
        drop(line);
        self.shared.metrics.released();
    }

    /// The stage of attempt `number` of a call (traced by `trace`) that the core let start:
    /// running, or first cleared by the fleet's store.
    #[inline]
    fn started(
        &self,
        started: Started,
        ticket: Option<Ticket>,
        scopes: &[Scope],
        trace: Option<&CallTrace>,
        number: u32,
    ) -> Stage {
        self.shared.metrics.started();
        if let Some(end) = started.resumed_after {
            resumed(started.sent.at.unwrap_or(end) - end);
        }
        #[cfg(feature = "redis")]
        if let Some(fleet) = &self.shared.fleet {
            return Stage::Clearing(self.begin_clearing(fleet, started.sent, ticket, scopes));
        }
        let _ = (ticket, scopes);
        self.shared.metrics.went_out();
        metrics::went_out(trace, number);
        Stage::Running(started.sent)
    }

    /// The fleet's store decided on attempt `number` of a call (traced by `trace`): it goes
    /// out at `next`, or goes back in line, perhaps behind a backoff of the fleet's and at
    /// a rate the fleet's.
    #[cfg(feature = "redis")]
    #[cold]
    #[inline(never)]
    fn after_clearing(&self, next: &Stage, trace: Option<&CallTrace>, number: u32) {
        let gauges = &self.shared.metrics;
        if let Stage::Running(_) = next {
            gauges.went_out();
            metrics::went_out(trace, number);
        } else {
            gauges.unstarted();
            gauges.joined();
        }
        let (line, now) = (self.shared.lock(), Instant::now());
        gauges.rate(|| line.stats(now).rate);
        gauges.backoff_until(|| line.stats(now).backoff_until);
    }

    /// Grows the adaptive rate after a success, and tells the fleet if it moved enough.
    #[cold]
    #[inline(never)]
    fn grow(&self, line: &mut Line) {
        let _event = line.grow(Instant::now());
        self.shared.metrics.rate(|| line.stats(Instant::now()).rate);
        #[cfg(feature = "redis")]
        if let (Some(fleet), Some(event)) = (&self.shared.fleet, _event) {
            fleet.share_rate(line, event, false);
        }
    }

    /// Hands the end of attempt `number` to the core, frees its slot and says what comes next.
    // With the `metrics` feature's hooks the compiler no longer inlines it on its own, which
    // cost 5 ns an uncontended call; without them it does, and the hint would cost 0.4 ns.
    #[cfg_attr(feature = "metrics", inline)]
    fn finish<R>(
        &self,
        result: Result<R, E>,
        sent: &Sent,
        number: u32,
        settle: &impl Settle<R>,
    ) -> Step<R, E> {
        let sent = *sent;
        let error = match result {
            Ok(value) => {
                // The user's function runs outside the lock, as the classifier does.
                let actual = settle.actual(&value);
                let mut line = self.shared.lock();
                if let Some(actual) = actual {
                    line.settle(sent, actual);
                    #[cfg(feature = "redis")]
                    if let Some(fleet) = &self.shared.fleet {
                        fleet.settle(sent, actual);
                    }
                }
                line.succeeded(sent);
                self.shared.metrics.succeeded();
                if line.is_adaptive() {
                    self.grow(&mut line);
                }
                if line.is_waiting() {
                    wake_next(&mut line, Instant::now());
                }
                drop(line);
                return Step::Finished(Ok(value));
            }
            Err(error) => error,
        };
        // The user's classifier runs outside the lock; if it panics, the attempt's drop frees
        // the slot, since the stage is still `Running`.
        let rate_limited = (self.shared.classify)(&error);
        let now = Instant::now();
        let mut line = self.shared.lock();
        let Some(rate_limited) = rate_limited else {
            line.failed(sent);
            wake_next(&mut line, now);
            drop(line);
            self.shared.metrics.failed();
            return Step::Finished(Err(Error::Call(error)));
        };
        #[cfg(feature = "redis")]
        let announced = rate_limited.quota;
        let throttled = line.throttled(rate_limited, sent, number, now);
        let (metrics, gate_wide) = (&self.shared.metrics, throttled.scope.is_none());
        metrics.throttled(throttled.gave_up);
        metrics.backoff_until(|| gate_wide.then_some(throttled.until));
        metrics.rate(|| throttled.rate_event.and(line.stats(now).rate));
        #[cfg(feature = "redis")]
        if let Some(fleet) = &self.shared.fleet {
            fleet
                .store
                .back_off(throttled.scope.as_ref(), throttled.length);
            if let Some(quota) = announced {
                // The throttled call is no longer in flight.
                fleet
                    .store
                    .observe(line.spendable(&quota, false), quota.resets_in());
            }
            if let Some((event, taught)) = throttled.rate_event {
                fleet.share_rate(&line, event, taught);
            }
        }
        wake_next(&mut line, now);
        drop(line);
        let backoff_ms = (throttled.until - now).as_millis() as u64;
        match &throttled.scope {
            None if throttled.extended => tracing::warn!(
                target: "paceline::gate",
                backoff_ms,
                "rate-limited: every call through the gate waits"
            ),
            None => {}
            Some(scope) => tracing::warn!(
                target: "paceline::gate",
                scope = scope.as_str(),
                backoff_ms,
                "rate-limited: calls in this scope wait"
            ),
        }
        if throttled.gave_up {
            return Step::Finished(Err(Error::GaveUp {
                attempts: number,
                last: error,
            }));
        }
        Step::Retry(error)
    }
}
