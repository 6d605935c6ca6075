//! The gate's pure core: may a call start now (else not before when, and why), and what the
//! end of an attempt changes (the backoff, the rate, the counters; retry or give up).
//!
//! Everything here takes instants and returns decisions. No runtime, clock, timer, waker or log
//! lives here: `state.rs` and `call.rs` wire the core to tasks and timers, and say aloud (through
//! `tracing`) what the core decided. Each waiter in line carries a value of the async layer's
//! choosing (`W`: its waker), which the core keeps but never looks into.

use std::num::NonZeroU64;
use std::time::Duration;

use tokio::time::Instant;

use super::adaptive::RateEvent;
use super::backoff::BackoffSchedule;
use super::backoffs::Backoffs;
use super::budget::Spend;
use super::classify::Scope;
use super::dimensions::{Budget, Dimensions, Draws};
use super::line::{Class, Line, LinePlace, Ticket};
use super::options::Priority;
use super::pace::{CallRate, Pace};
use super::partitions::{Partitions, PolicyOf, Whose};
use super::quota::{Announcement, Dimension};
use super::scopes::{Rule, Scopes};
use super::stats::GateStats;
use crate::error::Overloaded;

mod ended;
mod loan;
mod scoped;
mod store;

/// How a call went out: what the adaptive rate needs to judge its throttle.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sent {
    /// When it started; `None` when the gate read no clock for it (no rate and no backoff).
    pub(crate) at: Option<Instant>,
    /// The rate it started at, if the gate paces calls.
    pub(crate) rate: StartRate,
    /// The units it spent of the rate and the announced quota.
    pub(crate) cost: u64,
    /// What it spent of the budgets of other dimensions.
    pub(crate) draws: Draws,
    /// Its start on the fleet's store's clock, in microseconds, as the store reserved it (a
    /// gate with a store only): where its draws on the fleet's budgets are found again. (The
    /// store's clock is past its epoch: a start is never zero, and the record stays small.)
    pub(crate) fleet_at: Option<NonZeroU64>,
}

/// The rate a call started at, if the gate paced it, in the eight bytes of an `f64` (a rate
/// is positive; none is zero): a started call's record stays as small as it was before it
/// carried its draws, and the uncontended path holds it across the user's future.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct StartRate(f64);

impl StartRate {
    /// The rate, if there was one.
    #[inline]
    pub(crate) fn get(self) -> Option<f64> {
        (self.0 > 0.0).then_some(self.0)
    }
}

impl From<Option<f64>> for StartRate {
    #[inline]
    fn from(rate: Option<f64>) -> Self {
        Self(rate.unwrap_or(0.0))
    }
}

impl Sent {
    /// A call of `cost` units that went out with no clock read: the gate has no rate, no
    /// backoff and no announced quota.
    pub(crate) const fn untimed(cost: u64) -> Sent {
        Sent {
            at: None,
            rate: StartRate(0.0),
            cost,
            draws: Draws::NONE,
            fleet_at: None,
        }
    }
}

impl Granted {
    /// A start at `at` of a call of one unit at `per_second`, on the pace lent to the loan
    /// (see [`Loan::start_paced`](super::loan::Loan::start_paced)).
    #[inline]
    pub(crate) fn on_pace(at: Instant, per_second: f64) -> Granted {
        Granted {
            sent: Sent {
                at: Some(at),
                rate: StartRate(per_second),
                cost: 1,
                draws: Draws::NONE,
                fleet_at: None,
            },
            resumed_after: None,
        }
    }

    /// A start of a call of `cost` units that the gate read no clock for (see
    /// [`Sent::untimed`]).
    pub(crate) const fn untimed(cost: u64) -> Granted {
        Granted {
            sent: Sent::untimed(cost),
            resumed_after: None,
        }
    }
}

/// What a waiter may do now.
#[derive(Debug, PartialEq)]
pub(crate) enum Admission {
    /// Start: a slot is taken.
    Start(Granted),
    /// Wait to be woken: others are ahead in line, or every slot is taken.
    Wait,
    /// Wait until this instant, then ask again.
    WaitUntil(Instant, Hold),
    /// Wait to be woken by the answer of the call that learns the server's next window.
    AwaitQuota,
    /// Held back by one of its own scopes (a backoff, or a limit of the scope's): the waiter
    /// stepped out of line, so that the calls behind it may go; it waits until this instant
    /// and asks again, or, for `None`, to be woken when one of the scope's calls ends.
    Apart(Option<Instant>),
}

/// Why a call that may not start now waits until a known instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hold {
    /// The gate-wide backoff.
    Backoff,
    /// The rate: the previous start was too recent.
    Pace,
    /// The quota the server announced: spread until its reset, or spent.
    Quota,
    /// Calls come back gradually after a gate-wide backoff: the in-flight limit grows.
    Ramp,
}

/// The core's yes to a call start: the call goes out as `sent`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Granted {
    pub(crate) sent: Sent,
    /// The gate-wide backoff that this start is the first call after, if any: when it ended.
    pub(crate) resumed_after: Option<Instant>,
}

/// What a throttle changed, for the async layer to tell the log and the fleet.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Throttled {
    /// Whether the call was throttled on every attempt the gate allows; else it is tried
    /// again, first in line when the backoff lifts.
    pub(crate) gave_up: bool,
    /// The scope whose calls wait (`None`: every call through the gate).
    pub(crate) scope: Option<Scope>,
    /// How long from now, as the server said or the schedule chose (at most [`MAX_WAIT`]).
    pub(crate) length: Duration,
    /// When the backoff in force ends (a longer one already running is kept).
    pub(crate) until: Instant,
    /// Whether this throttle moved the gate-wide backoff's end (worth a warning once).
    pub(crate) extended: bool,
    /// The throttle as the adaptive rate counted it, if it did.
    pub(crate) rate_event: Option<(RateEvent, bool)>,
    /// Whether the quota the throttle announced is its scope's (see
    /// [`Gate::observe_in`](crate::Gate::observe_in)), not the gate's.
    pub(crate) scopes_quota: bool,
}

/// The state of one gate, behind its mutex.
#[derive(Debug)]
pub(crate) struct Core<W> {
    max_in_flight: usize,
    /// The most calls that may wait in line when a new one arrives; `None`: no bound.
    max_queued: Option<usize>,
    max_retries: u32,
    in_flight: usize,
    line: Line<W>,
    backoffs: Backoffs,
    pace: Pace,
    /// The units spent by the calls in flight.
    in_flight_cost: u64,
    /// The units of the calls in flight that the fleet's store has not let go yet (a gate with
    /// a store only): neither the server nor the fleet's quota has counted them.
    unsent_cost: u64,
    /// The budgets of every dimension, told and announced: the quota a server announces
    /// for the whole gate is its budget of [`Dimension::UNITS`].
    dims: Dimensions,
    /// The limits of each scope, and the state of the scopes in use.
    scopes: Scopes,
    /// Whose each policy a scoped answer announces is, the scope's or the gate's.
    partitions: Partitions,
    /// Whether the announced quota, rather than the rate, held back the latest call that
    /// waited: then the rate is not what successes prove, and an adaptive rate does not grow.
    quota_bound: bool,
    counts: GateStats,
    /// Whether each start must be cleared (by the fleet's store) before the next may start.
    serial: bool,
    /// A start is being cleared.
    clearing: bool,
    /// How many starts each start counts as, against the limits a fleet shares that this
    /// process keeps too (the rate, each scope's rate, the gate-wide announced quota, the
    /// budgets told the gate): 1, but while the fleet's store does not answer, the fleet's
    /// live members, so that each process keeps to its share (see [`Core::share_out`]).
    fleet_weight: u64,
}

/// The settings a core starts from.
#[derive(Debug)]
pub(crate) struct Settings {
    pub(crate) max_in_flight: usize,
    pub(crate) max_queued: Option<usize>,
    pub(crate) max_retries: u32,
    pub(crate) rate: Option<CallRate>,
    /// Whether a gate with no `rate` finds one (see [`Pace::finding`]).
    pub(crate) find_rate: bool,
    /// Units of every announced quota left unspent.
    pub(crate) quota_reserve: u64,
    pub(crate) schedule: BackoffSchedule,
    pub(crate) seed: u64,
    /// Starts one at a time, each cleared before the next (a paced gate with a store).
    pub(crate) serial: bool,
    /// The limits of each scope, if scopes have any.
    pub(crate) per_scope: Option<Rule>,
    /// The budgets told, in every dimension.
    pub(crate) budgets: Vec<Budget>,
    /// Whose each policy named here is, as the user said.
    pub(crate) policies: Vec<(String, PolicyOf)>,
    /// Whether the generic announced quota is the fleet's, which its store keeps (see
    /// [`Dimensions::with_fleet_quota`]).
    pub(crate) fleet_quota: bool,
}

impl<W: Default> Core<W> {
    pub(crate) fn new(settings: Settings) -> Self {
        Self {
            max_in_flight: settings.max_in_flight,
            max_queued: settings.max_queued,
            max_retries: settings.max_retries,
            in_flight: 0,
            line: Line::default(),
            backoffs: Backoffs::new(settings.schedule, settings.seed),
            pace: Pace::new(settings.rate).finding(settings.find_rate),
            in_flight_cost: 0,
            unsent_cost: 0,
            dims: Dimensions::new(&settings.budgets, settings.quota_reserve)
                .with_fleet_quota(settings.fleet_quota),
            scopes: Scopes::new(settings.per_scope, settings.quota_reserve)
                .with_fleet_quota(settings.fleet_quota),
            partitions: {
                let mut partitions = Partitions::default();
                for (policy, of) in settings.policies {
                    partitions.tell(policy, of);
                }
                partitions
            },
            quota_bound: false,
            counts: GateStats::default(),
            serial: settings.serial,
            clearing: false,
            fleet_weight: 1,
        }
    }

    /// Takes a place in line, for a call of `scopes` that costs `cost` units and `draws`,
    /// whatever the line's bound: a new call asks [`Core::turns_away`] first; a throttled
    /// call's retry and a start the fleet turned back were let in once, and are never turned
    /// away.
    pub(crate) fn join(
        &mut self,
        (class, priority): (Class, Priority),
        scopes: Box<[Scope]>,
        (cost, draws): (u64, Draws),
    ) -> Ticket {
        let weights = &self.scopes;
        let ticket = self.line.join((class, priority), scopes, cost, |scope| {
            weights.weight(scope)
        });
        self.line.waiter_mut(ticket).draws = draws;
        ticket
    }

    /// Goes back to the place in line that `ticket` gives.
    pub(crate) fn rejoin(
        &mut self,
        ticket: Ticket,
        scopes: Box<[Scope]>,
        (cost, draws): (u64, Draws),
    ) {
        let weights = &self.scopes;
        self.line
            .rejoin(ticket, scopes, cost, |scope| weights.weight(scope));
        self.line.waiter_mut(ticket).draws = draws;
    }
}

impl<W> Core<W> {
    /// The uncontended fast path: starts a call at once if nobody waits, a slot is free, and
    /// the gate has neither a rate, nor a backoff, nor an announced quota, so that nothing
    /// could hold the call and no clock need be read. Otherwise [`Core::try_start_now`]
    /// decides.
    /// A call with scopes (`scoped`) through a gate with limits per scope never does: its
    /// scopes' limits must be read.
    #[inline]
    pub(crate) fn try_start_unheld(&mut self, scoped: bool, cost: u64) -> bool {
        let free = self.line.is_empty() && self.in_flight < self.max_in_flight && !self.clearing;
        let free = free && !(scoped && self.scopes.has_limits());
        let unheld = free && self.nothing_holds();
        if unheld {
            self.in_flight += 1;
            self.in_flight_cost += cost;
            self.counts.calls += 1;
            self.clearing = self.serial;
        }
        unheld
    }

    /// Whether the pace would have the instant of a start that no clock was read for: the
    /// first, at a gate that finds its rate (see [`Pace::first_started`]).
    #[inline]
    pub(crate) fn wants_first_start(&self) -> bool {
        self.pace.wants_first_start()
    }

    /// The first call started at `now` (see [`Core::wants_first_start`]).
    pub(crate) fn first_started(&mut self, now: Instant) {
        self.pace.first_started(now);
    }

    /// Whether nothing but the line and the in-flight limit could hold a call: no backoff, no
    /// rate, no announced quota.
    #[inline]
    fn nothing_holds(&self) -> bool {
        self.backoffs.is_clear() && !self.pace.is_paced() && self.dims.is_empty()
    }

    /// Starts a call of `scopes` that costs `cost` units at `now` if nobody waits, a slot is
    /// free and no backoff (of the gate or of `scopes`), rate or announced quota holds it.
    #[inline(always)]
    pub(crate) fn try_start_now(
        &mut self,
        scopes: &[Scope],
        (cost, draws): (u64, &Draws),
        now: Instant,
    ) -> Option<Granted> {
        if !self.line.is_empty() || self.in_flight >= self.max_in_flight || self.clearing {
            return None;
        }
        if self.in_flight >= self.in_flight_limit(now).0 {
            return None;
        }
        if self.backoff_end(scopes, now).is_some() || self.pace.until(now).is_some() {
            return None;
        }
        if self.scopes.has_limits() && self.scope_hold(scopes, (cost, draws), now).is_some() {
            return None;
        }
        if !self.dims.is_empty() && self.dims.check(now, cost, draws) != Spend::Now {
            return None;
        }
        Some(self.start(now, scopes, (cost, draws)))
    }

    /// Whether a new call of `priority` that could not start at once is turned away rather
    /// than take a place in line: the line holds as many calls of its priority or a higher one
    /// as its bound (every such waiter counts, whatever holds it, retries included; calls in
    /// flight do not). With a bound of zero, every call that cannot start at once is. Counts
    /// it.
    pub(crate) fn turns_away(&mut self, priority: Priority) -> Option<Overloaded> {
        let max_queued = self.max_queued?;
        if self.line.len_at_or_above(priority) < max_queued {
            return None;
        }
        self.counts.turned_away += 1;
        Some(Overloaded::new(max_queued))
    }

    /// Leaves the line without starting.
    pub(crate) fn leave(&mut self, ticket: Ticket) {
        self.line.leave(ticket);
    }

    /// Sets the in-flight limit to `n` (at least 1): above it, the next waiters may start
    /// now; below it, the calls in flight finish, and no call starts until fewer than `n`
    /// are.
    pub(crate) fn set_max_in_flight(&mut self, n: usize) {
        debug_assert!(n > 0, "checked by the caller");
        self.max_in_flight = n;
    }

    /// Sets the rate to `per_second` (positive and finite), for the next start on: it waits
    /// for the new interval after the last start. An adaptive rate starts again from
    /// `per_second`, its ceiling; see [`Pace::set`]. Returns the rate calls now start at;
    /// `None` for a gate without a rate, which stays without one.
    pub(crate) fn set_rate(&mut self, per_second: f64) -> Option<f64> {
        self.pace.set(per_second)
    }

    /// May the waiter holding `ticket` start at `now`? `ask` is given what the async layer
    /// keeps for each waiter found held back by its own scopes on the way (its waker), to ask
    /// again and wait for that hold.
    ///
    /// Only the first waiter in line may start. A waiter that a backoff or a limit of its own
    /// scopes holds back steps out of line until it is over, so that the calls behind it
    /// carry on: with its lane, if it is its lane's scope (the first of its scopes) that
    /// holds it, else alone.
    ///
    /// # Panics
    ///
    /// If `ticket` is not in line.
    pub(crate) fn admit(
        &mut self,
        ticket: Ticket,
        now: Instant,
        mut ask: impl FnMut(&mut W),
    ) -> Admission {
        let waiter = self.line.waiter(ticket);
        let cost = waiter.cost;
        if let Some(hold) = self.scope_hold(&waiter.scopes, (cost, &waiter.draws), now) {
            self.step_out(ticket, hold);
            return Admission::Apart(hold.1);
        }
        let stepped_in = self.line.is_out(ticket);
        if stepped_in {
            self.line.step_in(ticket);
        }
        let next = self.next_in_line(now, &mut ask);
        if next != Some(ticket) {
            // Back in line, it brought its lane back: the lane's first waiter, parked while
            // the lane was out, may now be first in line, and must hear it.
            if let (true, Some(next)) = (stepped_in, next) {
                ask(self.line.parked(next));
            }
            return Admission::Wait;
        }
        if self.in_flight >= self.max_in_flight || self.clearing {
            return Admission::Wait;
        }
        if let (limit, Some(grows)) = self.in_flight_limit(now) {
            if self.in_flight >= limit {
                // A call that ends wakes the line too.
                return Admission::WaitUntil(grows, Hold::Ramp);
            }
        }
        let backoff = self.backoff_end(&[], now).map(|end| (end, Hold::Backoff));
        let pace = self.pace.until(now).map(|end| (end, Hold::Pace));
        let quota = match self.dims_check(ticket, now) {
            Spend::Now => None,
            Spend::NotBefore(end) => Some((end, Hold::Quota)),
            // The call that learns the server's new window is out: its answer wakes the line.
            Spend::AwaitAnswer => return Admission::AwaitQuota,
        };
        let holds = backoff.into_iter().chain(pace).chain(quota);
        if let Some((end, hold)) = holds.max_by_key(|(end, _)| *end) {
            return Admission::WaitUntil(end, hold);
        }
        let waiter = self.line.start(ticket);
        Admission::Start(self.start(now, &waiter.scopes, (cost, &waiter.draws)))
    }

    /// What the budgets of every dimension say of the waiter holding `ticket`, at `now`.
    fn dims_check(&mut self, ticket: Ticket, now: Instant) -> Spend {
        if self.dims.is_empty() {
            return Spend::Now;
        }
        let waiter = self.line.waiter(ticket);
        self.dims.check(now, waiter.cost, &waiter.draws)
    }

    /// The earliest a call of `scopes` could start, from `now`: behind the waiters ahead of
    /// its ticket in line, or, for a call arriving at a priority, of the place it would take. A
    /// lower bound,
    /// for a caller's deadline: the backoffs that hold the call, and the rate and the
    /// announced quota, which each waiter ahead spends first; not when calls in flight will
    /// free their slots, which the gate cannot foresee.
    pub(crate) fn earliest_start(
        &self,
        place: LinePlace,
        scopes: &[Scope],
        (cost, draws): (u64, &Draws),
        now: Instant,
    ) -> Instant {
        let held_back =
            |scopes: &[Scope], cost: (u64, &Draws)| self.scope_hold(scopes, cost, now).is_some();
        let ticket = match place {
            LinePlace::Taken(ticket) => ticket,
            LinePlace::Arriving(priority) => {
                let weight_of = |scope: &Scope| self.scopes.weight(scope);
                self.line
                    .ticket_for((Class::New, priority), scopes, cost, weight_of)
            }
        };
        let ahead = self.line.cost_ahead(ticket, held_back);
        let held = self.backoff_end(scopes, now).unwrap_or(now);
        let held = held.max(self.scopes.earliest(scopes, (cost, draws), now));
        let paced = self.pace.earliest(now, ahead);
        let budgets = self.dims.earliest_behind(now, ahead, (cost, draws));
        held.max(paced).max(budgets)
    }

    /// What the async layer keeps for the waiter holding `ticket` (its waker).
    ///
    /// # Panics
    ///
    /// If `ticket` is not in line.
    pub(crate) fn parked(&mut self, ticket: Ticket) -> &mut W {
        self.line.parked(ticket)
    }

    /// Gives `ask` what the async layer keeps for the waiter that may start next (when a
    /// slot frees, the pace or a backoff allows), if one waits: the one to wake after
    /// anything that may let a call start; and for each waiter found held back by its own
    /// scopes on the way, which steps out of line and is asked to wait for its hold.
    pub(crate) fn wake_next(&mut self, now: Instant, mut ask: impl FnMut(&mut W)) {
        if let Some(ticket) = self.next_in_line(now, &mut ask) {
            ask(self.line.parked(ticket));
        }
    }

    #[inline(always)]
    fn start(&mut self, now: Instant, scopes: &[Scope], (cost, draws): (u64, &Draws)) -> Granted {
        let weight = self.fleet_weight;
        if self.scopes.has_limits() {
            self.scopes.started(scopes, now, (cost, draws), weight);
        }
        self.in_flight += 1;
        self.in_flight_cost += cost;
        self.counts.calls += 1;
        self.clearing = self.serial;
        self.pace.started(now, cost.saturating_mul(weight));
        self.dims.grow_reserve(cost);
        if !self.dims.is_empty() || !draws.is_none() {
            self.dims.started_as(now, (cost, draws), weight);
        }
        let resumed_after = self.backoffs.started(self.max_in_flight, now);
        Granted {
            sent: Sent {
                at: Some(now),
                rate: self.pace.per_second().into(),
                cost,
                draws: draws.clone(),
                fleet_at: None,
            },
            resumed_after,
        }
    }

    /// How many calls may be in flight at `now`: fewer than the gate's limit while calls come
    /// back after a gate-wide backoff, and then when that grows.
    #[inline]
    fn in_flight_limit(&self, now: Instant) -> (usize, Option<Instant>) {
        self.backoffs.in_flight_limit(self.max_in_flight, now)
    }

    /// A waiter in line waits for `hold`: whether the announced quota, rather than the rate,
    /// holds calls back, so that an adaptive rate knows whether successes prove it.
    pub(crate) fn waits_for(&mut self, hold: Hold) {
        match hold {
            Hold::Quota => self.quota_bound = true,
            Hold::Pace => self.quota_bound = false,
            Hold::Backoff | Hold::Ramp => {}
        }
    }

    /// The first waiter in line, once every waiter ahead of it that its own scopes hold back
    /// stepped out of line (each given to `ask`, to wait for its hold; one that waits for a
    /// slot is woken by the call that frees it, and is not asked).
    fn next_in_line(&mut self, now: Instant, mut ask: impl FnMut(&mut W)) -> Option<Ticket> {
        loop {
            let ticket = self.line.first()?;
            let waiter = self.line.waiter(ticket);
            let Some(hold) = self.scope_hold(&waiter.scopes, (waiter.cost, &waiter.draws), now)
            else {
                return Some(ticket);
            };
            self.step_out(ticket, hold);
            if hold.1.is_some() {
                ask(self.line.parked(ticket));
            }
        }
    }

    /// The end of the latest backoff holding a call of `scopes` at `now`.
    #[inline]
    fn backoff_end(&self, scopes: &[Scope], now: Instant) -> Option<Instant> {
        self.backoffs.end(scopes, now)
    }

    #[inline]
    fn scope_backoff_end(&self, scopes: &[Scope], now: Instant) -> Option<Instant> {
        self.backoffs.scope_end(scopes, now)
    }

    /// The end of the gate-wide backoff, if one runs at `now`.
    #[inline]
    pub(crate) fn gate_backoff_end(&self, now: Instant) -> Option<Instant> {
        self.backoffs.gate_end(now)
    }

    /// Whether any call waits in line.
    #[inline]
    pub(crate) fn is_waiting(&self) -> bool {
        !self.line.is_empty()
    }

    /// Takes in what a server announced of a budget of any dimension at `now`, in the answer
    /// to one of the calls in flight; returns whether it changed (waiters may start sooner).
    /// As [`Core::observe`] does, the answering call's one unit and one request are taken
    /// as counted, the rest of the calls in flight as not; what the answering call drew of
    /// other dimensions is not known here, and is taken as not counted (on the safe side).
    pub(crate) fn observe_dims(
        &mut self,
        announcement: &Announcement,
        dated: Option<Instant>,
        now: Instant,
    ) -> bool {
        self.observe_answered(announcement, (dated, 1), now)
    }

    /// Like [`Core::observe_dims`], the answering call still in flight and `counted` of its
    /// units (and its request, if any) counted by the server; the calls waiting for the
    /// fleet's store are not counted either.
    fn observe_answered(
        &mut self,
        announcement: &Announcement,
        (dated, counted): (Option<Instant>, u64),
        now: Instant,
    ) -> bool {
        let units = self.sent_cost().saturating_sub(counted);
        let requests = (self.in_flight as u64).saturating_sub(1);
        let in_flight = (dated, units, requests, self.unsent_cost);
        self.dims.observe_beside(announcement, in_flight, now)
    }

    /// Takes in `announcement`, in the answer to a call of `scope` started at `dated` (if
    /// known) on a gate with limits per scope: as the scope's, the gate's or both, as the
    /// policy's partition shows (see [`Partitions`]). Returns whose it was taken as, and
    /// whether a budget of the gate's changed. A policy just shown to be the scope's is no
    /// longer the gate's.
    pub(crate) fn observe_scoped(
        &mut self,
        scope: &Scope,
        (announcement, dated): (&Announcement, Option<Instant>),
        now: Instant,
    ) -> (Whose, bool) {
        let partition = announcement.partition.as_deref();
        let policy = announcement.policy.as_deref();
        let (whose, shown) = self.partitions.whose(scope, (policy, partition));
        if shown && whose == Whose::Scope {
            self.dims.forget(&announcement.dimension, policy);
        }
        let mut changed = false;
        if whose != Whose::Scope {
            changed = self.observe_dims(announcement, dated, now);
        }
        if whose != Whose::Gate {
            self.observe_dims_in(scope, (announcement, dated), now);
        }
        (whose, changed)
    }

    /// Units of `dimension` that may start at `now` before a budget of it holds a call back.
    pub(crate) fn budget_left(&self, dimension: &Dimension, now: Instant) -> Option<u64> {
        self.dims.left(dimension, now)
    }

    /// The same of `scope`'s budgets.
    #[cfg(test)]
    pub(crate) fn budget_left_in(
        &self,
        scope: &Scope,
        dimension: &Dimension,
        now: Instant,
    ) -> Option<u64> {
        self.scopes.budget_left(scope, dimension, now)
    }

    /// The counters, with the state at `now`.
    pub(crate) fn stats(&self, now: Instant) -> GateStats {
        GateStats {
            rate: self.pace.per_second(),
            backoff_until: self.gate_backoff_end(now),
            in_flight: self.in_flight,
            queued: self.line.len(),
            scopes_kept: self.scopes.kept(),
            ..self.counts.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Quota;
    use crate::gate::adaptive::AdaptiveRate;
    use crate::gate::backoff::Jitter;
    use crate::gate::classify::RateLimited;
    use crate::gate::pace::interval;
    use crate::time::MAX_WAIT;

    const MS: Duration = Duration::from_millis(1);
    const SEC: Duration = Duration::from_secs(1);

    fn settings(max_in_flight: usize, max_retries: u32, rate: Option<CallRate>) -> Settings {
        Settings {
            max_in_flight,
            max_queued: None,
            max_retries,
            rate,
            find_rate: false,
            quota_reserve: 0,
            schedule: BackoffSchedule::new(100 * MS, 10_000 * MS, Jitter::None, 2),
            seed: 1,
            serial: false,
            per_scope: None,
            budgets: Vec::new(),
            policies: Vec::new(),
            fleet_quota: false,
        }
    }

    fn core(max_in_flight: usize) -> Core<()> {
        Core::new(settings(max_in_flight, 2, None))
    }

    impl<W: Default> Core<W> {
        /// Joins the line at normal priority, unscoped, drawing nothing but `cost`.
        fn join_plain(&mut self, class: Class, cost: u64) -> Ticket {
            self.join((class, Priority::Normal), Box::new([]), (cost, Draws::NONE))
        }

        /// Starts an unscoped call of `cost` at `now`, if nothing holds it.
        fn start_plain(&mut self, cost: u64, now: Instant) -> Option<Granted> {
            self.try_start_now(&[], (cost, &Draws::NONE), now)
        }
    }

    fn started(admission: Admission) -> Granted {
        match admission {
            Admission::Start(started) => started,
            other => panic!("expected a start, got {other:?}"),
        }
    }

    #[test]
    fn an_idle_gate_starts_a_call_at_once_without_reading_the_clock() {
        let mut core = core(1);
        // Nothing could hold it: no instant is asked for.
        assert!(core.try_start_unheld(false, 1));
        // The slot is taken: the next call must queue.
        assert!(!core.try_start_unheld(false, 1));
        assert_eq!(core.start_plain(1, Instant::now()), None);
        assert_eq!(core.stats(Instant::now()).in_flight, 1);
    }

    #[test]
    fn the_line_is_first_come_first_served_and_retries_go_first() {
        let t0 = Instant::now();
        let mut core = core(1);
        core.start_plain(1, t0).unwrap();
        let first = core.join_plain(Class::New, 1);
        let second = core.join_plain(Class::New, 1);
        let retry = core.join_plain(Class::Retry, 1);
        assert_eq!(
            core.admit(first, t0, |_| {}),
            Admission::Wait,
            "every slot is taken"
        );
        core.failed(&Sent::untimed(1), &[]);
        assert_eq!(
            core.admit(first, t0, |_| {}),
            Admission::Wait,
            "the retry is ahead"
        );
        assert_eq!(core.admit(second, t0, |_| {}), Admission::Wait);
        started(core.admit(retry, t0, |_| {}));
        core.failed(&Sent::untimed(1), &[]);
        started(core.admit(first, t0, |_| {}));
        core.failed(&Sent::untimed(1), &[]);
        started(core.admit(second, t0, |_| {}));
    }

    #[test]
    fn a_rate_spaces_starts_from_the_last_one() {
        let t0 = Instant::now();
        let mut core: Core<()> = Core::new(settings(8, 2, Some(CallRate::Fixed(10.0))));
        let first = core.start_plain(1, t0).unwrap();
        assert_eq!(
            first.sent,
            Sent {
                at: Some(t0),
                rate: Some(10.0).into(),
                cost: 1,
                draws: Draws::NONE,
                fleet_at: None,
            }
        );
        assert_eq!(core.start_plain(1, t0 + 99 * MS), None);
        let ticket = core.join_plain(Class::New, 1);
        assert_eq!(
            core.admit(ticket, t0 + 99 * MS, |_| {}),
            Admission::WaitUntil(t0 + 100 * MS, Hold::Pace)
        );
        started(core.admit(ticket, t0 + 100 * MS, |_| {}));
    }

    #[test]
    fn a_throttle_holds_every_call_until_its_backoff_ends_and_the_retry_goes_first() {
        let t0 = Instant::now();
        let mut core = core(4);
        let sent = core.start_plain(1, t0).unwrap().sent;
        let new = core.join_plain(Class::New, 1);
        let throttled = core.throttled(RateLimited::new(), (&sent, &[]), 1, t0);
        assert!(!throttled.gave_up);
        // No Retry-After, no jitter: the schedule's base.
        assert_eq!(
            (throttled.length, throttled.until),
            (100 * MS, t0 + 100 * MS)
        );
        assert!(throttled.extended);
        let retry = core.join_plain(Class::Retry, 1);
        assert_eq!(
            core.admit(retry, t0 + 50 * MS, |_| {}),
            Admission::WaitUntil(t0 + 100 * MS, Hold::Backoff)
        );
        assert_eq!(core.admit(new, t0 + 100 * MS, |_| {}), Admission::Wait);
        let resumed = started(core.admit(retry, t0 + 100 * MS, |_| {}));
        assert_eq!(resumed.resumed_after, Some(t0 + 100 * MS));
        // Calls come back one at a time: a second slot opens a third of the 100 ms backoff
        // later (4 slots), or when the retry ends.
        let second_slot = t0 + 100 * MS + Duration::from_nanos(33_333_334);
        assert_eq!(
            core.admit(new, t0 + 100 * MS, |_| {}),
            Admission::WaitUntil(second_slot, Hold::Ramp)
        );
        started(core.admit(new, second_slot, |_| {}));
    }

    #[test]
    fn during_a_resume_an_ended_call_frees_its_slot_and_a_new_throttle_restarts_it() {
        let t0 = Instant::now();
        let mut core = core(3);
        let sent = core.start_plain(1, t0).unwrap().sent;
        core.throttled(RateLimited::new().retry_after(SEC), (&sent, &[]), 1, t0);
        let resumed = t0 + SEC;
        let sent = core.start_plain(1, resumed).unwrap().sent;
        assert_eq!(core.start_plain(1, resumed), None, "one slot until 1.5 s");
        // The call that resumed ends: its slot is free again, the limit is still 1.
        core.succeeded(&sent, &[]);
        let sent = core.start_plain(1, resumed).unwrap().sent;
        // Throttled again, for 2 s: no ramp until that backoff ends, then one over 2 s.
        core.throttled(
            RateLimited::new().retry_after(2 * SEC),
            (&sent, &[]),
            1,
            resumed,
        );
        let again = resumed + 2 * SEC;
        core.start_plain(1, again).unwrap();
        assert_eq!(core.start_plain(1, again + 999 * MS), None);
        core.start_plain(1, again + SEC).unwrap();
        assert_eq!(core.start_plain(1, again + SEC), None);
        core.start_plain(1, again + 2 * SEC).unwrap();
        assert!(!core.try_start_unheld(false, 1), "3 of 3 in flight");
    }

    #[test]
    fn backoffs_without_retry_after_double_and_a_run_of_successes_steps_them_down() {
        let t0 = Instant::now();
        let mut core = core(1);
        let mut lengths = Vec::new();
        let throttle = |core: &mut Core<()>| {
            let sent = core.start_plain(1, t0 + 100_000 * MS).unwrap().sent;
            core.throttled(RateLimited::new(), (&sent, &[]), 1, t0)
                .length
        };
        for _ in 0..3 {
            lengths.push(throttle(&mut core));
        }
        // decay_after(2): two successes in a row step the exponent down by one.
        for _ in 0..2 {
            core.start_plain(1, t0 + 100_000 * MS).unwrap();
            core.succeeded(&Sent::untimed(1), &[]);
        }
        lengths.push(throttle(&mut core));
        assert_eq!(lengths, [100 * MS, 200 * MS, 400 * MS, 400 * MS]);
    }

    #[test]
    fn a_retry_after_is_kept_whole_and_an_absurd_one_is_clamped() {
        let t0 = Instant::now();
        let mut core = core(1);
        let sent = core.start_plain(1, t0).unwrap().sent;
        let long = RateLimited::new().retry_after(Duration::MAX);
        let throttled = core.throttled(long, (&sent, &[]), 1, t0);
        assert_eq!(throttled.length, MAX_WAIT);
        assert_eq!(throttled.until, t0 + MAX_WAIT);
        let sent = core.start_plain(1, t0 + MAX_WAIT).unwrap().sent;
        let exact = RateLimited::new().retry_after(1234 * MS);
        let throttled = core.throttled(exact, (&sent, &[]), 1, t0 + MAX_WAIT);
        assert_eq!(throttled.until, t0 + MAX_WAIT + 1234 * MS);
    }

    #[test]
    fn a_streak_of_zero_retry_afters_backs_off_as_the_schedule_does() {
        let t0 = Instant::now();
        let mut core = core(1);
        let later = t0 + 100_000 * MS;
        let throttle = |core: &mut Core<()>, after| {
            let sent = core.start_plain(1, later).unwrap().sent;
            let throttled = RateLimited::new().retry_after(after);
            core.throttled(throttled, (&sent, &[]), 1, t0).length
        };
        let zeros: Vec<_> = (0..3)
            .map(|_| throttle(&mut core, Duration::ZERO))
            .collect();
        assert_eq!(zeros, [100 * MS, 200 * MS, 400 * MS]);
        // 150 ms is shorter than the next 800 ms: the schedule's length, and it doubles on.
        assert_eq!(throttle(&mut core, 150 * MS), 800 * MS);
        assert_eq!(core.backoffs.exponent(), 4);
        // A Retry-After as long as the next 1.6 s is kept whole and leaves the exponent.
        assert_eq!(throttle(&mut core, 1600 * MS), 1600 * MS);
        assert_eq!(throttle(&mut core, 5 * SEC), 5 * SEC);
        assert_eq!(core.backoffs.exponent(), 4);
        assert_eq!(throttle(&mut core, Duration::ZERO), 1600 * MS);
    }

    #[test]
    fn a_shorter_backoff_never_cuts_a_longer_one_short() {
        let t0 = Instant::now();
        let mut core = core(1);
        assert_eq!(core.back_off(None, t0, 500 * MS), (t0 + 500 * MS, true));
        assert_eq!(core.back_off(None, t0, 200 * MS), (t0 + 500 * MS, false));
        assert_eq!(core.back_off(None, t0, 700 * MS), (t0 + 700 * MS, true));
        assert_eq!(core.gate_backoff_end(t0), Some(t0 + 700 * MS));
        assert_eq!(core.gate_backoff_end(t0 + 700 * MS), None);
    }

    #[test]
    fn the_retry_limit_gives_up_after_the_last_allowed_attempt() {
        let t0 = Instant::now();
        let mut core = core(1);
        let mut gave_up = Vec::new();
        for attempt in 1..=3 {
            let sent = core.start_plain(1, t0 + 100_000 * MS).unwrap().sent;
            gave_up.push(
                core.throttled(RateLimited::new(), (&sent, &[]), attempt, t0)
                    .gave_up,
            );
        }
        assert_eq!(gave_up, [false, false, true]);
        let stats = core.stats(t0 + 100_000 * MS);
        assert_eq!((stats.throttles, stats.retries, stats.gave_up), (3, 2, 1));
    }

    #[test]
    fn a_scope_backoff_holds_only_its_calls_and_they_wait_out_of_line() {
        let t0 = Instant::now();
        let mut core = core(4);
        let acct: Scope = "acct-1".into();
        let sent = core.start_plain(1, t0).unwrap().sent;
        let throttled = core.throttled(RateLimited::new().scope("acct-1"), (&sent, &[]), 1, t0);
        assert!(!throttled.extended, "a scope's backoff is not the gate's");
        let held = core.join(
            (Class::Retry, Priority::Normal),
            Box::new([acct.clone()]),
            (1, Draws::NONE),
        );
        let other = core.join(
            (Class::New, Priority::Normal),
            Box::new(["acct-2".into()]),
            (1, Draws::NONE),
        );
        assert_eq!(
            core.admit(held, t0, |_| {}),
            Admission::Apart(Some(t0 + 100 * MS))
        );
        // The held retry is ahead in line, but its scope holds it: the other goes.
        started(core.admit(other, t0, |_| {}));
        assert_eq!(core.try_start_now(&[acct], (1, &Draws::NONE), t0), None);
        assert!(
            core.try_start_now(&["acct-3".into()], (1, &Draws::NONE), t0)
                .is_none(),
            "a waiter is in line"
        );
        started(core.admit(held, t0 + 100 * MS, |_| {}));
    }

    #[test]
    fn a_throttle_that_says_nothing_backs_an_adaptive_gate_off_for_at_most_a_second() {
        let t0 = Instant::now();
        let schedule = BackoffSchedule::new(100 * MS, 60_000 * MS, Jitter::None, 100);
        let adaptive = || CallRate::Adaptive(AdaptiveRate::new(10.0, 1.0, 10.0));
        let lengths = |rate: Option<CallRate>, retry_after: Option<Duration>| {
            let mut core: Core<()> = Core::new(Settings {
                schedule: schedule.clone(),
                ..settings(1, 100, rate)
            });
            let mut t = t0;
            let mut lengths = Vec::new();
            for _ in 0..6 {
                let sent = core.start_plain(1, t).unwrap().sent;
                let mut throttle = RateLimited::new();
                if let Some(after) = retry_after {
                    throttle = throttle.retry_after(after);
                }
                let throttled = core.throttled(throttle, (&sent, &[]), 1, t);
                lengths.push(throttled.length.as_millis() as u64);
                t = throttled.until + 100 * SEC;
            }
            lengths
        };
        assert_eq!(
            lengths(Some(adaptive()), None),
            [100, 200, 400, 800, 1000, 1000]
        );
        // A fixed rate is not cut, and a Retry-After is the server's word: the schedule.
        let fixed = Some(CallRate::Fixed(10.0));
        assert_eq!(lengths(fixed, None), [100, 200, 400, 800, 1600, 3200]);
        let after = Some(5 * SEC);
        assert_eq!(lengths(Some(adaptive()), after), [5000; 6]);
    }

    #[test]
    fn a_throttle_cuts_an_adaptive_rate_and_a_scoped_one_does_not() {
        let t0 = Instant::now();
        let adaptive = CallRate::Adaptive(AdaptiveRate::new(10.0, 1.0, 10.0));
        let mut core: Core<()> = Core::new(settings(4, 2, Some(adaptive)));
        let sent = core.start_plain(1, t0).unwrap().sent;
        let scoped = core.throttled(RateLimited::new().scope("a"), (&sent, &[]), 1, t0);
        assert_eq!(scoped.rate_event, None);
        assert_eq!(core.stats(t0).rate, Some(10.0));
        let sent = core.start_plain(1, t0 + 100 * MS).unwrap().sent;
        let throttled = core.throttled(RateLimited::new(), (&sent, &[]), 1, t0 + 100 * MS);
        assert!(matches!(
            throttled.rate_event,
            Some((RateEvent::Throttle { .. }, true))
        ));
        assert_eq!(core.stats(t0).rate, Some(7.0));
        // The pace follows the cut rate at once.
        let ticket = core.join_plain(Class::New, 1);
        let resume = throttled.until;
        let sent = started(core.admit(ticket, resume, |_| {})).sent;
        core.succeeded(&sent, &[]);
        let next = core.join_plain(Class::New, 1);
        assert_eq!(
            core.admit(next, resume, |_| {}),
            Admission::WaitUntil(resume + interval(7.0), Hold::Pace)
        );
    }

    #[test]
    fn every_start_counts_and_once_a_backoff_has_passed_no_clock_is_read_again() {
        let t0 = Instant::now();
        let mut core = core(2);
        core.back_off(None, t0, 100 * MS);
        assert!(!core.try_start_unheld(false, 1), "a backoff holds calls");
        let ticket = core.join_plain(Class::New, 1);
        started(core.admit(ticket, t0 + 100 * MS, |_| {}));
        assert_eq!(core.stats(t0 + 100 * MS).calls, 1);
        core.succeeded(&Sent::untimed(1), &[]);
        // Calls come back gradually for as long as the backoff lasted; once a start
        // after that finds it over, the clockless path is open again.
        assert!(!core.try_start_unheld(false, 1), "calls are coming back");
        core.start_plain(1, t0 + 200 * MS).unwrap();
        assert!(core.try_start_unheld(false, 1));
        assert_eq!(core.stats(t0 + 200 * MS).calls, 3);
    }

    #[test]
    fn at_the_cap_the_exponent_stops_so_that_decay_starts_from_the_cap() {
        let t0 = Instant::now();
        let schedule = BackoffSchedule::new(100 * MS, 400 * MS, Jitter::None, 1);
        let mut core: Core<()> = Core::new(Settings {
            schedule,
            ..settings(1, 10, None)
        });
        // Each call starts long after the backoffs (all begun at t0) have passed.
        let later = t0 + 100_000 * MS;
        let throttle = |core: &mut Core<()>| {
            let sent = core.start_plain(1, later).unwrap().sent;
            core.throttled(RateLimited::new(), (&sent, &[]), 1, t0)
                .length
        };
        let lengths: Vec<_> = (0..4).map(|_| throttle(&mut core)).collect();
        assert_eq!(lengths, [100 * MS, 200 * MS, 400 * MS, 400 * MS]);
        // One success (decay_after 1) steps down from the cap's exponent, not from above it.
        core.start_plain(1, later).unwrap();
        core.succeeded(&Sent::untimed(1), &[]);
        assert_eq!(throttle(&mut core), 200 * MS);
    }

    /// While the fleet's store does not answer, a start of 1 unit counts as one of each of
    /// the fleet's 4 members against the rate, the announced quota and a told budget that the
    /// fleet shares (but the reserve grows by its own cost); once the store answers, starts
    /// count once again, the next spaced from the last as it counted.
    #[test]
    fn a_start_counts_once_for_each_member_while_the_fleets_store_does_not_answer() {
        let t0 = Instant::now();
        let per_second = Budget::new(Dimension::REQUESTS, 8, SEC);
        let mut core: Core<()> = Core::new(Settings {
            budgets: vec![per_second],
            ..settings(8, 2, Some(CallRate::Fixed(10.0)))
        });
        core.observe_dims(
            &Announcement::new(Dimension::UNITS, Quota::new(1_000, 10 * SEC)),
            None,
            t0,
        );
        assert_eq!(core.share_out(Some(4), &[]), Some(4));
        assert_eq!(core.share_out(Some(4), &[]), None, "no change");
        core.start_plain(1, t0).unwrap();
        // 4 units of the quota, and 1 more for the reserve the call grew.
        assert_eq!(core.budget_left(&Dimension::UNITS, t0), Some(995));
        // The rate spaces the next start by 4 intervals; the budget of 8 a second holds two.
        assert!(core.start_plain(1, t0 + 399 * MS).is_none());
        core.start_plain(1, t0 + 400 * MS).unwrap();
        assert_eq!(core.budget_left(&Dimension::UNITS, t0), Some(991));
        assert!(
            core.start_plain(1, t0 + 800 * MS).is_none(),
            "the budget is spent"
        );
        // The store answers: the next start is still spaced from the last as it counted.
        assert_eq!(core.share_out(None, &[]), Some(1));
        assert!(core.start_plain(1, t0 + 799 * MS).is_none());
        core.start_plain(1, t0 + SEC).unwrap();
        core.start_plain(1, t0 + 1_100 * MS).unwrap();
        assert_eq!(core.budget_left(&Dimension::UNITS, t0), Some(989));
        // No member count heard: each start counts once.
        assert_eq!(core.share_out(Some(0), &[]), None);
    }

    #[test]
    fn a_start_the_fleet_turned_back_is_neither_in_flight_nor_counted() {
        let t0 = Instant::now();
        let mut core = core(4);
        let turned_back = core.start_plain(5, t0).unwrap().sent;
        core.end_clearing();
        core.start_plain(3, t0).unwrap();
        core.unstart(&turned_back, &[]);
        let stats = core.stats(t0);
        assert_eq!((stats.calls, stats.in_flight), (1, 1));
        // An answer to the call still out: the other 2 of its 3 units may be uncounted; the
        // reserve is the largest call's 5.
        core.observe_dims(
            &Announcement::new(Dimension::UNITS, Quota::new(10, 10 * SEC)),
            None,
            t0,
        );
        assert_eq!(core.budget_left(&Dimension::UNITS, t0), Some(3));
    }

    /// A policy of a scoped answer with a partition key is kept as the scope's and the
    /// gate's until another scope's answer shows its key: one that differs makes it the
    /// scope's, and the gate forgets its copy; one that is the same keeps it the gate's.
    #[test]
    fn a_scoped_answers_policies_go_to_the_scope_or_the_gate_by_their_keys() {
        use crate::gate::scopes::ScopeLimits;
        let t0 = Instant::now();
        let mut core: Core<()> = Core::new(Settings {
            per_scope: Some(Rule::Every(ScopeLimits::new())),
            ..settings(8, 2, None)
        });
        let (a, b) = (Scope::from("a"), Scope::from("b"));
        let policy = |name: &str, key: &[u8], left| {
            Announcement::new(Dimension::UNITS, Quota::new(left, 10 * SEC))
                .policy(name)
                .partition(key)
        };
        let seen = |core: &mut Core<()>, scope: &Scope, announced| {
            core.observe_scoped(scope, (&announced, None), t0).0
        };
        assert_eq!(seen(&mut core, &a, policy("account", b"a", 4)), Whose::Both);
        assert_eq!(
            seen(&mut core, &a, policy("whole", b"all", 15)),
            Whose::Both
        );
        // Less a call's room, kept until the windows show they need none.
        assert_eq!(core.budget_left(&Dimension::UNITS, t0), Some(3));
        assert_eq!(
            seen(&mut core, &b, policy("account", b"b", 4)),
            Whose::Scope
        );
        assert_eq!(
            seen(&mut core, &b, policy("whole", b"all", 14)),
            Whose::Gate
        );
        // The gate keeps the whole key's policy alone now.
        assert_eq!(core.budget_left(&Dimension::UNITS, t0), Some(13));
    }

    #[test]
    fn every_way_a_call_ends_takes_its_units_out_of_flight() {
        let t0 = Instant::now();
        let quota = Quota::new(100, 10 * SEC);
        let mut core = core(8);
        let sent = |core: &mut Core<()>, cost| core.start_plain(cost, t0).unwrap().sent;
        let (failed, released, throttled) =
            (sent(&mut core, 5), sent(&mut core, 7), sent(&mut core, 11));
        let answered = sent(&mut core, 3);
        core.failed(&failed, &[]);
        core.release(&released, &[]);
        core.throttled(RateLimited::new(), (&throttled, &[]), 1, t0);
        // Only the answered call's 3 units are in flight: all but one may be uncounted. The
        // reserve is the largest call's 11.
        core.observe_dims(&Announcement::new(Dimension::UNITS, quota), None, t0);
        assert_eq!(core.budget_left(&Dimension::UNITS, t0), Some(87));
        let _ = answered;
    }

    #[test]
    fn the_earliest_start_counts_the_calls_ahead_not_behind() {
        let t0 = Instant::now();
        let mut core: Core<()> = Core::new(settings(1, 2, Some(CallRate::Fixed(10.0))));
        core.start_plain(1, t0).unwrap();
        let first = core.join_plain(Class::New, 4);
        let second = core.join_plain(Class::New, 1);
        // The first waits for the 100 ms its predecessor paid; the second also for its 4 units.
        assert_eq!(
            core.earliest_start(LinePlace::Taken(first), &[], (4, &Draws::NONE), t0),
            t0 + 100 * MS
        );
        assert_eq!(
            core.earliest_start(LinePlace::Taken(second), &[], (1, &Draws::NONE), t0),
            t0 + 500 * MS
        );
        assert_eq!(
            core.earliest_start(
                LinePlace::Arriving(Priority::Normal),
                &[],
                (1, &Draws::NONE),
                t0
            ),
            t0 + 600 * MS
        );
    }

    fn bounded(max_in_flight: usize, max_queued: usize) -> Core<()> {
        Core::new(Settings {
            max_queued: Some(max_queued),
            ..settings(max_in_flight, 2, None)
        })
    }

    #[test]
    fn a_full_line_turns_new_calls_away_and_takes_them_again_once_one_leaves() {
        let t0 = Instant::now();
        let mut core = bounded(1, 2);
        core.start_plain(1, t0).unwrap();
        assert_eq!(core.turns_away(Priority::Normal), None, "nobody waits");
        let first = core.join_plain(Class::New, 1);
        assert_eq!(core.turns_away(Priority::Normal), None, "one waits, of two");
        core.join_plain(Class::New, 1);
        assert_eq!(core.turns_away(Priority::Normal), Some(Overloaded::new(2)));
        assert_eq!(core.turns_away(Priority::Normal), Some(Overloaded::new(2)));
        assert_eq!(core.stats(t0).turned_away, 2);
        // The first waiter starts: the line has room again.
        core.failed(&Sent::untimed(1), &[]);
        started(core.admit(first, t0, |_| {}));
        assert_eq!(core.turns_away(Priority::Normal), None);
        assert_eq!(core.stats(t0).turned_away, 2);
    }

    #[test]
    fn an_unbounded_line_turns_nobody_away() {
        let mut core = core(1);
        for _ in 0..100 {
            assert_eq!(core.turns_away(Priority::Normal), None);
            core.join_plain(Class::New, 1);
        }
        assert_eq!(core.stats(Instant::now()).turned_away, 0);
    }

    #[test]
    fn a_bound_of_zero_keeps_no_line() {
        let t0 = Instant::now();
        let mut core = bounded(1, 0);
        // The caller asks only of a call that could not start at once.
        core.start_plain(1, t0).unwrap();
        assert_eq!(core.turns_away(Priority::Normal), Some(Overloaded::new(0)));
        assert_eq!(core.stats(t0).queued, 0);
    }

    #[test]
    fn a_retry_takes_its_place_in_a_full_line_and_counts_in_it() {
        let t0 = Instant::now();
        let mut core = bounded(2, 1);
        let sent = core.start_plain(1, t0).unwrap().sent;
        core.start_plain(1, t0).unwrap();
        core.join_plain(Class::New, 1);
        assert!(core.turns_away(Priority::Normal).is_some());
        // Throttled: its retry goes first, over the bound.
        assert!(
            !core
                .throttled(RateLimited::new(), (&sent, &[]), 1, t0)
                .gave_up
        );
        let retry = core.join_plain(Class::Retry, 1);
        assert_eq!(core.stats(t0).queued, 2);
        assert!(
            core.turns_away(Priority::Normal).is_some(),
            "the retry counts as waiting"
        );
        assert_eq!(
            core.admit(retry, t0, |_| {}),
            Admission::WaitUntil(t0 + 100 * MS, Hold::Backoff)
        );
    }

    #[test]
    fn a_raised_in_flight_limit_lets_the_next_waiter_start_and_a_lowered_one_holds_it() {
        let t0 = Instant::now();
        let mut core = core(1);
        let first = core.start_plain(1, t0).unwrap().sent;
        let waiter = core.join_plain(Class::New, 1);
        assert_eq!(core.admit(waiter, t0, |_| {}), Admission::Wait);
        core.set_max_in_flight(2);
        let mut asked = 0;
        core.wake_next(t0, |()| asked += 1);
        assert_eq!(asked, 1, "the line has one to wake");
        let second = started(core.admit(waiter, t0, |_| {})).sent;
        // Lowered below the calls in flight: they go on; nobody starts until one is left.
        core.set_max_in_flight(1);
        let third = core.join_plain(Class::New, 1);
        assert_eq!(core.admit(third, t0, |_| {}), Admission::Wait);
        core.succeeded(&first, &[]);
        assert_eq!(
            core.admit(third, t0, |_| {}),
            Admission::Wait,
            "one in flight, of one"
        );
        assert_eq!(core.start_plain(1, t0), None);
        core.succeeded(&second, &[]);
        started(core.admit(third, t0, |_| {}));
    }

    #[test]
    fn a_new_rate_spaces_the_next_start_from_the_last_one() {
        let t0 = Instant::now();
        let mut core: Core<()> = Core::new(settings(8, 2, Some(CallRate::Fixed(1.0))));
        core.start_plain(3, t0).unwrap();
        let ticket = core.join_plain(Class::New, 1);
        assert_eq!(
            core.admit(ticket, t0, |_| {}),
            Admission::WaitUntil(t0 + 3 * SEC, Hold::Pace)
        );
        // Raised: three units at 10 a second.
        assert_eq!(core.set_rate(10.0), Some(10.0));
        assert_eq!(
            core.admit(ticket, t0, |_| {}),
            Admission::WaitUntil(t0 + 300 * MS, Hold::Pace)
        );
        // Lowered: at 2 a second.
        assert_eq!(core.set_rate(2.0), Some(2.0));
        assert_eq!(
            core.admit(ticket, t0 + 300 * MS, |_| {}),
            Admission::WaitUntil(t0 + 1500 * MS, Hold::Pace)
        );
        let sent = started(core.admit(ticket, t0 + 1500 * MS, |_| {})).sent;
        assert_eq!(sent.rate.get(), Some(2.0));
        assert_eq!(core.stats(t0).rate, Some(2.0));
    }

    #[test]
    fn a_gate_without_a_rate_gets_none_from_set_rate() {
        let t0 = Instant::now();
        let mut core = core(1);
        assert_eq!(core.set_rate(5.0), None);
        assert_eq!(core.stats(t0).rate, None);
        assert!(core.try_start_unheld(false, 1), "no clock read, as before");
    }

    #[test]
    fn a_new_rate_of_an_adaptive_gate_is_its_new_ceiling() {
        let t0 = Instant::now();
        let adaptive = CallRate::Adaptive(AdaptiveRate::new(10.0, 2.0, 20.0));
        let mut core: Core<()> = Core::new(settings(4, 2, Some(adaptive)));
        assert_eq!(core.set_rate(4.0), Some(4.0));
        // Successes for a minute: it cannot grow past its new ceiling.
        let mut t = t0;
        for _ in 0..240 {
            let sent = core.start_plain(1, t).unwrap().sent;
            core.succeeded(&sent, &[]);
            core.grow(t);
            t += interval(4.0);
        }
        assert_eq!(core.stats(t).rate, Some(4.0));
        // Below the old floor: the floor comes down with it.
        assert_eq!(core.set_rate(1.0), Some(1.0));
        let t = t + SEC;
        let sent = core.start_plain(1, t).unwrap().sent;
        let throttled = core.throttled(RateLimited::new(), (&sent, &[]), 1, t);
        assert!(throttled.rate_event.is_some());
        assert_eq!(core.stats(t).rate, Some(1.0), "held at the floor of 1");
    }

    #[test]
    fn intervals_of_absurd_rates_are_clamped() {
        assert_eq!(interval(1e-300), MAX_WAIT);
        assert_eq!(interval(f64::MIN_POSITIVE), MAX_WAIT);
        assert_eq!(interval(4.0), 250 * MS);
    }

    #[test]
    fn a_serial_gate_starts_no_call_while_the_last_start_is_being_cleared() {
        let t0 = Instant::now();
        let mut core: Core<()> = Core::new(Settings {
            serial: true,
            ..settings(4, 2, None)
        });
        core.start_plain(1, t0).unwrap();
        // Three slots are free, yet the fleet's store has not cleared the first start.
        assert_eq!(core.start_plain(1, t0), None);
        assert!(!core.try_start_unheld(false, 1));
        assert!(core.end_clearing());
        core.start_plain(1, t0).unwrap();
    }

    #[test]
    fn a_start_the_fleet_turned_back_goes_back_to_its_place_ahead_of_later_calls() {
        let t0 = Instant::now();
        let mut core = core(1);
        let first = core.join_plain(Class::New, 1);
        let sent = started(core.admit(first, t0, |_| {})).sent;
        let second = core.join_plain(Class::New, 1);
        core.unstart(&sent, &[]);
        core.rejoin(first, Box::new([]), (1, Draws::NONE));
        assert_eq!(core.stats(t0).queued, 2);
        assert_eq!(
            core.admit(second, t0, |_| {}),
            Admission::Wait,
            "the first is ahead"
        );
        started(core.admit(first, t0, |_| {}));
    }

    #[test]
    fn a_backoff_holds_the_calls_of_its_scope_and_the_gate_wide_one_every_call() {
        let t0 = Instant::now();
        let mut core = core(4);
        let acct: [Scope; 1] = ["acct-1".into()];
        core.back_off(Some(acct[0].clone()), t0, 200 * MS);
        assert!(core.is_held(&acct, t0));
        assert!(
            !core.is_held(&[], t0),
            "a scope's backoff holds only its calls"
        );
        core.back_off(None, t0, 100 * MS);
        assert!(core.is_held(&[], t0));
        assert!(
            !core.is_held(&[], t0 + 100 * MS),
            "the gate-wide one has ended"
        );
        assert!(core.is_held(&acct, t0 + 100 * MS));
        assert!(!core.is_held(&acct, t0 + 200 * MS));
    }
}
