//! The gate's settings, checked once when it is built.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::adaptive::AdaptiveRate;
use super::backoff::{BackoffSchedule, Jitter};
use super::classify::Scope;
use super::core::{Core, Settings};
use super::dimensions::Budget;
use super::fleet::{Fleet, FleetStore};
use super::pace::CallRate;
use super::partitions::PolicyOf;
use super::scopes::{Rule, ScopeLimits};
use super::state::{Classifier, Shared};
use crate::error::ConfigError;
use crate::metrics::{DEFAULT_GATE_NAME, GateMetrics, Name, ScopeLabels};
use crate::time::MAX_WAIT;

/// Units of an announced quota the gate leaves unspent by default: see
/// [`GateBuilder::quota_reserve`].
const DEFAULT_QUOTA_RESERVE: u64 = 0;

/// Settings of a [`Gate`](crate::Gate); [`GateBuilder::build`] checks them.
pub struct GateBuilder<E> {
    classify: Box<Classifier<E>>,
    name: Name,
    max_in_flight: usize,
    max_queued: Option<usize>,
    max_retries: u32,
    rate: Option<RateSetting>,
    /// Whether a gate told no rate finds one from throttles that say nothing.
    find_rate: bool,
    backoff_base: Duration,
    backoff_cap: Duration,
    jitter: Jitter,
    decay_after: u32,
    quota_reserve: u64,
    seed: u64,
    /// Where the fleet's share of the state lives, if beyond this process.
    store: Option<Arc<dyn FleetStore>>,
    /// The limits of each scope, if scopes have any.
    per_scope: Option<Rule>,
    /// The label of each scope whose calls the metrics count apart, if any.
    scope_labels: Option<ScopeLabels>,
    /// The budgets told, in every dimension.
    budgets: Vec<Budget>,
    /// Whose each policy named here is, as the user says.
    policies: Vec<(String, PolicyOf)>,
    /// Whether the generic quota is kept by the fleet's rules without a store: for the test
    /// that holds those rules to the store's scripts.
    #[cfg(test)]
    fleet_quota: bool,
}

#[derive(Debug, Clone, Copy)]
struct RateSetting {
    start: f64,
    floor: f64,
    ceiling: f64,
    adaptive: bool,
}

impl<E> fmt::Debug for GateBuilder<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GateBuilder")
            .field("name", &self.name)
            .field("max_in_flight", &self.max_in_flight)
            .field("max_queued", &self.max_queued)
            .field("max_retries", &self.max_retries)
            .field("rate", &self.rate)
            .field("find_rate", &self.find_rate)
            .field("backoff_base", &self.backoff_base)
            .field("backoff_cap", &self.backoff_cap)
            .field("jitter", &self.jitter)
            .field("decay_after", &self.decay_after)
            .field("quota_reserve", &self.quota_reserve)
            .field("per_scope", &self.per_scope)
            .field("scope_labels", &self.scope_labels)
            .field("budgets", &self.budgets)
            .field("policies", &self.policies)
            .finish_non_exhaustive()
    }
}

impl<E> GateBuilder<E> {
    pub(super) fn new(classify: Box<Classifier<E>>) -> Self {
        Self {
            classify,
            name: Name::Borrowed(DEFAULT_GATE_NAME),
            max_in_flight: 16,
            max_queued: None,
            max_retries: 5,
            rate: None,
            find_rate: true,
            backoff_base: Duration::from_millis(100),
            backoff_cap: Duration::from_secs(30),
            jitter: Jitter::Full,
            decay_after: 10,
            quota_reserve: DEFAULT_QUOTA_RESERVE,
            seed: 0x5EED,
            store: None,
            per_scope: None,
            scope_labels: None,
            budgets: Vec::new(),
            policies: Vec::new(),
            #[cfg(test)]
            fleet_quota: false,
        }
    }

    /// Keeps the generic announced quota by the rules a fleet's member keeps it by (see
    /// [`Dimensions::with_fleet_quota`](super::dimensions::Dimensions::with_fleet_quota)),
    /// without a store: the gate the store's scripts are held to.
    #[cfg(test)]
    pub(crate) fn fleet_quota(mut self) -> Self {
        self.fleet_quota = true;
        self
    }

    /// Names the gate, for the label of its [metrics](crate::metrics) and the `gate` field of
    /// its calls' spans: the API it calls, say, when a program has several gates. Default
    /// [`DEFAULT_GATE_NAME`] (`"default"`).
    ///
    /// # Examples
    ///
    /// ```
    /// use paceline::{Gate, RateLimited};
    ///
    /// let ads = Gate::builder(|_: &()| Some(RateLimited::new())).name("ads-api").build().unwrap();
    /// assert_eq!(ads.name(), "ads-api");
    /// let unnamed = Gate::builder(|_: &()| Some(RateLimited::new())).build().unwrap();
    /// assert_eq!(unnamed.name(), paceline::metrics::DEFAULT_GATE_NAME);
    /// ```
    pub fn name(mut self, name: impl Into<std::borrow::Cow<'static, str>>) -> Self {
        self.name = name.into();
        self
    }

    /// Counts the calls of `scopes` apart in the gate's [metrics](crate::metrics) (with the
    /// `metrics` feature): each attempt of a call of one of them that goes out, and each
    /// throttle, as `paceline_gate_scope_calls_total` and
    /// `paceline_gate_scope_throttles_total`, labelled `scope` with the scope's name beside
    /// `gate`. Each scope listed is a series the recorder keeps for the life of the program,
    /// registered when the gate is built, as the gate's other metrics are: list a bounded
    /// set (the models, the largest tenants), not every tenant. Calls of other scopes are
    /// counted only in the gate's own metrics. Without the `metrics` feature, it does
    /// nothing. Called again, it adds to the list.
    ///
    /// # Examples
    ///
    /// ```
    /// use paceline::{Gate, RateLimited};
    ///
    /// // Each model counted apart; the tenants are not.
    /// let gate = Gate::builder(|_: &()| Some(RateLimited::new()))
    ///     .scope_metrics(["model:large", "model:small"])
    ///     .build()
    ///     .unwrap();
    /// # drop(gate);
    /// ```
    pub fn scope_metrics(mut self, scopes: impl IntoIterator<Item = impl Into<Scope>>) -> Self {
        let listed = self.scope_labels.get_or_insert_with(Vec::new);
        listed.extend(scopes.into_iter().map(Into::into));
        self
    }

    /// At most this many calls in progress at once (the connection pool). Default 16.
    /// [`Gate::set_max_in_flight`](crate::Gate::set_max_in_flight) changes it while the gate
    /// runs.
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) fails with [`ConfigError::ZeroInFlight`] if `n` is zero: no
    /// call could ever start.
    pub fn max_in_flight(mut self, n: usize) -> Self {
        self.max_in_flight = n;
        self
    }

    /// Bounds the gate's line: a call that arrives to find `n` calls already waiting fails
    /// at once with [`Error::Overloaded`](crate::Error::Overloaded), and its future is never
    /// made (the closure given to [`Gate::call`](crate::Gate::call) is not called), so that a
    /// program under more load than the API takes sheds it at once rather than let it wait
    /// without end. Unbounded by default.
    ///
    /// - **What waits**: every call in the gate's line, whatever holds it (the in-flight
    ///   limit, a backoff, the rate, the announced quota, the calls ahead), as
    ///   [`GateStats::queued`](crate::GateStats::queued) counts them; not the calls in
    ///   flight. A call that can start at once is never turned away.
    /// - **Once in, never out**: the bound is asked of a call as it arrives, once. A call let
    ///   in is never turned away later, and a throttled call's retry keeps its place in line
    ///   (first) whatever the line holds, as does a start that a fleet's store sends back.
    ///   So the line holds more than `n` only while retries come back to it, and never more
    ///   than `n` plus the in-flight limit (of each [priority](crate::Priority), below).
    /// - **Priorities**: a call counts the waiters of its own priority and of higher ones
    ///   against the bound, not those of lower ones, so that a backlog of bulk calls never
    ///   turns away an interactive call. The line then holds up to `n` calls of each
    ///   priority.
    /// - **Nothing is lost**: every call either runs (and ends as it would without the
    ///   bound) or is turned away, and the line takes calls again as soon as fewer than `n`
    ///   wait. [`GateStats::turned_away`](crate::GateStats::turned_away) counts the calls
    ///   turned away.
    /// - **Each way in**: [`throttled_map`](crate::PacelineExt::throttled_map) yields
    ///   `Err(Error::Overloaded(_))` in a turned-away item's place (in input order) and goes
    ///   on with the next; a stream keeps up to the in-flight limit of calls in progress, so
    ///   with a bound below that limit its own calls can fill the line. A
    ///   [`paged`](crate::Gate::paged) listing yields the error and ends; the tower service
    ///   fails with `GateError::Overloaded`, and the reqwest middleware with an
    ///   [`Overloaded`](crate::Overloaded) inside its error.
    /// - A call with a [deadline](crate::CallOptions::deadline) that finds the line full is
    ///   turned away as overloaded: the bound is asked first, at no cost however long the
    ///   line.
    ///
    /// # Errors
    ///
    /// None: [`build`](Self::build) takes every bound, zero included (a gate that keeps no
    /// line, below).
    ///
    /// # A bound of zero
    ///
    /// `max_queued(0)` keeps no line: a call that cannot start at once (every slot taken, a
    /// backoff, the rate's next start not yet due) fails at once with
    /// [`Error::Overloaded`](crate::Error::Overloaded), as a rate limiter's "check" would,
    /// rather than wait. Retries still wait for their backoff, in line.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use paceline::{Error, Gate, RateLimited};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// // One call at a time, and at most two waiting for it.
    /// let gate = Gate::builder(|_: &()| Some(RateLimited::new()))
    ///     .max_in_flight(1)
    ///     .max_queued(2)
    ///     .build()
    ///     .unwrap();
    /// let slow = || async {
    ///     tokio::time::sleep(Duration::from_secs(1)).await;
    ///     Ok::<_, ()>(())
    /// };
    /// let mut made = 0;
    /// let (a, b, c, d) = futures::join!(
    ///     gate.call(slow),
    ///     gate.call(slow),
    ///     gate.call(slow),
    ///     gate.call(|| {
    ///         made += 1;
    ///         slow()
    ///     }),
    /// );
    /// // The first ran, two waited their turn; the fourth found two waiting and was turned
    /// // away, its future never made.
    /// assert_eq!((a, b, c), (Ok(()), Ok(()), Ok(())));
    /// assert!(matches!(d, Err(Error::Overloaded(_))));
    /// assert_eq!(made, 0);
    /// assert_eq!(gate.stats().turned_away, 1);
    /// // The line is empty again: the next call goes.
    /// assert_eq!(gate.call(slow).await, Ok(()));
    /// # }
    /// ```
    pub fn max_queued(mut self, n: usize) -> Self {
        self.max_queued = Some(n);
        self
    }

    /// Gives every scope the same `limits` of its own, under the gate's: a call starts only
    /// when it fits the limits of each of its scopes (an account, a tenant, a model, as
    /// [`CallOptions::scopes`](crate::CallOptions::scopes) names them) and the gate's. For an
    /// API that limits each account and the whole client at once (Google Ads each customer
    /// account and the developer token; GitHub each installation and the app).
    ///
    /// While one scope waits for its own limits, the calls of other scopes go on: a scope
    /// held back steps out of the line, with the calls of its lane, until its slot frees, its
    /// rate's next start is due or its [budgets](ScopeLimits::budget) have room. Waiting
    /// calls take turns by their first scope, in
    /// proportion to its [weight](ScopeLimits::weight). A scope's state (calls in flight,
    /// last start) is kept while it matters and forgotten once idle, so that memory follows
    /// the scopes in use;
    /// a scope used again starts afresh. [`Gate::set_scope_limits`](crate::Gate::set_scope_limits)
    /// changes one scope's limits while the gate runs. Without this (or
    /// [`per_scope_with`](Self::per_scope_with)), scopes carry only their own backoffs.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use paceline::{CallOptions, Gate, RateLimited, ScopeLimits};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// // 10 calls a second in all; each account 1 a second.
    /// let gate = Gate::builder(|_: &()| Some(RateLimited::new()))
    ///     .rate(10.0)
    ///     .per_scope(ScopeLimits::new().rate(1.0))
    ///     .build()
    ///     .unwrap();
    /// let start = tokio::time::Instant::now();
    /// let call = |account: &'static str| {
    ///     gate.call_in([account], move || async move { Ok::<_, ()>(start.elapsed()) })
    /// };
    /// let (a1, a2, b1) = futures::join!(call("a"), call("a"), call("b"));
    /// let ms = Duration::from_millis;
    /// // Account a's second call waits its second; account b's goes by the gate's rate.
    /// assert_eq!((a1, a2, b1), (Ok(ms(0)), Ok(ms(1_000)), Ok(ms(100))));
    /// # }
    /// ```
    pub fn per_scope(mut self, limits: ScopeLimits) -> Self {
        self.per_scope = Some(Rule::Every(limits));
        self
    }

    /// Gives each scope the limits `limits_of` returns for it, under the gate's: as
    /// [`per_scope`](Self::per_scope), with limits that differ by scope (a plan per tenant,
    /// a limit per model). `limits_of` is called when a scope's state is made: at the
    /// scope's first start, and again once it was idle and forgotten; and, for its
    /// [weight](ScopeLimits::weight), when calls of a scope with no state kept begin to wait
    /// in line. Not for every call.
    /// Limits set by [`Gate::set_scope_limits`](crate::Gate::set_scope_limits) take its place
    /// for their scopes.
    ///
    /// # Examples
    ///
    /// ```
    /// use paceline::{Gate, RateLimited, Scope, ScopeLimits};
    ///
    /// let gate = Gate::builder(|_: &()| Some(RateLimited::new()))
    ///     .per_scope_with(|scope: &Scope| match scope.as_str() {
    ///         "enterprise" => ScopeLimits::new().max_in_flight(8),
    ///         _ => ScopeLimits::new().max_in_flight(2).rate(5.0),
    ///     })
    ///     .build()
    ///     .unwrap();
    /// # drop(gate);
    /// ```
    pub fn per_scope_with(
        mut self,
        limits_of: impl Fn(&Scope) -> ScopeLimits + Send + Sync + 'static,
    ) -> Self {
        self.per_scope = Some(Rule::By(Box::new(limits_of)));
        self
    }

    /// How many times a throttled call is tried again before giving up. Default 5.
    pub fn max_retries(mut self, n: u32) -> Self {
        self.max_retries = n;
        self
    }

    /// Leaves `units` of every quota the server announces unspent ([`Gate::observe`](crate::Gate::observe)):
    /// room for another client of the same quota, or a call the server counts that the gate
    /// did not see. Default 0.
    ///
    /// Beyond it, the gate keeps back the largest [cost](crate::CallOptions::cost) a call has
    /// started with, until the server's windows show they do not need it: where the reset
    /// comes rounded to whole seconds and answers take their time, the gate's view of a window
    /// can end a little after the server's did, and the call it then sends to learn the next
    /// window lands in a window it has already spent from; that room is kept for it. Once two
    /// such calls in a row find the new window whole but for themselves, the room is spent
    /// too; a refusal, or a call that finds less, brings it back.
    pub fn quota_reserve(mut self, units: u64) -> Self {
        self.quota_reserve = units;
        self
    }

    /// Says whose the policy a server names `policy` is: the whole gate's
    /// ([`PolicyOf::Gate`]: a limit of the key every scope's calls share) or each scope's
    /// ([`PolicyOf::Scope`]: an account's own limit). It matters for an answer to a scoped
    /// call that the front-ends read ([`GateMiddleware`](crate::reqwest::GateMiddleware),
    /// [`GateLayer::read_announced`](crate::tower::GateLayer::read_announced)) on a gate with
    /// [limits per scope](Self::per_scope): a server that keeps both limits announces both
    /// in it, and a refusal of it is the gate's or the scope's by the policy that ran out.
    ///
    /// Untold, the answers show it where the server gives each policy a partition key (the
    /// IETF draft's `pk`, as express-rate-limit does): a policy whose key is the same in the
    /// answers to two scopes' calls is the gate's, one whose key differs the scope's, and
    /// until a second scope's answer shows which, it is kept as both (the gate keeps to it as
    /// if every scope counted in it, on the safe side). A policy without a name or a key is
    /// the scope's whose call it answered.
    ///
    /// # Examples
    ///
    /// ```
    /// use paceline::{Gate, PolicyOf, RateLimited, ScopeLimits};
    ///
    /// let gate = Gate::builder(|_: &()| Some(RateLimited::new()))
    ///     .per_scope(ScopeLimits::new())
    ///     .policy_of("whole-key", PolicyOf::Gate)
    ///     .policy_of("per-account", PolicyOf::Scope)
    ///     .build()
    ///     .unwrap();
    /// # drop(gate);
    /// ```
    pub fn policy_of(mut self, policy: impl Into<String>, of: PolicyOf) -> Self {
        let policy = policy.into();
        self.policies.retain(|(name, _)| *name != policy);
        self.policies.push((policy, of));
        self
    }

    /// Paces call starts at `per_second`, never early: starts at least `1 / per_second` apart.
    /// [`Gate::set_rate`](crate::Gate::set_rate) changes it while the gate runs (a gate built
    /// without a rate keeps none).
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) fails with [`ConfigError::InvalidRate`] (`which` is `"start"`)
    /// if `per_second` is not a positive finite number.
    pub fn rate(mut self, per_second: f64) -> Self {
        let setting = self.rate.get_or_insert(RateSetting {
            start: per_second,
            floor: per_second,
            ceiling: per_second,
            adaptive: false,
        });
        setting.start = per_second;
        if !setting.adaptive {
            setting.floor = per_second;
            setting.ceiling = per_second;
        }
        self
    }

    /// Adapts the rate between `floor` and `ceiling`, starting from the [`rate`](Self::rate)
    /// (or from `ceiling` if none was set): cut on a throttle, grown back on success, so that
    /// the gate finds a limit it was never told and keeps just under it.
    ///
    /// - A gate-wide throttle cuts the rate to a fraction of the rate its call was sent at
    ///   (a deeper cut if the call went out right after a backoff ended, before the server
    ///   had accepted a few calls again: the limit is far below), and that rate is
    ///   remembered as too fast. If the server had accepted a few, those calls spent within
    ///   a second the burst it refilled during the backoff: the rate that failed is well
    ///   above the limit, and the rate stays at the cut. A call sent close to a rate known
    ///   to be too fast finds the limit just below it, and its throttle cuts only a little.
    ///   Throttles of calls sent before the last cut change nothing; a scope's throttle
    ///   never touches the gate-wide rate.
    /// - After a cut the rate holds for a few times the backoff, then grows back, per second
    ///   of success, to just under the rate that failed, and stays there for a quiet while
    ///   (longer after a longer backoff) before it probes above, in case the limit rose.
    ///   Each probe throttled in a row doubles the quiet while, up to a few minutes, so
    ///   against a limit that stays put throttles grow rarer and rarer.
    ///
    /// With a [`store`](Self::store), the rate lives in the store too: a fleet of processes
    /// shares one rate and finds one limit together.
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) fails with [`ConfigError::InvalidRate`] if a rate is not a
    /// positive finite number, and with [`ConfigError::FloorAboveCeiling`] if `floor` is
    /// above `ceiling`.
    ///
    /// # Examples
    ///
    /// ```
    /// use paceline::{Gate, RateLimited};
    ///
    /// # #[derive(Debug)] struct ApiError { status: u16 }
    /// // Start at 40 calls per second; never below 1 or above 100.
    /// let gate = Gate::builder(|e: &ApiError| (e.status == 429).then(RateLimited::new))
    ///     .rate(40.0)
    ///     .adaptive(1.0, 100.0)
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(gate.stats().rate, Some(40.0));
    /// ```
    pub fn adaptive(mut self, floor: f64, ceiling: f64) -> Self {
        let start = self.rate.map_or(ceiling, |setting| setting.start);
        self.rate = Some(RateSetting {
            start,
            floor,
            ceiling,
            adaptive: true,
        });
        self
    }

    /// Whether a gate told no [`rate`](Self::rate) finds one when a throttle says nothing of
    /// the limit. Default `true`.
    ///
    /// A gate told nothing calls as fast as its in-flight limit lets it. When the server
    /// refuses a call and says nothing of its limit (no Retry-After, no quota announced, and
    /// none announced before), backing off alone does not find the limit: each backoff ends
    /// with a wave of calls that spends at once what the server refilled meanwhile, and the
    /// backoff grows with every wave. So the first such throttle starts an
    /// [`adaptive`](Self::adaptive) rate from what the gate saw succeed: the calls that
    /// succeeded since its first start, over the time until calls resume. From then on each
    /// gate-wide throttle cuts that rate as an adaptive one's, and also measures what the
    /// server let through since the first (a limit that refills steadily lets about its rate
    /// through, and never much more): a rate above that comes down to it and settles there.
    /// The rate found shows in [`GateStats::rate`](crate::GateStats::rate), and
    /// [`Gate::set_rate`](crate::Gate::set_rate) sets it as an adaptive gate's.
    ///
    /// A gate with a [`store`](Self::store) finds none (each process would find its own):
    /// give a fleet a rate, or an adaptive one. `false` keeps a gate told nothing unpaced
    /// whatever the server answers: only backoffs hold its calls.
    ///
    /// # Examples
    ///
    /// ```
    /// use paceline::{Gate, RateLimited};
    ///
    /// # #[derive(Debug)] struct ApiError { status: u16 }
    /// // Backoffs only, whatever the server answers.
    /// let gate = Gate::builder(|e: &ApiError| (e.status == 429).then(RateLimited::new))
    ///     .find_rate(false)
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(gate.stats().rate, None);
    /// ```
    pub fn find_rate(mut self, find: bool) -> Self {
        self.find_rate = find;
        self
    }

    /// The exponential backoff for throttles without Retry-After: `base * 2^k`, at most `cap`.
    /// Default 100 ms and 30 s.
    ///
    /// A Retry-After at least as long as the next `base * 2^k` is waited out whole and leaves
    /// `k` as it is; a shorter one (a zero from a server that rounds its seconds down, a date
    /// already past) counts as a throttle without one, `k` grows, and the wait is the longer
    /// of the two, so a streak of them backs off as the schedule does.
    ///
    /// A throttle of a call that was on the wire when the backoff last grew (calls refused
    /// together, for one overrun) leaves `k` as it is and takes only its Retry-After. A gate
    /// whose rate adapts (see [`adaptive`](Self::adaptive) and
    /// [`find_rate`](Self::find_rate)) backs off at most 1 s for a throttle without
    /// Retry-After, whatever `cap` is: the rate, cut at each throttle, keeps it under the
    /// limit.
    pub fn backoff(mut self, base: Duration, cap: Duration) -> Self {
        self.backoff_base = base;
        self.backoff_cap = cap;
        self
    }

    /// How the backoff is randomised. Default [`Jitter::Full`].
    pub fn jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }

    /// After this many successes in a row, the backoff's exponent steps back down by one.
    /// Default 10.
    pub fn decay_after(mut self, successes: u32) -> Self {
        self.decay_after = successes;
        self
    }

    /// Adds a budget the gate keeps to: at most so many units of a dimension per window (see
    /// [`Budget`]). Call it once for each: requests and tokens a minute, requests a day. A
    /// call starts only when every budget it draws from has room, beside the gate's rate,
    /// in-flight limit and the budgets servers announce ([`Gate::observe_all`]).
    ///
    /// With a [store](GateBuilder::store), the budgets are this process's: a fleet shares its
    /// rate and announced quota, not these yet.
    ///
    /// [`Gate::observe_all`]: crate::Gate::observe_all
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use paceline::{Budget, Dimension, Gate, RateLimited, Window};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// // A bucket of 2 requests, refilled at 2 a second.
    /// let gate = Gate::builder(|_: &()| Some(RateLimited::new()))
    ///     .budget(Budget::per_second(Dimension::REQUESTS, 2).window(Window::Refilling))
    ///     .build()
    ///     .unwrap();
    /// let start = tokio::time::Instant::now();
    /// let mut starts = Vec::new();
    /// for _ in 0..4 {
    ///     starts.push(gate.call(|| async { Ok::<_, ()>(start.elapsed()) }).await.unwrap());
    /// }
    /// // A burst of two, then one every half second.
    /// let ms = Duration::from_millis;
    /// assert_eq!(starts, [ms(0), ms(0), ms(500), ms(1_000)]);
    /// # }
    /// ```
    pub fn budget(mut self, budget: Budget) -> Self {
        self.budgets.push(budget);
        self
    }

    /// Seeds the jitter, for runs that repeat exactly.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Keeps the state that a fleet of processes shares in `store` (see
    /// `GateBuilder::store`, with the `redis` feature).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn fleet(mut self, store: Arc<dyn FleetStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// Checks the settings, and makes the state a gate built from them shares (see
    /// `GateBuilder::build`, beside the gate).
    pub(super) fn into_shared(self) -> Result<Shared<E>, ConfigError> {
        let max_in_flight = in_flight_limit(self.max_in_flight)?;
        if self.backoff_base > self.backoff_cap {
            return Err(ConfigError::BaseAboveCap);
        }
        if self.decay_after == 0 {
            return Err(ConfigError::ZeroDecay);
        }
        let rate = match self.rate {
            None => None,
            Some(RateSetting {
                start,
                floor,
                ceiling,
                adaptive,
            }) => {
                for (which, value) in [("start", start), ("floor", floor), ("ceiling", ceiling)] {
                    rate_value(which, value)?;
                }
                if floor > ceiling {
                    return Err(ConfigError::FloorAboveCeiling { floor, ceiling });
                }
                Some(if adaptive {
                    CallRate::Adaptive(AdaptiveRate::new(start, floor, ceiling))
                } else {
                    CallRate::Fixed(start)
                })
            }
        };
        let schedule = BackoffSchedule::new(
            self.backoff_base.min(MAX_WAIT),
            self.backoff_cap.min(MAX_WAIT),
            self.jitter,
            self.decay_after,
        );
        let fleet = self.store.map(Fleet::new);
        // A paced gate with a store reserves each call's slot in the fleet's budget: one
        // reservation at a time per process, so that a backoff begun elsewhere reaches this
        // process's next call.
        let serial = fleet.is_some() && rate.is_some();
        // A gate with budgets reads the clock for each start, as one with a rate does.
        let paced = rate.is_some() || !self.budgets.is_empty();
        let metrics = GateMetrics::new(&self.name, rate.as_ref().map(CallRate::per_second));
        let metrics = if fleet.is_some() {
            metrics.with_store(&self.name)
        } else {
            metrics
        };
        let metrics = match self.max_queued {
            Some(_) => metrics.with_bound(&self.name),
            None => metrics,
        };
        let metrics = match self.scope_labels {
            Some(scopes) => metrics.with_scope_labels(&self.name, scopes),
            None => metrics,
        };
        let find_rate = self.find_rate && fleet.is_none();
        let core = Core::new(Settings {
            max_in_flight,
            max_queued: self.max_queued,
            max_retries: self.max_retries,
            rate,
            find_rate,
            quota_reserve: self.quota_reserve,
            schedule,
            seed: self.seed,
            serial,
            per_scope: self.per_scope,
            budgets: self.budgets,
            policies: self.policies,
            #[cfg(not(test))]
            fleet_quota: fleet.is_some(),
            #[cfg(test)]
            fleet_quota: fleet.is_some() || self.fleet_quota,
        });
        Ok(Shared::new(
            core,
            max_in_flight,
            paced,
            self.classify,
            self.name,
            metrics,
            fleet,
        ))
    }
}

/// `n` as an in-flight limit, if it can work: checked alike when a gate is built and when
/// [`Gate::set_max_in_flight`](crate::Gate::set_max_in_flight) changes it.
pub(super) fn in_flight_limit(n: usize) -> Result<usize, ConfigError> {
    match n {
        0 => Err(ConfigError::ZeroInFlight),
        n => Ok(n),
    }
}

/// `value` as the rate's `which` (`"start"`, `"floor"` or `"ceiling"`), if it is a positive,
/// finite number of calls per second: checked alike when a gate is built and when
/// [`Gate::set_rate`](crate::Gate::set_rate) changes it.
pub(super) fn rate_value(which: &'static str, value: f64) -> Result<f64, ConfigError> {
    if value.is_finite() && value > 0.0 {
        Ok(value)
    } else {
        Err(ConfigError::InvalidRate { which, value })
    }
}
