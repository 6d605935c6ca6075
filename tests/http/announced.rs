//! Reading every budget a response announces (`paceline::http::announced`): OpenAI's and
//! Anthropic's fields, each IETF policy apart with its unit, the earlier revision's
//! Dictionary, the generic dialects as `Dimension::UNITS`; and property tests that no header
//! value makes it panic or read a wrong budget.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderValue};
use paceline::http::{Announcement, announced_at, quota_at};
use paceline::{Dimension, Quota, Window};
use paceline_sim::written::{go_duration, rfc3339};
use proptest::prelude::*;

use crate::support::{self, any_now, header_bytes, headers};

/// The wall clock of these tests: 2023-11-14T22:13:20Z.
const NOW: u64 = 1_700_000_000;

fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(NOW)
}

/// What these fields announce, at [`NOW`]: each budget's dimension, policy and quota.
fn read(fields: &[(&str, &str)]) -> Vec<(Dimension, Option<String>, Quota)> {
    let announced = announced_at(&headers(fields), now());
    announced
        .into_iter()
        .map(|a| (a.dimension, a.policy, a.quota))
        .collect()
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn openai_announces_requests_and_tokens_with_go_durations() {
    let fields = [
        ("x-ratelimit-limit-requests", "500"),
        ("x-ratelimit-remaining-requests", "499"),
        ("x-ratelimit-reset-requests", "120ms"),
        ("x-ratelimit-limit-tokens", "30000"),
        ("x-ratelimit-remaining-tokens", "29000"),
        ("x-ratelimit-reset-tokens", "1m30.5s"),
    ];
    assert_eq!(
        read(&fields),
        [
            (
                Dimension::REQUESTS,
                None,
                Quota::new(499, ms(120)).with_limit(500)
            ),
            (
                Dimension::TOKENS,
                None,
                Quota::new(29_000, ms(90_500)).with_limit(30_000)
            ),
        ]
    );
    // The generic reader sees none of it: these are not its fields.
    assert_eq!(quota_at(&headers(&fields), now()), None);
    // A dimension whose reset cannot be read is left out; the other still counts.
    let mut broken = fields;
    broken[5].1 = "soon";
    assert_eq!(read(&broken).len(), 1);
    assert_eq!(read(&broken)[0].0, Dimension::REQUESTS);
}

#[test]
fn anthropic_announces_four_dimensions_with_rfc3339_resets() {
    let fields = [
        ("anthropic-ratelimit-requests-limit", "50"),
        ("anthropic-ratelimit-requests-remaining", "49"),
        ("anthropic-ratelimit-requests-reset", "2023-11-14T22:13:21Z"),
        ("anthropic-ratelimit-tokens-remaining", "79000"),
        ("anthropic-ratelimit-tokens-reset", "2023-11-14T22:13:50.5Z"),
        ("anthropic-ratelimit-input-tokens-limit", "40000"),
        ("anthropic-ratelimit-input-tokens-remaining", "39500"),
        // An offset, and a reset already past: a wait of zero.
        (
            "anthropic-ratelimit-input-tokens-reset",
            "2023-11-14T23:13:00+01:00",
        ),
        ("anthropic-ratelimit-output-tokens-limit", "8000"),
        ("anthropic-ratelimit-output-tokens-remaining", "7000"),
        (
            "anthropic-ratelimit-output-tokens-reset",
            "2023-11-14T22:14:20Z",
        ),
    ];
    assert_eq!(
        read(&fields),
        [
            (
                Dimension::REQUESTS,
                None,
                Quota::new(49, ms(1_000)).with_limit(50)
            ),
            (Dimension::TOKENS, None, Quota::new(79_000, ms(30_500))),
            (
                Dimension::INPUT_TOKENS,
                None,
                Quota::new(39_500, Duration::ZERO).with_limit(40_000)
            ),
            (
                Dimension::OUTPUT_TOKENS,
                None,
                Quota::new(7_000, ms(60_000)).with_limit(8_000)
            ),
        ]
    );
}

#[test]
fn every_ietf_policy_is_read_apart_with_its_name_and_unit() {
    let fields = [
        (
            "RateLimit-Policy",
            r#""burst";q=100;w=60;qu="requests", "daily";q=1000;w=86400, "bytes";q=5000;w=10;qu=content-bytes"#,
        ),
        (
            "RateLimit",
            r#""burst";r=45;t=30, "daily";r=900;t=40000, "bytes";r=10;t=5;pk=:cGFyCg==:"#,
        ),
    ];
    let s = Duration::from_secs;
    assert_eq!(
        read(&fields),
        [
            (
                Dimension::REQUESTS,
                Some("burst".to_owned()),
                Quota::new(45, s(30)).with_limit(100).with_window(s(60))
            ),
            (
                Dimension::UNITS,
                Some("daily".to_owned()),
                Quota::new(900, s(40_000))
                    .with_limit(1000)
                    .with_window(s(86_400))
            ),
            (
                Dimension::new("content-bytes"),
                Some("bytes".to_owned()),
                Quota::new(10, s(5)).with_limit(5000).with_window(s(10))
            ),
        ]
    );
    // `quota` reads the tightest of them alone, as before: the daily one.
    let tightest = Quota::new(900, s(40_000))
        .with_limit(1000)
        .with_window(s(86_400));
    assert_eq!(quota_at(&headers(&fields), now()), Some(tightest));
    // Each policy's partition key, from either field: whose count it is.
    let keys: Vec<_> = (announced_at(&headers(&fields), now()).into_iter())
        .map(|a| a.partition)
        .collect();
    assert_eq!(keys, [None, None, Some(b"par\n".to_vec())]);
    let fields = [
        ("RateLimit-Policy", r#""whole";q=20;w=1;pk=:YWxs:"#),
        ("RateLimit", r#""whole";r=19;t=1"#),
    ];
    let whole = &announced_at(&headers(&fields), now())[0];
    assert_eq!(whole.partition.as_deref(), Some(&b"all"[..]));
}

#[test]
fn an_earlier_revisions_dictionary_is_read_by_both_readers() {
    let fields = [
        ("RateLimit", "limit=100, remaining=50, reset=30"),
        ("RateLimit-Policy", "100;w=60"),
    ];
    let s = Duration::from_secs;
    let expected = Quota::new(50, s(30)).with_limit(100).with_window(s(60));
    assert_eq!(quota_at(&headers(&fields), now()), Some(expected));
    assert_eq!(read(&fields), [(Dimension::UNITS, None, expected)]);
    // Without a readable reset, nothing is read of it.
    let no_reset = [("RateLimit", "limit=100, remaining=50, reset=-1")];
    assert_eq!(quota_at(&headers(&no_reset), now()), None);
    assert_eq!(read(&no_reset), []);
}

#[test]
fn the_generic_families_count_units_beside_a_providers_dimensions() {
    let fields = [
        ("x-ratelimit-remaining", "7"),
        ("x-ratelimit-reset", "1700000004.5"),
        ("x-ratelimit-remaining-requests", "3"),
        ("x-ratelimit-reset-requests", "2s"),
    ];
    assert_eq!(
        read(&fields),
        [
            (Dimension::REQUESTS, None, Quota::new(3, ms(2_000))),
            (Dimension::UNITS, None, Quota::new(7, ms(4_500))),
        ]
    );
    assert_eq!(read(&[]), []);
    // A provider's budgets are buckets (their resets are when full again); the generic
    // families' and the IETF policies' kind is not said.
    let windows: Vec<_> = announced_at(&headers(&fields), now())
        .into_iter()
        .map(|a| a.window)
        .collect();
    assert_eq!(windows, [Some(Window::Refilling), None]);
}

#[test]
fn a_family_a_policys_name_ends_is_that_policys_budget() {
    // NestJS's throttler with its `default` throttler and two named ones, `short` and `long`;
    // OpenAI's `-requests` is a dimension, not a policy.
    let fields = [
        ("x-ratelimit-limit", "100"),
        ("x-ratelimit-remaining", "90"),
        ("x-ratelimit-reset", "60"),
        ("x-ratelimit-limit-short", "3"),
        ("x-ratelimit-remaining-short", "1"),
        ("x-ratelimit-reset-short", "1"),
        ("x-ratelimit-limit-long", "20"),
        ("x-ratelimit-remaining-long", "19"),
        ("x-ratelimit-reset-long", "1700000040"),
        ("x-ratelimit-remaining-requests", "3"),
        ("x-ratelimit-reset-requests", "2s"),
    ];
    let policy = |name: &str| Some(name.to_owned());
    assert_eq!(
        read(&fields),
        [
            (Dimension::REQUESTS, None, Quota::new(3, ms(2_000))),
            (
                Dimension::UNITS,
                None,
                Quota::new(90, ms(60_000)).with_limit(100)
            ),
            (
                Dimension::UNITS,
                policy("long"),
                Quota::new(19, ms(40_000)).with_limit(20)
            ),
            (
                Dimension::UNITS,
                policy("short"),
                Quota::new(1, ms(1_000)).with_limit(3)
            ),
        ]
    );
    // The one quota is the tightest family's, the lowest rate until its reset: 19 in 40 s.
    assert_eq!(
        quota_at(&headers(&fields), now()),
        Some(Quota::new(19, ms(40_000)).with_limit(20))
    );
    // A family without a readable reset is skipped; the others count, the tightest now 1
    // in 1 s (the unnamed one's 90 in 60 s is looser).
    let mut fields = fields.to_vec();
    fields[8].1 = "soon";
    let read = read(&fields);
    let policies: Vec<_> = read.iter().map(|(_, policy, _)| policy.clone()).collect();
    assert_eq!(policies, [None, None, policy("short")]);
    assert_eq!(
        quota_at(&headers(&fields), now()),
        Some(Quota::new(1, ms(1_000)).with_limit(3))
    );
}

#[test]
fn a_retry_after_a_policys_name_ends_is_read_without_a_plain_one() {
    let wait = |fields: &[(&str, &str)]| paceline::http::retry_after(&headers(fields), now());
    assert_eq!(wait(&[("retry-after-short", "2")]), Some(ms(2_000)));
    // Of several, the longest; one unreadable is passed over; a plain one comes first.
    let named = [
        ("retry-after-short", "2"),
        ("retry-after-long", "30"),
        ("retry-after-medium", "soon"),
    ];
    assert_eq!(wait(&named), Some(ms(30_000)));
    let mut both = named.to_vec();
    both.push(("retry-after", "5"));
    assert_eq!(wait(&both), Some(ms(5_000)));
    assert_eq!(wait(&[("retry-after-", "2")]), None, "no name");
    // Read as a throttle's wait.
    let limited = paceline::http::rate_limited_at(
        http::StatusCode::TOO_MANY_REQUESTS,
        &headers(&named),
        now(),
    );
    let thirty = paceline::RateLimited::new().retry_after(ms(30_000));
    assert_eq!(limited, Some(thirty));
}

/// The fields `announced` reads, for the property tests.
const NAMES: [&str; 14] = [
    "ratelimit",
    "ratelimit-policy",
    "ratelimit-remaining",
    "ratelimit-reset",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
    "anthropic-ratelimit-tokens-remaining",
    "anthropic-ratelimit-tokens-reset",
    "anthropic-ratelimit-output-tokens-reset",
];

proptest! {
    #![proptest_config(support::regressions_beside_the_file(ProptestConfig::default()))]

    /// Whatever the bytes of any field: no panic, and every budget read is within a year.
    #[test]
    fn no_header_value_makes_it_panic(
        fields in prop::collection::vec((0..NAMES.len(), header_bytes(40)), 0..12),
        now in any_now(),
    ) {
        let mut headers = HeaderMap::new();
        for (name, value) in fields {
            let value = HeaderValue::from_bytes(&value).expect("the strategy makes valid values");
            headers.append(NAMES[name], value);
        }
        for Announcement { quota, .. } in announced_at(&headers, now) {
            prop_assert!(quota.resets_in() <= Duration::from_secs(365 * 24 * 3600));
        }
    }

    /// Whatever a policy's name and the bytes of its family's fields: no panic, every budget
    /// read is within a year, and a family of well-formed fields reads back as written,
    /// named by its policy.
    #[test]
    fn a_family_of_any_policy_name_reads_back_or_is_skipped(
        policies in prop::collection::vec("[!#$%&'*+.^_`|~0-9A-Za-z-]{0,12}", 1..4),
        values in prop::collection::vec(header_bytes(24), 3),
        (remaining, reset, limit) in (any::<u64>(), 0u64..=365 * 24 * 3600, any::<u64>()),
        now in any_now(),
    ) {
        let mut headers = HeaderMap::new();
        for (policy, value) in policies.iter().zip(&values) {
            for part in ["remaining", "reset", "limit", "reset-after"] {
                let name = http::HeaderName::try_from(format!("x-ratelimit-{part}-{policy}"));
                let value = HeaderValue::from_bytes(value).expect("the strategy makes valid values");
                headers.append(name.expect("a token"), value.clone());
                headers.append(http::HeaderName::try_from(format!("retry-after-{policy}")).unwrap(), value);
            }
        }
        for Announcement { quota, .. } in announced_at(&headers, now) {
            prop_assert!(quota.resets_in() <= Duration::from_secs(365 * 24 * 3600));
        }
        let _ = paceline::http::retry_after(&headers, now);
        let _ = quota_at(&headers, now);
        // One family, well-formed.
        let policy = policies[0].to_ascii_lowercase();
        prop_assume!(!policy.is_empty() && policy != "requests" && policy != "tokens");
        let (remaining, reset, limit) = (remaining.to_string(), reset.to_string(), limit.to_string());
        let name = |part: &str| format!("x-ratelimit-{part}-{policy}");
        let fields = [
            (name("remaining"), remaining.as_str()),
            (name("reset"), reset.as_str()),
            (name("limit"), limit.as_str()),
        ];
        let fields: Vec<_> = fields.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        let quota = Quota::new(remaining.parse().unwrap(), Duration::from_secs(reset.parse().unwrap()))
            .with_limit(limit.parse().unwrap());
        prop_assert_eq!(read(&fields), vec![(Dimension::UNITS, Some(policy), quota)]);
    }

    /// A well-formed OpenAI reset of any length, and an Anthropic one at any instant ahead,
    /// read back as written (Anthropic's to the millisecond it was written at).
    #[test]
    fn providers_resets_read_back_as_written(
        openai in (0u64..86_400, 0u32..1_000_000_000)
            .prop_map(|(s, n)| Duration::new(s, n)),
        ahead_ms in 0u64..86_400_000,
        remaining in any::<u64>(),
    ) {
        let anthropic = now() + Duration::from_millis(ahead_ms);
        let remaining = remaining.to_string();
        let (openai_text, anthropic_text) = (go_duration(openai), rfc3339(anthropic));
        let fields = [
            ("x-ratelimit-remaining-tokens", remaining.as_str()),
            ("x-ratelimit-reset-tokens", openai_text.as_str()),
            ("anthropic-ratelimit-tokens-remaining", remaining.as_str()),
            ("anthropic-ratelimit-tokens-reset", anthropic_text.as_str()),
        ];
        let read = read(&fields);
        let remaining: u64 = remaining.parse().unwrap();
        prop_assert_eq!(
            read,
            vec![
                (Dimension::TOKENS, None, Quota::new(remaining, openai)),
                (Dimension::TOKENS, None, Quota::new(remaining, Duration::from_millis(ahead_ms))),
            ],
            "{} and {}", openai_text, anthropic_text
        );
    }
}
