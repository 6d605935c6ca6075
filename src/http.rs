//! A ready classifier for HTTP responses: 429 and 503 are throttles, `Retry-After` says how
//! long to wait.
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
//!   your own (one that also treats a `403` with a rate-limit body as a throttle, say).
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

use crate::RateLimited;

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
/// the wall clock: the pure function, for exact tests.
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
    Some(match retry_after(headers, now) {
        Some(after) => RateLimited::new().retry_after(after),
        None => RateLimited::new(),
    })
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
