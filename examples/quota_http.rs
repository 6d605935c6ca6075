//! A gate that reads the quota the server announces in each response, over real HTTP.
//!
//! ```sh
//! cargo run --example quota_http --features http
//! ```
//!
//! The simulated API allows 20 requests in each 2 s window and says, on every response, how
//! many are left and when the window resets. It is served three times, side by side: once
//! announcing in the IETF draft's `RateLimit` fields, once in `X-RateLimit-*` (the reset in
//! seconds), and once more in the IETF fields for a gate that reads nothing but Retry-After.
//! Each gate makes 200 calls with reqwest, 20 in flight, with no rate of its own. The two that
//! hand each response's quota to `Gate::observe` are never turned away; the one that does not
//! is, in window after window. It runs in real time, in about 21 s.
//!
//! With `-- --full` it runs at scenario S3's own scale instead: 3,000 calls, 60 in flight,
//! against 100 per 10 s (about 5 minutes).

use std::time::{Duration, SystemTime};

use futures::StreamExt;
use paceline::prelude::*;
use paceline::{Gate, RateLimited};
use paceline_sim::http::{Dialect, Reset, ServeBuilder};
use paceline_sim::{Policy, Server};
use reqwest::StatusCode;
use reqwest::header::HeaderMap;

/// How large a run is: the server's window and the gate's calls.
#[derive(Debug, Clone, Copy)]
struct Scale {
    limit: u32,
    window: Duration,
    calls: u32,
    in_flight: usize,
}

/// The default: about 21 s.
const SHORT: Scale = Scale {
    limit: 20,
    window: Duration::from_secs(2),
    calls: 200,
    in_flight: 20,
};

/// Scenario S3's scale (`--full`): about 5 minutes.
const FULL: Scale = Scale {
    limit: 100,
    window: Duration::from_secs(10),
    calls: 3000,
    in_flight: 60,
};

/// Why a call failed: the server answered with an error status, or did not answer.
#[derive(Debug)]
enum ApiError {
    Status {
        status: StatusCode,
        headers: HeaderMap,
    },
    Transport(#[expect(dead_code, reason = "shown through Debug")] reqwest::Error),
}

/// 429 and 503 are throttles, with their Retry-After and the quota they announce.
fn classify(error: &ApiError) -> Option<RateLimited> {
    match error {
        ApiError::Status { status, headers } => paceline::http::rate_limited_from(*status, headers),
        ApiError::Transport(_) => None,
    }
}

/// The same, blind to the quota: Retry-After only.
fn classify_blind(error: &ApiError) -> Option<RateLimited> {
    let ApiError::Status { status, headers } = error else {
        return None;
    };
    let after = paceline::http::retry_after(headers, SystemTime::now());
    paceline::http::is_rate_limit_status(*status)
        .then(|| after.map_or_else(RateLimited::new, |a| RateLimited::new().retry_after(a)))
}

/// One GET. With a `reader`, the quota its answer announces goes to the gate, here inside the
/// call, where the gate knows which calls are still in flight beside this one.
async fn call(
    client: &reqwest::Client,
    url: &str,
    reader: Option<&Gate<ApiError>>,
) -> Result<(), ApiError> {
    let response = client.get(url).send().await.map_err(ApiError::Transport)?;
    let (status, headers) = (response.status(), response.headers());
    if !status.is_success() {
        let headers = headers.clone();
        return Err(ApiError::Status { status, headers });
    }
    if let (Some(gate), Some(quota)) = (reader, paceline::http::quota(headers)) {
        gate.observe(quota);
    }
    // Read the body, so that the connection goes back to reqwest's pool.
    response.bytes().await.map_err(ApiError::Transport)?;
    Ok(())
}

/// Serves a fresh API in `dialect` and makes the calls through a gate that reads the
/// announced quota if `read`. Returns the time from the server's start until all were done,
/// the calls done, and the requests the server rejected.
async fn run(
    scale: Scale,
    dialect: Dialect,
    read: bool,
) -> Result<(Duration, usize, usize), Box<dyn std::error::Error>> {
    let api = Server::builder()
        .latency(Duration::from_millis(5))
        .global(Policy::fixed_window(scale.limit, scale.window).announce_quota(true))
        .build();
    let start = api.start();
    let http = ServeBuilder::new()
        .dialect(dialect)
        .serve(api, "127.0.0.1:0")
        .await?;
    let client = reqwest::Client::builder().no_proxy().build()?;
    let url = http.url(None);

    let classify: fn(&ApiError) -> Option<RateLimited> =
        if read { classify } else { classify_blind };
    let gate = Gate::builder(classify)
        .max_in_flight(scale.in_flight)
        .max_retries(10)
        .build()?;
    let reader = read.then_some(&gate);
    let done = futures::stream::iter(0..scale.calls)
        .throttled_map_unordered(&gate, |_| call(&client, &url, reader))
        .filter(|result| std::future::ready(result.is_ok()))
        .count()
        .await;
    let elapsed = start.elapsed();
    let log = http.shutdown().await.log();
    Ok((elapsed, done, log.rejected()))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The limit as a rate: 200 calls at 20 per 2 s take 20 s; 3,000 at 100 per 10 s, 300 s.
    let scale = match std::env::args().nth(1).as_deref() {
        Some("--full") => FULL,
        None => SHORT,
        Some(other) => return Err(format!("unknown argument {other:?} (only --full)").into()),
    };
    let Scale {
        limit,
        window,
        calls,
        in_flight,
    } = scale;
    let ideal = window.as_secs_f64() * f64::from(calls / limit);
    println!(
        "{calls} calls by reqwest through a gate ({in_flight} in flight, no rate), against a \
         window of {limit} per {window:?} announced on every response; ideal {ideal:.0} s"
    );
    let x_rate_limit = Dialect::XRateLimit {
        reset: Reset::Delta,
    };
    let runs = [
        ("reads IETF RateLimit", Dialect::Ietf, true),
        ("reads X-RateLimit-*, seconds", x_rate_limit, true),
        ("reads nothing", Dialect::Ietf, false),
    ];
    // Side by side, each against its own server.
    let results =
        futures::future::join_all(runs.map(|(_, dialect, read)| run(scale, dialect, read))).await;
    println!(
        "  {:<30} {:>7} {:>8} {:>5} {:>9}",
        "gate", "time s", "x ideal", "done", "rejected"
    );
    for ((who, ..), result) in runs.iter().zip(results) {
        let (elapsed, done, rejected) = result?;
        let secs = elapsed.as_secs_f64();
        println!(
            "  {who:<30} {secs:>7.2} {:>8.3} {done:>5} {rejected:>9}",
            secs / ideal
        );
    }
    Ok(())
}
