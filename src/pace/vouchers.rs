use tokio::time::Instant;

use crate::time::after;

use crate::rate::Rate;

/// Voucher accounting of a timer-based throttle.
///
/// A period starts when an item comes to an idle throttle (or to one whose period is over) and
/// carries `n` vouchers; each emission spends one. When they are spent, nothing goes out until
/// the period ends; an item waiting then opens the next period at once.
#[derive(Debug, Clone)]
pub(crate) struct Vouchers {
    left: usize,
    /// End of the current or last period; `None` before the first item.
    period_end: Option<Instant>,
}

/// What the voucher rule says of one item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admit {
    /// It goes, spending a voucher of the running period.
    Spent,
    /// It goes, opening a period that ends at this instant.
    Opened(Instant),
    /// It waits: the running period's vouchers are spent until it ends at this instant.
    Wait(Instant),
}

impl Vouchers {
    pub(crate) fn new() -> Self {
        Self {
            left: 0,
            period_end: None,
        }
    }

    /// The whole rule for one item: spend a voucher of the running period; with none left,
    /// wait for its end; if no period runs, open one of `rate` at `now`.
    ///
    /// `may_have_ended` is `false` when the caller knows the running period has not ended (its
    /// timer for the end has not fired), so that no clock is read: `now` is called only when
    /// the answer depends on it, and `rate` only when a period opens.
    #[inline]
    pub(crate) fn admit(
        &mut self,
        may_have_ended: bool,
        now: impl FnOnce() -> Instant,
        rate: impl FnOnce() -> Rate,
    ) -> Admit {
        let open_at = match self.period_end {
            None => Some(now()),
            Some(_) if !may_have_ended => None,
            Some(end) => Some(now()).filter(|&now| now >= end),
        };
        if let Some(at) = open_at {
            let rate = rate();
            let end = after(at, rate.per);
            self.period_end = Some(end);
            self.left = rate.n - 1;
            return Admit::Opened(end);
        }
        if self.left == 0 {
            return Admit::Wait(self.period_end.expect("a period runs"));
        }
        self.left -= 1;
        Admit::Spent
    }

    /// Whether a period ever started: until one has, every item opens one.
    #[inline]
    pub(crate) fn has_period(&self) -> bool {
        self.period_end.is_some()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    fn no_clock() -> Instant {
        panic!("read the clock")
    }

    #[test]
    fn first_item_opens_a_full_period_and_the_next_waits_for_its_end() {
        let t0 = Instant::now();
        let mut v = Vouchers::new();
        let rate = Rate::new(3, SEC);
        assert!(!v.has_period());
        assert_eq!(v.admit(true, || t0, || rate), Admit::Opened(t0 + SEC));
        // Within the period, known to run: vouchers are spent with no clock read.
        assert_eq!(v.admit(false, no_clock, || rate), Admit::Spent);
        assert_eq!(v.admit(false, no_clock, || rate), Admit::Spent);
        assert_eq!(v.admit(false, no_clock, || rate), Admit::Wait(t0 + SEC));
        // Read on the clock before the end: still waiting; at the end, the next period opens.
        assert_eq!(
            v.admit(true, || t0 + SEC / 2, || rate),
            Admit::Wait(t0 + SEC)
        );
        assert_eq!(
            v.admit(true, || t0 + SEC, || rate),
            Admit::Opened(t0 + 2 * SEC)
        );
    }

    #[test]
    fn an_item_after_an_idle_stretch_opens_a_period_at_its_arrival() {
        let t0 = Instant::now();
        let mut v = Vouchers::new();
        let rate = Rate::new(2, SEC);
        v.admit(true, || t0, || rate);
        let late = t0 + Duration::from_millis(2_500);
        assert_eq!(v.admit(true, || late, || rate), Admit::Opened(late + SEC));
        assert_eq!(
            v.admit(false, no_clock, || rate),
            Admit::Spent,
            "a voucher left"
        );
    }

    #[test]
    fn a_new_rate_applies_from_the_next_period() {
        let t0 = Instant::now();
        let mut v = Vouchers::new();
        v.admit(true, || t0, || Rate::new(1, SEC));
        // A bigger rate does not add vouchers to the running period.
        let five = Rate::new(5, 2 * SEC);
        assert_eq!(v.admit(true, || t0, || five), Admit::Wait(t0 + SEC));
        assert_eq!(
            v.admit(true, || t0 + SEC, || five),
            Admit::Opened(t0 + 3 * SEC)
        );
        for _ in 0..4 {
            assert_eq!(v.admit(false, no_clock, || five), Admit::Spent);
        }
        assert_eq!(v.admit(false, no_clock, || five), Admit::Wait(t0 + 3 * SEC));
    }
}
