//! Budgets beyond the gate's one cost unit: what a call costs in each dimension it draws from
//! (requests, tokens, input or output tokens, a unit of the user's own), the budgets told the
//! gate for each ([`Budget`]: so many per window, of a kind), and the budgets servers announce
//! for each (one per dimension and policy). A call starts when every budget it draws from has
//! room; its estimate is spent as it starts, and settled as it ends.
//!
//! Pure, as `budget.rs` is: the core asks it beside the rate and the announced quota.

use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::budget::Spend;
use super::classify::Scope;
use super::quota::{Announcement, Dimension, Window};
use crate::error::{ConfigError, or_panic};

mod announced;
mod told;

use self::announced::Kept;
use self::told::Told;

/// A budget told the gate: at most `limit` units of a [`Dimension`] per `per`, by the rule of
/// a [`Window`] kind. A gate may have several, of several dimensions (requests and tokens a
/// minute, requests a day): a call starts when each it draws from has room. Give them with
/// [`GateBuilder::budget`](crate::GateBuilder::budget).
///
/// A call draws one unit of [`Dimension::REQUESTS`], its [cost](crate::CallOptions::cost)
/// of [`Dimension::UNITS`], and of any other dimension what its options say
/// ([`CallOptions::cost_in`](crate::CallOptions::cost_in)), nothing if they do not.
///
/// The windows are kept on the gate's clock, from its first start: a server whose fixed
/// windows began earlier sees the gate's first window split over two of its own. A
/// [`Window::Sliding`] budget (the default) keeps to any alignment. A server counts when
/// requests arrive, and two sent a window apart may arrive a few milliseconds closer: tell
/// a window a little longer than the server's (against Flask-Limiter's moving window of 20
/// in 2 s, told 2.1 s, 200 calls took 19.0 s and none was refused; told 2 s, 20.6 s and 13
/// refused).
///
/// A gate with a store keeps each budget for the whole fleet, on the store's clock: a call
/// starts when the budget has room whichever process spent it (see
/// [`RedisStore`](crate::RedisStore#budgets-told-the-gates)).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use paceline::{Budget, CallOptions, Dimension, Gate, RateLimited};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// // An LLM API's limits: 3 requests and 10,000 tokens a minute.
/// let gate = Gate::builder(|_: &()| Some(RateLimited::new()))
///     .budget(Budget::per_minute(Dimension::REQUESTS, 3))
///     .budget(Budget::per_minute(Dimension::TOKENS, 10_000))
///     .build()
///     .unwrap();
/// let start = tokio::time::Instant::now();
/// let prompt = CallOptions::new().cost_in(Dimension::TOKENS, 4_000);
/// for _ in 0..3 {
///     gate.call_with(prompt.clone(), || async { Ok::<_, ()>(()) }).await.unwrap();
/// }
/// // Two prompts fit the minute's tokens; the third waited for the first to leave it.
/// assert_eq!(start.elapsed(), Duration::from_secs(60));
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Budget {
    dimension: Dimension,
    limit: u64,
    per: Duration,
    window: Window,
}

impl Budget {
    /// At most `limit` units of `dimension` per `per` (at most a year), in a
    /// [`Window::Sliding`] window: in no span of `per` do the calls started spend more.
    ///
    /// # Panics
    ///
    /// If `limit` or `per` is zero. A budget read from configuration, or from a server, goes
    /// through [`try_new`](Self::try_new) instead, which answers with an error.
    #[track_caller]
    pub fn new(dimension: Dimension, limit: u64, per: Duration) -> Self {
        or_panic(Self::try_new(dimension, limit, per))
    }

    /// [`new`](Self::new), for a limit or a window that may not work: one read from
    /// configuration, or from a server while the gate runs (a tenant's new plan for
    /// [`Gate::set_scope_limits`](crate::Gate::set_scope_limits)).
    ///
    /// # Errors
    ///
    /// [`ConfigError::ZeroBudgetLimit`] if `limit` is zero; [`ConfigError::ZeroBudgetWindow`]
    /// if `per` is zero.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use paceline::{Budget, ConfigError, Dimension};
    ///
    /// // A plan's tokens a minute, as read from a configuration file.
    /// let tokens: u64 = "0".parse().unwrap();
    /// let minute = Duration::from_secs(60);
    /// let refused = Budget::try_new(Dimension::TOKENS, tokens, minute).unwrap_err();
    /// assert_eq!(refused, ConfigError::ZeroBudgetLimit);
    /// assert_eq!(refused.to_string(), "`limit` (a budget's units per window) must be at least 1");
    /// assert_eq!(
    ///     Budget::try_new(Dimension::TOKENS, 10_000, minute),
    ///     Ok(Budget::per_minute(Dimension::TOKENS, 10_000))
    /// );
    /// ```
    pub fn try_new(dimension: Dimension, limit: u64, per: Duration) -> Result<Self, ConfigError> {
        if limit == 0 {
            return Err(ConfigError::ZeroBudgetLimit);
        }
        if per.is_zero() {
            return Err(ConfigError::ZeroBudgetWindow);
        }
        Ok(Self {
            dimension,
            limit,
            per: per.min(crate::time::MAX_WAIT),
            window: Window::default(),
        })
    }

    /// At most `limit` units of `dimension` a second.
    ///
    /// # Panics
    ///
    /// If `limit` is zero; [`try_new`](Self::try_new) answers with an error instead.
    #[track_caller]
    pub fn per_second(dimension: Dimension, limit: u64) -> Self {
        Self::new(dimension, limit, Duration::from_secs(1))
    }

    /// At most `limit` units of `dimension` a minute.
    ///
    /// # Panics
    ///
    /// If `limit` is zero; [`try_new`](Self::try_new) answers with an error instead.
    #[track_caller]
    pub fn per_minute(dimension: Dimension, limit: u64) -> Self {
        Self::new(dimension, limit, Duration::from_secs(60))
    }

    /// At most `limit` units of `dimension` a day.
    ///
    /// # Panics
    ///
    /// If `limit` is zero; [`try_new`](Self::try_new) answers with an error instead.
    #[track_caller]
    pub fn per_day(dimension: Dimension, limit: u64) -> Self {
        Self::new(dimension, limit, Duration::from_secs(24 * 60 * 60))
    }

    /// The budget's window is of `kind`: see [`Window`].
    pub fn window(mut self, kind: Window) -> Self {
        self.window = kind;
        self
    }

    /// What the budget counts.
    pub fn dimension(&self) -> &Dimension {
        &self.dimension
    }

    /// Units per window.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// How long a window lasts.
    pub fn per(&self) -> Duration {
        self.per
    }

    /// The window's kind.
    pub fn kind(&self) -> Window {
        self.window
    }
}

/// What a call costs, or turned out to cost, in the dimensions it draws from beyond its
/// units: what [`CallOptions::cost_in`](crate::CallOptions::cost_in) estimates, and what a
/// call's value settles through [`Gate::call_settled`](crate::Gate::call_settled).
///
/// A `u64` converts into the cost in [`Dimension::UNITS`] alone, so that a closure that
/// settles units returns the number.
///
/// # Examples
///
/// ```
/// use paceline::{Cost, Dimension};
///
/// // An LLM answer's usage, as its body reports it.
/// let used = Cost::new().with(Dimension::INPUT_TOKENS, 812).with(Dimension::OUTPUT_TOKENS, 95);
/// assert_eq!(used.get(&Dimension::OUTPUT_TOKENS), Some(95));
/// assert_eq!(used.get(&Dimension::TOKENS), None);
/// assert_eq!(Cost::from(3).get(&Dimension::UNITS), Some(3));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cost {
    units: Vec<(Dimension, u64)>,
}

impl Cost {
    /// A cost in no dimension: settling it leaves every estimate as it was.
    pub fn new() -> Self {
        Self::default()
    }

    /// The cost is `units` of `dimension` (replacing what it said of it).
    pub fn with(mut self, dimension: Dimension, units: u64) -> Self {
        match self.units.iter_mut().find(|(d, _)| *d == dimension) {
            Some((_, was)) => *was = units,
            None => self.units.push((dimension, units)),
        }
        self
    }

    /// What it says of `dimension`, if anything.
    pub fn get(&self, dimension: &Dimension) -> Option<u64> {
        self.units
            .iter()
            .find(|(d, _)| d == dimension)
            .map(|(_, units)| *units)
    }
}

impl From<u64> for Cost {
    fn from(units: u64) -> Self {
        Cost::new().with(Dimension::UNITS, units)
    }
}

/// A call's estimate in the dimensions beyond its units, shared by its attempts (no
/// allocation for a call that names none).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Draws(Option<Arc<[(Dimension, u64)]>>);

impl Draws {
    /// A call that names no dimension beyond its units.
    pub(crate) const NONE: Draws = Draws(None);

    /// The estimate `units` of `dimension`, beside `self`'s (replacing what it said of it).
    pub(crate) fn with(&self, dimension: Dimension, units: u64) -> Self {
        let mut all: Vec<_> = self
            .0
            .iter()
            .flat_map(|draws| draws.iter().cloned())
            .collect();
        all.retain(|(d, _)| *d != dimension);
        all.push((dimension, units));
        Self(Some(all.into()))
    }

    /// Whether the call names no dimension beyond its units.
    #[inline]
    pub(crate) fn is_none(&self) -> bool {
        self.0.is_none()
    }

    /// What a call of `units` with these draws spends of `dimension`: its units of
    /// [`Dimension::UNITS`], what it names, else one request of [`Dimension::REQUESTS`] and
    /// nothing of the others.
    fn of(&self, dimension: &Dimension, units: u64) -> u64 {
        if *dimension == Dimension::UNITS {
            return units;
        }
        let named = self.0.iter().flat_map(|draws| draws.iter());
        match named.into_iter().find(|(d, _)| d == dimension) {
            Some((_, units)) => *units,
            None => u64::from(*dimension == Dimension::REQUESTS),
        }
    }
}

/// What a call spends of one of the fleet's budgets: the fleet keeps one budget told the
/// gates of each dimension, limit, window and kind, and one a server announced of each
/// dimension, policy and kind, for every gate on its namespace (and one of each for every
/// scope a server announced budgets for).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BudgetDraw {
    pub(crate) budget: Budget,
    /// What the call spends of it.
    pub(crate) units: u64,
    pub(crate) source: Source,
}

impl BudgetDraw {
    /// `units` of a budget told the gates.
    pub(crate) fn told(budget: Budget, units: u64) -> Self {
        Self {
            budget,
            units,
            source: Source::Told,
        }
    }

    /// The same draw of the budget announced for `scope` (see [`Source::in_scope`]).
    pub(crate) fn in_scope(self, scope: &Scope) -> Option<Self> {
        let source = self.source.in_scope(scope)?;
        Some(Self { source, ..self })
    }
}

/// Whence a fleet's budget: told the gates, or announced by a server (of a policy, if it
/// named one), for the whole gate or for one scope. An announced budget is a
/// [`Window::Refilling`] bucket of its limit and the server's refill, or else a window whose
/// units left and reset the announcements set (its budget's limit and window then say
/// nothing). A scope's is kept by the same rules as the gate's, apart for each scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Source {
    Told,
    Announced(Option<String>),
    AnnouncedIn(Scope, Option<String>),
}

impl Source {
    /// The same budget announced for `scope`, as a scope's budgets (which know nothing of
    /// whose they are) name it for the fleet; `None` for a budget told the gates, which
    /// the fleet keeps for the gate alone (a scope's told budgets are each process's own).
    pub(crate) fn in_scope(self, scope: &Scope) -> Option<Self> {
        match self {
            Source::Announced(policy) => Some(Source::AnnouncedIn(scope.clone(), policy)),
            Source::Told | Source::AnnouncedIn(..) => None,
        }
    }
}

/// An announced budget of a fleet, as the announcing gate reckons it after an announcement:
/// which it is, the units left now, and how long until a window resets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reckoned {
    pub(crate) budget: Budget,
    pub(crate) source: Source,
    pub(crate) left: u64,
    pub(crate) resets_in: Duration,
    /// Units of the announcing gate's calls that wait for the store to let them go.
    pub(crate) unsent: u64,
    /// What the server said was left, before the gate took anything off.
    pub(crate) said: u64,
    /// The start of the call whose answer said it, on the store's clock, if the store
    /// reserved it: the fleet's window takes an answer that finds more left than the least
    /// said before that start as the new window's word, as `QuotaBudget::observe_dated` does.
    pub(crate) dated: Option<NonZeroU64>,
}

/// A budget a server announced: one per dimension and policy.
#[derive(Debug)]
struct Announced {
    dimension: Dimension,
    policy: Option<String>,
    budget: Kept,
    /// Since when a fleet shares it ([`Announced::fleet_budget`]): a call started before
    /// spent nothing of the fleet's, and gives nothing back to it.
    shared_since: Option<Instant>,
}

impl Announced {
    /// The budget a fleet keeps of it: a bucket of its limit and the server's refill, or a
    /// window whose limit and length the announcements set; `None` for a moving window, and
    /// for a bucket until its resets show its refill.
    fn fleet_budget(&self) -> Option<Budget> {
        let dimension = self.dimension.clone();
        match &self.budget {
            Kept::Bucket(bucket) => {
                let (limit, refill) = bucket.limit_and_refill()?;
                Some(Budget::new(dimension, limit, refill).window(Window::Refilling))
            }
            Kept::Window(..) => Some(window_budget(dimension)),
            Kept::Moving(_) => None,
        }
    }
}

/// The gate's budgets in every dimension, told and announced.
#[derive(Debug, Default)]
pub(crate) struct Dimensions {
    told: Vec<(Budget, Told)>,
    announced: Vec<Announced>,
    /// Units of each dimension named by the calls in flight (units and requests the core
    /// counts itself).
    in_flight: Vec<(Dimension, u64)>,
    /// Units of every announcement kept unspent (the gate's quota reserve).
    reserve: u64,
    /// The most units of [`Dimension::UNITS`] a call has started with: a window of them
    /// keeps at least as many unspent (see [`QuotaBudget::started`](super::budget::QuotaBudget::started)).
    largest_units: u64,
    /// Whether a store keeps the generic quota (of [`Dimension::UNITS`], without a policy)
    /// for the fleet. Every start then draws on it, whether this process heard it or not:
    /// its key is every process's, and a process that never heard from the server keeps
    /// within what the others learnt. It is kept as a fixed window, undated: the others'
    /// pace its answers would show is the fleet's other processes, whose starts the store
    /// counts already.
    fleet_quota: bool,
}

impl Dimensions {
    pub(crate) fn new(budgets: &[Budget], reserve: u64) -> Self {
        let told = budgets
            .iter()
            .map(|b| (b.clone(), Told::new(b.limit, b.per, b.window)))
            .collect();
        Self {
            told,
            reserve,
            ..Self::default()
        }
    }

    /// The generic quota is the fleet's (see [`Dimensions::fleet_quota`]'s field).
    pub(crate) fn with_fleet_quota(mut self, fleet_quota: bool) -> Self {
        self.fleet_quota = fleet_quota;
        self
    }

    /// A call of `units` started: a window of units announced from now on keeps at least as
    /// many unspent.
    #[inline]
    pub(crate) fn grow_reserve(&mut self, units: u64) {
        self.largest_units = self.largest_units.max(units);
    }

    /// Units of `dimension` each of its announced windows keeps unspent, as it is first
    /// announced: the reserve, and a call's room (see [`QuotaBudget::started_as`]).
    fn reserve_of(&self, dimension: &Dimension) -> (u64, u64) {
        match *dimension == Dimension::UNITS {
            // A call costs a unit at least (the uncontended calls before the first
            // announcement were not weighed).
            true => (self.reserve, self.largest_units.max(1)),
            false => (self.reserve, 0),
        }
    }

    /// Whether the budget of `dimension` and `policy` is the fleet's generic quota.
    fn is_fleet_quota(&self, dimension: &Dimension, policy: Option<&str>) -> bool {
        self.fleet_quota && *dimension == Dimension::UNITS && policy.is_none()
    }

    /// The budgets told are `budgets` from now: each kept as it was if it was told before,
    /// new if not; those no longer told are dropped.
    pub(crate) fn retell(&mut self, budgets: &[Budget]) {
        let mut was = std::mem::take(&mut self.told);
        self.told = (budgets.iter())
            .map(|budget| match was.iter().position(|(b, _)| b == budget) {
                Some(i) => was.swap_remove(i),
                None => (
                    budget.clone(),
                    Told::new(budget.limit, budget.per, budget.window),
                ),
            })
            .collect();
    }

    /// Whether there is no budget to ask: a call's draws then hold nothing back.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.told.is_empty() && self.announced.is_empty()
    }

    /// May a call of `units` with `draws` start at `now`? Moves an announced budget on to
    /// its next window once the one announced reset.
    pub(crate) fn check(&mut self, now: Instant, units: u64, draws: &Draws) -> Spend {
        let mut spend = Spend::Now;
        for (budget, told) in &self.told {
            if let Some(at) = told.next_start(now, draws.of(&budget.dimension, units)) {
                spend = later(spend, Spend::NotBefore(at));
            }
        }
        for announced in &mut self.announced {
            let cost = draws.of(&announced.dimension, units);
            spend = later(spend, announced.budget.check(now, cost));
        }
        spend
    }

    /// What [`Dimensions::check`] answers, without moving an announced window on to the
    /// next (a window that reset lets the call start, which then learns the next): for the
    /// budgets of a scope, asked while other calls' decisions are made.
    pub(crate) fn allows(&self, now: Instant, units: u64, draws: &Draws) -> Spend {
        let told = self.told.iter().filter_map(|(budget, told)| {
            let at = told.next_start(now, draws.of(&budget.dimension, units))?;
            Some(Spend::NotBefore(at))
        });
        let announced =
            (self.announced.iter()).map(|a| a.budget.allows(now, draws.of(&a.dimension, units)));
        told.chain(announced).fold(Spend::Now, later)
    }

    /// Whether the budgets hold nothing back at `now`, nor will until a call starts (each
    /// told budget full, each announced one idle), and no call drawing from them is in
    /// flight: then they are as new ones would be, but for what servers announced, which
    /// the next answers tell again.
    pub(crate) fn is_idle(&self, now: Instant) -> bool {
        let told = (self.told.iter()).all(|(budget, told)| told.left(now) == budget.limit);
        let announced = self.announced.iter().all(|a| a.budget.is_idle(now));
        told && announced && self.in_flight.is_empty()
    }

    /// What a call of `units` with `draws` spends of each budget a fleet shares, for its
    /// store: each told budget, the fleet's generic quota, and each announced one but a
    /// moving window (which each process keeps by its own starts).
    pub(crate) fn fleet_draws(&self, units: u64, draws: &Draws) -> Box<[BudgetDraw]> {
        let told = (self.told.iter()).map(|(budget, _)| {
            BudgetDraw::told(budget.clone(), draws.of(&budget.dimension, units))
        });
        let generic = self.fleet_quota.then(|| BudgetDraw {
            budget: window_budget(Dimension::UNITS),
            units,
            source: Source::Announced(None),
        });
        let announced = self.announced.iter().filter_map(|announced| {
            announced.shared_since?;
            if self.is_fleet_quota(&announced.dimension, announced.policy.as_deref()) {
                return None;
            }
            Some(BudgetDraw {
                budget: announced.fleet_budget()?,
                units: draws.of(&announced.dimension, units),
                source: Source::Announced(announced.policy.clone()),
            })
        });
        told.chain(generic).chain(announced).collect()
    }

    /// The fleet's budgets that a call of `units` with `draws`, started at `sent`, cost
    /// otherwise than it started with (`actual` says), each with what the call started with,
    /// and what it cost of each, for a fleet's store. An announced budget the fleet shared
    /// only after the call started (or since a start not known) is not among them.
    pub(crate) fn fleet_settled(
        &self,
        (sent, units): (Option<Instant>, u64),
        draws: &Draws,
        actual: &Cost,
    ) -> (Vec<BudgetDraw>, Vec<u64>) {
        let shared_then = |draw: &BudgetDraw| match &draw.source {
            Source::Told => true,
            Source::Announced(None) if self.fleet_quota => true,
            Source::Announced(policy) | Source::AnnouncedIn(_, policy) => {
                self.announced.iter().any(|a| {
                    a.dimension == draw.budget.dimension
                        && a.policy == *policy
                        && a.shared_since
                            .zip(sent)
                            .is_some_and(|(since, sent)| since <= sent)
                })
            }
        };
        (self.fleet_draws(units, draws).into_iter())
            .filter(shared_then)
            .filter_map(|draw| {
                let used = actual.get(&draw.budget.dimension)?;
                (used != draw.units).then_some((draw, used))
            })
            .unzip()
    }

    /// The earliest a call of `units` with `draws` could start, from `now`, as far as these
    /// budgets know: a lower bound. Spends nothing.
    pub(crate) fn earliest(&self, now: Instant, units: u64, draws: &Draws) -> Instant {
        self.earliest_behind(now, 0, (units, draws))
    }

    /// Like [`Dimensions::earliest`], behind `ahead` units of the calls waiting ahead, which
    /// an announced window of [`Dimension::UNITS`] spends first.
    pub(crate) fn earliest_behind(
        &self,
        now: Instant,
        ahead: u64,
        (units, draws): (u64, &Draws),
    ) -> Instant {
        let told = self
            .told
            .iter()
            .filter_map(|(budget, told)| told.next_start(now, draws.of(&budget.dimension, units)));
        let announced = self.announced.iter().map(|announced| {
            let cost = draws.of(&announced.dimension, units);
            let ahead = if announced.dimension == Dimension::UNITS {
                ahead
            } else {
                0
            };
            announced.budget.earliest(now, ahead, cost)
        });
        told.chain(announced).fold(now, Instant::max)
    }

    /// A call of `units` with `draws` started at `now`, as [`Dimensions::check`] allowed.
    #[cfg(test)]
    pub(crate) fn started(&mut self, now: Instant, units: u64, draws: &Draws) {
        self.started_as(now, (units, draws), 1);
    }

    /// Like [`Dimensions::started`], the call counting `weight` times against each told
    /// budget and each announced window (a fleet's process while the fleet's store does not
    /// answer, for the budgets the fleet shares). An announced bucket or moving window counts
    /// it once: what the server announces shows the rest of the fleet's spending as others'
    /// (see `Ledger`).
    pub(crate) fn started_as(&mut self, now: Instant, (units, draws): (u64, &Draws), weight: u64) {
        for (budget, told) in &mut self.told {
            let drawn = draws.of(&budget.dimension, units);
            told.started(now, drawn.saturating_mul(weight));
        }
        for announced in &mut self.announced {
            let cost = draws.of(&announced.dimension, units);
            announced.budget.started(now, cost, weight);
        }
        for (dimension, drawn) in draws.0.iter().flat_map(|draws| draws.iter()) {
            match self.in_flight.iter_mut().find(|(d, _)| d == dimension) {
                Some((_, sum)) => *sum += drawn,
                None => self.in_flight.push((dimension.clone(), *drawn)),
            }
        }
    }

    /// A call of `units` with `draws`, started at `sent`, ended (or was dropped).
    /// An announced window whose call sent to learn the next window ended without an
    /// announcement is forgotten: the server no longer announces it.
    pub(crate) fn ended(&mut self, sent: Option<Instant>, draws: &Draws) {
        let mut forgotten = false;
        for announced in &mut self.announced {
            forgotten |= announced.budget.ended(sent);
        }
        if forgotten {
            self.announced.retain(|a| !a.budget.is_forgotten());
        }
        for (dimension, drawn) in draws.0.iter().flat_map(|draws| draws.iter()) {
            if let Some((_, sum)) = self.in_flight.iter_mut().find(|(d, _)| d == dimension) {
                *sum -= drawn;
            }
        }
        self.in_flight.retain(|(_, sum)| *sum > 0);
    }

    /// A call turned out to cost `extra` units of [`Dimension::UNITS`] more than it spent as it
    /// started: they come off each announced window of them.
    pub(crate) fn charge(&mut self, extra: u64) {
        let units = self.announced.iter_mut();
        units
            .filter(|a| a.dimension == Dimension::UNITS)
            .for_each(|a| a.budget.charge(extra));
    }

    /// The server refused a call of `units` with `draws`, started at `sent`, at `now`: an announced
    /// bucket takes it as never spent (a told budget keeps it spent, on the safe side: some
    /// servers count what they refuse).
    pub(crate) fn refused(&mut self, (sent, now): (Instant, Instant), units: u64, draws: &Draws) {
        for announced in &mut self.announced {
            let cost = draws.of(&announced.dimension, units);
            announced.budget.refused((sent, now), cost);
        }
    }

    /// A call of `units` with `draws`, started at `sent`, ended at `now` having cost `actual`
    /// (in the dimensions it names; the others as estimated).
    pub(crate) fn settle(
        &mut self,
        (sent, now): (Instant, Instant),
        (units, draws): (u64, &Draws),
        actual: &Cost,
    ) {
        for (budget, told) in &mut self.told {
            let dimension = &budget.dimension;
            if let Some(used) = actual.get(dimension) {
                told.settle(sent, now, draws.of(dimension, units), used);
            }
        }
        for announced in &mut self.announced {
            if let Some(used) = actual.get(&announced.dimension) {
                let estimated = draws.of(&announced.dimension, units);
                announced.budget.settle((sent, now), estimated, used);
            }
        }
    }

    /// Takes in what a server announced at `now`, in the answer to a call started at `dated`
    /// if known, while `units` and `requests` of the gate's calls were in flight (beside what
    /// they named of other dimensions) that it may not have counted. Returns whether a budget
    /// changed (waiters may start sooner).
    pub(crate) fn observe(
        &mut self,
        announcement: &Announcement,
        (dated, units, requests): (Option<Instant>, u64, u64),
        now: Instant,
    ) -> bool {
        self.observe_beside(announcement, (dated, units, requests, 0), now)
    }

    /// Like [`Dimensions::observe`], while `unsent` units more of the gate's calls wait for
    /// the fleet's store to let them go: a window of [`Dimension::UNITS`] that the gate knew
    /// nothing of is taken less them too (see [`QuotaBudget::observe`](super::budget::QuotaBudget::observe)).
    pub(crate) fn observe_beside(
        &mut self,
        announcement: &Announcement,
        (dated, units, requests, unsent): (Option<Instant>, u64, u64, u64),
        now: Instant,
    ) -> bool {
        let dimension = &announcement.dimension;
        let (uncounted, unsent) = if *dimension == Dimension::UNITS {
            (units, unsent)
        } else {
            let named = self.in_flight.iter().find(|(d, _)| d == dimension);
            let named = named.map(|(_, sum)| *sum);
            let uncounted = named.unwrap_or(if *dimension == Dimension::REQUESTS {
                requests
            } else {
                0
            });
            (uncounted, 0)
        };
        let quota = &announcement.quota;
        // See `fleet_quota`'s field.
        let (window, dated) = match self.is_fleet_quota(dimension, announcement.policy.as_deref()) {
            true => (Some(Window::Fixed), None),
            false => (announcement.window, dated),
        };
        let reserved = (self.reserve_of(dimension), uncounted, unsent);
        let same = |a: &Announced| a.dimension == *dimension && a.policy == announcement.policy;
        if let Some(known) = self.announced.iter_mut().find(|a| same(a)) {
            let changed = if known.budget.is_of(quota) {
                known.budget.observe(quota, (dated, uncounted, unsent), now)
            } else {
                // A moving window learnt of another policy (the tightest of several, read
                // alone, switched): this one is kept as a fixed window, its kind learnt anew.
                known.budget = Kept::first(window, (quota, dated), reserved, now);
                true
            };
            if known.shared_since.is_none() && known.fleet_budget().is_some() {
                known.shared_since = Some(now);
            }
            return changed;
        }
        let mut announced = Announced {
            dimension: dimension.clone(),
            policy: announcement.policy.clone(),
            budget: Kept::first(window, (quota, dated), reserved, now),
            shared_since: None,
        };
        if announced.budget.is_forgotten() {
            // "Resets now", of a window the gate knew nothing of: nothing to keep.
            return false;
        }
        announced.shared_since = announced.fleet_budget().map(|_| now);
        self.announced.push(announced);
        true
    }

    /// Forgets the announced budget of `dimension` and `policy`: it is not the gate's.
    pub(crate) fn forget(&mut self, dimension: &Dimension, policy: Option<&str>) {
        let of = |a: &Announced| a.dimension == *dimension && a.policy.as_deref() == policy;
        self.announced.retain(|a| !of(a));
    }

    /// The budget `announcement` is of, as this gate reckons it at `now`, for a fleet's
    /// store; `None` for a budget the fleet does not share (a moving window), or not yet (a
    /// bucket whose refill no reset has shown). "Resets now" is told of a window the gate
    /// keeps nothing of too (the fleet's generic quota, or one whose kind it knows): it lets
    /// the fleet send another call to learn the next window. `unsent` units of the gate's
    /// calls wait for the store to let them go: they go to it apart, for the store to take
    /// off only a window it knew nothing of (it knows whether it let them go).
    pub(crate) fn reckoned(
        &self,
        announcement: &Announcement,
        now: Instant,
        unsent: u64,
    ) -> Option<Reckoned> {
        let (dimension, policy) = (&announcement.dimension, &announcement.policy);
        let kept = (self.announced.iter())
            .find(|a| a.dimension == *dimension && a.policy == *policy && a.shared_since.is_some());
        let budget = match kept {
            Some(announced) => announced.fleet_budget()?,
            None if self.is_fleet_quota(dimension, policy.as_deref()) => {
                window_budget(dimension.clone())
            }
            None => return None,
        };
        let resets_in = announcement.quota.resets_in();
        let left = match kept.and_then(|a| a.budget.left_for_fleet(now)) {
            Some(left) => left,
            None if resets_in.is_zero() => 0,
            None => return None,
        };
        Some(Reckoned {
            budget,
            source: Source::Announced(policy.clone()),
            left,
            resets_in,
            unsent: if *dimension == Dimension::UNITS {
                unsent
            } else {
                0
            },
            said: announcement.quota.remaining(),
            dated: None,
        })
    }

    /// Units of `dimension` that may start at `now` before a budget of it holds a call back:
    /// the least of its told budgets and the windows announced for it; `None` if it has
    /// none.
    pub(crate) fn left(&self, dimension: &Dimension, now: Instant) -> Option<u64> {
        let told = self
            .told
            .iter()
            .filter(|(budget, _)| budget.dimension == *dimension)
            .map(|(_, told)| told.left(now));
        let announced = self
            .announced
            .iter()
            .filter(|a| a.dimension == *dimension)
            .filter_map(|a| a.budget.left(now));
        told.chain(announced).min()
    }
}

/// The budget a fleet keeps of an announced window of `dimension`: its units left and reset
/// are the announcements', its limit and length say nothing.
fn window_budget(dimension: Dimension) -> Budget {
    Budget::new(dimension, 1, Duration::from_secs(1)).window(Window::Fixed)
}

/// The later of two answers: waiting for an answer outlasts any instant.
fn later(a: Spend, b: Spend) -> Spend {
    match (a, b) {
        (Spend::AwaitAnswer, _) | (_, Spend::AwaitAnswer) => Spend::AwaitAnswer,
        (Spend::Now, other) | (other, Spend::Now) => other,
        (Spend::NotBefore(a), Spend::NotBefore(b)) => Spend::NotBefore(a.max(b)),
    }
}

#[cfg(test)]
mod tests;
