//! A ready classifier for gRPC's [`tonic::Status`]: `RESOURCE_EXHAUSTED` and `UNAVAILABLE`
//! are throttles, and a `google.rpc.RetryInfo` detail or gRPC's own server pushback (the
//! `grpc-retry-pushback-ms` trailer) says how long to wait.
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
//! - [`is_rate_limit_code`], [`retry_delay`] and [`pushback`] are the building blocks, for a
//!   classifier of your own (one that scopes a throttle to an account, reads a delay that an
//!   API puts in a detail of its own, or fails a call at once when the server asks not to
//!   retry it).
//!
//! Some APIs put the delay in a detail of their own rather than in a `google.rpc.RetryInfo`:
//! the Google Ads API's `GoogleAdsFailure` carries a `QuotaErrorDetails` with a `retry_delay`
//! and a `rate_scope` (the account or the developer token). A classifier for such an API
//! decodes that detail with the API's own generated types, and builds its answer from
//! [`is_rate_limit_code`] and [`RateLimited::retry_after`].
//!
//! # What a server announces
//!
//! gRPC has no field of its own for what is left of a quota, and this module reads none: a
//! status says only that one ran out. A service that sends rate-limit headers as response
//! metadata (as gateways in front of gRPC services do) is read through the tower layer: a
//! tonic `Channel` is a service of `http::Response`s, and
//! [`GateLayer::http`](crate::tower::GateLayer::http) (features `tower` and `http`) reads every
//! budget their headers announce, as the reqwest middleware does.
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
//! - a delay of zero: a throttle with a Retry-After of zero, shorter than the gate's own
//!   next backoff, which therefore applies, as for a throttle without one (see
//!   [`GateBuilder::backoff`](crate::GateBuilder::backoff));
//! - a negative delay, or one longer than [`MAX_RETRY_DELAY`] (one day), is malformed, and
//!   is taken as no delay at all: the gate's own backoff applies. A negative delay is read
//!   before tonic-types converts it, which would take it as zero, and whose conversion
//!   panics, in a build with overflow checks, on a delay of `i64::MIN` seconds. A delay of
//!   centuries would hold every caller of the gate back for longer than any rate limit
//!   lasts (the gate itself takes any Retry-After as at most one year, so it could not
//!   panic it either).
//!
//! # How the server's pushback is read
//!
//! gRPC's own retry design ([gRFC A6]) lets a server say when to retry in the response
//! metadata: `grpc-retry-pushback-ms` ([`PUSHBACK_KEY`]), a decimal count of milliseconds
//! (a signed 32-bit integer), where a negative value, or one that does not read as such a
//! number, asks the client not to retry at all. tonic keeps it in
//! [`Status::metadata`](tonic::Status::metadata), whether it came in the trailers or in a
//! trailers-only response. [`pushback`] reads it as gRPC's own clients do (grpc-java reads it
//! with Java's `Integer.valueOf`, which also takes a `+` and leading zeros), with the spaces
//! and tabs around it taken off:
//!
//! - no pushback: the RetryInfo alone decides, as above;
//! - `0` to a day in milliseconds ([`MAX_RETRY_DELAY`]): that long, [`Pushback::After`];
//! - longer than a day: malformed, as a RetryInfo's delay is, and ignored;
//! - negative, not a number, beyond 32 bits, or given more than once:
//!   [`Pushback::DoNotRetry`].
//!
//! [`rate_limited`] takes the **longer** of the pushback and the RetryInfo's delay when a
//! throttle carries both. No rule says which wins: gRFC A6 says nothing of RetryInfo, and
//! gRPC's own clients (grpc-java, grpc-go) read only the pushback, while RetryInfo belongs
//! to Google's error model, which knows nothing of the pushback. A server that sends both
//! may have them from two layers (a proxy's pushback, the service's RetryInfo). Each is an
//! estimate of when a retry would be let through, so waiting less than either risks the
//! retry landing inside a limit still enforced, which servers that escalate punish with a
//! longer penalty; waiting the longer costs only the difference.
//!
//! A pushback that asks not to retry is, for [`rate_limited`], a throttle without a server
//! delay: the gate backs off by its own schedule (or by the RetryInfo's delay, if there is
//! one) and retries up to its `max_retries`. A classifier's answer (an
//! `Option<RateLimited>`) can say "a throttle" or "not a throttle", but not "a throttle, and
//! give up on this call at once", and the gate's core stays as it is:
//!
//! - answering "not a throttle" would fail the call at once, but the gate would learn
//!   nothing from it, and every other call would go on at full speed into a server that is
//!   refusing retries, which a server does when it is overloaded. gRFC A6 too counts such a
//!   response as a failure in the client's retry throttling, whose failures, once they
//!   mount, stop the retries of every call to that server;
//! - answering "a throttle" holds back every call through the gate, at the price of retrying
//!   this one (after a backoff, and no more than `max_retries` times).
//!
//! It also reads a negative value and a malformed one alike, as gRFC A6 does, and keeps to
//! the rule that a status is a throttle or not by its code alone. A caller who must not
//! retry such a call writes its own classifier with [`pushback`]; see its example.
//!
//! A malformed or absurd pushback, and one that asks not to retry, is told as a `tracing`
//! debug event (target `paceline::tonic`), for whoever wonders why a gate did not wait what
//! the server seemed to ask.
//!
//! None of this ever panics or fails: a status is a throttle or not by its code alone.
//!
//! [gRFC A6]: https://github.com/grpc/proposal/blob/master/A6-client-retries.md
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
//!
//! A server's pushback, alone and beside a RetryInfo (the longer counts):
//!
//! ```
//! use std::time::Duration;
//! use paceline::RateLimited;
//! use paceline::tonic::{PUSHBACK_KEY, rate_limited};
//! use tonic::{Code, Status};
//! use tonic_types::{ErrorDetails, StatusExt};
//!
//! let mut unavailable = Status::unavailable("draining");
//! unavailable.metadata_mut().insert(PUSHBACK_KEY, "2500".parse().unwrap());
//! let wait = RateLimited::new().retry_after(Duration::from_millis(2500));
//! assert_eq!(rate_limited(&unavailable), Some(wait.clone()));
//!
//! let later = ErrorDetails::with_retry_info(Some(Duration::from_secs(1)));
//! let mut both = Status::with_error_details(Code::ResourceExhausted, "quota", later);
//! both.metadata_mut().insert(PUSHBACK_KEY, "2500".parse().unwrap());
//! assert_eq!(rate_limited(&both), Some(wait));
//!
//! // "Do not retry": a throttle without a server delay, so the gate's own backoff applies.
//! let mut refused = Status::resource_exhausted("overloaded");
//! refused.metadata_mut().insert(PUSHBACK_KEY, "-1".parse().unwrap());
//! assert_eq!(rate_limited(&refused), Some(RateLimited::new()));
//! ```

use std::time::Duration;

use ::tonic::{Code, Status};
use ::tonic_types::RetryInfo;
use prost::Message;

use crate::RateLimited;

/// The longest RetryInfo delay or server pushback honoured: one day (86,400 s). A longer one
/// is taken as malformed (see the [module docs](self#how-the-retryinfo-is-read)), as the
/// `http` module does with a `Retry-After`.
///
/// A day covers the longest waits real APIs ask for (daily quotas reset within one; penalties
/// such as Google Ads' last at most 15 minutes).
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(24 * 60 * 60);

/// Classifies a status: a [`RateLimited`] for `RESOURCE_EXHAUSTED` and `UNAVAILABLE`, with the
/// delay of its `google.rpc.RetryInfo` detail or of its `grpc-retry-pushback-ms` metadata as
/// the Retry-After (the longer, if it has both that can be read); `None` for any other code.
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
    let pushed = match pushback(status) {
        Some(Pushback::After(delay)) => Some(delay),
        Some(Pushback::DoNotRetry) | None => None,
    };
    let limited = RateLimited::new();
    // Waiting less than either the RetryInfo or the pushback asks risks a penalty (see the
    // module docs); `Option`'s order puts `None` below every delay.
    Some(match retry_delay(status).max(pushed) {
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

/// The response metadata key of gRPC's server pushback ([gRFC A6]): how many milliseconds to
/// wait before a retry, or a negative value for "do not retry".
///
/// [gRFC A6]: https://github.com/grpc/proposal/blob/master/A6-client-retries.md
pub const PUSHBACK_KEY: &str = "grpc-retry-pushback-ms";

/// What a server's pushback (`grpc-retry-pushback-ms`) asks of the client: read by
/// [`pushback`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushback {
    /// Retry after this long: at most [`MAX_RETRY_DELAY`].
    After(Duration),
    /// Do not retry: the value was negative, or did not read as a 32-bit count of
    /// milliseconds, or came more than once (gRFC A6 reads all of these as "do not retry").
    DoNotRetry,
}

/// The status's server pushback, its `grpc-retry-pushback-ms` metadata, whatever the code;
/// `None` if there is none, or if it asks to wait longer than [`MAX_RETRY_DELAY`] (taken as
/// malformed, as a RetryInfo's delay is). Never panics, whatever the value.
///
/// See the [module docs](self#how-the-servers-pushback-is-read) for how it is read, and why
/// [`rate_limited`] retries a call whose pushback is [`Pushback::DoNotRetry`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use paceline::tonic::{PUSHBACK_KEY, Pushback, pushback};
/// use tonic::Status;
///
/// let with = |value: &str| {
///     let mut status = Status::unavailable("draining");
///     status.metadata_mut().insert(PUSHBACK_KEY, value.parse().unwrap());
///     status
/// };
/// assert_eq!(pushback(&with("250")), Some(Pushback::After(Duration::from_millis(250))));
/// assert_eq!(pushback(&with("-1")), Some(Pushback::DoNotRetry));
/// assert_eq!(pushback(&with("soon")), Some(Pushback::DoNotRetry));
/// // Longer than a day: malformed.
/// assert_eq!(pushback(&with("900000000")), None);
/// assert_eq!(pushback(&Status::unavailable("draining")), None);
/// ```
///
/// A classifier that fails a call at once, as not a throttle, when the server asks not to
/// retry it (the gate then learns nothing from that answer):
///
/// ```
/// use paceline::{Gate, RateLimited};
/// use paceline::tonic::{Pushback, pushback, rate_limited};
/// use tonic::Status;
///
/// fn classify(status: &Status) -> Option<RateLimited> {
///     if pushback(status) == Some(Pushback::DoNotRetry) {
///         return None;
///     }
///     rate_limited(status)
/// }
///
/// let gate = Gate::builder(classify).build().unwrap();
/// # let _ = gate;
/// ```
pub fn pushback(status: &Status) -> Option<Pushback> {
    let mut values = status.metadata().get_all(PUSHBACK_KEY).iter();
    let value = values.next()?;
    if values.next().is_some() {
        // Which of several to believe is anyone's guess: gRFC A6's "unparseable".
        return do_not_retry("is given more than once: read as \"do not retry\"");
    }
    let Some(millis) = value
        .to_str()
        .ok()
        .and_then(|text| text.trim_matches([' ', '\t']).parse::<i32>().ok())
    else {
        return do_not_retry("is not a 32-bit count of milliseconds: read as \"do not retry\"");
    };
    let Ok(millis) = u64::try_from(millis) else {
        tracing::debug!(
            target: "paceline::tonic",
            millis,
            "grpc-retry-pushback-ms is negative: the server asks not to retry"
        );
        return Some(Pushback::DoNotRetry);
    };
    let delay = Duration::from_millis(millis);
    if delay > MAX_RETRY_DELAY {
        tracing::debug!(
            target: "paceline::tonic",
            millis,
            "ignored grpc-retry-pushback-ms: longer than a day"
        );
        return None;
    }
    Some(Pushback::After(delay))
}

/// Tells (at debug level, for whoever wonders why a gate did not wait what the server
/// seemed to ask) why a pushback was read as "do not retry".
fn do_not_retry(why: &str) -> Option<Pushback> {
    tracing::debug!(target: "paceline::tonic", "grpc-retry-pushback-ms {why}");
    Some(Pushback::DoNotRetry)
}
