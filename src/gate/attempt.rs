//! One attempt of one call: wait for the gate to let it start, run it, and account for how it
//! ended. Retrying is up to the caller of the attempt ([`Gate::call`] or the streams), which
//! can make the next attempt's future.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use pin_project::{pin_project, pinned_drop};
use tokio::time::Instant;

use super::state::{Admission, NEW, RETRY, Ticket};
use super::{Gate, Scope};
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

/// Where an attempt stands.
#[derive(Debug)]
enum Stage {
    /// Not yet asked the gate.
    Fresh,
    /// In line.
    Waiting(Ticket),
    /// Holding a slot since the instant given, at the given rate.
    Running {
        sent_at: Option<Instant>,
        sent_rate: f64,
    },
    Finished,
}

/// One attempt: admission through the gate, then the user's future.
#[pin_project(PinnedDrop)]
pub(crate) struct Attempt<E, Fut> {
    gate: Gate<E>,
    scopes: Box<[Scope]>,
    retry: bool,
    stage: Stage,
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
            match *this.stage {
                Stage::Fresh => {
                    let shared = &this.gate.shared;
                    let mut state = shared.lock();
                    // An uncontended gate with no backoff and no pace reads no clock at all.
                    let paced = state.pace.is_some();
                    if !*this.retry && state.try_start_at_once(this.scopes, Instant::now) {
                        let sent_rate = state.pace.as_ref().map_or(0.0, |pace| pace.rate());
                        drop(state);
                        let sent_at = paced.then(Instant::now);
                        *this.stage = Stage::Running { sent_at, sent_rate };
                    } else {
                        let class = if *this.retry { RETRY } else { NEW };
                        let ticket = state.enqueue(class, this.scopes.clone());
                        *this.stage = Stage::Waiting(ticket);
                    }
                }
                Stage::Waiting(ticket) => {
                    let now = Instant::now();
                    let admission = this.gate.shared.lock().admit(ticket, now, cx.waker());
                    match admission {
                        Admission::Start => {
                            let sent_rate = this
                                .gate
                                .shared
                                .lock()
                                .pace
                                .as_ref()
                                .map_or(0.0, |p| p.rate());
                            *this.stage = Stage::Running {
                                sent_at: Some(now),
                                sent_rate,
                            };
                        }
                        Admission::Wait => return Poll::Pending,
                        Admission::WaitUntil(until) => ready!(this.timer.poll_until(until, cx)),
                    }
                }
                Stage::Running { sent_at, sent_rate } => {
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
                if let Some(super::state::Pace::Adaptive(adaptive)) = &mut state.pace {
                    adaptive.on_success(Instant::now());
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
        state.back_off(throttle.scope, now + length, now);
        // A scope's limit says nothing of the gate-wide rate.
        if let (true, Some(resume)) = (gate_wide, state.backoff_end(now)) {
            if let Some(super::state::Pace::Adaptive(adaptive)) = &mut state.pace {
                adaptive.on_throttle(sent_at, sent_rate, now, resume);
            }
        }
        state.release(|| now);
        Outcome::Throttled(error)
    }
}
