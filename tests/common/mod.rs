//! Test support shared by the integration tests: arrival schedules and emission recording,
//! in tokio's paused time.
#![allow(dead_code, unreachable_pub)]

pub mod events;

use std::time::Duration;

use futures::{Stream, StreamExt};
use tokio::time::{Instant, sleep_until};

/// A stream whose item `i` becomes ready at `start + arrivals_ms[i]` (offsets must not
/// decrease). Polled late, an item is ready at once. Items are their indices.
pub fn scheduled(start: Instant, arrivals_ms: Vec<u64>) -> impl Stream<Item = usize> + Unpin {
    Box::pin(
        futures::stream::iter(arrivals_ms.into_iter().enumerate()).then(
            move |(i, ms)| async move {
                sleep_until(start + Duration::from_millis(ms)).await;
                i
            },
        ),
    )
}

/// Drives `stream` to its end, pairing each item with the milliseconds since `start` at which
/// it came out.
pub async fn record<S: Stream>(start: Instant, stream: S) -> Vec<(u64, S::Item)> {
    stream.map(|item| (ms_since(start), item)).collect().await
}

/// Whole milliseconds since `start`, exact under the paused clock; panics on a fraction, since
/// every schedule in the tests is in whole milliseconds.
pub fn ms_since(start: Instant) -> u64 {
    let elapsed = start.elapsed();
    assert_eq!(
        elapsed.subsec_nanos() % 1_000_000,
        0,
        "emission at a fraction of a ms: {elapsed:?}"
    );
    elapsed.as_millis() as u64
}

/// Durations no real limit has, which the crate takes as its longest wait.
pub const ABSURD: [Duration; 2] = [Duration::MAX, Duration::from_secs(u64::MAX / 2)];

/// The crate's longest wait, one year, in milliseconds.
pub const LONGEST_WAIT_MS: u64 = 365 * 24 * 60 * 60 * 1000;

/// A current-thread runtime in paused time, for one case of a property test.
pub fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a paused current-thread runtime")
}
