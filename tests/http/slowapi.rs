//! slowapi (FastAPI under uvicorn, from PyPI, pinned in
//! `support/flask_limiter_requirements.txt`, which `scripts/test` installs), 20 requests per
//! 2 s in fixed windows and in a moving one, in real time, judged by the server's own log:
//! 200 calls from 16 tasks through the reqwest middleware, by a gate reading `X-RateLimit-*`.
//! slowapi writes its reset as a Unix time with a fraction (Python's float: seven decimals),
//! one second after the window's (its `_inject_headers` adds 1 to what `limits` says, as
//! Flask-Limiter does before rounding down to whole seconds). About 50 s.

use std::time::Duration;

use crate::flask_limiter::{Seen, gets_through};
use crate::support::limiter_app::LimiterApp;

const LIMIT: u64 = 20;
const WINDOW: Duration = Duration::from_secs(2);
const TASKS: usize = 16;
const CALLS: usize = 200;

async fn through(strategy: &str) -> Seen {
    let gate = paceline::reqwest::gate()
        .max_in_flight(8)
        .max_retries(10)
        .build()
        .unwrap();
    let limit = format!("{LIMIT} per {} seconds", WINDOW.as_secs());
    let mut app = LimiterApp::slowapi(&limit, strategy);
    let elapsed = gets_through((&gate, true), app.url(), (TASKS, CALLS)).await;
    let seen = Seen::of(elapsed, &app.stop(), (CALLS, WINDOW));
    println!("slowapi {strategy}, {LIMIT} per {WINDOW:?}, {CALLS} calls: {seen:?}");
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowapi_s_fixed_and_moving_windows_are_spent_at_their_limit_none_refused() {
    let fixed = through("fixed-window").await;
    let moving = through("moving-window").await;
    for seen in [&fixed, &moving] {
        // Within 1.3 times the limit's own 20 s, by the app's clock.
        assert!(seen.logged < Duration::from_secs(26), "{seen:?}");
        assert_eq!(seen.refused, 0, "{seen:?}");
    }
}
