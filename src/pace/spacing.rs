use std::time::Duration;

use tokio::time::Instant;

use crate::time::after;

/// Keeps emissions at least `interval` apart, measured from the instant of the last one.
#[derive(Debug, Clone)]
pub(crate) struct Spacing {
    interval: Duration,
    /// The earliest instant of the next emission; `None` while nothing limits it.
    next: Option<Instant>,
}

impl Spacing {
    pub(crate) fn new(interval: Duration) -> Self {
        Self {
            interval,
            next: None,
        }
    }

    /// Whether emissions need the clock at all: with a zero interval nothing is ever held.
    pub(crate) fn is_unlimited(&self) -> bool {
        self.interval.is_zero()
    }

    /// The instant before which nothing may go out, if any.
    pub(crate) fn not_before(&self) -> Option<Instant> {
        self.next
    }

    /// Records an emission at `now`.
    pub(crate) fn record(&mut self, now: Instant) {
        if !self.is_unlimited() {
            self.next = Some(after(now, self.interval));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_gate_admits_at_once_then_holds_for_the_interval() {
        let t0 = Instant::now();
        let mut spacing = Spacing::new(Duration::from_millis(10));
        assert_eq!(spacing.not_before(), None);
        spacing.record(t0);
        assert_eq!(spacing.not_before(), Some(t0 + Duration::from_millis(10)));
        // Spacing counts from the actual emission, not from the deadline it was allowed at.
        spacing.record(t0 + Duration::from_millis(25));
        assert_eq!(spacing.not_before(), Some(t0 + Duration::from_millis(35)));
    }

    #[test]
    fn zero_interval_never_holds() {
        let mut spacing = Spacing::new(Duration::ZERO);
        spacing.record(Instant::now());
        assert!(spacing.is_unlimited());
        assert_eq!(spacing.not_before(), None);
    }
}
