//! The header fields a served sim announces its quota in: one [`Dialect`] per family of fields
//! that real APIs send.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hyper::HeaderMap;
use hyper::header::{HeaderName, HeaderValue};

use super::seconds_up;
use crate::{Announced, Limit};

/// How an [`Announced`] quota is written as HTTP header fields.
///
/// Every number of seconds on the wire is a whole number, rounded **up** (a window that resets
/// in 250 ms is announced as resetting in 1 s, at the next whole second for an epoch): a client
/// that goes by the fields never thinks the quota resets before it does, and may wait up to a
/// second longer than it needs to. Window lengths round up too, so a client that divides the
/// limit by the window never paces faster than the policy allows.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use hyper::HeaderMap;
/// use paceline_sim::http::{Dialect, Reset};
/// use paceline_sim::{Announced, Limit};
///
/// let quota = Announced {
///     remaining: 7,
///     resets_in: Duration::from_millis(2_100),
///     limit: 10,
///     window: Duration::from_secs(60),
/// };
/// let quotas = [(Limit::Global, quota)];
/// let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
///
/// let mut headers = HeaderMap::new();
/// Dialect::Ietf.write(&quotas, now, &mut headers);
/// assert_eq!(headers["ratelimit-policy"], r#""global";q=10;w=60"#);
/// assert_eq!(headers["ratelimit"], r#""global";r=7;t=3"#);
///
/// let mut headers = HeaderMap::new();
/// Dialect::XRateLimit { reset: Reset::Epoch }.write(&quotas, now, &mut headers);
/// assert_eq!(headers["x-ratelimit-limit"], "10");
/// assert_eq!(headers["x-ratelimit-remaining"], "7");
/// assert_eq!(headers["x-ratelimit-reset"], "1003");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Dialect {
    /// The IETF httpapi draft's structured fields (the default), one list member per
    /// announcing policy, named `"global"` and `"scope"`:
    ///
    /// ```text
    /// RateLimit-Policy: "global";q=100;w=10, "scope";q=5;w=1
    /// RateLimit: "global";r=42;t=4, "scope";r=0;t=1
    /// ```
    ///
    /// `q` is the limit, `w` the window in seconds, `r` the requests remaining and `t` the
    /// seconds until they reset.
    #[default]
    Ietf,
    /// The draft's older separate fields, with the reset in seconds from now, for the
    /// [tightest](Announced::tightest) announcing policy:
    ///
    /// ```text
    /// RateLimit-Limit: 100
    /// RateLimit-Remaining: 42
    /// RateLimit-Reset: 4
    /// ```
    RateLimit,
    /// The `X-RateLimit-*` fields many APIs send (GitHub's, Twitter's), for the
    /// [tightest](Announced::tightest) announcing policy, with the reset written as `reset`
    /// says:
    ///
    /// ```text
    /// X-RateLimit-Limit: 100
    /// X-RateLimit-Remaining: 42
    /// X-RateLimit-Reset: 1767225604
    /// ```
    XRateLimit {
        /// How `X-RateLimit-Reset` is written.
        reset: Reset,
    },
}

/// How a reset instant is written: seconds from now, or the Unix time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reset {
    /// Whole seconds until the reset (delta-seconds, as in Retry-After), rounded up.
    Delta,
    /// The reset as whole seconds since the Unix epoch (1970-01-01T00:00:00Z), rounded up.
    Epoch,
}

const RATELIMIT_POLICY: &str = "ratelimit-policy";
const RATELIMIT: &str = "ratelimit";
const RATELIMIT_LIMIT: &str = "ratelimit-limit";
const RATELIMIT_REMAINING: &str = "ratelimit-remaining";
const RATELIMIT_RESET: &str = "ratelimit-reset";
const X_RATELIMIT_LIMIT: &str = "x-ratelimit-limit";
const X_RATELIMIT_REMAINING: &str = "x-ratelimit-remaining";
const X_RATELIMIT_RESET: &str = "x-ratelimit-reset";

impl Dialect {
    /// Writes `quotas` (each announcing policy's announcement, as in
    /// [`Accepted::quotas`](crate::Accepted::quotas) and
    /// [`Rejected::quotas`](crate::Rejected::quotas)) into `headers` in this dialect,
    /// replacing any fields of the same names. Writes nothing if `quotas` is empty.
    ///
    /// `now` is the wall-clock instant the resets count from, read only by
    /// [`Reset::Epoch`]; under tokio's paused time `SystemTime::now()` does not stop with the
    /// clock, so pass the instant you want.
    ///
    /// [`Ietf`](Self::Ietf) writes one list member per announcement, in their order, named
    /// `"global"` for [`Limit::Global`] and `"scope"` for [`Limit::Scope`]; the other dialects
    /// carry one policy, and write the [tightest](Announced::tightest). Seconds are rounded up
    /// (see [`Dialect`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use hyper::HeaderMap;
    /// use paceline_sim::http::Dialect;
    /// use paceline_sim::{Announced, Limit};
    ///
    /// let global = Announced {
    ///     remaining: 90,
    ///     resets_in: Duration::from_secs(5),
    ///     limit: 100,
    ///     window: Duration::from_secs(10),
    /// };
    /// let scope = Announced {
    ///     remaining: 1,
    ///     resets_in: Duration::from_millis(400),
    ///     limit: 2,
    ///     window: Duration::from_secs(1),
    /// };
    /// let quotas = [(Limit::Global, global), (Limit::Scope, scope)];
    /// let mut headers = HeaderMap::new();
    /// Dialect::Ietf.write(&quotas, SystemTime::now(), &mut headers);
    /// assert_eq!(headers["ratelimit-policy"], r#""global";q=100;w=10, "scope";q=2;w=1"#);
    /// assert_eq!(headers["ratelimit"], r#""global";r=90;t=5, "scope";r=1;t=1"#);
    ///
    /// // The older fields carry the scope's, which has fewer left.
    /// let mut headers = HeaderMap::new();
    /// Dialect::RateLimit.write(&quotas, SystemTime::now(), &mut headers);
    /// assert_eq!(headers["ratelimit-remaining"], "1");
    /// assert_eq!(headers["ratelimit-reset"], "1");
    /// ```
    pub fn write(self, quotas: &[(Limit, Announced)], now: SystemTime, headers: &mut HeaderMap) {
        let Some(tightest) = Announced::tightest(quotas.iter().map(|&(_, q)| q)) else {
            return;
        };
        match self {
            Self::Ietf => {
                let (mut policy, mut state) = (String::new(), String::new());
                for (i, &(limit, q)) in quotas.iter().enumerate() {
                    let name = match limit {
                        Limit::Global => "global",
                        Limit::Scope => "scope",
                    };
                    let sep = if i == 0 { "" } else { ", " };
                    let (w, t) = (seconds_up(q.window), seconds_up(q.resets_in));
                    // Writing to a String cannot fail.
                    let _ = write!(policy, "{sep}\"{name}\";q={};w={w}", q.limit);
                    let _ = write!(state, "{sep}\"{name}\";r={};t={t}", q.remaining);
                }
                insert(headers, RATELIMIT_POLICY, policy);
                insert(headers, RATELIMIT, state);
            }
            Self::RateLimit => {
                insert(headers, RATELIMIT_LIMIT, tightest.limit);
                insert(headers, RATELIMIT_REMAINING, tightest.remaining);
                insert(headers, RATELIMIT_RESET, seconds_up(tightest.resets_in));
            }
            Self::XRateLimit { reset } => {
                let reset = match reset {
                    Reset::Delta => seconds_up(tightest.resets_in),
                    Reset::Epoch => epoch_seconds_up(now, tightest.resets_in),
                };
                insert(headers, X_RATELIMIT_LIMIT, tightest.limit);
                insert(headers, X_RATELIMIT_REMAINING, tightest.remaining);
                insert(headers, X_RATELIMIT_RESET, reset);
            }
        }
    }
}

/// `now + after` in whole seconds since the Unix epoch, rounded up (saturating; an instant
/// before the epoch counts as the epoch).
fn epoch_seconds_up(now: SystemTime, after: Duration) -> u64 {
    let since_epoch = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    since_epoch.checked_add(after).map_or(u64::MAX, seconds_up)
}

fn insert(headers: &mut HeaderMap, name: &'static str, value: impl ToString) {
    // Numbers and the quoted names above are visible ASCII: always a valid field value.
    let value = HeaderValue::try_from(value.to_string()).expect("a valid field value");
    headers.insert(HeaderName::from_static(name), value);
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn quota(remaining: u64, resets_in: Duration, limit: u64, window: Duration) -> Announced {
        Announced {
            remaining,
            resets_in,
            limit,
            window,
        }
    }

    /// The fields `dialect` writes for the global and the scope's announcements, as (name,
    /// value) pairs sorted by name.
    fn written(
        dialect: Dialect,
        global: Option<Announced>,
        scope: Option<Announced>,
        now: SystemTime,
    ) -> Vec<(String, String)> {
        let quotas: Vec<_> = [(Limit::Global, global), (Limit::Scope, scope)]
            .into_iter()
            .filter_map(|(limit, q)| Some((limit, q?)))
            .collect();
        let mut headers = HeaderMap::new();
        dialect.write(&quotas, now, &mut headers);
        let mut fields: Vec<_> = headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_owned()))
            .collect();
        fields.sort();
        fields
    }

    fn fields(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|&(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    const EPOCH_1000: Duration = Duration::from_secs(1_000);

    #[test]
    fn ietf_writes_one_member_per_policy_with_seconds_rounded_up() {
        let now = UNIX_EPOCH + EPOCH_1000;
        let global = quota(42, ms(3_001), 100, ms(10_000));
        let scope = quota(0, ms(1), 5, ms(1_500));
        assert_eq!(
            written(Dialect::Ietf, Some(global), Some(scope), now),
            fields(&[
                ("ratelimit", r#""global";r=42;t=4, "scope";r=0;t=1"#),
                (
                    "ratelimit-policy",
                    r#""global";q=100;w=10, "scope";q=5;w=2"#
                ),
            ])
        );
        assert_eq!(
            written(Dialect::Ietf, None, Some(scope), now),
            fields(&[
                ("ratelimit", r#""scope";r=0;t=1"#),
                ("ratelimit-policy", r#""scope";q=5;w=2"#),
            ])
        );
        // A reset that is due now is 0, not 1.
        let full = quota(5, Duration::ZERO, 5, SEC);
        assert_eq!(
            written(Dialect::Ietf, Some(full), None, now),
            fields(&[
                ("ratelimit", r#""global";r=5;t=0"#),
                ("ratelimit-policy", r#""global";q=5;w=1"#),
            ])
        );
    }

    #[test]
    fn the_separate_fields_carry_the_tightest_policy() {
        let now = UNIX_EPOCH + EPOCH_1000;
        let global = quota(42, ms(3_001), 100, 10 * SEC);
        let scope = quota(3, ms(500), 5, SEC);
        assert_eq!(
            written(Dialect::RateLimit, Some(global), Some(scope), now),
            fields(&[
                ("ratelimit-limit", "5"),
                ("ratelimit-remaining", "3"),
                ("ratelimit-reset", "1"),
            ])
        );
        assert_eq!(
            written(Dialect::RateLimit, Some(global), None, now),
            fields(&[
                ("ratelimit-limit", "100"),
                ("ratelimit-remaining", "42"),
                ("ratelimit-reset", "4"),
            ])
        );
        let delta = Dialect::XRateLimit {
            reset: Reset::Delta,
        };
        assert_eq!(
            written(delta, Some(global), Some(scope), now),
            fields(&[
                ("x-ratelimit-limit", "5"),
                ("x-ratelimit-remaining", "3"),
                ("x-ratelimit-reset", "1"),
            ])
        );
    }

    #[test]
    fn the_epoch_counts_from_the_given_now_and_rounds_up() {
        let epoch = Dialect::XRateLimit {
            reset: Reset::Epoch,
        };
        let reset = |now: SystemTime, resets_in| {
            let fields = written(epoch, Some(quota(1, resets_in, 2, SEC)), None, now);
            fields
                .into_iter()
                .find(|(k, _)| k == "x-ratelimit-reset")
                .map(|(_, v)| v)
        };
        let now = UNIX_EPOCH + EPOCH_1000;
        assert_eq!(reset(now, Duration::ZERO).as_deref(), Some("1000"));
        assert_eq!(reset(now, ms(1)).as_deref(), Some("1001"));
        assert_eq!(reset(now, 2 * SEC).as_deref(), Some("1002"));
        // 1000.6 s + 0.5 s = 1001.1 s: 1002, not 1001.
        assert_eq!(reset(now + ms(600), ms(500)).as_deref(), Some("1002"));
        assert_eq!(
            reset(now, Duration::MAX).as_deref(),
            Some("18446744073709551615")
        );
    }

    #[test]
    fn nothing_is_written_without_an_announcement_and_fields_are_replaced() {
        let now = UNIX_EPOCH + EPOCH_1000;
        for dialect in [
            Dialect::Ietf,
            Dialect::RateLimit,
            Dialect::XRateLimit {
                reset: Reset::Epoch,
            },
        ] {
            assert_eq!(written(dialect, None, None, now), []);
        }
        let mut headers = HeaderMap::new();
        headers.insert("ratelimit-remaining", HeaderValue::from_static("9"));
        let quotas = [(Limit::Global, quota(2, SEC, 3, SEC))];
        Dialect::RateLimit.write(&quotas, now, &mut headers);
        let values: Vec<_> = headers.get_all("ratelimit-remaining").iter().collect();
        assert_eq!(values, ["2"]);
    }
}
