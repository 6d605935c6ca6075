//! A ready classifier for gRPC's [`tonic::Status`]: `RESOURCE_EXHAUSTED` and `UNAVAILABLE`
//! are throttles, and a `google.rpc.RetryInfo` detail says how long to wait.
//!
//! A [`Gate`](crate::Gate) whose calls fail with a `tonic::Status` (as every tonic client
//! call does) takes the classifier in one line:
//!
//! ```
//! use paceline::Gate;
//!
//! let gate = Gate::builder(paceline::tonic::rate_limited).build().unwrap();
//! # let _: Gate<tonic::Status> = gate;
//! ```
//!
//! - [`rate_limited`] classifies a status;
//! - [`is_rate_limit_code`] and [`retry_delay`] are the building blocks, for a classifier of
//!   your own (one that scopes a throttle to an account, or reads a delay that an API puts in
//!   a detail of its own).
//!
//! Some APIs put the delay in a detail of their own rather than in a `google.rpc.RetryInfo`:
//! the Google Ads API's `GoogleAdsFailure` carries a `QuotaErrorDetails` with a `retry_delay`
//! and a `rate_scope` (the account or the developer token). A classifier for such an API
//! decodes that detail with the API's own generated types, and builds its answer from
//! [`is_rate_limit_code`] and [`RateLimited::retry_after`].
//!
//! # What counts as a throttle
//!
//! The two codes with which gRPC asks a client to come back later: `RESOURCE_EXHAUSTED` (a
//! quota or a rate limit ran out) and `UNAVAILABLE` (the service is down for a while; gRPC
//! says to retry it with backoff). No other code is a throttle, with or without a RetryInfo.
//!
//! tonic itself answers with these codes for some errors that no wait mends, and the gate
//! retries them all the same, up to its retry limit, before it gives up with
//! [`Error::GaveUp`](crate::Error::GaveUp) carrying the last status: `UNAVAILABLE` when no
//! connection can be made, and `RESOURCE_EXHAUSTED` when a compressed message would grow past
//! the size limit, or a message past 4 GB. (A message over the size limit itself is
//! `OUT_OF_RANGE`, no throttle.) A classifier that counts only a server's explicit request to
//! wait is `retry_delay(status).map(|delay| RateLimited::new().retry_after(delay))`, which
//! also leaves out the throttles that come without a RetryInfo, such as those of a tonic
//! server shedding load ("Too many active requests for the connection").
//!
//! # How the RetryInfo is read
//!
//! The status's binary details (the `grpc-status-details-bin` trailer, a `google.rpc.Status`)
//! are decoded by tonic's own [`tonic_types`]; the first `google.rpc.RetryInfo` among them
//! that decodes counts, and its `retry_delay` (a `google.protobuf.Duration`, seconds and
//! nanoseconds) is the Retry-After. Then:
//!
//! - no details, no RetryInfo, a RetryInfo without a delay, or details that do not decode:
//!   still a throttle, without a Retry-After, so the gate's own exponential backoff applies;
//! - a delay of zero: a throttle with a Retry-After of zero, tried again at once;
//! - a negative delay, or one longer than [`MAX_RETRY_DELAY`] (one day), is malformed, and
//!   is taken as no delay at all: the gate's own backoff applies. A negative delay is read
//!   before tonic-types converts it, which would take it as zero (and retry at once a server
//!   that asked for nonsense), and whose conversion panics, in a build with overflow checks,
//!   on a delay of `i64::MIN` seconds. A delay of centuries would hold every caller of the
//!   gate back for longer than any rate limit lasts (the gate itself takes any Retry-After
//!   as at most one year, so it could not panic it either).
//!
//! None of this ever panics or fails: a status is a throttle or not by its code alone.
//!
//! # Scopes: why a `QuotaFailure` does not give one
//!
//! A server may say which quota ran out in a `google.rpc.QuotaFailure` detail, whose
//! violations name a `subject` ("project:123", "clientip:10.0.0.1"). [`rate_limited`] does
//! not turn a subject into a [`Scope`](crate::Scope), and its throttles hold back the whole
//! gate. A scoped throttle holds back only the calls made in that scope
//! ([`Gate::call_in`](crate::Gate::call_in)). Unless the caller names its scopes exactly as
//! the server spells its subjects, a scope taken from a subject is one that no call is made
//! in, and the throttle would hold back no call at all, the throttled call included: it
//! would be retried at once, into the quota that just ran out. A status may also list
//! several violations. A caller who knows how its server spells subjects, and makes its
//! calls in the same scopes, adds the scope on top, as the example of [`rate_limited`] shows.
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use paceline::RateLimited;
//! use tonic::{Code, Status};
//! use tonic_types::{ErrorDetails, StatusExt};
//!
//! let later = ErrorDetails::with_retry_info(Some(Duration::from_millis(1500)));
//! let exhausted = Status::with_error_details(Code::ResourceExhausted, "quota", later);
//! let wait = RateLimited::new().retry_after(Duration::from_millis(1500));
//! assert_eq!(paceline::tonic::rate_limited(&exhausted), Some(wait));
//!
//! assert_eq!(paceline::tonic::rate_limited(&Status::unavailable("restarting")), Some(RateLimited::new()));
//! assert_eq!(paceline::tonic::rate_limited(&Status::not_found("no such campaign")), None);
//! ```

use std::time::Duration;

use ::tonic::{Code, Status};
use ::tonic_types::RetryInfo;
use prost::Message;

use crate::RateLimited;

/// The longest RetryInfo delay honoured: one day (86,400 s). A longer one is taken as
/// malformed (see the [module docs](self#how-the-retryinfo-is-read)), as the `http` module
/// does with a `Retry-After`.
///
/// A day covers the longest waits real APIs ask for (daily quotas reset within one; penalties
/// such as Google Ads' last at most 15 minutes).
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(24 * 60 * 60);

/// Classifies a status: a [`RateLimited`] for `RESOURCE_EXHAUSTED` and `UNAVAILABLE`, with the
/// delay of its `google.rpc.RetryInfo` detail as the Retry-After if it has one that can be
/// read; `None` for any other code.
///
/// See the [module docs](self) for the rules.
///
/// # Examples
///
/// A gate in front of a tonic client retries a throttled call when the server's delay is
/// over. Here a stand-in for the client call is throttled once, with a RetryInfo of 2 s:
///
/// ```
/// use std::time::Duration;
/// use paceline::{Error, Gate};
/// use tonic::{Code, Status};
/// use tonic_types::{ErrorDetails, StatusExt};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let gate = Gate::builder(paceline::tonic::rate_limited).build().unwrap();
/// let start = tokio::time::Instant::now();
/// let mut attempts = 0;
/// let answer = gate
///     .call(|| {
///         attempts += 1;
///         let first = attempts == 1;
///         async move {
///             if first {
///                 let later = ErrorDetails::with_retry_info(Some(Duration::from_secs(2)));
///                 return Err(Status::with_error_details(Code::ResourceExhausted, "slow down", later));
///             }
///             Ok("campaigns")
///         }
///     })
///     .await;
/// assert_eq!(answer.unwrap(), "campaigns");
/// assert_eq!(start.elapsed(), Duration::from_secs(2));
///
/// // Other statuses come back at once, unchanged.
/// let denied = gate.call(|| async { Err::<(), _>(Status::permission_denied("no access")) }).await;
/// assert!(matches!(denied, Err(Error::Call(status)) if status.code() == Code::PermissionDenied));
/// # }
/// ```
///
/// A server whose quotas are per project, and which names the project in a `QuotaFailure`'s
/// subject, spelled as the caller's scopes are ([`Gate::call_in`](crate::Gate::call_in)):
///
/// ```
/// use paceline::{Gate, RateLimited};
/// use tonic::Status;
/// use tonic_types::StatusExt;
///
/// fn classify(status: &Status) -> Option<RateLimited> {
///     let limited = paceline::tonic::rate_limited(status)?;
///     let quota = status.get_details_quota_failure();
///     match quota.as_ref().and_then(|quota| quota.violations.first()) {
///         Some(violation) => Some(limited.scope(violation.subject.as_str())),
///         None => Some(limited),
///     }
/// }
///
/// let gate = Gate::builder(classify).build().unwrap();
/// # let _ = gate;
/// ```
pub fn rate_limited(status: &Status) -> Option<RateLimited> {
    if !is_rate_limit_code(status.code()) {
        return None;
    }
    let limited = RateLimited::new();
    Some(match retry_delay(status) {
        Some(delay) => limited.retry_after(delay),
        None => limited,
    })
}

/// Whether a code asks the client to slow down: `RESOURCE_EXHAUSTED` or `UNAVAILABLE`.
///
/// # Examples
///
/// ```
/// use tonic::Code;
/// use paceline::tonic::is_rate_limit_code;
///
/// assert!(is_rate_limit_code(Code::ResourceExhausted));
/// assert!(is_rate_limit_code(Code::Unavailable));
/// assert!(!is_rate_limit_code(Code::DeadlineExceeded));
/// ```
pub fn is_rate_limit_code(code: Code) -> bool {
    matches!(code, Code::ResourceExhausted | Code::Unavailable)
}

/// The delay of the status's first readable `google.rpc.RetryInfo` detail, whatever the
/// code; `None` if there is none, if it has no delay, or if the delay is negative or longer
/// than [`MAX_RETRY_DELAY`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use paceline::tonic::retry_delay;
/// use tonic::{Code, Status};
/// use tonic_types::{ErrorDetails, StatusExt};
///
/// let with = |delay| {
///     let details = ErrorDetails::with_retry_info(Some(delay));
///     Status::with_error_details(Code::ResourceExhausted, "quota", details)
/// };
/// assert_eq!(retry_delay(&with(Duration::from_millis(250))), Some(Duration::from_millis(250)));
/// assert_eq!(retry_delay(&with(Duration::ZERO)), Some(Duration::ZERO));
/// // Longer than a day: malformed.
/// assert_eq!(retry_delay(&with(Duration::from_secs(1_000_000))), None);
/// assert_eq!(retry_delay(&Status::resource_exhausted("quota")), None);
/// ```
pub fn retry_delay(status: &Status) -> Option<Duration> {
    let details = tonic_types::Status::decode(status.details()).ok()?;
    // The detail that tonic-types' `StatusExt::get_details_retry_info` would pick, the first
    // RetryInfo that decodes; its sign is checked before tonic-types converts it.
    let info = details.details.iter().find_map(|any| {
        (any.type_url == RetryInfo::TYPE_URL)
            .then(|| tonic_types::pb::RetryInfo::decode(&*any.value).ok())
            .flatten()
    })?;
    let raw = info.retry_delay?.normalized();
    if raw.seconds < 0 || raw.nanos < 0 {
        return None;
    }
    let delay = RetryInfo::from(info).retry_delay?;
    (delay <= MAX_RETRY_DELAY).then_some(delay)
}
