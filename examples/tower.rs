//! hyper's client as a tower `Service`, with and without paceline's `GateLayer`, against the
//! simulated API served over HTTP.
//!
//! ```sh
//! cargo run --example tower --features tower,http
//! ```
//!
//! The API allows 10 requests in each 1 s window, and answers a 429 with `Retry-After`
//! beyond. Each client sends 60 GETs from 20 tasks, each task with its own clone of the
//! service. The bare client is turned away for most of them. Through the layer, the clones
//! share one gate: with no rate, it honours each Retry-After and retries copies of the
//! throttled requests until all are done; with a rate of 9 per second, none is turned away.
//! It runs in real time, in about 7 s.

use std::time::Duration;

use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::body::{Bytes, Incoming};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use paceline::Gate;
use paceline::tower::{GateLayer, Outcome, classify_responses};
use paceline_sim::{Policy, Server};
use tower::{Service, ServiceBuilder, ServiceExt};

const LIMIT: u32 = 10;
const WINDOW: Duration = Duration::from_secs(1);
const REQUESTS: usize = 60;
const TASKS: usize = 20;

type Gated = Gate<Outcome<Response<Incoming>, hyper_util::client::legacy::Error>>;

/// A gate whose classifier is `paceline::http::rate_limited` (429 and 503, with Retry-After).
fn gate(rate: Option<f64>) -> Gated {
    let builder = Gate::builder(classify_responses(paceline::http::rate_limited)).max_retries(20);
    match rate {
        Some(rate) => builder.rate(rate).build().expect("a valid rate"),
        None => builder.build().expect("valid settings"),
    }
}

/// Sends the GETs from `TASKS` tasks, each with its own clone of `service`, and counts the
/// requests that came back 200.
async fn send_all<S>(service: S, url: String) -> usize
where
    S: Service<Request<Empty<Bytes>>, Response = Response<Incoming>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: std::fmt::Debug + Send,
{
    let per_task = REQUESTS / TASKS;
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (mut service, url) = (service.clone(), url.clone());
            tokio::spawn(async move {
                let mut done = 0;
                for _ in 0..per_task {
                    let request = Request::get(url.as_str()).body(Empty::new()).unwrap();
                    let ready = service.ready().await.expect("the client is ready");
                    match ready.call(request).await {
                        Ok(response) => {
                            done += usize::from(response.status() == StatusCode::OK);
                            // Read the body, so that the connection goes back to the pool.
                            let _ = response.into_body().collect().await;
                        }
                        Err(error) => eprintln!("  a request failed: {error:?}"),
                    }
                }
                done
            })
        })
        .collect();
    let mut done = 0;
    for task in tasks {
        done += task.await.expect("a task ran to its end");
    }
    done
}

/// Serves a fresh API, runs `send_all` with the service `make` builds around a hyper client,
/// and reports the time taken, the requests done, and those the server turned away.
async fn run<S, F>(make: F) -> Result<(Duration, usize, usize), Box<dyn std::error::Error>>
where
    F: FnOnce(Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>) -> S,
    S: Service<Request<Empty<Bytes>>, Response = Response<Incoming>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: std::fmt::Debug + Send,
{
    let api = Server::builder()
        .latency(Duration::from_millis(5))
        .global(Policy::fixed_window(LIMIT, WINDOW))
        .build();
    let http = paceline_sim::http::serve(api, "127.0.0.1:0").await?;
    let client = Client::builder(TokioExecutor::new()).build_http();
    let start = std::time::Instant::now();
    let done = send_all(make(client), http.url(None)).await;
    let elapsed = start.elapsed();
    let log = http.shutdown().await.log();
    Ok((elapsed, done, log.rejected()))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!(
        "{REQUESTS} GETs from {TASKS} tasks (a clone of the service each) by hyper's client, \
         against a limit of {LIMIT} per {WINDOW:?}"
    );
    let (retrying, paced) = (gate(None), gate(Some(9.0)));
    // Side by side, each against its own server.
    let (bare, retried, paced_run) = tokio::join!(
        run(|client| client),
        run(|client| {
            // The one line that puts the client under the gate.
            ServiceBuilder::new()
                .layer(GateLayer::new(retrying.clone()).retry_cloned())
                .service(client)
        }),
        run(|client| {
            ServiceBuilder::new()
                .layer(GateLayer::new(paced.clone()).retry_cloned())
                .service(client)
        }),
    );
    println!(
        "  {:<40} {:>7} {:>5} {:>9}",
        "client", "time s", "done", "rejected"
    );
    let rows = [
        ("bare hyper client", bare?),
        ("GateLayer, Retry-After only", retried?),
        ("GateLayer, rate 9/s", paced_run?),
    ];
    for (who, (elapsed, done, rejected)) in rows {
        let secs = elapsed.as_secs_f64();
        println!("  {who:<40} {secs:>7.2} {done:>5} {rejected:>9}");
    }
    for (who, gate) in [("Retry-After only", &retrying), ("rate 9/s", &paced)] {
        let stats = gate.stats();
        println!(
            "  gate, {who}: {} requests sent, {} throttled, {} retried, {} given up",
            stats.calls, stats.throttles, stats.retries, stats.gave_up
        );
    }
    Ok(())
}
