//! NestJS's throttler (`@nestjs/throttler`, from the npm registry, pinned in
//! `support/nestjs_throttler/package-lock.json`, which `scripts/test` installs), with two
//! named throttlers: "short", 20 requests per 2 s, and "long", 1000 per 60 s. Each announces
//! itself in a family of `X-RateLimit-*` fields its name ends (`X-RateLimit-Remaining-short`),
//! and a refusal in `Retry-After-short`; none of the unnamed fields is sent. Its hits expire
//! one by one, `ttl` after each (a moving window), while its reset counts down a window of the
//! key's record; a refusal blocks every request for another 2 s. In real time, judged by the
//! server's own log: 200 calls from 16 tasks through the reqwest middleware, by a gate told
//! nothing, reading what the answers announce. About 25 s.

use std::time::Duration;

use crate::flask_limiter::{Seen, gets_through};
use crate::support::limiter_app::LimiterApp;

const LIMIT: u64 = 20;
const WINDOW: Duration = Duration::from_secs(2);
const TASKS: usize = 16;
const CALLS: usize = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nestjs_s_named_throttlers_are_read_by_their_names_and_kept() {
    let gate = paceline::reqwest::gate()
        .max_in_flight(8)
        .max_retries(10)
        .build()
        .unwrap();
    let mut app = LimiterApp::nestjs_throttler();
    let elapsed = gets_through((&gate, true), app.url(), (TASKS, CALLS)).await;
    let seen = Seen::of(elapsed, &app.stop(), (CALLS, WINDOW));
    println!(
        "NestJS throttler, \"short\" {LIMIT} per {WINDOW:?}, {CALLS} calls: {seen:?}; {:?}",
        gate.stats()
    );
    // The limit's own pace: 200 calls at 20 in any 2 s take 18 s and a little; within 1.3
    // times 20 s, by the app's clock, and at most 2 refused, by its log.
    assert!(seen.logged < Duration::from_secs(26), "{seen:?}");
    assert!(seen.refused <= 2, "{seen:?}");
}
