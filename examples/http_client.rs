//! A real HTTP client (reqwest) through a gate, against the simulated API served on a local
//! port.
//!
//! ```sh
//! cargo run --example http_client --features http
//! ```
//!
//! The server allows 10 requests per second, in fixed windows; a request over that is turned
//! away with a 429 and starts a penalty of 1 s, doubled for every request that arrives inside
//! it, up to 8 s. The client makes 25 calls through a gate paced at 20 per second, twice what
//! the server allows. Its classifier is `paceline::http`'s: the first 429's `Retry-After: 1`
//! holds every call back for that second, the throttled call is retried first, and nothing is
//! sent into the penalty. It runs in real time, in about two seconds.

use std::fmt;
use std::time::Duration;

use futures::StreamExt;
use paceline::prelude::*;
use paceline::{Gate, RateLimited};
use paceline_sim::http::serve;
use paceline_sim::{Policy, Server};
use reqwest::StatusCode;
use reqwest::header::{HeaderMap, RETRY_AFTER};
use tokio::time::Instant;

const SEC: Duration = Duration::from_secs(1);
const CALLS: u32 = 25;

/// Why a call failed: the server answered with an error status, or did not answer.
#[derive(Debug)]
enum ApiError {
    Status {
        status: StatusCode,
        headers: HeaderMap,
    },
    Transport(reqwest::Error),
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApiError::Status { status, .. } => write!(f, "the server answered {status}"),
            ApiError::Transport(error) => write!(f, "no answer: {error}"),
        }
    }
}

/// 429 and 503 are throttles, with their Retry-After; nothing else is.
fn classify(error: &ApiError) -> Option<RateLimited> {
    match error {
        ApiError::Status { status, headers } => paceline::http::rate_limited_from(*status, headers),
        ApiError::Transport(_) => None,
    }
}

/// One call: a GET whose error status becomes an `ApiError`, printed when it is a 429.
async fn call(client: &reqwest::Client, url: &str, n: u32, start: Instant) -> Result<(), ApiError> {
    let response = client.get(url).send().await.map_err(ApiError::Transport)?;
    let status = response.status();
    if status.is_success() {
        return Ok(());
    }
    let headers = response.headers().clone();
    if status == StatusCode::TOO_MANY_REQUESTS {
        let after = headers.get(RETRY_AFTER).and_then(|v| v.to_str().ok());
        println!(
            "  {:5.2} s  call {n}: {status}, Retry-After: {}; the gate holds every call back",
            start.elapsed().as_secs_f64(),
            after.unwrap_or("none"),
        );
    }
    Err(ApiError::Status { status, headers })
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = reqwest::Client::builder().no_proxy().build()?;
    let gate = Gate::builder(classify)
        .rate(20.0)
        .max_in_flight(4)
        .build()?;

    let api = Server::builder()
        .latency(Duration::from_millis(5))
        .global(Policy::fixed_window(10, SEC).penalty(SEC, 8 * SEC))
        .build();
    let http = serve(api, "127.0.0.1:0").await?;
    let url = http.url(None);
    println!("serving the simulated API at {url}: 10 per second, penalty 1 s doubling up to 8 s");
    println!("{CALLS} calls with reqwest, through a gate paced at 20 per second:");

    let start = Instant::now();
    let results: Vec<_> = futures::stream::iter(0..CALLS)
        .throttled_map(&gate, |n| call(&client, &url, n, start))
        .collect()
        .await;
    let elapsed = start.elapsed();
    let log = http.shutdown().await.log();

    let ok = results.iter().filter(|r| r.is_ok()).count();
    let stats = gate.stats();
    println!(
        "done in {:.2} s: {ok} ok, {} failed (gate: {} attempts, {} throttled, {} retried)",
        elapsed.as_secs_f64(),
        results.len() - ok,
        stats.calls,
        stats.throttles,
        stats.retries,
    );
    for failure in results.iter().filter_map(|r| r.as_ref().err()) {
        println!("  failed: {failure}");
    }
    let mut per_second = Vec::new();
    for request in log.ours().filter(|r| r.is_accepted()) {
        let second = (request.arrived - log.start()).as_secs() as usize;
        per_second.resize(per_second.len().max(second + 1), 0);
        per_second[second] += 1;
    }
    println!(
        "the server saw {} requests: {} accepted, {} over the limit (429), {} inside a penalty, \
         {} sent into a penalty the client knew of",
        log.ours().count(),
        log.accepted(),
        log.rejected(),
        log.in_penalty(),
        log.sent_into_known_penalty(),
    );
    println!("accepted in each of the server's one-second windows: {per_second:?} (limit 10)");
    Ok(())
}
