use std::collections::VecDeque;

use tokio::time::Instant;

use crate::time::after;

use crate::rate::Rate;

/// Sliding-window bookkeeping: at most `n` emissions in every window of length `per`.
///
/// Emission `i` may go at `emission[i - n] + per` at the earliest, so no window of length
/// `per`, whatever its phase, ever holds more than `n`.
///
/// Only the last `n` emissions are kept. A rate with a larger `n` looks further back than
/// that; the emission it needs was then forgotten, and is no later than the newest forgotten
/// one, which stands in for it: the new rate is kept (never early), at worst a little late.
#[derive(Debug, Clone, Default)]
pub(crate) struct SlidingWindow {
    /// The most recent emissions, oldest first; at most `n` are needed.
    sent: VecDeque<Instant>,
    /// The newest emission dropped from `sent`, if any.
    forgotten: Option<Instant>,
    /// How many emissions were ever recorded.
    recorded: usize,
}

impl SlidingWindow {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The earliest instant of the next emission under `rate`, or `None` if it may go now.
    pub(crate) fn not_before(&self, rate: Rate) -> Option<Instant> {
        let len = self.sent.len();
        if len >= rate.n {
            Some(after(self.sent[len - rate.n], rate.per))
        } else if self.recorded >= rate.n {
            // Emission `i - n` was forgotten: it is no later than the newest forgotten one.
            self.forgotten.map(|at| after(at, rate.per))
        } else {
            None
        }
    }

    /// Records an emission at `now`, keeping only what `rate` needs.
    pub(crate) fn record(&mut self, now: Instant, rate: Rate) {
        while self.sent.len() >= rate.n {
            self.forgotten = self.sent.pop_front();
        }
        self.sent.push_back(now);
        self.recorded = self.recorded.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    #[test]
    fn the_n_plus_first_waits_for_the_first_to_leave_the_window() {
        let t0 = Instant::now();
        let rate = Rate::new(2, SEC);
        let mut w = SlidingWindow::new();
        assert_eq!(w.not_before(rate), None);
        w.record(t0, rate);
        assert_eq!(w.not_before(rate), None);
        w.record(t0 + Duration::from_millis(400), rate);
        assert_eq!(w.not_before(rate), Some(t0 + SEC));
        w.record(t0 + SEC, rate);
        assert_eq!(w.not_before(rate), Some(t0 + Duration::from_millis(1_400)));
    }

    #[test]
    fn a_lower_rate_counts_the_emissions_already_made() {
        let t0 = Instant::now();
        let fast = Rate::new(3, SEC);
        let mut w = SlidingWindow::new();
        for ms in [0, 100, 200] {
            w.record(t0 + Duration::from_millis(ms), fast);
        }
        // Down to 1 per 2 s: the next may go 2 s after the latest, not at once.
        assert_eq!(
            w.not_before(Rate::new(1, 2 * SEC)),
            Some(t0 + Duration::from_millis(2_200))
        );
        // Up to 5 per second: only 3 were made, so the next may go now.
        assert_eq!(w.not_before(Rate::new(5, SEC)), None);
    }

    #[test]
    fn a_larger_n_over_a_longer_window_counts_the_forgotten_emissions() {
        let t0 = Instant::now();
        let one = Rate::new(1, SEC);
        let mut w = SlidingWindow::new();
        for s in 0..3 {
            w.record(t0 + s * SEC, one);
        }
        // 2 per 5 s: the emission 2 back (at 1 s) was forgotten; it is the newest forgotten, so
        // the next waits until 6 s instead of making 3 within 5 s.
        assert_eq!(w.not_before(Rate::new(2, 5 * SEC)), Some(t0 + 6 * SEC));
        // 4 per second: the forgotten ones are over a second old, so the next may go now.
        assert!(
            w.not_before(Rate::new(4, SEC))
                .is_none_or(|at| at <= t0 + 2 * SEC)
        );
    }
}
