//! What a server announces of its quota in a response: how much is left in its current window,
//! and when that window resets.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use crate::time::MAX_WAIT;

/// A server's announcement of its quota, read from one response: `remaining` units (requests,
/// or cost units such as GraphQL points) are left in its current window, which resets in
/// `resets_in`; optionally how many units a whole window holds and how long a window lasts.
///
/// Many APIs send this on every response (the IETF draft's `RateLimit-Policy` and `RateLimit`
/// fields, the older `RateLimit-*` and the `X-RateLimit-*` families); with the `http` feature,
/// `paceline::http::quota` reads it from a response's headers. Hand it to the gate with
/// [`Gate::observe`](crate::Gate::observe), or with a throttle through
/// [`RateLimited::quota`](crate::RateLimited::quota).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use paceline::Quota;
///
/// // 40 left, the window resets in 3 s; a window holds 100 and lasts 10 s.
/// let quota = Quota::new(40, Duration::from_secs(3))
///     .with_limit(100)
///     .with_window(Duration::from_secs(10));
/// assert_eq!(quota.remaining(), 40);
/// assert_eq!(quota.limit(), Some(100));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    remaining: u64,
    resets_in: Duration,
    limit: Option<u64>,
    window: Option<Duration>,
}

impl Quota {
    /// `remaining` units are left in the current window, which resets in `resets_in` (at most
    /// one year, the longest wait the crate takes; longer is taken as a year).
    pub fn new(remaining: u64, resets_in: Duration) -> Self {
        Self {
            remaining,
            resets_in: resets_in.min(MAX_WAIT),
            limit: None,
            window: None,
        }
    }

    /// A whole window holds `limit` units: what the gate may spend once this window resets,
    /// before the server says more.
    pub fn with_limit(mut self, limit: u64) -> Self {
        self.limit = Some(limit);
        self
    }

    /// A window lasts `window` (at most one year): when the one after the next reset ends.
    /// A zero window is ignored.
    pub fn with_window(mut self, window: Duration) -> Self {
        self.window = (!window.is_zero()).then_some(window.min(MAX_WAIT));
        self
    }

    /// Units left in the current window.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// How long until the current window resets.
    pub fn resets_in(&self) -> Duration {
        self.resets_in
    }

    /// Units a whole window holds, if the server said.
    pub fn limit(&self) -> Option<u64> {
        self.limit
    }

    /// How long a window lasts, if the server said.
    pub fn window(&self) -> Option<Duration> {
        self.window
    }

    /// The same quota, resetting `by` sooner (now, at the soonest).
    pub(crate) fn sooner(mut self, by: Duration) -> Self {
        self.resets_in = self.resets_in.saturating_sub(by);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_server_said_reads_back_and_a_zero_window_is_no_window() {
        let quota = Quota::new(40, Duration::from_secs(3));
        assert_eq!((quota.limit(), quota.window()), (None, None));
        let quota = quota.with_limit(100).with_window(Duration::from_secs(10));
        assert_eq!(quota.remaining(), 40);
        assert_eq!(quota.resets_in(), Duration::from_secs(3));
        assert_eq!(quota.limit(), Some(100));
        assert_eq!(quota.window(), Some(Duration::from_secs(10)));
        assert_eq!(quota.with_window(Duration::ZERO).window(), None);
        let long = Quota::new(1, Duration::MAX).with_window(Duration::MAX);
        assert_eq!(
            (long.resets_in(), long.window()),
            (MAX_WAIT, Some(MAX_WAIT))
        );
    }
}

/// What a budget counts: requests, tokens, input or output tokens, or a unit of the user's
/// own (GraphQL points, rows). Servers that limit several things at once announce a budget
/// for each (LLM APIs: requests and tokens a minute); with the `http` feature,
/// `paceline::http::announced` reads them all, each with its dimension.
///
/// # Examples
///
/// ```
/// use paceline::Dimension;
///
/// assert_eq!(Dimension::TOKENS.as_str(), "tokens");
/// assert_eq!(Dimension::new("points"), Dimension::new(String::from("points")));
/// assert_ne!(Dimension::new("points"), Dimension::UNITS);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Dimension(Cow<'static, str>);

impl Dimension {
    /// What a server counts without saying what: requests, or the cost units of a call
    /// (what the gate's own cost counts).
    pub const UNITS: Dimension = Dimension(Cow::Borrowed("units"));
    /// Requests.
    pub const REQUESTS: Dimension = Dimension(Cow::Borrowed("requests"));
    /// Tokens, input and output together.
    pub const TOKENS: Dimension = Dimension(Cow::Borrowed("tokens"));
    /// Input (prompt) tokens alone.
    pub const INPUT_TOKENS: Dimension = Dimension(Cow::Borrowed("input-tokens"));
    /// Output (completion) tokens alone.
    pub const OUTPUT_TOKENS: Dimension = Dimension(Cow::Borrowed("output-tokens"));

    /// A dimension of the user's own, by its name.
    pub fn new(name: impl Into<Cow<'static, str>>) -> Self {
        Self(name.into())
    }

    /// Its name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Dimension {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One budget a server announced: what it counts, the server's name for its policy if it
/// gave one, and what is left of it. With the `http` feature, `paceline::http::announced`
/// reads every one a response's headers carry; hand them to the gate with
/// [`Gate::observe_all`](crate::Gate::observe_all).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use paceline::{Announcement, Dimension, Quota};
///
/// let tokens = Announcement::new(Dimension::TOKENS, Quota::new(8_000, Duration::from_secs(6)));
/// let daily = Announcement::new(Dimension::UNITS, Quota::new(900, Duration::from_secs(3_600)))
///     .policy("day");
/// assert_eq!(daily.policy.as_deref(), Some("day"));
/// assert_eq!(tokens.quota.remaining(), 8_000);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Announcement {
    /// What the budget counts.
    pub dimension: Dimension,
    /// The policy's name, where the server names its policies (the IETF draft's): a server
    /// may announce several budgets of one dimension (a second's and a day's), each kept
    /// apart by its name.
    pub policy: Option<String>,
    /// What is left, until when, and of how much when told.
    pub quota: Quota,
    /// Whose count it is, where the server says (the IETF draft's `pk` partition key): a
    /// policy whose key is the same in the answers to two scopes' calls counts them all, the
    /// whole gate's, and one whose key differs between them counts each scope apart (see
    /// [`GateBuilder::policy_of`](crate::GateBuilder::policy_of)).
    pub partition: Option<Vec<u8>>,
    /// What kind of window the budget is, if known: what its reset means.
    /// [`Window::Fixed`]: the whole budget comes back at the reset, as the generic fields
    /// and the IETF draft say. `None`: so it is taken at first, and the answers may show it is
    /// a moving window instead (at its reset only its oldest requests leave it, as
    /// Flask-Limiter's moving window announces through the same fields): from then on it is
    /// kept as a sliding window, as long as the answers show (how old a request one counted
    /// must have been, the longest reset), 10 % longer. The quota [`Gate::observe`](crate::Gate::observe)
    /// takes is learnt the same way, unless a fleet shares it. [`Window::Refilling`]: the
    /// reset is when the bucket is full
    /// again, refilling evenly until then, as OpenAI and Anthropic announce theirs (a
    /// bucket's announcement must give its limit; without one it is read as a fixed window).
    ///
    /// A bucket others spend from too (a key shared with another program) falls faster
    /// than the gate spends: from the answers of the last refill period (once they span an
    /// eighth of it), the gate reads the others' pace from what the bucket fell by beyond
    /// its own spending, and refills the bucket for itself at the server's pace less
    /// theirs (taking at most 95 % of it as theirs). A span in which the bucket could have
    /// been full is not read; what a refused call drew is taken as never spent.
    pub window: Option<Window>,
}

impl Announcement {
    /// A budget of `dimension` of which `quota` is left.
    pub fn new(dimension: Dimension, quota: Quota) -> Self {
        Self {
            dimension,
            policy: None,
            quota,
            partition: None,
            window: None,
        }
    }

    /// The server's partition key for the budget is `key`: see
    /// [`Announcement::partition`](Self#structfield.partition).
    pub fn partition(mut self, key: impl Into<Vec<u8>>) -> Self {
        self.partition = Some(key.into());
        self
    }

    /// The budget's window is of `kind`: see [`Announcement::window`](Self#structfield.window).
    pub fn window(mut self, kind: Window) -> Self {
        self.window = Some(kind);
        self
    }

    /// The server names the budget's policy `name`.
    pub fn policy(mut self, name: impl Into<String>) -> Self {
        self.policy = Some(name.into());
        self
    }
}

/// What a window of a [`Budget`](crate::Budget) is: the rule by which units spent come back.
///
/// Servers differ, and the same figures mean different things under each: "20 per 2 s" lets a
/// burst of 20 at the start of each fixed window, 20 in any 2 s of a sliding one, and a burst
/// of 20 then one every 100 ms from a refilling bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Window {
    /// Windows back to back: the whole budget comes back at each window's end. The gate's
    /// windows begin at its first start (the server's may begin earlier; see
    /// [`Budget::new`](crate::Budget::new)).
    Fixed,
    /// A moving window: at most the budget in any span of its length; units come back one
    /// start at a time, a window after each was spent. Keeping to it keeps to the other two
    /// kinds as well, so it is the default when the server's kind is not known.
    #[default]
    Sliding,
    /// A bucket that holds the budget and refills evenly, the whole budget each window: a
    /// burst of the budget, then the budget's pace.
    Refilling,
}
