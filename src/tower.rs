//! A tower [`Layer`] that sends every request of a [`Service`] through a [`Gate`]: one line
//! puts a hyper client, a tonic channel or any other tower service under the gate's in-flight
//! limit, shared backoff and rate.
//!
//! ```text
//! ServiceBuilder::new().layer(GateLayer::new(gate)).service(client)
//! ```
//!
//! # What the layer does
//!
//! - **One limit for every clone.** The [`GateService`] is `Clone` (when its inner service
//!   is), and every clone sends its requests through the same gate (a [`Gate`] is a handle
//!   on state it shares with its clones): cloning a service to hand it to another task
//!   shares the limit, never splits it or starts a new one.
//! - **`poll_ready` is the inner service's readiness**, nothing more: it takes no place in
//!   the gate's line and no slot of its in-flight limit, so a caller that polls a clone ready
//!   and never calls holds back no one. `call` brings the request to the gate (it starts, or
//!   takes its place in line); the gate's wait (the line, the in-flight limit, a backoff, the
//!   rate, the announced quota) happens inside the response future, and the inner service
//!   is called only once the gate lets the request start.
//! - **A bounded line**: a request that finds the gate's line full
//!   ([`GateBuilder::max_queued`](crate::GateBuilder::max_queued)) fails at once with
//!   [`GateError::Overloaded`]; the inner service never sees it. (A load-shedding layer in
//!   front, such as tower's `LoadShed`, sees the error as the response future's, not from
//!   `poll_ready`.)
//! - **Throttled responses and errors.** The gate's classifier sees an [`Outcome`]: the inner
//!   service's response or its error. A throttle is often an `Ok` response (hyper returns a
//!   429 as one), so the layer asks the classifier of every response; one it calls a throttle
//!   is taken by the gate as a failed attempt (a backoff begins for every caller), and is
//!   retried or handed back in a [`GateError`], never dropped. [`classify_responses`] makes a
//!   classifier from one of responses alone, such as `paceline::http::rate_limited` with the
//!   `http` feature. A response the classifier does not call a throttle (a 200, a 404, a
//!   500) comes back as it is, at once; so does an error that is not a throttle, as
//!   [`GateError::Inner`]. The classifier is asked again of a throttled response when the
//!   gate takes it in, so it should answer alike for the same outcome (one that changes its
//!   mind hands the response to the caller, as one that is not a throttle).
//! - **Retries need a copy of the request.** A service consumes its request, so a throttled
//!   one can be sent again only if a copy was kept. By default none is ([`NoRetry`]): the
//!   request goes out once, and if it is throttled the caller gets
//!   [`GateError::NotCloned`] with the throttled response or error. With
//!   [`GateLayer::retry_cloned`] (for requests that are `Clone`, such as an
//!   `http::Request<B>` whose body `B` is) or [`GateLayer::retry_with`] (a closure that may
//!   copy a request, or say it cannot), the layer copies each request before it is first
//!   sent, and a throttled one is tried again first when the backoff ends, up to the gate's
//!   retry limit, then fails with [`GateError::GaveUp`] holding the last throttled response.
//! - **Per request: scopes, cost, deadline.** By default every request is a call of no
//!   scope, costing one unit, with no deadline. [`GateLayer::options`] gives each request the
//!   [`CallOptions`] a closure reads from it (the account a header names, the points a query
//!   costs, how long it may wait); one that cannot start in time fails with
//!   [`GateError::Deadline`]. A classifier that answers a *scoped* throttle holds back only
//!   the requests of that scope: without `options` that scope the requests, it holds back
//!   none of them, not even the throttled request's retry.
//! - **What responses announce**, with [`GateLayer::read_announced`]: the gate paces the
//!   requests by every budget they announce, each apart (an LLM provider's requests and
//!   tokens, each policy of a server that keeps several, a generic quota), through the one
//!   path every front-end feeds ([`Gate::observe_all`]); a request's scope's own, on a gate
//!   with limits per scope. With the `http` feature, [`GateLayer::http`] makes a layer for
//!   `http::Response`s that reads them from every response's headers, as the reqwest
//!   middleware does by default; [`GateLayer::new`] reads none until told how.
//! - **What a request really cost**, with [`GateLayer::settle`]: each response comes with its
//!   request's [`Settle`], to settle from its headers at once or from its body once read
//!   (an LLM answer's `usage`), in every dimension its options estimated.
//!
//! # Examples
//!
//! A service whose responses are status codes, paced at 10 requests a second across two
//! clones:
//!
//! ```
//! use std::convert::Infallible;
//! use std::time::Duration;
//! use paceline::tower::{GateLayer, classify_responses};
//! use paceline::{Gate, RateLimited};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let gate = Gate::builder(classify_responses(|status: &u16| (*status == 429).then(RateLimited::new)))
//!     .rate(10.0)
//!     .build()
//!     .unwrap();
//! let api = tower::service_fn(|_path: &str| async { Ok::<u16, Infallible>(200) });
//! let service = ServiceBuilder::new().layer(GateLayer::new(gate)).service(api);
//! let start = tokio::time::Instant::now();
//! let (a, b) = (service.clone(), service.clone());
//! let (x, y) = futures::join!(a.oneshot("/x"), b.oneshot("/y"));
//! assert_eq!((x.unwrap(), y.unwrap()), (200, 200));
//! // The two clones share the one rate: the second request went 100 ms after the first.
//! assert_eq!(start.elapsed(), Duration::from_millis(100));
//! # }
//! ```

use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use pin_project::pin_project;
use tokio::time::Instant;
use tower_layer::Layer;
use tower_service::Service;

use crate::error::Overloaded;
use crate::gate::call::{Arrival, Call, Turn};
use crate::gate::dimensions::Draws;
use crate::gate::ended::{Ended, Estimated};
use crate::gate::settle::Settles;
use crate::gate::state::Shared;
use crate::gate::{Announcement, CallOptions, Gate, RateLimited, Scope, Settle};

/// What one attempt through the layer came back with, as the gate's classifier sees it: the
/// inner service's response, or its error.
///
/// A gate for a [`GateLayer`] is a `Gate<Outcome<Res, E>>`, where `Res` and `E` are the
/// inner service's response and error types.
///
/// # Examples
///
/// A classifier that takes a 429 response, and a timeout of the service's own, as throttles:
///
/// ```
/// use paceline::tower::Outcome;
/// use paceline::{Gate, RateLimited};
///
/// # #[derive(Debug)]
/// enum ClientError { Timeout, Refused }
///
/// let gate = Gate::builder(|outcome: &Outcome<u16, ClientError>| match outcome {
///     Outcome::Response(status) => (*status == 429).then(RateLimited::new),
///     Outcome::Error(ClientError::Timeout) => Some(RateLimited::new()),
///     Outcome::Error(ClientError::Refused) => None,
/// })
/// .build()
/// .unwrap();
/// # drop(gate);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome<Res, E> {
    /// The inner service answered with this response.
    Response(Res),
    /// The inner service failed with this error (or was not ready, for a retry).
    Error(E),
}

impl<Res, E> Outcome<Res, E> {
    /// The response, if it is one.
    pub fn response(&self) -> Option<&Res> {
        match self {
            Outcome::Response(response) => Some(response),
            Outcome::Error(_) => None,
        }
    }

    /// The error, if it is one.
    pub fn error(&self) -> Option<&E> {
        match self {
            Outcome::Response(_) => None,
            Outcome::Error(error) => Some(error),
        }
    }

    /// The response, if it is one.
    pub fn into_response(self) -> Option<Res> {
        match self {
            Outcome::Response(response) => Some(response),
            Outcome::Error(_) => None,
        }
    }

    /// The error, if it is one.
    pub fn into_error(self) -> Option<E> {
        match self {
            Outcome::Response(_) => None,
            Outcome::Error(error) => Some(error),
        }
    }
}

/// A classifier for a [`GateLayer`]'s gate from one of responses alone: `classify` says which
/// responses are throttles, and no error of the inner service is one.
///
/// With the `http` feature, `classify_responses(paceline::http::rate_limited)` takes every
/// `http::Response` with a 429 or a 503 as a throttle, with its `Retry-After` and the quota
/// its headers announce.
///
/// # Examples
///
/// ```
/// use paceline::tower::{Outcome, classify_responses};
/// use paceline::{Gate, RateLimited};
///
/// let gate: Gate<Outcome<u16, std::io::Error>> =
///     Gate::builder(classify_responses(|status: &u16| (*status == 429).then(RateLimited::new)))
///         .build()
///         .unwrap();
/// # drop(gate);
/// ```
pub fn classify_responses<Res, E>(
    classify: impl Fn(&Res) -> Option<RateLimited> + Send + Sync + 'static,
) -> impl Fn(&Outcome<Res, E>) -> Option<RateLimited> + Send + Sync + 'static {
    move |outcome| outcome.response().and_then(&classify)
}

/// How the layer keeps a copy of a request, to send it again if it is throttled.
///
/// [`NoRetry`] keeps none (the default), [`RetryCloned`] uses `Clone`, and [`RetryWith`]
/// a closure.
pub trait CloneRequest<Req> {
    /// A copy of `request` to send in its place, or `None` if it cannot be copied (a body
    /// streamed from elsewhere, say): then a throttled request fails with
    /// [`GateError::NotCloned`].
    fn clone_request(&self, request: &Req) -> Option<Req>;
}

/// Keeps no copy of a request: a throttled request is not sent again, and fails with
/// [`GateError::NotCloned`] holding the throttled response or error. The default of
/// [`GateLayer::new`].
#[derive(Debug, Clone, Copy, Default)]
pub struct NoRetry;

impl<Req> CloneRequest<Req> for NoRetry {
    fn clone_request(&self, _: &Req) -> Option<Req> {
        None
    }
}

/// Copies each request with `Clone`: see [`GateLayer::retry_cloned`].
#[derive(Debug, Clone, Copy, Default)]
pub struct RetryCloned;

impl<Req: Clone> CloneRequest<Req> for RetryCloned {
    fn clone_request(&self, request: &Req) -> Option<Req> {
        Some(request.clone())
    }
}

/// Copies each request with a closure: see [`GateLayer::retry_with`].
#[derive(Clone, Copy)]
pub struct RetryWith<F>(F);

impl<F> fmt::Debug for RetryWith<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RetryWith").finish_non_exhaustive()
    }
}

impl<Req, F: Fn(&Req) -> Option<Req>> CloneRequest<Req> for RetryWith<F> {
    fn clone_request(&self, request: &Req) -> Option<Req> {
        (self.0)(request)
    }
}

/// What the layer makes of a request as a call through the gate: its scopes, cost and
/// deadline. [`NoOptions`] (the default) gives every request [`CallOptions::new`];
/// [`OptionsWith`] asks a closure.
pub trait OptionsOf<Req> {
    /// The call that `request` makes.
    fn options_of(&self, request: &Req) -> CallOptions;
}

/// Every request is a call of no scope, costing one unit, with no deadline. The default of
/// [`GateLayer::new`].
#[derive(Debug, Clone, Copy, Default)]
pub struct NoOptions;

impl<Req> OptionsOf<Req> for NoOptions {
    fn options_of(&self, _: &Req) -> CallOptions {
        CallOptions::new()
    }
}

/// A closure says what call each request makes: see [`GateLayer::options`].
#[derive(Clone, Copy)]
pub struct OptionsWith<F>(F);

impl<F> fmt::Debug for OptionsWith<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("OptionsWith").finish_non_exhaustive()
    }
}

impl<Req, F: Fn(&Req) -> CallOptions> OptionsOf<Req> for OptionsWith<F> {
    fn options_of(&self, request: &Req) -> CallOptions {
        (self.0)(request)
    }
}

/// Why a request through a [`GateService`] failed. Each variant carries what the inner
/// service gave, unchanged: a throttled response is handed back, never dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum GateError<Res, E> {
    /// The inner service failed with an error that is not a throttle (or was not ready): it
    /// reached the caller at once.
    Inner(E),
    /// The request was throttled on every attempt, up to the gate's
    /// [retry limit](crate::GateBuilder::max_retries).
    GaveUp {
        /// How many times the request was sent.
        attempts: u32,
        /// The last throttled response or error.
        last: Outcome<Res, E>,
    },
    /// The request was throttled, and it could not be sent again: no copy of it was kept
    /// ([`NoRetry`], the default), or the [`CloneRequest`] could not copy it. The gate took
    /// the throttle in (every caller waits out its backoff; the gate's
    /// [`retries`](crate::GateStats::retries) counts it among the throttled calls to retry).
    NotCloned {
        /// The throttled response or error.
        last: Outcome<Res, E>,
    },
    /// The request could not start by the deadline its [options](GateLayer::options) gave:
    /// the gate knew that it could start no earlier than `earliest` (a backoff, the rate, the
    /// announced quota, the calls ahead in line), or the deadline came while it waited.
    Deadline {
        /// The earliest the gate could have started it, as far as it knew.
        earliest: Instant,
        /// The throttled response or error of the attempt before, if this was a retry.
        last: Option<Outcome<Res, E>>,
    },
    /// The gate's line was full when the request came
    /// ([`GateBuilder::max_queued`](crate::GateBuilder::max_queued)): it was turned away at
    /// once, and never sent.
    Overloaded(Overloaded),
}

impl<Res, E> GateError<Res, E> {
    /// What the inner service gave last: its error, or the throttled response or error;
    /// `None` for a request that missed its deadline before it was ever sent, or that the
    /// gate turned away.
    pub fn into_outcome(self) -> Option<Outcome<Res, E>> {
        match self {
            GateError::Inner(error) => Some(Outcome::Error(error)),
            GateError::GaveUp { last, .. } | GateError::NotCloned { last } => Some(last),
            GateError::Deadline { last, .. } => last,
            GateError::Overloaded(_) => None,
        }
    }

    /// The throttled response the request ended with, if it ended with one.
    pub fn into_response(self) -> Option<Res> {
        self.into_outcome()?.into_response()
    }
}

impl<Res, E: fmt::Display> fmt::Display for GateError<Res, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let last = match self {
            GateError::Inner(error) => return write!(f, "{error}"),
            GateError::GaveUp { attempts, last } => {
                write!(f, "gave up after {attempts} throttled attempts")?;
                last
            }
            GateError::NotCloned { last } => {
                write!(
                    f,
                    "throttled, and the request could not be cloned to be sent again"
                )?;
                last
            }
            GateError::Deadline { last, .. } => {
                write!(f, "the request could not start by its deadline")?;
                match last {
                    Some(last) => last,
                    None => return Ok(()),
                }
            }
            GateError::Overloaded(overloaded) => return write!(f, "{overloaded}"),
        };
        match last {
            Outcome::Response(_) => write!(f, "; the last was a throttled response"),
            Outcome::Error(error) => write!(f, "; last error: {error}"),
        }
    }
}

impl<Res: fmt::Debug, E: StdError + 'static> StdError for GateError<Res, E> {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            GateError::Inner(error)
            | GateError::GaveUp {
                last: Outcome::Error(error),
                ..
            }
            | GateError::NotCloned {
                last: Outcome::Error(error),
            }
            | GateError::Deadline {
                last: Some(Outcome::Error(error)),
                ..
            } => Some(error),
            GateError::GaveUp { .. }
            | GateError::NotCloned { .. }
            | GateError::Deadline { .. }
            | GateError::Overloaded(_) => None,
        }
    }
}

/// A [`Layer`] that sends every request of the service it wraps through a [`Gate`]: see the
/// [module docs](self).
///
/// `Res` and `E` are the wrapped service's response and error types; `C` says how a request
/// is copied for a retry ([`NoRetry`] unless [`retry_cloned`](Self::retry_cloned) or
/// [`retry_with`](Self::retry_with) says otherwise), and `O` what call each request makes
/// ([`NoOptions`] unless [`options`](Self::options) says otherwise).
pub struct GateLayer<Res, E, C = NoRetry, O = NoOptions> {
    gate: Gate<Outcome<Res, E>>,
    retry: C,
    options: O,
    read: Arc<Readers<Res>>,
}

/// Reads every budget a response announces (see [`GateLayer::read_announced`]).
type ReadAnnounced<Res> = Arc<dyn Fn(&Res) -> Vec<Announcement> + Send + Sync>;

/// Takes each response with its request's [`Settle`] (see [`GateLayer::settle`]).
type SettleHand<Res> = Arc<dyn Fn(&mut Res, Settle) + Send + Sync>;

/// A [`SettleHand`], and the gate its `Settle`s settle with.
struct SettleWith<Res> {
    hand: SettleHand<Res>,
    gate: Arc<dyn Settles>,
}

impl<Res> Clone for SettleWith<Res> {
    fn clone(&self) -> Self {
        Self {
            hand: Arc::clone(&self.hand),
            gate: Arc::clone(&self.gate),
        }
    }
}

/// What the layer does with each response the classifier does not call a throttle.
struct Readers<Res> {
    announced: Option<ReadAnnounced<Res>>,
    settle: Option<SettleWith<Res>>,
}

impl<Res> Clone for Readers<Res> {
    fn clone(&self) -> Self {
        Self {
            announced: self.announced.clone(),
            settle: self.settle.clone(),
        }
    }
}

impl<Res> fmt::Debug for Readers<Res> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Readers")
            .field("announced", &self.announced.is_some())
            .field("settle", &self.settle.is_some())
            .finish()
    }
}

impl<Res, E> GateLayer<Res, E> {
    /// A layer that sends every request through `gate`, and retries no throttled request
    /// ([`NoRetry`]).
    pub fn new(gate: Gate<Outcome<Res, E>>) -> Self {
        Self {
            gate,
            retry: NoRetry,
            options: NoOptions,
            read: Arc::new(Readers {
                announced: None,
                settle: None,
            }),
        }
    }
}

#[cfg(feature = "http")]
impl<B, E> GateLayer<http::Response<B>, E> {
    /// A layer for a service of `http::Response`s that, as the reqwest middleware does by
    /// default, paces its requests by every budget each response announces in its headers
    /// (every dialect [`crate::http::announced`] reads), a throttled response's too:
    /// [`GateLayer::new`] with [`read_announced`](Self::read_announced) of those headers.
    /// [`GateLayer::new`] reads nothing, as a layer over responses of any type must.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use paceline::tower::{GateLayer, Outcome, classify_responses};
    /// use paceline::{Dimension, Gate, RateLimited};
    /// use tower::{Service, ServiceBuilder, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let gate: Gate<Outcome<http::Response<String>, Infallible>> =
    ///     Gate::builder(classify_responses(paceline::http::rate_limited))
    ///         .build()
    ///         .unwrap();
    /// let mut service = ServiceBuilder::new()
    ///     .layer(GateLayer::http(gate.clone()))
    ///     .service_fn(|_: http::Request<String>| async {
    ///         let answer = http::Response::builder()
    ///             .header("x-ratelimit-remaining", "41")
    ///             .header("x-ratelimit-reset", "30")
    ///             .body(String::new())
    ///             .unwrap();
    ///         Ok::<_, Infallible>(answer)
    ///     });
    /// let request = http::Request::new(String::new());
    /// service.ready().await.unwrap().call(request).await.unwrap();
    /// // Less a call's room, kept for the call that learns the next window until two such
    /// // calls find it whole (see `GateBuilder::quota_reserve`).
    /// assert_eq!(gate.budget_left(&Dimension::UNITS), Some(40));
    /// # }
    /// ```
    pub fn http(gate: Gate<Outcome<http::Response<B>, E>>) -> Self {
        Self::new(gate).read_announced(|response: &http::Response<B>| {
            crate::http::announced(response.headers())
        })
    }
}

impl<Res, E, C, O> GateLayer<Res, E, C, O> {
    /// Retries throttled requests, copied with `Clone` before each is first sent: for
    /// requests such as an `http::Request<B>` whose body `B` is `Clone` (`String`,
    /// `Full<Bytes>`, `Empty<Bytes>`).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use std::time::Duration;
    /// use paceline::tower::{GateLayer, classify_responses};
    /// use paceline::{Gate, RateLimited};
    /// use tower::{ServiceBuilder, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let gate = Gate::builder(classify_responses(|status: &u16| {
    ///     (*status == 429).then(|| RateLimited::new().retry_after(Duration::from_secs(2)))
    /// }))
    /// .build()
    /// .unwrap();
    /// // The API throttles the first request it sees.
    /// let seen = std::sync::atomic::AtomicUsize::new(0);
    /// let api = tower::service_fn(|_body: String| {
    ///     let first = seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0;
    ///     async move { Ok::<u16, Infallible>(if first { 429 } else { 200 }) }
    /// });
    /// let service = ServiceBuilder::new().layer(GateLayer::new(gate).retry_cloned()).service(api);
    /// let start = tokio::time::Instant::now();
    /// assert_eq!(service.oneshot("hello".to_owned()).await.unwrap(), 200);
    /// // Sent again, a copy, once the 2 s were over.
    /// assert_eq!(start.elapsed(), Duration::from_secs(2));
    /// # }
    /// ```
    pub fn retry_cloned(self) -> GateLayer<Res, E, RetryCloned, O> {
        GateLayer {
            gate: self.gate,
            retry: RetryCloned,
            options: self.options,
            read: self.read,
        }
    }

    /// Retries throttled requests, copied by `clone` before each is first sent (and before
    /// each retry, for the next): `clone` answers a copy, or `None` if it cannot copy this
    /// request, which then goes out once and, if throttled, fails with
    /// [`GateError::NotCloned`].
    ///
    /// # Examples
    ///
    /// Requests whose body is streamed cannot be copied; those whose body is in memory can:
    ///
    /// ```
    /// use paceline::tower::{GateLayer, Outcome, classify_responses};
    /// use paceline::{Gate, RateLimited};
    ///
    /// enum Body { Bytes(Vec<u8>), Stream(std::fs::File) }
    ///
    /// let gate: Gate<Outcome<u16, std::io::Error>> =
    ///     Gate::builder(classify_responses(|status: &u16| (*status == 429).then(RateLimited::new)))
    ///         .build()
    ///         .unwrap();
    /// let layer = GateLayer::new(gate).retry_with(|body: &Body| match body {
    ///     Body::Bytes(bytes) => Some(Body::Bytes(bytes.clone())),
    ///     Body::Stream(_) => None,
    /// });
    /// # drop(layer);
    /// ```
    pub fn retry_with<Req, F>(self, clone: F) -> GateLayer<Res, E, RetryWith<F>, O>
    where
        F: Fn(&Req) -> Option<Req>,
    {
        GateLayer {
            gate: self.gate,
            retry: RetryWith(clone),
            options: self.options,
            read: self.read,
        }
    }

    /// Makes each request the call that `options` reads from it: its scopes (say, the
    /// account a header names, so that a throttle of one account holds back that account's
    /// requests only), its cost, and by when it must start (else it fails with
    /// [`GateError::Deadline`], at once if the gate knows that it cannot start it in time).
    /// A deadline counts from when the request is made (`call`), and holds for its retries.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use std::time::Duration;
    /// use paceline::tower::{GateLayer, Outcome};
    /// use paceline::{CallOptions, Gate, RateLimited};
    /// use tower::{ServiceBuilder, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// // Requests name an account; a 429 names the account it limits.
    /// let gate = Gate::builder(|outcome: &Outcome<(u16, &str), Infallible>| match outcome {
    ///     Outcome::Response((429, account)) => {
    ///         Some(RateLimited::new().retry_after(Duration::from_secs(60)).scope(*account))
    ///     }
    ///     _ => None,
    /// })
    /// .build()
    /// .unwrap();
    /// let api = tower::service_fn(|account: &'static str| async move {
    ///     Ok::<_, Infallible>((if account == "acct-1" { 429 } else { 200 }, account))
    /// });
    /// let service = ServiceBuilder::new()
    ///     .layer(GateLayer::new(gate).options(|account: &&str| CallOptions::new().scopes([*account])))
    ///     .service(api);
    /// // acct-1 is throttled for a minute...
    /// assert!(service.clone().oneshot("acct-1").await.is_err());
    /// // ...acct-2 is not held back.
    /// let start = tokio::time::Instant::now();
    /// assert_eq!(service.oneshot("acct-2").await.unwrap(), (200, "acct-2"));
    /// assert_eq!(start.elapsed(), Duration::ZERO);
    /// # }
    /// ```
    pub fn options<Req, F>(self, options: F) -> GateLayer<Res, E, C, OptionsWith<F>>
    where
        F: Fn(&Req) -> CallOptions,
    {
        GateLayer {
            gate: self.gate,
            retry: self.retry,
            options: OptionsWith(options),
            read: self.read,
        }
    }

    /// Takes in every budget each response announces, as `announced_of` reads them: each
    /// dimension's and each policy's apart, through [`Gate::observe_all`], or, for a
    /// request whose [options](Self::options) give it scopes, on a gate with limits per
    /// scope, through [`Gate::observe_all_in`] for its first scope (on a gate without, a
    /// scoped request's budgets are the gate's: it keeps no state per scope). A request then
    /// starts when every budget it draws from has room. They are read inside the request's
    /// attempt, a throttled response's too, so each is dated by the request's start (see
    /// [`Gate::observe_all`]); a classifier need not read a throttle's quota as well. With
    /// the `http` feature, `|response: &http::Response<B>|
    /// paceline::http::announced(response.headers())` reads every dialect, as the reqwest
    /// middleware does: an LLM provider's requests and tokens, every policy of the IETF
    /// draft's fields, `RateLimit-*`, `X-RateLimit-*`. A server's one quota is one budget of
    /// [`Dimension::UNITS`](crate::Dimension::UNITS).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use std::time::Duration;
    /// use paceline::tower::{GateLayer, Outcome, classify_responses};
    /// use paceline::{Announcement, Dimension, Gate, Quota, RateLimited};
    /// use tower::{Service, ServiceBuilder, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// // Each response says how many requests and how many tokens are left this minute.
    /// let gate: Gate<Outcome<(u64, u64), Infallible>> =
    ///     Gate::builder(classify_responses(|_: &(u64, u64)| None::<RateLimited>))
    ///         .build()
    ///         .unwrap();
    /// let minute = Duration::from_secs(60);
    /// let layer = GateLayer::new(gate.clone()).read_announced(move |&(requests, tokens): &(u64, u64)| {
    ///     vec![
    ///         Announcement::new(Dimension::REQUESTS, Quota::new(requests, minute)),
    ///         Announcement::new(Dimension::TOKENS, Quota::new(tokens, minute)),
    ///     ]
    /// });
    /// let mut service = ServiceBuilder::new()
    ///     .layer(layer)
    ///     .service_fn(|_: ()| async { Ok::<_, Infallible>((99, 1_500)) });
    /// service.ready().await.unwrap().call(()).await.unwrap();
    /// // Both budgets known, each apart.
    /// assert_eq!(gate.budget_left(&Dimension::REQUESTS), Some(99));
    /// assert_eq!(gate.budget_left(&Dimension::TOKENS), Some(1_500));
    /// # }
    /// ```
    pub fn read_announced(
        mut self,
        announced_of: impl Fn(&Res) -> Vec<Announcement> + Send + Sync + 'static,
    ) -> Self {
        Arc::make_mut(&mut self.read).announced = Some(Arc::new(announced_of));
        self
    }

    /// Hands each response the classifier does not call a throttle to `hand`, with the
    /// [`Settle`] of its request, to settle what it really cost once that is known: at once
    /// from what its headers say, or later from its body, by keeping the `Settle` with it
    /// (for an `http::Response`, in its extensions, where [`Settle::of`] finds it). Its
    /// request cost what its [options](Self::options) estimated (one unit without them).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use paceline::tower::{GateLayer, Outcome, classify_responses};
    /// use paceline::{Budget, CallOptions, Cost, Dimension, Gate, RateLimited, Settle};
    /// use tower::{Service, ServiceBuilder, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let gate: Gate<Outcome<http::Response<String>, Infallible>> =
    ///     Gate::builder(classify_responses(|_: &http::Response<String>| None::<RateLimited>))
    ///         .budget(Budget::per_minute(Dimension::TOKENS, 10_000))
    ///         .build()
    ///         .unwrap();
    /// // Each prompt is estimated at 1,000 tokens; the answer's body says what it used.
    /// let layer = GateLayer::new(gate.clone())
    ///     .options(|_: &http::Request<String>| CallOptions::new().cost_in(Dimension::TOKENS, 1_000))
    ///     .settle(|answer: &mut http::Response<String>, settle| {
    ///         answer.extensions_mut().insert(settle);
    ///     });
    /// let mut service = ServiceBuilder::new().layer(layer).service_fn(|_| async {
    ///     Ok::<_, Infallible>(http::Response::new(r#"{"usage":{"total_tokens":300}}"#.to_owned()))
    /// });
    /// let answer = service.ready().await.unwrap().call(http::Request::new(String::new())).await.unwrap();
    /// assert_eq!(gate.budget_left(&Dimension::TOKENS), Some(9_000));
    /// // The body read, 300 used: 700 given back.
    /// let settle = Settle::of(answer.extensions()).unwrap();
    /// settle.used(paceline::http::usage(answer.body().as_bytes()).unwrap());
    /// assert_eq!(gate.budget_left(&Dimension::TOKENS), Some(9_700));
    /// # }
    /// ```
    pub fn settle(mut self, hand: impl Fn(&mut Res, Settle) + Send + Sync + 'static) -> Self
    where
        Res: 'static,
        E: 'static,
    {
        let gate: Arc<dyn Settles> = Arc::clone(self.gate.shared()) as _;
        let hand = Arc::new(hand);
        Arc::make_mut(&mut self.read).settle = Some(SettleWith { hand, gate });
        self
    }

    /// The gate every service of this layer sends its requests through.
    pub fn gate(&self) -> &Gate<Outcome<Res, E>> {
        &self.gate
    }
}

impl<Res, E, C: Clone, O: Clone> Clone for GateLayer<Res, E, C, O> {
    fn clone(&self) -> Self {
        Self {
            gate: self.gate.clone(),
            retry: self.retry.clone(),
            options: self.options.clone(),
            read: self.read.clone(),
        }
    }
}

impl<Res, E, C: fmt::Debug, O: fmt::Debug> fmt::Debug for GateLayer<Res, E, C, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GateLayer")
            .field("gate", &self.gate)
            .field("retry", &self.retry)
            .field("options", &self.options)
            .field("read", &self.read)
            .finish()
    }
}

impl<S, Res, E, C: Clone, O: Clone> Layer<S> for GateLayer<Res, E, C, O> {
    type Service = GateService<S, Res, E, C, O>;

    fn layer(&self, inner: S) -> Self::Service {
        GateService {
            inner,
            gate: self.gate.clone(),
            retry: self.retry.clone(),
            options: self.options.clone(),
            read: self.read.clone(),
        }
    }
}

/// A [`Service`] that sends every request through a [`Gate`], made by a [`GateLayer`]: see
/// the [module docs](self).
///
/// Clones share the gate, so they keep one limit between them.
///
/// # Readiness
///
/// `poll_ready` is the inner service's `poll_ready`: it takes nothing from the gate. The
/// request waits for the gate in the [`ResponseFuture`], and the inner service, which was
/// ready when `call` was made, is called once the gate lets the request start (whatever
/// readiness it reserved, such as a place in a tower `Buffer`, is held while the request
/// waits). A retry asks a clone of the inner service to be ready again, after the gate let
/// it start.
///
/// # Cancel safety
///
/// Dropping the [`ResponseFuture`] gives back the request's place in the gate's line, or its
/// slot if it was sent (and drops the inner service's future); other callers carry on.
pub struct GateService<S, Res, E, C = NoRetry, O = NoOptions> {
    inner: S,
    gate: Gate<Outcome<Res, E>>,
    retry: C,
    options: O,
    read: Arc<Readers<Res>>,
}

impl<S, Res, E, C, O> GateService<S, Res, E, C, O> {
    /// The gate the service sends its requests through.
    pub fn gate(&self) -> &Gate<Outcome<Res, E>> {
        &self.gate
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: Clone, Res, E, C: Clone, O: Clone> Clone for GateService<S, Res, E, C, O> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            gate: self.gate.clone(),
            retry: self.retry.clone(),
            options: self.options.clone(),
            read: self.read.clone(),
        }
    }
}

impl<S: fmt::Debug, Res, E, C: fmt::Debug, O: fmt::Debug> fmt::Debug
    for GateService<S, Res, E, C, O>
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GateService")
            .field("inner", &self.inner)
            .field("gate", &self.gate)
            .field("retry", &self.retry)
            .field("options", &self.options)
            .field("read", &self.read)
            .finish()
    }
}

impl<S, Req, Res, E, C, O> Service<Req> for GateService<S, Res, E, C, O>
where
    S: Service<Req, Response = Res, Error = E> + Clone,
    C: CloneRequest<Req> + Clone,
    O: OptionsOf<Req>,
{
    type Response = Res;
    type Error = GateError<Res, E>;
    type Future = ResponseFuture<S, Req, C>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(GateError::Inner)
    }

    fn call(&mut self, request: Req) -> Self::Future {
        let options = self.options.options_of(&request);
        let terms = options.terms(Instant::now);
        let answered = Answered {
            read: Arc::clone(&self.read),
            first: options.scopes.first().cloned(),
            drawn: (self.read.settle.is_some())
                .then(|| Box::new(((terms.cost, terms.draws.clone()), options.scopes.clone()))),
        };
        // The service that was polled ready goes with this request; this one keeps a clone,
        // to be polled ready for the next.
        let clone = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, clone);
        let retry = self.retry.clone_request(&request).map(|spare| Retry {
            gate: self.gate.clone(),
            service: self.inner.clone(),
            spare,
            clone: self.retry.clone(),
            answered: answered.clone(),
        });
        let shared = Arc::clone(self.gate.shared());
        let state = match Arrival::new(shared, options.scopes, terms, Estimated) {
            Ok(arrival) => {
                let first = InnerCall::new(ready, request, true, self.gate.clone(), answered);
                Attempts::Calling {
                    call: arrival.attempt(first),
                }
            }
            Err(refused) => Attempts::Refused {
                answer: Some(finished(refused.into())),
            },
        };
        ResponseFuture { state, retry }
    }
}

/// What an attempt of a request to `S` comes back with, as the gate sees it.
type OutcomeOf<S, Req> = Outcome<<S as Service<Req>>::Response, <S as Service<Req>>::Error>;

/// One attempt of a request to `S`, through the gate.
type CallOf<S, Req> =
    Call<Arc<Shared<OutcomeOf<S, Req>>>, OutcomeOf<S, Req>, InnerCall<S, Req>, Estimated, Instant>;

/// What a retry needs: the gate, a service to clone, the copy of the request to copy, and
/// what reads the quota its response announces.
struct Retry<S: Service<Req>, Req, C> {
    gate: Gate<OutcomeOf<S, Req>>,
    service: S,
    spare: Req,
    clone: C,
    answered: Answered<S::Response>,
}

/// What reads each response to a request: the layer's [`Readers`], the request's first scope
/// (whose quota a response announces), and, if the layer settles, what the request drew
/// (units and draws) of its scopes.
struct Answered<Res> {
    read: Arc<Readers<Res>>,
    first: Option<Scope>,
    drawn: Option<Box<Drawn>>,
}

/// What a request drew of the gate, and its scopes.
type Drawn = ((u64, Draws), Box<[Scope]>);

impl<Res> Clone for Answered<Res> {
    fn clone(&self) -> Self {
        Self {
            read: Arc::clone(&self.read),
            first: self.first.clone(),
            drawn: self.drawn.clone(),
        }
    }
}

/// The future of a [`GateService`]'s response: it waits for the gate, calls the inner
/// service, and retries a throttled request while it can.
///
/// # Cancel safety
///
/// Dropping it gives back the request's place in the gate's line, or its slot; other
/// callers carry on.
#[pin_project]
#[must_use = "futures do nothing unless polled"]
pub struct ResponseFuture<S: Service<Req>, Req, C> {
    #[pin]
    state: Attempts<S, Req>,
    /// `None` if the request could not be copied: it is not sent again.
    retry: Option<Retry<S, Req, C>>,
}

/// The request's attempts through the gate, or its error if the gate refused it as it came.
#[pin_project(project = AttemptsProj)]
enum Attempts<S: Service<Req>, Req> {
    Calling {
        #[pin]
        call: CallOf<S, Req>,
    },
    Refused {
        answer: Option<AnswerOf<S, Req>>,
    },
}

/// What a request to `S` through the gate comes back with.
type AnswerOf<S, Req> = Result<
    <S as Service<Req>>::Response,
    GateError<<S as Service<Req>>::Response, <S as Service<Req>>::Error>,
>;

impl<S: Service<Req>, Req, C> fmt::Debug for ResponseFuture<S, Req, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut debug = f.debug_struct("ResponseFuture");
        match &self.state {
            Attempts::Calling { call } => debug.field("call", call),
            Attempts::Refused { .. } => debug.field("call", &"refused by the gate"),
        };
        debug
            .field("can_retry", &self.retry.is_some())
            .finish_non_exhaustive()
    }
}

impl<S, Req, C> Future for ResponseFuture<S, Req, C>
where
    S: Service<Req> + Clone,
    C: CloneRequest<Req>,
{
    type Output = Result<S::Response, GateError<S::Response, S::Error>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut call = match this.state.project() {
            AttemptsProj::Calling { call } => call,
            AttemptsProj::Refused { answer } => {
                return Poll::Ready(
                    answer
                        .take()
                        .expect("`ResponseFuture` polled after it ended"),
                );
            }
        };
        loop {
            let retry = match ready!(call.as_mut().poll(cx)) {
                Turn::Ended(ended) => return Poll::Ready(finished(ended)),
                Turn::Again(retry) => retry,
            };
            let next = this.retry.as_ref().and_then(|again| {
                let request = again.clone.clone_request(&again.spare)?;
                let service = again.service.clone();
                let (gate, answered) = (again.gate.clone(), again.answered.clone());
                Some(InnerCall::new(service, request, false, gate, answered))
            });
            let Some(next) = next else {
                let last = retry.throttled;
                return Poll::Ready(Err(GateError::NotCloned { last }));
            };
            call.set(retry.attempt(next));
        }
    }
}

/// The caller's result of a call the gate ended.
fn finished<Res, E>(ended: Ended<Res, Outcome<Res, E>, Instant>) -> Result<Res, GateError<Res, E>> {
    match ended {
        Ended::Value(response) => Ok(response),
        Ended::Failed(Outcome::Error(error)) => Err(GateError::Inner(error)),
        // The classifier called the response a throttle once and not the second time it was
        // asked: it is the caller's, as any response that is not a throttle.
        Ended::Failed(Outcome::Response(response)) => Ok(response),
        Ended::GaveUp { attempts, last } => Err(GateError::GaveUp { attempts, last }),
        Ended::Late { earliest, last, .. } => Err(GateError::Deadline { earliest, last }),
        Ended::Overloaded(overloaded) => Err(GateError::Overloaded(overloaded)),
    }
}

/// One attempt's call of the inner service, run once the gate let it start: it asks the
/// service to be ready (for a retry), calls it, makes a throttled response an error, for
/// the gate to see, and takes in the quota another response announces, if asked.
#[pin_project]
struct InnerCall<S: Service<Req>, Req> {
    service: S,
    request: Option<Req>,
    /// Whether the service said it was ready (the caller's `poll_ready`, for a first
    /// attempt).
    ready: bool,
    gate: Gate<Outcome<S::Response, S::Error>>,
    answered: Answered<S::Response>,
    #[pin]
    called: Option<S::Future>,
}

impl<S: Service<Req>, Req> InnerCall<S, Req> {
    fn new(
        service: S,
        request: Req,
        ready: bool,
        gate: Gate<OutcomeOf<S, Req>>,
        answered: Answered<S::Response>,
    ) -> Self {
        Self {
            service,
            request: Some(request),
            ready,
            gate,
            answered,
            called: None,
        }
    }
}

impl<S: Service<Req>, Req> Future for InnerCall<S, Req> {
    type Output = Result<S::Response, Outcome<S::Response, S::Error>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if this.called.is_none() {
            if !*this.ready {
                if let Err(error) = ready!(this.service.poll_ready(cx)) {
                    return Poll::Ready(Err(Outcome::Error(error)));
                }
                *this.ready = true;
            }
            let request = this
                .request
                .take()
                .expect("`InnerCall` polled after it finished");
            this.called.set(Some(this.service.call(request)));
        }
        let called = this.called.as_pin_mut().expect("called just above");
        Poll::Ready(match ready!(called.poll(cx)) {
            Ok(response) => {
                // Taken in here, inside the attempt, where the gate still counts this request
                // in flight beside the others.
                let answered = &*this.answered;
                if let Some(read) = &answered.read.announced {
                    let announced = read(&response);
                    this.gate
                        .observe_all_for(answered.first.as_ref(), announced);
                }
                let outcome = Outcome::Response(response);
                match (this.gate.classify(&outcome), outcome) {
                    (None, Outcome::Response(mut response)) => {
                        if let (Some(with), Some(drawn)) = (&answered.read.settle, &answered.drawn)
                        {
                            let (drawn, scopes) = (**drawn).clone();
                            let settle = Settle::answered(Arc::clone(&with.gate), drawn, scopes);
                            (with.hand)(&mut response, settle);
                        }
                        Ok(response)
                    }
                    (_, outcome) => Err(outcome),
                }
            }
            Err(error) => Err(Outcome::Error(error)),
        })
    }
}
