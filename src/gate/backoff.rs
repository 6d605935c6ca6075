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

/// The backoff schedule: `base * 2^k`, capped, jittered, where the exponent `k` grows with each
/// throttle it handles and steps back down by one after each run of `decay_after` successes.
///
/// It handles every throttle without a Retry-After, and every throttle whose Retry-After is
/// shorter than its next un-jittered length (see [`BackoffSchedule::next_after`]).
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

    /// The un-jittered length of the next backoff: `base * 2^k`, at most the cap.
    fn full(&self) -> Duration {
        self.base
            .saturating_mul(1u32.checked_shl(self.exponent).unwrap_or(u32::MAX))
            .min(self.cap)
    }

    /// The length of the next backoff, given a uniform draw in `[0, 1)`; raises the exponent.
    pub(crate) fn next(&mut self, draw: f64) -> Duration {
        let full = self.full();
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

    /// The length of the backoff for a throttle whose server said to retry after
    /// `retry_after`. One at least as long as the next un-jittered length is kept whole: the
    /// schedule stays as it is and `draw` is not called. A shorter one (a zero from a server
    /// that rounds its seconds down, a date already past) is a throttle the schedule handles:
    /// the exponent rises as in [`BackoffSchedule::next`], and the backoff is the longer of
    /// `retry_after` and the schedule's jittered length.
    pub(crate) fn next_after(
        &mut self,
        retry_after: Duration,
        draw: impl FnOnce() -> f64,
    ) -> Duration {
        if retry_after >= self.full() {
            return retry_after;
        }
        retry_after.max(self.next(draw()))
    }

    /// Whether a success counts for anything: the exponent is above zero, and a full run of
    /// successes steps it down.
    #[inline]
    pub(crate) fn counts_successes(&self) -> bool {
        self.exponent != 0
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
    fn a_retry_after_as_long_as_the_next_length_is_kept_whole_and_leaves_the_schedule_alone() {
        let mut b = BackoffSchedule::new(100 * MS, 1000 * MS, Jitter::Full, 2);
        let never = || -> f64 { panic!("no draw for a Retry-After kept whole") };
        assert_eq!(b.next_after(100 * MS, never), 100 * MS);
        assert_eq!(b.next_after(5000 * MS, never), 5000 * MS);
        assert_eq!(b.exponent(), 0);
        b.next(0.5);
        b.next(0.5);
        // Next un-jittered length 400 ms: 400 ms is kept whole, nothing drawn.
        assert_eq!(b.next_after(400 * MS, never), 400 * MS);
        assert_eq!(b.exponent(), 2);
        // Nor does it break a run of successes.
        b.on_success();
        b.next_after(400 * MS, never);
        b.on_success();
        assert_eq!(b.exponent(), 1);
    }

    #[test]
    fn a_shorter_retry_after_advances_the_schedule_and_waits_the_longer_of_the_two() {
        let mut b = BackoffSchedule::new(100 * MS, 1000 * MS, Jitter::None, 2);
        // A streak of zeros grows as a streak without Retry-After does.
        let lengths: Vec<_> = (0..6)
            .map(|_| b.next_after(Duration::ZERO, || 0.5))
            .collect();
        assert_eq!(
            lengths,
            [100 * MS, 200 * MS, 400 * MS, 800 * MS, 1000 * MS, 1000 * MS]
        );
        // At the cap, 999 ms is shorter than the next length: the schedule's 1000 ms.
        assert_eq!(b.next_after(999 * MS, || 0.5), 1000 * MS);
        // With jitter, the server's word is the floor: the draw may be shorter.
        let mut full = BackoffSchedule::new(100 * MS, 1000 * MS, Jitter::Full, 2);
        full.next(0.0);
        full.next(0.0);
        assert_eq!(full.next_after(300 * MS, || 0.25), 300 * MS);
        assert_eq!(full.exponent(), 3);
        assert_eq!(full.next_after(300 * MS, || 0.5), 400 * MS);
        assert_eq!(full.exponent(), 4);
        // A shorter one is a throttle: it breaks a run of successes.
        full.on_success();
        full.next_after(Duration::ZERO, || 0.0);
        full.on_success();
        assert_eq!(
            full.exponent(),
            4,
            "one success since the throttle, not two"
        );
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
