//! express-rate-limit (from the npm registry, started under `node` as `support/limiter_app.rs`
//! says), two limiters one behind the other, each announcing itself as a named policy of the
//! IETF draft's eighth revision: "burst", 10 per 2 s, and "sustained", 40 per 20 s, in fixed
//! windows. In real time, judged by the app's own log: 60 calls from 8 tasks, by a gate that
//! reads only the tightest policy (`http::quota`, as the gate read quotas before it read
//! several) and by the reqwest middleware, which reads every policy apart. About 60 s.
//!
//! Measured: the tightest policy alone, 30.8 s and 1 request refused (61 sent); every policy,
//! 30.3 s and none. Reading the tightest at each answer is nearly as good here, as it follows
//! whichever binds; the test holds the middleware to both limits, and to the time they allow
//! (when a gate learnt the two fixed windows as one moving window, 10 in any 22 s, it took
//! 82 s in two runs of nine).

use std::time::Duration;

use paceline::http::quota;
use paceline::{Gate, RateLimited};

use crate::flask_limiter::{Seen, gets_through};
use crate::support::limiter_app::LimiterApp;
use crate::support::scenarios::run_tasks;

const TASKS: usize = 8;
const CALLS: usize = 60;

/// The app's shorter window, for the most it accepted in one.
const BURST: Duration = Duration::from_secs(2);

fn seen(elapsed: Duration, app: &mut LimiterApp) -> Seen {
    Seen::of(elapsed, &app.stop(), (CALLS, BURST))
}

/// A throttle as a plain client sees it: the status was 429, after so many seconds.
#[derive(Debug)]
struct TooMany(Option<u64>);

async fn tightest_only() -> Seen {
    let mut app = LimiterApp::express_rate_limit();
    let gate = Gate::builder(|e: &TooMany| {
        let limited = RateLimited::new();
        Some(match e.0 {
            Some(after) => limited.retry_after(Duration::from_secs(after)),
            None => limited,
        })
    })
    .max_in_flight(TASKS)
    .max_retries(20)
    .build()
    .unwrap();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let url = app.url();
    let run = run_tasks(TASKS, CALLS, move || {
        let (gate, http, url) = (gate.clone(), http.clone(), url.clone());
        async move {
            let call = || async {
                let answer = http.get(&url).send().await.expect("the app answers");
                // The tightest policy alone, as a gate that reads one quota does.
                if let Some(quota) = quota(answer.headers()) {
                    gate.observe(quota);
                }
                if answer.status() == 429 {
                    let after = answer.headers().get("retry-after");
                    let after = after.and_then(|a| a.to_str().ok()?.parse().ok());
                    return Err(TooMany(after));
                }
                Ok(())
            };
            gate.call(call).await.is_ok()
        }
    });
    let (elapsed, done, _) = run.await;
    assert_eq!(done, CALLS);
    seen(elapsed, &mut app)
}

async fn every_policy() -> Seen {
    let mut app = LimiterApp::express_rate_limit();
    let gate = paceline::reqwest::gate()
        .max_in_flight(TASKS)
        .max_retries(20)
        .build()
        .unwrap();
    let elapsed = gets_through((&gate, true), app.url(), (TASKS, CALLS)).await;
    seen(elapsed, &mut app)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn express_rate_limit_s_two_policies_are_both_kept() {
    let tightest = tightest_only().await;
    let every = every_policy().await;
    println!("express-rate-limit, burst 10 per 2 s and sustained 40 per 20 s, {CALLS} calls:");
    println!("  reading the tightest policy: {tightest:?}");
    println!("  reading every policy:        {every:?}");
    assert!(every.refused <= 2, "{every:?}");
    assert!(every.most_in_a_window <= 11, "{every:?}");
    assert!(every.requests <= CALLS + 2, "{every:?}");
    // 60 calls at 40 per 20 s: the second window's 20, from 20 s on.
    assert!(every.elapsed < Duration::from_secs(40), "{every:?}");
}
