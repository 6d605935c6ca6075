//! The gate's rate: call starts spaced by an interval for each unit the previous start spent,
//! fixed or adaptive.

use std::time::Duration;

use tokio::time::Instant;

use super::adaptive::{AdaptiveRate, RateEvent};
use super::loan::LentPace;
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

/// What the gate had seen when a throttle came, for a pace that finds its rate.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Seen {
    /// Calls that succeeded, in all.
    pub(crate) successes: u64,
    /// Whether the throttle said nothing of the limit: no Retry-After, no quota, and none
    /// announced before.
    pub(crate) bare: bool,
}

impl Seen {
    /// For a pace that does not find its rate (a scope's): nothing.
    pub(crate) const NOTHING: Seen = Seen {
        successes: 0,
        bare: false,
    };
}

impl Finding {
    /// A gate-wide throttle at `now`, with calls to resume at `resume`: starts the rate if
    /// there is none and the throttle was bare, or returns what the server let through since
    /// the measure began, per second, if that says something yet.
    ///
    /// The measure counts the time backoffs held calls too: a limit that refills steadily
    /// saves what it refills meanwhile, up to its burst, and lets it through after, so that
    /// leaving that time out overstates its rate (tried: more refusals against a token
    /// bucket); a limit that refills in windows loses it, so that the measure understates
    /// its rate, and probing finds the rest.
    fn measure(
        &mut self,
        seen: Seen,
        now: Instant,
        resume: Instant,
        rate: &mut Option<CallRate>,
    ) -> Lesson {
        let Seen { successes, bare } = seen;
        if rate.is_none() {
            if bare {
                let span = resume.saturating_duration_since(self.first_start.unwrap_or(now));
                let start = successes.max(1) as f64 / span.as_secs_f64().max(1e-3);
                let start = start.clamp(FOUND_FLOOR, FOUND_CEILING);
                *rate = Some(CallRate::Adaptive(AdaptiveRate::new(
                    start,
                    FOUND_FLOOR,
                    FOUND_CEILING,
                )));
                self.since = Some((now, successes));
                return Lesson::Started;
            }
            return Lesson::Nothing;
        }
        let (began, counted) = *self.since.get_or_insert((now, successes));
        let span = now.saturating_duration_since(began);
        if span > MEASURE_SPAN {
            self.since = Some((now, successes));
            return Lesson::Nothing;
        }
        let through = successes.saturating_sub(counted);
        if through < MEASURED_AFTER || span.is_zero() {
            return Lesson::Nothing;
        }
        self.since = Some((now, successes));
        Lesson::Measured(through as f64 / span.as_secs_f64())
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
    /// What a gate told no rate measures to find one (see [`Finding`]); `None` for a gate
    /// that does not look for one.
    finding: Option<Finding>,
}

/// What a gate told no rate measures, so that a throttle that says nothing (no Retry-After,
/// no quota) starts a rate from what the server let through instead of only backing off
/// (see [`GateBuilder::find_rate`](crate::GateBuilder::find_rate)).
///
/// The first such throttle starts an adaptive rate at the successes since the first start
/// over the time until calls resume; each gate-wide throttle after it measures again what
/// the server let through since the first (when it let nothing more through: its limit was
/// spent), and a rate above that measure comes down to it. A limit that refills steadily
/// lets at most its rate through over that span, plus one, so the measure is the limit's
/// rate or under it once a few calls have succeeded.
#[derive(Debug, Clone, Copy, Default)]
struct Finding {
    /// The first start, read once: where the first estimate's span begins.
    first_start: Option<Instant>,
    /// When the measure began, and the successes counted then.
    since: Option<(Instant, u64)>,
}

/// What a throttle taught a pace that finds its rate.
enum Lesson {
    Nothing,
    /// It started the rate.
    Started,
    /// The server let this many calls a second through since the measure began.
    Measured(f64),
}

/// Successes a measure needs before it says anything: over fewer, one token more or less
/// than the span's worth weighs too much.
const MEASURED_AFTER: u64 = 5;
/// A measure older than this may span idle time, which says nothing of the limit: the next
/// throttle begins another.
const MEASURE_SPAN: Duration = Duration::from_secs(60);
/// The found rate's bounds: no slower than one call a minute, and otherwise as fast as
/// anything the gate can pace.
const FOUND_FLOOR: f64 = 1.0 / 60.0;
const FOUND_CEILING: f64 = 1e6;

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
            finding: None,
        }
    }

    /// A pace with no rate that finds one from throttles that say nothing (see
    /// [`Finding`]), if `find` (and the pace has no rate).
    pub(crate) fn finding(mut self, find: bool) -> Self {
        self.finding = (find && self.rate.is_none()).then(Finding::default);
        self
    }

    /// Whether the pace would have the first start's instant, which no clock was read for.
    #[inline]
    pub(crate) fn wants_first_start(&self) -> bool {
        self.finding.is_some_and(|f| f.first_start.is_none())
    }

    /// The first call started at `now`, with no clock read for it but this one.
    #[cold]
    pub(crate) fn first_started(&mut self, now: Instant) {
        if let Some(finding) = &mut self.finding {
            finding.first_start.get_or_insert(now);
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

    /// What the pace lends the loan (see [`LentPace`]): `Some(None)` without a rate, the
    /// fixed rate's next start, interval and rate with one; `None` (lends nothing) for an
    /// adaptive rate, which each start and end must see.
    #[inline]
    pub(crate) fn lendable(&self) -> Option<Option<LentPace>> {
        match self.rate {
            None => Some(None),
            Some(CallRate::Fixed(per_second)) => Some(Some(LentPace {
                next: self
                    .last_start
                    .map(|last| after(last, self.spacing(self.last_cost))),
                interval: self.interval,
                per_second,
            })),
            Some(CallRate::Adaptive(_)) => None,
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
        if let Some(Finding {
            first_start: first @ None,
            ..
        }) = &mut self.finding
        {
            *first = Some(now);
        }
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
    ///
    /// A pace that finds its rate ([`Finding`]) starts one at the first such throttle that
    /// said nothing, and measures what the server let through at each after (see
    /// [`Seen`]).
    pub(crate) fn cut(
        &mut self,
        (sent_at, sent_rate): (Option<Instant>, Option<f64>),
        seen: Seen,
        now: Instant,
        resume: Instant,
    ) -> Option<(RateEvent, bool)> {
        let lesson = match &mut self.finding {
            None => Lesson::Nothing,
            Some(finding) => finding.measure(seen, now, resume, &mut self.rate),
        };
        // A call sent with no clock read went out before the rate was found: before its cut.
        let sent_at = sent_at.or(self.finding.and_then(|f| f.first_start));
        let Some(CallRate::Adaptive(rate)) = &mut self.rate else {
            return None;
        };
        let event = RateEvent::Throttle {
            sent_at: sent_at.unwrap_or(now),
            sent_rate: sent_rate.unwrap_or_else(|| rate.rate()),
            now,
            resume,
        };
        // What the throttle taught is for a fleet to hear, and a fleet finds no rate: a
        // measure moves the rate of this process alone.
        let taught = event.apply(rate);
        match lesson {
            Lesson::Nothing => {}
            // The rate that failed was no rate: calls went out as fast as the line let them.
            // The start is a guess from a burst (over a round trip, perhaps, rather than the
            // limit's pace), and the limit may well be above it.
            Lesson::Started => rate.guessed(),
            Lesson::Measured(per_second) => {
                rate.no_faster_than(per_second);
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    fn bare(successes: u64) -> Seen {
        Seen {
            successes,
            bare: true,
        }
    }

    /// A pace that finds its rate, whose first call started at `t0`.
    fn finding(t0: Instant) -> Pace {
        let mut pace = Pace::new(None).finding(true);
        assert!(pace.wants_first_start());
        pace.first_started(t0);
        assert!(!pace.wants_first_start());
        pace
    }

    #[test]
    fn a_bare_throttle_starts_a_rate_from_what_succeeded_until_calls_resume() {
        let t0 = Instant::now();
        let mut pace = finding(t0);
        assert_eq!(pace.per_second(), None);
        // 9 successes from the first start to the resume, 1 s: 9 a second, cut as the rate
        // that failed (0.7 of it), and nothing known to be too fast.
        let (_, taught) = pace
            .cut((None, None), bare(9), t0 + SEC / 2, t0 + SEC)
            .unwrap();
        assert!(taught);
        let rate = pace.per_second().unwrap();
        assert!((rate - 6.3).abs() < 1e-9, "{rate}");
        assert_eq!(pace.interval, interval(rate));
        // The other calls of the wave went out before the rate: their throttles cut nothing.
        pace.cut((None, None), bare(9), t0 + SEC / 2, t0 + SEC);
        assert_eq!(pace.per_second(), Some(rate));
    }

    #[test]
    fn only_a_throttle_that_says_nothing_at_a_gate_that_finds_its_rate_starts_one() {
        let t0 = Instant::now();
        let told = Seen {
            successes: 9,
            bare: false,
        };
        let mut pace = finding(t0);
        assert_eq!(pace.cut((None, None), told, t0 + SEC, t0 + SEC), None);
        assert_eq!(pace.per_second(), None);
        let mut off = Pace::new(None).finding(false);
        assert!(!off.wants_first_start());
        assert_eq!(off.cut((None, None), bare(9), t0 + SEC, t0 + SEC), None);
        assert_eq!(off.per_second(), None);
        // A pace told a rate finds none, and keeps its own.
        let mut fixed = Pace::new(Some(CallRate::Fixed(5.0))).finding(true);
        assert!(!fixed.wants_first_start());
        assert_eq!(fixed.cut((None, None), bare(9), t0 + SEC, t0 + SEC), None);
        assert_eq!(fixed.per_second(), Some(5.0));
    }

    #[test]
    fn a_first_start_with_no_successes_or_no_time_still_starts_a_finite_rate() {
        let t0 = Instant::now();
        let mut pace = Pace::new(None).finding(true);
        // No first start recorded, throttled at once: a span of at least a millisecond.
        pace.cut((None, None), bare(0), t0, t0);
        let rate = pace.per_second().unwrap();
        assert!((rate - 700.0).abs() < 1e-6, "{rate}");
        let mut slow = finding(t0);
        slow.cut((None, None), bare(0), t0 + 3_600 * SEC, t0 + 3_600 * SEC);
        assert_eq!(
            slow.per_second(),
            Some(1.0 / 60.0),
            "one a minute at the least"
        );
    }

    #[test]
    fn later_throttles_measure_what_the_server_let_through_since_the_last_measure() {
        let t0 = Instant::now();
        let mut pace = finding(t0);
        let rate = |pace: &Pace| pace.per_second().unwrap();
        let throttle = |pace: &mut Pace, sent: u32, now: u32, successes: u64| {
            let sent = (Some(t0 + sent * SEC), pace.per_second());
            let now = t0 + now * SEC;
            pace.cut(sent, bare(successes), now, now);
        };
        // 100 at once, resumed 0.1 s later: 1,000 a second, cut to 700.
        pace.cut((None, None), bare(100), t0, t0 + SEC / 10);
        assert!((rate(&pace) - 700.0).abs() < 1e-6);
        // Four successes in the next 2 s say nothing yet: the cut alone (each call here went
        // out a second or more after calls resumed: an ordinary cut).
        throttle(&mut pace, 2, 2, 104);
        assert!((rate(&pace) - 490.0).abs() < 1e-6);
        // Five since the first throttle, in 4 s: 1.25 a second, where the rate comes down.
        throttle(&mut pace, 3, 4, 105);
        assert_eq!(rate(&pace), 1.25);
        // The next measure would span 66 s, more than a minute: it begins again instead,
        // and the cut alone counts.
        throttle(&mut pace, 69, 70, 110);
        assert!((rate(&pace) - 0.875).abs() < 1e-9, "{}", rate(&pace));
        // A minute to the instant since it began, six through: a tenth a second.
        throttle(&mut pace, 129, 130, 116);
        assert!((rate(&pace) - 0.1).abs() < 1e-12, "{}", rate(&pace));
    }
}
