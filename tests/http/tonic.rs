//! The gRPC classifier (`paceline::tonic`): which codes are throttles and what a
//! `google.rpc.RetryInfo` and a server pushback (`grpc-retry-pushback-ms`) say, on statuses
//! built with tonic-types (and, for what tonic-types cannot build, with its raw protobuf
//! types); then a gate in front of a real tonic server on a loopback port that rate-limits,
//! judged by the server's own log of when each call came.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use paceline::tonic::{
    MAX_RETRY_DELAY, PUSHBACK_KEY, Pushback, is_rate_limit_code, pushback, rate_limited,
    retry_delay,
};
use paceline::{Error, Gate, Jitter, RateLimited};
use proptest::prelude::*;
use prost::Message;
use tokio::time::Instant;
use tonic::metadata::AsciiMetadataValue;
use tonic::transport::Channel;
use tonic::{Code, Status};
use tonic_health::pb::health_client::HealthClient;
use tonic_types::{ErrorDetails, QuotaViolation, StatusExt};

use crate::support;
use crate::support::grpc::{self, Arrival, GrpcServer, Limit, check};

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

/// Every gRPC code.
const CODES: [Code; 17] = [
    Code::Ok,
    Code::Cancelled,
    Code::Unknown,
    Code::InvalidArgument,
    Code::DeadlineExceeded,
    Code::NotFound,
    Code::AlreadyExists,
    Code::PermissionDenied,
    Code::ResourceExhausted,
    Code::FailedPrecondition,
    Code::Aborted,
    Code::OutOfRange,
    Code::Unimplemented,
    Code::Internal,
    Code::Unavailable,
    Code::DataLoss,
    Code::Unauthenticated,
];

/// A status of `code` whose RetryInfo says `delay`, built by tonic-types.
fn with_delay(code: Code, delay: Duration) -> Status {
    let details = ErrorDetails::with_retry_info(Some(delay));
    Status::with_error_details(code, "slow down", details)
}

/// A RESOURCE_EXHAUSTED whose details are `anys`, as they would come over the wire: for
/// details tonic-types will not build (a negative delay, bytes that do not decode).
fn exhausted_with(anys: Vec<prost_types::Any>) -> Status {
    let details = tonic_types::Status {
        code: Code::ResourceExhausted as i32,
        message: "slow down".into(),
        details: anys,
    };
    Status::with_details(
        Code::ResourceExhausted,
        "slow down",
        details.encode_to_vec().into(),
    )
}

/// A RetryInfo detail of `seconds` and `nanos`, whatever their signs.
fn raw_retry_info(seconds: i64, nanos: i32) -> prost_types::Any {
    let info = tonic_types::pb::RetryInfo {
        retry_delay: Some(prost_types::Duration { seconds, nanos }),
    };
    prost_types::Any {
        type_url: tonic_types::RetryInfo::TYPE_URL.into(),
        value: info.encode_to_vec(),
    }
}

/// `status` with `values` as its `grpc-retry-pushback-ms`, each as given.
fn pushed(mut status: Status, values: &[&str]) -> Status {
    for value in values {
        let value = AsciiMetadataValue::try_from(*value).expect("a valid metadata value");
        status.metadata_mut().append(PUSHBACK_KEY, value);
    }
    status
}

fn throttle(delay: Duration) -> Option<RateLimited> {
    Some(RateLimited::new().retry_after(delay))
}

// ---- codes ----

#[test]
fn only_resource_exhausted_and_unavailable_are_throttles() {
    for code in CODES {
        let throttles = matches!(code, Code::ResourceExhausted | Code::Unavailable);
        assert_eq!(is_rate_limit_code(code), throttles, "{code:?}");
        // A RetryInfo on any other code makes no throttle.
        let expected = throttles.then(|| RateLimited::new().retry_after(3 * SEC));
        assert_eq!(
            rate_limited(&with_delay(code, 3 * SEC)),
            expected,
            "{code:?}"
        );
        let expected = throttles.then(RateLimited::new);
        assert_eq!(rate_limited(&Status::new(code, "")), expected, "{code:?}");
        // Nor does a pushback.
        let expected = throttles.then(|| RateLimited::new().retry_after(3 * SEC));
        let status = pushed(Status::new(code, ""), &["3000"]);
        assert_eq!(rate_limited(&status), expected, "{code:?}");
        assert_eq!(
            pushback(&status),
            Some(Pushback::After(3 * SEC)),
            "{code:?}"
        );
    }
}

// ---- the RetryInfo's delay ----

#[test]
fn the_retry_info_delay_is_the_retry_after_to_the_nanosecond() {
    for delay in [
        1500 * MS,
        Duration::from_nanos(1),
        Duration::new(7, 999_999_999),
        90 * SEC,
    ] {
        assert_eq!(
            rate_limited(&with_delay(Code::ResourceExhausted, delay)),
            throttle(delay)
        );
        assert_eq!(
            rate_limited(&with_delay(Code::Unavailable, delay)),
            throttle(delay)
        );
    }
}

#[test]
fn a_zero_delay_is_a_retry_after_of_zero() {
    let status = with_delay(Code::ResourceExhausted, Duration::ZERO);
    assert_eq!(rate_limited(&status), throttle(Duration::ZERO));
}

#[test]
fn no_retry_info_or_none_that_can_be_read_is_a_throttle_without_a_delay() {
    let without_delay = ErrorDetails::with_retry_info(None);
    let garbage = prost_types::Any {
        type_url: tonic_types::RetryInfo::TYPE_URL.into(),
        value: vec![0xff, 0xff, 0xff],
    };
    for status in [
        Status::resource_exhausted("no details at all"),
        Status::with_error_details(Code::ResourceExhausted, "no delay", without_delay),
        exhausted_with(vec![garbage]),
        // Details that are not a google.rpc.Status at all.
        Status::with_details(Code::ResourceExhausted, "junk", vec![0xff; 8].into()),
    ] {
        assert_eq!(retry_delay(&status), None, "{status:?}");
        assert_eq!(
            rate_limited(&status),
            Some(RateLimited::new()),
            "{status:?}"
        );
    }
}

#[test]
fn a_delay_up_to_a_day_counts_and_a_longer_one_is_malformed() {
    let day = 24 * 3600 * SEC;
    assert_eq!(MAX_RETRY_DELAY, day);
    for long in [15 * 60 * SEC, 23 * 3600 * SEC, day] {
        let status = with_delay(Code::ResourceExhausted, long);
        assert_eq!(rate_limited(&status), throttle(long), "{long:?}");
    }
    // tonic-types caps what it encodes at about 10,000 years; `Duration::MAX` becomes that.
    for absurd in [
        MAX_RETRY_DELAY + Duration::from_nanos(1),
        365 * 24 * 3600 * SEC,
        Duration::MAX,
    ] {
        let status = with_delay(Code::ResourceExhausted, absurd);
        assert_eq!(retry_delay(&status), None, "{absurd:?}");
        assert_eq!(
            rate_limited(&status),
            Some(RateLimited::new()),
            "{absurd:?}"
        );
    }
    // Beyond what tonic-types encodes: the most a protobuf Duration can hold, and more.
    for (seconds, nanos) in [(i64::MAX, 999_999_999), (i64::MAX, i32::MAX)] {
        let status = exhausted_with(vec![raw_retry_info(seconds, nanos)]);
        assert_eq!(rate_limited(&status), Some(RateLimited::new()));
    }
}

/// tonic-types would read a negative delay as zero (retrying at once a server that asked for
/// nonsense), and its conversion panics ("attempt to negate with overflow") on `i64::MIN`
/// seconds in a build with overflow checks, as tests are.
#[test]
fn a_negative_delay_is_malformed_and_never_panics() {
    for (seconds, nanos) in [
        (-1, 0),
        (0, -1),
        (-5, -500_000_000),
        (i64::MIN, 0),
        (i64::MIN, -999_999_999),
        (i64::MIN, i32::MIN),
        (i64::MIN + 1, i32::MIN),
        (1, -1_500_000_000),
    ] {
        let status = exhausted_with(vec![raw_retry_info(seconds, nanos)]);
        assert_eq!(retry_delay(&status), None, "{seconds} s {nanos} ns");
        assert_eq!(
            rate_limited(&status),
            Some(RateLimited::new()),
            "{seconds} s {nanos} ns"
        );
    }
}

#[test]
fn a_delay_whose_parts_differ_in_sign_counts_by_its_total() {
    // 2 s - 0.5 s, and 0 s + 1.5e9 ns: protobuf wants one sign, but the total is clear.
    let status = exhausted_with(vec![raw_retry_info(2, -500_000_000)]);
    assert_eq!(rate_limited(&status), throttle(1500 * MS));
    let status = exhausted_with(vec![raw_retry_info(0, 1_500_000_000)]);
    assert_eq!(rate_limited(&status), throttle(1500 * MS));
}

// ---- other details ----

#[test]
fn other_details_beside_the_retry_info_change_nothing() {
    let mut details = ErrorDetails::with_quota_failure(vec![QuotaViolation::new(
        "project:123",
        "requests per minute",
    )]);
    let metadata = HashMap::from([("quota".to_owned(), "rpm".to_owned())]);
    details.set_error_info("RATE_LIMIT_EXCEEDED", "example.com", metadata);
    details.set_localized_message("en", "Too many requests");
    // Without a RetryInfo: a throttle without a delay, and no scope from the QuotaFailure.
    let status = Status::with_error_details(Code::ResourceExhausted, "quota", details.clone());
    assert_eq!(rate_limited(&status), Some(RateLimited::new()));
    details.set_retry_info(Some(42 * SEC));
    let status = Status::with_error_details(Code::ResourceExhausted, "quota", details);
    assert_eq!(rate_limited(&status), throttle(42 * SEC));
}

#[test]
fn the_first_retry_info_that_decodes_counts() {
    let garbage = prost_types::Any {
        type_url: tonic_types::RetryInfo::TYPE_URL.into(),
        value: vec![0xff, 0xff, 0xff],
    };
    let status = exhausted_with(vec![garbage, raw_retry_info(4, 0), raw_retry_info(9, 0)]);
    assert_eq!(rate_limited(&status), throttle(4 * SEC));
}

// ---- the server's pushback ----

#[test]
fn a_pushback_is_the_retry_after_to_the_millisecond() {
    for (value, delay) in [
        ("0", Duration::ZERO),
        ("1", MS),
        ("1500", 1500 * MS),
        ("86400000", MAX_RETRY_DELAY),
        // Read as gRPC's clients read it (Java's `Integer.valueOf`), and without the spaces
        // and tabs around a header's value.
        ("+250", 250 * MS),
        ("0250", 250 * MS),
        ("-0", Duration::ZERO),
        (" \t250 ", 250 * MS),
    ] {
        for code in [Code::ResourceExhausted, Code::Unavailable] {
            let status = pushed(Status::new(code, "slow down"), &[value]);
            assert_eq!(pushback(&status), Some(Pushback::After(delay)), "{value:?}");
            assert_eq!(rate_limited(&status), throttle(delay), "{value:?}");
        }
    }
    assert_eq!(pushback(&Status::resource_exhausted("quota")), None);
}

#[test]
fn a_pushback_longer_than_a_day_is_malformed() {
    for value in ["86400001", "2147483647"] {
        let status = pushed(Status::resource_exhausted("quota"), &[value]);
        assert_eq!(pushback(&status), None, "{value:?}");
        assert_eq!(rate_limited(&status), Some(RateLimited::new()), "{value:?}");
    }
}

/// gRFC A6: a negative value, or one that does not parse, asks the client not to retry. The
/// classifier cannot say "give up now", and takes it as a throttle without a server delay.
#[test]
fn a_negative_or_unreadable_pushback_asks_not_to_retry_and_leaves_the_gate_s_backoff() {
    let refusals: &[&[&str]] = &[
        &["-1"],
        &["-2147483648"],
        &[""],
        &["soon"],
        &["1.5"],
        &["1e3"],
        &["0x10"],
        &["1 000"],
        &["++1"],
        // Beyond a signed 32-bit integer: gRFC A6's "unparseable".
        &["2147483648"],
        &["-2147483649"],
        &["99999999999999999999999999"],
        // Twice, even alike: which one the server meant is a guess.
        &["100", "100"],
        &["100", "200"],
    ];
    for values in refusals {
        let status = pushed(Status::resource_exhausted("quota"), values);
        assert_eq!(pushback(&status), Some(Pushback::DoNotRetry), "{values:?}");
        assert_eq!(
            rate_limited(&status),
            Some(RateLimited::new()),
            "{values:?}"
        );
    }
    // Bytes that are no text.
    let mut status = Status::unavailable("draining");
    let value = AsciiMetadataValue::try_from(&b"\xff5"[..]).unwrap();
    status.metadata_mut().insert(PUSHBACK_KEY, value);
    assert_eq!(pushback(&status), Some(Pushback::DoNotRetry));
    assert_eq!(rate_limited(&status), Some(RateLimited::new()));
}

/// Each is the server's estimate of when a retry would pass: the gate waits the longer.
#[test]
fn with_both_a_retry_info_and_a_pushback_the_longer_counts() {
    let cases = [
        (SEC, "2500", 2500 * MS),
        (3 * SEC, "500", 3 * SEC),
        (SEC, "1000", SEC),
        (Duration::ZERO, "0", Duration::ZERO),
        (Duration::ZERO, "700", 700 * MS),
        // A pushback that asks not to retry, or is malformed, leaves the RetryInfo.
        (SEC, "-1", SEC),
        (SEC, "soon", SEC),
        (SEC, "86400001", SEC),
        // And an absurd RetryInfo leaves the pushback.
        (Duration::MAX, "700", 700 * MS),
    ];
    for (info, value, expected) in cases {
        for code in [Code::ResourceExhausted, Code::Unavailable] {
            let status = pushed(with_delay(code, info), &[value]);
            assert_eq!(
                rate_limited(&status),
                throttle(expected),
                "{info:?} {value:?}"
            );
        }
    }
    // A pushback beside a RetryInfo that does not decode.
    let garbage = prost_types::Any {
        type_url: tonic_types::RetryInfo::TYPE_URL.into(),
        value: vec![0xff],
    };
    let status = pushed(exhausted_with(vec![garbage]), &["1200"]);
    assert_eq!(rate_limited(&status), throttle(1200 * MS));
}

/// What the classifier should make of a pushback of `millis`, written as a decimal: gRFC A6's
/// reading, with the one-day maximum.
fn model(millis: i128) -> Option<Pushback> {
    if millis < 0 || millis > i128::from(i32::MAX) {
        Some(Pushback::DoNotRetry)
    } else if millis > MAX_RETRY_DELAY.as_millis() as i128 {
        None
    } else {
        Some(Pushback::After(Duration::from_millis(millis as u64)))
    }
}

proptest! {
    #![proptest_config(support::regressions_beside_the_file(ProptestConfig::with_cases(500)))]

    /// Any bytes a metadata value can hold: never a panic, and the answer is a throttle of at
    /// most a day, whose delay is the pushback's when there is no RetryInfo.
    #[test]
    fn no_pushback_value_makes_the_classifier_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..24),
        info in prop::option::of(0..=MAX_RETRY_DELAY.as_millis() as u64),
    ) {
        let Ok(value) = AsciiMetadataValue::try_from(bytes.as_slice()) else {
            return Ok(()); // not a value tonic would hold
        };
        let mut status = match info {
            Some(info) => with_delay(Code::ResourceExhausted, Duration::from_millis(info)),
            None => Status::resource_exhausted("quota"),
        };
        status.metadata_mut().insert(PUSHBACK_KEY, value);
        let read = pushback(&status);
        if let Some(Pushback::After(delay)) = read {
            prop_assert!(delay <= MAX_RETRY_DELAY);
        }
        let pushed = match read {
            Some(Pushback::After(delay)) => Some(delay),
            _ => None,
        };
        let expected = pushed.max(info.map(Duration::from_millis));
        let expected = match expected {
            Some(delay) => RateLimited::new().retry_after(delay),
            None => RateLimited::new(),
        };
        prop_assert_eq!(rate_limited(&status), Some(expected));
    }

    /// Any decimal, within 32 bits or far beyond: read as the model says.
    #[test]
    fn a_decimal_pushback_is_read_as_grfc_a6_says(
        millis in prop_oneof![
            -100_000i128..=100_000,
            i128::from(i32::MIN) - 10..=i128::from(i32::MIN) + 10,
            i128::from(i32::MAX) - 10..=i128::from(i32::MAX) + 10,
            MAX_RETRY_DELAY.as_millis() as i128 - 10..=MAX_RETRY_DELAY.as_millis() as i128 + 10,
            any::<i128>(),
        ],
    ) {
        let status = pushed(Status::unavailable("draining"), &[&millis.to_string()]);
        prop_assert_eq!(pushback(&status), model(millis));
    }
}

// ---- through a gate, in paused time ----

/// A gate whose own backoff, for throttles without a delay, is exactly 1 s.
fn gate() -> Gate<Status> {
    Gate::builder(rate_limited)
        .backoff(SEC, SEC)
        .jitter(Jitter::None)
        .build()
        .unwrap()
}

/// How long a call that is throttled once with `first` takes through [`gate`].
async fn retried_after(first: Status) -> Duration {
    let gate = gate();
    let start = Instant::now();
    let mut first = Some(first);
    let answer = gate
        .call(|| {
            let first = first.take();
            async move {
                match first {
                    Some(status) => Err(status),
                    None => Ok(()),
                }
            }
        })
        .await;
    assert!(answer.is_ok(), "{answer:?}");
    start.elapsed()
}

#[tokio::test(start_paused = true)]
async fn the_gate_waits_the_delay_and_its_own_backoff_without_one() {
    let delay = 2345 * MS;
    let with = retried_after(with_delay(Code::ResourceExhausted, delay)).await;
    assert_eq!(with, delay);
    // A zero delay is shorter than the gate's own next backoff: that backoff, 1 s.
    let zero = retried_after(with_delay(Code::Unavailable, Duration::ZERO)).await;
    assert_eq!(zero, SEC);
    // An absurd or negative delay leaves the gate's own backoff in charge: 1 s, not years.
    let absurd = retried_after(with_delay(Code::ResourceExhausted, Duration::MAX)).await;
    assert_eq!(absurd, SEC);
    let negative = retried_after(exhausted_with(vec![raw_retry_info(i64::MIN, 0)])).await;
    assert_eq!(negative, SEC);
}

/// The gate holds a throttled call for its pushback; for one that asks not to retry, its
/// own backoff (1 s); for both a RetryInfo and a pushback, the longer.
#[tokio::test(start_paused = true)]
async fn the_gate_waits_the_pushback_or_its_own_backoff_when_asked_not_to_retry() {
    let alone = pushed(Status::unavailable("draining"), &["2345"]);
    assert_eq!(retried_after(alone).await, 2345 * MS);
    let refused = pushed(Status::resource_exhausted("overloaded"), &["-1"]);
    assert_eq!(retried_after(refused).await, SEC);
    let longer = pushed(with_delay(Code::ResourceExhausted, 1500 * MS), &["3210"]);
    assert_eq!(retried_after(longer).await, 3210 * MS);
    let shorter = pushed(with_delay(Code::ResourceExhausted, 1500 * MS), &["321"]);
    assert_eq!(retried_after(shorter).await, 1500 * MS);
}

#[tokio::test(start_paused = true)]
async fn other_statuses_reach_the_caller_at_once_unchanged() {
    let gate = gate();
    let start = Instant::now();
    let answer = gate
        .call(|| async { Err::<(), _>(with_delay(Code::Internal, SEC)) })
        .await;
    let Err(Error::Call(status)) = answer else {
        panic!("not passed through: {answer:?}");
    };
    assert_eq!(
        (status.code(), status.message()),
        (Code::Internal, "slow down")
    );
    assert_eq!(retry_delay(&status), Some(SEC), "the details are kept");
    assert_eq!(start.elapsed(), Duration::ZERO);
}

// ---- a real tonic server ----

/// Each test with a server starts its own; they run one at a time, so that neither's timing
/// is the other's load.
static SERVER_TESTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Asserts that no call arrived while a refusal's RetryInfo said to wait: from the instant
/// the server refused a call until the delay it announced was over.
fn assert_none_inside_a_delay(log: &[Arrival]) {
    for refusal in log {
        let Some(delay) = refusal.refused else {
            continue;
        };
        let until = refusal.at + delay;
        let inside: Vec<_> = log
            .iter()
            .filter(|a| a.at > refusal.at && a.at < until)
            .collect();
        assert!(
            inside.is_empty(),
            "calls {inside:?} came inside the delay of {refusal:?}"
        );
    }
}

/// One client, one call at a time: the window's sixth call is refused, the gate waits out
/// the whole RetryInfo delay, and the call goes again first in the next window. The only
/// timing it relies on is that five loopback calls take less than a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_call_at_a_time_is_throttled_once_and_waits_the_whole_delay() {
    let _one = SERVER_TESTS.lock().await;
    let limit = Limit {
        calls: 5,
        window: SEC,
    };
    let server = GrpcServer::start(limit).await;
    let client = server.client().await;
    let gate = Gate::builder(rate_limited)
        .max_in_flight(1)
        .build()
        .unwrap();
    calls_in_turn(&gate, &client, 8).await;
    let log = server.log();
    let delay = refused_once_and_retried_first(&log);
    assert!(log[6].at >= log[5].at + delay, "{log:?}");
    assert_eq!(gate.stats().throttles, 1);
}

/// As above, with a server that tells the wait only by its pushback (`grpc-retry-pushback-ms`
/// in the trailers-only response), and a gate whose own backoff is 1 ms: a gate that did not
/// read the pushback would come back inside the window, and be refused again. Through a real
/// server the retry also comes no later than honest bounds allow (a timer and one loopback
/// call: well within half a second).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_pushback_holds_the_gate_for_the_whole_delay() {
    let _one = SERVER_TESTS.lock().await;
    let limit = Limit {
        calls: 5,
        window: SEC,
    };
    let server = GrpcServer::start_refusing(limit, grpc::with_pushback).await;
    let client = server.client().await;
    let gate = Gate::builder(rate_limited)
        .max_in_flight(1)
        .backoff(MS, MS)
        .jitter(Jitter::None)
        .build()
        .unwrap();
    calls_in_turn(&gate, &client, 8).await;
    let log = server.log();
    let delay = refused_once_and_retried_first(&log);
    let waited = log[6].at - log[5].at;
    assert!(
        waited >= delay && waited < delay + 500 * MS,
        "asked {delay:?}, waited {waited:?}"
    );
    assert_eq!(gate.stats().throttles, 1);
}

/// A server whose pushback asks not to retry (`-1`): the call is not failed at once, and
/// not retried at once either, but after the gate's own backoff (300 ms here, no jitter),
/// until the window ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pushback_asking_not_to_retry_leaves_the_gate_s_own_backoff() {
    let _one = SERVER_TESTS.lock().await;
    let limit = Limit {
        calls: 1,
        window: SEC,
    };
    let server = GrpcServer::start_refusing(limit, grpc::do_not_retry).await;
    let client = server.client().await;
    let backoff = 300 * MS;
    // The backoff alone: a rate found from these throttles would space the retries too.
    let gate = Gate::builder(rate_limited)
        .find_rate(false)
        .backoff(backoff, backoff)
        .jitter(Jitter::None)
        .max_retries(10)
        .build()
        .unwrap();
    calls_in_turn(&gate, &client, 2).await;
    let log = server.log();
    let refusals = log.iter().filter(|a| a.refused.is_some()).count();
    // The window of 1 s holds 1 call; the second is retried every 300 ms until it ends.
    assert!((1..=4).contains(&refusals), "{log:?}");
    for pair in log[1..].windows(2) {
        let gap = pair[1].at - pair[0].at;
        assert!(
            gap >= backoff && gap < backoff + 500 * MS,
            "a retry {gap:?} after a refusal: {log:?}"
        );
    }
    assert_eq!(gate.stats().throttles, refusals as u64);
}

/// Checks the server's log of 8 calls in turn against a limit of 5 a window: call 5 was
/// refused once, with a delay of at most the window, and went again before call 6, after
/// the delay; returns the delay.
fn refused_once_and_retried_first(log: &[Arrival]) -> Duration {
    let calls: Vec<_> = log.iter().map(|a| a.call.unwrap()).collect();
    assert_eq!(
        calls,
        [0, 1, 2, 3, 4, 5, 5, 6, 7],
        "the refused call went again first"
    );
    let refused: Vec<_> = log.iter().filter_map(|a| a.refused).collect();
    assert_eq!(refused.len(), 1, "{log:?}");
    assert!(
        refused[0] > Duration::ZERO && refused[0] <= SEC,
        "{refused:?}"
    );
    assert_none_inside_a_delay(log);
    refused[0]
}

/// Makes `calls` health checks through `gate`, one after another, each of which must succeed.
async fn calls_in_turn(gate: &Gate<Status>, client: &HealthClient<Channel>, calls: u64) {
    for call in 0..calls {
        let answer = gate
            .call(|| {
                let mut client = client.clone();
                async move { check(&mut client, call).await }
            })
            .await;
        assert!(answer.is_ok(), "call {call}: {answer:?}");
    }
}

/// What the client saw of its own calls, to tell the calls it sent knowing of a refusal
/// from those already on their way.
#[derive(Debug, Default)]
struct ClientLog {
    /// When each attempt (by its call-id) was sent.
    sent: HashMap<u64, Instant>,
    /// When the refusal of each refused attempt came back.
    refused: HashMap<u64, Instant>,
}

/// The gate's in-flight limit, and the naive client's workers.
const IN_FLIGHT: usize = 4;

/// Calls `calls` times through a gate of [`IN_FLIGHT`] in flight, and returns the server's
/// log and the client's.
async fn through_a_gate(server: &GrpcServer, calls: u64) -> (Vec<Arrival>, ClientLog) {
    let client = server.client().await;
    let gate = Gate::builder(rate_limited)
        .max_in_flight(IN_FLIGHT)
        .max_retries(100)
        .build()
        .unwrap();
    let log = Arc::new(Mutex::new(ClientLog::default()));
    let attempts = AtomicU64::new(0);
    let tasks = (0..calls).map(|_| {
        gate.call(|| {
            let (mut client, log) = (client.clone(), Arc::clone(&log));
            let attempt = attempts.fetch_add(1, Ordering::Relaxed);
            async move {
                log.lock().unwrap().sent.insert(attempt, Instant::now());
                let answer = check(&mut client, attempt).await;
                if answer.is_err() {
                    log.lock().unwrap().refused.insert(attempt, Instant::now());
                }
                answer
            }
        })
    });
    for answer in futures::future::join_all(tasks).await {
        assert!(answer.is_ok(), "{answer:?}");
    }
    let client_log = std::mem::take(&mut *log.lock().unwrap());
    (server.log(), client_log)
}

/// Many calls in parallel, through a gate and without one. A call already on its way when
/// another is refused may arrive inside the delay (the client could not know yet); every
/// call sent after the client saw a refusal arrives after its delay. So the gate is refused
/// at most [`IN_FLIGHT`] times each time a window fills with calls still to make (three
/// times, for 20 calls at 5 a window), whatever the timing; the naive client, as many
/// workers that retry every 10 ms, more than that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_calls_through_a_gate_send_nothing_into_a_delay_they_know_of() {
    let _one = SERVER_TESTS.lock().await;
    let limit = Limit {
        calls: 5,
        window: 500 * MS,
    };
    let server = GrpcServer::start(limit).await;
    const CALLS: u64 = 20;

    let (log, client) = through_a_gate(&server, CALLS).await;
    let accepted = log.iter().filter(|a| a.refused.is_none()).count();
    assert_eq!(accepted, CALLS as usize, "each call done once");
    let gate_refused = log.len() - accepted;
    let filled = (CALLS as usize).div_ceil(limit.calls as usize) - 1;
    assert!(gate_refused >= 1, "the limit was reached: {log:?}");
    assert!(gate_refused <= IN_FLIGHT * filled, "{log:?}");
    for refusal in log.iter().filter(|a| a.refused.is_some()) {
        let call = refusal.call.unwrap();
        let seen = client.refused[&call];
        let until = refusal.at + refusal.refused.unwrap();
        for arrival in &log {
            let sent = client.sent[&arrival.call.unwrap()];
            assert!(
                sent < seen || arrival.at >= until,
                "call {arrival:?}, sent after the refusal {refusal:?} came back, arrived inside its delay"
            );
        }
    }

    server.reset();
    let naive_refused = naive(&server, CALLS, IN_FLIGHT).await;
    println!(
        "{CALLS} calls, at most {} per {:?}: refused {gate_refused} times through the gate, \
         {naive_refused} times without",
        limit.calls, limit.window
    );
    assert!(
        naive_refused > IN_FLIGHT * filled,
        "gate {gate_refused}, naive {naive_refused}"
    );
}

/// `calls` calls by `workers` workers that retry a refused call after 10 ms, whatever the
/// server said; how many times the server refused them.
async fn naive(server: &GrpcServer, calls: u64, workers: usize) -> usize {
    let client = server.client().await;
    let next = Arc::new(AtomicU64::new(0));
    let worker = |_| {
        let (mut client, next) = (client.clone(), Arc::clone(&next));
        async move {
            while next.fetch_add(1, Ordering::Relaxed) < calls {
                while let Err(status) = check(&mut client, 0).await {
                    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
                    tokio::time::sleep(10 * MS).await;
                }
            }
        }
    };
    futures::future::join_all((0..workers).map(worker)).await;
    let log = server.log();
    assert_eq!(
        log.iter().filter(|a| a.refused.is_none()).count(),
        calls as usize
    );
    log.iter().filter(|a| a.refused.is_some()).count()
}
