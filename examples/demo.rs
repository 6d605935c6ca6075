//! Pushes one burst of requests through each combinator and prints when each one lets them go.
//!
//! Runs in tokio's paused clock, so the timeline is exact and the demo takes no real time:
//!
//! ```sh
//! cargo run --example demo
//! ```

use std::time::Duration;

use futures::{Stream, StreamExt, stream};
use paceline::prelude::*;
use tokio::time::{Instant, sleep_until};

const MS: Duration = Duration::from_millis(1);

/// One request, then a trickle around the one-second mark.
const ARRIVALS_MS: [u64; 6] = [0, 900, 950, 1_000, 1_050, 1_100];

/// The server's limit: 3 requests in any window of this length.
const WINDOW: Duration = Duration::from_secs(1);

fn arrivals(start: Instant) -> impl Stream<Item = usize> {
    stream::iter(ARRIVALS_MS.into_iter().enumerate()).then(move |(i, ms)| async move {
        sleep_until(start + Duration::from_millis(ms)).await;
        i
    })
}

/// Prints one row per emission: the instant, and the requests it let go.
async fn show<S: Stream<Item = Vec<usize>>>(title: &str, rule: &str, out: S) {
    let start = Instant::now();
    let rows: Vec<(u128, Vec<usize>)> = out
        .map(|batch| (start.elapsed().as_millis(), batch))
        .collect()
        .await;
    println!("\n{title}  ({rule})");
    for (ms, batch) in &rows {
        let ids: Vec<String> = batch.iter().map(|i| format!("#{i}")).collect();
        println!("  {ms:>6} ms  {}", ids.join(" "));
    }
    let sends: Vec<u128> = rows.iter().map(|(ms, _)| *ms).collect();
    println!(
        "  busiest {} ms window: {} emissions",
        WINDOW.as_millis(),
        busiest_window(&sends)
    );
}

/// The most emissions in any half-open window `[t, t + WINDOW)`; the busiest one starts at an
/// emission, so only those starts need checking.
fn busiest_window(sends: &[u128]) -> usize {
    let len = WINDOW.as_millis();
    sends
        .iter()
        .map(|&t| sends.iter().filter(|&&s| s >= t && s < t + len).count())
        .max()
        .unwrap_or(0)
}

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() {
    let arrivals_ms: Vec<String> = ARRIVALS_MS.iter().map(|ms| ms.to_string()).collect();
    println!("Six requests arrive at (ms): {}", arrivals_ms.join(", "));
    println!("The server allows 3 requests in any 1 s window. Who goes out when?");

    let start = Instant::now();
    show(
        "interval_gate(400 ms, 3)",
        "batches of up to 3, never closer than 400 ms",
        arrivals(start).interval_gate(400 * MS, 3),
    )
    .await;

    let start = Instant::now();
    show(
        "timer_throttle(3, 1 s)",
        "3 vouchers per period of its own timer",
        arrivals(start)
            .timer_throttle(3, 1000 * MS)
            .map(|i| vec![i]),
    )
    .await;

    let start = Instant::now();
    show(
        "window_throttle(3, 1 s)",
        "at most 3 in every 1 s window",
        arrivals(start)
            .window_throttle(3, 1000 * MS)
            .map(|i| vec![i]),
    )
    .await;

    let start = Instant::now();
    show(
        "grouped_within(3, 200 ms)",
        "a batch at 3 items or 200 ms after its first",
        arrivals(start).grouped_within(3, 200 * MS),
    )
    .await;

    println!(
        "\nThe timer throttle keeps 3 per period of its own timer, yet its busiest window holds\n\
         more: a server counting in windows of another phase would throttle it. The window\n\
         throttle never exceeds 3 in any window; the interval gate never sends closer than its\n\
         interval; grouped_within only bounds how long a request waits for company."
    );
}
