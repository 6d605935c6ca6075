use std::time::Duration;

use tokio::time::Instant;

/// The adaptive call rate: finds and tracks a limit the gate was never told.
///
/// Plain AIMD saws between the limit and a fraction of it, and CUBIC keeps probing past the
/// limit it just found; both hit the limit again and again. This keeps what a throttle taught:
/// - a throttle cuts the rate to a fraction of the rate its call was sent at, and remembers
///   that rate as *too fast*; a throttle of a call sent before the last cut says nothing new;
/// - a throttle of a call sent right after the gate resumed, before the server accepted a few
///   calls since, means the server is still penalising and the limit is far below: a deeper
///   cut;
/// - a throttle of a call sent right after the gate resumed, once the server had accepted a
///   few calls again, means those calls spent, within a second, the burst that the backoff
///   let the server refill: the rate that failed is well above the limit, not just above it,
///   so the rate settles at the cut rather than growing back towards the rate that failed;
/// - after a cut the rate holds for a while that grows with the cost of the backoff (a long
///   server penalty makes a second throttle expensive), then grows back, per second of
///   success and not per success, to just under the rate that failed;
/// - only after a quiet while there does it probe above, slowly at first and faster the longer
///   it goes unthrottled, in case the limit rose; running well above the old failure without a
///   throttle forgets it;
/// - every probe throttled in a row doubles the quiet while before the next
///   (up to [`MAX_QUIET`]): against a limit that stays put, throttles thin out geometrically
///   instead of coming back at a steady beat.
///
/// Why not CUBIC, as the AWS SDKs' adaptive retry mode uses: there the rate after a throttle
/// follows `0.4 (t - K)^3 + W_max` with `K = cbrt(0.3 W_max / 0.4)`, so at 4 calls/s it is
/// back at the failing rate about 1.4 s after the throttle and climbs past it cubically with
/// no pause: against a fixed limit it is throttled again every few seconds, and against a
/// server that escalates penalties each of those throttles is expensive. The scenarios of
/// `tests/gate/scenarios.rs` hold this rate to a token bucket it must find and to an escalating
/// penalty it must not provoke twice, on the simulated API; docs/scenarios.md gives their figures.
#[derive(Debug, Clone)]
pub(crate) struct AdaptiveRate {
    rate: f64,
    floor: f64,
    ceiling: f64,
    /// The rate at which the last counted throttle's call was sent.
    too_fast: Option<f64>,
    last_cut: Option<Instant>,
    /// When calls resume after the last cut: the end of its backoff.
    resumed_at: Option<Instant>,
    /// Successes since calls resumed at `resumed_at` (up to [`FEW`]).
    accepted: u32,
    /// No growth before this.
    hold_until: Option<Instant>,
    /// When growth was last accounted for.
    grown_at: Option<Instant>,
    /// Since when the rate has sat just under `too_fast` without a throttle.
    settled_since: Option<Instant>,
    /// The quiet while before probing above `too_fast`; scales with the last backoff.
    quiet: Duration,
    /// Probes above the settling rate throttled in a row: each doubles the quiet while.
    edge_streak: u32,
    /// Growth with no rate known to be too fast, per second, as a fraction of the rate:
    /// [`GROW_PER_SEC`], or [`GUESS_GROWTH`] while the rate is a guess that no throttle has
    /// checked yet.
    growth: f64,
}

/// The cut for an ordinary throttle.
const CUT: f64 = 0.7;
/// The cut for a throttle right after resuming: the limit is far below.
const DEEP_CUT: f64 = 0.5;
/// How soon after resuming a throttle counts as "right after": a deeper cut if fewer than
/// [`FEW`] calls succeeded since the resume, else a cut that the rate settles at.
const FRESH: Duration = Duration::from_secs(1);
/// Successes after a resume that show the server accepts calls again.
const FEW: u32 = 3;
/// Where the rate settles, as a fraction of the rate that failed.
const SETTLE: f64 = 0.95;
/// A throttle at this fraction of the rate that failed before, or above, comes from settling
/// or probing at the limit's edge: the cut is only to the settling rate.
const EDGE: f64 = 0.9;
/// Time constant of the growth back towards the settling rate.
const REGROW: Duration = Duration::from_secs(3);
/// Probing above the settling rate starts at this fraction of the rate per second, and
/// doubles for every `PROBE_DOUBLING` of probing without a throttle (up to `GROW_PER_SEC`
/// and beyond), so a limit that rose is found again quickly while one that did not is
/// approached gently.
const PROBE_PER_SEC: f64 = 0.005;
const PROBE_DOUBLING: Duration = Duration::from_secs(5);
/// Running this far above the rate that failed, without a throttle, means the limit rose:
/// the failure is forgotten.
const FORGET_ABOVE: f64 = 1.1;
/// Growth with no throttle seen yet: this fraction of the rate per second.
const GROW_PER_SEC: f64 = 0.02;
/// Growth while the rate is a guess (see [`AdaptiveRate::guessed`]): half again a second, so
/// that a guess well under the limit reaches it within a few seconds, where its throttle
/// teaches the rate what an ordinary one does.
const GUESS_GROWTH: f64 = 0.5;
/// The hold after a cut, and the quiet while before probing, as multiples of the backoff.
const HOLD_PER_BACKOFF: u32 = 3;
const QUIET_PER_BACKOFF: u32 = 10;
const MIN_QUIET: Duration = Duration::from_secs(10);
/// The longest quiet while, however often probes at the same limit were throttled: a limit
/// that rose is found again within about this long.
const MAX_QUIET: Duration = Duration::from_secs(5 * 60);
/// Growth counts at most this much time between two successes, so an idle gate does not
/// come back from a pause with a rate it never tried.
const MAX_GROWTH_STEP: Duration = Duration::from_secs(1);

impl AdaptiveRate {
    pub(crate) fn new(start: f64, floor: f64, ceiling: f64) -> Self {
        Self {
            rate: start.clamp(floor, ceiling),
            floor,
            ceiling,
            too_fast: None,
            last_cut: None,
            resumed_at: None,
            accepted: 0,
            hold_until: None,
            grown_at: None,
            settled_since: None,
            quiet: MIN_QUIET,
            edge_streak: 0,
            growth: GROW_PER_SEC,
        }
    }

    /// Calls per second now.
    pub(crate) fn rate(&self) -> f64 {
        self.rate
    }

    /// The rate for a new plan of `ceiling` calls per second (positive and finite): it starts
    /// again from `ceiling`, never goes above it, and keeps its floor (lowered to `ceiling`
    /// if it was above); what throttles taught of the old limit is forgotten, as for a gate
    /// built with that ceiling.
    pub(crate) fn replanned(&self, ceiling: f64) -> Self {
        Self::new(ceiling, self.floor.min(ceiling), ceiling)
    }

    /// A call sent at `sent_at` while the rate was `sent_rate` was throttled at `now`; calls
    /// resume at `resume` (the end of the gate's backoff, which other throttles may have
    /// extended). Returns whether the rate was cut.
    pub(crate) fn on_throttle(
        &mut self,
        sent_at: Instant,
        sent_rate: f64,
        now: Instant,
        resume: Instant,
    ) -> bool {
        let stale = self.last_cut.is_some_and(|cut| sent_at < cut);
        if !stale {
            let soon = self
                .resumed_at
                .is_some_and(|resumed| sent_at >= resumed && sent_at - resumed < FRESH);
            // Right after resuming: if the server has accepted few calls since, it still
            // penalises; if it has accepted more, they spent the burst it refilled meanwhile.
            let fresh = soon && self.accepted < FEW;
            let drained = soon && !fresh;
            // Throttled near the rate that failed before: the limit is just below, and a
            // settling cut finds it without a dip.
            let at_edge = self.too_fast.is_some_and(|rate| sent_rate >= rate * EDGE);
            let cut = match (fresh, at_edge) {
                (true, _) => DEEP_CUT,
                (false, true) => SETTLE,
                (false, false) => CUT,
            };
            // A probe above the settling rate failed: the limit has not moved. Any other
            // throttle (the limit fell, or is still being found) starts the count again.
            let probing = self
                .settled_since
                .is_some_and(|since| sent_at >= since + self.quiet);
            self.edge_streak = if probing && !fresh {
                self.edge_streak + 1
            } else {
                0
            };
            // A cut never raises the rate: another throttle may have cut deeper already.
            self.rate = (sent_rate * cut)
                .min(self.rate)
                .clamp(self.floor, self.ceiling);
            // A rate that drained a burst within a second says the limit is well below it:
            // the rate settles where the cut put it, and looks above only by probing.
            self.too_fast = Some(if drained {
                self.rate / SETTLE
            } else {
                sent_rate
            });
            self.last_cut = Some(now);
            self.growth = GROW_PER_SEC;
            self.resumed_at = None;
            self.grown_at = None;
            self.settled_since = None;
        }
        // Even a stale throttle may have lengthened the backoff (a server penalty escalated by
        // calls already on the wire): the hold and the quiet while follow the backoff in force.
        if self.resumed_at.is_none_or(|resumed| resume > resumed) {
            let cut = self.last_cut.unwrap_or(now);
            let backoff = resume.saturating_duration_since(cut);
            self.resumed_at = Some(resume);
            self.accepted = 0;
            self.hold_until = Some(resume + backoff * HOLD_PER_BACKOFF);
            let quiet = (backoff * QUIET_PER_BACKOFF).max(MIN_QUIET);
            let doubled = 2u32.saturating_pow(self.edge_streak.min(16));
            self.quiet = quiet.saturating_mul(doubled).min(MAX_QUIET.max(quiet));
        }
        !stale
    }

    /// The server was measured to let `per_second` through while calls were refused: a
    /// rate above it comes down to it (within the floor). A guess (see
    /// [`AdaptiveRate::guessed`]) that no throttle has checked yet settles there, and probes
    /// above only after a quiet while. Returns whether the rate moved.
    pub(crate) fn no_faster_than(&mut self, per_second: f64) -> bool {
        if per_second >= self.rate {
            return false;
        }
        self.rate = per_second.clamp(self.floor, self.ceiling);
        self.settled_since = None;
        if self.too_fast.is_none() {
            self.too_fast = Some(self.rate / SETTLE);
            self.growth = GROW_PER_SEC;
        }
        true
    }

    /// The rate is a guess, and the last throttle's call went out at no rate at all: nothing
    /// is known to be too fast, and the rate grows quickly (by [`GUESS_GROWTH`]) until a
    /// throttle of a call sent at it says where the limit is.
    pub(crate) fn guessed(&mut self) {
        self.too_fast = None;
        self.growth = GUESS_GROWTH;
    }

    /// A call succeeded at `now`: grow, per second of success.
    pub(crate) fn on_success(&mut self, now: Instant) {
        if self.resumed_at.is_some_and(|resumed| now >= resumed) {
            self.accepted = (self.accepted + 1).min(FEW);
        }
        if self.hold_until.is_some_and(|hold| now < hold) {
            return;
        }
        let dt = match self.grown_at.replace(now) {
            Some(then) => now.saturating_duration_since(then).min(MAX_GROWTH_STEP),
            None => return,
        };
        let secs = dt.as_secs_f64();
        let settle = self.too_fast.map(|rate| rate * SETTLE);
        self.rate = match settle {
            None => self.rate * (1.0 + self.growth * secs),
            Some(settle) if self.rate < settle => {
                let approach = 1.0 - (-secs / REGROW.as_secs_f64()).exp();
                let grown = self.rate + (settle - self.rate) * approach;
                // Within a hair of it counts as arrived.
                if settle - grown < settle * 0.005 {
                    settle
                } else {
                    grown
                }
            }
            Some(_) => {
                let since = *self.settled_since.get_or_insert(now);
                let settled_for = now.saturating_duration_since(since);
                match settled_for.checked_sub(self.quiet) {
                    None => self.rate,
                    Some(probing) => {
                        let speed = PROBE_PER_SEC
                            * (probing.as_secs_f64() / PROBE_DOUBLING.as_secs_f64()).exp2();
                        self.rate * (1.0 + speed.min(GROW_PER_SEC * 5.0) * secs)
                    }
                }
            }
        }
        .clamp(self.floor, self.ceiling);
        if self
            .too_fast
            .is_some_and(|rate| self.rate > rate * FORGET_ABOVE)
        {
            self.too_fast = None;
            self.edge_streak = 0;
        }
    }
}

/// What happened to a call, as the adaptive rate counts it: kept so that a fleet sharing one
/// rate can apply it again to the fleet's latest rate when another process changed it first.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum RateEvent {
    Success(Instant),
    Throttle {
        sent_at: Instant,
        sent_rate: f64,
        now: Instant,
        resume: Instant,
    },
}

impl RateEvent {
    /// Applies the event; returns whether the fleet should hear of the new rate.
    pub(crate) fn apply(self, rate: &mut AdaptiveRate) -> bool {
        match self {
            RateEvent::Success(now) => {
                rate.on_success(now);
                false
            }
            RateEvent::Throttle {
                sent_at,
                sent_rate,
                now,
                resume,
            } => {
                let hold = rate.hold_until;
                rate.on_throttle(sent_at, sent_rate, now, resume) || rate.hold_until != hold
            }
        }
    }
}

/// Writes the rate's state as text, its instants as microseconds of another clock (the
/// store's), so that processes whose clocks differ can share it. Only a fleet shares it.
impl AdaptiveRate {
    pub(crate) fn encode(&self, to_micros: impl Fn(Instant) -> i64) -> String {
        let instant =
            |at: Option<Instant>| at.map_or("-".to_owned(), |at| to_micros(at).to_string());
        let too_fast = self
            .too_fast
            .map_or("-".to_owned(), |rate| rate.to_string());
        [
            self.rate.to_string(),
            too_fast,
            instant(self.last_cut),
            instant(self.resumed_at),
            instant(self.hold_until),
            instant(self.grown_at),
            instant(self.settled_since),
            self.quiet.as_micros().to_string(),
            self.edge_streak.to_string(),
            self.accepted.to_string(),
        ]
        .join(" ")
    }

    /// Reads what [`encode`](Self::encode) wrote, within this gate's floor and ceiling;
    /// `None` if it is not that.
    pub(crate) fn decode(
        &self,
        text: &str,
        from_micros: impl Fn(i64) -> Instant,
    ) -> Option<AdaptiveRate> {
        let mut fields = text.split(' ');
        let mut next = || fields.next();
        let number = |field: Option<&str>| field?.parse::<f64>().ok().filter(|x| x.is_finite());
        let optional = |field: Option<&str>| match field? {
            "-" => Some(None),
            text => text.parse::<f64>().ok().filter(|x| x.is_finite()).map(Some),
        };
        let instant = |field: Option<&str>| match field? {
            "-" => Some(None),
            text => text.parse::<i64>().ok().map(|us| Some(from_micros(us))),
        };
        let decoded = AdaptiveRate {
            rate: number(next())?.clamp(self.floor, self.ceiling),
            floor: self.floor,
            ceiling: self.ceiling,
            too_fast: optional(next())?,
            last_cut: instant(next())?,
            resumed_at: instant(next())?,
            hold_until: instant(next())?,
            grown_at: instant(next())?,
            settled_since: instant(next())?,
            quiet: Duration::from_micros(next()?.parse().ok()?),
            edge_streak: next()?.parse().ok()?,
            accepted: next()?.parse::<u32>().ok()?.min(FEW),
            // A fleet's rate is told, never guessed (see `Pace::finding`).
            growth: GROW_PER_SEC,
        };
        next().is_none().then_some(decoded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    #[test]
    fn a_new_plan_starts_again_from_its_ceiling_and_forgets_the_old_limit() {
        let t0 = Instant::now();
        let mut a = AdaptiveRate::new(10.0, 0.5, 100.0);
        a.on_throttle(t0, 10.0, t0, t0 + SEC);
        assert!((a.rate() - 7.0).abs() < 1e-9);
        let mut planned = a.replanned(20.0);
        assert_eq!(planned.rate(), 20.0);
        // No hold from the old throttle, no memory of 10 as too fast: it grows at once, up
        // to the new ceiling and no further.
        let t = succeed(&mut planned, t0, t0 + 100 * SEC);
        assert_eq!(planned.rate(), 20.0);
        planned.on_throttle(t, 20.0, t, t + SEC);
        assert!((planned.rate() - 14.0).abs() < 1e-9, "an ordinary cut");
        // A plan below the floor brings the floor down with it.
        let low = a.replanned(0.25);
        assert_eq!(low.rate(), 0.25);
        let mut low = low;
        low.on_throttle(t0, 0.25, t0, t0 + SEC);
        assert_eq!(low.rate(), 0.25, "at the lowered floor");
    }

    #[test]
    fn a_throttle_cuts_and_a_stale_one_says_nothing_new() {
        let t0 = Instant::now();
        let mut a = AdaptiveRate::new(10.0, 0.5, 100.0);
        assert!(a.on_throttle(t0, 10.0, t0 + SEC, t0 + 2 * SEC));
        assert!((a.rate() - 7.0).abs() < 1e-9);
        // Sent before that cut: already accounted for.
        assert!(!a.on_throttle(t0 + SEC / 2, 10.0, t0 + SEC + SEC / 10, t0 + 2 * SEC));
        assert!((a.rate() - 7.0).abs() < 1e-9);
    }

    #[test]
    fn a_call_sent_at_the_very_instant_of_the_cut_is_news() {
        let t0 = Instant::now();
        let mut a = AdaptiveRate::new(10.0, 0.5, 100.0);
        a.on_throttle(t0, 10.0, t0 + SEC, t0 + 2 * SEC);
        // Sent at t0 + 1 s, when the cut was made: it went out at the cut rate.
        assert!(a.on_throttle(t0 + SEC, 7.0, t0 + 3 * SEC, t0 + 4 * SEC));
        assert!((a.rate() - 4.9).abs() < 1e-9, "cut to {}", a.rate());
    }

    /// Successes every quarter second from `from` until `until`; the instant of the last.
    fn succeed(a: &mut AdaptiveRate, from: Instant, until: Instant) -> Instant {
        let mut t = from;
        while t < until {
            t += SEC / 4;
            a.on_success(t);
        }
        t
    }

    #[test]
    fn after_a_long_backoff_growth_starts_at_the_hold_and_probing_after_ten_backoffs() {
        let t0 = Instant::now();
        let mut a = AdaptiveRate::new(4.0, 0.5, 100.0);
        // A 5 s backoff: hold until 5 s + 3 × 5 s, quiet while of 10 × 5 s.
        a.on_throttle(t0, 4.0, t0, t0 + 5 * SEC);
        assert!((a.rate() - 2.8).abs() < 1e-9);
        // The hold ends at 20 s exactly: a success then starts the growth clock, and one
        // second later the rate has grown by one second's worth towards 3.8.
        a.on_success(t0 + 20 * SEC);
        a.on_success(t0 + 21 * SEC);
        let grown = 2.8 + (3.8 - 2.8) * (1.0 - (-1.0f64 / 3.0).exp());
        assert!((a.rate() - grown).abs() < 1e-9, "grew to {}", a.rate());
        // Settled exactly at 3.8: the quiet while starts at the next success.
        let mut t = t0 + 21 * SEC;
        while a.rate() < 3.8 {
            t = succeed(&mut a, t, t + SEC / 4);
        }
        assert_eq!(a.rate(), 3.8);
        let settled = succeed(&mut a, t, t + SEC / 4);
        // 50 s of quiet at 3.8.
        let t = succeed(&mut a, settled, settled + 50 * SEC - SEC / 4);
        assert_eq!(a.rate(), 3.8, "still quiet at {:?}", t - settled);
        // Then a probe that starts at half a percent per second.
        succeed(&mut a, t, settled + 51 * SEC);
        assert!(
            a.rate() > 3.8 && a.rate() < 3.8 * 1.01,
            "probing at {}",
            a.rate()
        );
    }

    #[test]
    fn running_exactly_at_the_forgetting_line_remembers_the_failure() {
        let t0 = Instant::now();
        let ceiling = 10.0 * FORGET_ABOVE;
        let mut a = AdaptiveRate::new(10.0, 0.5, ceiling);
        a.on_throttle(t0, 10.0, t0, t0 + SEC);
        // Settles at 9.5, probes, and is held at the ceiling: at, not above, the line.
        let t = succeed(&mut a, t0, t0 + 200 * SEC);
        assert_eq!(a.rate(), ceiling);
        // The failure is remembered: a throttle there cuts only to the settling rate.
        a.on_throttle(t, ceiling, t, t + SEC);
        assert!(
            (a.rate() - ceiling * SETTLE).abs() < 1e-9,
            "cut to {}",
            a.rate()
        );
    }

    #[test]
    fn a_throttle_right_after_resuming_cuts_deeper() {
        let t0 = Instant::now();
        let mut a = AdaptiveRate::new(10.0, 0.5, 100.0);
        a.on_throttle(t0, 10.0, t0, t0 + SEC);
        // Resumed at t0 + 1 s; the first call after it is throttled.
        assert!(a.on_throttle(t0 + SEC + SEC / 10, 7.0, t0 + SEC + SEC / 5, t0 + 2 * SEC));
        assert!((a.rate() - 3.5).abs() < 1e-9);
    }

    #[test]
    fn only_several_successes_after_the_resume_soften_a_throttle_right_after_it() {
        let t0 = Instant::now();
        let mut a = AdaptiveRate::new(10.0, 0.5, 100.0);
        a.on_throttle(t0, 10.0, t0, t0 + SEC);
        // Calls sent before the throttle succeed during the backoff: the server's answers to
        // them say nothing of the server after the resume.
        for i in 1..=5 {
            a.on_success(t0 + i * SEC / 10);
        }
        // Two calls go through after it, then one is throttled: the server may still be
        // penalising, letting the odd call through.
        a.on_success(t0 + SEC);
        a.on_success(t0 + SEC + SEC / 20);
        assert!(a.on_throttle(t0 + SEC + SEC / 10, 7.0, t0 + SEC + SEC / 5, t0 + 2 * SEC));
        assert!((a.rate() - 3.5).abs() < 1e-9, "cut to {}", a.rate());
    }

    #[test]
    fn a_throttle_right_after_resuming_that_follows_successes_cuts_as_usual_and_settles_there() {
        let t0 = Instant::now();
        let mut a = AdaptiveRate::new(20.0, 0.5, 100.0);
        a.on_throttle(t0, 20.0, t0, t0 + SEC);
        assert!((a.rate() - 14.0).abs() < 1e-9);
        // Resumed at 1 s; seven calls go through at 14/s, then one is throttled: they spent
        // the burst the server refilled during the backoff. The server is not penalising.
        let mut t = t0 + SEC;
        for _ in 0..7 {
            a.on_success(t);
            t += SEC / 14;
        }
        assert!(a.on_throttle(t, 14.0, t, t + SEC));
        assert!((a.rate() - 9.8).abs() < 1e-9, "cut to {}", a.rate());
        // 14/s is well above the limit, not just above it: the rate stays at 9.8 through
        // the hold and the quiet while after it, rather than growing back towards 13.3.
        let resumed = t + SEC;
        let t = succeed(&mut a, resumed, resumed + 12 * SEC);
        assert!((a.rate() - 9.8).abs() < 1e-9, "grew to {}", a.rate());
        // Then it probes, and a throttle there counts as one at the limit's edge.
        let t = succeed(&mut a, t, t + 10 * SEC);
        let probed = a.rate();
        assert!(probed > 9.8 && probed < 9.8 * 1.2, "probing at {probed}");
        assert!(a.on_throttle(t, probed, t, t + SEC));
        assert!(
            (a.rate() - probed * SETTLE).abs() < 1e-9,
            "cut to {}",
            a.rate()
        );
    }

    /// Calls one after another at the adaptive rate against a token bucket refilled at
    /// `limit` per second that holds `burst`, full at the start, which throttles a call when
    /// it is empty with a backoff of 1 s (then the call is tried again). Returns how long
    /// `calls` calls took, and the throttles.
    fn against_a_bucket(
        a: &mut AdaptiveRate,
        limit: f64,
        burst: f64,
        calls: usize,
    ) -> (Duration, usize) {
        let t0 = Instant::now();
        let (mut t, mut filled_at, mut tokens) = (t0, t0, burst);
        let (mut done, mut throttles) = (0, 0);
        while done < calls {
            tokens = (tokens + limit * (t - filled_at).as_secs_f64()).min(burst);
            filled_at = t;
            let rate = a.rate();
            if tokens >= 1.0 {
                tokens -= 1.0;
                a.on_success(t);
                done += 1;
                if done < calls {
                    t += Duration::from_secs_f64(1.0 / rate);
                }
            } else {
                a.on_throttle(t, rate, t, t + SEC);
                throttles += 1;
                t += SEC;
            }
        }
        (t - t0, throttles)
    }

    #[test]
    fn started_at_twice_a_bursty_limit_it_comes_within_a_fifth_of_the_ideal_time() {
        // nginx's limit_req at 10/s, burst 2 (three at once), Retry-After 1 s, as
        // `tests/gate/herd.rs` meets it: 100 calls, ideally 10 s.
        let mut a = AdaptiveRate::new(20.0, 1.0, 100.0);
        let (took, throttles) = against_a_bucket(&mut a, 10.0, 3.0, 100);
        assert!(took <= 12 * SEC, "took {took:?}, {throttles} throttles");
        assert_eq!(throttles, 2);
        assert!(a.rate() > 9.5 && a.rate() <= 10.0, "{}", a.rate());
    }

    #[test]
    fn it_holds_then_grows_back_to_just_under_the_rate_that_failed_and_waits_before_probing() {
        let t0 = Instant::now();
        let mut a = AdaptiveRate::new(4.0, 0.5, 100.0);
        a.on_throttle(t0, 4.0, t0, t0 + SEC);
        let cut = a.rate();
        // Backoff 1 s, hold 3 s more: nothing grows before t0 + 4 s.
        let mut t = t0;
        while t < t0 + 4 * SEC {
            t += SEC / 4;
            a.on_success(t);
        }
        assert!((a.rate() - cut).abs() < 1e-9, "held at {}", a.rate());
        while t < t0 + 20 * SEC {
            t += SEC / 4;
            a.on_success(t);
        }
        assert!((a.rate() - 3.8).abs() < 1e-9, "settled at {}", a.rate());
        // Quiet while of 10 s at the settled rate, then a probe upwards that speeds up.
        let settled_at = t;
        while t < settled_at + 12 * SEC {
            t += SEC / 4;
            a.on_success(t);
        }
        assert!(
            a.rate() > 3.8 && a.rate() < 3.8 * 1.2,
            "probing at {}",
            a.rate()
        );
    }

    #[test]
    fn the_hold_follows_a_backoff_lengthened_by_stale_throttles() {
        let t0 = Instant::now();
        let mut a = AdaptiveRate::new(25.0, 0.5, 100.0);
        a.on_throttle(t0, 25.0, t0, t0 + 15 * SEC);
        // Calls already on the wire escalate the penalty to 60 s: no new cut, a longer hold.
        assert!(!a.on_throttle(t0 - SEC / 10, 25.0, t0 + SEC / 10, t0 + 60 * SEC));
        let cut = a.rate();
        let mut t = t0 + 60 * SEC;
        while t < t0 + 200 * SEC {
            t += SEC / 4;
            a.on_success(t);
        }
        assert!(
            (a.rate() - cut).abs() < 1e-9,
            "grew to {} within 3 x 60 s of resuming",
            a.rate()
        );
    }

    #[test]
    fn a_throttle_at_the_edge_of_a_known_failure_cuts_only_to_the_settling_rate() {
        let t0 = Instant::now();
        let mut a = AdaptiveRate::new(20.0, 0.5, 100.0);
        a.on_throttle(t0, 20.0, t0, t0 + SEC);
        assert!((a.rate() - 14.0).abs() < 1e-9);
        // Grown back to 19 (within 10 % of the 20 that failed) and throttled there: the limit
        // is just below, so the rate settles under 19 rather than dipping to 0.7 x 19.
        a.rate = 19.0;
        assert!(a.on_throttle(t0 + 10 * SEC, 19.0, t0 + 10 * SEC, t0 + 11 * SEC));
        assert!((a.rate() - 19.0 * 0.95).abs() < 1e-9, "{}", a.rate());
        // Another process's throttle of a call sent at 19, counted late, never raises it.
        a.rate = 10.0;
        a.on_throttle(t0 + 12 * SEC, 19.0, t0 + 12 * SEC, t0 + 13 * SEC);
        assert!((a.rate() - 10.0).abs() < 1e-9, "{}", a.rate());
    }

    #[test]
    fn the_state_reads_back_as_written_on_another_clock() {
        let t0 = Instant::now() + 100 * SEC;
        let mut a = AdaptiveRate::new(10.0, 0.5, 100.0);
        a.on_throttle(t0, 10.0, t0 + SEC, t0 + 2 * SEC);
        a.on_success(t0 + 6 * SEC);
        // The store's clock reads 5 s behind ours, in microseconds since some epoch.
        let epoch = t0 - 50 * SEC;
        let to = |at: Instant| (at - epoch).as_micros() as i64 - 5_000_000;
        let from = |us: i64| epoch + Duration::from_micros((us + 5_000_000) as u64);
        let text = a.encode(to);
        let b = a.decode(&text, from).expect("reads back");
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
        for bad in [
            "",
            "x",
            "1 - - - - - - 5 0 0 extra",
            "1 - - - - - - 5 0",
            "1 - - - - - - 5 x 0",
            "1 - - - - - - 5 0 x",
            "NaN - - - - - - 1 0 0",
            "1 - - - - - -",
        ] {
            assert!(a.decode(bad, from).is_none(), "{bad:?}");
        }
    }

    /// Calls one after another at the adaptive rate against `limit` (calls per second, by
    /// time since `from`) for `length`; a call sent faster than the limit is throttled with a
    /// backoff of 1 s. Returns the throttles' instants.
    fn against(
        a: &mut AdaptiveRate,
        limit: impl Fn(Duration) -> f64,
        from: Instant,
        length: Duration,
    ) -> Vec<Instant> {
        let (mut t, mut throttles) = (from, Vec::new());
        while t < from + length {
            let rate = a.rate();
            if rate > limit(t - from) {
                a.on_throttle(t, rate, t, t + SEC);
                throttles.push(t);
                t += SEC;
            } else {
                a.on_success(t);
                t += Duration::from_secs_f64(1.0 / rate);
            }
        }
        throttles
    }

    #[test]
    fn probes_at_a_limit_that_stays_put_thin_out_and_a_limit_that_rose_is_found_again() {
        let t0 = Instant::now();
        let mut a = AdaptiveRate::new(40.0, 0.5, 100.0);
        let hour = 3600 * SEC;
        let throttles = against(&mut a, |_| 20.0, t0, hour);
        let gaps: Vec<Duration> = throttles.windows(2).map(|w| w[1] - w[0]).collect();
        // Once settled, each probe's quiet while is twice the one before, up to the longest:
        // the gaps between throttles (quiet while, hold and climb) grow by more than half
        // each time. At a steady beat of one probe per 30 s an hour would hold 120 throttles.
        let settled = gaps
            .iter()
            .position(|&gap| gap > 10 * SEC)
            .expect("it settled");
        for pair in gaps[settled + 1..].windows(2) {
            let grew = pair[1].as_secs_f64() >= pair[0].as_secs_f64() * 1.6 || pair[1] >= MAX_QUIET;
            assert!(grew, "gaps {gaps:?}");
        }
        assert!(
            throttles.len() <= 20,
            "{} throttles: {gaps:?}",
            throttles.len()
        );
        assert!(a.rate() >= 19.0 && a.rate() <= 20.0, "{}", a.rate());
        // The limit rises to 30/s: within the longest quiet while and the probe's climb, the
        // rate is well above the old limit and the old failure forgotten.
        let t1 = t0 + hour;
        against(&mut a, |_| 30.0, t1, MAX_QUIET + 120 * SEC);
        assert!(a.rate() > 25.0, "{}", a.rate());
        assert!(
            a.too_fast.is_none_or(|rate| rate > 28.0),
            "{:?}",
            a.too_fast
        );
    }

    #[test]
    fn stays_within_floor_and_ceiling() {
        let t0 = Instant::now();
        let mut a = AdaptiveRate::new(1.0, 0.8, 1.1);
        a.on_throttle(t0, 1.0, t0, t0 + SEC);
        assert!((a.rate() - 0.8).abs() < 1e-9);
        let mut fresh = AdaptiveRate::new(1.0, 0.8, 1.1);
        let mut t = t0;
        for _ in 0..1000 {
            t += SEC;
            fresh.on_success(t);
        }
        assert!((fresh.rate() - 1.1).abs() < 1e-9);
    }

    #[test]
    fn a_stale_throttle_that_leaves_the_backoff_as_it_was_forgets_no_success_since_the_resume() {
        let t0 = Instant::now();
        let mut a = AdaptiveRate::new(10.0, 0.5, 100.0);
        a.on_throttle(t0, 10.0, t0, t0 + SEC);
        // Resumed at 1 s: three calls go through.
        for i in 0..3 {
            a.on_success(t0 + SEC + i * SEC / 20);
        }
        // A call sent before the cut is throttled late, the backoff in force unchanged: the
        // server's three successes since the resume still stand.
        assert!(!a.on_throttle(t0 - SEC / 10, 10.0, t0 + SEC + SEC / 5, t0 + SEC));
        // So a throttle right after the resume is one of a drained burst, not of a penalty.
        let sent = t0 + SEC + SEC / 4;
        assert!(a.on_throttle(sent, 7.0, sent, sent + SEC));
        assert!((a.rate() - 4.9).abs() < 1e-9, "cut to {}", a.rate());
    }

    #[test]
    fn after_a_long_pause_a_probe_grows_at_most_a_tenth_for_its_second_of_success() {
        let t0 = Instant::now();
        let mut a = AdaptiveRate::new(10.0, 0.5, 100.0);
        a.on_throttle(t0, 10.0, t0, t0 + SEC);
        let settle = 10.0 * SETTLE;
        let mut t = t0;
        while a.rate() < settle {
            t = succeed(&mut a, t, t + SEC / 4);
        }
        // The quiet while (10 s) starts at the next success; the one after comes 40 s later,
        // 30 s into the probe, where the probe's speed has doubled six times: its second of
        // success counts at the cap of a tenth.
        a.on_success(t + SEC);
        a.on_success(t + 41 * SEC);
        assert!(
            (a.rate() - settle * 1.1).abs() < 1e-9,
            "grew to {}",
            a.rate()
        );
    }

    #[test]
    fn the_fleet_hears_of_a_throttle_that_cut_the_rate_or_lengthened_its_hold() {
        let t0 = Instant::now();
        let mut a = AdaptiveRate::new(25.0, 0.5, 100.0);
        let throttle = |sent_at, now, resume| RateEvent::Throttle {
            sent_at,
            sent_rate: 25.0,
            now,
            resume,
        };
        assert!(throttle(t0, t0, t0 + 15 * SEC).apply(&mut a), "a cut");
        // Sent before the cut, the backoff as it stood: nothing new.
        assert!(!throttle(t0 - SEC / 10, t0 + SEC / 10, t0 + 15 * SEC).apply(&mut a));
        // Sent before the cut, the penalty escalated: no cut, but a longer hold.
        assert!(throttle(t0 - SEC / 10, t0 + SEC / 5, t0 + 60 * SEC).apply(&mut a));
    }

    #[test]
    fn a_guess_grows_by_half_a_second_until_a_throttle_says_where_the_limit_is() {
        let t0 = Instant::now();
        let mut a = AdaptiveRate::new(10.0, 0.5, 1000.0);
        a.on_throttle(t0, 10.0, t0, t0);
        a.guessed();
        // No hold (a backoff of nothing), nothing too fast: growth of half the rate a
        // second, past the 10 a second that the guess took as too fast.
        a.on_success(t0);
        a.on_success(t0 + SEC);
        assert!((a.rate() - 10.5).abs() < 1e-9, "{}", a.rate());
        // A throttle of a call sent at the guess ends the guess: growth is ordinary again.
        let t1 = t0 + 2 * SEC;
        a.on_throttle(t1, 10.5, t1, t1);
        assert!((a.rate() - 7.35).abs() < 1e-9);
        a.too_fast = None;
        a.on_success(t1 + SEC);
        a.on_success(t1 + 2 * SEC);
        assert!((a.rate() - 7.35 * 1.02).abs() < 1e-9, "{}", a.rate());
    }

    #[test]
    fn a_measure_brings_the_rate_down_and_a_guess_settles_there() {
        let t0 = Instant::now();
        let mut a = AdaptiveRate::new(100.0, 0.5, 1000.0);
        a.on_throttle(t0, 100.0, t0, t0);
        a.guessed();
        assert!(!a.no_faster_than(80.0), "above the rate: nothing to do");
        assert_eq!(a.rate(), 70.0);
        assert!(a.no_faster_than(5.0));
        assert_eq!(a.rate(), 5.0);
        // What it now takes as too fast is what it settles just under: the measure.
        assert_eq!(a.too_fast.map(|rate| rate * SETTLE), Some(5.0));
        // It settles at the measure: successes for the quiet while leave it there.
        let t = succeed(&mut a, t0, t0 + 5 * SEC);
        assert_eq!(a.rate(), 5.0);
        // Below the floor, the floor.
        assert!(a.no_faster_than(0.1));
        assert_eq!(a.rate(), 0.5);
        // A rate that is no guess keeps what it knows to be too fast.
        let mut b = AdaptiveRate::new(10.0, 0.5, 100.0);
        b.on_throttle(t, 10.0, t, t);
        b.no_faster_than(3.0);
        succeed(&mut b, t, t + 16 * SEC);
        assert_eq!(b.rate(), 9.5, "grown back to just under the 10 that failed");
    }
}
