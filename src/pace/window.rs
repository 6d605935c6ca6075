use std::collections::VecDeque;

use tokio::time::Instant;

use crate::rate::Rate;

/// Sliding-window bookkeeping: at most `n` emissions in every window of length `per`.
///
/// Emission `i` may go at `emission[i - n] + per` at the earliest, so no window of length
/// `per`, whatever its phase, ever holds more than `n`.
#[derive(Debug, Clone, Default)]
pub(crate) struct SlidingWindow {
    /// The most recent emissions, oldest first; at most `n` are needed.
    sent: VecDeque<Instant>,
}

impl SlidingWindow {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The earliest instant of the next emission under `rate`, or `None` if it may go now.
    pub(crate) fn not_before(&self, rate: Rate) -> Option<Instant> {
        let len = self.sent.len();
        (len >= rate.n).then(|| self.sent[len - rate.n] + rate.per)
    }

    /// Records an emission at `now`, keeping only what `rate` needs.
    pub(crate) fn record(&mut self, now: Instant, rate: Rate) {
        while self.sent.len() >= rate.n {
            self.sent.pop_front();
        }
        self.sent.push_back(now);
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
}
