//! What a server's limit is ([`Policy`], [`OtherClients`]), and the pure state that applies it.

use std::time::Duration;

use tokio::time::Instant;

use super::announce::Announced;
use super::fixed_window::FixedWindow;
use super::others::Arrivals;
use super::penalty::Penalty;
use super::token_bucket::TokenBucket;
use crate::rng::SplitMix64;

/// A limit the simulated server enforces: a fixed-window quota or a token bucket (or none),
/// optionally with an escalating penalty, with or without Retry-After in its answers (exact, or
/// rounded to whole seconds), and optionally shared with other clients.
///
/// A [`Server`](super::Server) has a global policy, and optionally a policy that every scope
/// (an account, a customer, a phone number: whatever the request names) gets its own copy of;
/// see [`ServerBuilder`](super::ServerBuilder).
///
/// Instants in a policy are offsets from the server's creation ([`Server::start`]).
/// Rejected requests never consume capacity.
///
/// [`Server::start`]: super::Server::start
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use paceline_sim::{OtherClients, Policy};
///
/// const SEC: Duration = Duration::from_secs(1);
///
/// // 10 requests per minute, in windows that begin 20 s after the server starts.
/// let quota = Policy::fixed_window(10, 60 * SEC).phase(20 * SEC);
///
/// // 4 per second with bursts of 4, halved between t = 100 s and t = 200 s; a request over the
/// // limit starts a 15 s penalty, doubling for every request inside it, up to 15 minutes; other
/// // clients use 1 request per second of the same budget.
/// let ads = Policy::token_bucket(4.0, 4)
///     .rate_from(100 * SEC, 2.0)
///     .rate_from(200 * SEC, 4.0)
///     .penalty(15 * SEC, 900 * SEC)
///     .other_clients(OtherClients::random(1.0));
/// # let _ = (quota, ads);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    limit: LimitKind,
    penalty: Option<(Duration, Duration)>,
    retry_after: bool,
    rounding: Rounding,
    announce: bool,
    others: Option<OtherClients>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum LimitKind {
    Unlimited,
    FixedWindow {
        limit: u32,
        window: Duration,
        phase: Duration,
    },
    /// The schedule holds `(offset, thousandths of a token per second)`, the first at zero.
    TokenBucket {
        burst: u32,
        schedule: Vec<(Duration, u64)>,
    },
}

impl Policy {
    /// No limit: every request is accepted (other clients, if any, are only recorded).
    pub fn unlimited() -> Self {
        Self::with_limit(LimitKind::Unlimited)
    }

    /// At most `limit` requests in each window of length `window`; windows are aligned at the
    /// server's start (move them with [`phase`](Self::phase)). A rejected request is told to
    /// retry when its window ends.
    ///
    /// # Panics
    ///
    /// If `limit` is 0 or `window` is zero.
    #[track_caller]
    pub fn fixed_window(limit: u32, window: Duration) -> Self {
        assert!(limit > 0, "`limit` must be at least 1 (got 0)");
        assert!(!window.is_zero(), "`window` must be longer than zero");
        Self::with_limit(LimitKind::FixedWindow {
            limit,
            window,
            phase: Duration::ZERO,
        })
    }

    /// A token bucket of `burst` tokens, full at the server's start, refilled at `rate_per_sec`
    /// tokens per second; each accepted request takes a token. A rejected request is told to
    /// retry when the next whole token is in.
    ///
    /// Rates are kept to a thousandth of a token per second (so that the bucket's arithmetic is
    /// exact, in integers).
    ///
    /// # Panics
    ///
    /// If `burst` is 0, or `rate_per_sec` is negative, infinite or NaN.
    #[track_caller]
    pub fn token_bucket(rate_per_sec: f64, burst: u32) -> Self {
        assert!(burst > 0, "`burst` must be at least 1 (got 0)");
        let rate = milli_per_sec(rate_per_sec, "rate_per_sec");
        Self::with_limit(LimitKind::TokenBucket {
            burst,
            schedule: vec![(Duration::ZERO, rate)],
        })
    }

    /// Moves a fixed window's boundaries to `server start + phase + k·window` (the phase is
    /// taken modulo the window).
    ///
    /// # Panics
    ///
    /// If the policy is not a [`fixed_window`](Self::fixed_window).
    #[track_caller]
    pub fn phase(mut self, phase: Duration) -> Self {
        match &mut self.limit {
            LimitKind::FixedWindow { phase: p, .. } => *p = phase,
            _ => panic!("`phase` applies to a fixed-window policy only"),
        }
        self
    }

    /// From `at` after the server's start on, a token bucket refills at `rate_per_sec`
    /// (until a later change, if any). The bucket keeps the tokens it holds.
    ///
    /// # Panics
    ///
    /// If the policy is not a [`token_bucket`](Self::token_bucket), if `at` is not later than
    /// the previous change, or if `rate_per_sec` is negative, infinite or NaN.
    #[track_caller]
    pub fn rate_from(mut self, at: Duration, rate_per_sec: f64) -> Self {
        let rate = milli_per_sec(rate_per_sec, "rate_per_sec");
        match &mut self.limit {
            LimitKind::TokenBucket { schedule, .. } => {
                let previous = schedule.last().map_or(Duration::ZERO, |&(from, _)| from);
                assert!(
                    at > previous,
                    "`at` must be later than the previous rate change"
                );
                schedule.push((at, rate));
            }
            _ => panic!("`rate_from` applies to a token-bucket policy only"),
        }
        self
    }

    /// An escalating penalty on top of the limit: a request over the limit is rejected and
    /// starts a penalty of `first`; a request arriving while a penalty runs is rejected and
    /// restarts the penalty, from its arrival, at twice the last length, up to `cap`. The time
    /// to the penalty's end is the answer's Retry-After. A penalty that has ended is
    /// forgotten: the next starts at `first` again.
    ///
    /// # Panics
    ///
    /// If `first` is zero or longer than `cap`.
    #[track_caller]
    pub fn penalty(mut self, first: Duration, cap: Duration) -> Self {
        assert!(!first.is_zero(), "`first` must be longer than zero");
        assert!(first <= cap, "`first` must not be longer than `cap`");
        self.penalty = Some((first, cap));
        self
    }

    /// Whether throttle answers carry a Retry-After (on by default): the time to the end of the
    /// penalty, or without a penalty, to when the limit has room again (none if the rate is
    /// zero for good).
    pub fn retry_after(mut self, on: bool) -> Self {
        self.retry_after = on;
        self
    }

    /// How the Retry-After of this policy's throttles is rounded: exact by default. Real
    /// servers that count in whole seconds round one way or the other; Flask-Limiter (through
    /// `limits`) rounds **down**, so every throttle in the last second before the limit has
    /// room says 0, and a penalty of 1.5 s says 1. The rounded value is the answer's
    /// [`Rejected::retry_after`](super::Rejected::retry_after) and the log's; the limit and the
    /// penalty keep their exact instants.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use paceline_sim::{Policy, Rounding, Server};
    ///
    /// const SEC: Duration = Duration::from_secs(1);
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// // 1 request per 2 s, as Flask-Limiter would answer.
    /// let policy = Policy::fixed_window(1, 2 * SEC).retry_after_rounded(Rounding::DownToSeconds);
    /// let api = Server::builder().latency(Duration::ZERO).global(policy).build();
    /// api.call(None).await.unwrap();
    /// tokio::time::sleep(Duration::from_millis(500)).await;
    /// // 1.5 s until the window ends: 1.
    /// assert_eq!(api.call(None).await.unwrap_err().retry_after, Some(SEC));
    /// tokio::time::sleep(SEC).await;
    /// // 0.5 s: 0, though the window has no room for another 0.5 s.
    /// assert_eq!(api.call(None).await.unwrap_err().retry_after, Some(Duration::ZERO));
    /// # }
    /// ```
    pub fn retry_after_rounded(mut self, rounding: Rounding) -> Self {
        self.rounding = rounding;
        self
    }

    /// Whether every answer announces this policy's quota (off by default), as many real APIs
    /// do on every response: [`Accepted::quota`] and [`Rejected::quota`] (or `scope_quota`,
    /// for a scope's policy) carry an [`Announced`] with the requests remaining and when they
    /// reset, the limit and the window. [`Announced`] says how each limit maps onto these;
    /// they count what the server really has left, other clients' use included. An
    /// [`unlimited`](Self::unlimited) policy has nothing to announce.
    ///
    /// With the `http` feature, `http::serve` writes them as header fields, in the dialect of
    /// your choice (`http::Dialect`).
    ///
    /// [`Accepted::quota`]: super::Accepted::quota
    /// [`Rejected::quota`]: super::Rejected::quota
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use paceline_sim::{Policy, Server};
    ///
    /// const SEC: Duration = Duration::from_secs(1);
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let api = Server::builder()
    ///     .global(Policy::fixed_window(2, 10 * SEC).announce_quota(true))
    ///     .build();
    /// let first = api.call(None).await.unwrap().quota.unwrap();
    /// let second = api.call(None).await.unwrap().quota.unwrap();
    /// let third = api.call(None).await.unwrap_err().quota.unwrap();
    /// assert_eq!([first.remaining, second.remaining, third.remaining], [1, 0, 0]);
    /// // The third was judged at 250 ms: the window ends 9.75 s later.
    /// assert_eq!(third.resets_in, Duration::from_millis(9_750));
    /// # }
    /// ```
    pub fn announce_quota(mut self, on: bool) -> Self {
        self.announce = on;
        self
    }

    /// Other clients share this limit: their requests take capacity before ours (at the same
    /// instant, theirs come first). They are never penalised, they never start or prolong a
    /// penalty, and the log records them as not ours.
    pub fn other_clients(mut self, others: OtherClients) -> Self {
        self.others = Some(others);
        self
    }

    fn with_limit(limit: LimitKind) -> Self {
        Self {
            limit,
            penalty: None,
            retry_after: true,
            rounding: Rounding::Exact,
            announce: false,
            others: None,
        }
    }
}

/// How a policy rounds its Retry-After; see [`Policy::retry_after_rounded`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Rounding {
    /// The exact time until the limit has room or the penalty ends (the default).
    #[default]
    Exact,
    /// Up to the next whole second: a client that honours it never comes back early.
    UpToSeconds,
    /// Down to the whole second, as Flask-Limiter does: under a second says 0.
    DownToSeconds,
}

impl Rounding {
    /// `exact`, rounded (saturating at the longest `Duration` of whole seconds).
    fn apply(self, exact: Duration) -> Duration {
        let whole = Duration::from_secs(exact.as_secs());
        match self {
            Self::Exact => exact,
            Self::DownToSeconds => whole,
            Self::UpToSeconds if whole == exact => whole,
            Self::UpToSeconds => whole.checked_add(Duration::from_secs(1)).unwrap_or(whole),
        }
    }
}

/// Other clients using part of a limit's capacity; see [`Policy::other_clients`].
///
/// Their requests come from the instant the limit's state is created (the server's start for
/// the global policy; the first request naming a scope, for a scope's), the first one after it,
/// each at a whole millisecond. Nothing runs in the background: the server works out their
/// arrivals when it judges one of ours or when the log is read.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use paceline_sim::{OtherClients, Policy, Server};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// // 5 per second; other clients send 2 a second, evenly: theirs at 500 ms takes a place in
/// // the first window, so 4 of our 5 get in (theirs at 1 s is in the next window).
/// let policy = Policy::fixed_window(5, Duration::from_secs(1)).other_clients(OtherClients::even(2.0));
/// let api = Server::builder().global(policy).build();
/// tokio::time::sleep(Duration::from_millis(900)).await;
/// let answers = futures::future::join_all((0..5).map(|_| api.call(None))).await;
/// assert_eq!(answers.iter().filter(|a| a.is_ok()).count(), 4);
/// assert_eq!(api.log().others(), 2);
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OtherClients {
    rate_milli: u64,
    random: bool,
}

impl OtherClients {
    /// `rate_per_sec` requests per second, evenly spaced: request `k` (from 1) arrives
    /// `k / rate_per_sec` after the start, rounded down to the millisecond.
    ///
    /// # Panics
    ///
    /// If `rate_per_sec` is not above zero (to a thousandth), or is infinite or NaN.
    #[track_caller]
    pub fn even(rate_per_sec: f64) -> Self {
        Self::new(rate_per_sec, false)
    }

    /// `rate_per_sec` requests per second on average, at pseudo-random instants drawn from the
    /// server's seed: the gaps between them are uniform between zero and twice the mean gap.
    ///
    /// # Panics
    ///
    /// If `rate_per_sec` is not above zero (to a thousandth), or is infinite or NaN.
    #[track_caller]
    pub fn random(rate_per_sec: f64) -> Self {
        Self::new(rate_per_sec, true)
    }

    #[track_caller]
    fn new(rate_per_sec: f64, random: bool) -> Self {
        let rate_milli = milli_per_sec(rate_per_sec, "rate_per_sec");
        assert!(
            rate_milli > 0,
            "`rate_per_sec` must be at least 0.001 (got {rate_per_sec})"
        );
        Self { rate_milli, random }
    }
}

/// A rate in thousandths per second.
#[track_caller]
fn milli_per_sec(rate: f64, name: &str) -> u64 {
    assert!(
        rate.is_finite() && rate >= 0.0,
        "`{name}` must be a finite rate of zero or more (got {rate})"
    );
    (rate * 1_000.0).round() as u64
}

/// Why a request was rejected, as far as one policy is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rejection {
    /// It arrived while a penalty was running.
    pub(crate) in_penalty: bool,
    /// The Retry-After to answer with, if this policy sends one.
    pub(crate) retry_after: Option<Duration>,
}

#[derive(Debug, Clone)]
enum Limiter {
    Unlimited,
    FixedWindow(FixedWindow),
    TokenBucket(TokenBucket),
}

impl Limiter {
    fn check(&mut self, now: Instant) -> Result<(), Option<Instant>> {
        match self {
            Self::Unlimited => Ok(()),
            Self::FixedWindow(w) => w.check(now),
            Self::TokenBucket(b) => b.check(now),
        }
    }

    fn take(&mut self, now: Instant) {
        match self {
            Self::Unlimited => {}
            Self::FixedWindow(w) => w.take(now),
            Self::TokenBucket(b) => b.take(now),
        }
    }
}

/// One policy's state (the global one, or one scope's): a pure decision on instants, which the
/// server calls in the order of arrival.
///
/// A request is judged in two steps so that a server with a global and a scope policy can
/// check both before either counts it: [`penalty_check`](Self::penalty_check) and
/// [`limit_check`](Self::limit_check) for each, then [`take`](Self::take) for each if none
/// rejected it.
#[derive(Debug, Clone)]
pub(crate) struct PolicyState {
    limiter: Limiter,
    penalty: Option<Penalty>,
    /// How the Retry-After is rounded; `None` if the policy sends none.
    retry_after: Option<Rounding>,
    announce: bool,
    others: Option<Arrivals>,
}

impl PolicyState {
    /// The state of `policy` on a server started at `start`, created at `created` (where other
    /// clients begin), drawing other clients' random arrivals from `rng`.
    pub(crate) fn new(policy: &Policy, start: Instant, created: Instant, rng: SplitMix64) -> Self {
        let limiter = match &policy.limit {
            LimitKind::Unlimited => Limiter::Unlimited,
            &LimitKind::FixedWindow {
                limit,
                window,
                phase,
            } => Limiter::FixedWindow(FixedWindow::new(start, limit, window, phase)),
            LimitKind::TokenBucket { burst, schedule } => {
                Limiter::TokenBucket(TokenBucket::new(start, *burst, schedule.clone()))
            }
        };
        Self {
            limiter,
            penalty: policy.penalty.map(|(first, cap)| Penalty::new(first, cap)),
            retry_after: policy.retry_after.then_some(policy.rounding),
            announce: policy.announce,
            others: policy
                .others
                .map(|o| Arrivals::new(created, o.rate_milli, o.random.then_some(rng))),
        }
    }

    /// If a penalty is running at `now`, rejects the request and restarts the penalty longer.
    pub(crate) fn penalty_check(&mut self, now: Instant) -> Option<Rejection> {
        let penalty = self.penalty.as_mut().filter(|p| p.running(now))?;
        let length = penalty.escalate(now);
        Some(Rejection {
            in_penalty: true,
            retry_after: self.told(length),
        })
    }

    /// If the limit has no room at `now`, rejects the request, starting a penalty if the policy
    /// has one.
    pub(crate) fn limit_check(&mut self, now: Instant) -> Option<Rejection> {
        let free_at = self.limiter.check(now).err()?;
        let retry_after = match &mut self.penalty {
            Some(penalty) => Some(penalty.start(now)),
            None => free_at.map(|at| at.saturating_duration_since(now)),
        };
        Some(Rejection {
            in_penalty: false,
            retry_after: retry_after.and_then(|exact| self.told(exact)),
        })
    }

    /// Counts an accepted request at `now`.
    pub(crate) fn take(&mut self, now: Instant) {
        self.limiter.take(now);
    }

    /// What the policy announces of its quota at `now` (after judging the request of `now`),
    /// if it announces: see [`Announced`] for the mapping.
    pub(crate) fn announce(&mut self, now: Instant) -> Option<Announced> {
        if !self.announce {
            return None;
        }
        let mut quota = match &mut self.limiter {
            Limiter::Unlimited => return None,
            Limiter::FixedWindow(w) => w.announce(now),
            Limiter::TokenBucket(b) => b.announce(now),
        };
        if let Some(until) = self.penalty.as_ref().and_then(|p| p.running_until(now)) {
            quota.remaining = 0;
            quota.resets_in = quota.resets_in.max(until - now);
        }
        Some(quota)
    }

    /// The Retry-After this policy answers with for an `exact` wait: rounded as it says, or
    /// none if it sends none.
    fn told(&self, exact: Duration) -> Option<Duration> {
        self.retry_after.map(|rounding| rounding.apply(exact))
    }

    /// The arrival of the next request from other clients, if there are any.
    pub(crate) fn next_other(&self) -> Option<Instant> {
        self.others.as_ref().map(Arrivals::peek)
    }

    /// Judges the next request from other clients (at [`next_other`](Self::next_other)),
    /// ignoring penalties, and returns its arrival and the answer.
    pub(crate) fn other_arrives(&mut self) -> (Instant, Result<(), Rejection>) {
        let others = self.others.as_mut().expect("no other clients");
        let at = others.peek();
        others.advance();
        let answer = match self.limiter.check(at) {
            Ok(()) => {
                self.limiter.take(at);
                Ok(())
            }
            Err(free_at) => Err(Rejection {
                in_penalty: false,
                retry_after: free_at.and_then(|t| self.told(t.saturating_duration_since(at))),
            }),
        };
        (at, answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn state(policy: &Policy, t0: Instant) -> PolicyState {
        PolicyState::new(policy, t0, t0, SplitMix64::new(0))
    }

    /// Judges one of our requests against a single policy.
    fn judge(s: &mut PolicyState, now: Instant) -> Result<(), Rejection> {
        if let Some(r) = s.penalty_check(now).or_else(|| s.limit_check(now)) {
            return Err(r);
        }
        s.take(now);
        Ok(())
    }

    fn over(retry_after: Option<Duration>) -> Result<(), Rejection> {
        Err(Rejection {
            in_penalty: false,
            retry_after,
        })
    }

    fn inside(retry_after: Option<Duration>) -> Result<(), Rejection> {
        Err(Rejection {
            in_penalty: true,
            retry_after,
        })
    }

    #[test]
    fn without_penalty_retry_after_is_when_room_comes() {
        let t0 = Instant::now();
        let mut s = state(&Policy::fixed_window(1, SEC), t0);
        assert_eq!(judge(&mut s, t0 + ms(100)), Ok(()));
        assert_eq!(judge(&mut s, t0 + ms(400)), over(Some(ms(600))));
        assert_eq!(judge(&mut s, t0 + SEC), Ok(()));
    }

    #[test]
    fn retry_after_can_be_left_out() {
        let t0 = Instant::now();
        let policy = Policy::token_bucket(1.0, 1).retry_after(false);
        let mut s = state(&policy, t0);
        assert_eq!(judge(&mut s, t0), Ok(()));
        assert_eq!(judge(&mut s, t0), over(None));
        let mut s = state(&policy.penalty(SEC, 4 * SEC), t0);
        assert_eq!(judge(&mut s, t0), Ok(()));
        assert_eq!(judge(&mut s, t0), over(None));
        assert_eq!(judge(&mut s, t0 + ms(500)), inside(None));
    }

    #[test]
    fn retry_after_can_be_rounded_to_whole_seconds_either_way() {
        let t0 = Instant::now();
        let answers = |rounding| {
            let policy = Policy::fixed_window(1, 2 * SEC).retry_after_rounded(rounding);
            let mut s = state(&policy, t0);
            judge(&mut s, t0).unwrap();
            [0, 1, 999, 1_000, 1_001, 1_999].map(|at| match judge(&mut s, t0 + ms(at)) {
                Err(rejection) => rejection.retry_after,
                Ok(()) => panic!("the window is full at {at} ms"),
            })
        };
        let secs = |s: [u64; 6]| s.map(|s| Some(Duration::from_secs(s)));
        assert_eq!(answers(Rounding::DownToSeconds), secs([2, 1, 1, 1, 0, 0]));
        assert_eq!(answers(Rounding::UpToSeconds), secs([2, 2, 2, 1, 1, 1]));
        assert_eq!(
            answers(Rounding::Exact),
            [2_000, 1_999, 1_001, 1_000, 999, 1].map(|n| Some(ms(n)))
        );
        // A penalty's Retry-After is rounded too; one that sends none stays silent.
        let penalised = Policy::token_bucket(10.0, 1)
            .penalty(ms(1_500), 4 * SEC)
            .retry_after_rounded(Rounding::DownToSeconds);
        let mut s = state(&penalised, t0);
        judge(&mut s, t0).unwrap();
        assert_eq!(judge(&mut s, t0), over(Some(SEC)));
        assert_eq!(judge(&mut s, t0 + ms(10)), inside(Some(3 * SEC)));
        let mut s = state(&penalised.retry_after(false), t0);
        judge(&mut s, t0).unwrap();
        assert_eq!(judge(&mut s, t0), over(None));
    }

    #[test]
    fn rounding_up_saturates_and_whole_seconds_stay_as_they_are() {
        assert_eq!(
            Rounding::UpToSeconds.apply(Duration::MAX),
            Duration::from_secs(u64::MAX)
        );
        assert_eq!(Rounding::UpToSeconds.apply(3 * SEC), 3 * SEC);
        assert_eq!(Rounding::DownToSeconds.apply(3 * SEC), 3 * SEC);
        assert_eq!(Rounding::UpToSeconds.apply(Duration::ZERO), Duration::ZERO);
        assert_eq!(Rounding::DownToSeconds.apply(ms(999)), Duration::ZERO);
    }

    #[test]
    fn penalty_starts_over_the_limit_and_rejects_even_with_room() {
        let t0 = Instant::now();
        let mut s = state(&Policy::token_bucket(10.0, 1).penalty(SEC, 4 * SEC), t0);
        assert_eq!(judge(&mut s, t0), Ok(()));
        assert_eq!(judge(&mut s, t0 + ms(50)), over(Some(SEC)));
        // The bucket has room again from 100 ms, but the penalty runs to 1050 ms.
        assert_eq!(judge(&mut s, t0 + ms(500)), inside(Some(2 * SEC)));
        assert_eq!(judge(&mut s, t0 + ms(2_499)), inside(Some(4 * SEC)));
        assert_eq!(judge(&mut s, t0 + ms(2_500)), inside(Some(4 * SEC)));
        assert_eq!(judge(&mut s, t0 + ms(6_500)), Ok(()));
    }

    #[test]
    fn announces_nothing_unless_asked_to_or_unlimited() {
        let t0 = Instant::now();
        let mut silent = state(&Policy::fixed_window(2, SEC), t0);
        assert_eq!(judge(&mut silent, t0), Ok(()));
        assert_eq!(silent.announce(t0), None);
        let mut unlimited = state(&Policy::unlimited().announce_quota(true), t0);
        assert_eq!(unlimited.announce(t0), None);
        let mut on = state(&Policy::fixed_window(2, SEC).announce_quota(true), t0);
        assert_eq!(judge(&mut on, t0), Ok(()));
        assert_eq!(on.announce(t0).map(|q| q.remaining), Some(1));
    }

    #[test]
    fn a_running_penalty_announces_nothing_left_until_it_ends() {
        let t0 = Instant::now();
        let policy = Policy::token_bucket(10.0, 2)
            .penalty(SEC, 4 * SEC)
            .announce_quota(true);
        let mut s = state(&policy, t0);
        let announced = |remaining, resets_in| Announced {
            remaining,
            resets_in,
            limit: 2,
            window: ms(200),
        };
        judge(&mut s, t0).unwrap();
        judge(&mut s, t0).unwrap();
        assert_eq!(s.announce(t0), announced(0, ms(200)).into());
        assert_eq!(judge(&mut s, t0 + ms(50)), over(Some(SEC)));
        // The bucket is full again at 200 ms, but the penalty runs to 1050 ms.
        assert_eq!(s.announce(t0 + ms(50)), announced(0, SEC).into());
        assert_eq!(s.announce(t0 + ms(300)), announced(0, ms(750)).into());
        // Over: the bucket's own numbers again.
        assert_eq!(
            s.announce(t0 + ms(1_050)),
            announced(2, Duration::ZERO).into()
        );
        // A penalty shorter than the bucket's refill announces the refill.
        let slow = Policy::token_bucket(0.1, 1)
            .penalty(SEC, SEC)
            .announce_quota(true);
        let mut s = state(&slow, t0);
        judge(&mut s, t0).unwrap();
        assert_eq!(judge(&mut s, t0), over(Some(SEC)));
        assert_eq!(s.announce(t0).map(|q| q.resets_in), Some(10 * SEC));
    }

    #[test]
    fn the_phase_and_the_schedule_apply_to_their_own_kind_only() {
        let r = std::panic::catch_unwind(|| Policy::token_bucket(1.0, 1).phase(SEC));
        assert!(r.is_err());
        let r = std::panic::catch_unwind(|| Policy::fixed_window(1, SEC).rate_from(SEC, 1.0));
        assert!(r.is_err());
        let r = std::panic::catch_unwind(|| {
            Policy::token_bucket(1.0, 1)
                .rate_from(2 * SEC, 1.0)
                .rate_from(SEC, 1.0)
        });
        assert!(r.is_err());
    }

    #[test]
    fn rates_are_kept_to_a_thousandth() {
        assert_eq!(milli_per_sec(2.5, "r"), 2_500);
        assert_eq!(milli_per_sec(0.0004, "r"), 0);
        assert!(std::panic::catch_unwind(|| milli_per_sec(f64::NAN, "r")).is_err());
        assert!(std::panic::catch_unwind(|| milli_per_sec(-1.0, "r")).is_err());
        assert!(std::panic::catch_unwind(|| OtherClients::even(0.0)).is_err());
    }

    #[test]
    fn other_clients_take_room_but_never_touch_the_penalty() {
        let t0 = Instant::now();
        let policy = Policy::fixed_window(2, SEC)
            .penalty(10 * SEC, 10 * SEC)
            .other_clients(OtherClients::even(4.0));
        let mut s = state(&policy, t0);
        assert_eq!(s.next_other(), Some(t0 + ms(250)));
        assert_eq!(s.other_arrives(), (t0 + ms(250), Ok(())));
        assert_eq!(judge(&mut s, t0 + ms(300)), Ok(()));
        // Theirs at 500 ms finds the window full: rejected, no penalty.
        assert_eq!(s.other_arrives(), (t0 + ms(500), over(Some(ms(500)))));
        assert_eq!(judge(&mut s, t0 + SEC), Ok(()));
    }
}
