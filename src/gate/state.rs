//! The gate's shared state behind its one lock, and every change of it. Callers say what
//! happened (a call arrived, asks again, was dropped, ended this way; the fleet's store
//! answered); each is one method here, under one acquisition, which wakes the next waiter
//! itself. Nothing outside this file takes the lock: its submodules (what the fleet's store's
//! answers do, and a call's end beyond the core's part) work on the state it passes them.
//!
//! A call that nothing holds takes the lock twice: to start and to end. With a store, once
//! more, when the store's answer comes. Without a rate or with a fixed one, a call of one
//! unit that nothing holds takes a slot the state lent to its [`Loan`] (and, with a rate,
//! the lent pace's next start) and, if it succeeds, gives the slot back there, with no lock
//! at all; every acquisition of the lock first closes the loan and takes back what it lent,
//! so that under the lock the state is exact. A call the bounded line turns away takes it once, as
//! it arrives (through `Gate::call`, once more before that: the start that nothing holds is
//! tried first). A limit changed while the gate runs takes it once.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::task::Waker;

use tokio::time::Instant;

use super::answering;
use super::classify::{RateLimited, Scope};
use super::core::{Admission, Core, Granted, Hold, Sent};
use super::dimensions::{Cost, Draws, Reckoned, Source};
use super::fleet::{Clearing, Fleet, FleetAsk, Heard, KnownRate, PerUnit};
use super::line::{Class, LinePlace, Ticket};
use super::loan::Loan;
use super::options::{Deadline, Priority};
use super::pace::interval;
use super::partitions::Whose;
use super::quota::{Announcement, Dimension};
use super::say;
use super::scopes::ScopeLimits;
use super::stats::GateStats;
use crate::error::Overloaded;
use crate::metrics::{GateMetrics, Name};
pub(crate) use clearing::Cleared;

/// The user's classifier: which errors mean "rate-limited".
pub(super) type Classifier<E> = dyn Fn(&E) -> Option<RateLimited> + Send + Sync;

/// What every clone of a gate shares.
pub(crate) struct Shared<E> {
    state: Mutex<State>,
    /// The slots the state lent, for calls that nothing holds to start and end in without
    /// the lock (see [`Loan`]).
    loan: Loan,
    /// The in-flight limit, as the core has it: written under the lock, read without it by
    /// the streams, which keep that many calls in progress.
    max_in_flight: AtomicUsize,
    /// Whether the gate has a rate, so that every first attempt reads the clock: it does so
    /// before taking the lock, which then is held for less. Written under the lock when a
    /// gate told no rate finds one (see [`Shared::found_rate`]), read without it.
    paced: AtomicBool,
    /// Whether scopes have limits of their own, so that the gate keeps count of each scope's
    /// calls in flight.
    scope_limits: bool,
    pub(super) classify: Box<Classifier<E>>,
    /// The gate's name, for its metrics' label and its calls' spans.
    pub(super) name: Name,
    /// Its handles on the metrics recorder (nothing without the `metrics` feature).
    pub(super) metrics: GateMetrics,
    /// Where the fleet's share of the state lives, if beyond this process.
    pub(super) fleet: Option<Fleet>,
    /// How many times the lock was taken, for the tests that hold it to its count.
    #[cfg(test)]
    acquisitions: std::sync::atomic::AtomicUsize,
    /// Starts on the fast path, without a clock read and with one, for the tests that say
    /// which calls take it.
    #[cfg(test)]
    fast_starts: [std::sync::atomic::AtomicUsize; 2],
}

/// What the lock guards.
#[derive(Debug)]
struct State {
    /// The pure decisions; each waiter in line parks its waker there.
    core: Core<Option<Waker>>,
    /// What this gate knows of the fleet's adaptive rate (a gate with a store only).
    known: KnownRate,
    /// The slots lent to the loan while it is open, counted in flight by the core.
    lent: usize,
}

/// How a call's attempt went when it arrived at the gate.
#[derive(Debug)]
pub(super) enum Entry<D> {
    /// It starts at once.
    Start(Granted),
    /// It starts at once; the fleet's store must clear it, for a gate that knows this
    /// version of the fleet's rate.
    ToClear(Granted, FleetAsk),
    /// It waits in line.
    Waiting(Ticket),
    /// It cannot start by its deadline: the earliest it could.
    Late(D, Instant),
    /// It cannot start at once, and the line is full: it is turned away.
    Overloaded(Overloaded),
}

/// What a waiter asking again may do.
#[derive(Debug)]
pub(super) enum Admitted<D> {
    /// Start now.
    Start(Granted),
    /// Start now, once the fleet's store cleared it (see [`Entry::ToClear`]).
    ToClear(Granted, FleetAsk),
    /// Wait to be woken, or until this instant.
    Wait(Option<Instant>),
    /// It left the line: it cannot start by its deadline, at the earliest then.
    Late(D, Instant),
}

impl<E> Shared<E> {
    pub(super) fn new(
        core: Core<Option<Waker>>,
        max_in_flight: usize,
        paced: bool,
        classify: Box<Classifier<E>>,
        name: Name,
        metrics: GateMetrics,
        fleet: Option<Fleet>,
    ) -> Self {
        let scope_limits = core.has_scope_limits();
        let state = State {
            core,
            known: KnownRate::default(),
            lent: 0,
        };
        Self {
            state: Mutex::new(state),
            loan: Loan::new(),
            max_in_flight: AtomicUsize::new(max_in_flight),
            paced: AtomicBool::new(paced),
            scope_limits,
            classify,
            name,
            metrics,
            fleet,
            #[cfg(test)]
            acquisitions: Default::default(),
            #[cfg(test)]
            fast_starts: Default::default(),
        }
    }

    /// The gate's identity while it lives: its shared state's address.
    #[inline]
    pub(crate) fn id(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }

    /// The state, locked only for bookkeeping: never across an `.await` or a user callback.
    /// The loan is closed first, and what it lent taken back, so that the state is exact for
    /// whatever the holder decides.
    #[inline(always)]
    fn lock(&self) -> MutexGuard<'_, State> {
        #[cfg(test)]
        self.acquisitions
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if self.loan.is_open() {
            self.call_in(&mut state);
        }
        state
    }

    /// Closes the loan and takes back what it lent (see [`Shared::lock`]): out of line, since
    /// a call that could start on loan takes the lock only where the loan is closed or out of
    /// slots.
    #[cold]
    #[inline(never)]
    fn call_in(&self, state: &mut State) {
        if let Some(returned) = self.loan.close() {
            let lent = std::mem::take(&mut state.lent);
            state.core.take_back(lent, returned);
        }
    }

    /// Lends the slots free now, and a fixed rate's pace, if nothing else could hold a call
    /// (see [`Loan`]); a gate with a store lends none (the store clears each start).
    #[inline]
    fn lend(&self, state: &mut State) {
        if self.fleet.is_some() {
            return;
        }
        let (lent, pace) = state.core.lend();
        if lent > 0 {
            state.lent = lent;
            self.loan.open(lent, pace);
        }
    }

    /// Starts a first attempt of one unit and no scope in a slot lent to the loan, if it is
    /// open with one free: nothing could hold the call (see [`Loan`]).
    #[inline]
    pub(super) fn start_on_loan(&self) -> bool {
        if !self.loan.start() {
            return false;
        }
        #[cfg(test)]
        self.fast_starts[0].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.metrics.started(Priority::Normal);
        self.metrics.went_out(&[]);
        true
    }

    /// A call of `scopes` that costs `cost` units arrives: it starts at once if nothing
    /// holds it, is turned away if the line is full, is late for `deadline`, or joins the
    /// line. (A throttled call's retry is in line already: see [`Shared::throttled`].)
    #[inline]
    pub(super) fn enter<D: Deadline>(
        &self,
        scopes: &[Scope],
        (cost, draws): (u64, &Draws),
        priority: Priority,
        deadline: Option<D>,
    ) -> Entry<D> {
        let paced_now = self.is_paced().then(Instant::now);
        let mut state = self.lock();
        // Uncontended, with no rate and no backoff: no clock is read, and the lock is let go
        // before anything else is written (its release waits for them).
        let unheld = paced_now.is_none() && draws.is_none();
        if unheld && state.core.try_start_unheld(!scopes.is_empty(), cost) {
            if state.core.wants_first_start() {
                state.core.first_started(Instant::now());
            }
            return self.entered(state, Granted::untimed(cost), scopes);
        }
        let now = paced_now.unwrap_or_else(Instant::now);
        if let Some(granted) = state.core.try_start_now(scopes, (cost, draws), now) {
            return self.entered(state, granted, scopes);
        }
        // Asked first: a full line turns a call away without working out when it could start.
        if let Some(overloaded) = state.core.turns_away(priority) {
            drop(state);
            self.metrics.turned_away();
            return Entry::Overloaded(overloaded);
        }
        if let Some(deadline) = deadline {
            let arriving = LinePlace::Arriving(priority);
            let earliest = state
                .core
                .earliest_start(arriving, scopes, (cost, draws), now);
            if earliest > deadline.instant() {
                return Entry::Late(deadline, earliest);
            }
        }
        let ticket = state
            .core
            .join((Class::New, priority), scopes.into(), (cost, draws.clone()));
        drop(state);
        self.metrics.joined(priority);
        Entry::Waiting(ticket)
    }

    /// Whether the gate paces calls (it then reads the clock for every start).
    #[inline]
    pub(super) fn is_paced(&self) -> bool {
        self.paced.load(Ordering::Relaxed)
    }

    /// The gate told no rate found one (see [`GateBuilder::find_rate`](super::GateBuilder::find_rate)),
    /// under the lock: every first attempt reads the clock from now on, and the loan, which
    /// the lock closed, opens no more.
    #[cold]
    fn found_rate(&self) {
        self.paced.store(true, Ordering::Relaxed);
    }

    /// Whether scopes have limits of their own: then a call with scopes ends only through
    /// the state that counted it in its scopes.
    #[inline]
    pub(super) fn has_scope_limits(&self) -> bool {
        self.scope_limits
    }

    /// Starts a first attempt of `scopes` (that have no limits of their own) that costs
    /// `cost` units at once, outside the line and with no clock read, if nothing could hold
    /// it: no rate, no fleet (whose store clears each start), no backoff, no quota, nobody
    /// waiting, a free slot (see [`Unheld`](super::unheld::Unheld)).
    #[inline]
    pub(super) fn start_untimed(&self, scopes: &[Scope], cost: u64) -> bool {
        if self.is_paced() || self.fleet.is_some() {
            return false;
        }
        let mut state = self.lock();
        if !state.core.try_start_unheld(false, cost) {
            return false;
        }
        if state.core.wants_first_start() {
            state.core.first_started(Instant::now());
        }
        self.lend(&mut state);
        drop(state);
        #[cfg(test)]
        self.fast_starts[0].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.metrics.started(Priority::Normal);
        self.metrics.went_out(scopes);
        true
    }

    /// Starts a first attempt of `scopes` that costs `cost` units at once, outside the line,
    /// through a gate with a rate and no fleet, if nothing holds it: nobody waiting, a free
    /// slot, the rate's next start due, and no backoff, quota or limit of its scopes in the
    /// way.
    #[inline]
    pub(super) fn start_paced(&self, scopes: &[Scope], cost: u64) -> Option<Granted> {
        if self.fleet.is_some() {
            return None;
        }
        let now = Instant::now();
        // A first attempt of one unit and no scope may start on loan (see `Shared::lend`).
        let on_loan = cost == 1 && scopes.is_empty();
        if let Some(per_second) = on_loan.then(|| self.loan.start_paced(now)).flatten() {
            #[cfg(test)]
            self.fast_starts[1].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.metrics.started(Priority::Normal);
            self.metrics.went_out(&[]);
            return Some(Granted::on_pace(now, per_second));
        }
        let unnamed = (cost, &Draws::NONE);
        let mut state = self.lock();
        let granted = state.core.try_start_now(scopes, unnamed, now)?;
        self.lend(&mut state);
        drop(state);
        #[cfg(test)]
        self.fast_starts[1].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.metrics.started(Priority::Normal);
        self.metrics.went_out(scopes);
        Some(granted)
    }

    #[inline(always)]
    fn entered<D>(
        &self,
        mut state: MutexGuard<'_, State>,
        granted: Granted,
        scopes: &[Scope],
    ) -> Entry<D> {
        if self.fleet.is_none() {
            drop(state);
            return Entry::Start(granted);
        }
        let asked = state.hold_for_store(&granted, scopes);
        drop(state);
        Entry::ToClear(granted, asked)
    }

    /// The waiter holding `ticket` (of `scopes`, costing `cost`) asks again: it starts, waits
    /// (with `waker` parked) or, if it cannot start by `deadline`, leaves the line.
    pub(super) fn admit<D: Deadline>(
        &self,
        ticket: Ticket,
        scopes: &[Scope],
        cost: (u64, &Draws),
        deadline: Option<D>,
        waker: &Waker,
    ) -> Admitted<D> {
        let now = Instant::now();
        let mut state = self.lock();
        let until = match state.core.admit(ticket, now, ask) {
            Admission::Start(granted) => {
                // The next in line may start too, or must arm its timer.
                wake_next(&mut state.core, now);
                let to_clear = self
                    .fleet
                    .is_some()
                    .then(|| state.hold_for_store(&granted, scopes));
                drop(state);
                self.metrics.left_line(ticket.priority());
                return match to_clear {
                    None => Admitted::Start(granted),
                    Some(asked) => Admitted::ToClear(granted, asked),
                };
            }
            Admission::Wait => None,
            Admission::Apart(until) => {
                // The calls behind it in line may go.
                wake_next(&mut state.core, now);
                until
            }
            Admission::AwaitQuota => {
                state.core.waits_for(Hold::Quota);
                None
            }
            Admission::WaitUntil(until, hold) => {
                state.core.waits_for(hold);
                Some(until)
            }
        };
        let Some(deadline) = deadline else {
            park(&mut state.core, ticket, waker);
            return Admitted::Wait(until);
        };
        let (earliest, by) = (
            state
                .core
                .earliest_start(LinePlace::Taken(ticket), scopes, cost, now),
            deadline.instant(),
        );
        if earliest > by || now >= by {
            state.core.leave(ticket);
            wake_next(&mut state.core, now);
            drop(state);
            self.metrics.left_line(ticket.priority());
            return Admitted::Late(deadline, earliest.max(now));
        }
        park(&mut state.core, ticket, waker);
        Admitted::Wait(Some(until.map_or(by, |until| until.min(by))))
    }

    /// The waiter holding `ticket` was dropped: it leaves the line.
    pub(super) fn leave(&self, ticket: Ticket) {
        let mut state = self.lock();
        state.core.leave(ticket);
        wake_next(&mut state.core, Instant::now());
        drop(state);
        self.metrics.left_line(ticket.priority());
    }

    /// A running call of `scopes` and `priority` sent as `sent` was dropped: frees its slot
    /// and wakes the next in line.
    pub(super) fn release(&self, sent: &Sent, (scopes, priority): (&[Scope], Priority)) {
        let mut state = self.lock();
        state.core.release(sent, scopes);
        wake_next(&mut state.core, Instant::now());
        drop(state);
        self.metrics.released(priority);
    }

    /// A call of `scopes` and `priority` sent as `sent` succeeded, and cost `actual` units if
    /// its value said so: settles its cost, frees its slot, and grows an adaptive rate.
    #[inline]
    pub(super) fn succeeded(
        &self,
        sent: &Sent,
        (scopes, priority): (&[Scope], Priority),
        actual: Option<Cost>,
    ) {
        // A success of one unit with nothing to settle gives its slot back to the loan, if it
        // is open: nothing then needs more of its end (see `Core::lend`).
        let plain = actual.is_none() && scopes.is_empty() && sent.cost == 1;
        if plain && sent.draws.is_none() && self.loan.end() {
            self.metrics.succeeded(priority);
            return;
        }
        let mut state = self.lock();
        if let Some(actual) = actual {
            self.settle_in(&mut state, (sent, scopes), &actual);
        }
        state.core.succeeded(sent, scopes);
        if self.scope_limits && !scopes.is_empty() {
            state.core.grow_scopes(scopes, Instant::now());
        }
        self.metrics.succeeded(priority);
        if state.core.is_adaptive() {
            self.grow(&mut state);
        }
        if state.core.is_waiting() {
            wake_next(&mut state.core, Instant::now());
        } else {
            self.lend(&mut state);
        }
    }

    /// A call of `scopes` sent as `sent` cost `actual` in the dimensions it names: each
    /// settles it, the units with the fleet too.
    fn settle_in(&self, state: &mut State, (sent, scopes): (&Sent, &[Scope]), actual: &Cost) {
        if let Some(units) = actual.get(&Dimension::UNITS) {
            state.core.settle(sent, scopes, units);
            if let Some(fleet) = &self.fleet {
                let per_unit = state.core.scope_paces(scopes, 1);
                fleet.settle(sent, units, (scopes, &per_unit));
            }
        }
        state
            .core
            .settle_dims((sent, scopes), actual, Instant::now());
        if let Some(fleet) = &self.fleet {
            let (budgets, used) = state.core.fleet_settled((sent, scopes), actual);
            if !budgets.is_empty() {
                let sent_at = sent.fleet_at.and_then(|at| i64::try_from(at.get()).ok());
                fleet.store().settle_budgets(&budgets, &used, sent_at);
            }
        }
    }

    /// A call of `scopes` sent as `sent`, which has ended, cost `actual` (for a front-end's
    /// [`Settle`](super::Settle)): settled as if its value had said so (see
    /// [`Shared::succeeded`]); the line may move on.
    pub(crate) fn settle_ended(&self, (sent, scopes): (&Sent, &[Scope]), actual: &Cost) {
        let mut state = self.lock();
        self.settle_in(&mut state, (sent, scopes), actual);
        if state.core.is_waiting() {
            wake_next(&mut state.core, Instant::now());
        }
    }

    /// When the call of this gate whose future is being polled on this thread started, if
    /// one is (see [`answering`]).
    pub(crate) fn answering(&self) -> Option<answering::Started> {
        answering::answering(self.id()).map(|(sent, _)| sent)
    }

    /// A call of `scopes` and `priority` sent as `sent` failed with an error that is not a
    /// throttle: frees its slot.
    pub(super) fn failed(&self, sent: &Sent, (scopes, priority): (&[Scope], Priority)) {
        let mut state = self.lock();
        state.core.failed(sent, scopes);
        wake_next(&mut state.core, Instant::now());
        drop(state);
        self.metrics.failed(priority);
    }

    /// Attempt `number` of a call of `scopes` sent as `sent` was throttled as `rate_limited`
    /// says: backs off (and tells the fleet), frees the slot, and gives up on the call or
    /// puts its retry in line, first: its place in line, and the end of the backoff that
    /// holds it.
    pub(super) fn throttled(
        &self,
        rate_limited: RateLimited,
        sent: &Sent,
        (number, priority): (u32, Priority),
        scopes: &[Scope],
    ) -> Option<(Ticket, Instant)> {
        let now = Instant::now();
        let mut state = self.lock();
        let (throttled, retry) = self.throttle(
            &mut state,
            rate_limited,
            (sent, scopes),
            (number, priority),
            now,
        );
        wake_next(&mut state.core, now);
        drop(state);
        if retry.is_some() {
            self.metrics.joined(priority);
        }
        say::throttled(&throttled, now);
        retry
    }

    /// The server announced `announcements`, in the answer to a call in flight: each budget of
    /// each dimension takes in its own; the next waiter is woken if one changed. A gate with
    /// a store tells the fleet of each it shares, the generic quota among them.
    pub(super) fn observe_all(&self, announcements: impl IntoIterator<Item = Announcement>) {
        self.observe_all_for(None, announcements);
    }

    /// The server announced `announcements` in the answer to a call of `scope` in flight: on a
    /// gate with limits per scope, each is the scope's, the gate's or both by its policy
    /// (see [`Core::observe_scoped`]); else, and without a scope, each is the gate's (as
    /// [`Shared::observe_all`] says). A gate with a store tells the fleet of each budget it
    /// set that the fleet shares, the gate's and the scope's alike. Returns whether a policy
    /// that ran out is the scope's alone, if one ran out.
    pub(crate) fn observe_all_for(
        &self,
        scope: Option<&Scope>,
        announcements: impl IntoIterator<Item = Announcement>,
    ) -> Option<bool> {
        let (now, answering) = (Instant::now(), self.answering());
        let dated = answering.map(|(at, _)| at);
        let mut state = self.lock();
        let scope = scope.filter(|_| state.core.has_scope_limits());
        let (mut changed, mut ran_out) = (scope.is_some(), None);
        for announcement in announcements {
            let whose = match scope {
                Some(scope) => {
                    let (whose, gates) =
                        state
                            .core
                            .observe_scoped(scope, (&announcement, dated), now);
                    changed |= gates;
                    whose
                }
                None => {
                    changed |= state.core.observe_dims(&announcement, dated, now);
                    Whose::Gate
                }
            };
            if announcement.quota.remaining() == 0 {
                let scopes = whose == Whose::Scope;
                ran_out = Some(ran_out.unwrap_or(true) && scopes);
            }
            if whose != Whose::Scope {
                self.tell_fleet(&state, (None, &announcement), (now, answering));
            }
            if whose != Whose::Gate {
                self.tell_fleet(&state, (scope, &announcement), (now, answering));
            }
        }
        if changed {
            wake_next(&mut state.core, now);
        }
        ran_out
    }

    /// Units of `dimension` that may start now (see [`Core::budget_left`]).
    pub(super) fn budget_left(&self, dimension: &Dimension) -> Option<u64> {
        self.lock().core.budget_left(dimension, Instant::now())
    }

    /// The same of `scope`'s budgets.
    #[cfg(test)]
    pub(super) fn budget_left_in(&self, scope: &Scope, dimension: &Dimension) -> Option<u64> {
        let now = Instant::now();
        self.lock().core.budget_left_in(scope, dimension, now)
    }

    /// The budget `announcement` set, the gate's or `scope`'s, as this gate reckons it at
    /// `now`, told the fleet if the gate has a store and the fleet shares that budget,
    /// dated by the start the store reserved for the call being polled (`answering`): that
    /// call, if it answers for this gate, ends once the store has heard.
    fn tell_fleet(
        &self,
        state: &State,
        (scope, announcement): (Option<&Scope>, &Announcement),
        (now, answering): (Instant, Option<answering::Started>),
    ) {
        let Some(fleet) = &self.fleet else { return };
        let dated = answering.and_then(|(_, fleet_at)| fleet_at);
        let reckoned = (state.core.reckoned(scope, announcement, now))
            .map(|reckoned| Reckoned { dated, ..reckoned });
        if let Some(telling) = reckoned.and_then(|b| fleet.store().observe_budget(&b)) {
            answering::told(self.id(), telling);
        }
    }

    /// The server announced `announcements` for `scope`, in the answer to a call of it in
    /// flight (see [`Core::observe_dims_in`]); the next waiter is woken to ask again, and a
    /// gate with a store tells the fleet of each budget it set (see
    /// [`Shared::observe_all_for`]). `false` for a gate without limits per scope.
    pub(super) fn observe_all_in(
        &self,
        scope: &Scope,
        announcements: impl IntoIterator<Item = Announcement>,
    ) -> bool {
        let (now, answering) = (Instant::now(), self.answering());
        let dated = answering.map(|(at, _)| at);
        let mut state = self.lock();
        if !state.core.has_scope_limits() {
            return false;
        }
        for announcement in announcements {
            state
                .core
                .observe_dims_in(scope, (&announcement, dated), now);
            self.tell_fleet(&state, (Some(scope), &announcement), (now, answering));
        }
        wake_next(&mut state.core, now);
        true
    }

    /// A call cost `more` units more than it started with: charged to the rate and the quota.
    pub(super) fn charge(&self, more: u64) {
        let mut state = self.lock();
        state.core.charge(more);
        if let Some(fleet) = &self.fleet {
            let rate = state.core.stats(Instant::now()).rate;
            let more = i64::try_from(more).unwrap_or(i64::MAX);
            let per_unit = PerUnit {
                gate: rate.map(interval),
                scopes: Vec::new(),
            };
            fleet.store().settle(more, &per_unit);
            // And off the fleet's announced windows of units, as a call of its start unknown.
            let extra = Cost::from(more.unsigned_abs());
            let (draws, used) = state.core.fleet_settled((&Sent::untimed(0), &[]), &extra);
            let (draws, used): (Vec<_>, Vec<_>) = (draws.into_iter().zip(used))
                .filter(|(draw, _)| draw.source != Source::Told)
                .unzip();
            if !draws.is_empty() {
                fleet.store().settle_budgets(&draws, &used, None);
            }
        }
    }

    /// What the fleet's store said of a call this gate let start (of `scopes`): it goes, goes
    /// back in line, or waits on the clearing still.
    #[cold]
    #[inline(never)]
    pub(super) fn heard(&self, clearing: &mut Clearing, heard: Heard, scopes: &[Scope]) -> Cleared {
        let now = Instant::now();
        let mut state = self.lock();
        if matches!(heard, Heard::AskAgain) && !state.core.is_held(scopes, now) {
            // The store's answer is asked for again once the lock is let go.
            let asked = state.fleet_ask(scopes, &clearing.sent);
            drop(state);
            clearing.ask_again(scopes, &asked);
            return Cleared::Pending;
        }
        state.heard(clearing, heard, scopes, (now, &self.metrics))
    }

    /// A call of `scopes` was dropped while the store decided on it: it gives back its slot
    /// uncounted.
    #[cold]
    pub(super) fn drop_clearing(&self, clearing: &Clearing, scopes: &[Scope]) {
        let mut state = self.lock();
        state.give_back(clearing, scopes);
        wake_next(&mut state.core, Instant::now());
        drop(state);
        self.metrics.unstarted(clearing.place.priority());
    }

    /// The in-flight limit becomes `n` (checked: at least 1): a raised one wakes the next
    /// waiter, which starts if it may and wakes the one after; a lowered one lets the calls
    /// in flight finish, and no call starts until fewer than `n` are.
    pub(super) fn set_max_in_flight(&self, n: usize) {
        let mut state = self.lock();
        state.core.set_max_in_flight(n);
        self.max_in_flight.store(n, Ordering::Relaxed);
        wake_next(&mut state.core, Instant::now());
    }

    /// The rate becomes `per_second` (checked: positive and finite), as
    /// [`Core::set_rate`] says; the next waiter is woken to ask again, whether the rate rose
    /// or fell. Returns the rate calls now start at; `None` for a gate without a rate, which
    /// is left as it is.
    pub(super) fn set_rate(&self, per_second: f64) -> Option<f64> {
        if !self.is_paced() {
            return None;
        }
        let now = Instant::now();
        let mut state = self.lock();
        let rate = state.core.set_rate(per_second);
        self.metrics.rate(|| rate);
        wake_next(&mut state.core, now);
        rate
    }

    /// The limits of `scope` become `limits` (see [`Core::set_scope_limits`]), and the next
    /// waiter is woken to ask again. `false` for a gate without limits per scope.
    pub(super) fn set_scope_limits(&self, scope: &Scope, limits: ScopeLimits) -> bool {
        let mut state = self.lock();
        if !state.core.set_scope_limits(scope, limits, ask) {
            return false;
        }
        wake_next(&mut state.core, Instant::now());
        true
    }

    /// The rate calls of `scope` start at now (see [`Core::scope_rate`]).
    pub(super) fn scope_rate(&self, scope: &Scope) -> Option<f64> {
        self.lock().core.scope_rate(scope)
    }

    /// The counters, with the state now.
    pub(super) fn stats(&self) -> GateStats {
        let mut stats = self.lock().core.stats(Instant::now());
        stats.fleet_members = (self.fleet.as_ref())
            .map(|fleet| fleet.store().members())
            .filter(|members| *members > 0);
        stats
    }

    /// The earliest a new call (of no scope) could start, from now, spending nothing.
    pub(super) fn earliest_start(&self) -> Instant {
        let now = Instant::now();
        let arriving = LinePlace::Arriving(Priority::Normal);
        self.lock()
            .core
            .earliest_start(arriving, &[], (1, &Draws::NONE), now)
    }

    /// The gate's in-flight limit, read without the lock.
    pub(super) fn max_in_flight(&self) -> usize {
        self.max_in_flight.load(Ordering::Relaxed)
    }
}

impl<E> fmt::Debug for Shared<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gate")
            .field("name", &self.name)
            .field("state", &*self.lock())
            .field("fleet", &self.fleet)
            .finish_non_exhaustive()
    }
}

/// Wakes the waiter that may start next, if one waits (and those found held back by their
/// own scopes on the way, to wait for their holds).
fn wake_next(core: &mut Core<Option<Waker>>, now: Instant) {
    core.wake_next(now, ask);
}

/// Wakes a waiter parked in line, to ask again.
fn ask(parked: &mut Option<Waker>) {
    if let Some(waker) = parked.take() {
        waker.wake();
    }
}

/// Parks `waker` for the waiter holding `ticket`, keeping the one it has if it wakes the same.
fn park(core: &mut Core<Option<Waker>>, ticket: Ticket, waker: &Waker) {
    match core.parked(ticket) {
        Some(old) if old.will_wake(waker) => {}
        slot => *slot = Some(waker.clone()),
    }
}

mod clearing;
mod ended;
#[cfg(test)]
mod tests;
