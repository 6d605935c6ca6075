//! The gate against a real token bucket: nginx's `limit_req` at 10 requests per second with a
//! burst of 2 (so at most 3 at once), `nodelay`, and `Retry-After: 1` on its 429s. Calls go
//! through reqwest and a gate classifying with `paceline::http::rate_limited_from`; nginx's
//! access log, not the gate's counters, says what the server saw.
//!
//! These measure, in real time, what the gate does when a backoff ends against a bucket that
//! holds three: the calls waiting come back gradually, the throttled one first ("resume
//! without a herd", DESIGN.md). The figures they print are in docs/scenarios.md. They assert
//! only what a loaded machine keeps and a broken gate or harness breaks, and the adaptive
//! rate's bar of 1.2 times the ideal time. Each takes 10 to 20 s of real time; they run one
//! at a time, so that neither slows the other's figures.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use paceline::{Gate, GateStats};

use crate::support::api_error::{ApiError, classify, success};
use crate::support::nginx::{self, LATE, Limit, Logged, Nginx, alone, most_sent_within};

/// nginx's limit: 10 r/s, burst 2, `Retry-After: 1`.
const LIMIT: Limit = Limit {
    rate: 10,
    burst: 2,
    retry_after: 1,
};

/// Tasks making calls, and the gate's in-flight limit.
const TASKS: usize = 8;

/// Enough that no call gives up: every call must be done.
const MAX_RETRIES: u32 = 10_000;

/// One GET, stamped with the instant it is sent (the future runs only once the gate has
/// started the call).
async fn fetch(client: &reqwest::Client, url: &str) -> Result<(), ApiError> {
    let response = client
        .get(url)
        .header(nginx::SENT_HEADER, nginx::sent_now())
        .send()
        .await
        .map_err(ApiError::Transport)?;
    let body = success(response)?
        .text()
        .await
        .map_err(ApiError::Transport)?;
    assert_eq!(body, "ok");
    Ok(())
}

/// A measured run: how long `calls` took, what nginx logged, the gate's counters.
struct Run {
    calls: usize,
    elapsed: Duration,
    log: Vec<Logged>,
    stats: GateStats,
}

/// Makes `calls` calls through `gate` from [`TASKS`] tasks against a fresh nginx, checks that
/// every call was done exactly once (by us and by nginx's log), and returns the run.
async fn run(gate: Gate<ApiError>, calls: usize, within: Duration) -> Run {
    let mut nginx = Nginx::start(LIMIT);
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("a reqwest client");
    let url: Arc<str> = nginx.url().into();
    let next = Arc::new(AtomicUsize::new(0));
    let start = tokio::time::Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (gate, client, url, next) =
                (gate.clone(), client.clone(), url.clone(), next.clone());
            tokio::spawn(async move {
                let mut done = Vec::new();
                loop {
                    let call = next.fetch_add(1, Ordering::Relaxed);
                    if call >= calls {
                        return done;
                    }
                    let result = gate.call(|| fetch(&client, &url)).await;
                    done.push((call, result));
                }
            })
        })
        .collect();
    let all = tokio::time::timeout(within, futures::future::join_all(tasks))
        .await
        .unwrap_or_else(|_| panic!("{calls} calls not done within {within:?}"));
    let elapsed = start.elapsed();
    nginx.stop();
    let log = nginx.access_log();

    let mut times_done = vec![0; calls];
    for (call, result) in all
        .into_iter()
        .flat_map(|task| task.expect("no task panicked"))
    {
        assert!(result.is_ok(), "call {call}: {result:?}");
        times_done[call] += 1;
    }
    assert!(times_done.iter().all(|&n| n == 1), "{times_done:?}");
    let stats = gate.stats();
    assert_eq!(stats.gave_up, 0);
    // nginx saw every attempt the gate started, and accepted each call once.
    assert_eq!(log.len() as u64, stats.calls, "{}", nginx.error_log());
    assert_eq!(count(&log, 200), calls, "{log:?}");
    assert_eq!(count(&log, 429) as u64, stats.throttles);
    Run {
        calls,
        elapsed,
        log,
        stats,
    }
}

fn count(log: &[Logged], status: u16) -> usize {
    log.iter().filter(|entry| entry.status == status).count()
}

/// Requests *inside a Retry-After*: those that nginx logged after a 429 (later in its log) and
/// less than the 429's Retry-After after it (by the logged instants, in milliseconds), with
/// any status. A 429 is not inside its own Retry-After. This is the server's view, the one a
/// server that punishes requests inside its cool-down takes: it counts the requests that were
/// already on their way when the 429 went out (the rest of a wave of starts) beside those
/// sent after.
///
/// Returns that count, and how many of them the client sent (by its stamp) [`LATE`] or more
/// after nginx logged the 429: those the gate sent into a backoff it knew of.
fn inside_retry_after(log: &[Logged], retry_after: Duration) -> (usize, usize) {
    let (mut inside, mut late) = (0, 0);
    for (i, entry) in log.iter().enumerate() {
        let window_of = log[..i]
            .iter()
            .filter(|earlier| earlier.status == 429 && entry.at < earlier.at + retry_after)
            .map(|throttle| throttle.at)
            .min();
        if let Some(throttled_at) = window_of {
            inside += 1;
            if entry.sent.is_some_and(|sent| sent >= throttled_at + LATE) {
                late += 1;
            }
        }
    }
    (inside, late)
}

/// Checks the harness: in no stretch of its own log did nginx accept more than its bucket
/// allows, `burst + 1 + rate × t` in `t` (plus a millisecond of slack for t: nginx judges by
/// its monotonic clock and logs by the wall clock, each cut to the millisecond on its own).
fn assert_within_the_bucket(log: &[Logged]) {
    let accepted: Vec<Duration> = log
        .iter()
        .filter(|entry| entry.status == 200)
        .map(|entry| entry.at)
        .collect();
    for (i, &first) in accepted.iter().enumerate() {
        for (j, &last) in accepted.iter().enumerate().skip(i) {
            let t = last.saturating_sub(first) + Duration::from_millis(1);
            let allowed = f64::from(LIMIT.burst + 1) + f64::from(LIMIT.rate) * t.as_secs_f64();
            let n = j - i + 1;
            assert!(
                n as f64 <= allowed,
                "nginx accepted {n} in {t:?} (from request {i}); limit_req is not in force"
            );
        }
    }
}

/// Prints the figures of a run.
fn print(title: &str, run: &Run) {
    let throttled = count(&run.log, 429);
    let retry_after = Duration::from_secs(LIMIT.retry_after.into());
    let (inside, late) = inside_retry_after(&run.log, retry_after);
    let token = Duration::from_secs(1) / LIMIT.rate;
    let wave = most_sent_within(&run.log, token);
    let ideal = run.calls as f64 / f64::from(LIMIT.rate);
    println!("{title}");
    println!(
        "  {} calls in {:.1} s (ideal {ideal:.1} s at {} r/s: {:.2}x)",
        run.calls,
        run.elapsed.as_secs_f64(),
        LIMIT.rate,
        run.elapsed.as_secs_f64() / ideal,
    );
    println!(
        "  nginx: {} requests, {throttled} answered 429 ({:.2} per completed call); \
         {inside} inside a Retry-After ({late} of them sent {LATE:?} or more after the 429)",
        run.log.len(),
        throttled as f64 / run.calls as f64,
    );
    println!(
        "  at most {wave} requests sent within {token:?} (nginx refills one token in that \
         time and holds {})",
        LIMIT.burst + 1,
    );
    println!(
        "  gate: {} attempts, {} throttles, {} retries, {} gave up, rate at the end {:?}",
        run.stats.calls, run.stats.throttles, run.stats.retries, run.stats.gave_up, run.stats.rate,
    );
}

/// No rate, 8 in flight: the gate learns the limit only from 429s. After each backoff the
/// calls come back gradually, the throttled one first, so that a bucket holding three is not
/// met by all eight at once.
#[test]
fn herd_without_a_rate() {
    let calls = 60;
    let gate = Gate::builder(classify)
        .max_in_flight(TASKS)
        .max_retries(MAX_RETRIES)
        .build()
        .unwrap();
    let run = alone(run(gate, calls, Duration::from_secs(45)));
    print(
        &format!(
            "herd: no rate, max_in_flight {TASKS}, {TASKS} tasks, against nginx {} r/s burst {} \
             nodelay, Retry-After {} s",
            LIMIT.rate, LIMIT.burst, LIMIT.retry_after
        ),
        &run,
    );
    assert_within_the_bucket(&run.log);
}

/// An adaptive rate started at twice the limit: it finds the limit from the 429s and comes
/// within 1.2 times the ideal `calls / rate`: 100 calls, ideal 10 s, take some 11.7 s. The
/// first 429 cuts 20/s to 14/s; at 14/s the calls after the Retry-After spend the bucket
/// nginx refilled within a second, and the second 429 cuts to 9.8/s, where the rate stays.
#[test]
fn herd_with_an_adaptive_rate() {
    let calls = 100;
    let gate = Gate::builder(classify)
        .max_in_flight(TASKS)
        .max_retries(MAX_RETRIES)
        .rate(20.0)
        .adaptive(1.0, 100.0)
        .build()
        .unwrap();
    let run = alone(run(gate, calls, Duration::from_secs(45)));
    let ideal = Duration::from_secs_f64(calls as f64 / f64::from(LIMIT.rate));
    print(
        &format!(
            "herd: adaptive rate from 20/s (1..100), max_in_flight {TASKS}, {TASKS} tasks, \
             against nginx {} r/s burst {} nodelay, Retry-After {} s",
            LIMIT.rate, LIMIT.burst, LIMIT.retry_after
        ),
        &run,
    );
    assert_within_the_bucket(&run.log);
    // 1.17 times the ideal in every run here (two 429s, each a 1 s Retry-After); the gate
    // without a rate, at three calls a second, would take 3.3 times.
    assert!(
        run.elapsed <= ideal * 6 / 5,
        "{calls} calls took {:?}, the ideal is {ideal:?}",
        run.elapsed
    );
}

/// The access log as `support/nginx.rs` has nginx write it: its lines parse, and what is not
/// such a line does not (a test of the helper, run where the helper is used).
#[test]
fn nginx_log_lines_parse() {
    let ms = Duration::from_millis;
    assert_eq!(
        nginx::parse_line("1700000000.123 429 - -"),
        Some(Logged {
            at: ms(1_700_000_000_123),
            status: 429,
            sent: None,
            account: None,
        })
    );
    assert_eq!(
        nginx::parse_line("1700000000.123 200 1700000000.122456 -").map(|l| l.sent),
        Some(Some(Duration::new(1_700_000_000, 122_456_000)))
    );
    assert_eq!(
        nginx::parse_line("1700000000.123 503 - a-7").and_then(|l| l.account),
        Some("a-7".to_owned())
    );
    for bad in [
        "",
        "1.5",
        "1.5 200",
        "1.5 200 -",
        "x 200 - -",
        "1.5 200 - - more",
        "1.5 200 - a b",
        "1.5 200 - ",
        "1.5 200 1.x -",
    ] {
        assert_eq!(nginx::parse_line(bad), None, "{bad:?}");
    }
}
