//! A ready classifier for HTTP responses: 429 and 503 are throttles, `Retry-After` says how
//! long to wait; and a reader of the quota a server announces in its headers.
//!
//! The functions take the [`http`] crate's types, which reqwest and hyper both use
//! (`reqwest::StatusCode` and `reqwest::header::HeaderMap` *are* `http::StatusCode` and
//! `http::HeaderMap`), so a [`Gate`](crate::Gate)'s classifier is one line whatever the client:
//!
//! - [`rate_limited`] classifies an `http::Response` (hyper, or anything built on `http`);
//! - [`rate_limited_from`] classifies a status and headers, such as an error type of your own
//!   keeps (see its example for a reqwest client);
//! - [`rate_limited_at`] does the same against a clock you pass, for exact tests;
//! - [`retry_after`] and [`is_rate_limit_status`] are the building blocks, for a classifier of
//!   your own (one that also treats a `403` with a rate-limit body as a throttle, say);
//! - [`quota`] reads the [`Quota`] a server announces (units left, time to the reset, and the
//!   limit and window when told) from the headers of any response, throttle or not;
//!   [`quota_at`] does the same against a clock you pass;
//! - [`announced`] reads every budget announced, each with its [`Dimension`](crate::Dimension): OpenAI's and
//!   Anthropic's requests and tokens, and each policy of the IETF draft apart.
//!
//! # What counts as a throttle
//!
//! `429 Too Many Requests` and `503 Service Unavailable`, the two statuses with which RFC 9110
//! and RFC 6585 let a server ask for a later retry. A `Retry-After` on any other status (a
//! redirect may carry one) does not make it a throttle.
//!
//! # How `Retry-After` is read
//!
//! RFC 9110 §10.2.3 allows two forms, both read here:
//!
//! - **delay-seconds**, one or more ASCII digits: `120` is two minutes. Leading zeros are
//!   fine (`007` is 7 s); spaces and tabs around the digits are ignored (` 120 ` is 120 s),
//!   since HTTP's field values exclude them. A sign, a fraction or anything else makes the
//!   value malformed: `+1`, `-1`, `1.5`, `1s`, `1 2` and the empty value are all malformed.
//! - **HTTP-date**, in any of the forms RFC 9110 §5.6.7 lets a recipient accept (parsed by
//!   [`httpdate`]): the preferred IMF-fixdate `Sun, 06 Nov 1994 08:49:37 GMT`, and the obsolete
//!   RFC 850 `Sunday, 06-Nov-94 08:49:37 GMT` and asctime `Sun Nov  6 08:49:37 1994`. The wait
//!   is the date minus *now*, on this machine's wall clock ([`SystemTime::now`] in
//!   [`rate_limited`] and [`rate_limited_from`]; [`rate_limited_at`] and [`retry_after`] take it as an
//!   argument): a date in the past, or now, means a wait of zero. A date is only as good as the
//!   two machines' clocks agree; a server that sends delay-seconds avoids the question.
//!
//! Only the first `Retry-After` field counts, if a response has several.
//!
//! A wait of zero is still a throttle. Some servers send one for every throttle in the last
//! second of their window (Flask-Limiter rounds its seconds down), and a date already past
//! says the same: a gate waits out a Retry-After shorter than its own next backoff for the
//! longer of the two, and its exponential backoff grows as for a throttle without one (see
//! [`GateBuilder::backoff`](crate::GateBuilder::backoff)).
//!
//! A wait longer than [`MAX_RETRY_AFTER`] (one day) is taken as malformed, like a value that
//! cannot be read at all: a number of seconds too large for any integer type, a date a year
//! ahead from a server whose clock is wrong, or a bare mistake. Honouring it would hold back
//! every caller of the gate for longer than any rate limit lasts; without it, the throttle still
//! counts, and the gate's own exponential backoff applies (up to its cap, 30 s by default)
//! until the call succeeds or the gate gives up after its retry limit.
//!
//! A malformed `Retry-After` on a 429 or 503 gives a [`RateLimited`] *without* a Retry-After, never
//! a panic and never an error: the response is still a throttle, only its wait is unknown.
//!
//! # Reading an announced quota
//!
//! Many APIs tell on every response how much of their quota is left and when it resets.
//! [`quota`] reads three dialects of headers, in this order, and answers with the first one
//! that is there and well-formed; `None` if none is:
//!
//! 1. **The IETF draft** (draft-ietf-httpapi-ratelimit-headers): two structured fields
//!    (RFC 9651), each a List of policies named by Strings.
//!    `RateLimit: "burst";r=45;t=30, "daily";r=900;t=40000` gives each policy's units remaining
//!    (`r`) and seconds until its reset (`t`);
//!    `RateLimit-Policy: "burst";q=100;w=60, "daily";q=1000;w=86400` gives each policy's quota
//!    (`q`, the limit) and window in seconds (`w`). The tightest policy of `RateLimit` counts
//!    (see below), with the limit and window of the `RateLimit-Policy` member of the same name
//!    if there is one. Both fields are Lists, so a field sent on several lines is read as one,
//!    its lines joined by commas (RFC 9110 §5.3). They are parsed by [`sfv`]; the parameters
//!    `qu` (the quota's unit), `pk` (the partition key) and any other are ignored.
//! 2. **The older separate fields**: `RateLimit-Remaining`, `RateLimit-Reset` (seconds until
//!    the reset) and `RateLimit-Limit`. A `RateLimit-Limit` that lists policies, such as
//!    `10, 10;w=1, 1000;w=3600`, gives its first number as the limit, and the window from the
//!    `w` of a member with that same number (here 1 s).
//! 3. **The `X-RateLimit-*` family** (GitHub's, Twitter's, Discord's and many others'):
//!    `X-RateLimit-Remaining`, `X-RateLimit-Limit`, and the reset in `X-RateLimit-Reset`, as
//!    seconds or as a Unix time (see below). If `X-RateLimit-Reset-After` (seconds, as Discord
//!    sends) is there and readable, it gives the reset instead: a number of seconds does not
//!    depend on the two machines' clocks agreeing.
//!
//! Each dialect needs the units remaining and the reset: without a remaining field the dialect
//! is absent, and with one but no readable reset it is malformed; either way the next is tried.
//! The limit and the window are told when they can be read, and left out otherwise.
//!
//! ## Several policies: the tightest counts
//!
//! A server may enforce several policies at once (a burst limit and a daily one, say), and
//! announce each in `RateLimit`. The one that counts is the tightest: the one with the lowest
//! rate that can be kept up until its reset, `r / t` units a second. A policy with nothing left
//! (`r = 0`) is the tightest of all, and of several such, the one that resets last; a policy
//! with units left whose window resets now (`t = 0`) is the least tight. Between equal rates,
//! the one that resets last counts, then the one with fewer left, then the first listed.
//!
//! ## Seconds or a Unix time
//!
//! In `X-RateLimit-Reset`, some servers send seconds until the reset and others (GitHub) the
//! reset's Unix time, in seconds. A value of at least 1,000,000,000 (the Unix time of
//! 2001-09-09T01:46:40Z) is taken as a Unix time, and a smaller one as seconds: no real window
//! lasts the 31 years that 1,000,000,000 seconds make. A Unix time is measured against *now*
//! ([`SystemTime::now`] in [`quota`]; [`quota_at`] takes it as an argument), and one already
//! past means a reset of zero; it is only as good as the two machines' clocks agree. In this
//! family only, a reset may have a fraction, of any number of digits, in either form (`1.234`,
//! as Discord sends; `1795639198.2404528`, Python's `time.time()`, as slowapi sends), read to
//! the nanosecond.
//!
//! ## What is ignored
//!
//! A number in the separate fields is one or more ASCII digits, with spaces and tabs around;
//! in the IETF fields, and in `RateLimit-Limit` (read as a structured List too), it is a
//! non-negative Integer. A sign, a fraction (save in the
//! `X-RateLimit-*` resets), a number too large for a `u64`, and any other text make a value
//! malformed, as does a reset or a window longer than one year, the longest wait the crate
//! takes. A remaining count above the stated limit is kept as it is.
//!
//! A malformed remaining count or reset makes its dialect malformed; a malformed limit or window
//! is left out of the quota; a `RateLimit` member that is not a String with readable `r` and `t`
//! is skipped, and the other members still count; a field that does not parse as a structured
//! List is ignored whole. Only the first field of each name counts in the separate fields (as
//! for `Retry-After`). Whatever is ignored is told in a `tracing` event with the target
//! `paceline::http`, naming the header, at warn level the first time the process ignores a
//! value of that field and at debug level after: never a panic, never an error.
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use http::{Response, StatusCode};
//! use paceline::RateLimited;
//! use paceline::http::rate_limited;
//!
//! let too_many = Response::builder()
//!     .status(StatusCode::TOO_MANY_REQUESTS)
//!     .header("Retry-After", "120")
//!     .body(())
//!     .unwrap();
//! assert_eq!(rate_limited(&too_many), Some(RateLimited::new().retry_after(Duration::from_secs(120))));
//!
//! let not_found = Response::builder().status(StatusCode::NOT_FOUND).body(()).unwrap();
//! assert_eq!(rate_limited(&not_found), None);
//! ```

use std::cmp::Ordering;
use std::fmt;
use std::time::{Duration, SystemTime};

use ::http::header::{HeaderName, RETRY_AFTER};
use ::http::{HeaderMap, HeaderValue, Response, StatusCode};
use sfv::{Dictionary, Item, List, ListEntry, Parser};

pub use self::announced::Announcement;
use crate::time::MAX_WAIT;
use crate::{Quota, RateLimited};

mod announced;

/// The longest `Retry-After` honoured: one day (86,400 s). A longer one is taken as malformed
/// (see the [module docs](self)).
///
/// A day covers the longest waits real APIs ask for (daily quotas reset within one; penalties
/// such as Google Ads' last at most 15 minutes).
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(24 * 60 * 60);

/// Classifies a response: a [`RateLimited`] for a 429 or a 503, with its `Retry-After` if it has
/// one that can be read; `None` for any other status.
///
/// An HTTP-date in `Retry-After` is measured against [`SystemTime::now`]. See the
/// [module docs](self) for the rules, and [`rate_limited_at`] to pass the clock.
///
/// # Examples
///
/// A classifier for a [`Gate`](crate::Gate) whose calls fail with the whole response, as
/// hyper's clients can:
///
/// ```
/// use http::Response;
/// use paceline::Gate;
///
/// let gate = Gate::builder(|response: &Response<String>| paceline::http::rate_limited(response))
///     .build()
///     .unwrap();
/// # let _ = gate;
/// ```
pub fn rate_limited<B>(response: &Response<B>) -> Option<RateLimited> {
    rate_limited_from(response.status(), response.headers())
}

/// Classifies a status and its headers: a [`RateLimited`] for a 429 or a 503, with its
/// `Retry-After` if it has one that can be read; `None` for any other status.
///
/// An HTTP-date in `Retry-After` is measured against [`SystemTime::now`]. See the
/// [module docs](self) for the rules, and [`rate_limited_at`] to pass the clock.
///
/// # Examples
///
/// Most clients turn an error status into an error of their own that keeps the status and the
/// headers; its classifier hands them to `rate_limited_from`. With reqwest (whose `StatusCode` and
/// `HeaderMap` are the `http` crate's):
///
/// ```
/// use std::time::Duration;
/// use http::{HeaderMap, StatusCode};
/// use paceline::{Error, Gate, RateLimited};
///
/// /// Why a call to the API failed.
/// #[derive(Debug)]
/// enum ApiError {
///     /// The server answered with an error status.
///     Status { status: StatusCode, headers: HeaderMap },
///     /// No answer came (connection refused, timeout, ...).
///     Transport(String),
/// }
///
/// /// Which errors mean "rate-limited": 429 and 503, with their Retry-After.
/// fn classify(error: &ApiError) -> Option<RateLimited> {
///     match error {
///         ApiError::Status { status, headers } => paceline::http::rate_limited_from(*status, headers),
///         ApiError::Transport(_) => None,
///     }
/// }
///
/// /// One call, with reqwest.
/// async fn fetch(client: &reqwest::Client, url: &str) -> Result<String, ApiError> {
///     let transport = |e: reqwest::Error| ApiError::Transport(e.to_string());
///     let response = client.get(url).send().await.map_err(transport)?;
///     let status = response.status();
///     if !status.is_success() {
///         let headers = response.headers().clone();
///         return Err(ApiError::Status { status, headers });
///     }
///     response.text().await.map_err(transport)
/// }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let gate = Gate::builder(classify).build().unwrap();
/// # let _ = fetch;
/// // Here a stand-in for `fetch` is throttled once, with `Retry-After: 2`; the gate waits
/// // the two seconds, then calls it again.
/// let start = tokio::time::Instant::now();
/// let mut attempts = 0;
/// let body = gate
///     .call(|| {
///         attempts += 1;
///         let first = attempts == 1;
///         async move {
///             if first {
///                 let mut headers = HeaderMap::new();
///                 headers.insert("retry-after", "2".parse().unwrap());
///                 return Err(ApiError::Status { status: StatusCode::TOO_MANY_REQUESTS, headers });
///             }
///             Ok("hello".to_owned())
///         }
///     })
///     .await;
/// assert_eq!(body.unwrap(), "hello");
/// assert_eq!(start.elapsed(), Duration::from_secs(2));
///
/// // Errors that are not throttles come back at once, unchanged.
/// let failed = gate
///     .call(|| async { Err::<(), _>(ApiError::Transport("connection refused".into())) })
///     .await;
/// assert!(matches!(failed, Err(Error::Call(ApiError::Transport(_)))));
/// # }
/// ```
///
/// A throttle that applies to one account only takes its [scope](RateLimited::scope) on top:
/// `rate_limited_from(status, headers).map(|t| t.scope(account))`.
pub fn rate_limited_from(status: StatusCode, headers: &HeaderMap) -> Option<RateLimited> {
    rate_limited_at(status, headers, SystemTime::now())
}

/// Like [`rate_limited_from`], with an HTTP-date in `Retry-After` measured against `now` instead of
/// the wall clock: the pure function, for exact tests. A throttle whose headers also announce
/// the quota (see [`quota_at`]) carries it, for the gate to pace from
/// ([`RateLimited::quota`]).
///
/// # Examples
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use http::{HeaderMap, StatusCode};
/// use paceline::RateLimited;
/// use paceline::http::rate_limited_at;
///
/// let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777); // 1994-11-06 08:49:37
/// let mut headers = HeaderMap::new();
/// headers.insert("retry-after", "Sun, 06 Nov 1994 08:50:07 GMT".parse().unwrap());
/// let thirty = RateLimited::new().retry_after(Duration::from_secs(30));
/// assert_eq!(rate_limited_at(StatusCode::SERVICE_UNAVAILABLE, &headers, now), Some(thirty));
///
/// // Unreadable: still a throttle, without a Retry-After.
/// headers.insert("retry-after", "soon".parse().unwrap());
/// assert_eq!(rate_limited_at(StatusCode::TOO_MANY_REQUESTS, &headers, now), Some(RateLimited::new()));
/// assert_eq!(rate_limited_at(StatusCode::BAD_GATEWAY, &headers, now), None);
/// ```
pub fn rate_limited_at(
    status: StatusCode,
    headers: &HeaderMap,
    now: SystemTime,
) -> Option<RateLimited> {
    if !is_rate_limit_status(status) {
        return None;
    }
    let mut limited = RateLimited::new();
    if let Some(after) = retry_after(headers, now) {
        limited = limited.retry_after(after);
    }
    if let Some(quota) = quota_at(headers, now) {
        limited = limited.quota(quota);
    }
    Some(limited)
}

/// Whether a status asks the client to slow down: `429 Too Many Requests` or
/// `503 Service Unavailable`.
///
/// # Examples
///
/// ```
/// use http::StatusCode;
/// use paceline::http::is_rate_limit_status;
///
/// assert!(is_rate_limit_status(StatusCode::TOO_MANY_REQUESTS));
/// assert!(is_rate_limit_status(StatusCode::SERVICE_UNAVAILABLE));
/// assert!(!is_rate_limit_status(StatusCode::INTERNAL_SERVER_ERROR));
/// ```
pub fn is_rate_limit_status(status: StatusCode) -> bool {
    status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE
}

/// How long the headers' `Retry-After` says to wait, counted from `now` if it is an HTTP-date;
/// `None` if there is none, or it is malformed or longer than [`MAX_RETRY_AFTER`].
///
/// It reads the first `Retry-After` field only, whatever the status. See the
/// [module docs](self) for the forms accepted.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use http::HeaderMap;
/// use paceline::http::retry_after;
///
/// let now = SystemTime::now();
/// let mut headers = HeaderMap::new();
/// assert_eq!(retry_after(&headers, now), None);
///
/// headers.insert("retry-after", "120".parse().unwrap());
/// assert_eq!(retry_after(&headers, now), Some(Duration::from_secs(120)));
///
/// // A date already past: no need to wait.
/// headers.insert("retry-after", "Sun, 06 Nov 1994 08:49:37 GMT".parse().unwrap());
/// assert_eq!(retry_after(&headers, now), Some(Duration::ZERO));
///
/// for malformed in ["-1", "1.5", "", "soon", "99999999999999999999999"] {
///     headers.insert("retry-after", malformed.parse().unwrap());
///     assert_eq!(retry_after(&headers, now), None, "{malformed:?}");
/// }
/// ```
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    parse_retry_after(headers.get(RETRY_AFTER)?, now)
}

/// One `Retry-After` value, in either form, within [`MAX_RETRY_AFTER`].
fn parse_retry_after(value: &HeaderValue, now: SystemTime) -> Option<Duration> {
    // Visible ASCII and tabs only: obs-text (bytes 0x80 and up) is malformed here.
    let text = value.to_str().ok()?.trim_matches([' ', '\t']);
    let wait = if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        // Too many digits for a u64 is far beyond the cap anyway.
        Duration::from_secs(text.parse().ok()?)
    } else {
        let at = httpdate::parse_http_date(text).ok()?;
        at.duration_since(now).unwrap_or(Duration::ZERO)
    };
    (wait <= MAX_RETRY_AFTER).then_some(wait)
}

/// `RateLimit`, the IETF draft's remaining units and reset of each policy.
const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// `RateLimit-Policy`, the IETF draft's quota and window of each policy.
const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// The older separate fields.
const RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("ratelimit-limit");
const RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("ratelimit-remaining");
const RATELIMIT_RESET: HeaderName = HeaderName::from_static("ratelimit-reset");
/// The `X-RateLimit-*` family.
const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");
const X_RATELIMIT_RESET_AFTER: HeaderName = HeaderName::from_static("x-ratelimit-reset-after");

/// The smallest `X-RateLimit-Reset` read as a Unix time rather than as seconds to wait:
/// 2001-09-09T01:46:40Z (see the [module docs](self)).
const UNIX_TIME_FROM: u64 = 1_000_000_000;

/// The quota the headers announce: units left in the current window and when it resets, with
/// the window's limit and length when they are told; `None` if no dialect is there and
/// well-formed.
///
/// A reset given as a Unix time (in `X-RateLimit-Reset`) is measured against
/// [`SystemTime::now`]. See the [module docs](self#reading-an-announced-quota) for the
/// dialects read, in which order, and which policy counts when several are announced; and
/// [`quota_at`] to pass the clock.
///
/// # Examples
///
/// With the IETF draft's fields, the tightest policy counts: here the daily one, whose 900 units
/// left for 40,000 s allow fewer a second (0.0225) than the burst one's 45 for 30 s (1.5).
///
/// ```
/// use std::time::Duration;
/// use http::HeaderMap;
/// use paceline::Quota;
/// use paceline::http::quota;
///
/// let mut headers = HeaderMap::new();
/// headers.insert("ratelimit-policy", r#""burst";q=100;w=60, "daily";q=1000;w=86400"#.parse().unwrap());
/// headers.insert("ratelimit", r#""burst";r=45;t=30, "daily";r=900;t=40000"#.parse().unwrap());
/// let daily = Quota::new(900, Duration::from_secs(40_000))
///     .with_limit(1000)
///     .with_window(Duration::from_secs(86_400));
/// assert_eq!(quota(&headers), Some(daily));
///
/// // Nothing announced.
/// assert_eq!(quota(&HeaderMap::new()), None);
/// ```
pub fn quota(headers: &HeaderMap) -> Option<Quota> {
    quota_at(headers, SystemTime::now())
}

/// Like [`quota`], with a reset given as a Unix time measured against `now` instead of the
/// wall clock: the pure function, for exact tests.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use http::HeaderMap;
/// use paceline::Quota;
/// use paceline::http::quota_at;
///
/// let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
/// let mut headers = HeaderMap::new();
/// headers.insert("x-ratelimit-limit", "5000".parse().unwrap());
/// headers.insert("x-ratelimit-remaining", "4987".parse().unwrap());
///
/// // A Unix time (GitHub's way): the reset is 60 s after `now`.
/// headers.insert("x-ratelimit-reset", "1700000060".parse().unwrap());
/// let in_a_minute = Quota::new(4987, Duration::from_secs(60)).with_limit(5000);
/// assert_eq!(quota_at(&headers, now), Some(in_a_minute));
///
/// // Seconds to wait, fractions included (Discord's way).
/// headers.insert("x-ratelimit-reset", "1.25".parse().unwrap());
/// let soon = Quota::new(4987, Duration::from_millis(1250)).with_limit(5000);
/// assert_eq!(quota_at(&headers, now), Some(soon));
///
/// // Unreadable: the dialect is skipped, and no other is there.
/// headers.insert("x-ratelimit-reset", "soon".parse().unwrap());
/// assert_eq!(quota_at(&headers, now), None);
/// ```
pub fn quota_at(headers: &HeaderMap, now: SystemTime) -> Option<Quota> {
    ietf_quota(headers)
        .or_else(|| dictionary_quota(headers))
        .or_else(|| separate_quota(headers))
        .or_else(|| x_quota(headers, now))
}

/// Every budget a response's `headers` announce, in every dimension, where [`quota`] reads
/// the tightest of one: one [`Announcement`] for each.
///
/// - **OpenAI**: `x-ratelimit-{remaining,reset,limit}-{requests,tokens}`, the reset a
///   duration as Go writes one (`6m0s`, `1m30.5s`, `12ms`): [`Dimension::REQUESTS`](crate::Dimension::REQUESTS) and
///   [`Dimension::TOKENS`](crate::Dimension::TOKENS).
/// - **Anthropic**: `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-
///   {remaining,reset,limit}`, the reset an RFC 3339 time (`2025-01-31T23:59:30Z`): those four
///   dimensions.
/// - **The generic dialects** [`quota`] reads, in its order: every policy of the IETF draft's
///   `RateLimit` apart (not only the tightest), named, its dimension the `qu` that
///   `RateLimit-Policy` gives it (`"requests"` is [`Dimension::REQUESTS`](crate::Dimension::REQUESTS)'s name) or else
///   [`Dimension::UNITS`](crate::Dimension::UNITS); failing those, the separate `RateLimit-*` fields or the
///   `X-RateLimit-*` family, as [`Dimension::UNITS`](crate::Dimension::UNITS).
///
/// Each provider's dimension needs its remaining count and a readable reset; a malformed one
/// is skipped and told (see the [module docs](self#what-is-ignored)), and the others still
/// count. A reset given as a time is measured against [`SystemTime::now`]; [`announced_at`]
/// takes `now` as an argument.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use http::HeaderMap;
/// use paceline::{Dimension, Quota};
/// use paceline::http::announced;
///
/// // An OpenAI answer: 59 requests and 149,000 tokens left this minute.
/// let mut headers = HeaderMap::new();
/// headers.insert("x-ratelimit-limit-requests", "60".parse().unwrap());
/// headers.insert("x-ratelimit-remaining-requests", "59".parse().unwrap());
/// headers.insert("x-ratelimit-reset-requests", "1s".parse().unwrap());
/// headers.insert("x-ratelimit-limit-tokens", "150000".parse().unwrap());
/// headers.insert("x-ratelimit-remaining-tokens", "149000".parse().unwrap());
/// headers.insert("x-ratelimit-reset-tokens", "400ms".parse().unwrap());
/// let budgets = announced(&headers);
/// assert_eq!(budgets.len(), 2);
/// assert_eq!(budgets[0].dimension, Dimension::REQUESTS);
/// assert_eq!(budgets[0].quota, Quota::new(59, Duration::from_secs(1)).with_limit(60));
/// assert_eq!(budgets[1].dimension, Dimension::TOKENS);
/// assert_eq!(budgets[1].quota.remaining(), 149_000);
/// assert_eq!(budgets[1].quota.resets_in(), Duration::from_millis(400));
/// ```
pub fn announced(headers: &HeaderMap) -> Vec<Announcement> {
    announced_at(headers, SystemTime::now())
}

/// Like [`announced`], with a reset given as a time measured against `now` instead of the
/// wall clock: the pure function, for exact tests.
pub fn announced_at(headers: &HeaderMap, now: SystemTime) -> Vec<Announcement> {
    self::announced::announced_at(headers, now)
}

/// One policy of the IETF draft's `RateLimit` field.
#[derive(Debug, Clone, Copy)]
struct Reading<'a> {
    name: &'a str,
    remaining: u64,
    /// Seconds until the reset.
    reset: u64,
}

/// One policy the IETF fields announce, read whole.
#[derive(Debug)]
struct IetfPolicy {
    name: String,
    /// What it counts, if `RateLimit-Policy` says (`qu`).
    unit: Option<String>,
    quota: Quota,
    /// Its remaining count and reset as `RateLimit` gave them, to find the tightest.
    tightness: (u64, u64),
}

impl IetfPolicy {
    fn as_announced(&self) -> Reading<'_> {
        Reading {
            name: &self.name,
            remaining: self.tightness.0,
            reset: self.tightness.1,
        }
    }
}

/// Dialect 1: the tightest policy of `RateLimit`, with its limit and window from the
/// `RateLimit-Policy` of the same name.
fn ietf_quota(headers: &HeaderMap) -> Option<Quota> {
    let policies = ietf_policies(headers)?;
    let tightest = policies
        .iter()
        .min_by(|a, b| tightness(&a.as_announced(), &b.as_announced()))?;
    Some(tightest.quota)
}

/// Every policy of `RateLimit` with readable `r` and `t`, each with its limit, window and
/// unit from the `RateLimit-Policy` of the same name: `None` if `RateLimit` is absent,
/// unreadable, or has no such policy (told).
fn ietf_policies(headers: &HeaderMap) -> Option<Vec<IetfPolicy>> {
    if ratelimit_dictionary(headers).is_some() {
        // An earlier revision's form: see `dictionary_quota`.
        return None;
    }
    let limits = structured_list(headers, &RATELIMIT)?;
    let announced: Vec<_> = limits.iter().filter_map(reading).collect();
    if announced.is_empty() {
        ignored(&RATELIMIT, "no policy with a readable r and t");
        return None;
    }
    let policies = structured_list(headers, &RATELIMIT_POLICY).unwrap_or_default();
    let read = |policy: Reading<'_>| {
        let mut quota = Quota::new(policy.remaining, Duration::from_secs(policy.reset));
        let mut unit = None;
        let named = policies.iter().find_map(|entry| match entry {
            ListEntry::Item(item) if policy_name(item) == Some(policy.name) => Some(item),
            _ => None,
        });
        if let Some(named) = named {
            if let Some(limit) = parameter(named, "q", &RATELIMIT_POLICY) {
                quota = quota.with_limit(limit);
            }
            if let Some(window) = parameter(named, "w", &RATELIMIT_POLICY) {
                match seconds_within_a_year(window) {
                    Some(window) if !window.is_zero() => quota = quota.with_window(window),
                    _ => ignored(&RATELIMIT_POLICY, format_args!("a window of {window} s")),
                }
            }
            unit = named.params.get("qu").and_then(|unit| {
                let text = unit.as_string().map(|s| s.as_str());
                text.or_else(|| unit.as_token().map(|t| t.as_str()))
                    .map(str::to_owned)
            });
        }
        IetfPolicy {
            name: policy.name.to_owned(),
            unit,
            quota,
            tightness: (policy.remaining, policy.reset),
        }
    };
    Some(announced.into_iter().map(read).collect())
}

/// A `RateLimit` member that names a policy and gives readable `r` and `t`.
fn reading(entry: &ListEntry) -> Option<Reading<'_>> {
    let ListEntry::Item(item) = entry else {
        ignored(&RATELIMIT, "an inner list, where a policy was due");
        return None;
    };
    let Some(name) = policy_name(item) else {
        ignored(&RATELIMIT, "a policy not named by a String");
        return None;
    };
    if let Some(key) = ["r", "t"]
        .into_iter()
        .find(|key| !item.params.contains_key(*key))
    {
        ignored(&RATELIMIT, format_args!("a policy without {key}"));
        return None;
    }
    let remaining = parameter(item, "r", &RATELIMIT)?;
    let reset = parameter(item, "t", &RATELIMIT)?;
    if seconds_within_a_year(reset).is_none() {
        ignored(&RATELIMIT, format_args!("a reset in {reset} s"));
        return None;
    }
    Some(Reading {
        name,
        remaining,
        reset,
    })
}

/// Orders two policies by how tight they are, the tightest first: the lowest rate `r / t` (with
/// nothing left, a rate of zero; reset now with units left, an unbounded one), then the latest
/// reset, then the fewest left (which only tells apart policies that both reset now).
fn tightness(a: &Reading<'_>, b: &Reading<'_>) -> Ordering {
    let later_reset_first = b.reset.cmp(&a.reset);
    match (a.remaining, b.remaining, a.reset, b.reset) {
        (0, 0, _, _) => later_reset_first,
        (0, _, _, _) => Ordering::Less,
        (_, 0, _, _) => Ordering::Greater,
        // Both reset now, with units left: the fewer left first.
        (_, _, 0, 0) => a.remaining.cmp(&b.remaining),
        (_, _, 0, _) => Ordering::Greater,
        (_, _, _, 0) => Ordering::Less,
        // a.r / a.t against b.r / b.t, multiplied out: each product is below 2^75.
        (ar, br, at, bt) => (u128::from(ar) * u128::from(bt))
            .cmp(&(u128::from(br) * u128::from(at)))
            .then(later_reset_first),
    }
}

/// The policy an IETF member names: its bare item, a String.
fn policy_name(item: &Item) -> Option<&str> {
    item.bare_item.as_string().map(|name| name.as_str())
}

/// An IETF member's parameter `key`, a non-negative Integer; `None` (with a debug event naming
/// `field` if it is there but unreadable) otherwise.
fn parameter(item: &Item, key: &str, field: &HeaderName) -> Option<u64> {
    let value = item.params.get(key)?;
    let number = value.as_integer().and_then(|n| u64::try_from(n).ok());
    if number.is_none() {
        ignored(field, format_args!("{key}={value:?}, not a whole number"));
    }
    number
}

/// All the lines of a List field, joined as RFC 9110 §5.3 lets a recipient: `None` if there
/// are none, or (with a debug event) if they do not parse.
fn structured_list(headers: &HeaderMap, name: &HeaderName) -> Option<List> {
    let joined = joined_lines(headers, name)?;
    match Parser::new(&joined).parse::<List>() {
        Ok(list) => Some(list),
        Err(error) => {
            ignored(name, format_args!("not a structured-field List ({error})"));
            None
        }
    }
}

/// All the lines of field `name`, joined by commas; `None` if there are none.
fn joined_lines(headers: &HeaderMap, name: &HeaderName) -> Option<Vec<u8>> {
    let mut lines = headers.get_all(name).iter();
    let mut joined = lines.next()?.as_bytes().to_vec();
    for line in lines {
        joined.extend_from_slice(b", ");
        joined.extend_from_slice(line.as_bytes());
    }
    Some(joined)
}

/// `RateLimit` as an earlier revision of the draft sends it, one Dictionary
/// (`limit=100, remaining=50, reset=30`), if it is one that has `remaining`.
fn ratelimit_dictionary(headers: &HeaderMap) -> Option<Dictionary> {
    let joined = joined_lines(headers, &RATELIMIT)?;
    let dictionary: Dictionary = Parser::new(&joined).parse().ok()?;
    dictionary.contains_key("remaining").then_some(dictionary)
}

/// Dialect 1, as an earlier revision of the draft sends it: `RateLimit` one Dictionary of
/// `remaining`, `reset` (seconds) and `limit`, and the window from the `w` of a
/// `RateLimit-Policy` such as `100;w=60`, when readable.
fn dictionary_quota(headers: &HeaderMap) -> Option<Quota> {
    let dictionary = ratelimit_dictionary(headers)?;
    let number = |key: &str| match dictionary.get(key)? {
        ListEntry::Item(item) => item
            .bare_item
            .as_integer()
            .and_then(|n| u64::try_from(n).ok()),
        ListEntry::InnerList(_) => None,
    };
    let Some(remaining) = number("remaining") else {
        ignored(&RATELIMIT, "remaining=, not a whole number");
        return None;
    };
    let Some(reset) = number("reset").and_then(seconds_within_a_year) else {
        ignored(
            &RATELIMIT,
            "no reset= of seconds within a year beside remaining=",
        );
        return None;
    };
    let mut quota = Quota::new(remaining, reset);
    if let Some(limit) = number("limit") {
        quota = quota.with_limit(limit);
    }
    let policy = headers.get(RATELIMIT_POLICY).and_then(policy_limit);
    if let Some((_, Some(window))) = policy {
        quota = quota.with_window(window);
    }
    Some(quota)
}

/// Dialect 2: `RateLimit-Remaining` and `RateLimit-Reset` (whole seconds), and
/// `RateLimit-Limit` if readable.
fn separate_quota(headers: &HeaderMap) -> Option<Quota> {
    let remaining = required_number(headers, &RATELIMIT_REMAINING)?;
    let Some(reset) = headers.get(RATELIMIT_RESET) else {
        ignored(&RATELIMIT_REMAINING, "no RateLimit-Reset beside it");
        return None;
    };
    let Some(reset) = whole_number(reset).and_then(seconds_within_a_year) else {
        ignored(&RATELIMIT_RESET, "not a number of seconds within a year");
        return None;
    };
    let mut quota = Quota::new(remaining, reset);
    if let Some(limit) = headers.get(RATELIMIT_LIMIT) {
        match policy_limit(limit) {
            Some((limit, window)) => {
                quota = quota.with_limit(limit);
                if let Some(window) = window {
                    quota = quota.with_window(window);
                }
            }
            None => ignored(&RATELIMIT_LIMIT, "not a whole number first"),
        }
    }
    Some(quota)
}

/// A `RateLimit-Limit` value, `10` or a policy list `10, 10;w=1, 1000;w=3600`: its first
/// number, and the `w` of the first member of that same number that has a readable one.
fn policy_limit(value: &HeaderValue) -> Option<(u64, Option<Duration>)> {
    let list = Parser::new(value.as_bytes()).parse::<List>().ok()?;
    let number = |entry: &ListEntry| match entry {
        ListEntry::Item(item) => item
            .bare_item
            .as_integer()
            .and_then(|n| u64::try_from(n).ok()),
        ListEntry::InnerList(_) => None,
    };
    let limit = number(list.first()?)?;
    let window = list
        .iter()
        .filter(|entry| number(entry) == Some(limit))
        .filter_map(|entry| match entry {
            ListEntry::Item(item) => item.params.get("w")?.as_integer(),
            ListEntry::InnerList(_) => None,
        })
        .find_map(|w| u64::try_from(w).ok().and_then(seconds_within_a_year))
        .filter(|w| !w.is_zero());
    Some((limit, window))
}

/// Dialect 3: `X-RateLimit-Remaining` and a reset, from `X-RateLimit-Reset-After` (seconds) if
/// readable, else from `X-RateLimit-Reset` (seconds or a Unix time); and `X-RateLimit-Limit`
/// if readable.
fn x_quota(headers: &HeaderMap, now: SystemTime) -> Option<Quota> {
    let remaining = required_number(headers, &X_RATELIMIT_REMAINING)?;
    let after = headers.get(X_RATELIMIT_RESET_AFTER).and_then(|value| {
        let after = decimal_seconds(value).and_then(within_a_year);
        if after.is_none() {
            ignored(
                &X_RATELIMIT_RESET_AFTER,
                "not a number of seconds within a year",
            );
        }
        after
    });
    let reset = match after {
        Some(after) => after,
        None => {
            let Some(reset) = headers.get(X_RATELIMIT_RESET) else {
                ignored(&X_RATELIMIT_REMAINING, "no readable reset beside it");
                return None;
            };
            let reset = decimal_seconds(reset).and_then(|reset| {
                if reset.as_secs() < UNIX_TIME_FROM {
                    return within_a_year(reset);
                }
                let at = SystemTime::UNIX_EPOCH.checked_add(reset)?;
                within_a_year(at.duration_since(now).unwrap_or(Duration::ZERO))
            });
            let Some(reset) = reset else {
                ignored(
                    &X_RATELIMIT_RESET,
                    "neither seconds nor a Unix time within a year",
                );
                return None;
            };
            reset
        }
    };
    let mut quota = Quota::new(remaining, reset);
    if let Some(limit) = headers.get(X_RATELIMIT_LIMIT) {
        match whole_number(limit) {
            Some(limit) => quota = quota.with_limit(limit),
            None => ignored(&X_RATELIMIT_LIMIT, "not a whole number"),
        }
    }
    Some(quota)
}

/// The first field `name`, a whole number: `None` if there is none, or (with a debug event) if
/// it is unreadable.
fn required_number(headers: &HeaderMap, name: &HeaderName) -> Option<u64> {
    let number = whole_number(headers.get(name)?);
    if number.is_none() {
        ignored(name, "not a whole number");
    }
    number
}

/// One or more ASCII digits, with spaces and tabs around, that fit a `u64`.
fn whole_number(value: &HeaderValue) -> Option<u64> {
    let text = trimmed(value)?;
    let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    digits.then(|| text.parse().ok()).flatten()
}

/// Whole seconds, or seconds with a fraction of any number of digits (`1.5`, `1.234`, Python's
/// `time.time()` as `1795639198.2404528`), with spaces and tabs around; read to the
/// nanosecond, the digits past it dropped.
fn decimal_seconds(value: &HeaderValue) -> Option<Duration> {
    let text = trimmed(value)?;
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    let fraction_ok = text.len() == whole.len() || !fraction.is_empty();
    if whole.is_empty() || !all_digits(whole) || !all_digits(fraction) || !fraction_ok {
        return None;
    }
    let nanos = fraction.bytes().chain(*b"000000000").take(9);
    let nanos = nanos.fold(0, |n, digit| n * 10 + u32::from(digit - b'0'));
    Some(Duration::new(whole.parse().ok()?, nanos))
}

/// The value as text without the spaces and tabs around it, if it is visible ASCII and tabs.
fn trimmed(value: &HeaderValue) -> Option<&str> {
    Some(value.to_str().ok()?.trim_matches([' ', '\t']))
}

/// `secs` seconds, if that is at most a year ([`MAX_WAIT`]).
fn seconds_within_a_year(secs: u64) -> Option<Duration> {
    within_a_year(Duration::from_secs(secs))
}

/// `wait`, if it is at most a year ([`MAX_WAIT`]).
fn within_a_year(wait: Duration) -> Option<Duration> {
    (wait <= MAX_WAIT).then_some(wait)
}

/// Tells that a value of field `name` was ignored, and why: at warn level the first time this
/// process ignores one of that field (a server whose quota the gate cannot read is worth
/// knowing of), at debug level after that, so that a server that always sends it does not
/// fill the log.
fn ignored(name: &HeaderName, why: impl fmt::Display) {
    static WARNED: Warned = Warned::new();
    if WARNED.first(name) {
        tracing::warn!(target: "paceline::http", header = %name, "ignored {name}: {why} (told once at this level)");
    } else {
        tracing::debug!(target: "paceline::http", header = %name, "ignored {name}: {why}");
    }
}

/// The fields a warning was given for already.
struct Warned(std::sync::Mutex<Vec<HeaderName>>);

impl Warned {
    const fn new() -> Self {
        Self(std::sync::Mutex::new(Vec::new()))
    }

    /// Whether `name` is told of for the first time (and notes that it was).
    fn first(&self, name: &HeaderName) -> bool {
        let mut warned = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if warned.contains(name) {
            return false;
        }
        warned.push(name.clone());
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_is_warned_of_once_and_each_field_apart() {
        let warned = Warned::new();
        assert!(warned.first(&X_RATELIMIT_RESET));
        assert!(!warned.first(&X_RATELIMIT_RESET));
        assert!(warned.first(&RETRY_AFTER));
        assert!(!warned.first(&RETRY_AFTER));
        assert!(!warned.first(&X_RATELIMIT_RESET));
    }
}
