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
//! Only the first `Retry-After` field counts, if a response has several. Without one, a
//! field named by a policy counts, `Retry-After-{policy}` (NestJS's throttler sends
//! `Retry-After-short` for its throttler named `short`): the longest readable wait of those, if
//! several.
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
//!    depend on the two machines' clocks agreeing. A family whose fields end in a policy's
//!    name is that policy's (`X-RateLimit-Remaining-short`, `X-RateLimit-Reset-short` and
//!    `X-RateLimit-Limit-short`, as NestJS's throttler names each throttler's but its
//!    `default`), read by the same rules; the tightest of the families counts, as of the
//!    IETF policies (a reset with a fraction taken as the next whole second). OpenAI's
//!    `-requests` and `-tokens` name dimensions, not policies (see [`announced`]).
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

use std::time::{Duration, SystemTime};

use ::http::header::RETRY_AFTER;
use ::http::{HeaderMap, HeaderValue, Response, StatusCode};

pub use crate::Announcement;
use crate::{Quota, RateLimited};

mod announced;
mod dialects;
mod usage;

pub use self::usage::usage;

use self::dialects::{dictionary_quota, ietf_quota, separate_quota, x_quota};

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
/// It reads the first `Retry-After` field only, whatever the status, or, without one, the
/// longest of the fields named by a policy, `Retry-After-{policy}`. See the
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
    match headers.get(RETRY_AFTER) {
        Some(value) => parse_retry_after(value, now),
        None => (headers.iter())
            .filter(|(name, _)| {
                let policy = name.as_str().strip_prefix("retry-after-");
                policy.is_some_and(|policy| !policy.is_empty())
            })
            .filter_map(|(_, value)| parse_retry_after(value, now))
            .max(),
    }
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
///   `X-RateLimit-*` family, as [`Dimension::UNITS`](crate::Dimension::UNITS), and beside
///   them each family a policy's name ends (`X-RateLimit-Remaining-short`), as that
///   policy's budget of [`Dimension::UNITS`](crate::Dimension::UNITS).
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
