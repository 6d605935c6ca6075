//! The gate for calls to one remote API: an in-flight limit, a backoff shared by every caller,
//! an optional (adaptive) rate, and retries of throttled calls.

pub(crate) mod adaptive;
mod attempt;
mod backoff;
mod map;
mod state;

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

pub use backoff::Jitter;
pub use map::{ScopesOf, ThrottledMap, ThrottledMapUnordered, Unscoped};

use self::adaptive::AdaptiveRate;
pub(crate) use self::attempt::{Attempt, Outcome};
use self::backoff::BackoffSchedule;
use self::state::{Pace, State};
use crate::error::{ConfigError, Error};
use crate::rng::SplitMix64;
use crate::store::Store;

/// A scope a backoff can apply to, such as one account under a developer token.
///
/// Cheap to clone. Built from a `&str` or a `String`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Scope(Arc<str>);

impl Scope {
    /// The scope's name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl From<&str> for Scope {
    fn from(name: &str) -> Self {
        Scope(name.into())
    }
}

impl From<String> for Scope {
    fn from(name: String) -> Self {
        Scope(name.into())
    }
}

/// The classifier's answer for an error that means "rate-limited".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Throttle {
    retry_after: Option<Duration>,
    scope: Option<Scope>,
}

impl Throttle {
    /// A throttle with no Retry-After, for the whole gate: the gate picks the backoff.
    pub fn new() -> Self {
        Self::default()
    }

    /// The server said how long to wait.
    pub fn retry_after(mut self, after: Duration) -> Self {
        self.retry_after = Some(after);
        self
    }

    /// The throttle applies to one scope only; calls outside it carry on.
    pub fn scope(mut self, scope: impl Into<Scope>) -> Self {
        self.scope = Some(scope.into());
        self
    }
}

/// A snapshot of a gate's counters and state, from [`Gate::stats`].
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct GateStats {
    /// Attempts started (retries included).
    pub calls: u64,
    /// Attempts that succeeded.
    pub successes: u64,
    /// Attempts the classifier called throttled.
    pub throttles: u64,
    /// Throttled calls tried again.
    pub retries: u64,
    /// Calls given up after the retry limit.
    pub gave_up: u64,
    /// Attempts that failed with an error that is not a throttle.
    pub other_errors: u64,
    /// Call starts that the [store](GateBuilder::store) held back for a backoff another
    /// gate on its namespace began; each waited for the backoff's end, then asked again.
    pub held_by_fleet: u64,
    /// Call starts that went ahead on this gate's own state alone, because the
    /// [store](GateBuilder::store) did not answer in time.
    pub store_unanswered: u64,
    /// The current rate in calls per second, if the gate paces calls.
    pub rate: Option<f64>,
    /// When the gate-wide backoff ends, if one is running.
    pub backoff_until: Option<Instant>,
    /// Calls in progress.
    pub in_flight: usize,
    /// Calls waiting to start.
    pub queued: usize,
}

/// The gate for calls to one remote API, shared by every stream and task that calls it.
///
/// Cheap to clone (an `Arc`); clones are the same gate. It needs no background task.
pub struct Gate<E> {
    shared: Arc<Shared<E>>,
}

type Classifier<E> = dyn Fn(&E) -> Option<Throttle> + Send + Sync;

struct Shared<E> {
    state: Mutex<State>,
    classify: Box<Classifier<E>>,
    max_retries: u32,
    /// Where the fleet's share of the state lives, if beyond this process.
    store: Option<Arc<dyn Store>>,
}

impl<E> Shared<E> {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
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
        f.debug_struct("Gate")
            .field("state", &*self.shared.lock())
            .finish_non_exhaustive()
    }
}

impl<E> Gate<E> {
    /// Starts building a gate whose calls fail with errors of type `E`; `classify` says which
    /// of them mean "rate-limited".
    pub fn builder(
        classify: impl Fn(&E) -> Option<Throttle> + Send + Sync + 'static,
    ) -> GateBuilder<E> {
        GateBuilder {
            classify: Box::new(classify),
            max_in_flight: 16,
            max_retries: 5,
            rate: None,
            backoff_base: Duration::from_millis(100),
            backoff_cap: Duration::from_secs(30),
            jitter: Jitter::Full,
            decay_after: 10,
            seed: 0x5EED,
            store: None,
        }
    }

    /// A snapshot of the gate's counters and state.
    pub fn stats(&self) -> GateStats {
        let state = self.shared.lock();
        let now = Instant::now();
        GateStats {
            rate: state.pace.as_ref().map(Pace::rate),
            backoff_until: state.backoff_end(now),
            in_flight: state.in_flight,
            queued: state.queued(),
            ..state.stats.clone()
        }
    }

    /// Makes one call through the gate, retrying it while it is throttled.
    ///
    /// `make` builds the call's future for each attempt. The call starts when the gate lets
    /// it (in arrival order, within the in-flight limit, the backoffs and the rate); a throttled
    /// call is retried first when the backoff lifts, up to the retry limit, and then fails with
    /// [`Error::GaveUp`]. Any other error comes back at once as [`Error::Call`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future gives back its place in line or its slot; other callers carry on.
    pub async fn call<R, Fut>(&self, make: impl FnMut() -> Fut) -> Result<R, Error<E>>
    where
        Fut: Future<Output = Result<R, E>>,
    {
        self.call_scoped(Box::default(), make).await
    }

    /// Like [`Gate::call`], for a call that belongs to `scopes` (say, an account): it waits for
    /// the gate-wide backoff and for its own scopes' backoffs only.
    pub async fn call_in<R, Fut>(
        &self,
        scopes: impl IntoIterator<Item = impl Into<Scope>>,
        make: impl FnMut() -> Fut,
    ) -> Result<R, Error<E>>
    where
        Fut: Future<Output = Result<R, E>>,
    {
        let scopes = scopes.into_iter().map(Into::into).collect();
        self.call_scoped(scopes, make).await
    }

    /// The retry loop of [`Gate::call`] and [`Gate::call_in`], on scopes already collected:
    /// `call` passes an empty box, which costs no allocation and no generic `collect`.
    async fn call_scoped<R, Fut>(
        &self,
        scopes: Box<[Scope]>,
        mut make: impl FnMut() -> Fut,
    ) -> Result<R, Error<E>>
    where
        Fut: Future<Output = Result<R, E>>,
    {
        let mut attempts = 0;
        loop {
            attempts += 1;
            let attempt = Attempt::new(self.clone(), scopes.clone(), attempts > 1, make());
            match attempt.await {
                Outcome::Done(value) => return Ok(value),
                Outcome::Failed(error) => return Err(Error::Call(error)),
                Outcome::Throttled(error) => {
                    if let Some(error) = self.retry_or_give_up(attempts, error) {
                        return Err(error);
                    }
                }
            }
        }
    }

    /// After a throttled attempt: `None` to try again, or the error to give up with.
    pub(crate) fn retry_or_give_up(&self, attempts: u32, last: E) -> Option<Error<E>> {
        let mut state = self.shared.lock();
        if attempts > self.shared.max_retries {
            state.stats.gave_up += 1;
            return Some(Error::GaveUp { attempts, last });
        }
        state.stats.retries += 1;
        None
    }
}

/// Settings of a [`Gate`]; [`GateBuilder::build`] checks them.
pub struct GateBuilder<E> {
    classify: Box<Classifier<E>>,
    max_in_flight: usize,
    max_retries: u32,
    rate: Option<RateSetting>,
    backoff_base: Duration,
    backoff_cap: Duration,
    jitter: Jitter,
    decay_after: u32,
    seed: u64,
    store: Option<Arc<dyn Store>>,
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
            .field("max_in_flight", &self.max_in_flight)
            .field("max_retries", &self.max_retries)
            .field("rate", &self.rate)
            .field("backoff_base", &self.backoff_base)
            .field("backoff_cap", &self.backoff_cap)
            .field("jitter", &self.jitter)
            .field("decay_after", &self.decay_after)
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

impl<E> GateBuilder<E> {
    /// At most this many calls in progress at once (the connection pool). Default 16.
    pub fn max_in_flight(mut self, n: usize) -> Self {
        self.max_in_flight = n;
        self
    }

    /// How many times a throttled call is tried again before giving up. Default 5.
    pub fn max_retries(mut self, n: u32) -> Self {
        self.max_retries = n;
        self
    }

    /// Paces call starts at `per_second`, never early: starts at least `1 / per_second` apart.
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
    /// - A gate-wide throttle cuts the rate to 0.7 of the rate its call was sent at (0.5 if
    ///   the call went out right after a backoff ended: the limit is far below), and that
    ///   rate is remembered as too fast. A call sent at 0.9 or more of a rate known to be too
    ///   fast finds the limit just below: its throttle cuts only to 0.95 of the rate it was
    ///   sent at. Throttles of calls sent before the last cut change nothing;
    ///   a scope's throttle never touches the gate-wide rate.
    /// - After a cut the rate holds for three times the backoff, then grows back, per second
    ///   of success, to 0.95 of the rate that failed, and stays there for a quiet while
    ///   (ten times the backoff, at least 10 s) before it probes above, in case the limit
    ///   rose. Each probe throttled in a row doubles the quiet while (up to 5 minutes), so
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
    /// use paceline::{Gate, Throttle};
    ///
    /// # #[derive(Debug)] struct ApiError { status: u16 }
    /// // Start at 40 calls per second; never below 1 or above 100.
    /// let gate = Gate::builder(|e: &ApiError| (e.status == 429).then(Throttle::new))
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

    /// The exponential backoff for throttles without Retry-After: `base * 2^k`, at most `cap`.
    /// Default 100 ms and 30 s.
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

    /// Seeds the jitter, for runs that repeat exactly.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Keeps the state that a fleet of processes shares (backoffs, the rate budget) in Redis:
    /// every gate on the same store namespace honours the others' backoffs, and their call
    /// starts together stay within the [`rate`](Self::rate). See [`RedisStore`](crate::RedisStore).
    ///
    /// Without a store (the default) the gate keeps all its state in the process, and no call
    /// waits for anything but the gate itself.
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub fn store(mut self, store: crate::RedisStore) -> Self {
        self.store = Some(Arc::new(store));
        self
    }

    /// Checks the settings and builds the gate.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the setting that cannot work.
    pub fn build(self) -> Result<Gate<E>, ConfigError> {
        if self.max_in_flight == 0 {
            return Err(ConfigError::ZeroInFlight);
        }
        if self.backoff_base > self.backoff_cap {
            return Err(ConfigError::BaseAboveCap);
        }
        if self.decay_after == 0 {
            return Err(ConfigError::ZeroDecay);
        }
        let pace = match self.rate {
            None => None,
            Some(RateSetting {
                start,
                floor,
                ceiling,
                adaptive,
            }) => {
                for (which, value) in [("start", start), ("floor", floor), ("ceiling", ceiling)] {
                    if !(value.is_finite() && value > 0.0) {
                        return Err(ConfigError::InvalidRate { which, value });
                    }
                }
                if floor > ceiling {
                    return Err(ConfigError::FloorAboveCeiling { floor, ceiling });
                }
                Some(if adaptive {
                    Pace::Adaptive(AdaptiveRate::new(start, floor, ceiling))
                } else {
                    Pace::Fixed(start)
                })
            }
        };
        let schedule = BackoffSchedule::new(
            self.backoff_base,
            self.backoff_cap,
            self.jitter,
            self.decay_after,
        );
        // A paced store reserves each call's slot in the fleet's budget: one reservation at a
        // time per process, so that a backoff begun elsewhere reaches this process's next call.
        let serial_clearing = self.store.is_some() && pace.is_some();
        let state = State::new(
            self.max_in_flight,
            pace,
            schedule,
            SplitMix64::new(self.seed),
            serial_clearing,
        );
        Ok(Gate {
            shared: Arc::new(Shared {
                state: Mutex::new(state),
                classify: self.classify,
                max_retries: self.max_retries,
                store: self.store,
            }),
        })
    }
}
