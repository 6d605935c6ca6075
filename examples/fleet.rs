//! A fleet of four worker processes shares one API limit through Redis.
//!
//! The API (the simulated one, served over HTTP on a loopback port) accepts 20 requests per
//! second from everyone together. Each worker is a separate process with its own gate; the
//! gates keep their backoffs and rate budget in one Redis, so the fleet stays within the limit
//! as one client would. Run without arguments, this starts `redis-server` (it must be
//! installed), the API and the workers, and prints what each worker did and what the server
//! saw: first with a fixed fleet rate of 19/s, then with an adaptive rate that starts at
//! 40/s and finds the limit, with one worker's clock 2 s ahead if libfaketime is installed;
//! last, against an API of 40 requests per 4 s that announces its quota on every response,
//! with no rate at all: the workers spend the quota they read, shared through Redis.
//!
//! ```text
//! cargo run --example fleet --features redis,http
//! ```

#[path = "../tests/support/fleet.rs"]
mod fleet;
#[path = "../tests/support/redis_server.rs"]
mod redis_server;

use std::time::Duration;

use futures::StreamExt;
use http::{HeaderMap, StatusCode};
use paceline::prelude::*;
use paceline::{Gate, RedisStore};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--worker") {
        return worker(&args).await;
    }
    let exe = std::env::current_exe()?;
    let fixed = fleet::Fleet {
        workers: 4,
        calls_each: 50,
        pace: fleet::Pace::Fixed(19.0),
        first_clock_ahead: false,
    };
    let run = fleet::run(&exe, &fixed, "fleet-demo-fixed").await;
    fleet::print("Four workers, one fixed budget of 19/s:", &run);
    let adaptive = fleet::Fleet {
        pace: fleet::Pace::Adaptive(40.0),
        calls_each: 300,
        first_clock_ahead: fleet::libfaketime().is_some(),
        ..fixed
    };
    let run = fleet::run(&exe, &adaptive, "fleet-demo-adaptive").await;
    fleet::print(
        "\nFour workers, one adaptive rate starting at 40/s, limit unknown to them:",
        &run,
    );
    let announced = fleet::Fleet {
        pace: fleet::Pace::Announced,
        calls_each: 40,
        ..adaptive
    };
    let run = fleet::run(&exe, &announced, "fleet-demo-announced").await;
    fleet::print(
        "\nFour workers, no rate: they spend the quota the API announces, shared in Redis:",
        &run,
    );
    Ok(())
}

/// The API's answer when it is not a success.
#[derive(Debug)]
enum ApiError {
    Status(StatusCode, HeaderMap),
    Transport(reqwest::Error),
}

/// One worker: its share of the calls, through a gate on the fleet's Redis; prints a report.
async fn worker(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let arg = |name: &str| {
        args.iter()
            .find_map(|arg| arg.strip_prefix(&format!("--{name}=")))
            .map(str::to_owned)
    };
    let need = |name: &str| arg(name).ok_or(format!("--{name}=… is missing"));
    // How far this process's clock is from the coordinator's (ahead under libfaketime).
    let clock_offset_ms = fleet::unix_ms() - need("spawned-at-ms")?.parse::<i64>()?;
    let (id, api, calls) = (need("id")?, need("api")?, need("calls")?.parse::<usize>()?);
    // Four workers, the API and Redis share whatever machine runs this, often a small and
    // busy one: an answer from Redis may take longer there than the store's default 50 ms,
    // and a start it does not answer in time goes on this worker's own state alone.
    let store =
        RedisStore::open(&need("redis")?, &need("namespace")?)?.timeout(Duration::from_millis(500));
    let builder = Gate::builder(|error: &ApiError| match error {
        ApiError::Status(status, headers) => paceline::http::rate_limited_from(*status, headers),
        ApiError::Transport(_) => None,
    })
    .max_in_flight(8)
    .max_retries(10)
    .store(store);
    let builder = match (arg("rate"), arg("adaptive")) {
        (Some(rate), _) => builder.rate(rate.parse()?),
        (None, Some(start)) => {
            let start: f64 = start.parse()?;
            builder.rate(start).adaptive(1.0, start)
        }
        (None, None) => builder,
    };
    let announced = args.iter().any(|arg| arg == "--announced");
    let gate = builder.build()?;
    let client = reqwest::Client::builder().no_proxy().build()?;

    let begun = tokio::time::Instant::now();
    let results: Vec<_> = futures::stream::iter(0..calls)
        .throttled_map(&gate, |_| {
            // Generous: a worker may start beside eleven others and their servers on a
            // loaded machine, and a call that times out fails the run.
            let request = client.get(&api).timeout(Duration::from_secs(30));
            let gate = &gate;
            async move {
                let response = request.send().await.map_err(ApiError::Transport)?;
                match response.status() {
                    status if status.is_success() => {
                        // The quota the API announced goes to the gate, and through its store
                        // to the fleet (a throttle's goes with it through the classifier).
                        if let Some(quota) =
                            paceline::http::quota(response.headers()).filter(|_| announced)
                        {
                            gate.observe(quota);
                        }
                        Ok(())
                    }
                    status => Err(ApiError::Status(status, response.headers().clone())),
                }
            }
        })
        .collect()
        .await;
    for result in &results {
        if let Err(paceline::Error::Call(ApiError::Transport(error))) = result {
            eprintln!("worker {id}: a call failed: {error:?}");
        }
    }
    let stats = gate.stats();
    let gave_up = results
        .iter()
        .filter(|r| matches!(r, Err(e) if e.is_gave_up()))
        .count();
    let done = results.iter().filter(|r| r.is_ok()).count();
    println!(
        "REPORT id={id} done={done} gave_up={gave_up} failed={} throttled={} held_by_fleet={} store_unanswered={} members={} elapsed_ms={} rate={} clock_offset_ms={clock_offset_ms}",
        results.len() - done - gave_up,
        stats.throttles,
        stats.held_by_fleet,
        stats.store_unanswered,
        stats
            .fleet_members
            .map_or("-".to_owned(), |n| n.to_string()),
        begun.elapsed().as_millis(),
        stats
            .rate
            .map_or("-".to_owned(), |rate| format!("{rate:.3}")),
    );
    Ok(())
}
