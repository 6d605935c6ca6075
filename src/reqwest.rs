//! A [`reqwest_middleware::Middleware`] that sends every request of a reqwest client through a
//! [`Gate`]: one line paces a whole client.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use paceline::reqwest::GateMiddleware;
//! use reqwest_middleware::ClientBuilder;
//!
//! let gate = paceline::reqwest::gate().max_in_flight(8).rate(10.0).build()?;
//! let client = ClientBuilder::new(reqwest::Client::new())
//!     .with(GateMiddleware::new(gate))
//!     .build();
//! let answer = client.get("https://api.example.com/v1/items").send().await?;
//! # drop(answer); Ok(())
//! # }
//! ```
//!
//! What the middleware does with each request:
//!
//! - It waits for the gate: its in-flight limit, its rate, its backoffs and the quota the
//!   server announced, in its turn with every other request of the client (and every other
//!   user of the same gate): in arrival order, or scope by scope in turn for requests given
//!   scopes.
//! - It reads the answer with [`paceline::http`](crate::http): a `429` or a `503` is a
//!   throttle, with its `Retry-After` ([`rate_limited_from`](crate::http::rate_limited_from));
//!   every budget that any answer announces, a throttle's too (the IETF
//!   `RateLimit`/`RateLimit-Policy` fields, `RateLimit-*`, `X-RateLimit-*`, OpenAI's and
//!   Anthropic's: see [`announced`](crate::http::announced)) goes to the gate, as
//!   [`Gate::observe_all`] takes them. [`GateMiddleware::read_announced`] turns that off.
//! - A throttled request is sent again through the gate (first in line once the backoff ends),
//!   up to the gate's [retry limit](crate::GateBuilder::max_retries); while it waits, every
//!   other request waits too. To send it again the middleware keeps a copy
//!   ([`Request::try_clone`]), which costs nothing for a body of bytes or text. A
//!   body that is a stream cannot be copied: such a request is sent once, paced like any
//!   other, and if it is throttled it fails at once with a [`GaveUp`] whose
//!   [`body_not_cloneable`](GaveUp::body_not_cloneable) is true. The gate still backs off
//!   for it; its [stats](Gate::stats) count the throttle, and among `retries` the retry
//!   that the gate allowed and the middleware did not send.
//! - Any other answer (`200`, `404`, `500`, ...) comes back as it is, at once; so does a
//!   transport error (connection refused, timeout), unchanged: the middleware is invisible to
//!   the code that reads the answers.
//! - A request still throttled after the last retry fails with a [`GaveUp`] error that
//!   carries the last response, whole: see [`GaveUp`] for how to take it back.
//! - A request that finds the gate's line full
//!   ([`GateBuilder::max_queued`](crate::GateBuilder::max_queued)) is never sent: it fails at
//!   once with an [`Overloaded`] error (a [`reqwest_middleware::Error::Middleware`];
//!   `Overloaded::try_from(error)` takes it back), which `reqwest-retry` takes as fatal too.
//!
//! # Scopes
//!
//! One gate can keep separate backoffs for parts of an API that the server limits apart:
//! [`GateMiddleware::scope_by`] names each request's [`Scope`] (its host, or a developer token
//! from a header). A throttle then holds back the requests of its own scope only; the
//! in-flight limit and the rate stay the gate's, shared by all scopes. What a scoped
//! request's answer announces is its scope's, on a gate with
//! [limits per scope](crate::GateBuilder::per_scope) (`per_scope(ScopeLimits::new())` keeps
//! each scope's state and no limit of its own): each token's or account's announced quota
//! paces that scope alone ([`Gate::observe_all_in`]). A gate without limits per scope keeps no
//! state per scope, and takes a scoped answer's budgets as its own.
//!
//! # Beside `reqwest-retry`
//!
//! `reqwest_retry::RetryTransientMiddleware` retries what it calls transient: connection
//! errors and timeouts, every `5xx`, and also `408` and `429`, after an exponential backoff of
//! its own that does not read `Retry-After`. Put it **first** and the gate after it, so that
//! the gate is the innermost middleware, next to the network:
//!
//! ```no_run
//! # fn example(gate: paceline::Gate<paceline::reqwest::Failure>) {
//! use paceline::reqwest::GateMiddleware;
//! use reqwest_middleware::ClientBuilder;
//! use reqwest_retry::RetryTransientMiddleware;
//! use reqwest_retry::policies::ExponentialBackoff;
//!
//! let retry = RetryTransientMiddleware::new_with_policy(
//!     ExponentialBackoff::builder().build_with_max_retries(3),
//! );
//! let client = ClientBuilder::new(reqwest::Client::new())
//!     .with(retry) // outer: retries transient errors
//!     .with(GateMiddleware::new(gate)) // inner: paces every request that goes out
//!     .build();
//! # drop(client);
//! # }
//! ```
//!
//! - **Every request sent is paced.** Middlewares run in the order they are added, each
//!   around the ones after it. With the gate inside, each retry of a transient error goes
//!   through the gate as a request of its own: it waits for the rate, the quota and any
//!   backoff, and counts against the in-flight limit. With the gate outside, the gate sees
//!   one call while `reqwest-retry` sends several, unpaced.
//! - **Throttles are retried once, by the gate.** The gate retries a `429` or `503` itself,
//!   after the server's `Retry-After`, and holds back every other request meanwhile. A
//!   throttle it finally gives up on comes out as a [`GaveUp`] error, a
//!   [`reqwest_middleware::Error::Middleware`], which `reqwest-retry`'s default strategy
//!   takes as fatal: it is not retried a second time. With the gate outside, `reqwest-retry`
//!   would retry the `429` on its own schedule, inside the server's `Retry-After` (where
//!   servers such as Google Ads double the penalty), before the gate ever saw it.
//!
//! `reqwest-retry` wraps every error it passes on in its `RetryError`; unwrap that first to
//! reach the [`GaveUp`] inside (see [`GaveUp`]). Like the gate, `reqwest-retry` needs a
//! request it can clone: it fails a streaming body before sending it.

use std::fmt;
use std::sync::Arc;

use ::http::Extensions;
use async_trait::async_trait;
use reqwest_middleware::reqwest::{self, Request, Response};
use reqwest_middleware::{Middleware, Next};

use tokio::time::Instant;

use crate::error::Overloaded;
use crate::gate::call::{Arrival, Turn};
use crate::gate::dimensions::Draws;
use crate::gate::ended::{Ended, Estimated};
use crate::gate::{CallOptions, Gate, GateBuilder, RateLimited, Scope, Settle};

/// Starts building the gate for a [`GateMiddleware`]: a [`Gate::builder`] whose classifier is
/// the middleware's own (`429` and `503` are throttles, with their `Retry-After` and the
/// quota they announce). Set its in-flight limit, rate, retries and backoff as for any gate.
///
/// # Examples
///
/// ```
/// use paceline::reqwest::GateMiddleware;
///
/// let gate = paceline::reqwest::gate()
///     .max_in_flight(8)
///     .rate(10.0)
///     .max_retries(3)
///     .build()
///     .unwrap();
/// let middleware = GateMiddleware::new(gate.clone());
/// // The gate is shared: its stats count every request of every client that uses it.
/// assert_eq!(gate.stats().calls, 0);
/// # drop(middleware);
/// ```
pub fn gate() -> GateBuilder<Failure> {
    Gate::builder(Failure::rate_limited)
}

/// What the gate of a [`GateMiddleware`] sees of a request that did not succeed: a throttled
/// response, or an error of reqwest's (sending, reading, decoding). A gate that paces reqwest
/// calls is a `Gate<Failure>`, built by [`gate()`]; [`send`] and the middleware make the
/// throttles, and a `reqwest::Error` converts into one with `?`.
///
/// The middleware's caller never sees one: a transport error comes back as it was, and a
/// throttle given up as a [`GaveUp`]. Through the gate's own streams ([`send`]), a call
/// ends with an [`Error<Failure>`](crate::Error), which is a `std::error::Error`.
pub struct Failure(Failed);

/// The two ways a request fails, as the gate sees them.
enum Failed {
    /// A `429` or `503`, classified as it came back (with the request's scope and, if read,
    /// the quota it announced). Boxed: a throttle is the rare case, and every attempt's
    /// result is as large as its error.
    Throttled {
        response: Box<Response>,
        limited: RateLimited,
    },
    /// No answer: the error of the middlewares after the gate, or of reqwest.
    Transport(reqwest_middleware::Error),
}

impl Failure {
    /// The classifier of every gate a [`GateMiddleware`] paces: the answer was read when it
    /// came back, where the request's scope is known.
    fn rate_limited(&self) -> Option<RateLimited> {
        match &self.0 {
            Failed::Throttled { limited, .. } => Some(limited.clone()),
            Failed::Transport(_) => None,
        }
    }
}

impl Failure {
    /// The caller's error for a request that ended as this failure after `attempts`: a
    /// transport error as it was, a throttle as a [`GaveUp`] (`body_not_cloneable` if it
    /// was not sent again because its body could not be copied).
    fn into_error(self, attempts: u32, body_not_cloneable: bool) -> reqwest_middleware::Error {
        match self.0 {
            Failed::Transport(error) => error,
            Failed::Throttled { response, .. } => {
                GaveUp::new(*response, attempts, body_not_cloneable).into()
            }
        }
    }
}

impl From<reqwest::Error> for Failure {
    /// A reqwest error inside a call (sending, reading the body, decoding it): not a
    /// throttle, so it reaches the caller at once.
    fn from(error: reqwest::Error) -> Self {
        Failure(Failed::Transport(error.into()))
    }
}

impl From<reqwest_middleware::Error> for Failure {
    fn from(error: reqwest_middleware::Error) -> Self {
        Failure(Failed::Transport(error))
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Failed::Throttled { response, .. } => {
                write!(
                    f,
                    "throttled: {} from {}",
                    response.status(),
                    response.url()
                )
            }
            Failed::Transport(error) => fmt::Display::fmt(error, f),
        }
    }
}

impl std::error::Error for Failure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.0 {
            Failed::Throttled { .. } => None,
            Failed::Transport(error) => Some(error),
        }
    }
}

impl fmt::Debug for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Failed::Throttled { response, limited } => f
                .debug_struct("Throttled")
                .field("status", &response.status())
                .field("url", &response.url().as_str())
                .field("limited", limited)
                .finish(),
            Failed::Transport(error) => f.debug_tuple("Transport").field(error).finish(),
        }
    }
}

/// Which scope a request belongs to, as the user says.
type ScopeOf = dyn Fn(&Request) -> Option<Scope> + Send + Sync;

/// A [`reqwest_middleware::Middleware`] that sends every request through a [`Gate`]; see the
/// [module docs](self) for what it does, and where to put it beside `reqwest-retry`.
///
/// Cheap to clone; clones share the gate.
///
/// # Examples
///
/// A server that allows one request per second answers the second request of a second with
/// `429` and `Retry-After: 1`. The middleware holds it back for that second and sends it
/// again; the caller sees only the `200`.
///
/// ```
/// use std::time::Duration;
/// use paceline::reqwest::GateMiddleware;
/// use paceline_sim::{Policy, Server, http::serve};
/// use reqwest_middleware::ClientBuilder;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let api = Server::builder()
///     .latency(Duration::from_millis(1))
///     .global(Policy::fixed_window(1, Duration::from_secs(1)))
///     .build();
/// let http = serve(api, "127.0.0.1:0").await?;
///
/// let gate = paceline::reqwest::gate().build()?;
/// let client = ClientBuilder::new(reqwest::Client::builder().no_proxy().build()?)
///     .with(GateMiddleware::new(gate.clone()))
///     .build();
/// for _ in 0..2 {
///     let answer = client.get(http.url(None)).send().await?;
///     assert_eq!(answer.status(), 200);
/// }
/// let stats = gate.stats();
/// assert_eq!((stats.calls, stats.throttles, stats.retries), (3, 1, 1));
/// assert_eq!(http.shutdown().await.log().sent_into_known_penalty(), 0);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct GateMiddleware {
    gate: Gate<Failure>,
    scope_of: Option<Arc<ScopeOf>>,
    read_announced: bool,
}

impl fmt::Debug for GateMiddleware {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GateMiddleware")
            .field("gate", &self.gate)
            .field("scoped", &self.scope_of.is_some())
            .field("read_announced", &self.read_announced)
            .finish()
    }
}

impl GateMiddleware {
    /// Paces requests through `gate` (from [`gate()`]); shares it with every other
    /// middleware, client and caller that holds a clone of it. Reads the announced quota;
    /// no scopes.
    pub fn new(gate: Gate<Failure>) -> Self {
        Self {
            gate,
            scope_of: None,
            read_announced: true,
        }
    }

    /// Names the [`Scope`] of each request, before it is sent: a throttle of a request with
    /// a scope holds back that scope's requests only, and a request waits for its scope's
    /// backoff and for the gate-wide one (as [`CallOptions::scopes`](crate::CallOptions::scopes)
    /// says). `None` leaves a request without a scope: its throttle holds back every request.
    ///
    /// # Examples
    ///
    /// Per developer token, from a header:
    ///
    /// ```
    /// use paceline::Scope;
    /// use paceline::reqwest::GateMiddleware;
    ///
    /// let gate = paceline::reqwest::gate().build().unwrap();
    /// let middleware = GateMiddleware::new(gate).scope_by(|request: &reqwest::Request| {
    ///     let token = request.headers().get("developer-token")?;
    ///     token.to_str().ok().map(Scope::from)
    /// });
    /// # drop(middleware);
    /// ```
    ///
    /// Per host:
    ///
    /// ```
    /// use paceline::Scope;
    /// use paceline::reqwest::GateMiddleware;
    ///
    /// let gate = paceline::reqwest::gate().build().unwrap();
    /// let middleware = GateMiddleware::new(gate)
    ///     .scope_by(|request: &reqwest::Request| request.url().host_str().map(Scope::from));
    /// # drop(middleware);
    /// ```
    pub fn scope_by(
        mut self,
        scope_of: impl Fn(&Request) -> Option<Scope> + Send + Sync + 'static,
    ) -> Self {
        self.scope_of = Some(Arc::new(scope_of));
        self
    }

    /// Whether what answers announce goes to the gate (true by default): every budget an
    /// answer announces, a throttle's too, each dimension's and each named policy's apart,
    /// read by [`paceline::http::announced`](crate::http::announced) inside the request's
    /// attempt and taken in through [`Gate::observe_all`] (a server's one quota is one budget
    /// of [`Dimension::UNITS`](crate::Dimension::UNITS)): an LLM provider's requests and
    /// tokens, a server's second and day. For a request with a [scope](Self::scope_by),
    /// through a gate with [limits per scope](crate::GateBuilder::per_scope), they are the
    /// scope's ([`Gate::observe_all_in`]), so that each tenant's key or account paces its
    /// own; a gate without limits per scope takes them as its own. Turn it off for a server
    /// whose announcements are not to be trusted. The tower layer reads them under the same
    /// name ([`GateLayer::read_announced`](crate::tower::GateLayer::read_announced), with the
    /// `tower` feature).
    ///
    /// # Examples
    ///
    /// ```
    /// use paceline::reqwest::GateMiddleware;
    ///
    /// let gate = paceline::reqwest::gate().build().unwrap();
    /// let middleware = GateMiddleware::new(gate).read_announced(false);
    /// # drop(middleware);
    /// ```
    pub fn read_announced(mut self, read: bool) -> Self {
        self.read_announced = read;
        self
    }

    /// The gate the requests go through, for its [stats](Gate::stats).
    pub fn gate(&self) -> &Gate<Failure> {
        &self.gate
    }

    /// One attempt: sends `request` (of `scopes`, drawing `drawn` if its options named what
    /// it costs) down the rest of the chain and reads the answer; a throttle becomes a
    /// [`Failure`] for the gate.
    async fn send(
        &self,
        request: Request,
        (scopes, drawn): (&[Scope], Option<&(u64, Draws)>),
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> Result<Response, Failure> {
        let answer = next.run(request, extensions).await;
        let mut answer = read(&self.gate, answer, self.read_announced, scopes.first());
        if let (Ok(response), Some(drawn)) = (&mut answer, drawn) {
            let gate = Arc::clone(self.gate.shared());
            let settle = Settle::answered(gate, drawn.clone(), scopes.into());
            response.extensions_mut().insert(settle);
        }
        answer
    }
}

/// Reads the answer to one attempt as the gate of a [`GateMiddleware`] sees it: a `429` or a
/// `503` is a throttle (of `scope`, if given), with its `Retry-After`; every budget any
/// answer announces goes to `gate` if `read_announced`, as [`Gate::observe_all`] takes them
/// (the scope's, for a request of `scope`).
fn read(
    gate: &Gate<Failure>,
    answer: reqwest_middleware::Result<Response>,
    read_announced: bool,
    scope: Option<&Scope>,
) -> Result<Response, Failure> {
    let response = answer.map_err(|error| Failure(Failed::Transport(error)))?;
    let (status, headers) = (response.status(), response.headers());
    // Every budget the answer announces, a throttle's too, read here, inside the attempt,
    // where the gate still counts this request in flight beside the others and dates the
    // announcement by its start. A scoped request's answer announces its scope's budgets and
    // the gate's, on a gate that keeps its scopes' state, each by its policy.
    let ran_out = read_announced
        .then(|| gate.observe_all_for(scope, crate::http::announced(headers)))
        .flatten();
    let Some(mut limited) = crate::http::rate_limited_from(status, headers) else {
        return Ok(response);
    };
    // Taken in above with every other budget.
    limited.quota = None;
    // A refusal is its scope's, unless the policy that ran out is the gate's.
    if let (Some(scope), None | Some(true)) = (scope, ran_out) {
        limited = limited.scope(scope.clone());
    }
    let response = Box::new(response);
    Err(Failure(Failed::Throttled { response, limited }))
}

/// Sends `request` as one attempt of a call through `gate` (from [`gate()`]), and reads its
/// answer as [`GateMiddleware`] does: a `429` or a `503` becomes a throttle [`Failure`],
/// which the gate backs off for and retries; the quota any answer announces goes to the
/// gate. For the gate's own streams over reqwest calls: [`Gate::paged`] for a paged listing,
/// [`throttled_map`](crate::PacelineExt::throttled_map) for a stream of requests, without a
/// middleware.
///
/// Call it inside the call's future (the closure given to the gate), so that each attempt
/// sends again. Any other error of the call converts into a [`Failure`] with `?`: a
/// `reqwest::Error` (reading the body, decoding JSON) is one. Inside a scoped call
/// ([`Gate::call_in`], or a page of [`Gate::paged_with`] whose options name scopes) the
/// answer is read as the call's first scope's, as the middleware reads a scoped request's.
///
/// # Examples
///
/// A listing of three pages, fetched through a gate that keeps to the server's one request
/// per second; the server's throttles are retried, and no row is lost or repeated.
///
/// ```
/// use std::time::Duration;
/// use futures::TryStreamExt;
/// use paceline::Page;
/// use paceline_sim::{Policy, Server, http::serve};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let api = Server::builder()
///     .latency(Duration::from_millis(1))
///     .global(Policy::fixed_window(1, Duration::from_secs(1)))
///     .build();
/// let http = serve(api, "127.0.0.1:0").await?;
///
/// let gate = paceline::reqwest::gate().build()?;
/// let client = reqwest::Client::builder().no_proxy().build()?;
/// let rows: Vec<String> = gate
///     .paged(|page: Option<u32>| {
///         let page = page.unwrap_or(1);
///         let request = client.get(format!("{}?page={page}", http.url(None)));
///         let gate = &gate;
///         async move {
///             let answer = paceline::reqwest::send(gate, request).await?;
///             let body = answer.text().await?;
///             let next = (page < 3).then_some(page + 1);
///             Ok(Page { rows: vec![format!("page {page}: {}", body.trim())], next })
///         }
///     })
///     .try_collect()
///     .await?;
/// assert_eq!(rows.len(), 3);
/// assert_eq!(gate.stats().gave_up, 0);
/// # Ok(())
/// # }
/// ```
pub async fn send(
    gate: &Gate<Failure>,
    request: reqwest::RequestBuilder,
) -> Result<Response, Failure> {
    let answer = request
        .send()
        .await
        .map_err(reqwest_middleware::Error::from);
    // Inside `call_in(scope, ..)` the answer is that scope's: one account's quota paces that
    // account, not the whole client.
    let scope = crate::gate::answering::answering(gate.shared().id()).and_then(|(_, s)| s);
    read(gate, answer, true, scope.as_ref())
}

#[async_trait]
impl Middleware for GateMiddleware {
    async fn handle(
        &self,
        request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        // The request's own options, if it carries them; else the scope `scope_by` names.
        let options = extensions.get::<CallOptions>().cloned();
        let drawn = options.as_ref().map(|o| {
            let terms = o.terms(Instant::now);
            (terms.cost, terms.draws)
        });
        let mut options = options.unwrap_or_default();
        if options.scopes.is_empty() {
            let scope = (self.scope_of.as_ref()).and_then(|scope_of| scope_of(&request));
            options.scopes = scope.into_iter().collect();
        }
        let terms = options.terms(Instant::now);
        let scopes = options.scopes;
        let shared = &**self.gate.shared();
        let arrival = match Arrival::new(shared, scopes.clone(), terms, Estimated) {
            Ok(arrival) => arrival,
            // Turned away, or late: the request is never sent.
            Err(refused) => return finish(refused.into()),
        };
        let mark = (&*scopes, drawn.as_ref());
        // The copy for a retry is taken before the request goes, as sending consumes it.
        let mut spare = request.try_clone();
        let send = self.send(request, mark, extensions, next.clone());
        let mut turn = arrival.attempt(send).await;
        loop {
            let retry = match turn {
                Turn::Ended(ended) => return finish(ended),
                Turn::Again(retry) => retry,
            };
            let Some(request) = spare else {
                // A body that is a stream cannot be sent again.
                let attempts = retry.number - 1;
                return Err(retry.throttled.into_error(attempts, true));
            };
            spare = request.try_clone();
            let send = self.send(request, mark, extensions, next.clone());
            turn = retry.attempt(send).await;
        }
    }
}

/// The caller's answer for a call through the gate that ended.
fn finish(ended: Ended<Response, Failure, Instant>) -> reqwest_middleware::Result<Response> {
    match ended {
        Ended::Value(response) => Ok(response),
        // Only a transport error fails without a throttle: this middleware's classifier
        // calls every throttled answer a throttle.
        Ended::Failed(failure) => Err(failure.into_error(1, false)),
        Ended::GaveUp { attempts, last } => Err(last.into_error(attempts, false)),
        Ended::Late { earliest, last, .. } => {
            let late = crate::Error::<Failure>::Deadline {
                earliest: Box::new(earliest),
                last,
            };
            Err(reqwest_middleware::Error::middleware(late))
        }
        Ended::Overloaded(overloaded) => Err(reqwest_middleware::Error::middleware(overloaded)),
    }
}

/// A request still throttled when the [`GateMiddleware`] stopped sending it: after the gate's
/// [retry limit](crate::GateBuilder::max_retries), or at once if its body was a stream that
/// cannot be sent again. It carries the last response, whole (status, headers and unread
/// body).
///
/// It reaches the caller as a [`reqwest_middleware::Error::Middleware`];
/// `GaveUp::try_from(error)` takes it back out, and gives back any other error unchanged.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use paceline::reqwest::{GateMiddleware, GaveUp};
/// use paceline_sim::{Policy, Server, http::serve};
/// use reqwest_middleware::ClientBuilder;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let api = Server::builder()
///     .latency(Duration::from_millis(1))
///     .global(Policy::fixed_window(1, Duration::from_secs(60)))
///     .build();
/// let http = serve(api, "127.0.0.1:0").await?;
/// let gate = paceline::reqwest::gate().max_retries(0).build()?;
/// let client = ClientBuilder::new(reqwest::Client::builder().no_proxy().build()?)
///     .with(GateMiddleware::new(gate))
///     .build();
///
/// client.get(http.url(None)).send().await?; // the minute's one request
/// let error = client.get(http.url(None)).send().await.unwrap_err();
/// let gave_up = GaveUp::try_from(error).expect("a throttle given up");
/// assert_eq!((gave_up.attempts(), gave_up.body_not_cloneable()), (1, false));
/// let response = gave_up.into_response();
/// assert_eq!(response.status(), 429);
/// assert_eq!(response.headers()["retry-after"], "60");
/// assert!(response.text().await?.starts_with("throttled by the server"));
/// # Ok(())
/// # }
/// ```
///
/// Behind `reqwest-retry` (see the [module docs](self#beside-reqwest-retry)), unwrap its
/// `RetryError` first:
///
/// ```
/// use paceline::reqwest::GaveUp;
/// use reqwest_retry::RetryError;
///
/// fn gave_up(error: reqwest_middleware::Error) -> Result<GaveUp, reqwest_middleware::Error> {
///     let reqwest_middleware::Error::Middleware(outer) = error else {
///         return Err(error);
///     };
///     match outer.downcast::<RetryError>() {
///         Ok(RetryError::Error(inner) | RetryError::WithRetries { err: inner, .. }) => {
///             GaveUp::try_from(inner)
///         }
///         Err(outer) => GaveUp::try_from(reqwest_middleware::Error::Middleware(outer)),
///     }
/// }
/// # let _ = gave_up;
/// ```
pub struct GaveUp {
    response: Response,
    attempts: u32,
    body_not_cloneable: bool,
}

impl GaveUp {
    fn new(response: Response, attempts: u32, body_not_cloneable: bool) -> Self {
        Self {
            response,
            attempts,
            body_not_cloneable,
        }
    }

    /// The last response: a `429` or a `503`.
    pub fn response(&self) -> &Response {
        &self.response
    }

    /// The last response, to read its body.
    pub fn into_response(self) -> Response {
        self.response
    }

    /// How many times the request was sent.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Whether the request was not sent again because its body was a stream, which cannot be
    /// copied ([`Request::try_clone`]); false when the gate's retry limit was reached.
    pub fn body_not_cloneable(&self) -> bool {
        self.body_not_cloneable
    }
}

impl fmt::Debug for GaveUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GaveUp")
            .field("status", &self.response.status())
            .field("url", &self.response.url().as_str())
            .field("attempts", &self.attempts)
            .field("body_not_cloneable", &self.body_not_cloneable)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for GaveUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (status, url) = (self.response.status(), self.response.url());
        if self.body_not_cloneable {
            write!(
                f,
                "{url} answered {status}, and the request was not sent again: its body is a \
                 stream, which cannot be copied"
            )
        } else {
            let attempts = self.attempts;
            write!(
                f,
                "gave up after {attempts} throttled attempts; {url} answered {status}"
            )
        }
    }
}

impl std::error::Error for GaveUp {}

impl From<GaveUp> for reqwest_middleware::Error {
    fn from(gave_up: GaveUp) -> Self {
        reqwest_middleware::Error::middleware(gave_up)
    }
}

impl TryFrom<reqwest_middleware::Error> for GaveUp {
    type Error = reqwest_middleware::Error;

    /// The [`GaveUp`] inside `error`, or `error` unchanged if it holds none.
    fn try_from(error: reqwest_middleware::Error) -> Result<Self, Self::Error> {
        take_back(error)
    }
}

impl TryFrom<reqwest_middleware::Error> for Overloaded {
    type Error = reqwest_middleware::Error;

    /// The [`Overloaded`] inside `error` (a request the [`GateMiddleware`]'s gate turned
    /// away, its line full), or `error` unchanged if it holds none.
    ///
    /// # Examples
    ///
    /// ```
    /// use paceline::Overloaded;
    /// use paceline::reqwest::GateMiddleware;
    /// use paceline_sim::{Server, http::serve};
    /// use reqwest_middleware::ClientBuilder;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let http = serve(Server::builder().build(), "127.0.0.1:0").await?;
    /// // One request a minute, and no line: the second is turned away, never sent.
    /// let gate = paceline::reqwest::gate().rate(1.0 / 60.0).max_queued(0).build()?;
    /// let client = ClientBuilder::new(reqwest::Client::builder().no_proxy().build()?)
    ///     .with(GateMiddleware::new(gate.clone()))
    ///     .build();
    /// client.get(http.url(None)).send().await?;
    /// let error = client.get(http.url(None)).send().await.unwrap_err();
    /// let overloaded = Overloaded::try_from(error).expect("turned away by the gate");
    /// assert_eq!(overloaded.max_queued(), 0);
    /// assert_eq!((gate.stats().calls, gate.stats().turned_away), (1, 1));
    /// assert_eq!(http.shutdown().await.log().ours().count(), 1);
    /// # Ok(())
    /// # }
    /// ```
    fn try_from(error: reqwest_middleware::Error) -> Result<Self, Self::Error> {
        take_back(error)
    }
}

/// The middleware's own error of type `T` inside `error`, or `error` unchanged if it holds
/// none.
fn take_back<T>(error: reqwest_middleware::Error) -> Result<T, reqwest_middleware::Error>
where
    T: fmt::Display + fmt::Debug + Send + Sync + 'static,
{
    match error {
        reqwest_middleware::Error::Middleware(inner) => inner
            .downcast::<T>()
            .map_err(reqwest_middleware::Error::Middleware),
        other => Err(other),
    }
}
