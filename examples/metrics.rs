//! A gate's metrics, as Prometheus would scrape them, while it calls the simulated API over
//! HTTP.
//!
//! A Prometheus recorder (`metrics-exporter-prometheus`, here without its HTTP listener) is
//! installed first; a gate named `ads-api` then makes 80 GETs with reqwest from 20 tasks,
//! starting at 20 calls per second (adaptive), against the simulated API served on a loopback
//! port, which allows 8 per second (a token bucket, burst 4, no Retry-After). The gate's
//! gauges are read from the recorder's text rendering every 100 ms and printed every 2 s, and
//! whenever a backoff is caught; at the end the whole rendering is printed beside
//! `gate.stats()`, whose counters it matches. It runs in real time, in about 12 s.
//!
//! ```sh
//! cargo run --example metrics --features metrics,http
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use paceline::Gate;
use paceline_sim::http::serve;
use paceline_sim::{Policy, Server};
use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use tokio::time::{Instant, sleep};

/// The API's answer when it is not a success.
#[derive(Debug)]
enum ApiError {
    Status(StatusCode, HeaderMap),
    Transport(#[expect(dead_code, reason = "shown through Debug")] reqwest::Error),
}

const CALLS: usize = 80;
const TASKS: usize = 20;

/// The value of `metric` for the gate named `ads-api` in a Prometheus text rendering.
fn value(rendered: &str, metric: &str) -> String {
    let series = format!("{metric}{{gate=\"ads-api\"}} ");
    rendered
        .lines()
        .find_map(|line| line.strip_prefix(&series))
        .unwrap_or("-")
        .to_owned()
}

/// Reads the gate's gauges every 100 ms until the calls are done; prints every 5 s, and
/// every reading that catches a backoff.
async fn watch(prometheus: PrometheusHandle, done: Arc<AtomicUsize>) {
    let start = Instant::now();
    let every = Duration::from_millis(100);
    println!("     t  in flight  queued  backing off  rate/s");
    let mut readings = 0u32;
    while done.load(Ordering::Relaxed) < CALLS {
        sleep(every).await;
        readings += 1;
        let rendered = prometheus.render();
        let backing_off = value(&rendered, "paceline_gate_backing_off");
        if readings % 20 != 0 && backing_off != "1" {
            continue;
        }
        let rate: f64 = value(&rendered, "paceline_gate_rate_per_second")
            .parse()
            .unwrap_or(f64::NAN);
        println!(
            "{:>5.1}s  {:>9}  {:>6}  {backing_off:>11}  {rate:>6.2}",
            start.elapsed().as_secs_f64(),
            value(&rendered, "paceline_gate_in_flight"),
            value(&rendered, "paceline_gate_queued"),
        );
    }
}

#[tokio::main]
async fn main() {
    // The recorder first: a gate takes its handles from the recorder when it is built.
    let prometheus = PrometheusBuilder::new()
        .install_recorder()
        .expect("no other recorder is installed");

    let server = Server::builder()
        .latency(Duration::from_millis(20))
        .global(Policy::token_bucket(8.0, 4).retry_after(false))
        .build();
    let http = serve(server, "127.0.0.1:0").await.expect("a loopback port");
    let (url, client) = (http.url(None), reqwest::Client::new());
    let gate = Gate::builder(|error: &ApiError| match error {
        ApiError::Status(status, headers) => paceline::http::rate_limited_from(*status, headers),
        ApiError::Transport(_) => None,
    })
    .name("ads-api")
    .max_in_flight(TASKS)
    .rate(20.0)
    .adaptive(0.5, 100.0)
    .max_retries(10)
    .build()
    .expect("valid settings");

    let (next, done) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let watcher = tokio::spawn(watch(prometheus.clone(), Arc::clone(&done)));
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (gate, client, url) = (gate.clone(), client.clone(), url.clone());
            let (next, done) = (Arc::clone(&next), Arc::clone(&done));
            tokio::spawn(async move {
                while next.fetch_add(1, Ordering::Relaxed) < CALLS {
                    let get = || async {
                        let response = client.get(&url).send().await;
                        let response = response.map_err(ApiError::Transport)?;
                        match response.status() {
                            status if status.is_success() => Ok(()),
                            status => Err(ApiError::Status(status, response.headers().clone())),
                        }
                    };
                    let _ = gate.call(get).await;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a task panicked");
    }
    watcher.await.expect("the watcher panicked");

    println!("\nWhat a scrape of the recorder returns now:\n");
    let rendered = prometheus.render();
    for line in rendered.lines().filter(|line| !line.is_empty()) {
        println!("  {line}");
    }
    let stats = gate.stats();
    println!(
        "\ngate.stats(): calls {}, successes {}, throttles {}, retries {}, gave up {}, errors {}",
        stats.calls,
        stats.successes,
        stats.throttles,
        stats.retries,
        stats.gave_up,
        stats.other_errors
    );
    for (metric, counted) in [
        ("paceline_gate_calls_total", stats.calls),
        ("paceline_gate_successes_total", stats.successes),
        ("paceline_gate_throttles_total", stats.throttles),
        ("paceline_gate_retries_total", stats.retries),
        ("paceline_gate_gave_up_total", stats.gave_up),
        ("paceline_gate_errors_total", stats.other_errors),
    ] {
        assert_eq!(value(&rendered, metric), counted.to_string(), "{metric}");
    }
    println!("The scrape's counters match gate.stats().");
    let log = http.shutdown().await.log();
    println!(
        "The server saw {} requests: {} accepted, {} throttled.",
        log.requests().len(),
        log.accepted(),
        log.rejected()
    );
    assert_eq!(log.rejected() as u64, stats.throttles);
}
