//! The served sim's quota fields, through reqwest, in real time (see `http`'s module docs).
#![cfg(feature = "http")]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use paceline_sim::http::{Dialect, HttpServer, Reset, ServeBuilder, serve};
use paceline_sim::{Policy, Server};
use reqwest::header::HeaderMap;

const MINUTE: Duration = Duration::from_secs(60);

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("a reqwest client")
}

/// Sends one call; returns its status and the named fields' values (`None` when absent).
async fn call(url: &str, names: &[&str]) -> (u16, Vec<Option<String>>) {
    let response = client().get(url).send().await.expect("an answer");
    let headers: &HeaderMap = response.headers();
    let values = names
        .iter()
        .map(|name| {
            let value = headers.get(*name)?;
            Some(value.to_str().expect("visible ASCII").to_owned())
        })
        .collect();
    (response.status().as_u16(), values)
}

/// The seconds, rounded up, from the arrival of our request `number` to the end of the first
/// minute-long window: what its answer announces as the reset.
fn reset_of(http: &HttpServer, number: u64) -> u64 {
    let log = http.server().log();
    let request = log.ours().find(|r| r.number == Some(number)).unwrap();
    let left = MINUTE - (request.arrived - log.start());
    left.as_secs() + u64::from(left.subsec_nanos() > 0)
}

fn some(values: &[&str]) -> Vec<Option<String>> {
    values.iter().map(|v| Some((*v).to_owned())).collect()
}

/// Windows of a minute, so that the whole test runs inside one window however slow the
/// machine: `remaining` counts down exactly, and each reset is read from the log.
#[tokio::test]
async fn serve_writes_the_ietf_fields_on_200_and_429_with_one_member_per_policy() {
    let api = Server::builder()
        .latency(Duration::from_millis(1))
        .global(Policy::fixed_window(10, MINUTE).announce_quota(true))
        .per_scope(Policy::fixed_window(2, MINUTE).announce_quota(true))
        .build();
    let http = serve(api, "127.0.0.1:0").await.unwrap();
    let names = ["ratelimit-policy", "ratelimit", "retry-after"];
    let policy = r#""global";q=10;w=60, "scope";q=2;w=60"#;

    let global_only = call(&http.url(None), &names).await;
    let t = reset_of(&http, 0);
    assert!((59..=60).contains(&t));
    let expected = [r#""global";q=10;w=60"#, &format!(r#""global";r=9;t={t}"#)];
    assert_eq!(global_only, (200, [some(&expected), vec![None]].concat()));

    let first = call(&http.url(Some("a")), &names).await;
    let t = reset_of(&http, 1);
    let expected = [policy, &format!(r#""global";r=8;t={t}, "scope";r=1;t={t}"#)];
    assert_eq!(first, (200, [some(&expected), vec![None]].concat()));

    call(&http.url(Some("a")), &names).await;
    // The scope's limit rejects the third: it counts against neither policy.
    let throttled = call(&http.url(Some("a")), &names).await;
    let t = reset_of(&http, 3);
    let state = format!(r#""global";r=7;t={t}, "scope";r=0;t={t}"#);
    assert_eq!(throttled, (429, some(&[policy, &state, &t.to_string()])));
}

#[tokio::test]
async fn the_builder_chooses_the_dialect_and_epoch_resets_count_from_the_wall_clock() {
    let api = Server::builder()
        .latency(Duration::from_millis(1))
        .global(Policy::fixed_window(1, MINUTE).announce_quota(true))
        .build();
    let epoch = Dialect::XRateLimit {
        reset: Reset::Epoch,
    };
    let http = ServeBuilder::new()
        .dialect(epoch)
        .serve(api, "127.0.0.1:0")
        .await
        .unwrap();
    let names = [
        "x-ratelimit-limit",
        "x-ratelimit-remaining",
        "x-ratelimit-reset",
        "ratelimit",
    ];
    let unix = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap().as_secs();
    let before = unix(SystemTime::now());
    let (status, accepted) = call(&http.url(None), &names).await;
    let (throttled_status, throttled) = call(&http.url(None), &names).await;
    let after = unix(SystemTime::now());
    assert_eq!((status, throttled_status), (200, 429));
    for values in [&accepted, &throttled] {
        assert_eq!(values[..2], some(&["1", "0"])[..]);
        assert_eq!(values[3], None, "only the chosen dialect is written");
        let reset: u64 = values[2].as_deref().unwrap().parse().unwrap();
        // Within a minute of the window's start, rounded up: never before `before + 60`.
        assert!(
            (before + 59..=after + 61).contains(&reset),
            "{before} {reset} {after}"
        );
    }
}

#[tokio::test]
async fn a_policy_that_does_not_announce_sends_no_fields() {
    let api = Server::builder()
        .latency(Duration::from_millis(1))
        .global(Policy::fixed_window(1, MINUTE))
        .build();
    let http = ServeBuilder::new()
        .dialect(Dialect::RateLimit)
        .serve(api, "127.0.0.1:0")
        .await
        .unwrap();
    let names = [
        "ratelimit-limit",
        "ratelimit-remaining",
        "ratelimit-reset",
        "ratelimit",
    ];
    assert_eq!(call(&http.url(None), &names).await, (200, vec![None; 4]));
    assert_eq!(call(&http.url(None), &names).await, (429, vec![None; 4]));
}

#[tokio::test]
async fn the_older_fields_carry_the_tightest_policy() {
    let api = Server::builder()
        .latency(Duration::from_millis(1))
        .global(Policy::fixed_window(10, MINUTE).announce_quota(true))
        .per_scope(Policy::fixed_window(3, MINUTE).announce_quota(true))
        .build();
    let http = ServeBuilder::new()
        .dialect(Dialect::RateLimit)
        .serve(api, "127.0.0.1:0")
        .await
        .unwrap();
    let names = ["ratelimit-limit", "ratelimit-remaining", "ratelimit-reset"];
    let scoped = call(&http.url(Some("a")), &names).await;
    let t = reset_of(&http, 0).to_string();
    assert_eq!(scoped, (200, some(&["3", "2", &t])));
    call(&http.url(Some("b")), &names).await;
    let unscoped = call(&http.url(None), &names).await;
    let t = reset_of(&http, 2).to_string();
    assert_eq!(unscoped, (200, some(&["10", "7", &t])));
}
