//! An ad sync against a simulated ad platform, done naively and through a paceline gate.
//!
//! The platform allows 20 requests per second; a request over that starts a 15 s penalty, and
//! every request that arrives during a penalty restarts it at twice its length, up to 15
//! minutes (as Google Ads does). The sync pages through a search for 1,500 campaigns, 100 a
//! page, and updates each campaign's bid, from 60 concurrent workers. Both runs go against
//! identical simulated servers in tokio's paused clock, so the whole comparison takes about a
//! second of real time.
//!
//! ```sh
//! cargo run --example ad_sync
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use paceline::prelude::*;
use paceline::{Gate, Page, RateLimited};
use paceline_sim::{Policy, Rejected, Server};
use tokio::sync::Mutex;
use tokio::time::{Instant, sleep};

const CAMPAIGNS: u32 = 1_500;
const PAGE: u32 = 100;
const WORKERS: usize = 60;
const SEC: Duration = Duration::from_secs(1);

fn platform() -> Server {
    Server::builder()
        .latency(Duration::from_millis(50))
        .global(Policy::fixed_window(20, SEC).penalty(15 * SEC, 900 * SEC))
        .build()
}

/// One page of the campaign search: the request goes to the platform, the rows are made up.
async fn search(server: &Server, offset: u32) -> Result<Page<u32, u32>, Rejected> {
    server.call(None).await?;
    let end = (offset + PAGE).min(CAMPAIGNS);
    Ok(Page {
        rows: (offset..end).collect(),
        next: (end < CAMPAIGNS).then_some(end),
    })
}

/// One bid update.
async fn update_bid(server: &Server, _campaign: u32) -> Result<(), Rejected> {
    server.call(None).await.map(drop)
}

struct Outcome {
    elapsed: Duration,
    updated: usize,
    gave_up: usize,
}

/// The way many codebases start: each worker handles a throttle on its own, waiting what the
/// error says (up to 10 times), while its siblings carry on.
async fn naive(server: Server) -> Outcome {
    async fn retrying<T, F: std::future::Future<Output = Result<T, Rejected>>>(
        mut call: impl FnMut() -> F,
    ) -> Option<T> {
        for attempt in 0..=10 {
            match call().await {
                Ok(value) => return Some(value),
                Err(e) if attempt < 10 => sleep(e.retry_after.unwrap_or(SEC)).await,
                Err(_) => {}
            }
        }
        None
    }

    let start = Instant::now();
    let queue = Arc::new(Mutex::new(Vec::new()));
    let mut gave_up = 0;
    // One task pages through the search, feeding the workers.
    let mut offset = Some(0);
    while let Some(at) = offset {
        match retrying(|| search(&server, at)).await {
            Some(page) => {
                queue.lock().await.extend(page.rows);
                offset = page.next;
            }
            None => {
                gave_up += 1;
                break;
            }
        }
    }
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let (server, queue) = (server.clone(), Arc::clone(&queue));
            tokio::spawn(async move {
                let (mut updated, mut gave_up) = (0, 0);
                loop {
                    let Some(campaign) = queue.lock().await.pop() else {
                        break;
                    };
                    match retrying(|| update_bid(&server, campaign)).await {
                        Some(()) => updated += 1,
                        None => gave_up += 1,
                    }
                }
                (updated, gave_up)
            })
        })
        .collect();
    let mut updated = 0;
    for worker in workers {
        let (u, g) = worker.await.expect("worker panicked");
        updated += u;
        gave_up += g;
    }
    Outcome {
        elapsed: start.elapsed(),
        updated,
        gave_up,
    }
}

/// The same sync through one gate for the platform: the paged search streams campaigns into
/// the bid updates, and every call, page or update, honours one shared backoff and rate.
async fn with_gate(server: Server) -> Outcome {
    let gate = Gate::builder(|e: &Rejected| {
        let throttle = RateLimited::new();
        Some(match e.retry_after {
            Some(after) => throttle.retry_after(after),
            None => throttle,
        })
    })
    .max_in_flight(WORKERS)
    .rate(25.0) // a guess, 25 % over the limit the platform does not publish
    .adaptive(1.0, 100.0)
    .max_retries(10)
    .build()
    .expect("valid settings");

    let start = Instant::now();
    let lost_pages = AtomicUsize::new(0);
    let results: Vec<_> = gate
        .paged(|offset: Option<u32>| {
            let server = server.clone();
            async move { search(&server, offset.unwrap_or(0)).await }
        })
        .filter_map(|row| {
            // A search the gate gave up on ends the listing: count it, don't hide it.
            if row.is_err() {
                lost_pages.fetch_add(1, Ordering::Relaxed);
            }
            futures::future::ready(row.ok())
        })
        .throttled_map_unordered(&gate, |campaign| {
            let server = server.clone();
            async move { update_bid(&server, campaign).await }
        })
        .collect()
        .await;
    let updated = results.iter().filter(|r| r.is_ok()).count();
    let gave_up = results.len() - updated + lost_pages.load(Ordering::Relaxed);
    Outcome {
        elapsed: start.elapsed(),
        updated,
        gave_up,
    }
}

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() {
    let real = std::time::Instant::now();
    let naive_server = platform();
    let naive = naive(naive_server.clone()).await;
    let gate_server = platform();
    let gated = with_gate(gate_server.clone()).await;

    println!(
        "Ad sync: {CAMPAIGNS} campaigns, {} search pages, {WORKERS} workers",
        CAMPAIGNS / PAGE
    );
    println!("Platform: 20 requests/s; over it, a 15 s penalty that doubles (up to 15 min) for");
    println!(
        "every request that arrives during it. Ideal: {:.0} s.\n",
        f64::from(CAMPAIGNS + CAMPAIGNS / PAGE) / 20.0
    );
    println!(
        "{:<22} {:>12} {:>9} {:>8} {:>10} {:>11}",
        "", "virtual time", "updated", "gave up", "throttled", "in penalty"
    );
    for (who, outcome, server) in [
        ("naive (each worker)", &naive, &naive_server),
        ("paceline gate", &gated, &gate_server),
    ] {
        let log = server.log();
        println!(
            "{:<22} {:>10.0} s {:>9} {:>8} {:>10} {:>11}",
            who,
            outcome.elapsed.as_secs_f64(),
            outcome.updated,
            outcome.gave_up,
            log.rejected(),
            log.in_penalty()
        );
    }
    println!(
        "\n(both runs took {:.2} s of real time)",
        real.elapsed().as_secs_f64()
    );
}
