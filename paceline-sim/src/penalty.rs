//! The escalating penalty decision: over the limit starts a penalty; a request during a
//! penalty restarts it at twice its last length, up to a cap.

use std::time::Duration;

use tokio::time::Instant;

/// An escalating penalty. Every new penalty (one that starts while none is running) lasts
/// `first`; each request arriving while it runs restarts it from that request's arrival, twice
/// as long as the last, but never longer than `cap`.
#[derive(Debug, Clone)]
pub(crate) struct Penalty {
    first: Duration,
    cap: Duration,
    /// The end of the current or last penalty.
    until: Option<Instant>,
    /// The length of the current or last penalty.
    last: Duration,
}

impl Penalty {
    pub(crate) fn new(first: Duration, cap: Duration) -> Self {
        debug_assert!(first <= cap);
        Self {
            first,
            cap,
            until: None,
            last: first,
        }
    }

    /// Whether a penalty is running at `now`.
    pub(crate) fn running(&self, now: Instant) -> bool {
        self.until.is_some_and(|until| now < until)
    }

    /// The end of the penalty running at `now`, if one is.
    pub(crate) fn running_until(&self, now: Instant) -> Option<Instant> {
        self.until.filter(|&until| now < until)
    }

    /// A request arrives at `now` while a penalty runs: the penalty restarts at twice its last
    /// length (up to the cap). Returns the new length, which is also the time until its end.
    pub(crate) fn escalate(&mut self, now: Instant) -> Duration {
        debug_assert!(self.running(now));
        self.last = self.last.saturating_mul(2).min(self.cap);
        self.until = Some(now + self.last);
        self.last
    }

    /// A request over the limit arrives at `now`, while no penalty runs: a penalty of `first`
    /// starts. Returns its length.
    pub(crate) fn start(&mut self, now: Instant) -> Duration {
        debug_assert!(!self.running(now));
        self.last = self.first;
        self.until = Some(now + self.first);
        self.first
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    #[test]
    fn doubles_from_each_request_inside_and_caps() {
        let t0 = Instant::now();
        let mut p = Penalty::new(15 * SEC, 60 * SEC);
        assert!(!p.running(t0));
        assert_eq!(p.start(t0), 15 * SEC);
        assert!(p.running(t0 + 14 * SEC));
        assert_eq!(p.running_until(t0 + 14 * SEC), Some(t0 + 15 * SEC));
        assert_eq!(p.running_until(t0 + 15 * SEC), None);
        assert!(!p.running(t0 + 15 * SEC));
        assert_eq!(p.escalate(t0 + 10 * SEC), 30 * SEC);
        assert!(p.running(t0 + 39 * SEC));
        assert!(!p.running(t0 + 40 * SEC));
        assert_eq!(p.escalate(t0 + 20 * SEC), 60 * SEC);
        assert_eq!(p.escalate(t0 + 21 * SEC), 60 * SEC);
        assert!(!p.running(t0 + 81 * SEC));
    }

    #[test]
    fn a_new_penalty_after_one_ended_starts_at_first_again() {
        let t0 = Instant::now();
        let mut p = Penalty::new(15 * SEC, 900 * SEC);
        p.start(t0);
        p.escalate(t0 + SEC);
        assert_eq!(p.start(t0 + 100 * SEC), 15 * SEC);
        assert_eq!(p.escalate(t0 + 101 * SEC), 30 * SEC);
    }
}
