//! Limits of each scope under the gate's own (a rate, an in-flight limit and budgets of any
//! dimension per account, tenant or model), and what the gate keeps of each scope while it
//! matters: its calls in flight, its last start, what its budgets hold, the waiters that
//! wait for one of its slots.
//!
//! A scope's state is made when its first call starts and forgotten once it is idle (nothing
//! in flight, its rate's next start due): idle scopes are swept out whenever the table has
//! doubled since the last sweep, so memory follows the scopes in use, not every scope seen,
//! and a scope used again after it was forgotten starts afresh.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::adaptive::AdaptiveRate;
use super::budget::Spend;
use super::classify::Scope;
use super::dimensions::{BudgetDraw, Cost, Dimensions, Draws, Reckoned};
use super::line::Ticket;
use super::pace::{CallRate, Pace, Seen};
use super::quota::Announcement;
use crate::Budget;
use crate::error::{ConfigError, or_panic};

/// The limits of one scope (an account, a tenant, a model), under the gate's own: a call of
/// that scope starts only when it fits both. Given to every scope alike by
/// [`GateBuilder::per_scope`](crate::GateBuilder::per_scope), to each by a function with
/// [`GateBuilder::per_scope_with`](crate::GateBuilder::per_scope_with), and changed while the
/// gate runs by [`Gate::set_scope_limits`](crate::Gate::set_scope_limits).
///
/// A call's scopes are those its options name ([`CallOptions::scopes`](crate::CallOptions::scopes),
/// [`Gate::call_in`](crate::Gate::call_in)); each of them that has limits holds the call to
/// them. No limit is set until one is asked for: `ScopeLimits::new()` holds nothing back.
///
/// A gate with a store (the `redis` feature's `RedisStore`) keeps each scope's rate across
/// its fleet, as it keeps the gate's: the starts of a scope's calls from every process stay
/// within it together; so are the budgets a server announces for a scope
/// ([`Gate::observe_all_in`](crate::Gate::observe_all_in)), as the gate's are. Its in-flight
/// limit and its [budgets](Self::budget) told here stay each process's own.
///
/// # Examples
///
/// ```
/// use paceline::ScopeLimits;
///
/// // Each account: 5 calls a second, at most 2 at once.
/// let per_account = ScopeLimits::new().rate(5.0).max_in_flight(2);
/// assert_ne!(per_account, ScopeLimits::new());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ScopeLimits {
    rate: Option<f64>,
    /// The floor and ceiling of an adaptive rate.
    adaptive: Option<(f64, f64)>,
    max_in_flight: Option<usize>,
    /// Its share of turns in the line.
    weight: u32,
    /// Its budgets of any dimension, shared by the scopes given these limits (no copy each).
    budgets: Option<Arc<[Budget]>>,
}

impl Default for ScopeLimits {
    fn default() -> Self {
        Self::new()
    }
}

impl ScopeLimits {
    /// No limit: the scope's calls are held by the gate's limits alone.
    pub const fn new() -> Self {
        Self {
            rate: None,
            adaptive: None,
            max_in_flight: None,
            weight: 1,
            budgets: None,
        }
    }

    /// Starts of the scope's calls at least `1 / per_second` apart, for each unit the start
    /// before spent (as [`GateBuilder::rate`](crate::GateBuilder::rate) spaces the gate's).
    ///
    /// # Panics
    ///
    /// If `per_second` is not a positive, finite number. A rate read from configuration, or
    /// from a server, goes through [`try_rate`](Self::try_rate) instead, which answers with
    /// an error.
    #[track_caller]
    pub fn rate(self, per_second: f64) -> Self {
        or_panic(self.try_rate(per_second))
    }

    /// [`rate`](Self::rate), for a rate that may not work: one read from configuration, or
    /// from a server while the gate runs (a tenant's new plan for
    /// [`Gate::set_scope_limits`](crate::Gate::set_scope_limits)).
    ///
    /// # Errors
    ///
    /// [`ConfigError::InvalidScopeRate`] (`which` is `"per_second"`) if `per_second` is not
    /// a positive, finite number.
    ///
    /// # Examples
    ///
    /// ```
    /// use paceline::{ConfigError, Gate, RateLimited, ScopeLimits};
    ///
    /// let gate = Gate::builder(|_: &()| Some(RateLimited::new()))
    ///     .per_scope(ScopeLimits::new().rate(5.0))
    ///     .build()
    ///     .unwrap();
    /// // A tenant's new plan, as its billing service tells it.
    /// let set_plan = |per_second: f64| -> Result<(), ConfigError> {
    ///     gate.set_scope_limits("tenant-7", ScopeLimits::new().try_rate(per_second)?)
    /// };
    /// assert_eq!(set_plan(20.0), Ok(()));
    /// let refused = set_plan(f64::NAN).unwrap_err();
    /// assert!(refused.to_string().contains("`per_second`"), "{refused}");
    /// ```
    pub fn try_rate(mut self, per_second: f64) -> Result<Self, ConfigError> {
        self.rate = Some(scope_rate("per_second", per_second)?);
        Ok(self)
    }

    /// Finds the scope's rate between `floor` and `ceiling` calls a second, as
    /// [`GateBuilder::adaptive`](crate::GateBuilder::adaptive) finds the gate's: cut by a
    /// throttle scoped to this scope ([`RateLimited::scope`](crate::RateLimited::scope)),
    /// grown by its calls' successes. It starts at [`rate`](Self::rate) if one is given, else
    /// at `ceiling`. Each scope finds its own: a throttle of one account cuts that account's
    /// rate, not another's nor the gate's.
    ///
    /// # Panics
    ///
    /// If `floor` or `ceiling` is not a positive, finite number, or `floor` is above
    /// `ceiling`. Rates read from configuration go through
    /// [`try_adaptive`](Self::try_adaptive) instead, which answers with an error.
    ///
    /// # Examples
    ///
    /// ```
    /// use paceline::ScopeLimits;
    ///
    /// // Each account's limit is unknown: somewhere between 1 and 50 calls a second.
    /// let per_account = ScopeLimits::new().rate(10.0).adaptive(1.0, 50.0);
    /// # drop(per_account);
    /// ```
    #[track_caller]
    pub fn adaptive(self, floor: f64, ceiling: f64) -> Self {
        or_panic(self.try_adaptive(floor, ceiling))
    }

    /// [`adaptive`](Self::adaptive), for rates that may not work (read from configuration,
    /// or from a server while the gate runs).
    ///
    /// # Errors
    ///
    /// [`ConfigError::InvalidScopeRate`] (`which` is `"floor"` or `"ceiling"`) if a rate is
    /// not a positive, finite number; [`ConfigError::ScopeFloorAboveCeiling`] if `floor` is
    /// above `ceiling`.
    ///
    /// # Examples
    ///
    /// ```
    /// use paceline::{ConfigError, ScopeLimits};
    ///
    /// let upside_down = ScopeLimits::new().try_adaptive(50.0, 1.0);
    /// assert_eq!(
    ///     upside_down,
    ///     Err(ConfigError::ScopeFloorAboveCeiling { floor: 50.0, ceiling: 1.0 })
    /// );
    /// assert!(ScopeLimits::new().try_adaptive(1.0, 50.0).is_ok());
    /// ```
    pub fn try_adaptive(mut self, floor: f64, ceiling: f64) -> Result<Self, ConfigError> {
        let floor = scope_rate("floor", floor)?;
        let ceiling = scope_rate("ceiling", ceiling)?;
        if floor > ceiling {
            return Err(ConfigError::ScopeFloorAboveCeiling { floor, ceiling });
        }
        self.adaptive = Some((floor, ceiling));
        Ok(self)
    }

    /// The rate the scope starts at, if it has one.
    fn call_rate(&self) -> Option<CallRate> {
        match self.adaptive {
            Some((floor, ceiling)) => {
                let start = self.rate.unwrap_or(ceiling);
                Some(CallRate::Adaptive(AdaptiveRate::new(start, floor, ceiling)))
            }
            None => self.rate.map(CallRate::Fixed),
        }
    }

    /// At most `n` of the scope's calls in flight at once.
    ///
    /// # Panics
    ///
    /// If `n` is zero: no call of the scope could ever start. A limit read from
    /// configuration goes through [`try_max_in_flight`](Self::try_max_in_flight) instead,
    /// which answers with an error.
    #[track_caller]
    pub fn max_in_flight(self, n: usize) -> Self {
        or_panic(self.try_max_in_flight(n))
    }

    /// [`max_in_flight`](Self::max_in_flight), for a limit that may not work (read from
    /// configuration, or from a server while the gate runs).
    ///
    /// # Errors
    ///
    /// [`ConfigError::ZeroScopeInFlight`] if `n` is zero.
    ///
    /// # Examples
    ///
    /// ```
    /// use paceline::{ConfigError, ScopeLimits};
    ///
    /// assert_eq!(ScopeLimits::new().try_max_in_flight(0), Err(ConfigError::ZeroScopeInFlight));
    /// assert_eq!(
    ///     ScopeLimits::new().try_max_in_flight(2),
    ///     Ok(ScopeLimits::new().max_in_flight(2))
    /// );
    /// ```
    pub fn try_max_in_flight(mut self, n: usize) -> Result<Self, ConfigError> {
        if n == 0 {
            return Err(ConfigError::ZeroScopeInFlight);
        }
        self.max_in_flight = Some(n);
        Ok(self)
    }

    /// The scope's share of turns in the gate's line, against other scopes' (1 unless set):
    /// while calls of several scopes wait, a scope of weight 3 has three times the cost
    /// started of one of weight 1. Turns go by a call's first scope (see
    /// [`GateBuilder::per_scope`](crate::GateBuilder::per_scope)); within a scope, calls
    /// keep their order. A weight changed by
    /// [`Gate::set_scope_limits`](crate::Gate::set_scope_limits) counts from the scope's
    /// next call to join the line.
    ///
    /// # Panics
    ///
    /// If `weight` is 0 or above [`ScopeLimits::MAX_WEIGHT`]. A weight read from
    /// configuration goes through [`try_weight`](Self::try_weight) instead, which answers
    /// with an error.
    ///
    /// # Examples
    ///
    /// ```
    /// use paceline::ScopeLimits;
    ///
    /// // A paying tenant's calls get twice the turns of a free one's.
    /// let paying = ScopeLimits::new().rate(10.0).weight(2);
    /// # drop(paying);
    /// ```
    #[track_caller]
    pub fn weight(self, weight: u32) -> Self {
        or_panic(self.try_weight(weight))
    }

    /// [`weight`](Self::weight), for a weight that may not work (read from configuration,
    /// or from a server while the gate runs).
    ///
    /// # Errors
    ///
    /// [`ConfigError::InvalidWeight`] if `weight` is 0 or above [`ScopeLimits::MAX_WEIGHT`].
    ///
    /// # Examples
    ///
    /// ```
    /// use paceline::{ConfigError, ScopeLimits};
    ///
    /// let refused = ScopeLimits::new().try_weight(5_000).unwrap_err();
    /// assert_eq!(refused, ConfigError::InvalidWeight { weight: 5_000 });
    /// assert_eq!(refused.to_string(), "a scope's `weight` must be from 1 to 1024 (got 5000)");
    /// ```
    pub fn try_weight(mut self, weight: u32) -> Result<Self, ConfigError> {
        if !(1..=Self::MAX_WEIGHT).contains(&weight) {
            return Err(ConfigError::InvalidWeight { weight });
        }
        self.weight = weight;
        Ok(self)
    }

    /// At most `budget`'s limit of its dimension per its window, for the scope's calls:
    /// each scope given these limits keeps a budget of its own (each tenant its tokens a
    /// minute), as [`GateBuilder::budget`](crate::GateBuilder::budget) keeps the gate's, and
    /// a call of the scope starts only when it has room as well as the gate's. Called again,
    /// the scope has each budget. The budgets a server announces for a scope
    /// ([`Gate::observe_all_in`](crate::Gate::observe_all_in)) hold its calls too.
    ///
    /// A scope's budgets told here are each process's own, as its in-flight limit is: a
    /// fleet of gates on one store does not share them (it shares those a server announces
    /// for the scope).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use paceline::{Budget, CallOptions, Dimension, Gate, RateLimited, ScopeLimits};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// // Each tenant may spend 10,000 tokens a minute.
    /// let tenant = ScopeLimits::new().budget(Budget::per_minute(Dimension::TOKENS, 10_000));
    /// let gate = Gate::builder(|_: &()| Some(RateLimited::new())).per_scope(tenant).build().unwrap();
    /// let start = tokio::time::Instant::now();
    /// let prompt = |tenant: &str| CallOptions::new().scopes([tenant]).cost_in(Dimension::TOKENS, 6_000);
    /// for tenant in ["a", "b", "a"] {
    ///     gate.call_with(prompt(tenant), || async { Ok::<_, ()>(()) }).await.unwrap();
    /// }
    /// // Tenant b's prompt went at once beside a's; a's second waited a minute for its own.
    /// assert_eq!(start.elapsed(), Duration::from_secs(60));
    /// # }
    /// ```
    pub fn budget(mut self, budget: Budget) -> Self {
        let mut budgets = self.budgets.as_deref().unwrap_or_default().to_vec();
        budgets.push(budget);
        self.budgets = Some(budgets.into());
        self
    }

    /// The largest [weight](Self::weight) a scope may have.
    pub const MAX_WEIGHT: u32 = 1024;

    /// The scope's share of turns.
    pub(crate) fn share(&self) -> u32 {
        self.weight
    }
}

/// `value` as a scope's rate argument `which`, if it is a positive, finite number of calls
/// per second.
fn scope_rate(which: &'static str, value: f64) -> Result<f64, ConfigError> {
    if value.is_finite() && value > 0.0 {
        Ok(value)
    } else {
        Err(ConfigError::InvalidScopeRate { which, value })
    }
}

/// Which limits each scope has.
pub(crate) enum Rule {
    /// The same for every scope.
    Every(ScopeLimits),
    /// As the user's function says, asked when a scope's state is made.
    By(Box<dyn Fn(&Scope) -> ScopeLimits + Send + Sync>),
}

impl Rule {
    fn limits_of(&self, scope: &Scope) -> ScopeLimits {
        match self {
            Rule::Every(limits) => limits.clone(),
            Rule::By(limits_of) => limits_of(scope),
        }
    }
}

impl fmt::Debug for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rule::Every(limits) => f.debug_tuple("Every").field(limits).finish(),
            Rule::By(_) => f.write_str("By(..)"),
        }
    }
}

/// What the gate keeps of one scope while it matters.
#[derive(Debug)]
struct Kept {
    max_in_flight: Option<usize>,
    pace: Pace,
    in_flight: usize,
    /// The units of its calls in flight.
    in_flight_cost: u64,
    /// Its budgets of every dimension: told ([`ScopeLimits::budget`]) and announced
    /// ([`Gate::observe_all_in`](crate::Gate::observe_all_in)), the scope's announced quota
    /// among them as its budget of [`Dimension::UNITS`](crate::Dimension::UNITS).
    dims: Dimensions,
    /// Waiters stepped out of line until one of the scope's calls in flight ends (or the
    /// server announces its quota).
    waiting_for_slot: Vec<Ticket>,
    /// The fleet's next start of the scope, as the fleet's store said when it turned a call
    /// of the scope back: none of this process's starts before it.
    fleet_next: Option<Instant>,
    /// Its share of turns in the line.
    weight: u32,
}

impl Kept {
    fn new(limits: &ScopeLimits, (quota_reserve, fleet_quota): (u64, bool)) -> Self {
        let budgets = limits.budgets.as_deref().unwrap_or_default();
        Self {
            max_in_flight: limits.max_in_flight,
            pace: Pace::new(limits.call_rate()),
            in_flight: 0,
            in_flight_cost: 0,
            dims: Dimensions::new(budgets, quota_reserve).with_fleet_quota(fleet_quota),
            waiting_for_slot: Vec::new(),
            fleet_next: None,
            weight: limits.share(),
        }
    }

    fn is_full(&self) -> bool {
        self.max_in_flight.is_some_and(|max| self.in_flight >= max)
    }

    /// Whether the scope's state is as a new one's would be at `now`.
    fn is_idle(&self, now: Instant) -> bool {
        self.in_flight == 0 && self.paced_until(now).is_none() && self.dims.is_idle(now)
    }

    /// When the scope's rate, or the fleet's, allows its next start, if not at `now`.
    fn paced_until(&self, now: Instant) -> Option<Instant> {
        let fleet_next = self.fleet_next.filter(|&next| next > now);
        self.pace.until(now).max(fleet_next)
    }
}

/// The scopes' limits, and the state of each scope in use.
#[derive(Debug, Default)]
pub(crate) struct Scopes {
    /// `None`: the gate has no limits per scope, and keeps nothing of its scopes here.
    rule: Option<Rule>,
    /// Limits set while the gate runs, each kept until set again.
    set: HashMap<Scope, ScopeLimits>,
    kept: HashMap<Scope, Kept>,
    /// How many scopes the last sweep kept: the next sweeps when twice as many are.
    kept_after_sweep: usize,
    /// Units of each quota announced for a scope left unspent, as of the gate's.
    quota_reserve: u64,
    /// Whether a store keeps each scope's generic quota for the fleet, as it keeps the
    /// gate's (see [`Dimensions::with_fleet_quota`]).
    fleet_quota: bool,
}

/// The fewest scopes kept before idle ones are swept out.
const SWEEP_FROM: usize = 1024;

impl Scopes {
    pub(crate) fn new(rule: Option<Rule>, quota_reserve: u64) -> Self {
        Self {
            rule,
            quota_reserve,
            ..Self::default()
        }
    }

    /// Each scope's generic quota is the fleet's (see [`Scopes::fleet_quota`]'s field).
    pub(crate) fn with_fleet_quota(mut self, fleet_quota: bool) -> Self {
        self.fleet_quota = fleet_quota;
        self
    }

    /// The state of `scope`, made as a new one's (with the limits set for it, else the
    /// rule's) if the gate keeps none; `None` for a gate without limits per scope.
    fn kept_or_new(&mut self, scope: &Scope) -> Option<&mut Kept> {
        let rule = self.rule.as_ref()?;
        let kept = self.kept.entry(scope.clone()).or_insert_with(|| {
            let limits = match self.set.get(scope) {
                Some(limits) => limits.clone(),
                None => rule.limits_of(scope),
            };
            Kept::new(&limits, (self.quota_reserve, self.fleet_quota))
        });
        Some(kept)
    }

    /// Whether the gate has limits per scope: then it keeps each scope's calls in flight.
    #[inline]
    pub(crate) fn has_limits(&self) -> bool {
        self.rule.is_some()
    }

    /// What holds a call of `scope` that costs `cost` units back at `now`, if anything:
    /// `Some(None)` until one of its calls ends (its slots are all taken, or its announced
    /// quota waits for the answer of the call sent to learn its next window); `Some(Some(until))`
    /// its rate or its announced quota, until then.
    pub(crate) fn hold(
        &self,
        scope: &Scope,
        (cost, draws): (u64, &Draws),
        now: Instant,
    ) -> Option<Option<Instant>> {
        let kept = self.kept.get(scope)?;
        if kept.is_full() {
            return Some(None);
        }
        let until = kept.paced_until(now);
        match kept.dims.allows(now, cost, draws) {
            Spend::Now => until.map(Some),
            Spend::NotBefore(at) => Some(until.max(Some(at))),
            Spend::AwaitAnswer => Some(None),
        }
    }

    /// The earliest the rates, announced quotas and budgets of `scopes` let a call of
    /// `cost` units with `draws` start, from `now`.
    pub(crate) fn earliest(
        &self,
        scopes: &[Scope],
        (cost, draws): (u64, &Draws),
        now: Instant,
    ) -> Instant {
        scopes
            .iter()
            .filter_map(|scope| self.kept.get(scope))
            .map(|kept| {
                let paced = kept.paced_until(now).unwrap_or(now);
                paced.max(kept.dims.earliest(now, cost, draws))
            })
            .fold(now, Instant::max)
    }

    /// A call of `scopes` that costs `cost` units started at `now`, counting `weight` times
    /// against each scope's rate, which a fleet shares (see [`Core`](super::core::Core)'s
    /// `fleet_weight`); a scope's budgets count it once: those it was told are the
    /// process's own, and while the fleet's store does not answer, those announced for it
    /// go on as this process's reading of them, which takes the others' spending as
    /// others'.
    pub(crate) fn started(
        &mut self,
        scopes: &[Scope],
        now: Instant,
        (cost, draws): (u64, &Draws),
        weight: u64,
    ) {
        if !self.has_limits() {
            return;
        }
        if self.kept.len() >= SWEEP_FROM.max(2 * self.kept_after_sweep) {
            self.kept.retain(|_, kept| !kept.is_idle(now));
            self.kept_after_sweep = self.kept.len();
        }
        for scope in scopes {
            let Some(kept) = self.kept_or_new(scope) else {
                return;
            };
            kept.in_flight += 1;
            kept.in_flight_cost += cost;
            kept.pace.started(now, cost.saturating_mul(weight));
            kept.dims.grow_reserve(cost);
            kept.dims.started_as(now, (cost, draws), 1);
        }
    }

    /// A call of `scopes` that went out at `at` spending `cost` units ended (or gave back
    /// its slot): `freed` is given each waiter that waited for one of these scopes' calls to
    /// end, if its scope has a slot now (they ask again).
    pub(crate) fn ended(
        &mut self,
        scopes: &[Scope],
        (at, cost, draws): (Option<Instant>, u64, &Draws),
        mut freed: impl FnMut(Ticket),
    ) {
        if self.rule.is_none() {
            return;
        }
        for scope in scopes {
            let Some(kept) = self.kept.get_mut(scope) else {
                continue;
            };
            kept.in_flight -= 1;
            kept.in_flight_cost -= cost;
            kept.dims.ended(at, draws);
            if !kept.is_full() {
                kept.waiting_for_slot.drain(..).for_each(&mut freed);
            }
        }
    }

    /// The server announced `announcement` for `scope` at `now`, in the answer to a call
    /// of the scope started at `dated` (if known) and still in flight, `counted` of whose
    /// units it counted: the scope's budget of that dimension and policy takes it in as the
    /// gate's take theirs ([`Dimensions::observe`]), the scope's other calls in flight taken
    /// as not counted. `freed` is given each waiter that waited for the scope's calls to
    /// end, to ask again. Nothing for a gate without limits per scope.
    pub(crate) fn observe_dims(
        &mut self,
        scope: &Scope,
        (announcement, (dated, counted)): (&Announcement, (Option<Instant>, u64)),
        now: Instant,
        freed: impl FnMut(Ticket),
    ) {
        let Some(kept) = self.kept_or_new(scope) else {
            return;
        };
        let units = kept.in_flight_cost.saturating_sub(counted);
        let requests = (kept.in_flight as u64).saturating_sub(1);
        kept.dims
            .observe(announcement, (dated, units, requests), now);
        kept.waiting_for_slot.drain(..).for_each(freed);
    }

    /// A call of `scopes` of `units` with `draws`, started at `sent`, ended at `now` having
    /// cost `actual`: each scope's budgets settle it (see [`Dimensions::settle`]).
    pub(crate) fn settle_dims(
        &mut self,
        scopes: &[Scope],
        (sent, now): (Instant, Instant),
        (units, draws): (u64, &Draws),
        actual: &Cost,
    ) {
        for scope in scopes {
            if let Some(kept) = self.kept.get_mut(scope) {
                kept.dims.settle((sent, now), (units, draws), actual);
            }
        }
    }

    /// The server refused a call of `scopes` of `units` with `draws`, started at `sent`, at
    /// `now`: each scope's announced budgets take it as never spent.
    pub(crate) fn refused(
        &mut self,
        scopes: &[Scope],
        (sent, now): (Instant, Instant),
        (units, draws): (u64, &Draws),
    ) {
        for scope in scopes {
            if let Some(kept) = self.kept.get_mut(scope) {
                kept.dims.refused((sent, now), units, draws);
            }
        }
    }

    /// A call of `scopes` that started at `at` with `cost` units turned out to cost
    /// `actual`: each scope's rate settles it as the gate's does.
    pub(crate) fn settle(&mut self, scopes: &[Scope], at: Option<Instant>, cost: u64, actual: u64) {
        for scope in scopes {
            if let Some(kept) = self.kept.get_mut(scope) {
                kept.pace.settle(at, cost, actual);
            }
        }
    }

    /// A call sent at `sent_at` was throttled at `now` for `scope`, whose backoff ends at
    /// `resume`: the scope's adaptive rate, if it has one, is cut (see [`Pace::cut`]).
    pub(crate) fn throttled(
        &mut self,
        scope: &Scope,
        sent_at: Option<Instant>,
        now: Instant,
        resume: Instant,
    ) {
        if let Some(kept) = self.kept.get_mut(scope) {
            // The scope's rate when the call went out is not kept: a cut starts from the rate
            // now, and never raises it.
            kept.pace.cut((sent_at, None), Seen::NOTHING, now, resume);
        }
    }

    /// Whether the gate keeps the state of `scope` (then a quota announced for it is its own).
    pub(crate) fn keeps(&self, scope: &Scope) -> bool {
        self.kept.contains_key(scope)
    }

    /// A call of `scopes` succeeded at `now`: the adaptive rate of each that has one grows.
    pub(crate) fn succeeded(&mut self, scopes: &[Scope], now: Instant) {
        for scope in scopes {
            if let Some(kept) = self.kept.get_mut(scope) {
                kept.pace.grow(now);
            }
        }
    }

    /// The rate calls of `scope` start at now, if it has one and the gate keeps its state.
    pub(crate) fn rate(&self, scope: &Scope) -> Option<f64> {
        self.kept.get(scope)?.pace.per_second()
    }

    /// The waiter holding `ticket` waits for a slot of `scope`; `newly` if it did not wait
    /// for any before (then it is surely not on the list yet).
    pub(crate) fn wait_for_slot(&mut self, scope: &Scope, ticket: Ticket, newly: bool) {
        if let Some(kept) = self.kept.get_mut(scope) {
            if newly || !kept.waiting_for_slot.contains(&ticket) {
                kept.waiting_for_slot.push(ticket);
            }
        }
    }

    /// Sets the limits of `scope` to `limits`, kept until set again: its next start is
    /// spaced by the new rate from its last, and `freed` is given each waiter that waited
    /// for one of its slots, to ask again. `false` for a gate without limits per scope.
    pub(crate) fn set(
        &mut self,
        scope: &Scope,
        limits: ScopeLimits,
        freed: impl FnMut(Ticket),
    ) -> bool {
        if self.rule.is_none() {
            return false;
        }
        if let Some(kept) = self.kept.get_mut(scope) {
            kept.max_in_flight = limits.max_in_flight;
            kept.weight = limits.share();
            kept.pace.replace_rate(limits.call_rate());
            kept.dims
                .retell(limits.budgets.as_deref().unwrap_or_default());
            kept.waiting_for_slot.drain(..).for_each(freed);
        }
        self.set.insert(scope.clone(), limits);
        true
    }

    /// The share of turns of `scope` in the line: its weight (1 for a gate without limits
    /// per scope).
    pub(crate) fn weight(&self, scope: &Scope) -> u32 {
        let Some(rule) = &self.rule else { return 1 };
        if let Some(kept) = self.kept.get(scope) {
            return kept.weight;
        }
        match self.set.get(scope) {
            Some(limits) => limits.share(),
            None => rule.limits_of(scope).share(),
        }
    }

    /// The spacing each of `scopes` keeps between its starts for a call of `cost` units
    /// (`None`: that scope has no rate), for the fleet's store to space the fleet's starts of
    /// each scope by; empty when none of them has a rate.
    pub(crate) fn paces(&self, scopes: &[Scope], cost: u64) -> Box<[Option<Duration>]> {
        let pace = |scope| self.kept.get(scope)?.pace.spacing_of(cost);
        if !scopes.iter().any(|scope| pace(scope).is_some()) {
            return Box::default();
        }
        scopes.iter().map(pace).collect()
    }

    /// What a call of `scopes` of `units` with `draws` spends of each budget announced for
    /// them that a fleet shares, for its store: each scope's, as the gate's are drawn
    /// ([`Dimensions::fleet_draws`]), named by its scope.
    pub(crate) fn fleet_draws<'a>(
        &'a self,
        scopes: &'a [Scope],
        (units, draws): (u64, &'a Draws),
    ) -> impl Iterator<Item = BudgetDraw> + 'a {
        self.kept_of(scopes).flat_map(move |(scope, kept)| {
            let drawn = kept.dims.fleet_draws(units, draws).into_iter();
            drawn.filter_map(move |draw| draw.in_scope(scope))
        })
    }

    /// The budgets announced for `scopes` that a call of `units` with `draws`, started at
    /// `sent`, cost otherwise than it started with, and what it cost of each, as
    /// [`Dimensions::fleet_settled`] says, named by their scopes.
    pub(crate) fn fleet_settled(
        &self,
        scopes: &[Scope],
        (sent, units, draws): (Option<Instant>, u64, &Draws),
        actual: &Cost,
    ) -> Vec<(BudgetDraw, u64)> {
        let settled = self.kept_of(scopes).flat_map(|(scope, kept)| {
            let (settled, used) = kept.dims.fleet_settled((sent, units), draws, actual);
            let settled = settled.into_iter().zip(used);
            settled.filter_map(move |(draw, used)| Some((draw.in_scope(scope)?, used)))
        });
        settled.collect()
    }

    /// The budget `announcement` (for `scope`) is of, as `scope`'s budgets reckon it at
    /// `now` ([`Dimensions::reckoned`]), named by its scope, for a fleet's store.
    pub(crate) fn reckoned(
        &self,
        scope: &Scope,
        announcement: &Announcement,
        (now, unsent): (Instant, u64),
    ) -> Option<Reckoned> {
        let kept = self.kept.get(scope)?;
        let reckoned = kept.dims.reckoned(announcement, now, unsent)?;
        let source = reckoned.source.in_scope(scope)?;
        Some(Reckoned { source, ..reckoned })
    }

    /// Each of `scopes` the gate keeps a state for, with it.
    fn kept_of<'a>(&'a self, scopes: &'a [Scope]) -> impl Iterator<Item = (&'a Scope, &'a Kept)> {
        (scopes.iter()).filter_map(|scope| Some((scope, self.kept.get(scope)?)))
    }

    /// The fleet's store said that the fleet's next start of `scope` is at `next`: none of
    /// this process's starts of it go before then.
    pub(crate) fn paced_by_fleet(&mut self, scope: &Scope, next: Instant) {
        if let Some(kept) = self.kept_or_new(scope) {
            kept.fleet_next = kept.fleet_next.max(Some(next));
        }
    }

    /// The last start of each of `scopes`, which counted `was` times against its rate,
    /// counts `weight` times (see [`Pace::reweigh`]).
    pub(crate) fn reweigh(&mut self, scopes: &[Scope], was: u64, weight: u64) {
        for scope in scopes {
            if let Some(kept) = self.kept.get_mut(scope) {
                kept.pace.reweigh(was, weight);
            }
        }
    }

    /// How many scopes the gate keeps a state for.
    pub(crate) fn kept(&self) -> usize {
        self.kept.len()
    }

    /// Units of `dimension` that may start at `now` in `scope` before a budget of the
    /// scope's holds a call back.
    #[cfg(test)]
    pub(crate) fn budget_left(
        &self,
        scope: &Scope,
        dimension: &crate::Dimension,
        now: Instant,
    ) -> Option<u64> {
        self.kept.get(scope)?.dims.left(dimension, now)
    }
}

#[cfg(test)]
mod tests;
