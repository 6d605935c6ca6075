//! The gate's rate: call starts spaced by an interval for each unit the previous start spent,
//! fixed or adaptive.

use std::time::Duration;

use tokio::time::Instant;

use super::adaptive::{AdaptiveRate, RateEvent};
use crate::time::{MAX_WAIT, after};

/// The rate at which the gate starts calls, in calls per second.
#[derive(Debug, Clone)]
pub(crate) enum CallRate {
    Fixed(f64),
    Adaptive(AdaptiveRate),
}

impl CallRate {
    pub(crate) fn per_second(&self) -> f64 {
        match self {
            CallRate::Fixed(rate) => *rate,
            CallRate::Adaptive(adaptive) => adaptive.rate(),
        }
    }
}

/// The time between two call starts at `per_second`, at most [`MAX_WAIT`].
pub(crate) fn interval(per_second: f64) -> Duration {
    Duration::try_from_secs_f64(per_second.recip()).map_or(MAX_WAIT, |gap| gap.min(MAX_WAIT))
}

/// The pace of call starts, if the gate has a rate.
#[derive(Debug)]
pub(crate) struct Pace {
    rate: Option<CallRate>,
    /// The time between two starts at `rate`, kept with it so that a start divides nothing.
    interval: Duration,
    last_start: Option<Instant>,
    /// The units the last start spent (and what calls were charged since): the pace waits
    /// `interval` for each.
    last_cost: u64,
}

impl Pace {
    pub(crate) fn new(rate: Option<CallRate>) -> Self {
        let interval = rate
            .as_ref()
            .map_or(Duration::ZERO, |rate| interval(rate.per_second()));
        Self {
            rate,
            interval,
            last_start: None,
            last_cost: 0,
        }
    }

    /// Whether the gate paces calls.
    #[inline]
    pub(crate) fn is_paced(&self) -> bool {
        self.rate.is_some()
    }

    /// The rate, in calls (units) per second, if the gate paces calls.
    #[inline]
    pub(crate) fn per_second(&self) -> Option<f64> {
        self.rate.as_ref().map(CallRate::per_second)
    }

    /// The adaptive rate, if the gate has one.
    pub(crate) fn adaptive(&self) -> Option<&AdaptiveRate> {
        match &self.rate {
            Some(CallRate::Adaptive(rate)) => Some(rate),
            _ => None,
        }
    }

    /// When the rate allows the next start, if it does not allow one at `now`: an interval
    /// after the last start for each unit it spent.
    #[inline]
    pub(crate) fn until(&self, now: Instant) -> Option<Instant> {
        self.rate.as_ref()?;
        let next = after(self.last_start?, self.spacing(self.last_cost));
        (next > now).then_some(next)
    }

    /// The earliest the rate lets a call start, from `now`, once `ahead` units started
    /// before it.
    pub(crate) fn earliest(&self, now: Instant, ahead: u64) -> Instant {
        match self.rate {
            Some(_) => after(self.until(now).unwrap_or(now), self.spacing(ahead)),
            None => now,
        }
    }

    /// The time the rate takes to pay for `cost` units, if the pace has a rate.
    pub(crate) fn spacing_of(&self, cost: u64) -> Option<Duration> {
        self.rate.as_ref().map(|_| self.spacing(cost))
    }

    /// The time the rate takes to pay for `cost` units.
    #[inline]
    fn spacing(&self, cost: u64) -> Duration {
        match cost {
            1 => self.interval,
            _ => self
                .interval
                .saturating_mul(u32::try_from(cost).unwrap_or(u32::MAX)),
        }
    }

    /// A call of `cost` units started at `now`.
    #[inline(always)]
    pub(crate) fn started(&mut self, now: Instant, cost: u64) {
        self.last_start = Some(now);
        self.last_cost = cost;
    }

    /// A call turned out to cost `extra` units more than it started with: the next start
    /// waits for them.
    pub(crate) fn charge(&mut self, extra: u64) {
        self.last_cost = self.last_cost.saturating_add(extra);
    }

    /// The last start, which counted `was` times, counts `weight` times.
    pub(crate) fn reweigh(&mut self, was: u64, weight: u64) {
        self.last_cost = (self.last_cost / was.max(1)).saturating_mul(weight);
    }

    /// A call that started at `at` with `cost` units turned out to cost `actual`: what it
    /// cost more is charged; what it cost less is given back if no call started since.
    pub(crate) fn settle(&mut self, at: Option<Instant>, cost: u64, actual: u64) {
        match actual.checked_sub(cost) {
            Some(more) => self.charge(more),
            None if at.is_some() && at == self.last_start => {
                self.last_cost = self.last_cost.saturating_sub(cost - actual);
            }
            None => {}
        }
    }

    /// Grows an adaptive rate after a success at `now`; returns the success as the rate
    /// counted it.
    pub(crate) fn grow(&mut self, now: Instant) -> Option<RateEvent> {
        let Some(CallRate::Adaptive(rate)) = &mut self.rate else {
            return None;
        };
        let event = RateEvent::Success(now);
        event.apply(rate);
        self.interval = interval(rate.rate());
        Some(event)
    }

    /// Cuts an adaptive rate for a gate-wide throttle at `now` of a call sent at `sent_at`
    /// (at `sent_rate`), whose backoff ends at `resume`; returns the throttle as the rate
    /// counted it, and whether it taught the rate something.
    pub(crate) fn cut(
        &mut self,
        sent_at: Option<Instant>,
        sent_rate: Option<f64>,
        now: Instant,
        resume: Instant,
    ) -> Option<(RateEvent, bool)> {
        let Some(CallRate::Adaptive(rate)) = &mut self.rate else {
            return None;
        };
        let event = RateEvent::Throttle {
            sent_at: sent_at.unwrap_or(now),
            sent_rate: sent_rate.unwrap_or_else(|| rate.rate()),
            now,
            resume,
        };
        let taught = event.apply(rate);
        self.interval = interval(rate.rate());
        Some((event, taught))
    }

    /// Sets the rate to `per_second` (positive and finite), if the gate has a rate: a fixed
    /// rate is `per_second` from now on; an adaptive one starts again from `per_second` with
    /// it as its ceiling (see [`AdaptiveRate::replanned`]). The next start waits the new
    /// interval after the last start, for each unit it spent. Returns the rate calls now
    /// start at; `None` (and nothing changes) for a gate without a rate.
    pub(crate) fn set(&mut self, per_second: f64) -> Option<f64> {
        let rate = match self.rate.as_mut()? {
            CallRate::Fixed(rate) => {
                *rate = per_second;
                *rate
            }
            CallRate::Adaptive(rate) => {
                *rate = rate.replanned(per_second);
                rate.rate()
            }
        };
        self.interval = interval(rate);
        Some(rate)
    }

    /// Paces at `rate` from now on (`None`: no longer paces), spacing the next start from
    /// the last one at the new rate.
    pub(crate) fn replace_rate(&mut self, rate: Option<CallRate>) {
        self.interval = rate
            .as_ref()
            .map_or(Duration::ZERO, |rate| interval(rate.per_second()));
        self.rate = rate;
    }

    /// Takes up the fleet's adaptive rate.
    pub(crate) fn adopt(&mut self, rate: AdaptiveRate) {
        self.interval = interval(rate.rate());
        self.rate = Some(CallRate::Adaptive(rate));
    }
}
