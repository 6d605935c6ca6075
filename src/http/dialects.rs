//! The readers of each dialect of announced quota, and what they share: the fields' names,
//! the numbers and times they hold, and the events that tell what was ignored. The public
//! readers ([`quota`](super::quota), [`announced`](super::announced)) choose between them.

use std::cmp::Ordering;
use std::fmt;
use std::time::{Duration, SystemTime};

use ::http::header::HeaderName;
use ::http::{HeaderMap, HeaderValue};
use sfv::{Dictionary, Item, List, ListEntry, Parser};

use crate::Quota;
use crate::time::MAX_WAIT;

/// `RateLimit`, the IETF draft's remaining units and reset of each policy.
pub(super) const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// `RateLimit-Policy`, the IETF draft's quota and window of each policy.
pub(super) const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// The older separate fields.
pub(super) const RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("ratelimit-limit");
pub(super) const RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("ratelimit-remaining");
pub(super) const RATELIMIT_RESET: HeaderName = HeaderName::from_static("ratelimit-reset");
/// The `X-RateLimit-*` family.
pub(super) const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
pub(super) const X_RATELIMIT_REMAINING: HeaderName =
    HeaderName::from_static("x-ratelimit-remaining");
pub(super) const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");
pub(super) const X_RATELIMIT_RESET_AFTER: HeaderName =
    HeaderName::from_static("x-ratelimit-reset-after");

/// The smallest `X-RateLimit-Reset` read as a Unix time rather than as seconds to wait:
/// 2001-09-09T01:46:40Z (see the [module docs](self)).
pub(super) const UNIX_TIME_FROM: u64 = 1_000_000_000;

/// One policy of the IETF draft's `RateLimit` field.
#[derive(Debug, Clone, Copy)]
pub(super) struct Reading<'a> {
    name: &'a str,
    remaining: u64,
    /// Seconds until the reset.
    reset: u64,
}

/// One policy the IETF fields announce, read whole.
#[derive(Debug)]
pub(super) struct IetfPolicy {
    pub(super) name: String,
    /// What it counts, if `RateLimit-Policy` says (`qu`).
    pub(super) unit: Option<String>,
    /// Its partition key (`pk`), if either field gives one: whose count it is.
    pub(super) partition: Option<Vec<u8>>,
    pub(super) quota: Quota,
    /// Its remaining count and reset as `RateLimit` gave them, to find the tightest.
    tightness: (u64, u64),
}

impl IetfPolicy {
    fn as_announced(&self) -> Reading<'_> {
        Reading {
            name: &self.name,
            remaining: self.tightness.0,
            reset: self.tightness.1,
        }
    }
}

/// Dialect 1: the tightest policy of `RateLimit`, with its limit and window from the
/// `RateLimit-Policy` of the same name.
pub(super) fn ietf_quota(headers: &HeaderMap) -> Option<Quota> {
    let policies = ietf_policies(headers)?;
    let tightest = policies
        .iter()
        .min_by(|a, b| tightness(&a.as_announced(), &b.as_announced()))?;
    Some(tightest.quota)
}

/// Every policy of `RateLimit` with readable `r` and `t`, each with its limit, window and
/// unit from the `RateLimit-Policy` of the same name: `None` if `RateLimit` is absent,
/// unreadable, or has no such policy (told).
pub(super) fn ietf_policies(headers: &HeaderMap) -> Option<Vec<IetfPolicy>> {
    if ratelimit_dictionary(headers).is_some() {
        // An earlier revision's form: see `dictionary_quota`.
        return None;
    }
    let limits = structured_list(headers, &RATELIMIT)?;
    let announced: Vec<_> = limits.iter().filter_map(reading).collect();
    if announced.is_empty() {
        ignored(&RATELIMIT, "no policy with a readable r and t");
        return None;
    }
    let policies = structured_list(headers, &RATELIMIT_POLICY).unwrap_or_default();
    let read = |policy: Reading<'_>| {
        let mut quota = Quota::new(policy.remaining, Duration::from_secs(policy.reset));
        let mut unit = None;
        let named = named_in(&policies, policy.name);
        let partition_of = |item: &Item| {
            let pk = item.params.get("pk")?;
            pk.as_byte_sequence().map(<[u8]>::to_vec)
        };
        let partition = (named.and_then(partition_of))
            .or_else(|| named_in(&limits, policy.name).and_then(partition_of));
        if let Some(named) = named {
            if let Some(limit) = parameter(named, "q", &RATELIMIT_POLICY) {
                quota = quota.with_limit(limit);
            }
            if let Some(window) = parameter(named, "w", &RATELIMIT_POLICY) {
                match seconds_within_a_year(window) {
                    Some(window) if !window.is_zero() => quota = quota.with_window(window),
                    _ => ignored(&RATELIMIT_POLICY, format_args!("a window of {window} s")),
                }
            }
            unit = named.params.get("qu").and_then(|unit| {
                let text = unit.as_string().map(|s| s.as_str());
                text.or_else(|| unit.as_token().map(|t| t.as_str()))
                    .map(str::to_owned)
            });
        }
        IetfPolicy {
            name: policy.name.to_owned(),
            unit,
            partition,
            quota,
            tightness: (policy.remaining, policy.reset),
        }
    };
    Some(announced.into_iter().map(read).collect())
}

/// The item of `list` that names the policy `name`.
fn named_in<'a>(list: &'a [ListEntry], name: &str) -> Option<&'a Item> {
    list.iter().find_map(|entry| match entry {
        ListEntry::Item(item) if policy_name(item) == Some(name) => Some(item),
        _ => None,
    })
}

/// A `RateLimit` member that names a policy and gives readable `r` and `t`.
pub(super) fn reading(entry: &ListEntry) -> Option<Reading<'_>> {
    let ListEntry::Item(item) = entry else {
        ignored(&RATELIMIT, "an inner list, where a policy was due");
        return None;
    };
    let Some(name) = policy_name(item) else {
        ignored(&RATELIMIT, "a policy not named by a String");
        return None;
    };
    if let Some(key) = ["r", "t"]
        .into_iter()
        .find(|key| !item.params.contains_key(*key))
    {
        ignored(&RATELIMIT, format_args!("a policy without {key}"));
        return None;
    }
    let remaining = parameter(item, "r", &RATELIMIT)?;
    let reset = parameter(item, "t", &RATELIMIT)?;
    if seconds_within_a_year(reset).is_none() {
        ignored(&RATELIMIT, format_args!("a reset in {reset} s"));
        return None;
    }
    Some(Reading {
        name,
        remaining,
        reset,
    })
}

/// Orders two policies by how tight they are, the tightest first: the lowest rate `r / t` (with
/// nothing left, a rate of zero; reset now with units left, an unbounded one), then the latest
/// reset, then the fewest left (which only tells apart policies that both reset now).
pub(super) fn tightness(a: &Reading<'_>, b: &Reading<'_>) -> Ordering {
    let later_reset_first = b.reset.cmp(&a.reset);
    match (a.remaining, b.remaining, a.reset, b.reset) {
        (0, 0, _, _) => later_reset_first,
        (0, _, _, _) => Ordering::Less,
        (_, 0, _, _) => Ordering::Greater,
        // Both reset now, with units left: the fewer left first.
        (_, _, 0, 0) => a.remaining.cmp(&b.remaining),
        (_, _, 0, _) => Ordering::Greater,
        (_, _, _, 0) => Ordering::Less,
        // a.r / a.t against b.r / b.t, multiplied out: each product is below 2^75.
        (ar, br, at, bt) => (u128::from(ar) * u128::from(bt))
            .cmp(&(u128::from(br) * u128::from(at)))
            .then(later_reset_first),
    }
}

/// The policy an IETF member names: its bare item, a String.
pub(super) fn policy_name(item: &Item) -> Option<&str> {
    item.bare_item.as_string().map(|name| name.as_str())
}

/// An IETF member's parameter `key`, a non-negative Integer; `None` (with a debug event naming
/// `field` if it is there but unreadable) otherwise.
pub(super) fn parameter(item: &Item, key: &str, field: &HeaderName) -> Option<u64> {
    let value = item.params.get(key)?;
    let number = value.as_integer().and_then(|n| u64::try_from(n).ok());
    if number.is_none() {
        ignored(field, format_args!("{key}={value:?}, not a whole number"));
    }
    number
}

/// All the lines of a List field, joined as RFC 9110 §5.3 lets a recipient: `None` if there
/// are none, or (with a debug event) if they do not parse.
pub(super) fn structured_list(headers: &HeaderMap, name: &HeaderName) -> Option<List> {
    let joined = joined_lines(headers, name)?;
    match Parser::new(&joined).parse::<List>() {
        Ok(list) => Some(list),
        Err(error) => {
            ignored(name, format_args!("not a structured-field List ({error})"));
            None
        }
    }
}

/// All the lines of field `name`, joined by commas; `None` if there are none.
pub(super) fn joined_lines(headers: &HeaderMap, name: &HeaderName) -> Option<Vec<u8>> {
    let mut lines = headers.get_all(name).iter();
    let mut joined = lines.next()?.as_bytes().to_vec();
    for line in lines {
        joined.extend_from_slice(b", ");
        joined.extend_from_slice(line.as_bytes());
    }
    Some(joined)
}

/// `RateLimit` as an earlier revision of the draft sends it, one Dictionary
/// (`limit=100, remaining=50, reset=30`), if it is one that has `remaining`.
pub(super) fn ratelimit_dictionary(headers: &HeaderMap) -> Option<Dictionary> {
    let joined = joined_lines(headers, &RATELIMIT)?;
    let dictionary: Dictionary = Parser::new(&joined).parse().ok()?;
    dictionary.contains_key("remaining").then_some(dictionary)
}

/// Dialect 1, as an earlier revision of the draft sends it: `RateLimit` one Dictionary of
/// `remaining`, `reset` (seconds) and `limit`, and the window from the `w` of a
/// `RateLimit-Policy` such as `100;w=60`, when readable.
pub(super) fn dictionary_quota(headers: &HeaderMap) -> Option<Quota> {
    let dictionary = ratelimit_dictionary(headers)?;
    let number = |key: &str| match dictionary.get(key)? {
        ListEntry::Item(item) => item
            .bare_item
            .as_integer()
            .and_then(|n| u64::try_from(n).ok()),
        ListEntry::InnerList(_) => None,
    };
    let Some(remaining) = number("remaining") else {
        ignored(&RATELIMIT, "remaining=, not a whole number");
        return None;
    };
    let Some(reset) = number("reset").and_then(seconds_within_a_year) else {
        ignored(
            &RATELIMIT,
            "no reset= of seconds within a year beside remaining=",
        );
        return None;
    };
    let mut quota = Quota::new(remaining, reset);
    if let Some(limit) = number("limit") {
        quota = quota.with_limit(limit);
    }
    let policy = headers.get(RATELIMIT_POLICY).and_then(policy_limit);
    if let Some((_, Some(window))) = policy {
        quota = quota.with_window(window);
    }
    Some(quota)
}

/// Dialect 2: `RateLimit-Remaining` and `RateLimit-Reset` (whole seconds), and
/// `RateLimit-Limit` if readable.
pub(super) fn separate_quota(headers: &HeaderMap) -> Option<Quota> {
    let remaining = required_number(headers, &RATELIMIT_REMAINING)?;
    let Some(reset) = headers.get(RATELIMIT_RESET) else {
        ignored(&RATELIMIT_REMAINING, "no RateLimit-Reset beside it");
        return None;
    };
    let Some(reset) = whole_number(reset).and_then(seconds_within_a_year) else {
        ignored(&RATELIMIT_RESET, "not a number of seconds within a year");
        return None;
    };
    let mut quota = Quota::new(remaining, reset);
    if let Some(limit) = headers.get(RATELIMIT_LIMIT) {
        match policy_limit(limit) {
            Some((limit, window)) => {
                quota = quota.with_limit(limit);
                if let Some(window) = window {
                    quota = quota.with_window(window);
                }
            }
            None => ignored(&RATELIMIT_LIMIT, "not a whole number first"),
        }
    }
    Some(quota)
}

/// A `RateLimit-Limit` value, `10` or a policy list `10, 10;w=1, 1000;w=3600`: its first
/// number, and the `w` of the first member of that same number that has a readable one.
pub(super) fn policy_limit(value: &HeaderValue) -> Option<(u64, Option<Duration>)> {
    let list = Parser::new(value.as_bytes()).parse::<List>().ok()?;
    let number = |entry: &ListEntry| match entry {
        ListEntry::Item(item) => item
            .bare_item
            .as_integer()
            .and_then(|n| u64::try_from(n).ok()),
        ListEntry::InnerList(_) => None,
    };
    let limit = number(list.first()?)?;
    let window = list
        .iter()
        .filter(|entry| number(entry) == Some(limit))
        .filter_map(|entry| match entry {
            ListEntry::Item(item) => item.params.get("w")?.as_integer(),
            ListEntry::InnerList(_) => None,
        })
        .find_map(|w| u64::try_from(w).ok().and_then(seconds_within_a_year))
        .filter(|w| !w.is_zero());
    Some((limit, window))
}

/// The fields of one `X-RateLimit-*` family: the unnamed one, or one a policy's name ends.
pub(super) struct XFamily {
    remaining: HeaderName,
    reset: HeaderName,
    reset_after: HeaderName,
    limit: HeaderName,
}

/// The suffixes of OpenAI's families, which name dimensions, not policies.
const OPENAI_SUFFIXES: [&str; 2] = ["requests", "tokens"];

/// How many policies' families one answer is read for, at most: a server names a few.
const MOST_NAMED_FAMILIES: usize = 16;

impl XFamily {
    /// `X-RateLimit-Remaining`, `-Reset`, `-Reset-After` and `-Limit`.
    pub(super) fn unnamed() -> Self {
        XFamily {
            remaining: X_RATELIMIT_REMAINING,
            reset: X_RATELIMIT_RESET,
            reset_after: X_RATELIMIT_RESET_AFTER,
            limit: X_RATELIMIT_LIMIT,
        }
    }

    /// The family whose fields end in `-{policy}`, as NestJS's throttler names each of its
    /// throttlers' (`X-RateLimit-Remaining-short`): `None` for a name no field can end in.
    fn named(policy: &str) -> Option<Self> {
        let field = |part: &str| HeaderName::try_from(format!("x-ratelimit-{part}-{policy}")).ok();
        Some(XFamily {
            remaining: field("remaining")?,
            reset: field("reset")?,
            reset_after: field("reset-after")?,
            limit: field("limit")?,
        })
    }

    /// The policies whose families `headers` hold, by their names, in the order of the names
    /// (the first [`MOST_NAMED_FAMILIES`]): each `X-RateLimit-Remaining-{policy}` but
    /// OpenAI's.
    pub(super) fn named_in(headers: &HeaderMap) -> Vec<(String, Self)> {
        let mut policies: Vec<&str> = (headers.keys())
            .filter_map(|name| name.as_str().strip_prefix("x-ratelimit-remaining-"))
            .filter(|policy| !policy.is_empty() && !OPENAI_SUFFIXES.contains(policy))
            .collect();
        policies.sort_unstable();
        policies.dedup();
        (policies.into_iter().take(MOST_NAMED_FAMILIES))
            .filter_map(|policy| Some((policy.to_owned(), XFamily::named(policy)?)))
            .collect()
    }

    /// Dialect 3: its remaining count and a reset, from its `-Reset-After` (seconds) if
    /// readable, else from its `-Reset` (seconds or a Unix time); and its limit if readable.
    pub(super) fn quota(&self, headers: &HeaderMap, now: SystemTime) -> Option<Quota> {
        let remaining = required_number(headers, &self.remaining)?;
        let after = headers.get(&self.reset_after).and_then(|value| {
            let after = decimal_seconds(value).and_then(within_a_year);
            if after.is_none() {
                ignored(&self.reset_after, "not a number of seconds within a year");
            }
            after
        });
        let reset = match after {
            Some(after) => after,
            None => {
                let Some(reset) = headers.get(&self.reset) else {
                    ignored(&self.remaining, "no readable reset beside it");
                    return None;
                };
                let reset = decimal_seconds(reset).and_then(|reset| {
                    if reset.as_secs() < UNIX_TIME_FROM {
                        return within_a_year(reset);
                    }
                    let at = SystemTime::UNIX_EPOCH.checked_add(reset)?;
                    within_a_year(at.duration_since(now).unwrap_or(Duration::ZERO))
                });
                let Some(reset) = reset else {
                    ignored(&self.reset, "neither seconds nor a Unix time within a year");
                    return None;
                };
                reset
            }
        };
        let mut quota = Quota::new(remaining, reset);
        if let Some(limit) = headers.get(&self.limit) {
            match whole_number(limit) {
                Some(limit) => quota = quota.with_limit(limit),
                None => ignored(&self.limit, "not a whole number"),
            }
        }
        Some(quota)
    }
}

/// The tightest quota of the `X-RateLimit-*` families, the unnamed one and each a policy
/// names (see [`tightness`], reading a reset with a fraction as the next whole second).
pub(super) fn x_quota(headers: &HeaderMap, now: SystemTime) -> Option<Quota> {
    let named = XFamily::named_in(headers)
        .into_iter()
        .map(|(_, family)| family);
    let quotas = std::iter::once(XFamily::unnamed())
        .chain(named)
        .filter_map(|family| family.quota(headers, now));
    let reading = |quota: &Quota| Reading {
        name: "",
        remaining: quota.remaining(),
        reset: quota.resets_in().as_secs() + u64::from(quota.resets_in().subsec_nanos() > 0),
    };
    quotas.min_by(|a, b| tightness(&reading(a), &reading(b)))
}

/// The first field `name`, a whole number: `None` if there is none, or (with a debug event) if
/// it is unreadable.
pub(super) fn required_number(headers: &HeaderMap, name: &HeaderName) -> Option<u64> {
    let number = whole_number(headers.get(name)?);
    if number.is_none() {
        ignored(name, "not a whole number");
    }
    number
}

/// One or more ASCII digits, with spaces and tabs around, that fit a `u64`.
pub(super) fn whole_number(value: &HeaderValue) -> Option<u64> {
    let text = trimmed(value)?;
    let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    digits.then(|| text.parse().ok()).flatten()
}

/// Whole seconds, or seconds with a fraction of any number of digits (`1.5`, `1.234`, Python's
/// `time.time()` as `1795639198.2404528`), with spaces and tabs around; read to the
/// nanosecond, the digits past it dropped.
pub(super) fn decimal_seconds(value: &HeaderValue) -> Option<Duration> {
    let text = trimmed(value)?;
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    let fraction_ok = text.len() == whole.len() || !fraction.is_empty();
    if !all_digits(whole) || !all_digits(fraction) || !fraction_ok {
        return None;
    }
    let nanos = fraction.bytes().chain(*b"000000000").take(9);
    let nanos = nanos.fold(0, |n, digit| n * 10 + u32::from(digit - b'0'));
    // An empty whole part (`.5`) does not parse.
    Some(Duration::new(whole.parse().ok()?, nanos))
}

/// The value as text without the spaces and tabs around it, if it is visible ASCII and tabs.
pub(super) fn trimmed(value: &HeaderValue) -> Option<&str> {
    Some(value.to_str().ok()?.trim_matches([' ', '\t']))
}

/// `secs` seconds, if that is at most a year ([`MAX_WAIT`]).
pub(super) fn seconds_within_a_year(secs: u64) -> Option<Duration> {
    within_a_year(Duration::from_secs(secs))
}

/// `wait`, if it is at most a year ([`MAX_WAIT`]).
pub(super) fn within_a_year(wait: Duration) -> Option<Duration> {
    (wait <= MAX_WAIT).then_some(wait)
}

/// Tells that a value of field `name` was ignored, and why: at warn level the first time this
/// process ignores one of that field (a server whose quota the gate cannot read is worth
/// knowing of), at debug level after that, so that a server that always sends it does not
/// fill the log.
pub(super) fn ignored(name: &HeaderName, why: impl fmt::Display) {
    static WARNED: Warned = Warned::new();
    if WARNED.first(name) {
        tracing::warn!(target: "paceline::http", header = %name, "ignored {name}: {why} (told once at this level)");
    } else {
        tracing::debug!(target: "paceline::http", header = %name, "ignored {name}: {why}");
    }
}

/// How many fields a warning is given for, at most.
const MOST_WARNED: usize = 64;

/// The fields a warning was given for already.
pub(super) struct Warned(std::sync::Mutex<Vec<HeaderName>>);

impl Warned {
    const fn new() -> Self {
        Self(std::sync::Mutex::new(Vec::new()))
    }

    /// Whether `name` is told of for the first time (and notes that it was).
    fn first(&self, name: &HeaderName) -> bool {
        let mut warned = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Past a few fields (a server may name its fields by policy), each is told at
        // debug level only, and none is kept.
        if warned.contains(name) || warned.len() >= MOST_WARNED {
            return false;
        }
        warned.push(name.clone());
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_is_warned_of_once_and_each_field_apart() {
        let warned = Warned::new();
        assert!(warned.first(&X_RATELIMIT_RESET));
        assert!(!warned.first(&X_RATELIMIT_RESET));
        assert!(warned.first(&::http::header::RETRY_AFTER));
        assert!(!warned.first(&::http::header::RETRY_AFTER));
        assert!(!warned.first(&X_RATELIMIT_RESET));
    }
}
