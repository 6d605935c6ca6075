//! The token bucket decision: `burst` tokens, refilled at a rate that may follow a schedule.

use std::time::Duration;

use tokio::time::Instant;

use crate::announce::Announced;

/// Units of a token: with rates in thousandths of a token per second, one thousandth per
/// second refills exactly one unit per nanosecond, so all the arithmetic is in integers.
const UNIT: u128 = 1_000_000_000_000;

/// A token bucket that starts full at `start` and whose refill rate follows a schedule of
/// `(offset from start, thousandths of a token per second)`, the first at offset zero.
///
/// A request may go when a whole token is in the bucket; it then takes one.
#[derive(Debug, Clone)]
pub(crate) struct TokenBucket {
    start: Instant,
    /// Rate changes, by offset from `start`, increasing; the first is at offset zero.
    schedule: Vec<(Duration, u64)>,
    capacity: u128,
    tokens: u128,
    /// The instant `tokens` was last brought up to date.
    updated: Instant,
}

impl TokenBucket {
    /// A full bucket of `burst` tokens at `start`.
    pub(crate) fn new(start: Instant, burst: u32, schedule: Vec<(Duration, u64)>) -> Self {
        debug_assert!(schedule.first().is_some_and(|&(at, _)| at.is_zero()));
        debug_assert!(schedule.windows(2).all(|w| w[0].0 < w[1].0));
        let capacity = u128::from(burst) * UNIT;
        Self {
            start,
            schedule,
            capacity,
            tokens: capacity,
            updated: start,
        }
    }

    /// `Ok` if a token is available at `now`; otherwise the instant one will be, or `None` if
    /// the schedule never refills one.
    pub(crate) fn check(&mut self, now: Instant) -> Result<(), Option<Instant>> {
        self.refill(now);
        if self.tokens >= UNIT {
            Ok(())
        } else {
            Err(self.available_at(now, UNIT - self.tokens))
        }
    }

    /// Takes a token at `now`; the caller has checked that one is there.
    pub(crate) fn take(&mut self, now: Instant) {
        self.refill(now);
        debug_assert!(self.tokens >= UNIT, "took a token from an empty bucket");
        self.tokens = self.tokens.saturating_sub(UNIT);
    }

    /// The bucket at `now`: whole tokens left, the time until it is full again
    /// (`Duration::MAX` if never), the burst, and the time the current rate takes to fill it
    /// from empty (`Duration::MAX` at a rate of zero).
    pub(crate) fn announce(&mut self, now: Instant) -> Announced {
        self.refill(now);
        let missing = self.capacity - self.tokens;
        let resets_in = if missing == 0 {
            Duration::ZERO
        } else {
            self.available_at(now, missing)
                .map_or(Duration::MAX, |at| at.saturating_duration_since(now))
        };
        let at = self.offset(now.max(self.updated));
        let rate = self
            .schedule
            .iter()
            .rev()
            .find(|&&(from, _)| from <= at)
            .map_or(0, |&(_, rate)| rate);
        let window = match rate {
            0 => Duration::MAX,
            rate => nanos(self.capacity.div_ceil(u128::from(rate))),
        };
        Announced {
            remaining: u64::try_from(self.tokens / UNIT).unwrap_or(u64::MAX),
            resets_in,
            limit: u64::try_from(self.capacity / UNIT).unwrap_or(u64::MAX),
            window,
        }
    }

    /// The schedule's segments as `(from, to, rate)` offsets, the last one endless.
    fn segments(&self) -> impl Iterator<Item = (Duration, Option<Duration>, u64)> + '_ {
        self.schedule
            .iter()
            .enumerate()
            .map(|(i, &(from, rate))| (from, self.schedule.get(i + 1).map(|&(to, _)| to), rate))
    }

    fn refill(&mut self, now: Instant) {
        if now <= self.updated {
            return;
        }
        let (a, b) = (self.offset(self.updated), self.offset(now));
        let mut added: u128 = 0;
        for (from, to, rate) in self.segments() {
            let lo = from.max(a);
            let hi = to.map_or(b, |to| to.min(b));
            if lo < hi {
                added = added.saturating_add((hi - lo).as_nanos() * u128::from(rate));
            }
        }
        self.tokens = self.tokens.saturating_add(added).min(self.capacity);
        self.updated = now;
    }

    /// The instant `missing` units will have been refilled after `now` (or after the last
    /// update, if that is later).
    fn available_at(&self, now: Instant, missing: u128) -> Option<Instant> {
        let at = self.offset(now.max(self.updated));
        let mut missing = missing;
        for (from, to, rate) in self.segments() {
            if to.is_some_and(|to| to <= at) {
                continue;
            }
            let lo = from.max(at);
            let span = to.map(|to| (to - lo).as_nanos());
            if rate > 0 {
                let needed = missing.div_ceil(u128::from(rate));
                if span.is_none_or(|span| needed <= span) {
                    let nanos = u64::try_from(needed).ok()?;
                    return Some(self.start + lo + Duration::from_nanos(nanos));
                }
            }
            missing -= span.unwrap_or(0) * u128::from(rate);
        }
        None
    }

    fn offset(&self, instant: Instant) -> Duration {
        instant.saturating_duration_since(self.start)
    }
}

/// `nanos` nanoseconds, or `Duration::MAX` if that is too long to hold.
fn nanos(nanos: u128) -> Duration {
    u64::try_from(nanos).map_or(Duration::MAX, Duration::from_nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);
    const SEC: Duration = Duration::from_secs(1);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Takes a token at each instant it is available, returning the rejections' answers.
    fn take(bucket: &mut TokenBucket, now: Instant) -> Result<(), Option<Instant>> {
        bucket.check(now).map(|()| bucket.take(now))
    }

    #[test]
    fn starts_full_then_refills_at_the_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(t0, 2, vec![(Duration::ZERO, 4_000)]);
        assert_eq!(take(&mut b, t0), Ok(()));
        assert_eq!(take(&mut b, t0), Ok(()));
        assert_eq!(take(&mut b, t0), Err(Some(t0 + ms(250))));
        assert_eq!(take(&mut b, t0 + ms(249)), Err(Some(t0 + ms(250))));
        assert_eq!(take(&mut b, t0 + ms(250)), Ok(()));
        assert_eq!(take(&mut b, t0 + ms(300)), Err(Some(t0 + ms(500))));
    }

    #[test]
    fn refill_is_capped_at_the_burst() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(t0, 2, vec![(Duration::ZERO, 4_000)]);
        take(&mut b, t0).unwrap();
        take(&mut b, t0).unwrap();
        let later = t0 + 10 * SEC;
        assert_eq!(take(&mut b, later), Ok(()));
        assert_eq!(take(&mut b, later), Ok(()));
        assert_eq!(take(&mut b, later), Err(Some(later + ms(250))));
    }

    #[test]
    fn uneven_rates_round_the_next_token_up_to_the_nanosecond() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(t0, 1, vec![(Duration::ZERO, 3_000)]);
        take(&mut b, t0).unwrap();
        let next = t0 + Duration::from_nanos(333_333_334);
        assert_eq!(take(&mut b, t0), Err(Some(next)));
        assert_eq!(
            take(&mut b, next - Duration::from_nanos(1)),
            Err(Some(next))
        );
        assert_eq!(take(&mut b, next), Ok(()));
    }

    #[test]
    fn refill_follows_the_schedule_across_changes() {
        let t0 = Instant::now();
        // 4/s, 2/s from 1 s, 4/s from 2 s.
        let schedule = vec![(Duration::ZERO, 4_000), (SEC, 2_000), (2 * SEC, 4_000)];
        let mut b = TokenBucket::new(t0, 1, schedule);
        take(&mut b, t0).unwrap();
        // Empty at 0.9 s: 0.1 s at 4/s gives 0.4; 0.3 s at 2/s gives the missing 0.6.
        take(&mut b, t0 + ms(900)).unwrap();
        assert_eq!(take(&mut b, t0 + ms(900)), Err(Some(t0 + ms(1_300))));
        take(&mut b, t0 + ms(1_300)).unwrap();
        assert_eq!(take(&mut b, t0 + ms(1_300)), Err(Some(t0 + ms(1_800))));
        // Empty at 1.9 s: 0.1 s at 2/s gives 0.2; 0.2 s at 4/s gives 0.8.
        take(&mut b, t0 + ms(1_900)).unwrap();
        assert_eq!(take(&mut b, t0 + ms(1_900)), Err(Some(t0 + ms(2_200))));
        assert_eq!(take(&mut b, t0 + ms(2_199)), Err(Some(t0 + ms(2_200))));
        assert_eq!(take(&mut b, t0 + ms(2_200)), Ok(()));
    }

    #[test]
    fn a_zero_rate_waits_for_the_next_change_or_forever() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(
            t0,
            1,
            vec![(Duration::ZERO, 1_000), (SEC, 0), (5 * SEC, 2_000)],
        );
        take(&mut b, t0).unwrap();
        // Half a token at 0.5 s; the other half comes by 1 s, before the rate drops.
        assert_eq!(take(&mut b, t0 + ms(500)), Err(Some(t0 + SEC)));
        take(&mut b, t0 + SEC).unwrap();
        // Empty from 1 s to 5 s, then 2/s.
        assert_eq!(
            take(&mut b, t0 + 2 * SEC),
            Err(Some(t0 + 5 * SEC + ms(500)))
        );
        let mut never = TokenBucket::new(t0, 1, vec![(Duration::ZERO, 0)]);
        take(&mut never, t0).unwrap();
        assert_eq!(take(&mut never, t0 + MS), Err(None));
    }

    #[test]
    fn announces_whole_tokens_and_the_time_to_fill_up() {
        let t0 = Instant::now();
        // 4 tokens, 2 per second (to 10 s), then 0.5 per second.
        let schedule = vec![(Duration::ZERO, 2_000), (10 * SEC, 500)];
        let mut b = TokenBucket::new(t0, 4, schedule);
        let announced = |remaining, resets_in, window| Announced {
            remaining,
            resets_in,
            limit: 4,
            window,
        };
        assert_eq!(b.announce(t0), announced(4, Duration::ZERO, 2 * SEC));
        for _ in 0..3 {
            take(&mut b, t0).unwrap();
        }
        // One token left, three missing: 1.5 s at 2/s.
        assert_eq!(b.announce(t0), announced(1, ms(1_500), 2 * SEC));
        // 0.6 token more at 300 ms: still one whole token.
        assert_eq!(b.announce(t0 + ms(300)), announced(1, ms(1_200), 2 * SEC));
        assert_eq!(b.announce(t0 + ms(500)), announced(2, SEC, 2 * SEC));
        // Empty at 9.5 s: 1 token by 10 s, the other 3 at 0.5/s take 6 s; the window is 8 s.
        for _ in 0..4 {
            take(&mut b, t0 + ms(9_500)).unwrap();
        }
        assert_eq!(b.announce(t0 + ms(9_500)), announced(0, ms(6_500), 2 * SEC));
        assert_eq!(b.announce(t0 + 10 * SEC), announced(1, 6 * SEC, 8 * SEC));
    }

    #[test]
    fn a_bucket_never_refilled_announces_no_reset() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(t0, 2, vec![(Duration::ZERO, 0)]);
        take(&mut b, t0).unwrap();
        let announced = b.announce(t0 + SEC);
        assert_eq!(
            (announced.remaining, announced.resets_in, announced.window),
            (1, Duration::MAX, Duration::MAX)
        );
    }

    #[test]
    fn an_earlier_instant_than_the_last_changes_nothing() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(t0, 1, vec![(Duration::ZERO, 1_000)]);
        take(&mut b, t0 + SEC).unwrap();
        assert_eq!(take(&mut b, t0 + ms(500)), Err(Some(t0 + 2 * SEC)));
    }
}
