//! The simulated API served over HTTP/1.1 on a local port, to test a real HTTP client against.
//!
//! [`serve`] puts a [`Server`] behind a socket. Each request calls [`Server::call`] once, so
//! the policies, latencies and [`Log`](super::Log) work as they do in process; only the answer
//! travels as HTTP:
//!
//! - `/call` calls `server.call(None)`, and `/call/{scope}` calls `server.call(Some(scope))`,
//!   whatever the method; the query string is ignored. Any other path is a `404 Not Found`
//!   that reaches no sim.
//! - Accepted: `200 OK`, with the body `accepted: request N` (the request's number, as in
//!   [`Accepted::request`](super::Accepted::request)).
//! - Rejected: `429 Too Many Requests`, with `Retry-After` in whole seconds, the scope in a
//!   [`SCOPE_HEADER`] (`x-ratelimit-scope`) if a scope's limit said no, and the
//!   [`Rejected`](super::Rejected) message as the body.
//! - Accepted or rejected, if the server's policies [announce their
//!   quota](super::Policy::announce_quota): the announcement in header fields of the
//!   [`Dialect`] the server is served with ([`Dialect::Ietf`] unless a
//!   [`ServeBuilder::dialect`] says otherwise).
//!
//! The scope is the rest of the path as sent, without percent-decoding, and cannot contain a
//! `/`: give scopes URL-safe names (letters, digits, `-`, `_`, `.`, `~`).
//!
//! `Retry-After` is in delta-seconds, which are whole numbers: the sim's exact Retry-After is
//! rounded **up** to the next whole second (250 ms becomes `1`), so a client that honours the
//! header never comes back before the sim said, and may come back up to a second later. A
//! policy that [rounds](super::Policy::retry_after_rounded) its Retry-After itself (down, as
//! Flask-Limiter does) sends whole seconds already, and they are sent as they are. A
//! throttle without a Retry-After (a policy with [`retry_after(false)`](super::Policy::retry_after))
//! is a 429 without the header.
//!
//! Announced resets and windows are rounded up to whole seconds too (see [`Dialect`]). They
//! are measured when the sim judged the request, like Retry-After; [`Reset::Epoch`] counts
//! from the wall clock when the response is written, which is later, so never early.
//!
//! # Real time
//!
//! Sockets run in real time, so the served sim does too: its latencies, windows and penalties
//! are wall-clock durations, and a test that uses it takes as long as the traffic it makes.
//! Build the [`Server`] and call [`serve`] in a tokio runtime on the real clock (not
//! `start_paused`: a paused clock would jump ahead whenever the runtime waits on a socket), with
//! IO and time enabled. Assert on counts and on the [`Log`](super::Log), with bounds that hold
//! on a slow machine, rather than on exact instants.
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use paceline_sim::http::{SCOPE_HEADER, serve};
//! use paceline_sim::{Policy, Server};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // One call per minute per account.
//! let api = Server::builder()
//!     .latency(Duration::from_millis(1))
//!     .per_scope(Policy::fixed_window(1, Duration::from_secs(60)))
//!     .build();
//! let http = serve(api, "127.0.0.1:0").await?;
//!
//! // Any HTTP client will do; here reqwest.
//! let client = reqwest::Client::builder().no_proxy().build()?;
//! let accepted = client.get(http.url(Some("acct-1"))).send().await?;
//! assert_eq!(accepted.status(), 200);
//! let throttled = client.get(http.url(Some("acct-1"))).send().await?;
//! assert_eq!(throttled.status(), 429);
//! assert_eq!(throttled.headers()["retry-after"], "60"); // 59.99… s, rounded up
//! assert_eq!(throttled.headers()[SCOPE_HEADER], "acct-1");
//!
//! // What the server saw, from the process that serves it.
//! let log = http.shutdown().await.log();
//! assert_eq!((log.accepted(), log.rejected()), (1, 1));
//! # Ok(())
//! # }
//! ```
//!
//! A server that announces its quota, in the `X-RateLimit-*` fields:
//!
//! ```
//! use std::time::Duration;
//! use paceline_sim::http::{Dialect, Reset, ServeBuilder};
//! use paceline_sim::{Policy, Server};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let api = Server::builder()
//!     .latency(Duration::from_millis(1))
//!     .global(Policy::fixed_window(2, Duration::from_secs(60)).announce_quota(true))
//!     .build();
//! let http = ServeBuilder::new()
//!     .dialect(Dialect::XRateLimit { reset: Reset::Delta })
//!     .serve(api, "127.0.0.1:0")
//!     .await?;
//!
//! let client = reqwest::Client::builder().no_proxy().build()?;
//! let accepted = client.get(http.url(None)).send().await?;
//! assert_eq!(accepted.status(), 200);
//! assert_eq!(accepted.headers()["x-ratelimit-limit"], "2");
//! assert_eq!(accepted.headers()["x-ratelimit-remaining"], "1");
//! assert_eq!(accepted.headers()["x-ratelimit-reset"], "60"); // 59.99… s, rounded up
//! # Ok(())
//! # }
//! ```

use std::convert::Infallible;
use std::future::{Future, Pending, pending};
use std::io;
use std::net::SocketAddr;
use std::pin::pin;
use std::time::{Duration, SystemTime};

use futures_util::future::{AbortHandle, Abortable, Either, FutureExt, Shared, select};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{CONTENT_TYPE, HeaderName, HeaderValue, RETRY_AFTER};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream, ToSocketAddrs};
use tokio::task::{JoinHandle, JoinSet};

use super::Server;

mod dialect;
mod llm;

pub use llm::serve_llm;

pub use dialect::{Dialect, Reset};

/// The response header that names the scope of a scoped throttle: `x-ratelimit-scope`.
///
/// A 429 from the server's global limit has none.
pub const SCOPE_HEADER: &str = "x-ratelimit-scope";

/// How long the accept loop rests after a failed accept (out of file descriptors, say), so that
/// a lasting failure does not spin.
const ACCEPT_RETRY: Duration = Duration::from_millis(10);

/// Serves `server` over HTTP/1.1 on `addr`, in a task of its own, until the returned handle is
/// dropped or [shut down](HttpServer::shutdown); with the defaults of [`ServeBuilder`] (quotas,
/// if the policies announce them, in the [`Dialect::Ietf`] fields).
///
/// Bind to port 0 (`"127.0.0.1:0"`) to let the system pick a free port, and read it back with
/// [`HttpServer::local_addr`]. The routes and answers are in the [module docs](self). It runs in
/// real time: see [Real time](self#real-time).
///
/// # Errors
///
/// If `addr` cannot be resolved or bound.
///
/// # Panics
///
/// Outside a tokio runtime with IO and time enabled.
///
/// # Cancel safety
///
/// Dropping the future before it resolves serves nothing (the port, if bound, is closed).
pub async fn serve(server: Server, addr: impl ToSocketAddrs) -> io::Result<HttpServer> {
    ServeBuilder::new().serve(server, addr).await
}

/// Configures how [`serve`] answers: for now, the [`Dialect`] of the quota fields.
///
/// # Examples
///
/// ```
/// use paceline_sim::Server;
/// use paceline_sim::http::{Dialect, ServeBuilder};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> std::io::Result<()> {
/// let http = ServeBuilder::new()
///     .dialect(Dialect::RateLimit)
///     .serve(Server::builder().build(), "127.0.0.1:0")
///     .await?;
/// # drop(http);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct ServeBuilder {
    dialect: Dialect,
}

impl ServeBuilder {
    /// The defaults: announced quotas in [`Dialect::Ietf`].
    pub fn new() -> Self {
        Self::default()
    }

    /// The header fields announced quotas are written in, on every response (200 and 429
    /// alike) when the server's policies [announce them](super::Policy::announce_quota).
    pub fn dialect(mut self, dialect: Dialect) -> Self {
        self.dialect = dialect;
        self
    }

    /// Serves `server` on `addr`, as [`serve`] does, with this configuration.
    ///
    /// # Errors
    ///
    /// If `addr` cannot be resolved or bound.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime with IO and time enabled.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it resolves serves nothing (the port, if bound, is closed).
    pub async fn serve(self, server: Server, addr: impl ToSocketAddrs) -> io::Result<HttpServer> {
        let listener = TcpListener::bind(addr).await?;
        let api = Api {
            server: server.clone(),
            options: self,
        };
        HttpServer::spawn(listener, api, server)
    }
}

/// What a served socket answers each request with: the simulated API ([`serve`]), or the
/// simulated LLM API ([`serve_llm`]).
trait Answers: Clone + Send + Sync + 'static {
    fn answer(
        self,
        request: Request<Incoming>,
    ) -> impl Future<Output = Response<Full<Bytes>>> + Send + 'static;
}

/// The simulated API, and how it is served.
#[derive(Clone)]
struct Api {
    server: Server,
    options: ServeBuilder,
}

impl Answers for Api {
    fn answer(
        self,
        request: Request<Incoming>,
    ) -> impl Future<Output = Response<Full<Bytes>>> + Send + 'static {
        answer(self.server, self.options, request)
    }
}

/// A [`Server`] (or an [`Llm`](super::Llm)) being served over HTTP, from [`serve`] (or
/// [`serve_llm`]).
///
/// Dropping it stops the server at once: the port is closed and connections are cut, requests
/// in progress included (the sim still logs a request that reached it). [`shutdown`](Self::shutdown)
/// stops it gracefully instead.
#[derive(Debug)]
pub struct HttpServer<S = Server> {
    server: S,
    addr: SocketAddr,
    stop: AbortHandle,
    /// `None` once [`shutdown`](Self::shutdown) has taken it.
    task: Option<JoinHandle<()>>,
}

/// Resolves once the [`AbortHandle`] paired with it is aborted, in every clone: a stop signal
/// for the accept loop and each connection.
type Stopping = Shared<Abortable<Pending<()>>>;

impl<S: Clone> HttpServer<S> {
    /// Serves `answers` on `listener` in a task of its own; `server` is what it serves, to
    /// hand back.
    fn spawn(listener: TcpListener, answers: impl Answers, server: S) -> io::Result<Self> {
        let addr = listener.local_addr()?;
        let (stop, registration) = AbortHandle::new_pair();
        let stopping = Abortable::new(pending(), registration).shared();
        let task = tokio::spawn(accept_loop(listener, answers, stopping));
        Ok(HttpServer {
            server,
            addr,
            stop,
            task: Some(task),
        })
    }

    /// The address the server listens on, with the port the system picked if it was bound to
    /// port 0.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The simulated server, to read what it saw while it is served.
    pub fn server(&self) -> &S {
        &self.server
    }

    /// Stops the server gracefully and gives it back: it stops accepting connections, lets the
    /// requests in progress get their answers, closes every connection, and returns once all
    /// are closed.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes leaves the shutdown to finish in the
    /// background.
    pub async fn shutdown(mut self) -> S {
        self.stop.abort();
        if let Some(task) = self.task.take() {
            if let Err(error) = task.await {
                if error.is_panic() {
                    std::panic::resume_unwind(error.into_panic());
                }
            }
        }
        self.server.clone()
    }
}

impl HttpServer {
    /// The URL of a call: `http://{addr}/call`, or `http://{addr}/call/{scope}`, where `addr`
    /// is the [address it listens on](Self::local_addr) (bind a loopback address, not
    /// `0.0.0.0`, for a URL every client can connect to).
    ///
    /// The scope is put in the path as it is; see the [module docs](self) for the characters
    /// to keep to.
    pub fn url(&self, scope: Option<&str>) -> String {
        match scope {
            None => format!("http://{}/call", self.addr),
            Some(scope) => format!("http://{}/call/{scope}", self.addr),
        }
    }
}

impl<S> Drop for HttpServer<S> {
    fn drop(&mut self) {
        // Aborting the accept loop drops its listener and its set of connections, which aborts
        // them in turn.
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// Accepts connections until `stopping`, then waits for the open ones to close.
async fn accept_loop(listener: TcpListener, answers: impl Answers, stopping: Stopping) {
    let mut connections = JoinSet::new();
    loop {
        let accepted = match select(pin!(listener.accept()), stopping.clone()).await {
            Either::Left((accepted, _)) => accepted,
            Either::Right(_) => break,
        };
        match accepted {
            Ok((stream, _)) => {
                let answers = answers.clone();
                connections.spawn(connection(stream, answers, stopping.clone()));
            }
            Err(error) => {
                tracing::debug!(%error, "sim http: accept failed");
                tokio::time::sleep(ACCEPT_RETRY).await;
            }
        }
        // Reap the connections that have closed.
        while connections.try_join_next().is_some() {}
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
}

/// Serves one connection; on `stopping`, finishes the request in progress and closes.
async fn connection(stream: TcpStream, answers: impl Answers, stopping: Stopping) {
    let service = service_fn(move |request| {
        let answer = answers.clone().answer(request);
        async move { Ok::<_, Infallible>(answer.await) }
    });
    let mut connection = pin!(
        http1::Builder::new()
            .timer(TokioTimer::new())
            .serve_connection(TokioIo::new(stream), service)
    );
    let result = match select(connection.as_mut(), stopping).await {
        Either::Left((result, _)) => result,
        Either::Right(_) => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(error) = result {
        tracing::debug!(%error, "sim http: connection ended with an error");
    }
}

/// One request: one call to the sim, answered as HTTP.
async fn answer(
    server: Server,
    options: ServeBuilder,
    request: Request<Incoming>,
) -> Response<Full<Bytes>> {
    let Some(scope) = route(request.uri().path()) else {
        let body = "not found: call /call or /call/{scope}\n";
        return text(StatusCode::NOT_FOUND, body.to_owned());
    };
    match server.call(scope).await {
        Ok(accepted) => {
            let body = format!("accepted: request {}\n", accepted.request);
            let mut response = text(StatusCode::OK, body);
            let headers = response.headers_mut();
            options
                .dialect
                .write(&accepted.quotas, SystemTime::now(), headers);
            response
        }
        Err(throttled) => {
            let mut response = text(StatusCode::TOO_MANY_REQUESTS, format!("{throttled}\n"));
            let headers = response.headers_mut();
            options
                .dialect
                .write(&throttled.quotas, SystemTime::now(), headers);
            if let Some(after) = throttled.retry_after {
                headers.insert(RETRY_AFTER, HeaderValue::from(seconds_up(after)));
            }
            // The scope came from the path, so it is visible ASCII; if not, leave it out.
            if let Some(value) = throttled.scope.and_then(|s| HeaderValue::try_from(s).ok()) {
                headers.insert(HeaderName::from_static(SCOPE_HEADER), value);
            }
            response
        }
    }
}

/// The scope a path calls with: `Some(None)` for `/call`, `Some(Some(scope))` for
/// `/call/{scope}`, `None` for any other path.
fn route(path: &str) -> Option<Option<&str>> {
    if path == "/call" {
        return Some(None);
    }
    let scope = path.strip_prefix("/call/")?;
    (!scope.is_empty() && !scope.contains('/')).then_some(Some(scope))
}

/// `after` in whole seconds, rounded up (saturating).
fn seconds_up(after: Duration) -> u64 {
    after
        .as_secs()
        .saturating_add(u64::from(after.subsec_nanos() > 0))
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_call_and_call_scope_only() {
        assert_eq!(route("/call"), Some(None));
        assert_eq!(route("/call/acct-1"), Some(Some("acct-1")));
        assert_eq!(route("/call/a%20b"), Some(Some("a%20b")));
        for other in [
            "/",
            "",
            "/call/",
            "/call/a/b",
            "/calls",
            "/call-1",
            "/other/call",
        ] {
            assert_eq!(route(other), None, "{other:?}");
        }
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        assert_eq!(seconds_up(Duration::ZERO), 0);
        assert_eq!(seconds_up(Duration::from_nanos(1)), 1);
        assert_eq!(seconds_up(Duration::from_millis(250)), 1);
        assert_eq!(seconds_up(Duration::from_secs(1)), 1);
        assert_eq!(seconds_up(Duration::from_millis(1_001)), 2);
        assert_eq!(seconds_up(Duration::from_secs(15)), 15);
        assert_eq!(seconds_up(Duration::MAX), u64::MAX);
    }
}
