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
