//! What a caller says of one call through the gate, beyond the call itself: its scopes, and by
//! when it must start.

use std::convert::Infallible;
use std::fmt;
use std::time::Duration;

use tokio::time::Instant;

use super::classify::Scope;
use super::dimensions::Draws;
use super::quota::Dimension;
use crate::error::{ConfigError, or_panic};
use crate::time::after;

/// How one call goes through the gate, for [`Gate::call_with`](crate::Gate::call_with): the
/// scopes it belongs to, by when it must start, and what it costs.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use paceline::{CallOptions, Error, Gate, RateLimited};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let gate = Gate::builder(|_: &()| Some(RateLimited::new())).rate(1.0).build().unwrap();
/// gate.call(|| async { Ok::<_, ()>(()) }).await.unwrap();
/// // The rate allows the next call in 1 s; this one will wait 200 ms at most.
/// let hurried = CallOptions::new().max_wait(Duration::from_millis(200));
/// let late = gate.call_with(hurried, || async { Ok::<_, ()>(()) }).await;
/// assert!(matches!(late, Err(Error::Deadline { last: None, .. })));
/// // Failed at once, without waiting for the deadline.
/// assert_eq!(gate.earliest_start() - tokio::time::Instant::now(), Duration::from_secs(1));
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct CallOptions {
    pub(crate) scopes: Box<[Scope]>,
    deadline: Option<Due>,
    pub(crate) cost: u64,
    draws: Draws,
    priority: Priority,
}

impl Default for CallOptions {
    fn default() -> Self {
        Self {
            scopes: Box::default(),
            deadline: None,
            cost: 1,
            draws: Draws::default(),
            priority: Priority::Normal,
        }
    }
}

/// Which calls that wait start first: every waiting call of a higher priority goes before
/// every first attempt of a lower one, whatever their scopes, but for a share kept for each
/// lower priority: while calls of a priority wait, at least one start in every
/// [`Priority::SHARE_EVERY`] is theirs, so that none waits forever. A throttled call's retry
/// goes before every first attempt, whatever its priority. Within a priority, scopes take
/// turns (see [`Gate::call_in`](crate::Gate::call_in)).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use paceline::{CallOptions, Gate, Priority, RateLimited};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let gate = Gate::builder(|_: &()| Some(RateLimited::new())).rate(1.0).build().unwrap();
/// let start = tokio::time::Instant::now();
/// let call = |priority| {
///     let gate = gate.clone();
///     async move {
///         let options = CallOptions::new().priority(priority);
///         gate.call_with(options, || async { Ok::<_, ()>(()) }).await.unwrap();
///         start.elapsed()
///     }
/// };
/// // A nightly batch of five calls, then a user's click at 0.5 s.
/// let batch = futures::future::join_all((0..5).map(|_| call(Priority::Bulk)));
/// let click = async {
///     tokio::time::sleep(Duration::from_millis(500)).await;
///     call(Priority::Interactive).await
/// };
/// let (batch, click) = futures::join!(batch, click);
/// // The click goes at 1 s, the next start the rate allows; the batch's last call at 5 s.
/// assert_eq!(click, Duration::from_secs(1));
/// assert_eq!(batch.iter().max(), Some(&Duration::from_secs(5)));
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Priority {
    /// A call someone waits for (a click, a request being served): it goes ahead of every
    /// waiting call of `Normal` and `Bulk` priority.
    Interactive,
    /// The priority of every call not given one.
    #[default]
    Normal,
    /// Background work (a nightly sync, a backfill): it waits behind every call of the other
    /// priorities, but for its share of starts.
    Bulk,
}

impl Priority {
    /// While calls of a priority wait, at least one start in this many is theirs.
    pub const SHARE_EVERY: u32 = 10;
}

/// By when a call must start, as the caller said it.
#[derive(Debug, Clone, Copy)]
enum Due {
    At(Instant),
    Within(Duration),
}

impl CallOptions {
    /// A call of no scope, with no deadline: as [`Gate::call`](crate::Gate::call) makes.
    pub fn new() -> Self {
        Self::default()
    }

    /// The call belongs to `scopes` (say, an account): it waits for the gate-wide backoff and
    /// for its own scopes' backoffs only, and takes its turn in line by its first scope, as
    /// [`Gate::call_in`](crate::Gate::call_in) says.
    pub fn scopes(mut self, scopes: impl IntoIterator<Item = impl Into<Scope>>) -> Self {
        self.scopes = scopes.into_iter().map(Into::into).collect();
        self
    }

    /// The call waits in line at `priority`: see [`Priority`]. [`Priority::Normal`] by default.
    pub fn priority(mut self, priority: Priority) -> Self {
        self.priority = priority;
        self
    }

    /// The call must start (each attempt of it, retries included) by `deadline`, or fail with
    /// [`Error::Deadline`](crate::Error::Deadline). If the gate knows that it cannot start
    /// it in time (a backoff runs past the deadline, the rate or the announced quota allow
    /// no start before it, the calls ahead in line need the time), the call fails at once,
    /// naming the earliest start; one that could still make it waits, and fails when the
    /// deadline comes (or as soon as the gate learns that it cannot make it).
    pub fn deadline(mut self, deadline: Instant) -> Self {
        self.deadline = Some(Due::At(deadline));
        self
    }

    /// The call may wait at most `wait`, from when it is made, to start: a
    /// [deadline](Self::deadline) that many from the call.
    pub fn max_wait(mut self, wait: Duration) -> Self {
        self.deadline = Some(Due::Within(wait));
        self
    }

    /// The call costs `units` of the rate and of the server's announced quota (GraphQL
    /// points, LLM tokens, rows of a batch): a rate of `r` per second then means `r` units
    /// per second, so that the next call starts `units / r` after this one, and the call
    /// waits until the announced quota has `units` left. One unit by default. When the real
    /// cost is known only from the response, [`Gate::settle`](crate::Gate::settle) charges
    /// what it cost more.
    ///
    /// # Panics
    ///
    /// If `units` is zero: every call spends something, or the in-flight accounting that
    /// keeps the announced quota safe could not count it. A cost read from configuration,
    /// or from a server, goes through [`try_cost`](Self::try_cost) instead, which answers
    /// with an error.
    #[track_caller]
    pub fn cost(self, units: u64) -> Self {
        or_panic(self.try_cost(units))
    }

    /// [`cost`](Self::cost), for a cost that may be zero: one read from configuration, or
    /// from a server (a GraphQL query's points, as its API prices it).
    ///
    /// # Errors
    ///
    /// [`ConfigError::ZeroCost`] if `units` is zero; the options are dropped with it.
    ///
    /// # Examples
    ///
    /// ```
    /// use paceline::{CallOptions, ConfigError};
    ///
    /// // The points each report costs, as read from a configuration file.
    /// let points: u64 = "0".parse().unwrap();
    /// let refused = CallOptions::new().try_cost(points).unwrap_err();
    /// assert_eq!(refused, ConfigError::ZeroCost);
    /// assert_eq!(refused.to_string(), "`units` (the call's cost) must be at least 1");
    /// assert!(CallOptions::new().try_cost(5).is_ok());
    /// ```
    pub fn try_cost(mut self, units: u64) -> Result<Self, ConfigError> {
        if units == 0 {
            return Err(ConfigError::ZeroCost);
        }
        self.cost = units;
        Ok(self)
    }

    /// The call costs `units` of `dimension` (an LLM call's tokens, input or output tokens,
    /// a unit of the user's own), spent from each [budget](crate::Budget) of that dimension
    /// as it starts, told or announced: it waits until every budget it draws from has room.
    /// A call that names none costs one unit of [`Dimension::REQUESTS`] and nothing of the
    /// others; [`Dimension::UNITS`] is its [cost](Self::cost). When the real cost is known
    /// only from the response, [`Gate::call_settled`](crate::Gate::call_settled) settles each
    /// dimension from it.
    ///
    /// Zero units of a dimension other than [`Dimension::UNITS`] is a call that draws nothing
    /// of it (a prompt of no tokens; of [`Dimension::REQUESTS`], a call that the budgets of
    /// requests do not count): the budgets of that dimension never hold it.
    ///
    /// # Panics
    ///
    /// If `dimension` is [`Dimension::UNITS`] and `units` is zero, as [`cost`](Self::cost)
    /// does. A dimension and units read from configuration go through
    /// [`try_cost_in`](Self::try_cost_in) instead, which answers with an error.
    ///
    /// # Examples
    ///
    /// ```
    /// use paceline::{CallOptions, Dimension};
    ///
    /// // A prompt of 1,200 tokens, answered in at most 300 (its `max_tokens`).
    /// let chat = CallOptions::new()
    ///     .cost_in(Dimension::INPUT_TOKENS, 1_200)
    ///     .cost_in(Dimension::OUTPUT_TOKENS, 300)
    ///     .cost_in(Dimension::TOKENS, 1_500);
    /// # let _ = chat;
    /// ```
    #[track_caller]
    pub fn cost_in(self, dimension: Dimension, units: u64) -> Self {
        or_panic(self.try_cost_in(dimension, units))
    }

    /// [`cost_in`](Self::cost_in), for a dimension and units read from configuration, or
    /// from a server, where the dimension may be [`Dimension::UNITS`] and the units zero.
    ///
    /// # Errors
    ///
    /// [`ConfigError::ZeroCost`] if `dimension` is [`Dimension::UNITS`] and `units` is zero.
    /// Zero units of any other dimension draw nothing of it, as with `cost_in`.
    ///
    /// # Examples
    ///
    /// ```
    /// use paceline::{CallOptions, ConfigError, Dimension};
    ///
    /// // A job's costs, as read from a configuration file: `units = 0, tokens = 0`.
    /// let no_tokens = CallOptions::new().try_cost_in(Dimension::new("tokens"), 0);
    /// assert!(no_tokens.is_ok(), "a call may draw no tokens");
    /// let no_units = CallOptions::new().try_cost_in(Dimension::new("units"), 0);
    /// assert_eq!(no_units.unwrap_err(), ConfigError::ZeroCost);
    /// ```
    pub fn try_cost_in(mut self, dimension: Dimension, units: u64) -> Result<Self, ConfigError> {
        if dimension == Dimension::UNITS {
            return self.try_cost(units);
        }
        self.draws = self.draws.with(dimension, units);
        Ok(self)
    }

    /// What each attempt of a call made at the time `now` gives is held to: the instant it
    /// must start by, if any, and its cost.
    pub(crate) fn terms(&self, now: impl FnOnce() -> Instant) -> Terms {
        let deadline = self.deadline.map(|deadline| match deadline {
            Due::At(at) => at,
            Due::Within(wait) => after(now(), wait),
        });
        Terms {
            deadline,
            cost: self.cost,
            draws: self.draws.clone(),
            priority: self.priority,
        }
    }
}

/// By when a call must start: an [`Instant`], or [`Infallible`] for a call that cannot have a
/// deadline, whose [`Ended::Late`] then cannot be built either. A call that can have a
/// deadline can have a priority too; one that cannot has neither, and carries no byte for it.
pub(crate) trait Deadline: Copy {
    /// The call's priority: a [`Priority`], or [`Unprioritised`].
    type Priority: Copy + Default + fmt::Debug + Into<Priority>;

    /// What the call draws of other dimensions: [`Draws`], or [`Undrawn`] for a call that
    /// cannot name any (it has no options), in no bytes.
    type Draws: Clone + Default + fmt::Debug + DrawsOf;

    /// The instant.
    fn instant(self) -> Instant;
}

impl Deadline for Instant {
    type Priority = Priority;
    type Draws = Draws;

    #[inline(always)]
    fn instant(self) -> Instant {
        self
    }
}

impl Deadline for Infallible {
    type Priority = Unprioritised;
    type Draws = Undrawn;

    #[inline(always)]
    fn instant(self) -> Instant {
        match self {}
    }
}

/// What a call draws of other dimensions, as the gate reads it.
pub(crate) trait DrawsOf {
    fn draws(&self) -> &Draws;
}

impl DrawsOf for Draws {
    #[inline(always)]
    fn draws(&self) -> &Draws {
        self
    }
}

/// What a call that cannot name other dimensions draws of them: nothing, in no bytes.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Undrawn;

/// Nothing drawn, for every [`Undrawn`].
static UNDRAWN: Draws = Draws::NONE;

impl DrawsOf for Undrawn {
    #[inline(always)]
    fn draws(&self) -> &Draws {
        &UNDRAWN
    }
}

/// The priority of a call that cannot be given one: [`Priority::Normal`], in no bytes.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Unprioritised;

impl From<Unprioritised> for Priority {
    #[inline(always)]
    fn from(_: Unprioritised) -> Self {
        Priority::Normal
    }
}

/// What a call asks of each of its attempts: to start by a deadline, if it has one, and to
/// spend its cost (its units, and what it draws of other dimensions).
#[derive(Debug, Clone)]
pub(crate) struct Terms<D: Deadline = Instant> {
    pub(crate) deadline: Option<D>,
    pub(crate) cost: u64,
    pub(crate) draws: D::Draws,
    pub(crate) priority: D::Priority,
}

impl<D: Deadline> Default for Terms<D> {
    fn default() -> Self {
        Self::cost(1)
    }
}

impl<D: Deadline> Terms<D> {
    /// Terms of no deadline and `cost` units.
    pub(crate) fn cost(cost: u64) -> Self {
        Self {
            deadline: None,
            cost,
            draws: D::Draws::default(),
            priority: D::Priority::default(),
        }
    }
}
