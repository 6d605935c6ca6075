//! After a gate-wide backoff, calls come back gradually rather than all in one instant: the
//! in-flight limit grows from one call back to the gate's limit over as long as the backoff
//! lasted (at most [`MAX_RAMP`]).
//!
//! Why by time and not by success: against a token bucket with a small burst, what throttles
//! a gate with no rate of its own is how many calls go out before the first "slow down" comes
//! back. Over a short round trip, a limit that grows with each success (slow start) is back
//! at its full width within a few round trips, and the wave that empties the bucket is that
//! wide; a limit that grows with time keeps one call out at a time for as long as the server
//! has just shown it needs, so the first throttle stops the wave after one call.

use std::time::Duration;

use tokio::time::Instant;

/// The longest a resume takes to reach the full in-flight limit, however long the backoff
/// was: a server's 15-minute penalty says little of how fast it takes calls afterwards.
pub(crate) const MAX_RAMP: Duration = Duration::from_secs(10);

/// A resume under way: the in-flight limit grows from 1 at `from` to the gate's limit at
/// `from + over`, one call at a time, evenly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ramp {
    from: Instant,
    over: Duration,
}

impl Ramp {
    /// A resume at `from` after a backoff of `backoff`.
    pub(crate) fn new(from: Instant, backoff: Duration) -> Self {
        Self {
            from,
            over: backoff.min(MAX_RAMP),
        }
    }

    /// The in-flight limit at `now`, out of `max`, and when it next grows (`None`: the ramp
    /// is over, the limit is `max`).
    pub(crate) fn limit(&self, max: usize, now: Instant) -> (usize, Option<Instant>) {
        let elapsed = now.saturating_duration_since(self.from);
        if max <= 1 || elapsed >= self.over {
            return (max, None);
        }
        let steps = (max - 1) as u128;
        let grown = steps * elapsed.as_nanos() / self.over.as_nanos();
        let limit = 1 + grown as usize;
        // The instant the limit reaches `limit + 1`, rounded up to the nanosecond.
        let next = (self.over.as_nanos() * (grown + 1)).div_ceil(steps);
        let next = self.from + Duration::from_nanos(u64::try_from(next).unwrap_or(u64::MAX));
        (limit, Some(next))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_limit_grows_from_one_to_the_full_width_over_the_backoff() {
        let t0 = Instant::now();
        let ramp = Ramp::new(t0, 700 * MS);
        // 8 slots: one more every 100 ms.
        assert_eq!(ramp.limit(8, t0), (1, Some(t0 + 100 * MS)));
        assert_eq!(ramp.limit(8, t0 + 99 * MS), (1, Some(t0 + 100 * MS)));
        assert_eq!(ramp.limit(8, t0 + 100 * MS), (2, Some(t0 + 200 * MS)));
        assert_eq!(ramp.limit(8, t0 + 650 * MS), (7, Some(t0 + 700 * MS)));
        assert_eq!(ramp.limit(8, t0 + 700 * MS), (8, None));
    }

    #[test]
    fn a_long_backoff_ramps_over_the_longest_ramp_only() {
        let t0 = Instant::now();
        let ramp = Ramp::new(t0, Duration::from_secs(900));
        assert_eq!(
            ramp.limit(11, t0 + MAX_RAMP / 10),
            (2, Some(t0 + MAX_RAMP / 5))
        );
        assert_eq!(ramp.limit(11, t0 + MAX_RAMP), (11, None));
    }

    #[test]
    fn a_gate_of_one_slot_or_a_zero_backoff_has_nothing_to_ramp() {
        let t0 = Instant::now();
        assert_eq!(Ramp::new(t0, MAX_RAMP).limit(1, t0), (1, None));
        assert_eq!(Ramp::new(t0, Duration::ZERO).limit(8, t0), (8, None));
    }
}
