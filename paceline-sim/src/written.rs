//! Instants and durations as rate-limited APIs write them in their headers: a duration as Go
//! writes one (OpenAI's resets, `6m0s`), an instant as RFC 3339 in UTC (Anthropic's resets,
//! `2026-01-01T00:01:30.500Z`). The simulated servers write their headers with these; a test
//! of a client's own header reading can write what it feeds it with them too.
//!
//! ```
//! use std::time::{Duration, SystemTime};
//! use paceline_sim::written::{go_duration, rfc3339};
//!
//! assert_eq!(go_duration(Duration::from_millis(90_500)), "1m30.5s");
//! assert_eq!(go_duration(Duration::from_micros(1_500)), "1.5ms");
//! let leap_day = SystemTime::UNIX_EPOCH + Duration::from_millis(951_782_400_123);
//! assert_eq!(rfc3339(leap_day), "2000-02-29T00:00:00.123Z");
//! ```

use std::time::{Duration, SystemTime};

/// `d` as Go's `time.Duration` writes it: `0s`; below a second in the largest unit of `ns`,
/// `µs` and `ms` that is at least one (`12ms`, `1.5µs`); otherwise hours and minutes when
/// there are any and seconds with their fraction (`6m0s`, `1h0m0.25s`, `1.5s`).
pub fn go_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    let with_fraction = |whole: u128, fraction: u128, digits: usize| {
        if fraction == 0 {
            return whole.to_string();
        }
        let fraction = format!("{fraction:0digits$}");
        format!("{whole}.{}", fraction.trim_end_matches('0'))
    };
    match nanos {
        0 => "0s".into(),
        1..=999 => format!("{nanos}ns"),
        1_000..=999_999 => format!("{}µs", with_fraction(nanos / 1_000, nanos % 1_000, 3)),
        1_000_000..=999_999_999 => {
            format!(
                "{}ms",
                with_fraction(nanos / 1_000_000, nanos % 1_000_000, 6)
            )
        }
        _ => {
            let secs = d.as_secs();
            let seconds = with_fraction(u128::from(secs % 60), u128::from(d.subsec_nanos()), 9);
            match (secs / 3600, secs / 60 % 60) {
                (0, 0) => format!("{seconds}s"),
                (0, minutes) => format!("{minutes}m{seconds}s"),
                (hours, minutes) => format!("{hours}h{minutes}m{seconds}s"),
            }
        }
    }
}

/// `at` as RFC 3339 writes it, in UTC, to the millisecond; an instant before 1970 is written
/// as 1970's first.
pub fn rfc3339(at: SystemTime) -> String {
    let since = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let (secs, millis) = (since.as_secs(), since.subsec_millis());
    let (days, day) = (secs / 86_400, secs % 86_400);
    // Days to a civil date (Howard Hinnant's algorithm), from 1970-01-01.
    let z = i64::try_from(days).unwrap_or(0) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let (h, mi, s) = (day / 3600, day % 3600 / 60, day % 60);
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{millis:03}Z")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_as_go_writes_them() {
        let ns = Duration::from_nanos;
        let ms = Duration::from_millis;
        let written = [
            (ns(0), "0s"),
            (ns(7), "7ns"),
            (ns(1_500), "1.5µs"),
            (ns(999_999), "999.999µs"),
            (ms(12), "12ms"),
            (ns(12_000_001), "12.000001ms"),
            (ms(1_250), "1.25s"),
            (ms(6_000), "6s"),
            (ms(90_500), "1m30.5s"),
            (ms(360_000), "6m0s"),
            (ms(3_600_250), "1h0m0.25s"),
            (ns(3_723_000_000_001), "1h2m3.000000001s"),
        ];
        for (d, text) in written {
            assert_eq!(go_duration(d), text, "{d:?}");
        }
    }

    #[test]
    fn instants_as_rfc_3339_writes_them() {
        let at = |ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms);
        assert_eq!(rfc3339(at(1_767_225_600_000)), "2026-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(at(951_782_400_123)), "2000-02-29T00:00:00.123Z");
        assert_eq!(rfc3339(at(1_677_628_799_999)), "2023-02-28T23:59:59.999Z");
        assert_eq!(rfc3339(at(0)), "1970-01-01T00:00:00.000Z");
    }
}
