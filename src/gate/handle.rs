//! The gate users hold: [`Gate`], cheap to clone, and every way to make a call through it.

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::sync::Arc;

use tokio::time::Instant;

use super::builder::GateBuilder;
use super::builder::{in_flight_limit, rate_value};
use super::call::{Arrival, Turn};
use super::classify::{RateLimited, Scope};
use super::dimensions::Cost;
use super::ended::{ActualBy, ActualCost, Estimated};
use super::options::{CallOptions, Deadline, DrawsOf, Terms};
use super::quota::{Announcement, Dimension, Quota};
use super::scopes::ScopeLimits;
use super::state::Shared;
use super::stats::GateStats;
use super::unheld::Unheld;
use crate::error::{ConfigError, Error};
use crate::metrics::Trace;

/// The gate for calls to one remote API, shared by every stream and task that calls it.
///
/// Cheap to clone (an `Arc`); clones are the same gate. Without a store, the gate does all
/// its work inside its callers' futures: it has no task and no thread of its own. With a
/// [`RedisStore`](crate::RedisStore), a call start waits for Redis inside the call's future,
/// and telling the fleet of a throttle or of a new rate runs as a short task spawned on the
/// caller's tokio runtime, so that the call that learnt it is not held up.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use paceline::{Gate, RateLimited};
///
/// # #[derive(Debug)]
/// struct ApiError { status: u16 }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let gate = Gate::builder(|e: &ApiError| (e.status == 429).then(RateLimited::new))
///     .max_in_flight(8)
///     .rate(20.0) // call starts at least 50 ms apart
///     .build()
///     .unwrap();
/// let start = tokio::time::Instant::now();
/// for _ in 0..3 {
///     gate.call(|| async { Ok::<_, ApiError>(()) }).await.unwrap();
/// }
/// assert_eq!(start.elapsed(), Duration::from_millis(100));
/// # }
/// ```
pub struct Gate<E> {
    shared: Arc<Shared<E>>,
}

impl<E> Clone for Gate<E> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<E> fmt::Debug for Gate<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.shared, f)
    }
}

impl<E> Gate<E> {
    /// Starts building a gate whose calls fail with errors of type `E`; `classify` says which
    /// of them mean "rate-limited".
    pub fn builder(
        classify: impl Fn(&E) -> Option<RateLimited> + Send + Sync + 'static,
    ) -> GateBuilder<E> {
        GateBuilder::new(Box::new(classify))
    }

    /// The gate's name ([`GateBuilder::name`]), or
    /// [`DEFAULT_GATE_NAME`](crate::metrics::DEFAULT_GATE_NAME) if it was given none.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// A snapshot of the gate's counters and state.
    ///
    /// # Examples
    ///
    /// ```
    /// use paceline::{Gate, RateLimited};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let gate = Gate::builder(|e: &u16| (*e == 429).then(RateLimited::new))
    ///     .max_retries(0)
    ///     .build()
    ///     .unwrap();
    /// let _ = gate.call(|| async { Ok::<_, u16>(()) }).await;
    /// let _ = gate.call(|| async { Err::<(), _>(404) }).await;
    /// let _ = gate.call(|| async { Err::<(), _>(429) }).await;
    /// let stats = gate.stats();
    /// assert_eq!((stats.calls, stats.successes, stats.other_errors), (3, 1, 1));
    /// assert_eq!((stats.throttles, stats.gave_up), (1, 1));
    /// assert!(stats.backoff_until.is_some(), "the throttle began a backoff");
    /// # }
    /// ```
    pub fn stats(&self) -> GateStats {
        self.shared.stats()
    }

    /// Makes one call through the gate, retrying it while it is throttled.
    ///
    /// `make` builds the call's future for each attempt. The call starts when the gate lets
    /// it (in its turn, within the in-flight limit, the backoffs and the rate); a
    /// throttled call is retried first when the backoff lifts, up to the retry limit, and
    /// then fails with [`Error::GaveUp`]. Any other error comes back at once as
    /// [`Error::Call`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future gives back its place in line or its slot; other callers carry on.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use paceline::{Error, Gate, RateLimited};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let gate = Gate::builder(|e: &&str| {
    ///     (*e == "slow down").then(|| RateLimited::new().retry_after(Duration::from_secs(2)))
    /// })
    /// .build()
    /// .unwrap();
    /// let start = tokio::time::Instant::now();
    /// let mut tries = 0;
    /// let answer = gate
    ///     .call(|| {
    ///         tries += 1;
    ///         let first = tries == 1;
    ///         async move { if first { Err("slow down") } else { Ok(42) } }
    ///     })
    ///     .await;
    /// // Throttled once, tried again when the server's 2 s were over.
    /// assert_eq!(answer, Ok(42));
    /// assert_eq!(start.elapsed(), Duration::from_secs(2));
    /// // Other errors come back at once, unchanged.
    /// let missing = gate.call(|| async { Err::<(), _>("not found") }).await;
    /// assert_eq!(missing, Err(Error::Call("not found")));
    /// # }
    /// ```
    // Not an `async fn`: the attempts' future is handed back as it is, with no future around
    // it whose state is checked, and dropped, once more at each call's end.
    pub fn call<R, Fut>(
        &self,
        make: impl FnMut() -> Fut,
    ) -> impl Future<Output = Result<R, Error<E>>>
    where
        Fut: Future<Output = Result<R, E>>,
    {
        let terms = Terms::<Infallible>::default();
        self.call_scoped(Box::default(), terms, Estimated, make)
    }

    /// Like [`Gate::call`], for a call that belongs to `scopes` (say, an account): it waits for
    /// the gate-wide backoff and for its own scopes' backoffs only, and takes its turn in line
    /// by its first scope.
    ///
    /// # Turns
    ///
    /// Calls that wait start scope by scope in turn, by their first scope (calls of no scope
    /// take their turns together, as one more scope), so that one scope's backlog holds back
    /// another scope's call by about one call of each scope with calls waiting, not by the
    /// whole backlog. The turns count cost: a scope whose calls cost 3 units each starts one
    /// for every three of a scope whose calls cost 1. Within a scope, calls start in the
    /// order they came, and a throttled call's retry goes before every first attempt. A
    /// scope with no call waiting costs the gate nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use paceline::{Gate, RateLimited};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// // The server limits each account on its own and says which one is limited.
    /// let gate = Gate::builder(|account: &String| {
    ///     Some(RateLimited::new().retry_after(Duration::from_secs(60)).scope(account.as_str()))
    /// })
    /// .build()
    /// .unwrap();
    /// let start = tokio::time::Instant::now();
    /// let mut tries = 0;
    /// let busy = gate.call_in(["acct-1"], || {
    ///     tries += 1;
    ///     let first = tries == 1;
    ///     async move { if first { Err("acct-1".to_owned()) } else { Ok("acct-1 done") } }
    /// });
    /// let other = async {
    ///     tokio::time::sleep(Duration::from_secs(1)).await;
    ///     let done = gate.call_in(["acct-2"], || async { Ok("acct-2 done") }).await;
    ///     (done, start.elapsed())
    /// };
    /// let (busy, (other, other_at)) = futures::join!(busy, other);
    /// // acct-2's call went at 1 s, while acct-1 waited out its minute.
    /// assert_eq!((other, other_at), (Ok("acct-2 done"), Duration::from_secs(1)));
    /// assert_eq!(busy, Ok("acct-1 done"));
    /// assert_eq!(start.elapsed(), Duration::from_secs(60));
    /// # }
    /// ```
    pub async fn call_in<R, Fut>(
        &self,
        scopes: impl IntoIterator<Item = impl Into<Scope>>,
        make: impl FnMut() -> Fut,
    ) -> Result<R, Error<E>>
    where
        Fut: Future<Output = Result<R, E>>,
    {
        let scopes = scopes.into_iter().map(Into::into).collect();
        let terms = Terms::<Infallible>::default();
        self.call_scoped(scopes, terms, Estimated, make).await
    }

    /// Like [`Gate::call`], for a call described by `options`: its scopes, and by when it
    /// must start (else it fails with [`Error::Deadline`], at once if the gate knows that it
    /// cannot start it in time).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use paceline::{CallOptions, Error, Gate, RateLimited};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let gate = Gate::builder(|e: &&str| {
    ///     (*e == "slow down").then(|| RateLimited::new().retry_after(Duration::from_secs(30)))
    /// })
    /// .build()
    /// .unwrap();
    /// // A throttle: every call waits 30 s.
    /// let _ = gate.call(|| async { Err::<(), _>("slow down") }).await;
    /// let start = tokio::time::Instant::now();
    /// let hurried = CallOptions::new().max_wait(Duration::from_secs(5));
    /// let answer = gate.call_with(hurried, || async { Ok::<_, &str>(()) }).await;
    /// // It failed at once, naming when the gate could have started it.
    /// let Err(Error::Deadline { earliest, last: None }) = answer else { panic!() };
    /// assert_eq!(*earliest - start, Duration::from_secs(30));
    /// assert_eq!(start.elapsed(), Duration::ZERO);
    /// # }
    /// ```
    pub async fn call_with<R, Fut>(
        &self,
        options: CallOptions,
        make: impl FnMut() -> Fut,
    ) -> Result<R, Error<E>>
    where
        Fut: Future<Output = Result<R, E>>,
    {
        let terms = options.terms(Instant::now);
        self.call_scoped(options.scopes, terms, Estimated, make)
            .await
    }

    /// Like [`call_with`](Self::call_with), for a call whose real cost is known only from
    /// its response (the tokens an LLM call used, the points a GraphQL query cost): `actual`
    /// reads it from the call's value, and the gate settles the difference with the
    /// [cost](CallOptions::cost) the call started with, as the call ends.
    ///
    /// What it cost more is charged: the next start waits for it at the rate, and it comes
    /// off what is left of the server's announced quota. What it cost less is given back: to
    /// the rate if no call started after this one, and to the announced quota's window if
    /// it is still the one the call spent from and no announcement has told what is left
    /// since the call started (the server's word then counts the call at its real cost
    /// already, and giving back as well would overspend). A throttled or failed attempt
    /// settles nothing: it cost what it started with.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use paceline::{CallOptions, Gate, RateLimited};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// // 1,000 tokens a second; a completion is estimated at 800 tokens and used 200.
    /// let gate = Gate::builder(|_: &()| Some(RateLimited::new())).rate(1_000.0).build().unwrap();
    /// let start = tokio::time::Instant::now();
    /// let estimate = CallOptions::new().cost(800);
    /// let used = gate
    ///     .call_settled(estimate.clone(), || async { Ok::<u64, ()>(200) }, |tokens| *tokens)
    ///     .await
    ///     .unwrap();
    /// assert_eq!(used, 200);
    /// // The next call waits for the 200 tokens spent, not the 800 estimated: 0.2 s.
    /// gate.call_with(estimate, || async { Ok::<_, ()>(()) }).await.unwrap();
    /// assert_eq!(start.elapsed(), Duration::from_millis(200));
    /// # }
    /// ```
    pub async fn call_settled<R, Fut, C>(
        &self,
        options: CallOptions,
        make: impl FnMut() -> Fut,
        actual: impl Fn(&R) -> C,
    ) -> Result<R, Error<E>>
    where
        Fut: Future<Output = Result<R, E>>,
        C: Into<Cost>,
    {
        let terms = options.terms(Instant::now);
        self.call_scoped(options.scopes, terms, ActualBy(&actual), make)
            .await
    }

    /// Settles the cost of a call that turned out to cost `actual` units where it started
    /// with `estimated` ([`CallOptions::cost`]): the real cost of an LLM call (tokens used)
    /// or of a GraphQL query (points) is often known only from the response. What it cost
    /// more is charged to the rate's pace (the next start waits an interval more for each
    /// unit) and to what is left of the server's announced quota.
    ///
    /// What it cost less is not given back: the gate cannot tell from here which call this
    /// was, whether calls started since, or whether the server's window moved on, and giving
    /// units back to the wrong one would overspend. [`call_settled`](Self::call_settled)
    /// knows the call, and gives back.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use paceline::{CallOptions, Gate, RateLimited};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// // 1,000 tokens per second; a completion is estimated at 500 tokens.
    /// let gate = Gate::builder(|_: &()| Some(RateLimited::new())).rate(1_000.0).build().unwrap();
    /// let start = tokio::time::Instant::now();
    /// let estimate = CallOptions::new().cost(500);
    /// gate.call_with(estimate.clone(), || async {
    ///     let used = 1_500; // as the response said
    ///     gate.settle(500, used);
    ///     Ok::<_, ()>(())
    /// })
    /// .await
    /// .unwrap();
    /// // The next call waits for the 1,500 tokens spent: 1.5 s.
    /// gate.call_with(estimate, || async { Ok::<_, ()>(()) }).await.unwrap();
    /// assert_eq!(start.elapsed(), Duration::from_millis(1_500));
    /// # }
    /// ```
    pub fn settle(&self, estimated: u64, actual: u64) {
        if actual > estimated {
            self.shared.charge(actual - estimated);
        }
    }

    /// Sets the in-flight limit while the gate runs, for an operator who turns a knob or a
    /// server that announces a new plan: at most `n` calls in progress from now on.
    ///
    /// Calls already waiting see it at once. A raised limit wakes the line: as many waiting
    /// calls start as the new slots (and the rest of the gate: backoffs, the rate, the
    /// announced quota) allow. A lowered one stops no call: those in flight finish, and no
    /// call starts until fewer than `n` are in flight. The [mapped
    /// streams](crate::PacelineExt::throttled_map) keep the new limit's number of calls in
    /// progress from their next poll. With a [store](GateBuilder::store), the limit is this
    /// process's, as it always is.
    ///
    /// # Errors
    ///
    /// [`ConfigError::ZeroInFlight`] if `n` is zero, as [`GateBuilder::max_in_flight`] would
    /// fail to build; the limit is left as it was.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use paceline::{Gate, RateLimited};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let gate = Gate::builder(|_: &()| Some(RateLimited::new())).max_in_flight(1).build().unwrap();
    /// let start = tokio::time::Instant::now();
    /// let call = || {
    ///     gate.call(|| async {
    ///         tokio::time::sleep(Duration::from_secs(1)).await;
    ///         Ok::<_, ()>(start.elapsed())
    ///     })
    /// };
    /// let raise = async {
    ///     tokio::time::sleep(Duration::from_millis(100)).await;
    ///     gate.set_max_in_flight(3).unwrap();
    /// };
    /// let (a, b, c, ()) = futures::join!(call(), call(), call(), raise);
    /// // One slot: the second and third waited, until the limit rose at 100 ms.
    /// let ms = Duration::from_millis;
    /// assert_eq!((a, b, c), (Ok(ms(1000)), Ok(ms(1100)), Ok(ms(1100))));
    /// assert!(gate.set_max_in_flight(0).is_err());
    /// # }
    /// ```
    pub fn set_max_in_flight(&self, n: usize) -> Result<(), ConfigError> {
        self.shared.set_max_in_flight(in_flight_limit(n)?);
        Ok(())
    }

    /// Sets the rate call starts are paced at while the gate runs, for a server that
    /// announces a new plan or an operator who turns a knob: starts at least
    /// `1 / per_second` apart from now on (each spaced from the start before it, for each
    /// unit that start spent, as [`GateBuilder::rate`] says).
    ///
    /// Calls already waiting see it at once: the next start is due the new interval after
    /// the last start, sooner for a raised rate (the waiting call is woken for it) and later
    /// for a lowered one. Calls in flight go on.
    ///
    /// - **An adaptive rate** ([`GateBuilder::adaptive`]) takes `per_second` as its new plan:
    ///   it becomes the rate and the ceiling (the floor stays, or comes down to
    ///   `per_second` if it was above it), and what throttles taught of the old limit is
    ///   forgotten, as for a gate built with `.rate(per_second).adaptive(floor,
    ///   per_second)`; the rate then adapts below it as before.
    /// - **A gate built without a rate** keeps none: it fails with
    ///   [`ConfigError::Unpaced`]. Such a gate reads no clock for a call that nothing holds,
    ///   and a rate that could appear at any moment would cost every call that; build the
    ///   gate with a (generous) rate to change it later. For the same reason pacing cannot
    ///   be turned off: set a rate high enough to hold nothing back instead.
    /// - **With a [store](GateBuilder::store)** the change is this process's own: set it on
    ///   every process of the fleet (each reading the same announcement or setting). With a
    ///   fixed rate, each start spaces the fleet's next one by the interval of the process
    ///   that made it, so the fleet keeps to the new rate once every process has it. With an
    ///   adaptive rate, the fleet shares one rate: this process starts no faster than its new
    ///   rate, holds a rate it takes up from the fleet under it, and shares what it learns
    ///   as before (which may pull the fleet's rate towards its own, while the other
    ///   processes keep their ceilings). A rate set once for the whole fleet, in Redis, is
    ///   not there yet.
    ///
    /// # Errors
    ///
    /// [`ConfigError::InvalidRate`] (`which` is `"start"`) if `per_second` is not a positive
    /// finite number, as [`GateBuilder::rate`] would fail to build, and
    /// [`ConfigError::Unpaced`] for a gate built without a rate; the rate is left as it was.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use paceline::{ConfigError, Gate, RateLimited};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let gate = Gate::builder(|_: &()| Some(RateLimited::new())).rate(1.0).build().unwrap();
    /// let start = tokio::time::Instant::now();
    /// let call = || gate.call(|| async { Ok::<_, ()>(start.elapsed()) });
    /// let replan = async {
    ///     tokio::time::sleep(Duration::from_millis(100)).await;
    ///     // The server announces a plan of 10 calls a second.
    ///     gate.set_rate(10.0).unwrap();
    /// };
    /// let (a, b, ()) = futures::join!(call(), call(), replan);
    /// // The second call was due at 1 s; at 10 a second it went at 100 ms.
    /// let ms = Duration::from_millis;
    /// assert_eq!((a, b), (Ok(ms(0)), Ok(ms(100))));
    /// assert_eq!(gate.stats().rate, Some(10.0));
    /// assert!(matches!(gate.set_rate(0.0), Err(ConfigError::InvalidRate { .. })));
    ///
    /// let unpaced = Gate::builder(|_: &()| Some(RateLimited::new())).build().unwrap();
    /// assert_eq!(unpaced.set_rate(10.0), Err(ConfigError::Unpaced));
    /// # }
    /// ```
    pub fn set_rate(&self, per_second: f64) -> Result<(), ConfigError> {
        let per_second = rate_value("start", per_second)?;
        match self.shared.set_rate(per_second) {
            Some(_) => Ok(()),
            None => Err(ConfigError::Unpaced),
        }
    }

    /// Sets the limits of one scope while the gate runs, for a tenant that changes plan or a
    /// model whose limit the provider announces: they take the place of what
    /// [`GateBuilder::per_scope`] or [`GateBuilder::per_scope_with`] gave it, and are kept
    /// until set again.
    ///
    /// Calls already waiting see it at once: those held for one of the scope's slots ask
    /// again, and its next start is spaced from its last by the new rate. Calls in flight go
    /// on. With a [store](GateBuilder::store), the limits are this process's.
    ///
    /// # Errors
    ///
    /// [`ConfigError::NoScopeLimits`] for a gate built without limits per scope, which keeps
    /// no count of its scopes' calls (build it with `per_scope(ScopeLimits::new())` to set
    /// limits later).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use paceline::{Gate, RateLimited, ScopeLimits};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let gate = Gate::builder(|_: &()| Some(RateLimited::new()))
    ///     .per_scope(ScopeLimits::new().max_in_flight(1))
    ///     .build()
    ///     .unwrap();
    /// let start = tokio::time::Instant::now();
    /// let call = || {
    ///     gate.call_in(["tenant-7"], move || async move {
    ///         tokio::time::sleep(Duration::from_secs(1)).await;
    ///         Ok::<_, ()>(start.elapsed())
    ///     })
    /// };
    /// let upgrade = async {
    ///     tokio::time::sleep(Duration::from_millis(100)).await;
    ///     gate.set_scope_limits("tenant-7", ScopeLimits::new().max_in_flight(2)).unwrap();
    /// };
    /// let (a, b, ()) = futures::join!(call(), call(), upgrade);
    /// // The second call waited for the tenant's one slot, until its plan grew at 100 ms.
    /// let ms = Duration::from_millis;
    /// assert_eq!((a, b), (Ok(ms(1_000)), Ok(ms(1_100))));
    /// # }
    /// ```
    pub fn set_scope_limits(
        &self,
        scope: impl Into<Scope>,
        limits: ScopeLimits,
    ) -> Result<(), ConfigError> {
        if self.shared.set_scope_limits(&scope.into(), limits) {
            Ok(())
        } else {
            Err(ConfigError::NoScopeLimits)
        }
    }

    /// The rate calls of `scope` start at now, in calls a second: the one its
    /// [limits](GateBuilder::per_scope) give it, or, if it adapts, the one it has found.
    /// `None` if the scope has no rate, or the gate keeps no state of it (a gate without
    /// limits per scope, or a scope idle and forgotten, which starts afresh when used).
    pub fn scope_rate(&self, scope: impl Into<Scope>) -> Option<f64> {
        self.shared.scope_rate(&scope.into())
    }

    /// The earliest a new call (of no scope) could start, from now, spending nothing: now,
    /// or the end of a backoff, or the next start that the rate or the announced quota
    /// allows, behind the calls already waiting. A lower bound: a call waits longer when
    /// every slot is taken, until a call in flight ends.
    pub fn earliest_start(&self) -> Instant {
        self.shared.earliest_start()
    }

    /// The attempts of [`Gate::call`] and its kin, on scopes already collected: `call`
    /// passes an empty box, which costs no allocation and no generic `collect`.
    #[allow(clippy::manual_async_fn)] // see the comment below
    fn call_scoped<R, Fut, D: Deadline>(
        &self,
        scopes: Box<[Scope]>,
        terms: Terms<D>,
        actual: impl ActualCost<R>,
        mut make: impl FnMut() -> Fut,
    ) -> impl Future<Output = Result<R, Error<E>>>
    where
        Fut: Future<Output = Result<R, E>>,
    {
        // Not an `async fn`: that keeps a copy of each argument beside the argument itself
        // for as long as the call runs, and each waiting call's future would be the larger
        // for it (10,000 waiting calls touch all of theirs).
        async move {
            let (shared, trace) = (&*self.shared, Trace::begin(&self.shared.name));
            let mut turn = 'first: {
                // A call that nothing holds runs in this future; any other arrives at the
                // gate, and its future is made only if the gate lets it in. (Each bound in a
                // statement of its own, so that a waiting call's future keeps no room for
                // what the other way needed.)
                let first = (terms.cost, terms.priority.into());
                // A call that names other dimensions ends through the state that counts them.
                let unheld = terms.draws.draws().is_none();
                let sent = unheld.then(|| Unheld::start(shared, &scopes, first, &trace));
                let Some(sent) = sent.flatten() else {
                    let arrival = match Arrival::traced(shared, scopes, terms, actual, trace) {
                        Ok(arrival) => arrival,
                        Err(refused) => return Err(refused.into_error()),
                    };
                    break 'first arrival.attempt(make()).await;
                };
                // Armed before the user's future is made: if making it panics, the slot is
                // freed.
                let unheld = Unheld::armed(shared, sent);
                unheld.finish(make().await, (scopes, terms, trace, actual))
            };
            loop {
                match turn {
                    Turn::Ended(ended) => return ended.into_result(),
                    Turn::Again(retry) => turn = retry.attempt(make()).await,
                }
            }
        }
    }

    /// Takes in what the server announced of its quota in a response (success or throttle):
    /// from then on the gate spends no more than is left of the server's window, spread
    /// evenly until it resets. It is the one budget of [`Dimension::UNITS`] the server
    /// announced without naming a policy: `gate.observe(quota)` is
    /// `gate.observe_all([Announcement::new(Dimension::UNITS, quota)])`, and keeps the rules
    /// [`Gate::observe_all`] gives. [`Gate::budget_left`] of [`Dimension::UNITS`] tells what
    /// is left.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use paceline::{Dimension, Gate, Quota, RateLimited};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let gate = Gate::builder(|_: &()| Some(RateLimited::new())).build().unwrap();
    /// // A response said: 3 left, the window resets in 3 s. The gate keeps 1 in reserve.
    /// gate.observe(Quota::new(3, Duration::from_secs(3)));
    /// assert_eq!(gate.budget_left(&Dimension::UNITS), Some(2));
    /// let start = tokio::time::Instant::now();
    /// let mut starts = Vec::new();
    /// for _ in 0..3 {
    ///     starts.push(gate.call(|| async { Ok::<_, ()>(start.elapsed()) }).await.unwrap());
    /// }
    /// // Two spread over the window; the third waited for the reset. Its answer announced
    /// // nothing, so the gate no longer counts on a quota.
    /// let ms = Duration::from_millis;
    /// assert_eq!(starts, [ms(0), ms(1500), ms(3000)]);
    /// assert_eq!(gate.budget_left(&Dimension::UNITS), None);
    /// # }
    /// ```
    pub fn observe(&self, quota: Quota) {
        self.observe_all([Announcement::new(Dimension::UNITS, quota)]);
    }

    /// Takes in every budget a server announced in a response (with the `http` feature,
    /// `paceline::http::announced` reads them from its headers): each dimension's and each
    /// policy's budget apart, so that a call waits until every announced budget it draws
    /// from has room (requests and tokens a minute, a second's and a day's policy), beside
    /// the [budgets](GateBuilder::budget) told the gate. A call draws one unit of
    /// [`Dimension::REQUESTS`], its cost of [`Dimension::UNITS`], and of other dimensions
    /// what [`CallOptions::cost_in`] names.
    ///
    /// Call it where the response is read, inside the call's future, so that the gate knows
    /// the calls in flight beside it (which the server may not have counted yet, and which
    /// the gate therefore takes off what is left), and dates the announcement by that call's
    /// start. The rules, the same for every budget (and for a scope's, through
    /// [`Gate::observe_all_in`]):
    ///
    /// - The gate spends what the server said is left, less the
    ///   [reserve](GateBuilder::quota_reserve) and less what its other calls in flight draw
    ///   of the budget's dimension. What is left is spread evenly until the reset, the first
    ///   call at once; with nothing left, calls wait for the reset. This holds beside the
    ///   gate's own [rate](GateBuilder::rate), fixed or adaptive: a call waits for both.
    /// - Answers come back out of order, so a newer announcement wins over an older one:
    ///   one whose window resets more than a second later is of a newer window and replaces
    ///   what the gate knew; one resetting more than a second earlier is of an older window
    ///   and is ignored; within one window (servers round resets to whole seconds) the
    ///   lowest remaining wins, since a window's count only goes down. An announcement that
    ///   the window resets now says nothing of the next and is ignored.
    /// - When the reset passes, the gate does not assume that the server's new window has
    ///   begun (the server rounded its reset, and the two clocks differ): one call goes,
    ///   the others wait for an announcement. If that call ends without one, the server no
    ///   longer announces the budget, and the gate forgets it.
    /// - A window is not always fixed: at a moving window's reset only its oldest requests
    ///   leave it, and a bucket refills evenly (see
    ///   [`Announcement::window`](crate::Announcement#structfield.window)). When the answers
    ///   show a moving window (one says less is left than a fixed window could, or more than
    ///   an earlier answer of the same reset), the gate keeps the budget as a sliding window
    ///   from then on, as long as the answers show. The generic quota of a gate with a
    ///   [store](GateBuilder::store) (of units, without a policy) is kept as a fixed window,
    ///   as the fleet keeps it.
    /// - A gate with a store shares these budgets with its fleet (see
    ///   [`RedisStore`](crate::RedisStore#budgets-the-server-announced-of-each-dimension)),
    ///   and tells the fleet at once; the call this runs in ends only once the store has it
    ///   (a round trip more, at most the store's timeout), so that a process which stops as
    ///   its last call returns leaves the fleet what that call learnt.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use paceline::{Announcement, CallOptions, Dimension, Gate, Quota, RateLimited};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let gate = Gate::builder(|_: &()| Some(RateLimited::new())).build().unwrap();
    /// // A response said: 100 requests but only 4,000 tokens left, both for 6 s.
    /// let six = Duration::from_secs(6);
    /// gate.observe_all([
    ///     Announcement::new(Dimension::REQUESTS, Quota::new(100, six)),
    ///     Announcement::new(Dimension::TOKENS, Quota::new(4_000, six)),
    /// ]);
    /// assert_eq!(gate.budget_left(&Dimension::TOKENS), Some(4_000));
    /// let start = tokio::time::Instant::now();
    /// let prompt = CallOptions::new().cost_in(Dimension::TOKENS, 1_000);
    /// for _ in 0..3 {
    ///     gate.call_with(prompt.clone(), || async { Ok::<_, ()>(()) }).await.unwrap();
    /// }
    /// // The tokens bind: three prompts spread over the 6 s, 2 s apart (a prompt's worth is
    /// // kept for the call that learns the next window, as the quota reserve grows to the
    /// // largest call).
    /// assert_eq!(start.elapsed(), Duration::from_secs(4));
    /// # }
    /// ```
    pub fn observe_all(&self, announcements: impl IntoIterator<Item = Announcement>) {
        self.shared.observe_all(announcements);
    }

    /// Units of `dimension` that may start now before a budget of it holds a call back: the
    /// least of its [told budgets](GateBuilder::budget) and those announced
    /// ([`Gate::observe_all`]); `None` if it has none.
    pub fn budget_left(&self, dimension: &Dimension) -> Option<u64> {
        self.shared.budget_left(dimension)
    }

    /// The same of `scope`'s budgets.
    #[cfg(test)]
    pub(crate) fn budget_left_in(&self, scope: &Scope, dimension: &Dimension) -> Option<u64> {
        self.shared.budget_left_in(scope, dimension)
    }

    /// Takes in the quota the server announced for one scope (an account, a token, a model),
    /// in the answer to a call of that scope, from inside that call: the scope's calls are
    /// paced by it as [`Gate::observe`] paces the gate's, while the gate's own limits still
    /// hold. It is the scope's budget of [`Dimension::UNITS`]: `gate.observe_in(scope, quota)`
    /// is `gate.observe_all_in(scope, [Announcement::new(Dimension::UNITS, quota)])`. For an API that announces each account's quota (GitHub each token's, Shopify
    /// each store's), beside a gate-wide limit of its own. A scope's throttle that carries a
    /// quota ([`RateLimited::quota`] with [`RateLimited::scope`]) counts for the scope the
    /// same way.
    ///
    /// The scope's state is kept while its window is open, and forgotten once the window has
    /// reset and nothing of the scope is in flight (as idle scopes are; see
    /// [`GateBuilder::per_scope`]).
    ///
    /// # Errors
    ///
    /// [`ConfigError::NoScopeLimits`] for a gate built without limits per scope, which keeps
    /// no state per scope (build it with `per_scope(ScopeLimits::new())` to read quotas
    /// per scope alone); the quota is not taken in.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use paceline::{Gate, Quota, RateLimited, ScopeLimits};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let gate = Gate::builder(|_: &()| Some(RateLimited::new()))
    ///     .per_scope(ScopeLimits::new())
    ///     .build()
    ///     .unwrap();
    /// let start = tokio::time::Instant::now();
    /// let call = |account: &'static str| {
    ///     let gate = &gate;
    ///     gate.call_in([account], move || async move {
    ///         // Each answer says the account has 1 call left in a window of 1 s.
    ///         let quota = Quota::new(1, Duration::from_secs(1));
    ///         gate.observe_in(account, quota).unwrap();
    ///         Ok::<_, ()>(start.elapsed())
    ///     })
    /// };
    /// let (a1, a2, b1) = futures::join!(call("a"), call("a"), call("b"));
    /// let ms = Duration::from_millis;
    /// // a's second call spreads its last unit over a's window; b's goes at once.
    /// assert_eq!((a1, b1), (Ok(ms(0)), Ok(ms(0))));
    /// assert!(a2.unwrap() > ms(0));
    /// # }
    /// ```
    pub fn observe_in(&self, scope: impl Into<Scope>, quota: Quota) -> Result<(), ConfigError> {
        self.observe_all_in(scope, [Announcement::new(Dimension::UNITS, quota)])
    }

    /// Takes in every budget a server announced for `scope` in a response (as
    /// [`Gate::observe_all`] takes the gate's): each dimension's and each policy's apart, the
    /// scope's own, beside its [told budgets](ScopeLimits::budget). A call of the scope
    /// waits until every budget it draws from, the gate's and its scopes', has room; while
    /// one of its scope's holds it, other scopes' calls go ahead. Call it inside the call's
    /// future, as [`Gate::observe_all`] says, whose rules each keeps. A gate with a store
    /// shares them with its fleet as it shares the gate's: every process's calls of the
    /// scope spend one budget of each (see
    /// [`RedisStore`](crate::RedisStore#budgets-the-server-announced-for-a-scope)).
    ///
    /// # Errors
    ///
    /// [`ConfigError::NoScopeLimits`] for a gate built without limits per scope, which keeps
    /// no state per scope; nothing is taken in.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use paceline::{Announcement, CallOptions, Dimension, Gate, Quota, RateLimited, ScopeLimits};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let gate = Gate::builder(|_: &()| Some(RateLimited::new()))
    ///     .per_scope(ScopeLimits::new())
    ///     .build()
    ///     .unwrap();
    /// // Each tenant's key: its answer says 1,000 tokens are left for 6 s.
    /// let six = Duration::from_secs(6);
    /// let left = |n| [Announcement::new(Dimension::TOKENS, Quota::new(n, six))];
    /// gate.observe_all_in("a", left(1_000)).unwrap();
    /// let start = tokio::time::Instant::now();
    /// let prompt = |tenant: &str| CallOptions::new().scopes([tenant]).cost_in(Dimension::TOKENS, 500);
    /// let call = |tenant| gate.call_with(prompt(tenant), || async { Ok::<_, ()>(start.elapsed()) });
    /// let (a1, a2, b1) = futures::join!(call("a"), call("a"), call("b"));
    /// // b's prompt, told of no budget, goes at once beside a's first. a's second waits for
    /// // its window's reset: a prompt's worth is kept for the call that learns the next
    /// // window (the reserve grows to the largest call).
    /// assert_eq!((a1, b1), (Ok(Duration::ZERO), Ok(Duration::ZERO)));
    /// assert_eq!(a2, Ok(six));
    /// # }
    /// ```
    pub fn observe_all_in(
        &self,
        scope: impl Into<Scope>,
        announcements: impl IntoIterator<Item = Announcement>,
    ) -> Result<(), ConfigError> {
        if self.shared.observe_all_in(&scope.into(), announcements) {
            Ok(())
        } else {
            Err(ConfigError::NoScopeLimits)
        }
    }

    /// Takes in `announcements`, announced in the answer to a call of `scope` in flight: on
    /// a gate that keeps its scopes' state, each policy as that scope's, the gate's or both,
    /// by whose it is ([`GateBuilder::policy_of`]); else as the gate's
    /// ([`Gate::observe_all`]). Returns whether a policy that ran out (nothing left) is the
    /// scope's alone, if one did: a refusal of the call is then its scope's, else the gate's.
    /// The front-ends that read announcements say it this way.
    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    pub(crate) fn observe_all_for(
        &self,
        scope: Option<&Scope>,
        announcements: impl IntoIterator<Item = Announcement>,
    ) -> Option<bool> {
        self.shared.observe_all_for(scope, announcements)
    }

    /// What the gate's classifier says of `error`: the tower layer asks it of each response,
    /// since a throttle may come as a response that the gate must see as a failed attempt.
    #[cfg(feature = "tower")]
    pub(crate) fn classify(&self, error: &E) -> Option<RateLimited> {
        (self.shared.classify)(error)
    }

    /// The state every clone of the gate shares, for a front-end's calls.
    pub(crate) fn shared(&self) -> &Arc<Shared<E>> {
        &self.shared
    }

    /// The gate's in-flight limit.
    pub(crate) fn max_in_flight(&self) -> usize {
        self.shared.max_in_flight()
    }
}

impl<E> GateBuilder<E> {
    /// Checks the settings and builds the gate.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the setting that cannot work.
    pub fn build(self) -> Result<Gate<E>, ConfigError> {
        let shared = Arc::new(self.into_shared()?);
        Ok(Gate { shared })
    }
}
