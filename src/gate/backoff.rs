use std::time::Duration;

use crate::rng::SplitMix64;

/// How a computed backoff is randomised, so that callers that were throttled together do not
/// all come back at the same instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Jitter {
    /// Anywhere between zero and the computed length ("full jitter"): spreads callers the
    /// most, and is the default.
    #[default]
    Full,
    /// Between half the computed length and all of it.
    Equal,
    /// Exactly the computed length.
    None,
}

/// The backoff schedule for throttles that carry no Retry-After: `base * 2^k`, capped, jittered,
/// where the exponent `k` grows with each throttle and steps back down by one after each run of
/// `decay_after` successes.
#[derive(Debug, Clone)]
pub(crate) struct BackoffSchedule {
    base: Duration,
    cap: Duration,
    jitter: Jitter,
    decay_after: u32,
    exponent: u32,
    streak: u32,
}

impl BackoffSchedule {
    pub(crate) fn new(base: Duration, cap: Duration, jitter: Jitter, decay_after: u32) -> Self {
        Self {
            base,
            cap,
            jitter,
            decay_after,
            exponent: 0,
            streak: 0,
        }
    }

    /// The length of the next backoff, given a uniform draw in `[0, 1)`; raises the exponent.
    pub(crate) fn next(&mut self, draw: f64) -> Duration {
        let full = self
            .base
            .saturating_mul(1u32.checked_shl(self.exponent).unwrap_or(u32::MAX))
            .min(self.cap);
        // Stop raising once the cap is reached, so that decay starts from the cap.
        if full < self.cap {
            self.exponent += 1;
        }
        self.streak = 0;
        match self.jitter {
            Jitter::Full => full.mul_f64(draw),
            Jitter::Equal => full / 2 + (full / 2).mul_f64(draw),
            Jitter::None => full,
        }
    }

    /// Like [`BackoffSchedule::next`], drawing from `rng`.
    pub(crate) fn next_with(&mut self, rng: &mut SplitMix64) -> Duration {
        self.next(rng.next_f64())
    }

    /// Counts a success; a full run of them steps the exponent back down.
    pub(crate) fn on_success(&mut self) {
        if self.exponent == 0 {
            return;
        }
        self.streak += 1;
        if self.streak >= self.decay_after {
            self.exponent -= 1;
            self.streak = 0;
        }
    }

    #[cfg(test)]
    pub(crate) fn exponent(&self) -> u32 {
        self.exponent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn doubles_up_to_the_cap_without_jitter() {
        let mut b = BackoffSchedule::new(100 * MS, 1000 * MS, Jitter::None, 3);
        let lengths: Vec<_> = (0..6).map(|_| b.next(0.5)).collect();
        assert_eq!(
            lengths,
            [100 * MS, 200 * MS, 400 * MS, 800 * MS, 1000 * MS, 1000 * MS]
        );
    }

    #[test]
    fn full_jitter_spans_zero_to_the_computed_length_and_equal_jitter_its_upper_half() {
        let mut full = BackoffSchedule::new(100 * MS, 10_000 * MS, Jitter::Full, 3);
        assert_eq!(full.next(0.0), Duration::ZERO);
        assert_eq!(full.next(0.5), 100 * MS);
        let mut equal = BackoffSchedule::new(100 * MS, 10_000 * MS, Jitter::Equal, 3);
        assert_eq!(equal.next(0.0), 50 * MS);
        assert_eq!(equal.next(0.999_999), 200 * MS - Duration::from_nanos(100));
    }

    #[test]
    fn a_run_of_successes_steps_the_exponent_back_down() {
        let mut b = BackoffSchedule::new(100 * MS, 10_000 * MS, Jitter::None, 2);
        for _ in 0..3 {
            b.next(0.0);
        }
        assert_eq!(b.exponent(), 3);
        b.on_success();
        assert_eq!(b.exponent(), 3);
        b.on_success();
        assert_eq!(b.exponent(), 2);
        // A throttle in the middle of a run starts the run again.
        b.on_success();
        b.next(0.0);
        assert_eq!(b.exponent(), 3);
        for _ in 0..6 {
            b.on_success();
        }
        assert_eq!(b.exponent(), 0);
        assert_eq!(b.next(0.0), 100 * MS);
    }
}
