//! The crate's error types.

use std::error::Error as StdError;
use std::fmt;

/// Why a call through a [`Gate`](crate::Gate) failed.
///
/// The user's own error is carried inside, unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error<E> {
    /// The call failed with an error that is not a throttle; it reached the caller at once.
    Call(E),
    /// The call was throttled on every attempt, up to the gate's retry limit.
    GaveUp {
        /// How many times the call was made.
        attempts: u32,
        /// The error of the last attempt.
        last: E,
    },
    /// The call could not start by its [deadline](crate::CallOptions::deadline): the gate
    /// knew that it could start no earlier than `earliest` (a backoff, the rate, the
    /// announced quota, the calls ahead in line), or the deadline came while it waited.
    Deadline {
        /// The earliest the gate could have started it, as far as it knew. Boxed, so that
        /// the result of every call stays as small as it was without deadlines: a missed
        /// deadline is the rare case.
        earliest: Box<tokio::time::Instant>,
        /// The error of the throttled attempt before, if this was a retry.
        last: Option<E>,
    },
    /// The gate's line was full when the call arrived (see
    /// [`GateBuilder::max_queued`](crate::GateBuilder::max_queued)): it was turned away at
    /// once, and no attempt was made (its future was never made).
    Overloaded(Overloaded),
}

impl<E> Error<E> {
    /// The user's error, whichever way the call failed: `None` for a call that missed its
    /// deadline before any attempt was made, or that the gate turned away.
    pub fn into_inner(self) -> Option<E> {
        match self {
            Error::Call(e) | Error::GaveUp { last: e, .. } => Some(e),
            Error::Deadline { last, .. } => last,
            Error::Overloaded(_) => None,
        }
    }

    /// Whether the call could not start by its deadline.
    pub fn is_deadline(&self) -> bool {
        matches!(self, Error::Deadline { .. })
    }

    /// Whether the gate gave up retrying a throttled call.
    pub fn is_gave_up(&self) -> bool {
        matches!(self, Error::GaveUp { .. })
    }

    /// Whether the gate turned the call away, its line full.
    pub fn is_overloaded(&self) -> bool {
        matches!(self, Error::Overloaded(_))
    }
}

impl<E: fmt::Display> fmt::Display for Error<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Call(e) => write!(f, "{e}"),
            Error::GaveUp { attempts, last } => {
                write!(
                    f,
                    "gave up after {attempts} throttled attempts; last error: {last}"
                )
            }
            Error::Deadline { last, .. } => {
                write!(f, "the call could not start by its deadline")?;
                match last {
                    Some(last) => write!(f, "; last error: {last}"),
                    None => Ok(()),
                }
            }
            Error::Overloaded(overloaded) => fmt::Display::fmt(overloaded, f),
        }
    }
}

impl<E: StdError + 'static> StdError for Error<E> {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            Error::Call(e) | Error::GaveUp { last: e, .. } => Some(e),
            Error::Deadline { last, .. } => last.as_ref().map(|e| e as _),
            // Its text is the error's own: it would only say it again.
            Error::Overloaded(_) => None,
        }
    }
}

/// A call the gate turned away as it arrived, without making it: its line already held as
/// many waiting calls as its bound allows ([`GateBuilder::max_queued`](crate::GateBuilder::max_queued)),
/// or, with a bound of zero, the call could not start at once.
///
/// Each way into the gate hands it back in its own error: [`Error::Overloaded`] from
/// [`Gate::call`](crate::Gate::call), the mapped streams and [`Gate::paged`](crate::Gate::paged);
/// `GateError::Overloaded` from the tower service (the `tower` feature); inside a
/// `reqwest_middleware::Error::Middleware` from the reqwest middleware (the
/// `reqwest-middleware` feature), from which `Overloaded::try_from` takes it back.
///
/// # Examples
///
/// ```
/// use paceline::{Error, Gate, RateLimited};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// // One call a second, and no line: a call that cannot start at once is turned away.
/// let gate = Gate::builder(|_: &()| Some(RateLimited::new())).rate(1.0).max_queued(0).build().unwrap();
/// gate.call(|| async { Ok::<_, ()>(()) }).await.unwrap();
/// let Err(Error::Overloaded(overloaded)) = gate.call(|| async { Ok::<_, ()>(()) }).await else {
///     panic!("the rate holds the second call, and it may not wait");
/// };
/// assert_eq!(overloaded.max_queued(), 0);
/// assert_eq!(
///     overloaded.to_string(),
///     "turned away: the call could not start at once, and the gate keeps no line (max_queued is 0)"
/// );
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overloaded {
    max_queued: usize,
}

impl Overloaded {
    /// The call was turned away by a line of at most `max_queued` waiting calls.
    pub(crate) const fn new(max_queued: usize) -> Self {
        Self { max_queued }
    }

    /// The gate's bound on its line ([`GateBuilder::max_queued`](crate::GateBuilder::max_queued)):
    /// as many calls as this were waiting when the call arrived.
    pub fn max_queued(&self) -> usize {
        self.max_queued
    }
}

impl fmt::Display for Overloaded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.max_queued {
            0 => write!(
                f,
                "turned away: the call could not start at once, and the gate keeps no line (max_queued is 0)"
            ),
            1 => write!(
                f,
                "turned away: 1 call was already waiting in the gate's line, its max_queued"
            ),
            n => write!(
                f,
                "turned away: {n} calls were already waiting in the gate's line, its max_queued"
            ),
        }
    }
}

impl StdError for Overloaded {}

/// A gate setting that cannot work: from [`GateBuilder::build`](crate::GateBuilder::build),
/// from the methods that change a gate while it runs, and from the `try_` forms of the
/// settings a program may read from its configuration
/// ([`ScopeLimits::try_rate`](crate::ScopeLimits::try_rate) and its kin,
/// [`Budget::try_new`](crate::Budget::try_new),
/// [`CallOptions::try_cost`](crate::CallOptions::try_cost)). Its message names the argument
/// that cannot work.
///
/// # Examples
///
/// ```
/// use paceline::{ConfigError, ScopeLimits};
///
/// // A tenant's plan, as read from a configuration file.
/// let per_second: f64 = "0".parse().unwrap();
/// let refused = ScopeLimits::new().try_rate(per_second).unwrap_err();
/// assert_eq!(refused, ConfigError::InvalidScopeRate { which: "per_second", value: 0.0 });
/// assert_eq!(
///     refused.to_string(),
///     "a scope's rate `per_second` must be a positive, finite number of calls per second (got 0)"
/// );
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ConfigError {
    /// `max_in_flight` was zero: no call could ever start.
    ZeroInFlight,
    /// A rate was zero, negative, infinite or NaN.
    InvalidRate {
        /// Which setting: `"start"`, `"floor"` or `"ceiling"`.
        which: &'static str,
        /// The value given.
        value: f64,
    },
    /// The rate's floor was above its ceiling.
    FloorAboveCeiling {
        /// The floor given.
        floor: f64,
        /// The ceiling given.
        ceiling: f64,
    },
    /// The backoff's base was longer than its cap.
    BaseAboveCap,
    /// `decay_after` was zero.
    ZeroDecay,
    /// [`Gate::set_rate`](crate::Gate::set_rate) was asked of a gate built without a rate: a
    /// rate can be changed while the gate runs, not added.
    Unpaced,
    /// [`Gate::set_scope_limits`](crate::Gate::set_scope_limits) or
    /// [`Gate::observe_in`](crate::Gate::observe_in) was asked of a gate built without limits
    /// per scope, which keeps no state of its scopes.
    NoScopeLimits,
    /// A scope's rate was zero, negative, infinite or NaN
    /// ([`ScopeLimits::try_rate`](crate::ScopeLimits::try_rate),
    /// [`ScopeLimits::try_adaptive`](crate::ScopeLimits::try_adaptive)).
    InvalidScopeRate {
        /// Which argument: `"per_second"`, `"floor"` or `"ceiling"`.
        which: &'static str,
        /// The value given.
        value: f64,
    },
    /// A scope's adaptive rate's floor was above its ceiling
    /// ([`ScopeLimits::try_adaptive`](crate::ScopeLimits::try_adaptive)).
    ScopeFloorAboveCeiling {
        /// The floor given.
        floor: f64,
        /// The ceiling given.
        ceiling: f64,
    },
    /// A scope's `max_in_flight` was zero
    /// ([`ScopeLimits::try_max_in_flight`](crate::ScopeLimits::try_max_in_flight)): no call
    /// of the scope could ever start.
    ZeroScopeInFlight,
    /// A scope's weight was 0 or above [`ScopeLimits::MAX_WEIGHT`](crate::ScopeLimits::MAX_WEIGHT)
    /// ([`ScopeLimits::try_weight`](crate::ScopeLimits::try_weight)).
    InvalidWeight {
        /// The weight given.
        weight: u32,
    },
    /// A budget's `limit` was zero ([`Budget::try_new`](crate::Budget::try_new)): no call
    /// drawing from it could ever start.
    ZeroBudgetLimit,
    /// A budget's window `per` was zero ([`Budget::try_new`](crate::Budget::try_new)).
    ZeroBudgetWindow,
    /// A call's cost `units` was zero ([`CallOptions::try_cost`](crate::CallOptions::try_cost),
    /// or [`CallOptions::try_cost_in`](crate::CallOptions::try_cost_in) of
    /// [`Dimension::UNITS`](crate::Dimension::UNITS)): every call spends something, or the
    /// count of units in flight that keeps the announced quota safe could not count it.
    ZeroCost,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::ZeroInFlight => write!(f, "`max_in_flight` must be at least 1"),
            ConfigError::InvalidRate { which, value } => {
                write!(
                    f,
                    "the rate's {which} must be a positive, finite number of calls per second (got {value})"
                )
            }
            ConfigError::FloorAboveCeiling { floor, ceiling } => {
                write!(
                    f,
                    "the rate's floor ({floor}/s) is above its ceiling ({ceiling}/s)"
                )
            }
            ConfigError::BaseAboveCap => write!(f, "the backoff's base is longer than its cap"),
            ConfigError::ZeroDecay => write!(f, "`decay_after` must be at least 1 success"),
            ConfigError::Unpaced => write!(
                f,
                "the gate was built without a rate, so it has none to change; build it with `rate` to change the rate while it runs"
            ),
            ConfigError::NoScopeLimits => write!(
                f,
                "the gate was built without limits per scope; build it with `per_scope` or `per_scope_with` (`ScopeLimits::new()` limits nothing) to set a scope's limits or read its quota while it runs"
            ),
            ConfigError::InvalidScopeRate {
                which: "per_second",
                value,
            } => write!(
                f,
                "a scope's rate `per_second` must be a positive, finite number of calls per second (got {value})"
            ),
            ConfigError::InvalidScopeRate { which, value } => write!(
                f,
                "a scope's adaptive rate's `{which}` must be a positive, finite number of calls per second (got {value})"
            ),
            ConfigError::ScopeFloorAboveCeiling { floor, ceiling } => write!(
                f,
                "a scope's adaptive rate's `floor` ({floor}/s) is above its `ceiling` ({ceiling}/s)"
            ),
            ConfigError::ZeroScopeInFlight => {
                write!(f, "a scope's `max_in_flight` `n` must be at least 1")
            }
            // 1024 is `ScopeLimits::MAX_WEIGHT`, written out so that the crate's errors depend
            // on no module of the gate (tests/gate/scope_limits.rs holds the two together).
            ConfigError::InvalidWeight { weight } => write!(
                f,
                "a scope's `weight` must be from 1 to 1024 (got {weight})"
            ),
            ConfigError::ZeroBudgetLimit => write!(
                f,
                "`limit` (a budget's units per window) must be at least 1"
            ),
            ConfigError::ZeroBudgetWindow => {
                write!(f, "`per` (a budget's window) must not be zero")
            }
            ConfigError::ZeroCost => write!(f, "`units` (the call's cost) must be at least 1"),
        }
    }
}

impl StdError for ConfigError {}

/// `result`'s value, or a panic with its error's message: the panicking form of a `try_`
/// setting, for a value written in the code.
#[track_caller]
pub(crate) fn or_panic<T>(result: Result<T, ConfigError>) -> T {
    match result {
        Ok(value) => value,
        Err(error) => panic!("{error}"),
    }
}

/// A store that cannot be made, from [`RedisStore::open`](crate::RedisStore::open) and its
/// kin, or that cannot work with its Redis, from [`RedisStore::check`](crate::RedisStore::check).
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreError {
    /// The URL is not a Redis URL.
    InvalidUrl {
        /// Why, in the `redis` crate's words.
        reason: String,
    },
    /// The namespace was empty: gates of different APIs would share state.
    EmptyNamespace,
    /// A cluster was to be opened from no seed node at all.
    NoSeeds,
    /// A PEM text given to `RedisTls` (the `redis-tls` feature) holds no certificate or key, or one
    /// that does not parse.
    InvalidCertificate {
        /// What was wrong, and with which text.
        reason: String,
    },
    /// Redis could not be reached from [`RedisStore::check`](crate::RedisStore::check): nothing
    /// answers at its address, or it did not answer in time.
    Unreachable {
        /// Why, in the `redis` crate's words.
        reason: String,
    },
    /// The TLS handshake with Redis failed: its certificate is not signed by a root the store
    /// trusts (see `RedisTls::root_cert`, the `redis-tls` feature) or is not for its host name,
    /// or Redis refused the client's certificate.
    Tls {
        /// Why, in rustls' words.
        reason: String,
    },
    /// Redis answered [`RedisStore::check`](crate::RedisStore::check) with an error other than
    /// a refusal of the user: a command it does not know (a Redis-compatible service without
    /// Lua scripts, or with `EVALSHA` renamed), or a script that failed.
    Failed {
        /// Redis's own words.
        reason: String,
    },
    /// Redis refused the store's user: a wrong user name or password, or an ACL user that lacks
    /// a command or a key the store's scripts need (listed under
    /// [Commands](crate::RedisStore#commands)).
    Denied {
        /// Redis's own words, which name the command or key refused.
        reason: String,
    },
    /// [`RedisStore::try_timeout`](crate::RedisStore::try_timeout) was given a zero
    /// `timeout`: no answer could ever come in time.
    ZeroTimeout,
    /// [`RedisStore::try_timeout`](crate::RedisStore::try_timeout) was asked of a store whose
    /// connection is already shared (a clone, one given to a gate, or one made by
    /// [`RedisStore::namespace`](crate::RedisStore::namespace)): the timeout is the
    /// connection's, set before it is shared.
    SharedConnection,
}

#[cfg(feature = "redis")]
impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::InvalidUrl { reason } => write!(
                f,
                "not a Redis URL (expected redis://host:port, rediss://… or redis+unix:///path): {reason}"
            ),
            StoreError::EmptyNamespace => write!(
                f,
                "the store's namespace is empty; name the API (and token) whose limit the gates share"
            ),
            StoreError::NoSeeds => write!(
                f,
                "no seed node given for the Redis Cluster; give the URL of at least one node"
            ),
            StoreError::InvalidCertificate { reason } => {
                write!(f, "not a usable certificate or key: {reason}")
            }
            StoreError::Unreachable { reason } => write!(f, "Redis cannot be reached: {reason}"),
            StoreError::Tls { reason } => write!(
                f,
                "the TLS handshake with Redis failed (is its certificate signed by the root the store trusts, and for its host name?): {reason}"
            ),
            StoreError::Failed { reason } => {
                write!(
                    f,
                    "Redis answered the store's check with an error: {reason}"
                )
            }
            StoreError::Denied { reason } => write!(
                f,
                "Redis refused the store's user (see RedisStore's docs for the ACL rights the store needs): {reason}"
            ),
            StoreError::ZeroTimeout => write!(f, "`timeout` must be longer than zero"),
            StoreError::SharedConnection => write!(
                f,
                "set the store's `timeout` before cloning it or giving it to a gate: its connection is already shared"
            ),
        }
    }
}

#[cfg(feature = "redis")]
impl StdError for StoreError {}

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;

    fn errors() -> [Error<io::Error>; 4] {
        [
            Error::Call(io::Error::other("not found")),
            Error::GaveUp {
                attempts: 3,
                last: io::Error::other("slow down"),
            },
            Error::Deadline {
                earliest: Box::new(tokio::time::Instant::now()),
                last: None,
            },
            Error::Overloaded(Overloaded::new(8)),
        ]
    }

    #[test]
    fn each_error_says_what_it_is_and_carries_the_users_error_where_there_is_one() {
        let [call, gave_up, late, overloaded] = errors();
        let said: Vec<_> = [&call, &gave_up, &late, &overloaded]
            .iter()
            .map(|e| (e.is_gave_up(), e.is_deadline(), e.is_overloaded()))
            .collect();
        let none = (false, false, false);
        assert_eq!(
            said,
            [
                none,
                (true, false, false),
                (false, true, false),
                (false, false, true)
            ]
        );
        let sources: Vec<_> = [&call, &gave_up, &late, &overloaded]
            .iter()
            .map(|e| e.source().map(ToString::to_string))
            .collect();
        let from = |text: &str| Some(text.to_owned());
        assert_eq!(sources, [from("not found"), from("slow down"), None, None]);
        let inner: Vec<_> = errors()
            .into_iter()
            .map(|e| e.into_inner().map(|e| e.to_string()))
            .collect();
        assert_eq!(inner, [from("not found"), from("slow down"), None, None]);
    }

    #[test]
    fn overloaded_names_its_bound() {
        let told = |n| Error::<io::Error>::Overloaded(Overloaded::new(n)).to_string();
        assert_eq!(
            told(0),
            "turned away: the call could not start at once, and the gate keeps no line (max_queued is 0)"
        );
        assert_eq!(
            told(1),
            "turned away: 1 call was already waiting in the gate's line, its max_queued"
        );
        assert_eq!(
            told(20),
            "turned away: 20 calls were already waiting in the gate's line, its max_queued"
        );
        assert_eq!(Overloaded::new(20).max_queued(), 20);
    }
}
