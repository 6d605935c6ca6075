//! Every budget a response announces, in every dimension: the LLM providers' fields (OpenAI's
//! requests and tokens, Anthropic's requests, tokens, input and output tokens) beside the
//! generic dialects that [`quota`](super::quota) reads, each policy of the IETF draft apart.

use std::time::{Duration, SystemTime};

use ::http::HeaderMap;
use ::http::header::HeaderName;

use super::dialects::{
    XFamily, dictionary_quota, ietf_policies, ignored, separate_quota, trimmed, whole_number,
    within_a_year,
};
use crate::{Announcement, Dimension, Quota, Window};

/// The dimensions the LLM providers announce, by the name their fields give each.
const OPENAI: [(&str, Dimension); 2] = [
    ("requests", Dimension::REQUESTS),
    ("tokens", Dimension::TOKENS),
];
const ANTHROPIC: [(&str, Dimension); 4] = [
    ("requests", Dimension::REQUESTS),
    ("tokens", Dimension::TOKENS),
    ("input-tokens", Dimension::INPUT_TOKENS),
    ("output-tokens", Dimension::OUTPUT_TOKENS),
];

/// Every budget `headers` announce, with resets given as times measured against `now`: see
/// [`announced`](super::announced).
pub(super) fn announced_at(headers: &HeaderMap, now: SystemTime) -> Vec<Announcement> {
    let mut all = Vec::new();
    for (name, dimension) in OPENAI {
        let field = |part: &str| format!("x-ratelimit-{part}-{name}");
        all.extend(provider(headers, field, dimension, |text| {
            go_duration(text)
        }));
    }
    for (name, dimension) in ANTHROPIC {
        let field = |part: &str| format!("anthropic-ratelimit-{name}-{part}");
        let until = |text: &str| rfc3339(text).map(|at| wait_until(at, now));
        all.extend(provider(headers, field, dimension, until));
    }
    match ietf_policies(headers) {
        Some(policies) => all.extend(policies.into_iter().map(|policy| {
            let dimension = policy.unit.map_or(Dimension::UNITS, Dimension::new);
            let announced = Announcement::new(dimension, policy.quota).policy(policy.name);
            match policy.partition {
                Some(key) => announced.partition(key),
                None => announced,
            }
        })),
        None => {
            let generic = dictionary_quota(headers)
                .or_else(|| separate_quota(headers))
                .or_else(|| XFamily::unnamed().quota(headers, now));
            all.extend(generic.map(|quota| Announcement::new(Dimension::UNITS, quota)));
            for (policy, family) in XFamily::named_in(headers) {
                let quota = family.quota(headers, now);
                all.extend(
                    quota.map(|quota| Announcement::new(Dimension::UNITS, quota).policy(policy)),
                );
            }
        }
    }
    all
}

/// One provider's budget of `dimension`: its remaining count, its reset (read by `reset`,
/// `None` if unreadable) and its limit, from the fields `field` names for `remaining`,
/// `reset` and `limit`. `None` without a remaining count, or (with an event) if the count or
/// the reset is unreadable.
fn provider(
    headers: &HeaderMap,
    field: impl Fn(&str) -> String,
    dimension: Dimension,
    reset: impl Fn(&str) -> Option<Duration>,
) -> Option<Announcement> {
    let name = |part: &str| HeaderName::from_bytes(field(part).as_bytes()).ok();
    let remaining_name = name("remaining")?;
    let remaining = headers.get(&remaining_name)?;
    let Some(remaining) = whole_number(remaining) else {
        ignored(&remaining_name, "not a whole number");
        return None;
    };
    let reset_name = name("reset")?;
    let resets_in = headers
        .get(&reset_name)
        .and_then(|value| trimmed(value))
        .and_then(reset)
        .and_then(within_a_year);
    let Some(resets_in) = resets_in else {
        ignored(&reset_name, "no readable reset within a year");
        return None;
    };
    let mut quota = Quota::new(remaining, resets_in);
    let limit_name = name("limit")?;
    if let Some(limit) = headers.get(&limit_name) {
        match whole_number(limit) {
            Some(limit) => quota = quota.with_limit(limit),
            None => ignored(&limit_name, "not a whole number"),
        }
    }
    Some(Announcement::new(dimension, quota).window(Window::Refilling))
}

/// A duration as Go writes one (OpenAI's resets): numbers, each with a fraction if need be,
/// followed by a unit of `h`, `m`, `s`, `ms`, `us` (or `µs`) or `ns`, such as `6m0s`,
/// `1m30.5s`, `12ms` or `0s`. Read to the nanosecond; `None` for anything else, or a sum past
/// what a `Duration` holds.
pub(super) fn go_duration(text: &str) -> Option<Duration> {
    let mut rest = text;
    let mut total = Duration::ZERO;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(digits);
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let nanos_per = match unit {
            "h" => 3_600_000_000_000,
            "m" => 60_000_000_000,
            "s" => 1_000_000_000,
            "ms" => 1_000_000,
            "us" | "µs" => 1_000,
            "ns" => 1,
            _ => return None,
        };
        total = total.checked_add(scaled(number, nanos_per)?)?;
        rest = next;
    }
    Some(total)
}

/// `number` (digits, with a fraction if need be) times `nanos_per` nanoseconds.
fn scaled(number: &str, nanos_per: u128) -> Option<Duration> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() && fraction.is_empty()
        || !all_digits(whole)
        || !all_digits(fraction)
        || (number.contains('.') && fraction.is_empty())
    {
        return None;
    }
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let mut nanos = whole.checked_mul(nanos_per)?;
    // Each fraction digit is worth a tenth of the one before, to the nanosecond.
    let mut worth = nanos_per;
    for digit in fraction.bytes() {
        worth /= 10;
        nanos = nanos.checked_add(u128::from(digit - b'0') * worth)?;
    }
    let secs = u64::try_from(nanos / 1_000_000_000).ok()?;
    Some(Duration::new(secs, (nanos % 1_000_000_000) as u32))
}

/// An RFC 3339 date and time (Anthropic's resets), `2025-01-31T23:59:30Z` or with a
/// fraction of a second and an offset (`+01:00`), as a time; `None` for anything else.
pub(super) fn rfc3339(text: &str) -> Option<SystemTime> {
    let bytes = text.as_bytes();
    let number = |range: std::ops::Range<usize>| -> Option<u64> {
        let part = text.get(range)?;
        part.bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| part.parse().ok())
            .flatten()
    };
    let at = |index: usize, expected: &[u8]| bytes.get(index).is_some_and(|b| expected.contains(b));
    if !(at(4, b"-") && at(7, b"-") && at(10, b"Tt ") && at(13, b":") && at(16, b":")) {
        return None;
    }
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        _ => return None,
    };
    // A leap second (60) is read as the second before the next minute's first.
    if day == 0 || day > days_in_month || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut rest = &text[19..];
    let mut nanos = 0u32;
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let padded = fraction[..digits].bytes().chain(*b"000000000").take(9);
        nanos = padded.fold(0, |n, digit| n * 10 + u32::from(digit - b'0'));
        rest = &fraction[digits..];
    }
    let offset: i64 = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let offset = rest.get(1..)?;
            let (hours, minutes) = offset.split_once(':')?;
            let all_digits = |s: &str| s.len() == 2 && s.bytes().all(|b| b.is_ascii_digit());
            if !all_digits(hours) || !all_digits(minutes) {
                return None;
            }
            let (hours, minutes): (i64, i64) = (hours.parse().ok()?, minutes.parse().ok()?);
            if hours > 23 || minutes > 59 {
                return None;
            }
            sign * (hours * 3600 + minutes * 60)
        }
    };
    let days = days_from_civil(year, month, day);
    let local = days * 86_400 + i64::try_from(hour * 3600 + minute * 60 + second).ok()?;
    let secs = u64::try_from(local - offset).ok()?;
    SystemTime::UNIX_EPOCH.checked_add(Duration::new(secs, nanos))
}

/// Days from 1970-01-01 to the date (proleptic Gregorian; Howard Hinnant's algorithm).
fn days_from_civil(year: u64, month: u64, day: u64) -> i64 {
    let (year, month, day) = (year as i64, month as i64, day as i64);
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// How long from `now` until `at`; zero if it has passed.
fn wait_until(at: SystemTime, now: SystemTime) -> Duration {
    at.duration_since(now).unwrap_or(Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_as_openai_writes_them() {
        let ms = Duration::from_millis;
        for (text, expected) in [
            ("6m0s", ms(360_000)),
            ("1m30.5s", ms(90_500)),
            ("12ms", ms(12)),
            ("0s", ms(0)),
            ("2h0m0s", ms(7_200_000)),
            ("1.5s", ms(1_500)),
            ("500us", Duration::from_micros(500)),
            ("500µs", Duration::from_micros(500)),
            ("7ns", Duration::from_nanos(7)),
            ("0.000000001s", Duration::from_nanos(1)),
            (".5s", ms(500)),
        ] {
            assert_eq!(go_duration(text), Some(expected), "{text:?}");
        }
        for malformed in [
            "", "6", "s", "6x", "1.s", "-1s", "1..5s", "1m 30s", "1e3s", "1S",
        ] {
            assert_eq!(go_duration(malformed), None, "{malformed:?}");
        }
        assert_eq!(go_duration("99999999999999999999h"), None);
    }

    #[test]
    fn rfc3339_times_as_anthropic_writes_them() {
        let at = |secs: u64, nanos: u32| Some(SystemTime::UNIX_EPOCH + Duration::new(secs, nanos));
        assert_eq!(rfc3339("1970-01-01T00:00:00Z"), at(0, 0));
        assert_eq!(rfc3339("2023-11-14T22:13:20Z"), at(1_700_000_000, 0));
        assert_eq!(
            rfc3339("2023-11-14T22:13:20.25Z"),
            at(1_700_000_000, 250_000_000)
        );
        assert_eq!(rfc3339("2023-11-14T23:13:20+01:00"), at(1_700_000_000, 0));
        assert_eq!(rfc3339("2023-11-14T21:43:20-00:30"), at(1_700_000_000, 0));
        assert_eq!(rfc3339("2024-02-29T00:00:00Z"), at(1_709_164_800, 0));
        assert_eq!(rfc3339("2000-03-01t00:00:00z"), at(951_868_800, 0));
        for malformed in [
            "",
            "2023-11-14",
            "2023-11-14T22:13:20",
            "2023-02-29T00:00:00Z",
            "2023-13-01T00:00:00Z",
            "2023-11-14T24:00:00Z",
            "2023-11-14T22:13:20.Z",
            "2023-11-14T22:13:20+1:00",
            "2023-11-14T22:13:20+01",
            "1969-12-31T23:59:59Z",
            "2023-11-14T22:13:20Zjunk",
            "+023-11-14T22:13:20Z",
            // Each separator in its place.
            "2023/11-14T22:13:20Z",
            "2023-11/14T22:13:20Z",
            "2023-11-14X22:13:20Z",
            "2023-11-14T22-13:20Z",
            "2023-11-14T22:13-20Z",
            // Past each field's range, and a century that is not a leap year.
            "2023-11-14T22:60:00Z",
            "2023-11-14T22:13:61Z",
            "2023-11-31T00:00:00Z",
            "2100-02-29T00:00:00Z",
            "2023-11-14T22:13:20+24:00",
            "2023-11-14T22:13:20+00:60",
        ] {
            assert_eq!(rfc3339(malformed), None, "{malformed:?}");
        }
        // The last of each range, and a leap century; a February of no leap year.
        assert_eq!(rfc3339("2000-02-29T00:00:00Z"), at(951_782_400, 0));
        assert_eq!(rfc3339("2023-02-28T00:00:00Z"), at(1_677_542_400, 0));
        assert_eq!(rfc3339("2023-11-14T23:59:59Z"), at(1_700_006_399, 0));
        assert_eq!(rfc3339("2023-11-14T23:59:60Z"), at(1_700_006_400, 0));
        assert_eq!(rfc3339("2023-11-15T23:59:59+23:59"), at(1_700_006_459, 0));
    }
}
