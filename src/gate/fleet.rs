//! The gate's side of a fleet: the trait a store speaks (the gate owns it; `store/` implements
//! it), and the stages of a call start that the store must clear. Only a gate built with a
//! store comes here; `state.rs` applies what the store answers to the gate's state.
//!
//! What runs where: the store's answer to a call start is awaited inside the call's own
//! future; telling the fleet of a backoff, a quota, a settled cost or a new rate does not hold
//! up the call that learnt it, so the store runs each as a task of its own.

use std::fmt;
use std::num::NonZeroU64;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::adaptive::{AdaptiveRate, RateEvent};
use super::classify::Scope;
use super::core::{Core, Sent, Throttled};
use super::dimensions::{BudgetDraw, Reckoned};
use super::line::LinePlace;
use super::pace::interval;
use super::quota::{Announcement, Dimension, Quota};
use crate::time::after;
use crate::timer::Timer;

/// How many times a change to the fleet's rate is applied again when another process changed
/// it first, before this one gives up (the others' changes stand).
const SHARE_ATTEMPTS: usize = 4;

/// A rate that moved by more than this fraction since the fleet last heard of it is told.
const TELL_AFTER: f64 = 0.01;

/// The shared state of one gate, kept outside the process: what a fleet of gates on one
/// namespace shares.
///
/// Durations, not instants, cross this boundary: the store measures them on its own clock, so
/// a process whose clock is off cannot shift a backoff or a rate slot for the others.
pub(crate) trait FleetStore: fmt::Debug + Send + Sync + 'static {
    /// Asks to start one call of `scopes` that costs `cost` units, spaced `interval` (for
    /// its cost) from the fleet's previous start if the gate paces calls, and by
    /// `asked.scope_paces` from the fleet's previous start of each scope with a rate, and
    /// within the quota the server announced to the fleet. An adaptive gate passes the
    /// version of the fleet's rate it knows (`asked.known_rate`), to hear of a newer one.
    fn clear(
        &self,
        scopes: &[Scope],
        interval: Option<Duration>,
        asked: &FleetAsk,
        cost: u64,
    ) -> BoxFuture<'static, Clearance>;

    /// Tells the fleet that a call cost `more` units more (or less, if negative) than it
    /// started with, at `per_unit` between two starts for each unit of the paces it moves
    /// (the gate's if it paces calls, and each of its scopes' with a rate); its budgets,
    /// the generic quota among them, settle by [`FleetStore::settle_budgets`]. Does not wait
    /// for the answer.
    fn settle(&self, more: i64, per_unit: &PerUnit<'_>);

    /// Tells the fleet that a call which started at `sent` (on the store's clock, as it
    /// reserved the start; `None`: not known) with each of `budgets`' units (the budgets
    /// told the gate) cost `actual` of each, in turn: what it cost more is charged now, what
    /// it cost less given back to what it spent from. Does not wait for the answer.
    fn settle_budgets(&self, budgets: &[BudgetDraw], actual: &[u64], sent: Option<i64>);

    /// Tells the fleet what a server announced of one of its budgets (the generic quota
    /// among them), as this process reckons it now (`budget`): what is left of it may only
    /// go down. Does not wait for the answer: it hands back the telling, on its way, for a
    /// call to wait for (`None`: nothing to wait for).
    fn observe_budget(&self, budget: &Reckoned) -> Option<JoinHandle<()>>;

    /// Tells the fleet that calls (of `scope`, or all) must wait `length` from now; a backoff
    /// already running longer is kept. Does not wait for the answer.
    fn back_off(&self, scope: Option<&Scope>, length: Duration);

    /// Replaces the fleet's adaptive rate (`per_second`, and its whole `state`) if the fleet's
    /// is still at version `based_on`. `None` if the store did not answer.
    fn replace_rate(
        &self,
        based_on: u64,
        per_second: f64,
        state: String,
    ) -> BoxFuture<'static, Option<Replaced>>;

    /// The fleet's live gates, this one among them, as the store last heard (0 before it
    /// has).
    fn members(&self) -> u64;

    /// The gates this one shares the fleet's limits with while the store does not answer,
    /// itself among them: the members last heard, or before any were, as many as the user
    /// said to assume (0 or 1: it keeps to the whole limits).
    fn sharing(&self) -> u64 {
        self.members()
    }

    /// This process's clock and the store's, read at the store's last answer.
    fn clock(&self) -> Option<ClockPair>;

    /// Runs `task` in the background, on the store's runtime.
    fn spawn(&self, task: BoxFuture<'static, ()>);
}

/// The store's answer to "may this call start?".
#[derive(Debug)]
pub(crate) enum Clearance {
    /// Start after `wait`: a slot of the shared rate budget is reserved for then. `fleet` is
    /// the fleet's adaptive rate, if it is newer than the version the gate knows.
    Go {
        wait: Duration,
        fleet: Option<FleetRate>,
        /// The start the store reserved, on its clock, in microseconds: where the call's
        /// draws on the fleet's budgets are found again when it settles.
        at: Option<i64>,
    },
    /// A backoff holds the call for `remaining`: the gate-wide one (`None`) or that of the
    /// call's scope at this index.
    Held {
        scope: Option<usize>,
        remaining: Duration,
    },
    /// The fleet's rate of the call's scope at this index has its next start after `wait`:
    /// nothing is reserved, and the call waits for it out of line.
    Paced { scope: usize, wait: Duration },
    /// The quota the server announced to the fleet has nothing for the call before `after`
    /// (its window is spent, or the call sent to learn the next window has not brought its
    /// answer yet): ask again then.
    Later(Duration),
    /// The store did not answer in time: the in-process state decides alone.
    Unavailable,
}

/// The adaptive rate a fleet shares, at one version of it: its state as the gate wrote it,
/// with instants in microseconds of the store's clock (see [`ClockPair`]).
#[derive(Debug)]
pub(crate) struct FleetRate {
    pub(crate) version: u64,
    pub(crate) state: String,
}

/// The store's answer to "replace the fleet's rate".
#[derive(Debug)]
pub(crate) enum Replaced {
    Stored,
    /// The fleet has no rate any more (it expired): store it as the first version.
    Expired,
    /// Another process replaced it first: this is theirs.
    Stale(FleetRate),
}

/// One instant read on both clocks: this process's and the store's (in microseconds), to
/// carry instants from one to the other.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClockPair {
    pub(crate) local: Instant,
    pub(crate) store_micros: i64,
}

impl ClockPair {
    pub(crate) fn to_store(self, at: Instant) -> i64 {
        let micros = |d: Duration| i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
        if at >= self.local {
            self.store_micros.saturating_add(micros(at - self.local))
        } else {
            self.store_micros.saturating_sub(micros(self.local - at))
        }
    }

    /// The local instant of `micros` on the store's clock; one further ahead than the
    /// crate's longest wait (Redis data gone wrong) is taken as that far.
    pub(crate) fn to_local(self, micros: i64) -> Instant {
        let offset = Duration::from_micros(micros.abs_diff(self.store_micros));
        if micros >= self.store_micros {
            after(self.local, offset)
        } else {
            self.local.checked_sub(offset).unwrap_or(self.local)
        }
    }
}

/// What a call start tells the fleet's store beyond the call itself, from the gate's state
/// as the call starts.
#[derive(Debug, Default)]
pub(crate) struct FleetAsk {
    /// The version of the fleet's adaptive rate the gate knows, if it adapts its rate.
    pub(crate) known_rate: Option<u64>,
    /// The spacing each of the call's scopes keeps between its starts for the call's cost
    /// (`None`: that scope has no rate); empty when none of them has a rate.
    pub(crate) scope_paces: Box<[Option<Duration>]>,
    /// What the call spends of each budget told the gate, for the fleet to keep together
    /// (empty when the gate has none).
    pub(crate) budgets: Box<[BudgetDraw]>,
    /// The calls waiting in the gate's line behind it: the store may lease starts for them.
    pub(crate) waiting: u32,
}

/// The time each pace a settled call moves keeps between two starts for each unit: the
/// gate's, if it paces calls, and those of the call's scopes with a rate.
#[derive(Debug, Default)]
pub(crate) struct PerUnit<'a> {
    pub(crate) gate: Option<Duration>,
    pub(crate) scopes: Vec<(&'a Scope, Duration)>,
}

/// A gate's store. Cheap to clone: each call the store clears holds one.
#[derive(Debug, Clone)]
pub(crate) struct Fleet {
    store: Arc<dyn FleetStore>,
}

/// What this gate knows of the fleet's adaptive rate: kept with the gate's state, under its
/// lock.
#[derive(Debug, Default)]
pub(crate) struct KnownRate {
    /// The version of the fleet's adaptive rate this gate last heard of (0: none yet).
    pub(crate) version: u64,
    /// The adaptive rate last told to the fleet.
    pub(crate) told: f64,
}

impl Fleet {
    pub(crate) fn new(store: Arc<dyn FleetStore>) -> Self {
        Self { store }
    }

    /// The store, to tell it what the gate learnt.
    pub(crate) fn store(&self) -> &dyn FleetStore {
        &*self.store
    }

    /// Asks the store whether the call sent as `sent` (of `scopes`) may start, telling it
    /// what `asked` says.
    pub(crate) fn ask(
        &self,
        sent: &Sent,
        scopes: &[Scope],
        asked: &FleetAsk,
    ) -> BoxFuture<'static, Clearance> {
        let units = u32::try_from(sent.cost).unwrap_or(u32::MAX);
        let pace = sent
            .rate
            .get()
            .map(|rate| interval(rate).saturating_mul(units));
        self.store.clear(scopes, pace, asked, sent.cost)
    }

    /// Tells the fleet that the call sent as `sent` (of `scopes`, whose paces keep
    /// `scope_per_unit` between two starts for each unit) cost `actual` units.
    pub(crate) fn settle(
        &self,
        sent: &Sent,
        actual: u64,
        (scopes, scope_per_unit): (&[Scope], &[Option<Duration>]),
    ) {
        let more = i128::from(actual) - i128::from(sent.cost);
        let more = i64::try_from(more).unwrap_or(if more > 0 { i64::MAX } else { i64::MIN });
        if more != 0 {
            let per_unit = PerUnit {
                gate: sent.rate.get().map(interval),
                scopes: (scopes.iter().zip(scope_per_unit))
                    .filter_map(|(scope, per_unit)| Some((scope, (*per_unit)?)))
                    .collect(),
            };
            self.store.settle(more, &per_unit);
        }
    }

    /// Tells the fleet the adaptive rate `event` led to, if it moved enough since `known`
    /// told it or a throttle `taught` something, so that the others take it up; the store
    /// applies `event` to a newer fleet rate if another process changed it first.
    pub(crate) fn share_rate(
        &self,
        rate: &AdaptiveRate,
        known: &mut KnownRate,
        event: RateEvent,
        taught: bool,
    ) {
        let moved = (rate.rate() - known.told).abs() > known.told * TELL_AFTER;
        if !(taught || moved) {
            return;
        }
        known.told = rate.rate();
        let task = replace_rate(Arc::clone(&self.store), known.version, rate.clone(), event);
        self.store.spawn(Box::pin(task));
    }

    /// The fleet's rate in `fleet`, read on this process's clock within `template`'s bounds.
    fn decode(&self, fleet: &FleetRate, template: &AdaptiveRate) -> Option<AdaptiveRate> {
        let clock = self.store.clock()?;
        template.decode(&fleet.state, |micros| clock.to_local(micros))
    }

    /// Takes up the fleet's adaptive rate `rate` into `core` if it is newer than the version
    /// `known`; returns the rate calls now start at.
    pub(crate) fn adopt<W>(
        &self,
        core: &mut Core<W>,
        known: &mut KnownRate,
        rate: &FleetRate,
    ) -> Option<f64> {
        let template = core.adaptive_rate()?;
        if rate.version > known.version {
            if let Some(theirs) = self.decode(rate, template) {
                known.version = rate.version;
                known.told = theirs.rate();
                core.adopt_rate(theirs);
            }
        }
        core.adaptive_rate().map(AdaptiveRate::rate)
    }

    /// Tells the fleet what a throttle taught (`core` and `known` as they stand after it):
    /// its backoff, the quota it `announced` (the gate's, or its scope's), the rate.
    #[cold]
    #[inline(never)]
    pub(crate) fn tell_throttle<W>(
        &self,
        core: &Core<W>,
        known: &mut KnownRate,
        throttled: &Throttled,
        announced: Option<Quota>,
    ) {
        self.store
            .back_off(throttled.scope.as_ref(), throttled.length);
        if let Some(quota) = announced {
            let announcement = Announcement::new(Dimension::UNITS, quota);
            let scope = throttled.scope.as_ref().filter(|_| throttled.scopes_quota);
            // The retry that follows asks the store after this lands; the telling goes on
            // by itself.
            let reckoned = core.reckoned(scope, &announcement, Instant::now());
            drop(reckoned.and_then(|budget| self.store.observe_budget(&budget)));
        }
        if let (Some((event, taught)), Some(rate)) = (throttled.rate_event, core.adaptive_rate()) {
            self.share_rate(rate, known, event, taught);
        }
    }
}

/// Stores `rate` as the fleet's, based on its `version`; if another process stored one
/// since, applies `event` to theirs and tries again.
async fn replace_rate(
    store: Arc<dyn FleetStore>,
    version: u64,
    rate: AdaptiveRate,
    event: RateEvent,
) {
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

/// A call this process's gate let start, while the store decides.
pub(crate) struct Clearing {
    /// The fleet whose store decides.
    pub(crate) fleet: Fleet,
    /// Its place in line, taken or to take, to go back to if the fleet is backing off.
    pub(crate) place: LinePlace,
    pub(crate) sent: Sent,
    step: Step,
}

enum Step {
    /// The store is asked whether the fleet lets the call through.
    Asking(BoxFuture<'static, Clearance>),
    /// The store reserved a slot of the fleet's rate budget for this instant; the fleet's
    /// rate came with its answer if it was newer.
    Reserved(Instant, Option<FleetRate>),
    /// The fleet's announced quota has nothing for the call before this instant: it asks
    /// again then.
    Later(Instant),
}

/// What the store's side of a call start came to, for the gate's state to take in.
#[derive(Debug)]
pub(crate) enum Heard {
    /// The store let the call go at a slot it reserved, to come: the fleet counts the call
    /// from now on, and it waits for that slot.
    Granted,
    /// The call may go: the store let it (`answered`), with the fleet's rate if newer, or did
    /// not answer in time. `reserved`: it waited for a slot the store reserved, during which
    /// a backoff may have begun.
    Go {
        rate: Option<FleetRate>,
        answered: bool,
        reserved: bool,
    },
    /// A backoff of the fleet's holds the call for `remaining`: the gate-wide one (`None`) or
    /// that of its scope at this index.
    Held {
        scope: Option<usize>,
        remaining: Duration,
    },
    /// The fleet's rate of the call's scope at this index has its next start at this
    /// instant.
    Paced { scope: usize, next: Instant },
    /// The fleet's announced quota has nothing for the call before this instant.
    Later(Instant),
    /// The instant to ask again came.
    AskAgain,
}

impl Clearing {
    /// A call sent as `sent` (of `scopes`), at `place` in line (taken if it waited), while
    /// `fleet`'s store answers what `asked` tells it.
    pub(crate) fn ask(
        fleet: &Fleet,
        sent: Sent,
        place: LinePlace,
        scopes: &[Scope],
        asked: &FleetAsk,
    ) -> Self {
        let step = Step::Asking(fleet.ask(&sent, scopes, asked));
        Self {
            fleet: fleet.clone(),
            place,
            sent,
            step,
        }
    }

    /// Waits for the store's answer, or for the slot it reserved: what it came to.
    pub(crate) fn poll(&mut self, timer: &mut Timer, cx: &mut Context<'_>) -> Poll<Heard> {
        let heard = match &mut self.step {
            Step::Asking(asking) => match ready!(asking.as_mut().poll(cx)) {
                Clearance::Go { wait, fleet, at } => {
                    self.sent.fleet_at = at.and_then(|at| NonZeroU64::new(u64::try_from(at).ok()?));
                    if wait.is_zero() {
                        Heard::Go {
                            rate: fleet,
                            answered: true,
                            reserved: false,
                        }
                    } else {
                        self.step = Step::Reserved(after(Instant::now(), wait), fleet);
                        Heard::Granted
                    }
                }
                Clearance::Unavailable => Heard::Go {
                    rate: None,
                    answered: false,
                    reserved: false,
                },
                Clearance::Held { scope, remaining } => Heard::Held { scope, remaining },
                Clearance::Paced { scope, wait } => Heard::Paced {
                    scope,
                    next: after(Instant::now(), wait),
                },
                Clearance::Later(wait) => Heard::Later(after(Instant::now(), wait)),
            },
            Step::Reserved(at, rate) => {
                ready!(timer.poll_until(*at, cx));
                Heard::Go {
                    rate: rate.take(),
                    answered: true,
                    reserved: true,
                }
            }
            Step::Later(at) => {
                ready!(timer.poll_until(*at, cx));
                Heard::AskAgain
            }
        };
        Poll::Ready(heard)
    }

    /// The call waits until `at` before it asks the store again.
    pub(crate) fn wait_until(&mut self, at: Instant) {
        self.step = Step::Later(at);
    }

    /// The call (of `scopes`) asks the store again, telling it what `asked` says.
    pub(crate) fn ask_again(&mut self, scopes: &[Scope], asked: &FleetAsk) {
        self.step = Step::Asking(self.fleet.ask(&self.sent, scopes, asked));
    }

    /// Whether the store has yet to let the call go: neither the server nor the fleet's
    /// quota has counted it.
    pub(crate) fn is_unsent(&self) -> bool {
        !matches!(self.step, Step::Reserved(..))
    }
}

impl fmt::Debug for Clearing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let step = match self.step {
            Step::Asking(_) => "asking",
            Step::Reserved(..) => "reserved",
            Step::Later(_) => "later",
        };
        f.debug_struct("Clearing")
            .field("place", &self.place)
            .field("step", &step)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;

    use super::*;
    use crate::gate::options::Priority;
    use crate::time::MAX_WAIT;

    const MS: Duration = Duration::from_millis(1);

    /// A store that answers starts as its script says (then "unavailable"), and notes what
    /// the gate told it.
    #[derive(Debug, Default)]
    struct Noting {
        answers: Mutex<VecDeque<Clearance>>,
        told: Mutex<Vec<String>>,
    }

    impl Noting {
        fn answering(answers: impl IntoIterator<Item = Clearance>) -> Arc<Self> {
            Arc::new(Self {
                answers: Mutex::new(answers.into_iter().collect()),
                ..Self::default()
            })
        }

        fn note(&self, what: String) {
            self.told.lock().unwrap().push(what);
        }

        fn told(&self) -> Vec<String> {
            self.told.lock().unwrap().clone()
        }
    }

    impl FleetStore for Noting {
        fn clear(
            &self,
            _scopes: &[Scope],
            _interval: Option<Duration>,
            asked: &FleetAsk,
            _cost: u64,
        ) -> BoxFuture<'static, Clearance> {
            if !asked.scope_paces.is_empty() {
                self.note(format!("scope paces {:?}", asked.scope_paces));
            }
            let answer = self.answers.lock().unwrap().pop_front();
            Box::pin(async { answer.unwrap_or(Clearance::Unavailable) })
        }

        fn settle(&self, more: i64, _per_unit: &PerUnit<'_>) {
            self.note(format!("settle {more}"));
        }

        fn observe_budget(&self, budget: &Reckoned) -> Option<JoinHandle<()>> {
            self.note(format!("observe {budget:?}"));
            None
        }

        fn settle_budgets(&self, budgets: &[BudgetDraw], actual: &[u64], _: Option<i64>) {
            self.note(format!("settle {budgets:?} at {actual:?}"));
        }

        fn back_off(&self, scope: Option<&Scope>, length: Duration) {
            self.note(format!("back off {scope:?} {length:?}"));
        }

        fn replace_rate(&self, _: u64, _: f64, _: String) -> BoxFuture<'static, Option<Replaced>> {
            Box::pin(async { None })
        }

        fn members(&self) -> u64 {
            1
        }

        fn clock(&self) -> Option<ClockPair> {
            None
        }

        fn spawn(&self, task: BoxFuture<'static, ()>) {
            drop(task);
            self.note("rate shared".to_owned());
        }
    }

    /// A call settled beyond what an `i64` holds, either way, reaches the store as the most
    /// it can say that way; one settled at its estimate tells it nothing.
    #[test]
    fn a_settled_cost_beyond_an_i64_reaches_the_store_saturated_and_with_its_sign() {
        let store = Noting::answering([]);
        let fleet = Fleet::new(Arc::clone(&store) as _);
        fleet.settle(&Sent::untimed(0), u64::MAX, (&[], &[]));
        fleet.settle(&Sent::untimed(u64::MAX), 0, (&[], &[]));
        fleet.settle(&Sent::untimed(3), 3, (&[], &[]));
        assert_eq!(
            store.told(),
            [
                format!("settle {}", i64::MAX),
                format!("settle {}", i64::MIN)
            ]
        );
    }

    /// The fleet hears of an adaptive rate once it moved by more than `TELL_AFTER` of what it
    /// last heard, up or down, or when a throttle taught something; a smaller move, or one of
    /// exactly `TELL_AFTER`, is not news.
    #[test]
    fn a_rate_is_told_once_it_moved_more_than_the_fraction_or_a_throttle_taught_something() {
        let store = Noting::answering([]);
        let fleet = Fleet::new(Arc::clone(&store) as _);
        let event = RateEvent::Success(Instant::now());
        let told = 100.0;
        // What the fleet last heard, after this process's rate is `rate`.
        let share = |rate: f64, taught: bool| {
            let mut known = KnownRate { version: 3, told };
            fleet.share_rate(
                &AdaptiveRate::new(rate, 1.0, 1_000.0),
                &mut known,
                event,
                taught,
            );
            known.told
        };
        let slightly = told * TELL_AFTER / 2.0;
        assert_eq!(share(told + slightly, false), told);
        assert_eq!(share(told - slightly, false), told);
        let edge = told + told * TELL_AFTER;
        assert_eq!(
            edge - told,
            told * TELL_AFTER,
            "a move of exactly the fraction"
        );
        assert_eq!(share(edge, false), told);
        assert!(store.told().is_empty(), "{:?}", store.told());

        let beyond = told * TELL_AFTER * 2.0;
        assert_eq!(share(told + beyond, false), told + beyond);
        assert_eq!(share(told - beyond, false), told - beyond);
        assert_eq!(share(told, true), told);
        assert_eq!(store.told(), ["rate shared"; 3]);
    }

    /// A call's clearing, step by step: asked, told to ask again later, asked again, given a
    /// slot to come, and let go at it. Only while it waits for its slot has the store let it
    /// go; its `Debug` shows the step.
    #[tokio::test(start_paused = true)]
    async fn a_clearing_asks_again_when_told_and_counts_as_let_go_only_once_its_slot_is_reserved() {
        let store = Noting::answering([
            Clearance::Later(100 * MS),
            Clearance::Go {
                wait: 1_000 * MS,
                fleet: None,
                at: None,
            },
        ]);
        let fleet = Fleet::new(store);
        let place = LinePlace::Arriving(Priority::Bulk);
        let mut clearing =
            Clearing::ask(&fleet, Sent::untimed(1), place, &[], &FleetAsk::default());
        let mut timer = Timer::default();
        let t0 = Instant::now();
        let shows = |clearing: &Clearing, step: &str| {
            let shown = format!("{clearing:?}");
            let expected = format!("Clearing {{ place: Arriving(Bulk), step: {step:?}, .. }}");
            assert_eq!(shown, expected);
        };
        shows(&clearing, "asking");
        assert!(clearing.is_unsent());

        let heard = std::future::poll_fn(|cx| clearing.poll(&mut timer, cx)).await;
        let Heard::Later(at) = heard else {
            panic!("{heard:?}");
        };
        assert_eq!(at, t0 + 100 * MS);
        clearing.wait_until(at);
        shows(&clearing, "later");
        assert!(clearing.is_unsent());
        let heard = std::future::poll_fn(|cx| clearing.poll(&mut timer, cx)).await;
        assert!(matches!(heard, Heard::AskAgain), "{heard:?}");
        assert_eq!(Instant::now(), at);

        clearing.ask_again(&[], &FleetAsk::default());
        shows(&clearing, "asking");
        let heard = std::future::poll_fn(|cx| clearing.poll(&mut timer, cx)).await;
        assert!(matches!(heard, Heard::Granted), "{heard:?}");
        shows(&clearing, "reserved");
        assert!(!clearing.is_unsent());
        let heard = std::future::poll_fn(|cx| clearing.poll(&mut timer, cx)).await;
        assert!(
            matches!(
                heard,
                Heard::Go {
                    rate: None,
                    answered: true,
                    reserved: true
                }
            ),
            "{heard:?}"
        );
        assert_eq!(Instant::now(), at + 1_000 * MS);
    }

    #[test]
    fn instants_cross_to_the_store_clock_and_back_on_both_sides_of_the_reading() {
        let local = Instant::now() + 100_000 * MS;
        let pair = ClockPair {
            local,
            store_micros: 5_000_000,
        };
        assert_eq!(pair.to_store(local), 5_000_000);
        assert_eq!(pair.to_store(local + 1_500 * MS), 6_500_000);
        assert_eq!(pair.to_store(local - 2_000 * MS), 3_000_000);
        assert_eq!(pair.to_local(5_000_000), local);
        assert_eq!(pair.to_local(6_500_000), local + 1_500 * MS);
        assert_eq!(pair.to_local(3_000_000), local - 2_000 * MS);
    }

    #[test]
    fn absurd_store_instants_never_panic() {
        let local = Instant::now();
        let pair = ClockPair {
            local,
            store_micros: 0,
        };
        assert_eq!(pair.to_local(i64::MAX), local + MAX_WAIT);
        // Far back: in the past, however far this platform's clock reaches.
        assert!(pair.to_local(i64::MIN) <= local);
        assert_eq!(pair.to_store(local + MAX_WAIT), MAX_WAIT.as_micros() as i64);
    }
}
