//! What the integration tests share, as `support` in every binary of `tests/` (each area's
//! `main.rs` declares it with `#[path = "../support/mod.rs"]`, a binary of one file with
//! `mod support;`): arrival schedules, emission recording, proptest's settings and shared
//! strategies here; the `tracing` events a test sent, real servers (Redis, nginx,
//! Flask-Limiter, gRPC), the simulated API's scenarios and their pictures in the modules
//! below. A helper that needs a feature is declared under it.
//!
//! Each binary uses only some of these helpers, hence `dead_code` allowed for all of them.
//! Every binary builds all of them, so a helper's own test (of its log parser, say) sits in
//! the test file that uses the helper, to run once rather than in every binary.
#![allow(dead_code)]

#[cfg(feature = "http")]
pub mod api_error;
pub mod events;
pub mod fleet;
#[cfg(feature = "tonic")]
pub mod grpc;
pub mod limiter_app;
#[cfg(feature = "http")]
pub mod llm;
pub mod nginx;
pub mod pages;
pub mod plot;
pub mod redis_server;
pub mod scenarios;
#[cfg(feature = "redis-tls")]
pub mod tls;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::{Stream, StreamExt};
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};
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

/// The most starts in any window of length `window`, of `starts` in order.
pub fn max_in_window(starts: &[Instant], window: Duration) -> usize {
    (0..starts.len())
        .map(|i| {
            starts[i..]
                .iter()
                .take_while(|&&t| t - starts[i] < window)
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// `config`, keeping the cases that failed in `<test file>.proptest-regressions`, beside the
/// test file, where proptest reads them back. (Its default keeps them apart, in
/// `tests/proptest-regressions/<file>.txt`, when the test file's directory has a `main.rs`,
/// as an area's has.)
pub fn regressions_beside_the_file(config: Config) -> Config {
    Config {
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..config
    }
}

/// Up to `max_len` bytes that a `HeaderValue` can hold: tab, visible ASCII, and obs-text (0x80
/// and up).
pub fn header_bytes(max_len: usize) -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![Just(b'\t'), 0x20u8..=0x7e, 0x80u8..=0xff];
    prop::collection::vec(byte, 0..max_len)
}

/// Headers with these fields, in this order; a name given twice makes two lines.
#[cfg(feature = "http")]
pub fn headers(fields: &[(&str, &str)]) -> http::HeaderMap {
    let mut headers = http::HeaderMap::new();
    for (name, value) in fields {
        headers.append(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            http::HeaderValue::from_str(value).unwrap(),
        );
    }
    headers
}

/// Any wall-clock reading from 1970 to past the year 9999.
pub fn any_now() -> impl Strategy<Value = SystemTime> {
    (0u64..300_000_000_000, 0u32..1_000_000_000)
        .prop_map(|(secs, nanos)| UNIX_EPOCH + Duration::new(secs, nanos))
}
