//! Reading an announced quota (`paceline::http::quota`): each dialect, the order between them,
//! the tightest of several IETF policies, seconds against Unix times, what is ignored; and
//! property tests that no header value makes it panic.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderValue};
use paceline::Quota;
use paceline::http::{quota, quota_at};
use proptest::prelude::*;

use crate::support::{self, any_now, header_bytes, headers};

/// The wall clock of most tests: 2023-11-14T22:13:20Z.
const NOW: u64 = 1_700_000_000;

/// One year, the longest reset or window read.
const YEAR: u64 = 365 * 24 * 60 * 60;

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// The quota these fields announce, at [`NOW`].
fn read(fields: &[(&str, &str)]) -> Option<Quota> {
    quota_at(&headers(fields), at(NOW))
}

/// `remaining` left, resetting in `reset` seconds.
fn q(remaining: u64, reset: u64) -> Quota {
    Quota::new(remaining, secs(reset))
}

const BOTH_POLICIES: &str = r#""burst";q=100;w=60, "daily";q=1000;w=86400"#;

// ---- the IETF draft's RateLimit and RateLimit-Policy ----

#[test]
fn one_ietf_policy_with_its_limit_and_window() {
    let fields = [
        ("RateLimit-Policy", r#""default";q=100;w=60"#),
        ("RateLimit", r#""default";r=50;t=30"#),
    ];
    assert_eq!(
        read(&fields),
        Some(q(50, 30).with_limit(100).with_window(secs(60)))
    );
}

#[test]
fn the_tightest_policy_counts_whatever_the_order() {
    // Burst: 45 for 30 s, 1.5 a second; daily: 900 for 40,000 s, 0.0225 a second. The daily
    // one is the tighter even though it has more left and resets later.
    let burst_first = r#""burst";r=45;t=30, "daily";r=900;t=40000"#;
    let daily_first = r#""daily";r=900;t=40000, "burst";r=45;t=30"#;
    let daily = q(900, 40_000).with_limit(1000).with_window(secs(86_400));
    for limits in [burst_first, daily_first] {
        let fields = [("RateLimit-Policy", BOTH_POLICIES), ("RateLimit", limits)];
        assert_eq!(read(&fields), Some(daily), "{limits}");
    }

    // Burst: 5 for 1 s; daily: 900 for 40,000 s. The fewest left is not the tightest...
    let fields = [
        ("RateLimit-Policy", BOTH_POLICIES),
        ("RateLimit", r#""burst";r=5;t=1, "daily";r=900;t=40000"#),
    ];
    assert_eq!(read(&fields), Some(daily));
    // ...nor is the latest reset: burst's 1 for 100 s is under daily's 0.0225 a second.
    let fields = [
        ("RateLimit-Policy", BOTH_POLICIES),
        ("RateLimit", r#""daily";r=900;t=40000, "burst";r=1;t=100"#),
    ];
    assert_eq!(
        read(&fields),
        Some(q(1, 100).with_limit(100).with_window(secs(60)))
    );
}

#[test]
fn nothing_left_is_tightest_and_a_reset_now_least_tight() {
    let cases = [
        // Nothing left beats a tiny rate.
        (r#""a";r=1;t=100000, "b";r=0;t=5"#, q(0, 5)),
        // Of two with nothing left, the one that resets last.
        (r#""a";r=0;t=5, "b";r=0;t=50, "c";r=0;t=7"#, q(0, 50)),
        // Nothing left even with a reset now beats any rate.
        (r#""a";r=5;t=10, "b";r=0;t=0"#, q(0, 0)),
        // Units left and a reset now: the least tight, whatever the other's rate.
        (r#""a";r=1;t=0, "b";r=1000;t=1"#, q(1000, 1)),
        (r#""a";r=1000;t=1, "b";r=1;t=0"#, q(1000, 1)),
        // Equal rates: the one that resets last.
        (r#""a";r=10;t=10, "b";r=20;t=20, "c";r=5;t=5"#, q(20, 20)),
        // Both reset now with units left: the one with fewer left.
        (r#""a";r=9;t=0, "b";r=3;t=0, "c";r=7;t=0"#, q(3, 0)),
    ];
    for (limits, expected) in cases {
        assert_eq!(read(&[("RateLimit", limits)]), Some(expected), "{limits}");
    }
}

#[test]
fn the_policy_is_joined_by_name_not_by_place() {
    let policies = r#""daily";q=1000;w=86400, "burst";q=100;w=60"#;
    let fields = [
        ("RateLimit-Policy", policies),
        ("RateLimit", r#""burst";r=45;t=30"#),
    ];
    assert_eq!(
        read(&fields),
        Some(q(45, 30).with_limit(100).with_window(secs(60)))
    );

    // No policy of that name: remaining and reset alone.
    let fields = [
        ("RateLimit-Policy", policies),
        ("RateLimit", r#""hourly";r=45;t=30"#),
    ];
    assert_eq!(read(&fields), Some(q(45, 30)));
    assert_eq!(
        read(&[("RateLimit", r#""burst";r=45;t=30"#)]),
        Some(q(45, 30))
    );
}

#[test]
fn ietf_fields_split_over_lines_are_read_as_one() {
    // The tighter policy, and its policy, are on the second lines.
    let fields = [
        ("RateLimit-Policy", r#""burst";q=100;w=60"#),
        ("RateLimit", r#""burst";r=45;t=30"#),
        ("RateLimit", r#""daily";r=900;t=40000"#),
        ("RateLimit-Policy", r#""daily";q=1000;w=86400"#),
    ];
    assert_eq!(
        read(&fields),
        Some(q(900, 40_000).with_limit(1000).with_window(secs(86_400)))
    );
}

#[test]
fn other_ietf_parameters_are_ignored() {
    let fields = [
        (
            "RateLimit-Policy",
            r#""default";q=100;qu="requests";w=60;pk=:cHJvamVjdC0xMjM=:;x=?1"#,
        ),
        (
            "RateLimit",
            r#""default";r=50;t=30;pk=:cHJvamVjdC0xMjM=:;x="y""#,
        ),
    ];
    assert_eq!(
        read(&fields),
        Some(q(50, 30).with_limit(100).with_window(secs(60)))
    );
}

#[test]
fn a_malformed_ietf_member_is_skipped_and_the_others_count() {
    // The well-formed one is the least tight of all, so it counts only if the others are skipped.
    let good = r#""good";r=1000;t=1"#;
    for bad in [
        r#""bad";t=30"#,                         // no r
        r#""bad";r=0"#,                          // no t
        r#""bad";r=-1;t=30"#,                    // negative
        r#""bad";r=0;t=-5"#,                     // negative
        r#""bad";r=0.5;t=30"#,                   // a Decimal
        r#""bad";r="0";t=30"#,                   // a String
        r#""bad";r=0;t=31536001"#,               // a reset over a year
        r#"bad;r=0;t=30"#,                       // named by a Token
        r#"7;r=0;t=30"#,                         // named by an Integer
        r#"("bad" "worse");r=0;t=30"#,           // an inner list
        r#""bad";r=999999999999999999999;t=30"#, // too many digits: the field fails
    ] {
        let limits = format!("{bad}, {good}");
        let got = read(&[("RateLimit", &limits)]);
        if bad.contains("999999999") {
            assert_eq!(got, None, "{bad}");
        } else {
            assert_eq!(got, Some(q(1000, 1)), "{bad}");
        }
    }
    // A whole year is still read.
    assert_eq!(
        read(&[("RateLimit", r#""a";r=0;t=31536000"#)]),
        Some(q(0, YEAR))
    );
}

#[test]
fn a_malformed_limit_or_window_is_left_out() {
    let limits = r#""default";r=50;t=30"#;
    for (policy, expected) in [
        (r#""default";q=-1;w=60"#, q(50, 30).with_window(secs(60))),
        (r#""default";q=1.5;w=60"#, q(50, 30).with_window(secs(60))),
        (r#""default";q=100;w=0"#, q(50, 30).with_limit(100)),
        (r#""default";q=100;w=-60"#, q(50, 30).with_limit(100)),
        (r#""default";q=100;w=31536001"#, q(50, 30).with_limit(100)),
        (r#""default";q=100;w="60""#, q(50, 30).with_limit(100)),
        (r#""default""#, q(50, 30)),
        // Not a structured List at all: ignored whole.
        (r#""default";q=100;w=60,"#, q(50, 30)),
    ] {
        let fields = [("RateLimit-Policy", policy), ("RateLimit", limits)];
        assert_eq!(read(&fields), Some(expected), "{policy}");
    }
    // A remaining count above the limit is kept.
    let fields = [
        ("RateLimit-Policy", r#""default";q=10;w=60"#),
        ("RateLimit", r#""default";r=50;t=30"#),
    ];
    assert_eq!(
        read(&fields),
        Some(q(50, 30).with_limit(10).with_window(secs(60)))
    );
}

// ---- the order of the dialects ----

const SEPARATE: [(&str, &str); 3] = [
    ("RateLimit-Limit", "200"),
    ("RateLimit-Remaining", "20"),
    ("RateLimit-Reset", "2"),
];
const X_FAMILY: [(&str, &str); 3] = [
    ("X-RateLimit-Limit", "300"),
    ("X-RateLimit-Remaining", "30"),
    ("X-RateLimit-Reset", "3"),
];

#[test]
fn the_ietf_fields_come_first_then_the_separate_ones_then_the_x_family() {
    let ietf = [("RateLimit", r#""default";r=10;t=1"#)];
    let all: Vec<_> = [&ietf[..], &SEPARATE, &X_FAMILY].concat();
    assert_eq!(read(&all), Some(q(10, 1)));
    let two: Vec<_> = [&X_FAMILY[..], &SEPARATE].concat();
    assert_eq!(read(&two), Some(q(20, 2).with_limit(200)));
    assert_eq!(read(&X_FAMILY), Some(q(30, 3).with_limit(300)));
    assert_eq!(read(&[]), None);
}

#[test]
fn a_malformed_dialect_gives_way_to_the_next() {
    // Every RateLimit member malformed, or the field not a List: the separate fields count.
    for limits in [
        r#""a";r=-1;t=1, "b";t=1"#,
        r#""a";r=1;t=1;"#,
        "",
        "limit=10, remaining=1",
    ] {
        let fields: Vec<_> = [&[("RateLimit", limits)][..], &SEPARATE].concat();
        assert_eq!(read(&fields), Some(q(20, 2).with_limit(200)), "{limits:?}");
    }
    // RateLimit-Policy alone announces nothing.
    let fields: Vec<_> = [&[("RateLimit-Policy", BOTH_POLICIES)][..], &X_FAMILY].concat();
    assert_eq!(read(&fields), Some(q(30, 3).with_limit(300)));

    // A malformed remaining or reset in the separate fields: the X family counts.
    for (name, value) in [
        ("RateLimit-Remaining", "lots"),
        ("RateLimit-Reset", "-2"),
        ("RateLimit-Reset", "2.5"),
    ] {
        let mut fields: Vec<_> = SEPARATE
            .iter()
            .filter(|(n, _)| *n != name)
            .copied()
            .collect();
        fields.push((name, value));
        fields.extend(X_FAMILY);
        assert_eq!(
            read(&fields),
            Some(q(30, 3).with_limit(300)),
            "{name}: {value}"
        );
    }
    // A remaining count without a reset is no quota.
    let fields = [("RateLimit-Remaining", "20"), ("RateLimit-Limit", "200")];
    assert_eq!(read(&fields), None);
    let fields = [
        ("X-RateLimit-Remaining", "20"),
        ("X-RateLimit-Limit", "200"),
    ];
    assert_eq!(read(&fields), None);
    // A reset and a limit without a remaining count neither.
    let fields = [("X-RateLimit-Reset", "20"), ("X-RateLimit-Limit", "200")];
    assert_eq!(read(&fields), None);
}

// ---- the separate RateLimit-* fields ----

#[test]
fn separate_fields_read_the_limit_and_the_window_of_a_policy_list() {
    let read_limit = |limit: &str| {
        read(&[
            ("RateLimit-Limit", limit),
            ("RateLimit-Remaining", "7"),
            ("RateLimit-Reset", "4"),
        ])
    };
    let seven = q(7, 4);
    for (limit, expected) in [
        ("10", seven.with_limit(10)),
        (" 10 ", seven.with_limit(10)),
        (
            "10, 10;w=1, 1000;w=3600",
            seven.with_limit(10).with_window(secs(1)),
        ),
        ("100;w=60", seven.with_limit(100).with_window(secs(60))),
        ("10, 1000;w=3600", seven.with_limit(10)),
        ("10, 10;w=0, 10;w=5", seven.with_limit(10)),
        ("10, 10;w=31536001", seven.with_limit(10)),
        // Unreadable: left out.
        ("ten", seven),
        ("-10", seven),
        ("1.5", seven),
        ("\"10\"", seven),
        ("10;w=", seven),
    ] {
        assert_eq!(read_limit(limit), Some(expected), "{limit:?}");
    }
}

#[test]
fn separate_fields_take_whole_seconds_within_a_year() {
    let read_reset =
        |reset: &str| read(&[("RateLimit-Remaining", "7"), ("RateLimit-Reset", reset)]);
    assert_eq!(read_reset("0"), Some(q(7, 0)));
    assert_eq!(read_reset("\t30 "), Some(q(7, 30)));
    assert_eq!(read_reset("31536000"), Some(q(7, YEAR)));
    // A Unix time here is taken as seconds, more than a year of them.
    for malformed in [
        "31536001",
        "1700000060",
        "1.5",
        "-1",
        "+1",
        "",
        "soon",
        "99999999999999999999999",
    ] {
        assert_eq!(read_reset(malformed), None, "{malformed:?}");
    }
}

// ---- the X-RateLimit-* family ----

/// The quota announced by `X-RateLimit-Remaining: 5` and this `X-RateLimit-Reset`, at `now`.
fn x_reset(reset: &str, now: u64) -> Option<Quota> {
    let fields = [("X-RateLimit-Remaining", "5"), ("X-RateLimit-Reset", reset)];
    quota_at(&headers(&fields), at(now))
}

#[test]
fn an_x_reset_is_seconds_below_a_billion_and_a_unix_time_from_it() {
    assert_eq!(x_reset("60", NOW), Some(q(5, 60)));
    assert_eq!(x_reset("1700000060", NOW), Some(q(5, 60)));
    // At the threshold, with the clock just before it: a Unix time 1,000 s ahead...
    assert_eq!(x_reset("1000000000", 999_999_000), Some(q(5, 1000)));
    // ...and one below it is seconds: nearly 32 years of them, too long.
    assert_eq!(x_reset("999999999", 999_999_000), None);
    // Up to a year of seconds.
    assert_eq!(x_reset("31536000", NOW), Some(q(5, YEAR)));
    assert_eq!(x_reset("31536001", NOW), None);
    // A Unix time a year ahead, but not more.
    let year_on = (NOW + YEAR).to_string();
    assert_eq!(x_reset(&year_on, NOW), Some(q(5, YEAR)));
    let too_far = (NOW + YEAR + 1).to_string();
    assert_eq!(x_reset(&too_far, NOW), None);
}

#[test]
fn an_x_reset_already_past_is_zero() {
    assert_eq!(x_reset("1699999990", NOW), Some(q(5, 0)));
    assert_eq!(x_reset("1700000000", NOW), Some(q(5, 0)));
    assert_eq!(x_reset("1000000000", NOW), Some(q(5, 0)));
}

#[test]
fn an_x_reset_may_have_a_fraction_of_any_length_read_to_the_nanosecond() {
    let (ms, ns) = (Duration::from_millis, Duration::from_nanos);
    for (reset, expected) in [
        ("1.234", ms(1234)),
        ("1.5", ms(1500)),
        ("0.05", ms(50)),
        ("0.000", ms(0)),
        (" 2.25\t", ms(2250)),
        ("1.2345", ns(1_234_500_000)),
        ("0.1234567891234", ns(123_456_789)),
        // A Unix time with a fraction, and the clock on a whole second.
        ("1700000002.5", ms(2500)),
        // Python's `time.time()`, as slowapi sends it.
        ("1700000001.2404528", ns(1_240_452_800)),
    ] {
        assert_eq!(
            x_reset(reset, NOW),
            Some(Quota::new(5, expected)),
            "{reset:?}"
        );
    }
    for malformed in ["1.", ".5", "1..5", "1.5.", "1,5", "1.5e3", "-1.5", "1. 5"] {
        assert_eq!(x_reset(malformed, NOW), None, "{malformed:?}");
    }
    // The clock between seconds: the wait is counted from it exactly.
    let now = at(NOW) + Duration::from_millis(400);
    let fields = [
        ("X-RateLimit-Remaining", "5"),
        ("X-RateLimit-Reset", "1700000001"),
    ];
    assert_eq!(
        quota_at(&headers(&fields), now),
        Some(Quota::new(5, Duration::from_millis(600)))
    );
}

#[test]
fn x_reset_after_comes_before_x_reset() {
    fn fields(after: &str) -> [(&str, &str); 3] {
        [
            ("X-RateLimit-Remaining", "5"),
            ("X-RateLimit-Reset", "1700000060"),
            ("X-RateLimit-Reset-After", after),
        ]
    }
    assert_eq!(
        read(&fields("1.5")),
        Some(Quota::new(5, Duration::from_millis(1500)))
    );
    assert_eq!(read(&fields("0")), Some(q(5, 0)));
    // Unreadable, or too long: X-RateLimit-Reset counts.
    for malformed in ["soon", "-1", "31536001", "1700000060"] {
        assert_eq!(read(&fields(malformed)), Some(q(5, 60)), "{malformed:?}");
    }
    // Alone, it is enough.
    let fields = [
        ("X-RateLimit-Remaining", "5"),
        ("X-RateLimit-Reset-After", "2"),
    ];
    assert_eq!(read(&fields), Some(q(5, 2)));
}

#[test]
fn x_remaining_and_limit_are_whole_numbers() {
    let read_x = |remaining: &str, limit: &str| {
        read(&[
            ("X-RateLimit-Limit", limit),
            ("X-RateLimit-Remaining", remaining),
            ("X-RateLimit-Reset", "9"),
        ])
    };
    assert_eq!(read_x("40", "100"), Some(q(40, 9).with_limit(100)));
    assert_eq!(read_x(" 040\t", "\t100 "), Some(q(40, 9).with_limit(100)));
    assert_eq!(read_x("0", "0"), Some(q(0, 9).with_limit(0)));
    // More left than the limit: kept as told.
    assert_eq!(read_x("150", "100"), Some(q(150, 9).with_limit(100)));
    assert_eq!(
        read_x("18446744073709551615", "18446744073709551615"),
        Some(q(u64::MAX, 9).with_limit(u64::MAX))
    );
    for malformed in [
        "-1",
        "+1",
        "1.0",
        "",
        "lots",
        "1 2",
        "0x10",
        "18446744073709551616",
    ] {
        assert_eq!(read_x(malformed, "100"), None, "remaining {malformed:?}");
        assert_eq!(
            read_x("40", malformed),
            Some(q(40, 9)),
            "limit {malformed:?}"
        );
    }
    // Bytes beyond ASCII.
    let mut fields = headers(&[("X-RateLimit-Reset", "9")]);
    fields.insert(
        "x-ratelimit-remaining",
        HeaderValue::from_bytes(b"4\xff").unwrap(),
    );
    assert_eq!(quota_at(&fields, at(NOW)), None);
}

#[test]
fn only_the_first_separate_field_of_a_name_counts() {
    let fields = [
        ("X-RateLimit-Remaining", "5"),
        ("X-RateLimit-Remaining", "6"),
        ("X-RateLimit-Reset", "7"),
        ("X-RateLimit-Reset", "8"),
    ];
    assert_eq!(read(&fields), Some(q(5, 7)));
    let fields = [
        ("RateLimit-Remaining", "lots"),
        ("RateLimit-Remaining", "6"),
        ("RateLimit-Reset", "7"),
    ];
    assert_eq!(read(&fields), None);
}

#[test]
fn quota_measures_a_unix_time_against_the_wall_clock() {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let reset = (now + 3600).to_string();
    let fields = headers(&[
        ("X-RateLimit-Remaining", "5"),
        ("X-RateLimit-Reset", &reset),
    ]);
    let resets_in = quota(&fields).unwrap().resets_in();
    // Within the second `now` was read in, give or take a slow machine.
    assert!(
        resets_in <= secs(3600) && resets_in > secs(3500),
        "{resets_in:?}"
    );
}

// ---- properties ----

/// Every field name read.
const NAMES: [&str; 9] = [
    "ratelimit",
    "ratelimit-policy",
    "ratelimit-limit",
    "ratelimit-remaining",
    "ratelimit-reset",
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
    "x-ratelimit-reset-after",
];

/// Values that look like what the fields hold, often nearly well-formed.
fn value_shaped() -> impl Strategy<Value = Vec<u8>> {
    let number = prop_oneof![
        "-?[0-9]{1,20}(\\.[0-9]{0,4})?",
        Just("999999999999999".to_owned()),
        Just("1000000000".to_owned()),
    ];
    let member = (
        "\"[a-z]{0,3}\"|[a-z]{1,3}|[0-9]{1,3}",
        prop::collection::vec(
            ("[a-z]{1,2}", number.clone()).prop_map(|(k, v)| format!(";{k}={v}")),
            0..4,
        ),
    )
        .prop_map(|(name, params)| format!("{name}{}", params.concat()));
    let list = prop::collection::vec(member, 0..4).prop_map(|members| members.join(", "));
    prop_oneof![
        number,
        list,
        header_bytes(40).prop_map(|b| String::from_utf8_lossy(&b).into_owned())
    ]
    .prop_map(|s| s.into_bytes())
    .prop_filter("a valid header value", |b| {
        HeaderValue::from_bytes(b).is_ok()
    })
}

/// A small count, zero often.
fn small() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0u64), 0u64..40]
}

proptest! {
    #![proptest_config(support::regressions_beside_the_file(ProptestConfig::default()))]

    #[test]
    fn no_header_value_makes_it_panic(
        fields in prop::collection::vec(
            (0..NAMES.len(), prop_oneof![header_bytes(40), value_shaped()]),
            0..12,
        ),
        now in any_now(),
    ) {
        let mut headers = HeaderMap::new();
        for (name, value) in fields {
            let value = HeaderValue::from_bytes(&value).expect("the strategies make valid values");
            headers.append(NAMES[name], value);
        }
        if let Some(quota) = quota_at(&headers, now) {
            prop_assert!(quota.resets_in() <= secs(YEAR));
            prop_assert!(quota.window().is_none_or(|w| !w.is_zero() && w <= secs(YEAR)));
        }
    }

    /// The policy chosen is the one a model with floating-point rates picks (exact for these
    /// small numbers).
    #[test]
    fn the_tightest_policy_is_the_lowest_rate(
        policies in prop::collection::vec((small(), small()), 1..6),
    ) {
        let limits = policies
            .iter()
            .enumerate()
            .map(|(i, (r, t))| format!("\"p{i}\";r={r};t={t}"))
            .collect::<Vec<_>>()
            .join(", ");
        let rate = |&(r, t): &(u64, u64)| match (r, t) {
            (0, _) => 0.0,
            (_, 0) => f64::INFINITY,
            (r, t) => r as f64 / t as f64,
        };
        let mut tightest = policies[0];
        for policy in &policies[1..] {
            let (new, old) = (rate(policy), rate(&tightest));
            let later = policy.1 > tightest.1;
            let fewer = policy.1 == tightest.1 && policy.0 < tightest.0;
            if new < old || (new == old && (later || fewer)) {
                tightest = *policy;
            }
        }
        let got = read(&[("RateLimit", &limits)]);
        prop_assert_eq!(got, Some(q(tightest.0, tightest.1)), "{}", limits);
    }
}
