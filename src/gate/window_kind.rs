//! Whether a quota announced without saying its kind (the generic `X-RateLimit-*` fields, the
//! IETF draft's) counts in fixed windows or in a moving one, learnt from what the server
//! announces beside what the gate started.
//!
//! A fixed window comes back whole at its reset. Take two answers whose resets are further
//! apart than the resets' rounding and the longest round trip an answer took (a reset written
//! as a time from the answer is read that much later): under fixed windows, the later speaks
//! of a later window than the earlier, which counts none of the gate's starts from before the
//! earlier reset (less the rounding, and two of those trips). What the later says is left, plus all
//! that the gate started from then on, is therefore at least the limit. A moving window's
//! reset moves on as its oldest requests leave it, and gives back only what it counted a
//! window before: the first answer that says less than a fixed window would makes the quota
//! a moving window. So does an answer that says more is left than an earlier one with the
//! same reset, to the 10 ms, read before its call started: a fixed window only spends until
//! its reset, while a moving one gives back its oldest requests, and a reset written in
//! whole seconds may stay the same meanwhile.
//!
//! Servers that write resets in whole seconds (a number of seconds from now, or a Unix time
//! in whole seconds: every reset a whole number of seconds from the first) put them up to a
//! second early or late; a reset written to the millisecond, or finer, is taken as exact.
//! Rounded to whole seconds, a moving window of 2 s or less may go unlearnt: its requests
//! all leave it within the rounding. A fixed window that other clients spend from too can say
//! less, and one shorter than 2 s may end at the same whole second as the next: the gate then
//! keeps to a sliding window, which keeps to a fixed one too, more slowly.
//!
//! The moving window's length is the one the server announced, if it did (the draft's `w`);
//! else the longer of two lower bounds: the longest time to a reset it announced, less the
//! rounding (at a moving window's reset its oldest request leaves it, at most a window after
//! it came), and how old a request an answer counted must have been. It said so many were
//! in its window as the answered call reached the server: all of them started before the
//! answer was read, so one of them no later than the gate's latest starts of that many
//! units (those the server refused aside), and reached the server within a trip of its
//! start; the answered call reached it no sooner than it started. (Taking the answered
//! call's own start for the newest counted, a gate whose tasks' calls overtook one another
//! on their way learnt Flask-Limiter's window of 2 s as up to 2.44 s.) Answers go on
//! teaching it after the quota is known to move: a gate that keeps the window busy finds
//! its oldest request counted a window back.
//!
//! All of this is of one policy. A server that keeps several (a burst limit and a sustained
//! one), read by their tightest alone, answers of one and then of the other: a burst's reset
//! read after a sustained one's says far less is left than the sustained window would, and
//! the sustained one's reset is 20 s where the burst's was 2. So an answer of another limit,
//! or of another window than one told before, starts the learning over: only answers of one
//! policy are judged against one another, and the gate's starts, which every policy counts,
//! are kept. (Read as the tightest, express-rate-limit's 10 per 2 s and 40 per 20 s, both
//! fixed, were once learnt as a moving window of 10 per 20 s, and 60 calls took 82 s where
//! 30 s do.) Two policies of one limit whose windows go untold cannot be told apart.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use super::counter::worst_weighted;
use super::quota::Quota;
use crate::time::after;

/// How early or late a server that writes resets in whole seconds puts them.
const WHOLE_SECOND: Duration = Duration::from_secs(1);

/// How much more than their pace as read others are taken to have spent, when an answer is
/// judged against a fixed window.
const OTHERS_MARGIN: f64 = 1.5;

/// What others taking `others` units a second are taken to have spent over `span`: half as
/// much again, for the error of reading their pace.
fn theirs(others: f64, span: Duration) -> u64 {
    let theirs = OTHERS_MARGIN * others * span.as_secs_f64();
    theirs.ceil().min(u64::MAX as f64) as u64
}

/// How close the shortest window that counts what an answer counted is found.
const COUNTED_PRECISION: Duration = Duration::from_micros(100);

/// The most starts and answers kept, each.
const KEPT: usize = 4_096;

/// What an answer said, and when it was read.
#[derive(Debug, Clone, Copy)]
struct Answer {
    reset: Instant,
    remaining: u64,
    read: Instant,
    /// Whether the start of its call is known: only then is its trip, and so how late its
    /// reset may be read, within the longest trip the gate has seen.
    dated: bool,
}

/// Resets this close are the same: the instants of one reset, read at two answers on the
/// gate's clock, differ by the time between the clock reads.
const SAME_RESET: Duration = Duration::from_millis(10);

/// What the gate knows of an announced quota's kind, until it has learnt it is moving.
#[derive(Debug)]
pub(crate) struct WindowKind {
    /// The gate's starts, oldest first, each with its units: every one since `complete`.
    starts: VecDeque<(Instant, u64)>,
    /// Since when `starts` holds every start.
    complete: Instant,
    /// The answers read, in the order they came.
    answers: VecDeque<Answer>,
    /// The longest time to a reset announced.
    longest: Duration,
    /// The longest time from a call's start to reading its answer: no call took longer to
    /// reach the server.
    longest_trip: Duration,
    /// The first reset announced, and whether the resets are written in whole seconds (each
    /// a whole number of seconds from it, or a whole number of seconds from its answer), as
    /// far as they have told.
    first_reset: Option<Instant>,
    whole_seconds: bool,
    /// The oldest of the gate's starts that an answer counted, by its age then.
    oldest_counted: Duration,
    /// The policy the answers kept speak of: its limit, and its window if the server told it.
    policy: Option<(u64, Option<Duration>)>,
    /// How many of the answers to the calls sent after a reset, one after another, found
    /// the window not full again.
    not_refilled: u32,
    /// How much later than the server gives back its resets are written, as far as the
    /// answers have shown: at most [`MOST_LATE`].
    late: Duration,
    /// How far back the starts are kept at least, for a window kept of them.
    kept_for: Duration,
}

/// The most a reset written finer than whole seconds is taken to be late: the second that
/// slowapi adds to the reset `limits` gives it (Flask-Limiter adds the same second, and then
/// rounds down to whole seconds, which [`WHOLE_SECOND`] takes in).
const MOST_LATE: Duration = Duration::from_secs(1);

/// After so many resets in a row that did not give the window back whole, it is taken as
/// moving.
const NOT_REFILLED: u32 = 3;

impl WindowKind {
    /// Nothing known yet, at `now`.
    pub(crate) fn new(now: Instant) -> Self {
        Self {
            starts: VecDeque::new(),
            complete: now,
            answers: VecDeque::new(),
            longest: Duration::ZERO,
            longest_trip: Duration::ZERO,
            first_reset: None,
            whole_seconds: true,
            oldest_counted: Duration::ZERO,
            policy: None,
            not_refilled: 0,
            late: Duration::ZERO,
            kept_for: Duration::ZERO,
        }
    }

    /// Whether `quota` may speak of the policy the answers kept speak of: it announces no
    /// other limit, nor another window than one told before.
    pub(crate) fn is_of(&self, quota: &Quota) -> bool {
        self.policy.is_none_or(|(limit, window)| {
            quota.limit().is_none_or(|l| l == limit)
                && (quota.window()).is_none_or(|w| window.is_none_or(|told| told == w))
        })
    }

    /// Follows the policy of `quota`, of `limit`: an answer of another policy than the
    /// answers kept (a server announcing several, whose tightest is read, switches between
    /// them; or one that changed its limit) speaks of another window, and what they taught
    /// is of no use against it. The starts are kept, as they count in every window, and the
    /// longest trip, which is the network's.
    fn follow(&mut self, quota: &Quota, limit: u64) {
        if !self.is_of(quota) {
            *self = WindowKind {
                starts: std::mem::take(&mut self.starts),
                longest_trip: self.longest_trip,
                ..WindowKind::new(self.complete)
            };
        }
        let told = self.policy.and_then(|(_, window)| window);
        self.policy = Some((limit, quota.window().or(told)));
    }

    /// How far back the starts and answers are kept: two of the longest windows (by the
    /// resets or the counts, kept 10 % longer: a sliding-window counter counts a request
    /// for two windows) and the rounding either side.
    fn horizon(&self) -> Duration {
        let window = self.longest.max(self.oldest_counted);
        (window.saturating_mul(2))
            .saturating_add(window / 5)
            .saturating_add(WHOLE_SECOND.saturating_mul(2))
            .max(self.kept_for)
    }

    /// Keeps the starts of `span` back at least: a window kept of them (a sliding-window
    /// counter counts two of its windows) may be kept longer than the answers show.
    pub(crate) fn keep_starts_for(&mut self, span: Duration) {
        self.kept_for = span;
    }

    /// The gate started a call of `cost` units at `now`.
    pub(crate) fn started(&mut self, now: Instant, cost: u64) {
        if self.starts.len() == KEPT {
            if let Some((oldest, _)) = self.starts.pop_front() {
                self.complete = oldest;
            }
        }
        self.starts.push_back((now, cost));
        let horizon = self.horizon();
        while let Some(&(oldest, _)) = self.starts.front() {
            if after(oldest, horizon) >= now {
                break;
            }
            self.starts.pop_front();
            self.complete = oldest;
        }
    }

    /// Takes in `quota`, read at `now` in the answer to a call started at `dated` (if
    /// known: an undated answer is not judged); returns the moving window's length if it
    /// shows the quota is a moving window.
    pub(crate) fn observe(
        &mut self,
        quota: &Quota,
        dated: Option<Instant>,
        now: Instant,
    ) -> Option<Duration> {
        self.observe_beside(quota, (dated, 0.0), now)
    }

    /// Like [`WindowKind::observe`], while others spend from the server's windows at `others`
    /// units a second, as the answers of a fixed window show (see `QuotaBudget`): a fixed
    /// window says less by what they took, and only an answer that says less than that too
    /// makes the quota a moving window.
    pub(crate) fn observe_beside(
        &mut self,
        quota: &Quota,
        (dated, others): (Option<Instant>, f64),
        now: Instant,
    ) -> Option<Duration> {
        let limit = quota.limit()?;
        if quota.resets_in().is_zero() {
            return None;
        }
        self.follow(quota, limit);
        let answer = Answer {
            reset: after(now, quota.resets_in()),
            remaining: quota.remaining(),
            read: now,
            dated: dated.is_some(),
        };
        // How its reset is written, and how late, before it is judged by them.
        self.rounded(answer, quota.resets_in());
        if let Some(at) = dated {
            self.learn_late(answer, at);
        }
        let moving = dated.is_some_and(|at| {
            self.says_less(answer, (limit, others), at) || self.gave_back(answer, at)
        });
        if let Some(at) = dated {
            self.longest_trip = self.longest_trip.max(now.saturating_duration_since(at));
            self.counted(limit.saturating_sub(answer.remaining), at, now);
        }
        self.announced(answer, quota.resets_in());
        let window = quota.window().unwrap_or_else(|| self.window());
        // Moving, but of no length known yet: the answers to come will tell.
        (moving && !window.is_zero()).then_some(window)
    }

    /// Takes in `quota`, the answer to the call sent to learn the window after a reset, read
    /// at `now` while `uncounted` units of other calls were in flight; returns the moving window's length
    /// if it shows the quota is a moving window. A fixed window comes back whole at its
    /// reset; a sliding-window counter gives back what its previous window counted only as
    /// the current one wears on, so the first answer after a reset says little more is left
    /// than before it. Read as a fixed window, such a counter is spent at what each reset
    /// leaves: two thirds of its limit, when each reset is a second away (Flask-Limiter's
    /// `sliding-window-counter` of 20 per 2 s: 29 s for 200 calls), where its resets and
    /// counts are too few for [`WindowKind::observe`] to tell. Others spending from a fixed
    /// window at the start of each can say the same: the gate then keeps to a moving
    /// window, which keeps to a fixed one too; others taking `others` units a second are
    /// taken to have spent half as much again since the reset, as in
    /// [`WindowKind::observe_beside`].
    pub(crate) fn probed(
        &mut self,
        (quota, uncounted): (&Quota, u64),
        others: f64,
        now: Instant,
    ) -> Option<Duration> {
        let limit = quota.limit()?;
        if quota.resets_in().is_zero() {
            return None;
        }
        // The gate's starts from the reset that passed, less its rounding, how late resets
        // are written, and two trips (its answer's and a start's on its way): under a fixed
        // window, the next window counts none from before (the probe among them).
        let passed = (self.answers.iter().map(|a| a.reset)).filter(|reset| *reset <= now);
        let passed = passed.max()?;
        let early = (self.rounding().saturating_add(self.late()))
            .saturating_add(self.longest_trip.saturating_mul(2));
        let from = passed.checked_sub(early).unwrap_or(passed);
        if from < self.complete {
            return None;
        }
        let since: u64 = (self.starts.iter())
            .filter(|(at, _)| *at >= from)
            .map(|(_, cost)| cost)
            .sum();
        let refilled = (quota.remaining().saturating_add(uncounted)).saturating_add(since);
        let refilled = refilled.saturating_add(theirs(others, now.saturating_duration_since(from)));
        if refilled >= limit {
            self.not_refilled = 0;
            return None;
        }
        self.not_refilled += 1;
        let window = quota.window().unwrap_or_else(|| self.window());
        (self.not_refilled >= NOT_REFILLED && !window.is_zero()).then_some(window)
    }

    /// Whether `answer`, of a quota of `limit`, to a call started at `dated`, says less is
    /// left than a fixed window would, with others taking `others` units a second from it
    /// (half as much again, for the error of that reading).
    fn says_less(&self, answer: Answer, (limit, others): (u64, f64), dated: Instant) -> bool {
        // A reset written as a time from the answer is read that much later, up to a trip.
        let trip = self
            .longest_trip
            .max(answer.read.saturating_duration_since(dated));
        let rounding = self.rounding().saturating_add(trip);
        let apart = rounding.saturating_add(SAME_RESET);
        // Of a dated answer only: an undated one may have been read later than any trip seen.
        let earlier =
            (self.answers.iter().rev()).find(|a| a.dated && after(a.reset, apart) < answer.reset);
        // And a start may have reached the server a trip after it was made.
        let early = rounding.saturating_add(trip).saturating_add(self.late());
        let Some(from) = earlier.and_then(|a| a.reset.checked_sub(early)) else {
            return false;
        };
        if from < self.complete {
            return false;
        }
        let since: u64 = self
            .starts
            .iter()
            .filter(|(at, _)| *at >= from)
            .map(|(_, cost)| cost)
            .sum();
        let theirs = theirs(others, dated.saturating_duration_since(from));
        answer
            .remaining
            .saturating_add(since)
            .saturating_add(theirs)
            < limit
    }

    /// Takes in what `answer`, to a call started at `dated`, shows of how late the resets
    /// are written: if it says more is left than an answer read before that call started,
    /// the server gave back in between, by the time `answer` was read, so no later than
    /// then; an earlier reset that answer announced is late by the time from then to it.
    /// (slowapi writes its reset a second after `limits`' own, as a Unix time with seven
    /// decimals: read as exact, each fixed window was spent as if it lasted a second more,
    /// in bursts that met the server's next window half spent, and a moving window's length
    /// was taken from resets a second long: 1.6 times the limit's 20 s for 200 calls.) Of
    /// resets written finer than whole seconds only: those in whole seconds are taken to be
    /// up to a second off anyway.
    fn learn_late(&mut self, answer: Answer, dated: Instant) {
        let late = (self.answers.iter())
            .filter(|a| a.read <= dated && a.remaining < answer.remaining)
            .map(|a| a.reset.saturating_duration_since(answer.read))
            .max()
            .unwrap_or_default();
        self.late = self.late.max(late.min(MOST_LATE));
    }

    /// `quota`, its reset as late as the answers have shown resets are written taken off.
    pub(crate) fn corrected(&self, quota: &Quota) -> Quota {
        quota.sooner(self.late())
    }

    /// Whether `answer`, to a call started at `dated`, says more is left than an answer
    /// with the same reset read before that call started.
    fn gave_back(&self, answer: Answer, dated: Instant) -> bool {
        let same =
            |a: &&Answer| a.reset.max(answer.reset) - a.reset.min(answer.reset) <= SAME_RESET;
        (self.answers.iter())
            .filter(|a| a.read <= dated)
            .filter(same)
            .any(|a| a.remaining < answer.remaining)
    }

    /// An answer to a call started at `dated`, read at `now`, counted `used` units in its
    /// window. They all reached the server before that call did, and so were started before
    /// now (a call started after `dated` may reach the server first), each reaching the
    /// server within a trip of its start; the call started at `dated` reached it no earlier
    /// than `dated`. Counted by a moving window, one of them started no later than the
    /// gate's latest starts of that many units, and was still in the window. Counted by a
    /// sliding-window counter, whose previous window weighs in too, the gate's starts, each
    /// as young as it can have been, weigh that much under some phase of a window that long
    /// (a counter of a given phase counts a request for two windows, less as it ages, and of
    /// a longer window counts it more): the shortest window under which they do is a lower
    /// bound of either kind's, as the worst phase counts all of a moving window's requests.
    fn counted(&mut self, used: u64, dated: Instant, now: Instant) {
        if used == 0 {
            return;
        }
        let trip = self.longest_trip;
        let ages: Vec<(Duration, u64)> = (self.starts.iter().rev())
            .skip_while(|(at, _)| *at > now)
            .map(|&(at, cost)| (dated.saturating_duration_since(after(at, trip)), cost))
            .collect();
        // A moving window's bound, which is at least the counter's.
        let mut units = 0;
        let Some(&(longest, _)) = ages.iter().find(|(_, cost)| {
            units += cost;
            units >= used
        }) else {
            return;
        };
        if longest <= self.oldest_counted {
            return;
        }
        // Just longer than the age of the oldest, the worst phase counts it whole.
        let weighs = |window: Duration| worst_weighted(ages.iter().copied(), window) >= used as f64;
        let (mut short, mut long) = (self.oldest_counted, longest + COUNTED_PRECISION);
        if weighs(short) {
            return;
        }
        while long - short > COUNTED_PRECISION {
            let mid = short + (long - short) / 2;
            if weighs(mid) {
                long = mid;
            } else {
                short = mid;
            }
        }
        self.oldest_counted = short;
    }

    /// The server refused the call started at `sent`: it counted nothing of it.
    pub(crate) fn refused(&mut self, sent: Instant) {
        if let Some(i) = self.starts.iter().rposition(|(at, _)| *at == sent) {
            self.starts.remove(i);
        }
    }

    /// How early or late the resets may be: a second if written in whole seconds (or not
    /// known yet), else nothing.
    fn rounding(&self) -> Duration {
        if self.whole_seconds {
            WHOLE_SECOND
        } else {
            Duration::ZERO
        }
    }

    /// `answer` was read, its reset `resets_in` after it was.
    fn announced(&mut self, answer: Answer, resets_in: Duration) {
        self.longest = self.longest.max(resets_in);
        if self.answers.len() == KEPT {
            self.answers.pop_front();
        }
        self.answers.push_back(answer);
        let horizon = self.horizon();
        while (self.answers.front())
            .is_some_and(|oldest| after(oldest.reset, horizon) < answer.read)
        {
            self.answers.pop_front();
        }
    }

    /// Takes in whether `answer`'s reset, `resets_in` after it was read, is written in whole
    /// seconds, as the resets before it were.
    fn rounded(&mut self, answer: Answer, resets_in: Duration) {
        let first = *self.first_reset.get_or_insert(answer.reset);
        let apart = answer.reset.max(first) - answer.reset.min(first);
        // Clocks are read a little apart: a whole second is within 10 ms of one. A reset
        // written as a whole number of seconds from its answer says so by itself.
        let off = Duration::from_nanos((apart.as_nanos() % 1_000_000_000) as u64);
        let whole = off <= SAME_RESET || off >= WHOLE_SECOND - SAME_RESET;
        let counted = resets_in.subsec_nanos() == 0;
        self.whole_seconds = (self.whole_seconds && whole) || counted;
    }

    /// How late resets are written, as the answers have shown: nothing while they are
    /// written in whole seconds, whose rounding [`WindowKind::rounding`] takes in.
    fn late(&self) -> Duration {
        if self.whole_seconds {
            Duration::ZERO
        } else {
            self.late
        }
    }

    /// The moving window's length, as the resets and the counts say: the longer of two
    /// lower bounds, the oldest start an answer counted and the longest reset less its
    /// rounding and how late resets are written.
    pub(crate) fn window(&self) -> Duration {
        let longest = (self.longest.saturating_sub(self.rounding())).saturating_sub(self.late());
        longest.max(self.oldest_counted)
    }

    /// Takes in `quota`, read at `now` in the answer to a call started at `dated`, once the
    /// quota is known to be a moving window: what it says of its length.
    pub(crate) fn learn_window(&mut self, quota: &Quota, dated: Option<Instant>, now: Instant) {
        let (Some(limit), false) = (quota.limit(), quota.resets_in().is_zero()) else {
            return;
        };
        self.follow(quota, limit);
        let answer = Answer {
            reset: after(now, quota.resets_in()),
            remaining: quota.remaining(),
            read: now,
            dated: dated.is_some(),
        };
        self.rounded(answer, quota.resets_in());
        if let Some(at) = dated {
            self.learn_late(answer, at);
            self.longest_trip = self.longest_trip.max(now.saturating_duration_since(at));
            self.counted(limit.saturating_sub(answer.remaining), at, now);
        }
        self.announced(answer, quota.resets_in());
    }

    /// The gate's starts from `since` on.
    pub(crate) fn starts_since(&self, since: Instant) -> impl Iterator<Item = (Instant, u64)> {
        self.starts
            .iter()
            .copied()
            .filter(move |(at, _)| *at >= since)
    }
}

#[cfg(test)]
mod tests;
