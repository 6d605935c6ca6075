//! The gate's shared state and its admission rule, behind one mutex held only for bookkeeping
//! (never across an `.await` or a user callback).

use std::collections::{BTreeMap, HashMap};
use std::task::Waker;
use std::time::Duration;

use tokio::time::Instant;

use super::adaptive::AdaptiveRate;
use super::backoff::BackoffSchedule;
use super::{GateStats, Scope};
use crate::rng::SplitMix64;
use crate::store::FleetRate;

/// A waiter's place in line: retries (class 0) before new calls (class 1), each in arrival order.
pub(crate) type Ticket = (u8, u64);
pub(crate) const RETRY: u8 = 0;
pub(crate) const NEW: u8 = 1;

#[derive(Debug)]
pub(crate) struct Waiter {
    scopes: Box<[Scope]>,
    waker: Option<Waker>,
}

/// The call rate: fixed, or adaptive.
#[derive(Debug)]
pub(crate) enum Pace {
    Fixed(f64),
    Adaptive(AdaptiveRate),
}

impl Pace {
    pub(crate) fn rate(&self) -> f64 {
        match self {
            Pace::Fixed(rate) => *rate,
            Pace::Adaptive(adaptive) => adaptive.rate(),
        }
    }
}

#[derive(Debug)]
pub(crate) struct State {
    pub(crate) max_in_flight: usize,
    pub(crate) in_flight: usize,
    waiters: BTreeMap<Ticket, Waiter>,
    next_seq: u64,
    /// When each backoff ends: the gate-wide one under `None`.
    backoffs: HashMap<Option<Scope>, Instant>,
    pub(crate) pace: Option<Pace>,
    last_start: Option<Instant>,
    pub(crate) schedule: BackoffSchedule,
    pub(crate) rng: SplitMix64,
    pub(crate) stats: GateStats,
    /// The gate-wide backoff end last announced, so that its end is announced once.
    announced_backoff: Option<Instant>,
    /// Whether a started call must be cleared by the store before the next may start.
    serial_clearing: bool,
    /// A started call is being cleared by the store.
    clearing: bool,
    /// The version of the fleet's adaptive rate this gate last heard of (0: none yet).
    pub(crate) fleet_version: u64,
    /// The adaptive rate last told to the fleet.
    pub(crate) shared_rate: f64,
}

/// Who began a backoff, which decides only how loudly the gate says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BackoffOrigin {
    /// A throttle of this gate's own call.
    Throttle,
    /// Another gate of the fleet, as the store told.
    Fleet,
}

/// What a waiter must do after asking to start.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Start now: a slot is taken.
    Start,
    /// Wait to be woken (by a finished call or a waiter leaving the line).
    Wait,
    /// Wait until this instant, then ask again.
    WaitUntil(Instant),
}

impl State {
    pub(crate) fn new(
        max_in_flight: usize,
        pace: Option<Pace>,
        schedule: BackoffSchedule,
        rng: SplitMix64,
        serial_clearing: bool,
    ) -> Self {
        Self {
            max_in_flight,
            in_flight: 0,
            waiters: BTreeMap::new(),
            next_seq: 0,
            backoffs: HashMap::new(),
            pace,
            last_start: None,
            schedule,
            rng,
            stats: GateStats::default(),
            announced_backoff: None,
            serial_clearing,
            clearing: false,
            fleet_version: 0,
            shared_rate: 0.0,
        }
    }

    pub(crate) fn enqueue(&mut self, class: u8, scopes: Box<[Scope]>) -> Ticket {
        let ticket = (class, self.next_seq);
        self.next_seq += 1;
        self.requeue(ticket, scopes);
        ticket
    }

    /// Puts a waiter back in line at the place its ticket gives it.
    pub(crate) fn requeue(&mut self, ticket: Ticket, scopes: Box<[Scope]>) {
        self.waiters.insert(
            ticket,
            Waiter {
                scopes,
                waker: None,
            },
        );
    }

    /// Leaves the line without starting (the waiter was dropped); wakes whoever is next now.
    pub(crate) fn leave(&mut self, ticket: Ticket, now: Instant) {
        if self.waiters.remove(&ticket).is_some() {
            self.wake_next(now);
        }
    }

    /// The end of the latest backoff among the gate-wide one and `scopes`', if any runs at `now`.
    fn blocked_until(&self, scopes: &[Scope], now: Instant) -> Option<Instant> {
        let gate_wide = self.backoffs.get(&None).copied();
        let scoped = scopes
            .iter()
            .filter_map(|scope| self.backoffs.get(&Some(scope.clone())).copied());
        gate_wide
            .into_iter()
            .chain(scoped)
            .filter(|&end| end > now)
            .max()
    }

    fn scope_blocked_until(&self, scopes: &[Scope], now: Instant) -> Option<Instant> {
        scopes
            .iter()
            .filter_map(|scope| self.backoffs.get(&Some(scope.clone())).copied())
            .filter(|&end| end > now)
            .max()
    }

    /// The first waiter in line that no scope backoff of its own holds back.
    fn next_in_line(&self, now: Instant) -> Option<Ticket> {
        self.waiters
            .iter()
            .find(|(_, waiter)| self.scope_blocked_until(&waiter.scopes, now).is_none())
            .map(|(ticket, _)| *ticket)
    }

    fn wake_next(&mut self, now: Instant) {
        if let Some(ticket) = self.next_in_line(now) {
            if let Some(waker) = self.waiters.get_mut(&ticket).and_then(|w| w.waker.take()) {
                waker.wake();
            }
        }
    }

    /// When the pace allows the next start, if it does not allow one at `now`.
    fn paced_until(&self, now: Instant) -> Option<Instant> {
        let (pace, last) = (self.pace.as_ref()?, self.last_start?);
        let next = last + Duration::from_secs_f64(1.0 / pace.rate());
        (next > now).then_some(next)
    }

    /// Can a call with no place in line start at once? The uncontended fast path.
    pub(crate) fn try_start_at_once(
        &mut self,
        scopes: &[Scope],
        now: impl Fn() -> Instant,
    ) -> bool {
        if !self.waiters.is_empty() || self.in_flight >= self.max_in_flight || self.clearing {
            return false;
        }
        if self.backoffs.is_empty() && self.pace.is_none() {
            self.start(None);
            return true;
        }
        let now = now();
        if self.blocked_until(scopes, now).is_some() || self.paced_until(now).is_some() {
            return false;
        }
        self.start(Some(now));
        true
    }

    /// Asks for the waiter holding `ticket` to start at `now`.
    pub(crate) fn admit(&mut self, ticket: Ticket, now: Instant, waker: &Waker) -> Admission {
        let waiter = self
            .waiters
            .get(&ticket)
            .expect("a waiter keeps its ticket until it leaves");
        if let Some(end) = self.scope_blocked_until(&waiter.scopes, now) {
            // Held back by a scope of its own: it waits on its own timer, out of the line.
            return Admission::WaitUntil(end);
        }
        if self.next_in_line(now) != Some(ticket)
            || self.in_flight >= self.max_in_flight
            || self.clearing
        {
            self.set_waker(ticket, waker);
            return Admission::Wait;
        }
        let held = [self.blocked_until(&[], now), self.paced_until(now)]
            .into_iter()
            .flatten()
            .max();
        if let Some(until) = held {
            self.set_waker(ticket, waker);
            return Admission::WaitUntil(until);
        }
        self.waiters.remove(&ticket);
        self.start(Some(now));
        // The next in line may be able to start too, or must arm the pacing timer.
        self.wake_next(now);
        Admission::Start
    }

    fn set_waker(&mut self, ticket: Ticket, waker: &Waker) {
        let waiter = self
            .waiters
            .get_mut(&ticket)
            .expect("a waiter keeps its ticket until it leaves");
        match &mut waiter.waker {
            Some(old) if old.will_wake(waker) => {}
            slot => *slot = Some(waker.clone()),
        }
    }

    fn start(&mut self, now: Option<Instant>) {
        self.in_flight += 1;
        self.stats.calls += 1;
        self.clearing = self.serial_clearing;
        if let Some(now) = now {
            self.last_start = Some(now);
            self.announce_backoff_end(now);
        }
    }

    fn announce_backoff_end(&mut self, now: Instant) {
        if let Some(end) = self.announced_backoff.filter(|&end| end <= now) {
            self.announced_backoff = None;
            tracing::info!(target: "paceline::gate", ended_ms_ago = (now - end).as_millis() as u64, "backoff ended; calls resume");
        }
        self.backoffs.retain(|_, end| *end > now);
    }

    /// The store cleared (or turned back) the call being cleared: the next may start.
    pub(crate) fn end_clearing(&mut self, now: Instant) {
        if std::mem::take(&mut self.clearing) {
            self.wake_next(now);
        }
    }

    /// A started call was turned back before it went out: its slot is free again and it does
    /// not count as a call.
    pub(crate) fn unstart(&mut self, now: Instant) {
        self.stats.calls -= 1;
        self.release(|| now);
    }

    /// A call finished: its slot is free again.
    pub(crate) fn release(&mut self, now: impl Fn() -> Instant) {
        self.in_flight -= 1;
        if !self.waiters.is_empty() {
            self.wake_next(now());
        }
    }

    /// Starts or extends a backoff until `end` (never shortens one), gate-wide or for `scope`,
    /// begun by `origin`.
    pub(crate) fn back_off(
        &mut self,
        scope: Option<Scope>,
        end: Instant,
        now: Instant,
        origin: BackoffOrigin,
    ) {
        let slot = self.backoffs.entry(scope.clone()).or_insert(end);
        *slot = (*slot).max(end);
        let end = *slot;
        let backoff_ms = (end - now).as_millis() as u64;
        // A gate-wide backoff is announced once per extension, however many throttles say so.
        let extended = scope.is_none() && self.announced_backoff.is_none_or(|old| end > old);
        if extended {
            self.announced_backoff = Some(end);
        }
        match (origin, &scope) {
            (BackoffOrigin::Fleet, _) => tracing::debug!(
                target: "paceline::gate",
                scope = scope.as_ref().map(Scope::as_str),
                backoff_ms,
                "the fleet is backing off: calls wait"
            ),
            (BackoffOrigin::Throttle, None) if extended => tracing::warn!(
                target: "paceline::gate",
                backoff_ms,
                "rate-limited: every call through the gate waits"
            ),
            (BackoffOrigin::Throttle, None) => {}
            (BackoffOrigin::Throttle, Some(scope)) => tracing::warn!(
                target: "paceline::gate",
                scope = scope.as_str(),
                backoff_ms,
                "rate-limited: calls in this scope wait"
            ),
        }
        // The one next in line may now be held back by its scope: let the next one drive.
        self.wake_next(now);
    }

    /// Takes up the fleet's adaptive rate, if it is newer than the one this gate has.
    pub(crate) fn adopt_fleet_rate(&mut self, fleet: FleetRate) {
        if fleet.version > self.fleet_version {
            self.fleet_version = fleet.version;
            self.shared_rate = fleet.rate.rate();
            self.pace = Some(Pace::Adaptive(fleet.rate));
        }
    }

    /// Whether a backoff (gate-wide or of `scopes`) holds calls back at `now`.
    pub(crate) fn is_held(&self, scopes: &[Scope], now: Instant) -> bool {
        self.blocked_until(scopes, now).is_some()
    }

    /// The end of the gate-wide backoff, if one is running at `now`.
    pub(crate) fn backoff_end(&self, now: Instant) -> Option<Instant> {
        self.backoffs.get(&None).copied().filter(|&end| end > now)
    }

    pub(crate) fn queued(&self) -> usize {
        self.waiters.len()
    }
}
