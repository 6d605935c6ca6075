//! A whole reqwest client paced by one line: `.with(GateMiddleware::new(gate))`, against the
//! simulated API served on a local port.
//!
//! ```sh
//! cargo run --example reqwest_middleware --features reqwest-middleware
//! ```
//!
//! The server allows 10 requests per second, in fixed windows, and says on every answer how
//! many are left (the IETF draft's `RateLimit` fields); a request over the limit is turned
//! away with a 429 and starts a penalty of 1 s, doubled for every request that arrives inside
//! it, up to 8 s. Two clients each send 40 requests, 8 at a time:
//!
//! - a plain reqwest client, which takes each 429 as the answer;
//! - the same client with `reqwest-retry` (for transient errors) and, inside it, the gate's
//!   middleware, which reads the announced quota and holds requests back until the server
//!   has room.
//!
//! It runs in real time, in about five seconds.

use std::time::Duration;

use futures::StreamExt;
use paceline::reqwest::GateMiddleware;
use paceline_sim::http::serve;
use paceline_sim::{Log, Policy, Server};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use reqwest_retry::RetryTransientMiddleware;
use reqwest_retry::policies::ExponentialBackoff;
use tokio::time::Instant;

const SEC: Duration = Duration::from_secs(1);
const REQUESTS: usize = 40;

/// Sends `REQUESTS` GETs, 8 at a time, to a fresh simulated API; returns how many came back
/// `200`, the time taken and what the server saw.
async fn run(
    client: &ClientWithMiddleware,
) -> Result<(usize, Duration, Log), Box<dyn std::error::Error>> {
    let api = Server::builder()
        .latency(Duration::from_millis(5))
        .global(
            Policy::fixed_window(10, SEC)
                .penalty(SEC, 8 * SEC)
                .announce_quota(true),
        )
        .build();
    let http = serve(api, "127.0.0.1:0").await?;
    let url = http.url(None);
    let start = Instant::now();
    let ok = futures::stream::iter(0..REQUESTS)
        .map(|_| async {
            let answer = client.get(&url).send().await;
            answer.is_ok_and(|answer| answer.status().is_success())
        })
        .buffer_unordered(8)
        .filter(|ok| std::future::ready(*ok))
        .count()
        .await;
    let elapsed = start.elapsed();
    Ok((ok, elapsed, http.shutdown().await.log()))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let reqwest = reqwest::Client::builder().no_proxy().build()?;

    let plain = ClientBuilder::new(reqwest.clone()).build();

    let gate = paceline::reqwest::gate().max_in_flight(8).build()?;
    let retry = ExponentialBackoff::builder().build_with_max_retries(3);
    let paced = ClientBuilder::new(reqwest)
        .with(RetryTransientMiddleware::new_with_policy(retry)) // outer: transient errors
        .with(GateMiddleware::new(gate.clone())) // inner: every request sent is paced
        .build();

    println!(
        "{REQUESTS} requests, 8 at a time, to a server that allows 10 per second \
         (a request over it: a penalty of 1 s, doubling up to 8 s)"
    );
    println!(
        "  {:<40} {:>5} {:>7} {:>9} {:>11}",
        "client", "200", "time s", "rejected", "in penalty"
    );
    for (who, client) in [
        ("plain reqwest", &plain),
        ("reqwest-retry, then GateMiddleware", &paced),
    ] {
        let (ok, elapsed, log) = run(client).await?;
        println!(
            "  {who:<40} {ok:>5} {:>7.2} {:>9} {:>11}",
            elapsed.as_secs_f64(),
            log.rejected(),
            log.in_penalty(),
        );
    }
    let stats = gate.stats();
    println!(
        "the gate: {} requests sent, {} throttled, {} retried, {} given up",
        stats.calls, stats.throttles, stats.retries, stats.gave_up
    );
    Ok(())
}
