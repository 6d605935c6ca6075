//! The budget a server's announced quota leaves the gate: how many more calls may start before
//! the server's window resets, and when each may start so that they spread evenly until then.
//!
//! Pure: takes instants, answers "start now", "not before T" or "wait for an answer". The
//! rules, each for a reason a test states:
//! - What the server says is taken less a reserve, and less the gate's other calls in flight
//!   (the server may not have counted them yet); every start spends one unit.
//! - Responses come back out of order, and one cannot tell from its reset alone which
//!   window an answer speaks of: servers round the time to the reset up to whole seconds, and
//!   each answer took its own time to arrive, so each puts the reset at or after the real
//!   one, by up to a second and its trip. So while a window is open, what is left only ever
//!   goes down: the lowest remaining wins, and the earliest reset (an answer resetting more
//!   than [`SAME_WINDOW`] before the one the budget tracks is of an older window, and is
//!   ignored). A new window is taken up after the tracked one reset, as below, or when an
//!   answer to a call started after the gate read the least said of the window says more:
//!   the server counted that call after it said less, so its window reset in between,
//!   however late its rounded reset put that.
//! - What is left is spread evenly until the reset: after a start at `s` with `n` units left,
//!   the next is not before `s + (reset - s) / (n + 1)`; with nothing left, not before the
//!   reset.
//! - When the reset passes, the gate does not assume the server's new window has begun (its
//!   reset was rounded to whole seconds, and clocks differ): one call goes, and the next wait
//!   for an announcement. If that call ends without one, the server no longer announces, and
//!   the budget is forgotten.
//! - Others may spend from the same window (other programs on the same key): between two
//!   answers of one window dated by their calls' starts, what is left falls by the gate's
//!   starts between and by what the others took. Their pace, so read, is taken to go on until
//!   the reset: what they will take by then is kept from what is spread.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use super::quota::Quota;
use crate::time::after;

/// Announcements whose resets are closer than this are of the same window: servers give the
/// reset in whole seconds, so two answers in one window may differ by up to a second.
pub(crate) const SAME_WINDOW: Duration = Duration::from_secs(1);

/// What the budget says of a call that would start now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Spend {
    /// It may start.
    Now,
    /// Not before this instant.
    NotBefore(Instant),
    /// Not before the server answers the call sent after the reset.
    AwaitAnswer,
}

/// The budget of the window the server last announced.
#[derive(Debug, Clone, PartialEq)]
struct Window {
    /// Units that may still be spent before `reset`.
    left: u64,
    /// When the server's window resets, on the gate's clock.
    reset: Instant,
    /// The last start in this window, and the units it spent.
    last_start: Option<(Instant, u64)>,
    /// When an announcement last set what is left: a call that started before then may
    /// have been counted in it at its real cost.
    told: Instant,
    /// The least the server said was left of this window, and when that was first read.
    said: (u64, Instant),
    /// Of what is left, the units others are taken to spend until the reset, at their pace
    /// as read when what is left was last set.
    others: u64,
}

impl Window {
    /// Units the gate may still spend before the reset: what is left, less what others are
    /// taken to spend until then.
    fn spendable(&self) -> u64 {
        self.left.saturating_sub(self.others)
    }

    /// When what is left, spread evenly until the reset, lets a call of `cost` start
    /// (`None`: at once): after the last start, its share of the time left; with less than
    /// `cost` left, the reset.
    fn next_start(&self, cost: u64) -> Option<Instant> {
        let left = self.spendable();
        if left < cost {
            return Some(self.reset);
        }
        let (last, spent) = self.last_start?;
        let share = |units: u64| u32::try_from(units).unwrap_or(u32::MAX);
        // Of the time from the last start to the reset, what it spent over what was left.
        let time = (self.reset - last).saturating_mul(share(spent));
        Some(last + time / share(left + spent).max(1))
    }
}

/// What the answers show of others spending from the same windows: each window's first
/// answer dated by its call's start is an anchor; a later one of the same window, dated a
/// while after, says how much more than the gate's own starts between the count fell by.
#[derive(Debug, Clone, Default, PartialEq)]
struct Others {
    /// Units the gate's starts spent, in all.
    spent: u64,
    /// The starts since the anchor (at most [`KEPT_STARTS`]), each with `spent` through it.
    starts: VecDeque<(Instant, u64)>,
    anchor: Option<Anchor>,
    /// Units a second the others take, as last read.
    pace: f64,
}

/// A window's first dated answer, for [`Others`].
#[derive(Debug, Clone, Copy, PartialEq)]
struct Anchor {
    /// The start of the call it answered.
    at: Instant,
    /// What it said was left.
    left: u64,
    /// The gate's units spent through its start.
    spent: u64,
    /// Its window's reset.
    reset: Instant,
}

/// After so many calls sent after a reset in a row found the server's window whole but for
/// themselves, the server's windows are taken to end no later than the gate's view of them,
/// and no call's room is kept for the call that learns the next.
const WHOLE_PROBES: u32 = 2;

/// The most starts [`Others`] keeps to count the gate's own between two answers.
const KEPT_STARTS: usize = 4_096;

/// Two answers of a window are read for the others' pace only if their calls started this
/// far apart at least: closer, a request or two of theirs would read as a fast pace.
const OTHERS_SPAN: Duration = Duration::from_secs(1);

impl Others {
    fn started(&mut self, at: Instant, units: u64) {
        self.spent = self.spent.saturating_add(units);
        if self.starts.len() == KEPT_STARTS {
            self.starts.pop_front();
            // The anchor's starts are no longer all known: read from the next answer on.
            self.anchor = None;
        }
        self.starts.push_back((at, self.spent));
    }

    /// The gate's units spent through its starts at `at` and before, if the starts kept go
    /// back that far: an answered call's own start is kept unless it came before the budget
    /// was known, or before the anchor (whose own start the anchor keeps).
    fn spent_through(&self, at: Instant) -> Option<u64> {
        let after = self.starts.partition_point(|&(start, _)| start <= at);
        after.checked_sub(1).map(|i| self.starts[i].1)
    }

    /// Takes in an answer to a call started at `at`, which said `left` units are left until
    /// `reset`; returns the others' pace, as read now. Of several starts at one instant,
    /// which the server counted before the answered one is not known: only an answer to a
    /// start alone at its instant is read.
    fn read(&mut self, at: Instant, left: u64, reset: Instant) -> f64 {
        let at_once = self
            .starts
            .iter()
            .filter(|&&(start, _)| start == at)
            .count();
        if at_once > 1 {
            return self.pace;
        }
        let Some(spent) = self.spent_through(at) else {
            return self.pace;
        };
        match self.anchor {
            Some(anchor)
                if anchor.at <= at
                    && after(reset, SAME_WINDOW) >= anchor.reset
                    && after(anchor.reset, SAME_WINDOW) >= reset =>
            {
                // A window that ran out says nothing of the others: they were refused too.
                let span = at - anchor.at;
                if span >= OTHERS_SPAN && left > 0 {
                    let fell = anchor.left.saturating_sub(left);
                    let theirs = fell.saturating_sub(spent - anchor.spent);
                    self.pace = theirs as f64 / span.as_secs_f64();
                }
            }
            _ => {
                self.anchor = Some(Anchor {
                    at,
                    left,
                    spent,
                    reset,
                });
                while self.starts.front().is_some_and(|&(start, _)| start < at) {
                    self.starts.pop_front();
                }
            }
        }
        self.pace
    }

    /// Units a second the others take, as last read.
    fn pace(&self) -> f64 {
        self.pace
    }

    /// Units the others are taken to spend from `from` until `reset`.
    fn until(&self, from: Instant, reset: Instant) -> u64 {
        let units = self.pace * reset.saturating_duration_since(from).as_secs_f64();
        units.ceil().min(u64::MAX as f64) as u64
    }
}

#[derive(Debug, Clone, PartialEq)]
enum State {
    /// Nothing announced (or forgotten): the budget holds nothing back.
    Unknown,
    /// A window the server announced.
    Open(Window),
    /// The announced window has reset; a call went out at this instant, spending these
    /// units, to learn the next.
    Probing(Instant, u64),
    /// The announced window has reset; no call has gone out yet to learn the next.
    Reset,
}

/// The budget the server's announcements leave the gate.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct QuotaBudget {
    /// Units of every announcement kept unspent, as asked.
    asked: u64,
    /// The largest cost a call has started with: kept unspent too until the server's windows
    /// have shown they do not end after the gate's view of them (see [`QuotaBudget::started_as`]).
    room: u64,
    /// How many of the calls sent after a reset, one after another, found the server's
    /// window whole but for themselves: at [`WHOLE_PROBES`], `room` is no longer kept.
    whole: u32,
    state: State,
    others: Others,
    /// What the last announcement said may be spent (less the reserve and the calls in
    /// flight it may not have counted), for a fleet's store to keep by its own rules: the
    /// store's window may be another than this one, and it counts the calls waiting for it
    /// as it knows them.
    word: Option<u64>,
}

impl QuotaBudget {
    /// A budget that keeps `reserve` units of every announcement unspent.
    pub(crate) fn new(reserve: u64) -> Self {
        Self {
            asked: reserve,
            room: 0,
            whole: 0,
            state: State::Unknown,
            others: Others::default(),
            word: None,
        }
    }

    /// The same, keeping a call's room of `room` units too (see [`QuotaBudget::started_as`]).
    pub(crate) fn with_room(mut self, room: u64) -> Self {
        self.room = room;
        self
    }

    /// Units a second others spend from the server's windows, as the answers show (see
    /// [`Others`]).
    pub(crate) fn others_pace(&self) -> f64 {
        self.others.pace()
    }

    /// Whether the budget may hold a call back (a server announced its quota).
    #[inline]
    pub(crate) fn is_known(&self) -> bool {
        !matches!(self.state, State::Unknown)
    }

    /// What of `quota` may be spent while `uncounted` units of other calls are in flight:
    /// what the server said is left, less the reserve and those.
    pub(crate) fn spendable(&self, quota: &Quota, uncounted: u64) -> u64 {
        quota
            .remaining()
            .saturating_sub(self.reserve())
            .saturating_sub(uncounted)
    }

    /// Units of every announcement kept unspent: as asked, and a call's room until the
    /// windows have shown they do not need it.
    fn reserve(&self) -> u64 {
        match self.whole >= WHOLE_PROBES {
            true => self.asked,
            false => self.asked.max(self.room),
        }
    }

    /// Takes in whether `quota`, the answer to the call sent after a reset, found the
    /// server's window whole but for that call's `cost`: if not (or if it says no limit to
    /// tell), the server's window may have ended after the gate's view of it, or others
    /// spent from it first, and a call's room is kept again.
    fn probed(&mut self, quota: &Quota, cost: u64) {
        let whole = quota
            .limit()
            .is_some_and(|limit| quota.remaining().saturating_add(cost) >= limit);
        self.whole = match whole {
            true => self.whole.saturating_add(1),
            false => 0,
        };
    }

    /// The server refused a call: its window ended later than the gate took it to, or
    /// others spent from it; a call's room is kept again.
    pub(crate) fn refused(&mut self) {
        self.whole = 0;
    }

    /// Takes in what the server announced at `now`, while `uncounted` units of the gate's other
    /// calls had gone out and `waiting` units more waited for the fleet's store to let them go.
    /// Returns whether the budget changed (waiters may start sooner).
    ///
    /// The server has counted none of them. A window the budget knew nothing of is taken less
    /// all of them: they started without spending from it. A window the budget tracks, or the
    /// one its probe learnt, is taken less those that went out only: the budget spent the
    /// others as they started (or, for a fleet, its store spends them as it lets them go, and
    /// lets none go while its probe is out); taking them off again would spend them twice.
    #[cfg(test)]
    pub(crate) fn observe(
        &mut self,
        quota: &Quota,
        uncounted: u64,
        waiting: u64,
        now: Instant,
    ) -> bool {
        self.observe_dated(quota, None, (uncounted, waiting), now)
    }

    /// Like [`QuotaBudget::observe`], the answer to a call started at `dated`, if known: a
    /// dated answer also says how fast others spend from the window (see [`Others`]), and
    /// what they will take until the reset is kept from what is spread.
    pub(crate) fn observe_dated(
        &mut self,
        quota: &Quota,
        dated: Option<Instant>,
        (uncounted, waiting): (u64, u64),
        now: Instant,
    ) -> bool {
        self.word = None;
        if quota.resets_in().is_zero() {
            // "Resets now" says nothing of the window to come; if the call that went to learn
            // it brought this, another may go.
            if matches!(self.state, State::Probing(..)) {
                self.state = State::Reset;
                return true;
            }
            return false;
        }
        let reset = after(now, quota.resets_in());
        if let State::Probing(probe, cost) = self.state {
            if dated == Some(probe) {
                self.probed(quota, cost);
            }
        }
        let left = self.spendable(quota, uncounted);
        self.word = Some(left);
        if let Some(at) = dated {
            self.others.read(at, quota.remaining(), reset);
        }
        // What others take from when the server counted what it said until the reset.
        let others = self.others.until(dated.unwrap_or(now), reset);
        let fresh = Window {
            left,
            reset,
            last_start: None,
            told: now,
            said: (quota.remaining(), now),
            others,
        };
        let window = match &mut self.state {
            // A window that reset, though no call asked since, says nothing of this one.
            State::Open(window) if now < window.reset => window,
            // The call sent to learn the new window is the first of it: the rest spread after.
            State::Probing(probe, cost) => {
                let last_start = Some((*probe, *cost));
                self.state = State::Open(Window {
                    last_start,
                    ..fresh
                });
                return true;
            }
            State::Unknown | State::Reset | State::Open(_) => {
                self.state = State::Open(Window {
                    left: self.spendable(quota, uncounted.saturating_add(waiting)),
                    ..fresh
                });
                return true;
            }
        };
        if after(reset, SAME_WINDOW) < window.reset {
            // An older window's answer.
            return false;
        }
        let (least, read) = window.said;
        if dated.is_some_and(|at| at >= read) && quota.remaining() > least {
            // The server counted this call after it said `least` was left, and says more:
            // its window reset since (or, a window of another kind, freed room), though the
            // rounded reset put it later. This is the new window's word, as a probe's is.
            self.state = State::Open(fresh);
            return true;
        }
        if quota.remaining() < least {
            window.said = (quota.remaining(), now);
        }
        let changed = left < window.left || reset < window.reset;
        if left < window.left {
            window.told = now;
            window.others = others;
        }
        window.left = window.left.min(left);
        window.reset = window.reset.min(reset);
        changed
    }

    /// May a call that costs `cost` units start at `now`? Moves on to the next window once
    /// the announced one reset.
    #[inline]
    pub(crate) fn check(&mut self, now: Instant, cost: u64) -> Spend {
        if matches!(&self.state, State::Open(window) if now >= window.reset) {
            self.state = State::Reset;
        }
        self.allows(now, cost)
    }

    /// What [`QuotaBudget::check`] answers, without moving on to the next window: a window
    /// that reset lets a call start, and [`QuotaBudget::started`] takes that call as the one
    /// that learns the next.
    #[inline]
    pub(crate) fn allows(&self, now: Instant, cost: u64) -> Spend {
        match &self.state {
            State::Unknown | State::Reset => Spend::Now,
            State::Probing(..) => Spend::AwaitAnswer,
            State::Open(window) if now >= window.reset => Spend::Now,
            State::Open(window) => match window.next_start(cost) {
                Some(next) if next > now => Spend::NotBefore(next),
                _ => Spend::Now,
            },
        }
    }

    /// Whether the budget holds nothing back at `now`, nor will until a call starts: no
    /// window is open (or the one announced has reset), and no call is out to learn one.
    pub(crate) fn is_idle(&self, now: Instant) -> bool {
        match &self.state {
            State::Unknown | State::Reset => true,
            State::Probing(..) => false,
            State::Open(window) => now >= window.reset,
        }
    }

    /// The earliest a call that costs `cost` units could start, from `now`, with `ahead`
    /// units to be spent before it: a lower bound, for a caller's deadline. Spends nothing.
    pub(crate) fn earliest(&self, now: Instant, ahead: u64, cost: u64) -> Instant {
        match &self.state {
            State::Open(window) if now < window.reset => {
                match window.next_start(ahead.saturating_add(cost)) {
                    Some(next) => next.max(now),
                    None => now,
                }
            }
            _ => now,
        }
    }

    /// A call that costs `cost` units started at `now`, after [`QuotaBudget::check`] said it
    /// may ([`QuotaBudget::started_as`] of weight 1).
    #[cfg(test)]
    pub(crate) fn started(&mut self, now: Instant, cost: u64) {
        self.started_as(now, cost, 1);
    }

    /// A call that costs `cost` units started at `now`, counting `weight` times against what
    /// is left and in the spacing of the next start (a fleet's process while the fleet's
    /// store does not answer).
    ///
    /// The call's room grows to the largest cost a call has started with. Where the server's
    /// reset is rounded to whole seconds and its answers take their time, the gate's view of
    /// a window can end after the server's window did, and the calls it spends meanwhile
    /// count in the server's next window; the call sent at the end of the gate's view to
    /// learn the next window then lands in that same window of the server's. What the gate
    /// spent there is at most what its view left after the reserve: keeping a call's room
    /// keeps room for that call. Once [`WHOLE_PROBES`] such calls in a row found the window
    /// whole but for themselves, the windows have shown they end no later than the gate's
    /// view, and the room is spent too. The room grows by the cost alone, whatever the weight.
    pub(crate) fn started_as(&mut self, now: Instant, cost: u64, weight: u64) {
        let reserve = self.reserve();
        self.room = self.room.max(cost);
        let grown = self.reserve() - reserve;
        let counted = cost.saturating_mul(weight);
        self.others.started(now, counted);
        match &mut self.state {
            State::Open(window) if now >= window.reset => self.state = State::Probing(now, cost),
            State::Open(window) => {
                window.left = window.left.saturating_sub(counted.saturating_add(grown));
                window.last_start = Some((now, counted));
            }
            State::Reset => self.state = State::Probing(now, cost),
            State::Unknown | State::Probing(..) => {}
        }
    }

    /// A call turned out to cost `extra` units more than it spent: they come off what is left.
    pub(crate) fn charge(&mut self, extra: u64) {
        if let State::Open(window) = &mut self.state {
            window.left = window.left.saturating_sub(extra);
        }
    }

    /// A call that started at `sent` spending `estimated` units turned out to cost `actual`:
    /// the difference is charged to, or given back to, the window it spent from, unless an
    /// announcement has set what is left since it started (the server's word may count it at
    /// its real cost already).
    pub(crate) fn settle(&mut self, sent: Option<Instant>, estimated: u64, actual: u64) {
        let (State::Open(window), Some(sent)) = (&mut self.state, sent) else {
            return;
        };
        if sent < window.told {
            return;
        }
        window.left = match actual.checked_sub(estimated) {
            Some(more) => window.left.saturating_sub(more),
            None => window.left.saturating_add(estimated - actual),
        };
        if let Some((last, spent)) = &mut window.last_start {
            if *last == sent {
                *spent = actual;
            }
        }
    }

    /// A call started at `sent` ended (or was dropped). If it was the call sent to learn the
    /// new window and no announcement came, the server no longer announces: the budget is
    /// forgotten. Returns whether it was.
    #[inline]
    pub(crate) fn ended(&mut self, sent: Option<Instant>) -> bool {
        match self.state {
            State::Probing(probe, _) if sent.is_some_and(|sent| sent >= probe) => {
                self.state = State::Unknown;
                true
            }
            _ => false,
        }
    }

    /// Calls that may still start in the announced window, if one is open: what is left,
    /// less what others are taken to spend until its reset.
    /// See the field's docs.
    #[inline]
    pub(crate) fn word(&self) -> Option<u64> {
        self.word
    }

    pub(crate) fn left(&self) -> Option<u64> {
        match &self.state {
            State::Open(window) => Some(window.spendable()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);
    const SEC: Duration = Duration::from_secs(1);

    fn quota(remaining: u64, resets_in: Duration) -> Quota {
        Quota::new(remaining, resets_in)
    }

    /// Calls of one unit each, as most of these tests make.
    impl QuotaBudget {
        fn check_one(&mut self, now: Instant) -> Spend {
            self.check(now, 1)
        }

        fn started_one(&mut self, now: Instant) {
            self.started(now, 1);
        }

        fn earliest_one(&self, now: Instant, ahead: u64) -> Instant {
            self.earliest(now, ahead, 1)
        }
    }

    /// Starts calls as early as the budget lets them, from `from`; returns their instants.
    fn drain(budget: &mut QuotaBudget, from: Instant, until: Instant) -> Vec<Duration> {
        let mut now = from;
        let mut starts = Vec::new();
        while now < until {
            match budget.check_one(now) {
                Spend::Now => {
                    budget.started_one(now);
                    starts.push(now - from);
                }
                Spend::NotBefore(at) => now = at,
                Spend::AwaitAnswer => break,
            }
        }
        starts
    }

    #[test]
    fn nothing_announced_holds_nothing_back() {
        let t0 = Instant::now();
        let mut budget = QuotaBudget::new(1);
        assert!(!budget.is_known());
        assert_eq!(budget.check_one(t0), Spend::Now);
        budget.started_one(t0);
        assert_eq!(budget.check_one(t0), Spend::Now);
    }

    #[test]
    fn what_is_left_is_spread_evenly_until_the_reset_less_the_reserve() {
        let t0 = Instant::now();
        let mut budget = QuotaBudget::new(1);
        assert!(budget.observe(&quota(5, 4 * SEC), 0, 0, t0));
        assert_eq!(budget.left(), Some(4));
        // 4 calls over the 4 s: one each second, the first at once; then the reset.
        let starts = drain(&mut budget, t0, t0 + 4 * SEC);
        assert_eq!(starts, [Duration::ZERO, SEC, 2 * SEC, 3 * SEC]);
        assert_eq!(budget.left(), Some(0));
        assert_eq!(
            budget.check_one(t0 + 3500 * MS),
            Spend::NotBefore(t0 + 4 * SEC)
        );
    }

    #[test]
    fn the_earliest_start_counts_the_calls_ahead_and_spends_nothing() {
        let t0 = Instant::now();
        let mut budget = QuotaBudget::new(1);
        assert_eq!(budget.earliest_one(t0, 100), t0, "nothing announced");
        budget.observe(&quota(4, 3 * SEC), 0, 0, t0);
        budget.started_one(t0);
        // 2 left: the next at 1 s; with 2 calls ahead, none before the reset.
        assert_eq!(budget.earliest_one(t0, 0), t0 + SEC);
        assert_eq!(budget.earliest_one(t0 + 2 * SEC, 0), t0 + 2 * SEC);
        assert_eq!(budget.earliest_one(t0, 1), t0 + SEC);
        assert_eq!(budget.earliest_one(t0, 2), t0 + 3 * SEC);
        assert_eq!(budget.left(), Some(2));
        assert_eq!(
            budget.earliest_one(t0 + 3 * SEC, 5),
            t0 + 3 * SEC,
            "the window reset"
        );
    }

    #[test]
    fn an_answer_resetting_exactly_a_second_earlier_is_of_the_same_window() {
        let t0 = Instant::now();
        let mut budget = QuotaBudget::new(0);
        budget.observe(&quota(30, 10 * SEC), 0, 0, t0);
        assert!(budget.observe(&quota(2, 9 * SEC), 0, 0, t0));
        assert_eq!(budget.left(), Some(2));
    }

    #[test]
    fn a_charge_comes_off_what_is_left() {
        let t0 = Instant::now();
        let mut budget = QuotaBudget::new(0);
        budget.observe(&quota(10, 10 * SEC), 0, 0, t0);
        budget.charge(4);
        assert_eq!(budget.left(), Some(6));
        budget.charge(100);
        assert_eq!(budget.left(), Some(0));
    }

    #[test]
    fn calls_in_flight_are_taken_as_not_yet_counted() {
        let t0 = Instant::now();
        let mut budget = QuotaBudget::new(0);
        budget.observe(&quota(10, 10 * SEC), 3, 0, t0);
        assert_eq!(budget.left(), Some(7));
        // More in flight than left: nothing may start until the reset.
        budget.observe(&quota(12, 10 * SEC), 30, 0, t0);
        assert_eq!(budget.left(), Some(0));
        assert_eq!(budget.check_one(t0), Spend::NotBefore(t0 + 10 * SEC));
    }

    #[test]
    fn within_a_window_the_lowest_remaining_wins_whatever_the_order() {
        let t0 = Instant::now();
        let mut budget = QuotaBudget::new(0);
        budget.observe(&quota(50, 10 * SEC), 0, 0, t0);
        // An answer sent earlier arrives later, with its reset rounded the other way.
        assert!(budget.observe(&quota(60, 9 * SEC), 0, 0, t0 + 100 * MS));
        assert_eq!(budget.left(), Some(50));
        assert!(budget.observe(&quota(40, 10 * SEC), 0, 0, t0 + 200 * MS));
        assert_eq!(budget.left(), Some(40));
        // The earliest reset is kept: t0 + 9.1 s.
        assert_eq!(budget.check_one(t0 + 9_000 * MS), Spend::Now);
        budget.started_one(t0 + 9_000 * MS);
        budget.observe(&quota(0, 50 * MS), 0, 0, t0 + 9_000 * MS);
        assert_eq!(
            budget.check_one(t0 + 9_020 * MS),
            Spend::NotBefore(t0 + 9_050 * MS)
        );
    }

    #[test]
    fn a_settled_call_gives_back_unless_an_announcement_since_set_what_is_left() {
        let t0 = Instant::now();
        let mut budget = QuotaBudget::new(3);
        budget.observe(&quota(13, 10 * SEC), 0, 0, t0);
        budget.started(t0, 3);
        assert_eq!(budget.left(), Some(7));
        // The server's word leaves as much as the gate counted: it does not count the call
        // any better, and what it cost less is given back.
        budget.observe(&quota(10, 9 * SEC), 0, 0, t0 + SEC);
        budget.settle(Some(t0), 3, 1);
        assert_eq!(budget.left(), Some(9));
        // A call after which the server said less: the server counted it already.
        budget.started(t0 + 2 * SEC, 3);
        budget.observe(&quota(8, 8 * SEC), 0, 0, t0 + 3 * SEC);
        assert_eq!(budget.left(), Some(5));
        budget.settle(Some(t0 + 2 * SEC), 3, 1);
        assert_eq!(budget.left(), Some(5));
    }

    #[test]
    fn the_spread_after_a_settled_call_counts_what_it_really_spent() {
        let t0 = Instant::now();
        let mut budget = QuotaBudget::new(4);
        budget.observe(&quota(24, 10 * SEC), 0, 0, t0);
        budget.started(t0, 4);
        budget.settle(Some(t0), 4, 1);
        assert_eq!(budget.left(), Some(19));
        // 1 unit spent of the 20 left at t0: the next call of 1 comes a twentieth of the
        // 10 s later, not the four twenty-thirds that 4 would take.
        assert_eq!(
            budget.check(t0 + 499 * MS, 1),
            Spend::NotBefore(t0 + 500 * MS)
        );
        assert_eq!(budget.check(t0 + 500 * MS, 1), Spend::Now);
    }

    #[test]
    fn a_call_of_the_largest_cost_spends_all_and_panics_nothing() {
        let t0 = Instant::now();
        let mut budget = QuotaBudget::new(1);
        budget.observe(&quota(u64::MAX, 10 * SEC), 0, 0, t0);
        budget.started(t0, u64::MAX);
        assert_eq!(budget.left(), Some(0));
    }

    #[test]
    fn the_reserve_grows_to_the_largest_call() {
        let t0 = Instant::now();
        let mut budget = QuotaBudget::new(2);
        budget.observe(&quota(40, 10 * SEC), 0, 0, t0);
        assert_eq!(budget.left(), Some(38));
        // A call of 2 fits the reserve; one of 5 takes its 5 and 3 more of reserve.
        budget.started(t0, 2);
        assert_eq!(budget.left(), Some(36));
        budget.started(t0 + SEC, 5);
        assert_eq!(budget.left(), Some(28));
        // Every later announcement keeps the 5 back; a smaller call does not shrink it.
        budget.started(t0 + 2 * SEC, 1);
        budget.observe(&quota(20, 8 * SEC), 0, 0, t0 + 2 * SEC);
        assert_eq!(budget.left(), Some(15));
    }

    /// A server whose windows end no later than the gate's view of them (a window that
    /// starts at the first request after the last ended, its reset rounded up): the call sent
    /// after each reset finds the window whole but for itself. After two such calls in a row
    /// the gate gives up the call's room it kept for that call; one that finds less, or a
    /// refusal, keeps it again. An answer to another call, or one without a limit to tell
    /// whole by, says nothing of it.
    #[test]
    fn a_calls_room_is_given_up_once_two_calls_after_a_reset_find_the_window_whole() {
        let t0 = Instant::now();
        let mut budget = QuotaBudget::new(0);
        let of_5 = |left| quota(left, SEC).with_limit(5);
        // At `at`, the window reset: one call goes, the next wait for its answer, read 1 ms
        // later (its window resets 1 s after that); returns what is left then.
        let after_reset = |budget: &mut QuotaBudget, at: Instant, answer: Quota| {
            assert_eq!(budget.check_one(at), Spend::Now);
            budget.started_one(at);
            assert_eq!(budget.check_one(at), Spend::AwaitAnswer);
            budget.observe_dated(&answer, Some(at), (0, 0), at + MS);
            budget.left()
        };
        let mut at = t0;
        let mut next = |budget: &mut QuotaBudget, answer| {
            at += SEC + MS;
            after_reset(budget, at, answer)
        };
        budget.started_one(t0);
        budget.observe_dated(&of_5(4), Some(t0), (0, 0), t0 + MS);
        assert_eq!(budget.left(), Some(3), "the first answer: the room kept");
        assert_eq!(next(&mut budget, of_5(4)), Some(3), "found whole once");
        assert_eq!(
            next(&mut budget, of_5(4)),
            Some(4),
            "twice: the room given up"
        );
        assert_eq!(next(&mut budget, of_5(4)), Some(4));
        assert_eq!(
            next(&mut budget, of_5(3)),
            Some(2),
            "found less: kept again"
        );
        assert_eq!(next(&mut budget, of_5(4)), Some(3));
        assert_eq!(next(&mut budget, of_5(4)), Some(4));
        budget.refused();
        assert_eq!(
            next(&mut budget, of_5(4)),
            Some(3),
            "after a refusal, kept again"
        );
        assert_eq!(next(&mut budget, of_5(4)), Some(4));
        // Without a limit, nothing tells the window whole.
        let mut budget = QuotaBudget::new(0);
        budget.observe_dated(&quota(4, SEC), Some(t0), (0, 0), t0 + MS);
        for _ in 0..3 {
            at += SEC + MS;
            assert_eq!(after_reset(&mut budget, at, quota(4, SEC)), Some(3));
        }
        // The answer to a call sent before the reset, read while the one sent after it is
        // out, is not that call's.
        let mut budget = QuotaBudget::new(0);
        budget.observe_dated(&of_5(4), Some(t0), (0, 0), t0 + MS);
        for _ in 0..3 {
            at += SEC + MS;
            budget.check_one(at);
            budget.started_one(at);
            budget.observe_dated(&of_5(4), Some(at - MS), (0, 0), at + MS);
            assert_eq!(budget.left(), Some(3));
        }
    }

    #[test]
    fn our_own_starts_count_until_the_server_says_less() {
        let t0 = Instant::now();
        let mut budget = QuotaBudget::new(1);
        budget.observe(&quota(11, 10 * SEC), 0, 0, t0);
        budget.started_one(t0);
        budget.started_one(t0 + SEC);
        // The server still says 11 (it had not counted ours): ours stay spent.
        budget.observe(&quota(11, 9 * SEC), 0, 0, t0 + SEC);
        assert_eq!(budget.left(), Some(8));
        budget.observe(&quota(6, 9 * SEC), 0, 0, t0 + SEC);
        assert_eq!(budget.left(), Some(5));
    }

    #[test]
    fn an_open_window_never_grows_and_an_older_one_is_ignored() {
        let t0 = Instant::now();
        let mut budget = QuotaBudget::new(0);
        budget.observe(&quota(3, 10 * SEC), 0, 0, t0);
        // A slow answer rounded up, or the next window: either way, not more to spend now.
        assert!(!budget.observe(&quota(90, 19 * SEC), 0, 0, t0 + SEC));
        assert_eq!(budget.left(), Some(3));
        assert_eq!(
            budget.check_one(t0 + 10 * SEC),
            Spend::Now,
            "the tracked reset holds"
        );
        let mut budget = QuotaBudget::new(0);
        budget.observe(&quota(30, 10 * SEC), 0, 0, t0);
        // Resetting 2 s before the tracked reset: an older window's answer.
        assert!(!budget.observe(&quota(2, 7 * SEC), 0, 0, t0 + SEC));
        assert_eq!(budget.left(), Some(30));
        assert!(!budget.observe(&quota(0, Duration::ZERO), 0, 0, t0 + 2 * SEC));
        assert_eq!(budget.left(), Some(30));
    }

    /// Every answer of a window of 5 per 1 s says it resets in 1 s, whatever the phase: an
    /// answer to a call started after the gate read that 1 was left, which says 4 are, shows
    /// the server's window reset before the rounded reset said, and opens the new window.
    #[test]
    fn a_call_that_finds_more_left_than_was_said_before_it_started_opens_the_new_window() {
        let t0 = Instant::now();
        let mut budget = QuotaBudget::new(0);
        budget.observe_dated(&quota(1, SEC), Some(t0), (0, 0), t0 + 10 * MS);
        assert_eq!(budget.check_one(t0 + 10 * MS), Spend::Now);
        budget.started_one(t0 + 10 * MS);
        assert_eq!(
            budget.check_one(t0 + 300 * MS),
            Spend::NotBefore(t0 + 1_010 * MS)
        );
        assert!(budget.observe_dated(&quota(4, SEC), Some(t0 + 10 * MS), (0, 0), t0 + 300 * MS));
        // Less a call's room, kept until the windows show they need none.
        assert_eq!(budget.left(), Some(3));
        assert_eq!(budget.check_one(t0 + 300 * MS), Spend::Now);
        // The new window's least is its own: a call started after it was read, finding 3,
        // spends on from there.
        budget.started_one(t0 + 300 * MS);
        assert!(!budget.observe_dated(&quota(3, SEC), Some(t0 + 300 * MS), (0, 0), t0 + 310 * MS));
        assert_eq!(budget.left(), Some(2));
        // A call started after that 3 was read finds 4: the next window again.
        budget.started_one(t0 + 320 * MS);
        assert!(budget.observe_dated(&quota(4, SEC), Some(t0 + 320 * MS), (0, 0), t0 + 330 * MS));
        assert_eq!(budget.left(), Some(3));
    }

    /// Two calls start before any answer: the later-started one's answer, read first, says 1
    /// is left; the earlier one's, read after, says 2. The server may have counted it first,
    /// so it shows no reset, and what is left stays what the least said; nor does an answer
    /// that says as little again. One started after the least was read does.
    #[test]
    fn a_call_started_before_the_least_was_read_shows_no_reset_by_finding_more() {
        let t0 = Instant::now();
        let mut budget = QuotaBudget::new(0);
        budget.observe_dated(&quota(1, SEC), Some(t0 + 5 * MS), (1, 0), t0 + 15 * MS);
        assert_eq!(budget.left(), Some(0));
        assert!(!budget.observe_dated(&quota(2, SEC), Some(t0), (0, 0), t0 + 20 * MS));
        assert_eq!(budget.left(), Some(0));
        assert!(!budget.observe_dated(&quota(1, SEC), Some(t0 + 15 * MS), (0, 0), t0 + 25 * MS));
        assert_eq!(budget.left(), Some(0));
        assert_eq!(
            budget.check_one(t0 + 30 * MS),
            Spend::NotBefore(t0 + 1_015 * MS)
        );
        // A call started after the least was first read, if before it was read again,
        // finding 4 shows the reset.
        assert!(budget.observe_dated(&quota(4, SEC), Some(t0 + 20 * MS), (0, 0), t0 + 30 * MS));
        assert_eq!(budget.left(), Some(4));
    }

    /// The window reset, though no call asked since: an answer read from then on (here, at
    /// the very instant) is of a window after it, and what it says is spread from there.
    /// Taken into the window that reset, a call would first have to go and learn the next.
    #[test]
    fn an_answer_read_once_the_window_reset_opens_the_next_though_no_call_asked() {
        let t0 = Instant::now();
        let mut budget = QuotaBudget::new(0);
        budget.observe_dated(&quota(3, SEC), Some(t0), (0, 0), t0 + 10 * MS);
        let reset = t0 + 1_010 * MS;
        assert!(budget.observe_dated(&quota(2, SEC), Some(t0 + 5 * MS), (0, 0), reset));
        assert_eq!(budget.left(), Some(2));
        assert_eq!(budget.check_one(reset), Spend::Now);
        budget.started_one(reset);
        // The one left kept as the call's room, until the windows show they need none.
        assert_eq!(budget.check_one(reset), Spend::NotBefore(reset + SEC));
    }

    /// Others take 3 a second from a window of 100 per 10 s: from two answers of the window,
    /// dated by their calls' starts 2 s apart, the gate reads their pace, and keeps what they
    /// will take until the reset from what it spreads.
    #[test]
    fn others_who_spend_from_the_window_are_read_from_dated_answers_and_left_room() {
        let t0 = Instant::now();
        let mut budget = QuotaBudget::new(0);
        budget.started_one(t0);
        budget.observe_dated(&quota(99, 10 * SEC), Some(t0), (0, 0), t0 + 100 * MS);
        // The reserve grew to the one unit the call started with.
        assert_eq!(budget.left(), Some(98), "nothing known of others yet");
        let at = t0 + 2 * SEC;
        budget.started_one(at);
        // It fell by 7: the gate's one start between, and 6 of the others'.
        budget.observe_dated(&quota(92, 8 * SEC), Some(at), (0, 0), at + 100 * MS);
        assert_eq!(budget.others_pace(), 3.0);
        // Of the 91 past the reserve, the others take 3 a second for the 8.1 s from the
        // answered call's start to the reset: 25, rounded up.
        assert_eq!(budget.left(), Some(66));
        // Spread over the 66 the gate may spend, not the 91.
        let next = at + (t0 + 10 * SEC + 100 * MS - at) / 67;
        assert_eq!(budget.check_one(at + 100 * MS), Spend::NotBefore(next));
    }

    /// An answer that comes late, dated before the anchor the others' pace is read from (its
    /// call's start no longer kept), moves no anchor: the gate's spending through it is not
    /// known.
    #[test]
    fn an_answer_dated_before_the_anchor_is_not_read() {
        let t0 = Instant::now();
        let mut budget = QuotaBudget::new(0);
        let (a, b, c) = (t0, t0 + 500 * MS, t0 + 2 * SEC);
        budget.started_one(a);
        budget.started_one(b);
        // b's answer first: the anchor, at b.
        budget.observe_dated(&quota(98, 9 * SEC), Some(b), (1, 0), b + 100 * MS);
        // a's, late.
        budget.observe_dated(&quota(99, 10 * SEC), Some(a), (0, 0), b + 200 * MS);
        budget.started_one(c);
        // From b's 98 to 92: the gate's start at c and 5 of the others' in 1.5 s.
        budget.observe_dated(&quota(92, 8 * SEC), Some(c), (0, 0), c + 100 * MS);
        assert_eq!(budget.others_pace(), 5.0 / 1.5);
    }

    /// An answer to one of several starts at an instant, or one that finds the window spent,
    /// says nothing of the others: which of the burst the server counted is not known, and a
    /// spent window refuses the others too.
    #[test]
    fn a_burst_or_a_spent_window_says_nothing_of_others() {
        let t0 = Instant::now();
        let mut budget = QuotaBudget::new(0);
        budget.started_one(t0);
        budget.started_one(t0);
        budget.observe_dated(&quota(99, 10 * SEC), Some(t0), (1, 0), t0 + 100 * MS);
        let at = t0 + 2 * SEC;
        budget.started_one(at);
        budget.observe_dated(&quota(90, 8 * SEC), Some(at), (0, 0), at + 100 * MS);
        assert_eq!(budget.others_pace(), 0.0, "the burst is no anchor");
        let later = t0 + 4 * SEC;
        budget.started_one(later);
        budget.observe_dated(&quota(0, 6 * SEC), Some(later), (0, 0), later + 100 * MS);
        assert_eq!(budget.others_pace(), 0.0, "a spent window is not read");
    }

    #[test]
    fn a_reset_of_zero_seconds_to_the_call_that_learns_lets_another_go() {
        let t0 = Instant::now();
        let mut budget = QuotaBudget::new(0);
        budget.observe(&quota(0, SEC), 0, 0, t0);
        assert_eq!(budget.check_one(t0 + SEC), Spend::Now);
        budget.started_one(t0 + SEC);
        assert!(budget.observe(&quota(0, Duration::ZERO), 0, 0, t0 + SEC));
        assert_eq!(budget.check_one(t0 + SEC), Spend::Now);
        budget.started_one(t0 + SEC);
        assert_eq!(budget.check_one(t0 + SEC), Spend::AwaitAnswer);
    }

    #[test]
    fn after_the_reset_one_call_learns_the_next_window_before_others_spend_it() {
        let t0 = Instant::now();
        let mut budget = QuotaBudget::new(0);
        budget.observe(&quota(1, SEC), 0, 0, t0);
        budget.started_one(t0);
        assert_eq!(budget.check_one(t0 + 500 * MS), Spend::NotBefore(t0 + SEC));
        assert_eq!(budget.check_one(t0 + SEC), Spend::Now);
        budget.started_one(t0 + SEC);
        assert_eq!(budget.check_one(t0 + SEC), Spend::AwaitAnswer);
        // A call sent before the reset ends: not the one that learns.
        assert!(!budget.ended(Some(t0)));
        assert_eq!(budget.check_one(t0 + 1050 * MS), Spend::AwaitAnswer);
        // Its answer: the server's window had not yet reset (our reset was early).
        assert!(budget.observe(&quota(0, 300 * MS), 0, 0, t0 + 1100 * MS));
        assert_eq!(
            budget.check_one(t0 + 1100 * MS),
            Spend::NotBefore(t0 + 1400 * MS)
        );
    }

    #[test]
    fn a_server_that_stops_announcing_is_no_longer_waited_for() {
        let t0 = Instant::now();
        let mut budget = QuotaBudget::new(0);
        budget.observe(&quota(5, SEC), 0, 0, t0);
        assert_eq!(budget.check_one(t0 + SEC), Spend::Now);
        budget.started_one(t0 + SEC);
        assert!(budget.ended(Some(t0 + SEC)));
        assert!(!budget.is_known());
        assert_eq!(budget.check_one(t0 + SEC), Spend::Now);
    }

    #[test]
    fn an_announcement_after_the_reset_opens_the_new_window_at_once() {
        let t0 = Instant::now();
        let mut budget = QuotaBudget::new(1);
        budget.observe(&quota(1, SEC), 0, 0, t0);
        assert_eq!(budget.check_one(t0 + SEC), Spend::Now);
        budget.started_one(t0 + SEC);
        budget.observe(&quota(99, 10 * SEC), 0, 0, t0 + 1100 * MS);
        assert_eq!(budget.left(), Some(98));
        // The 98 spread from the call that learnt the window until its reset at 11.1 s.
        let next = t0 + SEC + (10_100 * MS) / 99;
        assert_eq!(budget.check_one(t0 + 1100 * MS), Spend::NotBefore(next));
        assert_eq!(budget.check_one(next), Spend::Now);
    }

    #[test]
    fn calls_waiting_for_the_fleets_store_come_off_only_a_window_the_budget_knew_nothing_of() {
        let t0 = Instant::now();
        let mut budget = QuotaBudget::new(1);
        // Known nothing: 10, less the reserve, 2 units that went out and 3 that wait.
        budget.observe(&quota(10, 10 * SEC), 2, 3, t0);
        assert_eq!(budget.left(), Some(4));
        // The window it tracks: the waiting units were spent as they started, not again.
        assert!(!budget.observe(&quota(7, 10 * SEC), 2, 3, t0));
        assert_eq!(budget.left(), Some(4));
        // The window the call sent after the reset learnt: none of its calls could start
        // while it was out, so those that wait are not taken off it either.
        assert_eq!(budget.check_one(t0 + 10 * SEC), Spend::Now);
        budget.started_one(t0 + 10 * SEC);
        budget.observe(&quota(20, 10 * SEC), 0, 3, t0 + 10 * SEC);
        assert_eq!(budget.left(), Some(19));
    }
}
