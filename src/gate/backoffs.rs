//! The backoffs in force (the gate-wide one, and each scope's), how long the next one lasts,
//! and the gradual resume after a gate-wide one ends.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use super::backoff::BackoffSchedule;
use super::classify::Scope;
use super::ramp::Ramp;
use crate::rng::SplitMix64;
use crate::time::{MAX_WAIT, after};

/// Every backoff of one gate, and the resume after the gate-wide one.
#[derive(Debug)]
pub(crate) struct Backoffs {
    /// When each backoff ends: the gate-wide one under `None`.
    ends: HashMap<Option<Scope>, Instant>,
    schedule: BackoffSchedule,
    rng: SplitMix64,
    /// The gate-wide backoff's end, until the first call after it starts.
    unresumed: Option<Instant>,
    /// How long the latest gate-wide backoff made calls wait, for the resume after it.
    length: Duration,
    /// The resume under way after a gate-wide backoff, if any.
    ramp: Option<Ramp>,
    /// How many backoffs the last sweep of those over kept: the next sweeps when twice as
    /// many are recorded.
    kept_after_sweep: usize,
    /// When the schedule last lengthened the backoff: a throttle of a call sent before
    /// then was refused for the same overrun, and lengthens nothing.
    lengthened_at: Option<Instant>,
}

/// The fewest backoffs recorded before those over are swept out.
const SWEEP_FROM: usize = 1024;

impl Backoffs {
    /// No backoff yet; lengths without a Retry-After from `schedule`, jittered from `seed`.
    pub(crate) fn new(schedule: BackoffSchedule, seed: u64) -> Self {
        Self {
            ends: HashMap::new(),
            schedule,
            rng: SplitMix64::new(seed),
            unresumed: None,
            length: Duration::ZERO,
            ramp: None,
            kept_after_sweep: 0,
            lengthened_at: None,
        }
    }

    /// Whether nothing of the backoffs could hold a call: none is recorded, no resume runs.
    #[inline]
    pub(crate) fn is_clear(&self) -> bool {
        self.ends.is_empty() && self.ramp.is_none()
    }

    /// Whether a success would change nothing here: no backoff nor resume after one, and no
    /// streak of throttles for successes to step down (see [`Backoffs::succeeded`]).
    #[inline]
    pub(crate) fn is_calm(&self) -> bool {
        self.is_clear() && !self.schedule.counts_successes()
    }

    /// Whether no backoff is recorded (one that has passed may still be).
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The end of the latest backoff holding a call of `scopes` at `now`: the gate-wide one's
    /// or its scopes'.
    #[inline]
    pub(crate) fn end(&self, scopes: &[Scope], now: Instant) -> Option<Instant> {
        if self.ends.is_empty() {
            return None;
        }
        self.gate_end(now).max(self.scope_end(scopes, now))
    }

    /// The end of the latest backoff of one of `scopes` running at `now`.
    #[inline]
    pub(crate) fn scope_end(&self, scopes: &[Scope], now: Instant) -> Option<Instant> {
        if self.ends.is_empty() {
            return None;
        }
        scopes
            .iter()
            .filter_map(|scope| self.ends.get(&Some(scope.clone())).copied())
            .filter(|&end| end > now)
            .max()
    }

    /// The end of the gate-wide backoff, if one runs at `now`.
    #[inline]
    pub(crate) fn gate_end(&self, now: Instant) -> Option<Instant> {
        self.ends.get(&None).copied().filter(|&end| end > now)
    }

    /// How many calls may be in flight at `now`, out of `max`: fewer while calls come back
    /// after a gate-wide backoff, and then when that grows.
    #[inline]
    pub(crate) fn in_flight_limit(&self, max: usize, now: Instant) -> (usize, Option<Instant>) {
        match &self.ramp {
            Some(ramp) => ramp.limit(max, now),
            None => (max, None),
        }
    }

    /// A call started at `now`, of a gate of `max` slots: drops what has passed, and starts
    /// the resume if this is the first call after the gate-wide backoff; returns when that
    /// backoff ended, if so.
    #[inline]
    pub(crate) fn started(&mut self, max: usize, now: Instant) -> Option<Instant> {
        // Calm (the usual case): nothing to drop or resume.
        if self.ramp.is_none() && self.unresumed.is_none() && self.ends.is_empty() {
            return None;
        }
        if self.ramp.is_some() && self.in_flight_limit(max, now).1.is_none() {
            // The resume is over: the full width is back, and no clock need be read for it.
            self.ramp = None;
        }
        let resumed_after = self.unresumed.take_if(|end| *end <= now);
        if resumed_after.is_some() {
            self.ramp = Some(Ramp::new(now, self.length));
        }
        if !self.ends.is_empty() {
            self.ends.retain(|_, end| *end > now);
        }
        resumed_after
    }

    /// A call succeeded: a run of them steps the schedule back down.
    #[inline]
    pub(crate) fn succeeded(&mut self) {
        self.schedule.on_success();
    }

    /// How long a throttle at `now` of a call sent at `sent_at` backs off: the server's
    /// Retry-After, or the schedule's length. A Retry-After shorter than the schedule's next
    /// length (a zero from a server that rounds down, a date already past) must not cut a
    /// throttle streak's backoff to nothing: the schedule handles it, with the server's
    /// word as the floor.
    ///
    /// A call sent before the schedule last lengthened the backoff was on the wire when the
    /// server refused for the same overrun: its throttle is the same news, and takes only
    /// what its Retry-After says (a wave of calls refused together backs off once, not once
    /// per call). So is one sent with no clock read (`None`) while a backoff is recorded: it
    /// went out when none was, before the throttle that recorded it.
    pub(crate) fn length(
        &mut self,
        retry_after: Option<Duration>,
        sent_at: Option<Instant>,
        now: Instant,
    ) -> Duration {
        let stale = match sent_at {
            Some(at) => self.lengthened_at.is_some_and(|lengthened| at < lengthened),
            None => !self.ends.is_empty(),
        };
        if stale {
            return retry_after.map_or(Duration::ZERO, |after| after.min(MAX_WAIT));
        }
        self.lengthened_at = Some(now);
        match retry_after {
            Some(after) => {
                let rng = &mut self.rng;
                self.schedule
                    .next_after(after.min(MAX_WAIT), || rng.next_f64())
            }
            None => self.schedule.next_with(&mut self.rng),
        }
    }

    /// Starts or extends a backoff (gate-wide, or of `scope`) of `length` from `now`; never
    /// shortens one. Returns when the backoff in force ends, and whether this moved the
    /// gate-wide end. A gate-wide one also ends any resume under way: the next begins when
    /// this backoff ends, and lasts as long as it made calls wait.
    pub(crate) fn back_off(
        &mut self,
        scope: Option<Scope>,
        now: Instant,
        length: Duration,
    ) -> (Instant, bool) {
        let gate_wide = scope.is_none();
        let end = after(now, length);
        // Scopes seen once cost nothing once their backoffs are over.
        if self.ends.len() >= SWEEP_FROM.max(2 * self.kept_after_sweep) {
            self.ends.retain(|_, end| *end > now);
            self.kept_after_sweep = self.ends.len();
        }
        let slot = self.ends.entry(scope).or_insert(end);
        *slot = (*slot).max(end);
        let end = *slot;
        let extended = gate_wide && self.unresumed.is_none_or(|old| end > old);
        if extended {
            self.unresumed = Some(end);
            self.length = end - now;
            self.ramp = None;
        }
        (end, extended)
    }

    /// The schedule's exponent, for the tests of its rule.
    #[cfg(test)]
    pub(crate) fn exponent(&self) -> u32 {
        self.schedule.exponent()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::backoff::Jitter;

    #[test]
    fn a_streak_to_step_down_is_not_calm_until_its_successes_have() {
        let schedule = BackoffSchedule::new(
            Duration::from_millis(100),
            Duration::from_secs(10),
            Jitter::None,
            2,
        );
        let mut backoffs = Backoffs::new(schedule, 1);
        assert!(backoffs.is_calm());
        // A throttle's backoff, over and its resume done: clear, but a streak counts.
        let t0 = Instant::now();
        let length = backoffs.length(None, None, t0);
        backoffs.back_off(None, t0, length);
        let later = t0 + Duration::from_secs(60);
        backoffs.started(4, later);
        backoffs.started(4, later + Duration::from_secs(60));
        assert!(backoffs.is_clear() && backoffs.exponent() > 0);
        assert!(!backoffs.is_calm(), "successes have a streak to step down");
        // Two successes (the schedule's run) step it down.
        backoffs.succeeded();
        backoffs.succeeded();
        assert_eq!(backoffs.exponent(), 0);
        assert!(backoffs.is_calm());
        // A backoff running is not calm either, streak or none.
        backoffs.back_off(Some(Scope::from("a")), later, Duration::from_secs(1));
        assert!(!backoffs.is_clear() && !backoffs.is_calm());
    }

    #[test]
    fn backoffs_over_are_forgotten_and_those_running_kept() {
        let schedule = BackoffSchedule::new(
            Duration::from_millis(100),
            Duration::from_secs(10),
            Jitter::None,
            2,
        );
        let mut backoffs = Backoffs::new(schedule, 1);
        let t0 = Instant::now();
        let long = Scope::from("long");
        backoffs.back_off(Some(long.clone()), t0, Duration::from_secs(3_600));
        // 100,000 scopes, each backing off for 1 ms, one a millisecond.
        let mut most = 0;
        for n in 0..100_000u64 {
            let now = t0 + Duration::from_millis(n);
            let scope = Scope::from(format!("tenant-{n}"));
            backoffs.back_off(Some(scope), now, Duration::from_millis(1));
            most = most.max(backoffs.ends.len());
        }
        assert!(most <= 2 * SWEEP_FROM, "{most} backoffs kept");
        let later = t0 + Duration::from_secs(100);
        assert_eq!(
            backoffs.scope_end(&[long], later),
            Some(t0 + Duration::from_secs(3_600)),
            "a backoff still running is kept"
        );
    }

    #[test]
    fn a_wave_refused_together_backs_off_once() {
        const MS: Duration = Duration::from_millis(1);
        let schedule = BackoffSchedule::new(100 * MS, 10_000 * MS, Jitter::None, 2);
        let mut backoffs = Backoffs::new(schedule, 1);
        let t0 = Instant::now();
        // Three calls sent at t0, refused 10, 11 and 12 ms later: the first lengthens the
        // backoff, the others were on the wire then and take only their Retry-After.
        assert_eq!(backoffs.length(None, Some(t0), t0 + 10 * MS), 100 * MS);
        backoffs.back_off(None, t0 + 10 * MS, 100 * MS);
        assert_eq!(
            backoffs.length(None, Some(t0), t0 + 11 * MS),
            Duration::ZERO
        );
        let after = Some(Duration::from_secs(1));
        assert_eq!(
            backoffs.length(after, Some(t0), t0 + 12 * MS),
            Duration::from_secs(1)
        );
        assert_eq!(backoffs.exponent(), 1);
        // One sent at the instant the backoff grew is news: the schedule goes on.
        assert_eq!(
            backoffs.length(None, Some(t0 + 10 * MS), t0 + 20 * MS),
            200 * MS
        );
        assert_eq!(backoffs.exponent(), 2);
        // A call sent with no clock read went out when no backoff was recorded: before this
        // one, while it is.
        assert_eq!(backoffs.length(None, None, t0 + 30 * MS), Duration::ZERO);
        assert_eq!(backoffs.exponent(), 2);
        let mut clear = Backoffs::new(
            BackoffSchedule::new(100 * MS, 10_000 * MS, Jitter::None, 2),
            1,
        );
        assert_eq!(
            clear.length(None, None, t0),
            100 * MS,
            "no backoff recorded: news"
        );
    }
}
