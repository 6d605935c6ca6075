//! The fixed-window quota decision: `limit` requests per window, windows aligned at the
//! server's start plus a phase.

use std::time::Duration;

use tokio::time::Instant;

use crate::announce::Announced;

/// A fixed-window counter. Windows are `[start + phase + k·window, start + phase + (k+1)·window)`
/// for every integer `k` (so an instant before `start + phase` is in a window that began before
/// `start`); each admits `limit` requests.
#[derive(Debug, Clone)]
pub(crate) struct FixedWindow {
    start: Instant,
    limit: u32,
    /// The window's length in nanoseconds.
    window: u128,
    /// The phase in nanoseconds, reduced to less than one window.
    phase: u128,
    /// The index of the window `count` belongs to.
    current: u128,
    count: u32,
}

impl FixedWindow {
    pub(crate) fn new(start: Instant, limit: u32, window: Duration, phase: Duration) -> Self {
        debug_assert!(!window.is_zero());
        let window = window.as_nanos();
        Self {
            start,
            limit,
            window,
            phase: phase.as_nanos() % window,
            current: 0,
            count: 0,
        }
    }

    /// `Ok` if the window holding `now` has room; otherwise the instant that window ends.
    pub(crate) fn check(&mut self, now: Instant) -> Result<(), Option<Instant>> {
        self.roll(now);
        if self.count < self.limit {
            Ok(())
        } else {
            Err(Some(self.end_of(self.current)))
        }
    }

    /// Counts a request at `now`; the caller has checked that there is room.
    pub(crate) fn take(&mut self, now: Instant) {
        self.roll(now);
        debug_assert!(
            self.count < self.limit,
            "counted a request in a full window"
        );
        self.count += 1;
    }

    /// The window holding `now`: what it has left (after the requests counted so far), when it
    /// ends, and the limit and length of every window.
    pub(crate) fn announce(&mut self, now: Instant) -> Announced {
        self.roll(now);
        Announced {
            remaining: u64::from(self.limit - self.count),
            resets_in: self.end_of(self.current).saturating_duration_since(now),
            limit: u64::from(self.limit),
            window: Duration::from_nanos(u64::try_from(self.window).unwrap_or(u64::MAX)),
        }
    }

    /// The index of the window holding `instant`: window `k` covers offsets
    /// `[(k-1)·window + phase, k·window + phase)` from `start`.
    fn index(&self, instant: Instant) -> u128 {
        let offset = instant.saturating_duration_since(self.start).as_nanos();
        (offset + self.window - self.phase) / self.window
    }

    fn end_of(&self, index: u128) -> Instant {
        let nanos = index * self.window + self.phase;
        self.start + Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    fn roll(&mut self, now: Instant) {
        let index = self.index(now);
        if index > self.current {
            self.current = index;
            self.count = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn take(w: &mut FixedWindow, now: Instant) -> Result<(), Option<Instant>> {
        w.check(now).map(|()| w.take(now))
    }

    #[test]
    fn admits_limit_per_window_aligned_at_start() {
        let t0 = Instant::now();
        let mut w = FixedWindow::new(t0, 2, SEC, Duration::ZERO);
        assert_eq!(take(&mut w, t0), Ok(()));
        assert_eq!(take(&mut w, t0 + ms(10)), Ok(()));
        assert_eq!(take(&mut w, t0 + ms(999)), Err(Some(t0 + SEC)));
        assert_eq!(take(&mut w, t0 + SEC), Ok(()));
        assert_eq!(take(&mut w, t0 + SEC), Ok(()));
        assert_eq!(take(&mut w, t0 + SEC), Err(Some(t0 + 2 * SEC)));
        // An idle stretch of several windows starts afresh.
        assert_eq!(take(&mut w, t0 + ms(7_500)), Ok(()));
    }

    #[test]
    fn a_phase_moves_the_boundaries() {
        let t0 = Instant::now();
        let mut w = FixedWindow::new(t0, 1, SEC, ms(300));
        // [start - 700 ms, start + 300 ms) is the first window.
        assert_eq!(take(&mut w, t0), Ok(()));
        assert_eq!(take(&mut w, t0 + ms(299)), Err(Some(t0 + ms(300))));
        assert_eq!(take(&mut w, t0 + ms(300)), Ok(()));
        assert_eq!(take(&mut w, t0 + ms(1_299)), Err(Some(t0 + ms(1_300))));
        assert_eq!(take(&mut w, t0 + ms(1_300)), Ok(()));
    }

    #[test]
    fn a_phase_of_a_window_or_more_is_taken_modulo_the_window() {
        let t0 = Instant::now();
        let mut w = FixedWindow::new(t0, 1, SEC, ms(2_300));
        assert_eq!(take(&mut w, t0), Ok(()));
        assert_eq!(take(&mut w, t0 + ms(100)), Err(Some(t0 + ms(300))));
    }

    #[test]
    fn announces_what_the_window_holding_now_has_left() {
        let t0 = Instant::now();
        let mut w = FixedWindow::new(t0, 3, SEC, ms(300));
        let announced = |remaining, resets_in| Announced {
            remaining,
            resets_in,
            limit: 3,
            window: SEC,
        };
        // Before the first boundary, in the window [-700, 300).
        assert_eq!(w.announce(t0 + ms(100)), announced(3, ms(200)));
        take(&mut w, t0 + ms(100)).unwrap();
        take(&mut w, t0 + ms(200)).unwrap();
        assert_eq!(w.announce(t0 + ms(250)), announced(1, ms(50)));
        // The boundary starts the next window afresh.
        assert_eq!(w.announce(t0 + ms(300)), announced(3, SEC));
        take(&mut w, t0 + ms(300)).unwrap();
        assert_eq!(w.announce(t0 + ms(1_299)), announced(2, ms(1)));
    }

    #[test]
    fn the_window_boundary_belongs_to_the_next_window() {
        let t0 = Instant::now();
        let mut w = FixedWindow::new(t0, 1, ms(100), Duration::ZERO);
        assert_eq!(take(&mut w, t0 + ms(99)), Ok(()));
        assert_eq!(take(&mut w, t0 + ms(100)), Ok(()));
    }
}
