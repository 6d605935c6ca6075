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

impl Vouchers {
    pub(crate) fn new() -> Self {
        Self {
            left: 0,
            period_end: None,
        }
    }

    /// Whether a period is running at `now`.
    pub(crate) fn is_running(&self, now: Instant) -> bool {
        self.period_end.is_some_and(|end| now < end)
    }

    /// Starts a period of `rate` at `now` and spends its first voucher.
    pub(crate) fn start_period(&mut self, now: Instant, rate: Rate) {
        self.period_end = Some(after(now, rate.per));
        self.left = rate.n - 1;
    }

    /// Spends a voucher of the running period; `false` if none is left.
    pub(crate) fn spend(&mut self) -> bool {
        if self.left == 0 {
            return false;
        }
        self.left -= 1;
        true
    }

    /// End of the current or last period, if one ever started.
    pub(crate) fn period_end(&self) -> Option<Instant> {
        self.period_end
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    /// The whole rule on one item at `now`: spend a voucher of the running period, start a new
    /// period if none runs, or say when the running one ends.
    fn admit(v: &mut Vouchers, now: Instant, rate: Rate) -> Result<(), Instant> {
        if !v.is_running(now) {
            v.start_period(now, rate);
            Ok(())
        } else if v.spend() {
            Ok(())
        } else {
            Err(v.period_end().unwrap())
        }
    }

    #[test]
    fn first_item_opens_a_full_period() {
        let t0 = Instant::now();
        let mut v = Vouchers::new();
        let rate = Rate::new(3, SEC);
        assert!(!v.is_running(t0));
        assert_eq!(admit(&mut v, t0, rate), Ok(()));
        assert_eq!(admit(&mut v, t0, rate), Ok(()));
        assert_eq!(admit(&mut v, t0, rate), Ok(()));
        assert!(!v.clone().spend(), "all vouchers spent");
        assert_eq!(admit(&mut v, t0, rate), Err(t0 + SEC));
        // At the period's end a waiting item opens the next period at once.
        assert!(!v.is_running(t0 + SEC));
        assert_eq!(admit(&mut v, t0 + SEC, rate), Ok(()));
        assert_eq!(v.period_end(), Some(t0 + 2 * SEC));
    }

    #[test]
    fn an_item_after_an_idle_stretch_opens_a_period_at_its_arrival() {
        let t0 = Instant::now();
        let mut v = Vouchers::new();
        let rate = Rate::new(2, SEC);
        v.start_period(t0, rate);
        let late = t0 + Duration::from_millis(2_500);
        assert_eq!(admit(&mut v, late, rate), Ok(()));
        assert_eq!(v.period_end(), Some(late + SEC));
        assert!(v.clone().spend(), "a voucher left");
    }

    #[test]
    fn a_new_rate_applies_from_the_next_period() {
        let t0 = Instant::now();
        let mut v = Vouchers::new();
        v.start_period(t0, Rate::new(1, SEC));
        // A bigger rate does not add vouchers to the running period.
        assert_eq!(admit(&mut v, t0, Rate::new(5, SEC)), Err(t0 + SEC));
        assert_eq!(admit(&mut v, t0 + SEC, Rate::new(5, 2 * SEC)), Ok(()));
        assert_eq!(v.period_end(), Some(t0 + 3 * SEC));
    }
}
