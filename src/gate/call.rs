//! One call through the gate, attempt by attempt: the one driver of every way into the gate
//! (`Gate::call` and its kin, the mapped streams, paged listings, the tower service, the
//! reqwest middleware).
//!
//! A call first arrives ([`Arrival::new`]): the gate starts it at once, puts it in line, or
//! refuses it ([`Refused`]: the line is full, or it cannot start by its deadline) before its
//! future is made. A [`Call`] is one attempt of a call, as a future: it waits until the gate's
//! state lets it start, runs the user's future, and hands its end to the state. It ends the
//! call ([`Turn::Ended`]) or, throttled, hands back a [`Retry`]: everything the call carries
//! to its next attempt (its scopes, number, span, terms, and how to read its actual cost) and
//! its place in line. The front-end only makes each attempt's future and gives it to
//! [`Arrival::attempt`] or [`Retry::attempt`]. How a call ends is in `ended.rs`; a first
//! attempt that nothing holds goes out without a `Call`, in `unheld.rs`.

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use pin_project::{pin_project, pinned_drop};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::answering;
use super::classify::Scope;
use super::core::{Granted, Sent};
use super::ended::{ActualCost, Ended, Estimated, Refused};
use super::fleet::{Clearing, FleetAsk};
use super::line::{LinePlace, Ticket};
use super::options::{Deadline, DrawsOf, Priority, Terms};
use super::say;
use super::state::{Admitted, Cleared, Entry, Shared};
use crate::metrics::{self, HeldPriority, Trace};
use crate::timer::Timer;

/// A call the gate let in as it arrived: started at once (holding a slot, or being cleared
/// by the fleet's store), or in line. Its first attempt's future is made next, and given to
/// [`Arrival::attempt`]; dropped before that, it gives back what it holds.
#[derive(Debug)]
pub(crate) struct Arrival<G: Deref<Target = Shared<E>>, E, S, D: Deadline> {
    held: Held<G, E>,
    terms: Terms<D>,
    trace: Trace,
    actual: S,
}

impl<G: Deref<Target = Shared<E>>, E, S, D: Deadline> Arrival<G, E, S, D> {
    /// A call of `scopes` held to `terms`, whose actual cost `actual` reads from its value,
    /// arrives at the gate: let in, or refused before its future is made.
    #[inline]
    pub(crate) fn new(
        gate: G,
        scopes: Box<[Scope]>,
        terms: Terms<D>,
        actual: S,
    ) -> Result<Self, Refused<D>> {
        let trace = Trace::begin(&gate.name);
        Self::traced(gate, scopes, terms, actual, trace)
    }

    /// Like [`Arrival::new`], for a call whose span `trace` began already.
    #[inline]
    pub(crate) fn traced(
        gate: G,
        scopes: Box<[Scope]>,
        terms: Terms<D>,
        actual: S,
        trace: Trace,
    ) -> Result<Self, Refused<D>> {
        let stage = {
            let (shared, call_trace): (&Shared<E>, _) = (&gate, trace.get());
            // What the gate says of the call's start runs inside its span.
            let _entered = metrics::enter(call_trace);
            let arriving = LinePlace::Arriving(terms.priority.into());
            match shared.enter(
                &scopes,
                (terms.cost, terms.draws.draws()),
                terms.priority.into(),
                terms.deadline,
            ) {
                Entry::Start(granted) => {
                    begin(shared, (granted, arriving, None), &scopes, call_trace, 1)
                }
                Entry::ToClear(granted, asked) => begin(
                    shared,
                    (granted, arriving, Some(asked)),
                    &scopes,
                    call_trace,
                    1,
                ),
                Entry::Waiting(ticket) => Stage::Waiting(ticket),
                Entry::Late(deadline, earliest) => {
                    metrics::ended(call_trace, 1);
                    return Err(Refused::Late(deadline, earliest));
                }
                Entry::Overloaded(overloaded) => {
                    metrics::ended(call_trace, 0);
                    return Err(Refused::Overloaded(overloaded));
                }
            }
        };
        Ok(Self {
            held: Held {
                gate,
                stage,
                scopes,
                priority: HeldPriority::new(terms.priority.into()),
            },
            terms,
            trace,
            actual,
        })
    }
}

impl<G: Deref<Target = Shared<E>> + Clone, E, S, D: Deadline> Arrival<G, E, S, D> {
    /// The call's first attempt, running `fut` once the gate lets it (at once, if it started).
    pub(crate) fn attempt<Fut: Future>(self, fut: Fut) -> Call<G, E, Fut, S, D> {
        let (gate, stage, scopes) = self.held.hand_over();
        Call {
            gate,
            scopes,
            number: 1,
            terms: self.terms,
            trace: self.trace,
            actual: self.actual,
            last: None,
            stage,
            timer: Timer::default(),
            fut,
            answer: None,
            told: Vec::new(),
        }
    }
}

/// What an attempt came to: the call ended, or it was throttled and is to be tried again.
#[derive(Debug)]
pub(crate) enum Turn<R, E, G: Deref<Target = Shared<E>>, S, D: Deadline> {
    Ended(Ended<R, E, D>),
    Again(Retry<G, E, S, D>),
}

/// A throttled call, to be tried again: what it carries to its next attempt, its place in
/// line (which it keeps from the throttle on, first), and the error of the throttle.
#[derive(Debug)]
pub(crate) struct Retry<G: Deref<Target = Shared<E>>, E, S, D: Deadline> {
    /// Its place in line, held by a backoff until an instant.
    place: Held<G, E>,
    /// The next attempt's number.
    pub(crate) number: u32,
    terms: Terms<D>,
    trace: Trace,
    actual: S,
    /// The throttle's error.
    pub(crate) throttled: E,
}

impl<G: Deref<Target = Shared<E>> + Clone, E, S, D: Deadline> Retry<G, E, S, D> {
    /// The next attempt of the call, running `fut` once the gate lets it.
    pub(crate) fn attempt<Fut: Future>(self, fut: Fut) -> Call<G, E, Fut, S, D> {
        let (gate, stage, scopes) = self.place.hand_over();
        // The throttle's error is kept only for a deadline's error: without one, it is
        // dropped (a response's connection goes back to its pool) while the retry waits.
        // A retry with a deadline asks at once (the backoff may run past the deadline);
        // one without asks when the backoff that holds it is over.
        let (last, stage) = match (self.terms.deadline.is_some(), stage) {
            (true, Stage::BackingOff(ticket, _)) => (Some(self.throttled), Stage::Waiting(ticket)),
            (_, stage) => (None, stage),
        };
        Call {
            gate,
            scopes,
            number: self.number,
            terms: self.terms,
            trace: self.trace,
            actual: self.actual,
            last,
            stage,
            timer: Timer::default(),
            fut,
            answer: None,
            told: Vec::new(),
        }
    }
}

/// What a call (of `scopes`) holds of the gate before an attempt's future is made (a place
/// in line, or a slot), given back if it is dropped before the attempt takes it: a front-end
/// whose future could not be made (the user's closure panicked), or that cannot make the
/// call again.
struct Held<G: Deref<Target = Shared<E>>, E> {
    gate: G,
    stage: Stage,
    scopes: Box<[Scope]>,
    priority: HeldPriority,
}

impl<G: Deref<Target = Shared<E>> + Clone, E> Held<G, E> {
    /// The gate, what it holds and the call's scopes, for the attempt that takes them.
    fn hand_over(mut self) -> (G, Stage, Box<[Scope]>) {
        let stage = std::mem::replace(&mut self.stage, Stage::Done);
        (self.gate.clone(), stage, std::mem::take(&mut self.scopes))
    }
}

impl<G: Deref<Target = Shared<E>>, E> Drop for Held<G, E> {
    fn drop(&mut self) {
        give_back(&self.gate, &self.stage, (&self.scopes, self.priority.get()));
    }
}

impl<G: Deref<Target = Shared<E>>, E> fmt::Debug for Held<G, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Held").field(&self.stage).finish()
    }
}

/// Gives back what a call of `scopes` and `priority` at `stage` holds of the gate: its place
/// in line, or its slot.
fn give_back<E>(shared: &Shared<E>, stage: &Stage, (scopes, priority): (&[Scope], Priority)) {
    match stage {
        Stage::Waiting(ticket) | Stage::BackingOff(ticket, _) => shared.leave(*ticket),
        Stage::Clearing(clearing) => shared.drop_clearing(clearing, scopes),
        Stage::Running(sent) => shared.release(sent, (scopes, priority)),
        Stage::Done => {}
    }
}

/// Where an attempt stands; each stage carries what it needs.
#[derive(Debug)]
enum Stage {
    /// In line.
    Waiting(Ticket),
    /// In line, held by a backoff until this instant: a retry asks once it is over.
    BackingOff(Ticket, Instant),
    /// Let through by this process's gate, holding a slot, while the fleet's store decides.
    Clearing(Box<Clearing>),
    /// Holding a slot: the user's future runs.
    Running(Sent),
    Done,
}

/// One attempt of a call through the gate (see the module docs), as a future.
///
/// It holds the gate's shared state as `G`: lent (`&Shared<E>`) by `Gate::call`, which
/// outlives its attempts, so that a call touches no reference count; owned (an `Arc`) by the
/// streams, whose calls run apart.
#[pin_project(PinnedDrop)]
pub(crate) struct Call<
    G: Deref<Target = Shared<E>>,
    E,
    Fut,
    S = Estimated,
    D: Deadline = Infallible,
> where
    Fut: Future,
{
    gate: G,
    scopes: Box<[Scope]>,
    /// 1 for a call's first attempt.
    number: u32,
    terms: Terms<D>,
    /// The call's span, if a subscriber wants it: handed from attempt to attempt.
    trace: Trace,
    /// What the call's value says it really cost.
    actual: S,
    /// The error of the throttle before, for a deadline's error.
    last: Option<E>,
    stage: Stage,
    timer: Timer,
    #[pin]
    fut: Fut,
    /// The user's future's output, kept while the fleet's store hears what it was told.
    answer: Option<Fut::Output>,
    /// What the user's future told the fleet's store (an announcement), on its way there:
    /// the attempt ends once the store has heard, so that a process which stops when its
    /// last call returns leaves the fleet what that call learnt.
    told: Vec<JoinHandle<()>>,
}

impl<G, E, Fut, R, S, D> Future for Call<G, E, Fut, S, D>
where
    G: Deref<Target = Shared<E>> + Clone,
    Fut: Future<Output = Result<R, E>>,
    S: ActualCost<R>,
    D: Deadline,
{
    type Output = Turn<R, E, G, S, D>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let shared: &Shared<E> = this.gate;
        let trace = this.trace.get();
        // The user's future, and whatever the gate says of the call, run inside its span.
        let entered = metrics::enter(trace);
        let (number, cost, deadline) = (*this.number, this.terms.cost, this.terms.deadline);
        // The attempt's `Sent`, as it went out: kept in hand from the start to the end of a
        // future that is ready at once, rather than read back from the stage just written.
        let sent = loop {
            let granted = match this.stage {
                Stage::Waiting(ticket) => {
                    let ticket = *ticket;
                    let cost = (cost, this.terms.draws.draws());
                    match shared.admit(ticket, this.scopes, cost, deadline, cx.waker()) {
                        Admitted::Start(granted) => (granted, LinePlace::Taken(ticket), None),
                        Admitted::ToClear(granted, asked) => {
                            (granted, LinePlace::Taken(ticket), Some(asked))
                        }
                        Admitted::Wait(None) => return Poll::Pending,
                        Admitted::Wait(Some(until)) => {
                            ready!(this.timer.poll_until(until, cx));
                            continue;
                        }
                        Admitted::Late(deadline, earliest) => {
                            *this.stage = Stage::Done;
                            let last = this.last;
                            return Poll::Ready(late(deadline, earliest, last, trace, number));
                        }
                    }
                }
                Stage::BackingOff(ticket, until) => {
                    ready!(this.timer.poll_until(*until, cx));
                    *this.stage = Stage::Waiting(*ticket);
                    continue;
                }
                Stage::Clearing(clearing) => {
                    let heard = ready!(clearing.poll(this.timer, cx));
                    match shared.heard(clearing, heard, this.scopes) {
                        Cleared::Go(sent) => {
                            metrics::went_out(trace, number);
                            *this.stage = Stage::Running(sent.clone());
                            break sent;
                        }
                        Cleared::Back(ticket) => *this.stage = Stage::Waiting(ticket),
                        Cleared::Pending => {}
                    }
                    continue;
                }
                Stage::Running(sent) => break sent.clone(),
                Stage::Done => panic!("a gate's `Call` polled after it ended"),
            };
            match begin(shared, granted, this.scopes, trace, number) {
                Stage::Running(sent) => {
                    *this.stage = Stage::Running(sent.clone());
                    break sent;
                }
                stage => *this.stage = stage,
            }
        };
        let result = match this.answer.take() {
            Some(answer) => answer,
            None => {
                let fut = this.fut.as_mut();
                let gate = (shared.id(), shared.fleet.is_some());
                let started = (sent.at.map(|at| (at, sent.fleet_at)), this.scopes.first());
                let (polled, told) = answering::polling(gate, started, || fut.poll(cx));
                this.told.extend(told);
                ready!(polled)
            }
        };
        while let Some(telling) = this.told.last_mut() {
            if Pin::new(telling).poll(cx).is_pending() {
                *this.answer = Some(result);
                return Poll::Pending;
            }
            this.told.pop();
        }
        // Still `Running` while the user's code runs (reading the actual cost, the
        // classifier): if it panics, drop frees the slot.
        let end = end_attempt(
            shared,
            result,
            &sent,
            (number, this.terms.priority.into()),
            this.scopes,
            this.actual,
        );
        *this.stage = Stage::Done;
        if !matches!(end, AttemptEnd::Throttled(..)) {
            metrics::ended(trace, number);
        }
        // The span's guard borrows the trace, which goes on to the retry.
        #[allow(clippy::drop_non_drop)] // a guard only with the `metrics` feature
        drop(entered);
        let (gate, terms) = (this.gate.clone(), std::mem::take(this.terms));
        let carried = (this.scopes, this.trace, *this.actual);
        Poll::Ready(end.into_turn(gate, number, terms, carried))
    }
}

/// How an attempt ended, as the gate's state took it in.
#[derive(Debug)]
pub(super) enum AttemptEnd<R, E> {
    Value(R),
    /// An error that is not a throttle.
    Failed(E),
    /// Throttled on the last attempt the gate allows.
    GaveUp(E),
    /// Throttled: the retry holds this place in line, held by a backoff until this instant.
    Throttled(E, Ticket, Instant),
}

impl<R, E> AttemptEnd<R, E> {
    /// What attempt `number` of a call (through `gate`, held to `terms`, carrying its scopes,
    /// span and actual-cost reader) came to.
    #[inline]
    pub(super) fn into_turn<G: Deref<Target = Shared<E>>, S, D: Deadline>(
        self,
        gate: G,
        number: u32,
        terms: Terms<D>,
        (scopes, trace, actual): (&mut Box<[Scope]>, &mut Trace, S),
    ) -> Turn<R, E, G, S, D> {
        let (throttled, ticket, until) = match self {
            AttemptEnd::Value(value) => return Turn::Ended(Ended::Value(value)),
            AttemptEnd::Failed(error) => return Turn::Ended(Ended::Failed(error)),
            AttemptEnd::GaveUp(last) => {
                return Turn::Ended(Ended::GaveUp {
                    attempts: number,
                    last,
                });
            }
            AttemptEnd::Throttled(error, ticket, until) => (error, ticket, until),
        };
        Turn::Again(Retry {
            place: Held {
                gate,
                stage: Stage::BackingOff(ticket, until),
                scopes: std::mem::take(scopes),
                priority: HeldPriority::new(terms.priority.into()),
            },
            number: number + 1,
            terms,
            trace: std::mem::take(trace),
            actual,
            throttled,
        })
    }
}

/// Hands the end of attempt `number` of a call of `scopes`, sent as `sent`, to the gate's
/// state. The user's code (`actual`'s reader, the classifier) runs here, outside the lock;
/// if it panics, the caller's guard frees the slot.
#[inline]
pub(super) fn end_attempt<R, E>(
    shared: &Shared<E>,
    result: Result<R, E>,
    sent: &Sent,
    (number, priority): (u32, Priority),
    scopes: &[Scope],
    actual: &impl ActualCost<R>,
) -> AttemptEnd<R, E> {
    let error = match result {
        Ok(value) => {
            shared.succeeded(sent, (scopes, priority), actual.actual(&value));
            return AttemptEnd::Value(value);
        }
        Err(error) => error,
    };
    let Some(rate_limited) = (shared.classify)(&error) else {
        shared.failed(sent, (scopes, priority));
        return AttemptEnd::Failed(error);
    };
    match shared.throttled(rate_limited, sent, (number, priority), scopes) {
        None => AttemptEnd::GaveUp(error),
        Some((ticket, until)) => AttemptEnd::Throttled(error, ticket, until),
    }
}

/// The stage of attempt `number` of a call (of `scopes`, traced by `trace`) that the gate
/// let start as `granted`, from its place in line if it had one, to be cleared by the fleet
/// (asked as given) if the gate has one: running, or clearing.
#[inline]
fn begin<E>(
    shared: &Shared<E>,
    (granted, place, clear): (Granted, LinePlace, Option<FleetAsk>),
    scopes: &[Scope],
    trace: Option<&metrics::CallTrace>,
    number: u32,
) -> Stage {
    shared.metrics.started(place.priority());
    say::if_resumed(&granted);
    if let (Some(asked), Some(fleet)) = (clear, &shared.fleet) {
        let clearing = Clearing::ask(fleet, granted.sent, place, scopes, &asked);
        return Stage::Clearing(Box::new(clearing));
    }
    shared.metrics.went_out(scopes);
    metrics::went_out(trace, number);
    Stage::Running(granted.sent)
}

/// The end of a call that cannot start by its deadline.
#[cold]
fn late<R, E, G: Deref<Target = Shared<E>>, S, D: Deadline>(
    deadline: D,
    earliest: Instant,
    last: &mut Option<E>,
    trace: Option<&metrics::CallTrace>,
    number: u32,
) -> Turn<R, E, G, S, D> {
    metrics::ended(trace, number);
    Turn::Ended(Ended::Late {
        deadline,
        earliest,
        last: last.take(),
    })
}

#[pinned_drop]
impl<G: Deref<Target = Shared<E>>, E, Fut: Future, S, D: Deadline> PinnedDrop
    for Call<G, E, Fut, S, D>
{
    /// A dropped attempt gives back its place in line or its slot, so the others carry on.
    /// This also runs when the user's future or the classifier panics.
    fn drop(self: Pin<&mut Self>) {
        let this = self.project();
        let priority = this.terms.priority.into();
        give_back(this.gate, this.stage, (this.scopes, priority));
    }
}

impl<G: Deref<Target = Shared<E>>, E, Fut: Future, S, D: Deadline> fmt::Debug
    for Call<G, E, Fut, S, D>
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Call")
            .field("scopes", &self.scopes)
            .field("number", &self.number)
            .field("stage", &self.stage)
            .finish_non_exhaustive()
    }
}
