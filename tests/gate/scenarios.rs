//! The gate against the simulated API: S1, S1b and S2 of the gate's issue, each beside its
//! baseline on an identical server, and S3, a server that announces its quota, in paused time.

use std::time::Duration;

use crate::support::pages::{README, SCENARIOS_MD, grouped, shown};
use crate::support::scenarios::*;

/// A run's time as the pages write it: seconds to a tenth.
fn secs(r: &Report) -> String {
    format!("{:.1} s", figures(r).0)
}

#[tokio::test(start_paused = true)]
async fn s1_finds_an_unknown_token_bucket_limit() {
    let [gate, alone] = s1().await;
    print(
        "S1: token bucket 4/s burst 4, no Retry-After, 1000 calls, 50 tasks",
        250 * SEC,
        &[gate.clone(), alone.clone()],
    );
    // docs/scenarios.md's table, exactly (the simulation repeats itself).
    assert_eq!(figures(&gate), (249.5, 1000, 0, 22, 0));
    assert_eq!(figures(&alone), (126.2, 501, 499, 6790, 0));
    let (gave_up, throttled) = (
        grouped(alone.gave_up as u64),
        grouped(alone.throttled as u64),
    );
    shown(
        SCENARIOS_MD,
        &format!(
            "| {}, {} throttled | each task alone with exp. backoff: {gave_up} calls given up, \
             {throttled} throttled |",
            secs(&gate),
            gate.throttled
        ),
    );
    shown(
        SCENARIOS_MD,
        &format!("({} rejections in 250 s)", gate.throttled),
    );
    shown(
        README,
        &format!(
            "takes {} (ideal: 250 s) with {} throttles; tasks retrying alone gave up {gave_up} \
             calls after {throttled} throttles.",
            secs(&gate),
            gate.throttled
        ),
    );
    // What must hold whatever the figures: within 10 % of the ideal, few throttles.
    assert_eq!(gate.done, 1000);
    assert!(
        gate.elapsed <= Duration::from_secs(275),
        "took {:?}",
        gate.elapsed
    );
    assert!(
        gate.throttled <= 50,
        "{} throttled responses",
        gate.throttled
    );
}

#[tokio::test(start_paused = true)]
async fn s1b_follows_the_limit_down_and_back_up() {
    let [gate, alone] = s1b().await;
    let ideal = s1b_ideal(1000);
    print(
        "S1b: as S1, limit 2/s from 100 s to 200 s",
        ideal,
        &[gate.clone(), alone.clone()],
    );
    assert_eq!(figures(&gate), (310.5, 1000, 0, 25, 0));
    assert_eq!(figures(&alone), (136.0, 470, 530, 7108, 0));
    shown(
        SCENARIOS_MD,
        &format!(
            "| {}, {} throttled | {} given up, {} throttled |",
            secs(&gate),
            gate.throttled,
            grouped(alone.gave_up as u64),
            grouped(alone.throttled as u64)
        ),
    );
    assert_eq!(gate.done, 1000);
    assert!(
        gate.elapsed.as_secs_f64() <= 1.10 * ideal.as_secs_f64(),
        "took {:?}",
        gate.elapsed
    );
    assert!(
        gate.throttled <= 50,
        "{} throttled responses",
        gate.throttled
    );
}

#[tokio::test(start_paused = true)]
async fn s2_learns_from_the_first_penalty() {
    let [gate, alone] = s2().await;
    print(
        "S2: 20/s, escalating penalty 15 s .. 15 min, 3000 calls, 60 tasks",
        150 * SEC,
        &[gate.clone(), alone.clone()],
    );
    assert_eq!(figures(&gate), (230.9, 3000, 0, 3, 2));
    assert_eq!(figures(&alone), (450055.0, 20, 2980, 32780, 32779));
    let alone_took = format!("{} s", grouped(alone.elapsed.as_secs_f64().round() as u64));
    shown(
        SCENARIOS_MD,
        &format!(
            "| {}, {} throttled, {} in a penalty (already on the wire), none sent into a known \
             one | each task honouring its Retry-After: {alone_took}, {} given up, {} in a \
             penalty |",
            secs(&gate),
            gate.throttled,
            gate.in_penalty,
            grouped(alone.gave_up as u64),
            grouped(alone.in_penalty as u64)
        ),
    );
    shown(
        README,
        &format!(
            "take {alone_took} for what the gate does in {}.",
            secs(&gate)
        ),
    );
    assert_eq!(gate.done, 3000);
    assert_eq!(
        gate.sent_into_known_penalty, 0,
        "a request was sent into a penalty the gate knew of"
    );
    assert!(
        gate.elapsed <= Duration::from_secs(375),
        "took {:?}",
        gate.elapsed
    );
    assert!(
        alone.elapsed.as_secs_f64() >= 3.0 * gate.elapsed.as_secs_f64(),
        "only {:?} vs {:?}",
        gate.elapsed,
        alone.elapsed
    );
    assert!(
        alone.in_penalty >= 10 * gate.in_penalty.max(1),
        "{} vs {} in penalty",
        gate.in_penalty,
        alone.in_penalty
    );
}

mod shared_and_scoped {
    use futures::{StreamExt, stream};
    use paceline::Gate;
    use paceline::prelude::*;
    use paceline_sim::{Policy, Server};
    use tokio::time::{Instant, sleep, sleep_until};

    use crate::support::scenarios::{MS, SEC, classify};

    #[tokio::test(start_paused = true)]
    async fn s3_a_second_stream_honours_the_backoff_the_first_caused() {
        let server = Server::builder()
            .latency(50 * MS)
            .global(Policy::fixed_window(5, SEC).penalty(2 * SEC, 60 * SEC))
            .build();
        let gate = Gate::builder(classify)
            .max_in_flight(3)
            .max_retries(10)
            .build()
            .unwrap();
        let first = stream::iter(0..20)
            .throttled_map(&gate, |_| server.call(None))
            .collect::<Vec<_>>();
        let second = async {
            sleep(300 * MS).await;
            stream::iter(0..20)
                .throttled_map(&gate, |_| server.call(None))
                .collect::<Vec<_>>()
                .await
        };
        let (first, second) = futures::join!(first, second);
        assert!(first.iter().chain(&second).all(Result::is_ok));
        let log = server.log();
        assert!(log.rejected() > 0, "the scenario must provoke a throttle");
        assert_eq!(
            log.sent_into_known_penalty(),
            0,
            "a stream sent into a backoff the gate knew of"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn s4_a_throttle_scoped_to_one_account_does_not_hold_back_another() {
        let server = Server::builder()
            .latency(50 * MS)
            .per_scope(Policy::fixed_window(3, SEC).penalty(30 * SEC, 600 * SEC))
            .build();
        let gate = Gate::builder(classify)
            .max_in_flight(4)
            .max_retries(10)
            .build()
            .unwrap();
        let start = Instant::now();
        // Account A gets 8 updates at once (over its 3 a second); B gets one a second.
        let a = stream::iter(0..8)
            .throttled_map(&gate, |_| server.call(Some("A")))
            .scoped(|_: &i32| ["A"]);
        let b = stream::iter(0..8)
            .then(|i| async move {
                sleep_until(start + i * SEC).await;
                i
            })
            .throttled_map(&gate, |_| server.call(Some("B")))
            .scoped(|_: &u32| ["B"]);
        let a_done = async {
            let results: Vec<_> = a.collect().await;
            (results, start.elapsed())
        };
        let b_done = async {
            let results: Vec<_> = b.collect().await;
            (results, start.elapsed())
        };
        let ((a, a_at), (b, b_at)) = futures::join!(a_done, b_done);
        assert!(a.iter().chain(&b).all(Result::is_ok));
        assert!(a_at >= 30 * SEC, "A waited out its penalty ({a_at:?})");
        assert!(
            b_at < 9 * SEC,
            "B was not held back by A's penalty ({b_at:?})"
        );
        let log = server.log();
        assert_eq!(log.in_scope(Some("B")).rejected(), 0);
        assert_eq!(log.sent_into_known_penalty(), 0);
    }
}

#[cfg(feature = "http")]
#[tokio::test(start_paused = true)]
async fn s3_paces_from_the_announced_quota_and_is_never_throttled() {
    let reports = s3().await;
    // 3000 calls at 100 per 10 s.
    let ideal = 300 * SEC;
    print(
        "S3: fixed window 100 per 10 s, announced on every answer, 3000 calls, 60 tasks",
        ideal,
        &reports,
    );
    let [ietf, x_delta, x_unix, not_reading] = reports;
    // docs/scenarios.md's table, exactly (the simulation repeats itself).
    assert_eq!(figures(&ietf), (302.9, 3000, 0, 0, 0));
    assert_eq!(figures(&x_delta), (302.9, 3000, 0, 0, 0));
    assert_eq!(figures(&x_unix), (319.1, 3000, 0, 0, 0));
    assert_eq!(figures(&not_reading), (301.5, 3000, 0, 39, 0));
    shown(
        SCENARIOS_MD,
        &format!(
            "IETF `RateLimit`: {}, {} throttled; `X-RateLimit-*`, reset in seconds: {}, {} \
             throttled; reset as a Unix time: {}, {} throttled | the same gate reading nothing: \
             {}, {} throttled |",
            secs(&ietf),
            ietf.throttled,
            secs(&x_delta),
            x_delta.throttled,
            secs(&x_unix),
            x_unix.throttled,
            secs(&not_reading),
            not_reading.throttled
        ),
    );
    let times_ideal = |r: &Report| r.elapsed.as_secs_f64() / ideal.as_secs_f64();
    shown(
        SCENARIOS_MD,
        &format!(
            "which costs {:.2}× the ideal where a reset in seconds costs {:.2}×.",
            times_ideal(&x_unix),
            times_ideal(&x_delta)
        ),
    );
    shown(
        README,
        &format!(
            "takes {} for an ideal 300 s; the same gate reading nothing is throttled {} times.",
            secs(&ietf),
            not_reading.throttled
        ),
    );
    // What must hold whatever the figures: reading the quota, never throttled and within 5 %
    // of the ideal (in whole seconds; a reset as a Unix time, within 10 %).
    for read in [&ietf, &x_delta, &x_unix] {
        assert_eq!((read.done, read.throttled), (3000, 0), "{}", read.who);
    }
    for (read, bar) in [(&ietf, 1.05), (&x_delta, 1.05), (&x_unix, 1.10)] {
        assert!(
            times_ideal(read) <= bar,
            "{} took {:?}",
            read.who,
            read.elapsed
        );
    }
    assert!(
        not_reading.throttled > 0,
        "the gate that reads nothing is throttled"
    );
}

/// A fixed window of 100 per 10 s, announced as `X-RateLimit-*` with the reset a Unix time
/// rounded up to the second (as GitHub sends it), other clients taking 30 % of each window
/// (3 a second, evenly), 1,400 calls from 60 tasks through a gate told nothing; the ideal is
/// 200 s (70 of each window's 100 are the gate's). At each of ten phases of the rounding the
/// server refuses none, within 1.2 times the ideal. (Before the gate read the others' pace
/// from a fixed window's answers, it took their use for a moving window's: 11 to 38 refused,
/// 272.5 to 310.5 s.)
#[cfg(feature = "http")]
#[tokio::test(start_paused = true)]
async fn others_on_a_fixed_window_with_resets_rounded_to_the_second() {
    use paceline_sim::http::{Dialect, Reset};
    use paceline_sim::{OtherClients, Policy, Server};
    let dialect = Dialect::XRateLimit {
        reset: Reset::Epoch,
    };
    let ideal = 200.0;
    let mut runs = Vec::new();
    for phase_ms in (0..1000).step_by(100) {
        let server = Server::builder()
            .latency(50 * MS)
            .global(
                Policy::fixed_window(100, 10 * SEC)
                    .announce_quota(true)
                    .other_clients(OtherClients::even(3.0)),
            )
            .seed(0)
            .build();
        let report = crate::support::scenarios::announced::told_nothing(
            "told nothing",
            server,
            (60, 1_400),
            dialect,
            1_800_000_000_000 + phase_ms,
        )
        .await;
        runs.push((phase_ms, figures(&report)));
    }
    println!("{runs:?}");
    for &(phase_ms, (secs, done, gave_up, throttled, _)) in &runs {
        assert_eq!((done, gave_up), (1_400, 0), "phase {phase_ms} ms");
        assert!(throttled <= 2, "phase {phase_ms} ms: {throttled} refused");
        assert!(secs <= 1.2 * ideal, "phase {phase_ms} ms: {secs} s");
    }
    // Exact, as the simulation repeats itself: the reset half a second past a whole second,
    // and on a whole second.
    assert_eq!(runs[5].1, (221.5, 1400, 0, 0, 0));
    assert_eq!(runs[0].1, (236.0, 1400, 0, 0, 0));
}

/// README's Install names the versions of the crates whose types the front-ends take, as
/// the manifest builds them (major and minor; the major alone from 1 on).
#[test]
fn readme_names_the_versions_of_the_types_the_front_ends_take() {
    let manifest = include_str!("../../Cargo.toml");
    let version_of = |name: &str| {
        let line = (manifest.lines())
            .find(|line| line.starts_with(&format!("{name} = {{ version = \"")))
            .unwrap_or_else(|| panic!("the manifest names {name}"));
        let full = line.split('"').nth(1).expect("a quoted version");
        let parts: Vec<&str> = full.split('.').collect();
        if parts[0] == "0" {
            format!("{}.{}", parts[0], parts[1])
        } else {
            parts[0].to_owned()
        }
    };
    let said = format!(
        "The front-ends take the types of `http` {}, `reqwest` {} with `reqwest-middleware` {}, \
         `tower` {} (`tower-layer` and `tower-service` {}) and `tonic` {}:",
        version_of("http"),
        version_of("reqwest"),
        version_of("reqwest-middleware"),
        version_of("tower"),
        version_of("tower-layer"),
        version_of("tonic"),
    );
    assert_eq!(version_of("tower-layer"), version_of("tower-service"));
    shown(README, &said);
}
