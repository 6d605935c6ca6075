#![cfg(feature = "http")]
//! The `tracing` event that names the header of each announced-quota field the reader
//! ignores (at warn level the first time a field is ignored in the process, at debug level
//! after), and none for well-formed or absent fields.
//!
//! One test in its own process: `tracing` caches, for the whole process, which callsites a
//! subscriber wants, and tests that ran beside it on other threads (with no subscriber)
//! could have that cache computed without this test's subscriber.

mod support;

use support::headers;

use std::time::{Duration, UNIX_EPOCH};

use paceline::Quota;
use paceline::http::quota_at;

/// The quota these fields announce, at 2023-11-14T22:13:20Z.
fn read(fields: &[(&str, &str)]) -> Option<Quota> {
    quota_at(
        &headers(fields),
        UNIX_EPOCH + Duration::from_secs(1_700_000_000),
    )
}

const X_FAMILY: [(&str, &str); 3] = [
    ("X-RateLimit-Limit", "300"),
    ("X-RateLimit-Remaining", "30"),
    ("X-RateLimit-Reset", "3"),
];

#[test]
fn each_ignored_value_is_told_naming_its_header_first_as_a_warning() {
    let cases: [(&[(&str, &str)], &str); 11] = [
        (&[("RateLimit", r#""a";r=-1;t=1"#)][..], "ratelimit:"),
        (&[("RateLimit", "(")], "ratelimit:"),
        (
            &[
                ("RateLimit-Policy", r#""a";q=-1"#),
                ("RateLimit", r#""a";r=1;t=1"#),
            ],
            "ratelimit-policy:",
        ),
        // A window of no length is no window, and is told as one ignored.
        (
            &[
                ("RateLimit-Policy", r#""a";q=1;w=0"#),
                ("RateLimit", r#""a";r=1;t=1"#),
            ],
            "ratelimit-policy:",
        ),
        (&[("RateLimit-Remaining", "x")], "ratelimit-remaining:"),
        (
            &[("RateLimit-Remaining", "1"), ("RateLimit-Reset", "x")],
            "ratelimit-reset:",
        ),
        (
            &[
                ("RateLimit-Limit", "x"),
                ("RateLimit-Remaining", "1"),
                ("RateLimit-Reset", "1"),
            ],
            "ratelimit-limit:",
        ),
        (&[("X-RateLimit-Remaining", "x")], "x-ratelimit-remaining:"),
        (
            &[("X-RateLimit-Remaining", "1"), ("X-RateLimit-Reset", "x")],
            "x-ratelimit-reset:",
        ),
        (
            &[
                ("X-RateLimit-Remaining", "1"),
                ("X-RateLimit-Reset-After", "x"),
                ("X-RateLimit-Reset", "1"),
            ],
            "x-ratelimit-reset-after:",
        ),
        (
            &[
                ("X-RateLimit-Limit", "x"),
                ("X-RateLimit-Remaining", "1"),
                ("X-RateLimit-Reset", "1"),
            ],
            "x-ratelimit-limit:",
        ),
    ];
    let (events, _guard) = support::events::record();
    tracing::callsite::rebuild_interest_cache();
    // The first value of a field the process ignores is a warning; the next, of the same
    // field, is told at debug level.
    let slowapi_before = [
        ("X-RateLimit-Remaining", "1"),
        ("X-RateLimit-Reset", "1.5e9"),
    ];
    let _ = read(&slowapi_before);
    let _ = read(&slowapi_before);
    let at = |level| events.messages(level, "paceline::http");
    let warned = at(tracing::Level::WARN);
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(warned[0].contains("x-ratelimit-reset:"), "{warned:?}");
    assert!(warned[0].contains("told once at this level"), "{warned:?}");
    assert_eq!(at(tracing::Level::DEBUG).len(), 1);
    // The rest, each field's warning given, at debug level.
    for (fields, _) in cases {
        let _ = read(fields);
    }
    let told = |fields: &[(&str, &str)]| {
        let before = events
            .messages(tracing::Level::DEBUG, "paceline::http")
            .len();
        let _ = read(fields);
        events.messages(tracing::Level::DEBUG, "paceline::http")[before..].to_vec()
    };
    for (fields, header) in cases {
        let told = told(fields);
        assert!(
            told.iter().any(|m| m.contains(header)),
            "{fields:?}: {told:?}"
        );
    }
    // Nothing to tell of well-formed fields, nor of absent ones.
    assert_eq!(told(&X_FAMILY), Vec::<String>::new());
    assert_eq!(told(&[]), Vec::<String>::new());
}
