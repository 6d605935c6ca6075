//! Flask-Limiter's sliding-window counter (from PyPI, as `flask_limiter.rs` starts it; the
//! `limits` library's `sliding-window-counter`): 20 requests per 2 s, counted as the current
//! window's requests plus the previous window's weighted by how much of it the last 2 s
//! still overlap. In real time, judged by the server's own log: 200 calls from 16 tasks
//! through the reqwest middleware, by a gate reading `X-RateLimit-*` (which say neither the
//! window's kind nor its length). Flask-Limiter announces the weighted count's room,
//! `X-RateLimit-Remaining` (the limit less the weighted count, rounded down), and as its
//! reset the Unix time, in whole seconds, of one second after the next unit comes back
//! (`limits`' `get_window_stats`: when the previous window's weight next falls by a
//! request, or the current window's end if sooner), rounded down. About 25 s.

use std::time::Duration;

use crate::flask_limiter::{Seen, gets_through};
use crate::support::limiter_app::LimiterApp;

const LIMIT: u64 = 20;
const WINDOW: Duration = Duration::from_secs(2);
const TASKS: usize = 16;
const CALLS: usize = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flask_limiter_s_sliding_window_counter_is_spent_with_few_refusals() {
    let gate = paceline::reqwest::gate()
        .max_in_flight(8)
        .max_retries(10)
        .build()
        .unwrap();
    let mut flask = LimiterApp::start_with(
        &format!("{LIMIT} per {} seconds", WINDOW.as_secs()),
        "sliding-window-counter",
    );
    let elapsed = gets_through((&gate, true), flask.url(), (TASKS, CALLS)).await;
    let log = flask.stop();
    let seen = Seen::of(elapsed, &log, (CALLS, WINDOW));
    println!(
        "Flask-Limiter sliding-window counter, {LIMIT} per {WINDOW:?}, {CALLS} calls: {seen:?}; {:?}",
        gate.stats()
    );
    // The limit's own pace: 200 calls at 20 per 2 s take 20 s; within 1.3 times that, by
    // the app's clock, and at most 2 refused, by its log. Measured (see docs/scenarios.md):
    // 20.7 and 21.3 s, none refused (22.0 to 22.4 s with each call counted from its start). Read as a fixed window (until the answers showed it
    // does not come back whole at its resets), 29.1 s; learnt as a moving window spent in
    // bursts, 25 to 31 s and 5 refused.
    assert!(seen.logged < Duration::from_secs(26), "{seen:?}");
    assert!(seen.refused <= 2, "{seen:?}");
}
