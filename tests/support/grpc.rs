//! A real gRPC server on a free loopback port that rate-limits: tonic's own Health service
//! (`grpc.health.v1.Health`, which needs no protoc), behind a server-side interceptor that
//! counts calls in fixed windows and answers a call over the limit with `RESOURCE_EXHAUSTED`
//! and a `google.rpc.RetryInfo` saying when the window ends (or as a [`Refuse`] of the test's
//! says: with gRPC's server pushback instead). The server logs every call it saw, with the
//! instant it arrived: the judge of what a client did.
//!
//! ```text
//! let server = GrpcServer::start(Limit { calls: 5, window: Duration::from_secs(1) }).await;
//! let mut client = server.client().await;
//! check(&mut client, 1).await?; // Ok, or a RESOURCE_EXHAUSTED with a RetryInfo
//! let log = server.log();
//! ```
//!
//! Shared by `tests/http/tonic.rs` and `examples/grpc.rs` (through `#[path]`).
#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Endpoint, Server};
use tonic::{Code, Request, Status};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use tonic_types::{ErrorDetails, StatusExt};

/// The request metadata that numbers a call, so that the log can tell calls apart (and a
/// retry from a new call).
pub const CALL_ID: &str = "call-id";

/// The server's limit: at most `calls` calls in each window of `window`. The first window
/// starts at the first call, and each next one at the first call after the one before ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub calls: u32,
    pub window: Duration,
}

/// One call, as the server saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    /// When the interceptor saw it.
    pub at: Instant,
    /// Its `call-id` metadata, if it had one that reads as a number.
    pub call: Option<u64>,
    /// `Some(delay)` if it was refused, with the delay its refusal announced (zero for one
    /// that announced none).
    pub refused: Option<Duration>,
}

/// How the server refuses a call: from the time left in the window and the refusal's
/// message, the status it answers with and the delay that status announces.
pub type Refuse = fn(left: Duration, message: String) -> (Status, Duration);

/// The server's own refusal: a `RetryInfo` of the time left in the window.
pub fn with_retry_info(left: Duration, message: String) -> (Status, Duration) {
    let details = ErrorDetails::with_retry_info(Some(left));
    let status = Status::with_error_details(Code::ResourceExhausted, message, details);
    (status, left)
}

/// A refusal with gRPC's server pushback (`grpc-retry-pushback-ms`) of the time left in the
/// window, rounded up to whole milliseconds, and no RetryInfo.
pub fn with_pushback(left: Duration, message: String) -> (Status, Duration) {
    let millis = left.as_nanos().div_ceil(1_000_000) as u64;
    let mut status = Status::resource_exhausted(message);
    status
        .metadata_mut()
        .insert("grpc-retry-pushback-ms", millis.into());
    (status, Duration::from_millis(millis))
}

/// A refusal whose pushback asks the client not to retry (`-1`), with no RetryInfo.
pub fn do_not_retry(_left: Duration, message: String) -> (Status, Duration) {
    let mut status = Status::resource_exhausted(message);
    status
        .metadata_mut()
        .insert("grpc-retry-pushback-ms", (-1).into());
    (status, Duration::ZERO)
}

/// The fixed window and the log, behind the interceptor.
#[derive(Debug)]
struct Limiter {
    limit: Limit,
    window_start: Option<Instant>,
    in_window: u32,
    log: Vec<Arrival>,
}

impl Limiter {
    /// Counts a call arriving `at`: `None` if it is within the limit, else how long until
    /// the window ends. The log takes the refusal's announced delay from [`Limiter::told`].
    fn arrive(&mut self, at: Instant, call: Option<u64>) -> Option<Duration> {
        let ended = self
            .window_start
            .is_none_or(|start| at >= start + self.limit.window);
        if ended {
            self.window_start = Some(at);
            self.in_window = 0;
        }
        let refused = if self.in_window < self.limit.calls {
            self.in_window += 1;
            None
        } else {
            let end = self.window_start.expect("a window began above") + self.limit.window;
            Some(end - at)
        };
        self.log.push(Arrival { at, call, refused });
        refused
    }

    /// Logs `announced` as the delay of the refusal just counted.
    fn told(&mut self, announced: Duration) {
        if let Some(last) = self.log.last_mut() {
            last.refused = Some(announced);
        }
    }
}

/// The running server; stopped when dropped.
#[derive(Debug)]
pub struct GrpcServer {
    addr: SocketAddr,
    limiter: Arc<Mutex<Limiter>>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl GrpcServer {
    /// Starts the server on a free loopback port, refusing with a RetryInfo.
    pub async fn start(limit: Limit) -> GrpcServer {
        GrpcServer::start_refusing(limit, with_retry_info).await
    }

    /// Starts the server on a free loopback port, refusing as `refuse` says.
    pub async fn start_refusing(limit: Limit, refuse: Refuse) -> GrpcServer {
        let limiter = Arc::new(Mutex::new(Limiter {
            limit,
            window_start: None,
            in_window: 0,
            log: Vec::new(),
        }));
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let addr = listener.local_addr().expect("the bound port");
        let shared = Arc::clone(&limiter);
        let interceptor = move |request: Request<()>| {
            let at = Instant::now();
            let call = request
                .metadata()
                .get(CALL_ID)
                .and_then(|id| id.to_str().ok()?.parse().ok());
            let mut limiter = lock(&shared);
            match limiter.arrive(at, call) {
                None => Ok(request),
                Some(delay) => {
                    let message = format!(
                        "over {} calls in {:?}; the window ends in {delay:?}",
                        limit.calls, limit.window,
                    );
                    let (status, announced) = refuse(delay, message);
                    limiter.told(announced);
                    Err(status)
                }
            }
        };
        let (_reporter, health) = tonic_health::server::health_reporter();
        let (stop, stopped) = oneshot::channel::<()>();
        let server = Server::builder()
            .layer(tonic::service::InterceptorLayer::new(interceptor))
            .add_service(health)
            .serve_with_incoming_shutdown(TcpIncoming::from(listener), async {
                let _ = stopped.await;
            });
        let task = tokio::spawn(async move {
            server.await.expect("the gRPC server runs");
        });
        GrpcServer {
            addr,
            limiter,
            stop: Some(stop),
            task,
        }
    }

    /// The server's address, `http://127.0.0.1:port`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A client of the Health service, on one HTTP/2 connection to the server.
    pub async fn client(&self) -> HealthClient<Channel> {
        let channel = Endpoint::from_shared(self.url())
            .expect("a valid URL")
            .connect()
            .await
            .expect("connect to the gRPC server");
        HealthClient::new(channel)
    }

    /// Every call the server saw so far, in order of arrival.
    pub fn log(&self) -> Vec<Arrival> {
        lock(&self.limiter).log.clone()
    }

    /// Forgets the calls seen so far, and starts the next window at the next call.
    pub fn reset(&self) {
        let mut limiter = lock(&self.limiter);
        limiter.log.clear();
        limiter.window_start = None;
        limiter.in_window = 0;
    }
}

impl Drop for GrpcServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.abort();
    }
}

fn lock(limiter: &Mutex<Limiter>) -> std::sync::MutexGuard<'_, Limiter> {
    limiter.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One call of the Health service's `Check`, numbered `call` in its metadata.
pub async fn check(client: &mut HealthClient<Channel>, call: u64) -> Result<(), Status> {
    let mut request = Request::new(HealthCheckRequest {
        service: String::new(),
    });
    request.metadata_mut().insert(CALL_ID, call.into());
    client.check(request).await.map(drop)
}
