//! A budget a server announced, kept by the rules of its kind of window: a fixed window by the
//! announced quota's rules (`budget.rs`), a bucket that refills evenly as a told bucket whose
//! level each announcement sets.
//!
//! A bucket's announcement is dated by the start of the call that carried it, when the gate
//! knows it ([`answering`](super::super::answering)): the server counted every call started
//! before, and none started after; of the calls started at that same instant, it counted at
//! least those whose answers were read, and the lowest level they said counts them all. Its
//! level then is what it said; the calls started since, and the dearest of those started at
//! the instant that it may not have counted, are spent from it again, each at its cost as
//! settled so far. An announcement dated before the one the budget holds is older news, and
//! is ignored. Undated (read outside a call),
//! the calls in flight are taken as uncounted, and the budget may only go down.
//!
//! Others may spend from the same bucket (another program with the same key): the bucket
//! then falls faster than the gate spends. Its [`Ledger`] reads their pace from the dated
//! announcements, and the bucket refills for the gate at the server's pace less theirs.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use super::super::budget::{QuotaBudget, Spend};
use super::super::counter::Counter;
use super::super::quota::Window;
use super::super::window_kind::WindowKind;
use super::told::Told;
use crate::Quota;
use crate::time::MAX_WAIT;

/// A budget a server announced, by the rules of its window.
#[derive(Debug)]
pub(super) enum Kept {
    /// A fixed window, or one of a kind the server did not say: the announced quota's rules,
    /// and, for the latter, what the answers show of its kind.
    Window(QuotaBudget, Option<WindowKind>),
    /// A bucket that refills evenly.
    Bucket(Bucket),
    /// A moving window the answers showed the budget is.
    Moving(Moving),
}

/// A moving window the answers showed a budget is, kept as a sliding-window counter of
/// unknown phase ([`Counter`]), which keeps a moving window of its length too: the gate's
/// starts in it, and what the server counted beyond them, each counted until two windows
/// after it came, the gate's from when its answer was read (the latest the server can have
/// counted it: requests sent a window apart may arrive closer); the window as long as the
/// answers show, [`MOVING_MARGIN`] more.
#[derive(Debug)]
pub(super) struct Moving {
    counter: Counter,
    /// What the answers go on showing of the window's length.
    kind: WindowKind,
    /// How much longer than they show it is kept.
    margin: f64,
}

/// A refusal keeps the window this much longer again, up to [`MOST_MARGIN`]: the server
/// refused a start the window kept allowed, so its window is longer (the answers show a
/// sliding-window counter's only as a lower bound: each is of the worst phase, where the
/// server's windows have one phase).
const REFUSED_MARGIN: f64 = 1.10;
const MOST_MARGIN: f64 = 2.0;

/// A moving window is kept shorter only when the answers show it at least 1 % shorter.
const SHORTER: f64 = 0.99;

/// How much longer than the answers show a moving window is kept: what they show of a
/// sliding-window counter's is a lower bound (see [`REFUSED_MARGIN`]). Measured in paused
/// time against a simulated counter (`tests/gate/quota.rs`): 2 and 3 % let one of 200 calls
/// be refused, 5 % none at any phase tried.
const MOVING_MARGIN: f64 = 1.05;

impl Moving {
    /// A moving window of `limit` units in any `window` (as the answers showed it, with
    /// `kind`, or as the server said), which the gate's starts spent from, at `now`.
    pub(super) fn new((limit, window): (u64, Duration), kind: WindowKind, now: Instant) -> Self {
        let mut moving = Moving {
            counter: Counter::new(limit, window),
            kind,
            margin: MOVING_MARGIN,
        };
        moving.keep(window, now);
        moving
    }

    /// Keeps the window `window` long (and its margin more), the gate's starts in the two
    /// last.
    fn keep(&mut self, window: Duration, now: Instant) {
        let window = window.mul_f64(self.margin).max(Duration::from_nanos(1));
        self.kind.keep_starts_for(window.saturating_mul(2));
        // What the counter counts still counts, each start from when its answer was read;
        // a longer window counts the starts before them too.
        let since = now.checked_sub(window.saturating_mul(2)).unwrap_or(now);
        let kept_from = self.counter.earliest_sent();
        let earlier = (self.kind.starts_since(since))
            .filter(|&(at, _)| kept_from.is_none_or(|kept_from| at < kept_from));
        self.counter = self.counter.kept_as(window, earlier);
    }

    /// Takes in `quota`, read at `now` in the answer to a call started at `dated`, while
    /// `uncounted` units of the gate's other calls were in flight: a longer window than it
    /// keeps, if it shows one, and what the server counted beyond the gate's starts, which
    /// came as late as now at the latest. The server may not have counted those in flight,
    /// and will: what it said is left is taken less them. Returns whether the budget changed.
    fn observe(
        &mut self,
        quota: &Quota,
        (dated, uncounted): (Option<Instant>, u64),
        now: Instant,
    ) -> bool {
        self.kind.learn_window(quota, dated, now);
        if let Some(sent) = dated {
            self.counter.answered(sent, now);
        }
        let window = quota.window().unwrap_or_else(|| self.kind.window());
        // Longer, or shorter as the answers show the resets later than they showed before
        // (the longest reset, less how late they are written, then said less).
        let kept = window.mul_f64(self.margin);
        let shorter = !kept.is_zero() && kept < self.counter.per().mul_f64(SHORTER);
        let longer = kept > self.counter.per() || shorter;
        if longer {
            self.keep(window, now);
        }
        let left = self.counter.left(now);
        let said = quota.remaining().saturating_sub(uncounted);
        if said < left {
            self.counter.started(now, left - said);
        }
        longer || said < left
    }

    fn started(&mut self, now: Instant, cost: u64) {
        self.counter.started(now, cost);
        self.kind.started(now, cost);
    }

    /// The server refused the call started at `sent`, which drew `cost`: it counted nothing
    /// of it, and its window is longer than kept.
    fn refused(&mut self, (sent, now): (Instant, Instant), cost: u64) {
        self.counter.settle(sent, now, cost, 0);
        self.kind.refused(sent);
        let learnt = self.counter.per().div_f64(self.margin);
        self.margin = (self.margin * REFUSED_MARGIN).min(MOST_MARGIN);
        self.keep(learnt.max(self.kind.window()), now);
    }
}

/// An announced bucket: its level as the latest announcement set it, spent since.
#[derive(Debug)]
pub(super) struct Bucket {
    told: Told,
    /// When the level was announced (the start of the call that carried it).
    told_at: Instant,
    /// How many answers to starts at `told_at` were read (0: `told_at` is when an undated
    /// announcement was read), and the lowest level they said.
    answers: usize,
    level: u64,
    /// The starts since `told_at` (at most [`KEPT_STARTS`]; an announcement dated before the
    /// last start let go is ignored).
    since: VecDeque<Start>,
    /// The latest start let go from `since` to keep it short.
    let_go: Option<Instant>,
    /// How long the server takes to refill the bucket's limit, as its resets say.
    refill: Duration,
    /// What the gate spent of the bucket, to tell others' spending from its own.
    ledger: Ledger,
}

/// A start the bucket counts again against a dated announcement.
#[derive(Debug, Clone, Copy)]
struct Start {
    at: Instant,
    /// Its cost as settled so far.
    cost: u64,
    /// The ledger's totals with this start in them.
    spent: u64,
    returned: u64,
}

/// The gate's own spending from an announced bucket, and what it shows of others': between
/// two dated announcements the server refilled the bucket at its pace, the gate spent what it
/// started less what it was given back, and whatever else the level fell by, others took.
///
/// Each dated announcement is kept as an anchor: its level, and the ledger's totals through
/// the start it is dated by (what was given back before that start is in the level; what
/// was given back after is not). The others' pace is read over the span from the oldest
/// anchor less than a refill period old to the newest, so that a refund landing on one side
/// of an anchor or the other moves the estimate by little. A span in which the bucket could
/// have been full (the level of an anchor, plus the refill and all that was given back until
/// the next, reaches the limit) says nothing of others: the server lost refill there. The
/// anchors then start again from the later one.
#[derive(Debug, Default)]
struct Ledger {
    /// Units the gate's starts spent, in all.
    spent: u64,
    /// Units given back: what settled calls cost less than they spent, and what refused
    /// calls spent (a server does not charge a request it refused).
    returned: u64,
    anchors: VecDeque<Anchor>,
    /// The others' pace, units a second, as last read.
    others: f64,
    /// The shortest time from a call's start to reading its answer's announcement.
    round_trip: Option<Duration>,
}

/// A dated announcement, for the ledger.
#[derive(Debug, Clone, Copy)]
struct Anchor {
    at: Instant,
    level: u64,
    spent: u64,
    returned: u64,
}

/// The most starts a bucket keeps to count again against a dated announcement.
const KEPT_STARTS: usize = 4_096;

impl Kept {
    /// A budget from its first announcement, `quota` (in the answer to a call started at
    /// `dated`, if known), read at `now` while `uncounted` units
    /// of the calls in flight may not be counted in it, and `unsent` more wait for the
    /// fleet's store to let them go: a bucket if `window` says so and `quota` gives its
    /// limit, else a window, keeping `reserve` units unspent (fixed if `window` says so, else
    /// fixed until the answers show it moves).
    pub(super) fn first(
        window: Option<Window>,
        (quota, dated): (&Quota, Option<Instant>),
        ((reserve, room), uncounted, unsent): ((u64, u64), u64, u64),
        now: Instant,
    ) -> Self {
        if window == Some(Window::Refilling) {
            if let Some(bucket) = Bucket::first(quota, now, uncounted) {
                return Kept::Bucket(bucket);
            }
        }
        let mut budget = QuotaBudget::new(reserve).with_room(room);
        budget.observe_dated(quota, dated, (uncounted, unsent), now);
        let mut kind = window.is_none().then(|| WindowKind::new(now));
        if let Some(kind) = &mut kind {
            // The calls started before the first announcement were started by now: the
            // answered one and those in flight, or as many as the server counted, whichever
            // is more. Taken as started now, they weigh in the window learnt from the next
            // answers no less than they did (a sliding-window counter counts the burst
            // before the first answer for two windows: left out, the answers would show a
            // window longer than the server's).
            let before = quota
                .limit()
                .map_or(0, |limit| limit.saturating_sub(quota.remaining()));
            kind.started(now, before.max(uncounted.saturating_add(1)));
            kind.observe(quota, None, now);
        }
        Kept::Window(budget, kind)
    }

    /// Takes in `quota`, announced by the answer to a call started at `dated` if known, read
    /// at `now` while `uncounted` units of the calls in flight may not be counted in it (and
    /// `unsent` more wait for the fleet's store, which only a window the budget knew nothing
    /// of is taken less). Returns whether the budget changed.
    pub(super) fn observe(
        &mut self,
        quota: &Quota,
        (dated, uncounted, unsent): (Option<Instant>, u64, u64),
        now: Instant,
    ) -> bool {
        match self {
            Kept::Window(budget, kind) => {
                // The answer to the call sent to learn the window after a reset: a fixed
                // window is full again, less what that call, those in flight and the others
                // spent.
                let others = budget.others_pace();
                let probed = budget.allows(now, 1) == Spend::AwaitAnswer;
                let learnt = kind.as_mut().and_then(|kind| {
                    let moving = kind.observe_beside(quota, (dated, others), now);
                    let refilled = probed.then_some((quota, uncounted));
                    moving.or_else(|| refilled.and_then(|probe| kind.probed(probe, others, now)))
                });
                match (learnt, kind.take(), quota.limit()) {
                    (Some(window), Some(kind), Some(limit)) => {
                        let mut moving = Moving::new((limit, window), kind, now);
                        moving.observe(quota, (dated, uncounted), now);
                        *self = Kept::Moving(moving);
                        true
                    }
                    (_, taken, _) => {
                        // Its reset as late as the answers show resets are written.
                        let quota = taken.as_ref().map_or(*quota, |kind| kind.corrected(quota));
                        *kind = taken;
                        budget.observe_dated(&quota, dated, (uncounted, unsent), now)
                    }
                }
            }
            Kept::Bucket(bucket) => bucket.observe(quota, (dated, uncounted), now),
            Kept::Moving(moving) => moving.observe(quota, (dated, uncounted), now),
        }
    }

    /// Whether `quota` may be of the budget kept: a moving window is learnt of one policy,
    /// and a quota of another limit, or that tells another window, is not of it.
    pub(super) fn is_of(&self, quota: &Quota) -> bool {
        match self {
            Kept::Moving(moving) => moving.kind.is_of(quota),
            Kept::Window(..) | Kept::Bucket(_) => true,
        }
    }

    pub(super) fn check(&mut self, now: Instant, cost: u64) -> Spend {
        if let Kept::Window(budget, _) = self {
            return budget.check(now, cost);
        }
        self.allows(now, cost)
    }

    /// What [`Kept::check`] answers, without moving a window on to the next: a window that
    /// reset lets a call start, which then learns the next.
    pub(super) fn allows(&self, now: Instant, cost: u64) -> Spend {
        match self {
            Kept::Window(budget, _) => budget.allows(now, cost),
            Kept::Bucket(Bucket { told, .. }) => match told.next_start(now, cost) {
                Some(at) => Spend::NotBefore(at),
                None => Spend::Now,
            },
            Kept::Moving(Moving { counter, .. }) => match counter.next_start(now, cost) {
                Some(at) => Spend::NotBefore(at),
                None => Spend::Now,
            },
        }
    }

    /// Whether it holds nothing back at `now`, nor will until a call starts: a window that
    /// reset (and no call out to learn the next), a bucket or moving window full again.
    pub(super) fn is_idle(&self, now: Instant) -> bool {
        match self {
            Kept::Window(budget, _) => budget.is_idle(now),
            Kept::Bucket(Bucket { told, .. }) => told.left(now) == told.limit(),
            Kept::Moving(Moving { counter, .. }) => counter.left(now) == counter.limit(),
        }
    }

    /// The earliest a call of `cost` could start, from `now`, behind `ahead` units of the
    /// calls waiting before it (which a window spends first): a lower bound.
    pub(super) fn earliest(&self, now: Instant, ahead: u64, cost: u64) -> Instant {
        match self {
            Kept::Window(budget, _) => budget.earliest(now, ahead, cost),
            Kept::Bucket(Bucket { told, .. }) => told.next_start(now, cost).unwrap_or(now),
            Kept::Moving(Moving { counter, .. }) => counter.next_start(now, cost).unwrap_or(now),
        }
    }

    /// A call of `cost` started at `now`; a window counts it `weight` times against what is
    /// left (see [`QuotaBudget::started_as`]), a bucket and a moving window once.
    pub(super) fn started(&mut self, now: Instant, cost: u64, weight: u64) {
        match self {
            Kept::Window(budget, kind) => {
                budget.started_as(now, cost, weight);
                if let Some(kind) = kind {
                    kind.started(now, cost);
                }
            }
            Kept::Bucket(bucket) => bucket.started(now, cost),
            Kept::Moving(moving) => moving.started(now, cost),
        }
    }

    pub(super) fn settle(&mut self, (sent, now): (Instant, Instant), estimated: u64, actual: u64) {
        match self {
            Kept::Window(budget, _) => budget.settle(Some(sent), estimated, actual),
            Kept::Bucket(bucket) => bucket.settle((sent, now), estimated, actual),
            Kept::Moving(moving) => moving.counter.settle(sent, now, estimated, actual),
        }
    }

    /// A call started at `sent` ended; returns whether the budget is forgotten for it (see
    /// [`QuotaBudget::ended`]).
    pub(super) fn ended(&mut self, sent: Option<Instant>) -> bool {
        match self {
            Kept::Window(budget, _) => budget.ended(sent),
            Kept::Bucket(_) | Kept::Moving(_) => false,
        }
    }

    /// Whether the server no longer announces the budget: the call sent to learn its next
    /// window brought no announcement.
    pub(super) fn is_forgotten(&self) -> bool {
        matches!(self, Kept::Window(budget, _) if !budget.is_known())
    }

    /// A call turned out to cost `extra` more than it spent: a window takes it off what is
    /// left (a bucket and a moving window learn it from the next answers).
    pub(super) fn charge(&mut self, extra: u64) {
        if let Kept::Window(budget, _) = self {
            budget.charge(extra);
        }
    }

    /// The server refused the call started at `sent`, which drew `cost`: it spent nothing.
    pub(super) fn refused(&mut self, (sent, now): (Instant, Instant), cost: u64) {
        match self {
            Kept::Bucket(bucket) => bucket.refused((sent, now), cost),
            Kept::Window(budget, kind) => {
                budget.refused();
                if let Some(kind) = kind {
                    kind.refused(sent);
                }
            }
            Kept::Moving(moving) => moving.refused((sent, now), cost),
        }
    }

    /// What is left for a fleet's store to reckon by: of a window, the last word (see
    /// [`QuotaBudget::word`]); of a bucket, as [`Kept::left`].
    pub(super) fn left_for_fleet(&self, now: Instant) -> Option<u64> {
        match self {
            Kept::Window(budget, _) => budget.word(),
            _ => self.left(now),
        }
    }

    pub(super) fn left(&self, now: Instant) -> Option<u64> {
        match self {
            Kept::Window(budget, _) => budget.left(),
            Kept::Bucket(Bucket { told, .. }) => Some(told.left(now)),
            Kept::Moving(Moving { counter, .. }) => Some(counter.left(now)),
        }
    }
}

impl Bucket {
    /// A bucket from its first announcement, `quota`, read at `at` while `uncounted` units of
    /// the calls in flight may not be counted in it. `None` without the bucket's limit.
    fn first(quota: &Quota, at: Instant, uncounted: u64) -> Option<Self> {
        let limit = quota.limit()?.max(1);
        let per = refill_period(quota, limit, Duration::ZERO).unwrap_or(MAX_WAIT);
        let mut bucket = Bucket {
            told: Told::new(limit, per, Window::Refilling),
            told_at: at,
            answers: 0,
            level: 0,
            since: VecDeque::new(),
            let_go: None,
            refill: per,
            ledger: Ledger::default(),
        };
        let level = quota.remaining().saturating_sub(uncounted);
        bucket.told.set_level(at, level);
        Some(bucket)
    }

    /// The bucket's limit, and how long the server takes to refill it, once its resets
    /// have shown it.
    pub(super) fn limit_and_refill(&self) -> Option<(u64, Duration)> {
        (self.refill < MAX_WAIT).then(|| (self.told.limit(), self.refill))
    }

    /// Takes in `quota`, announced by the answer to a call started at `dated` (`None`: not
    /// known, and `uncounted` units of calls in flight may not be counted in it) and read at
    /// `now`. Returns whether the budget changed.
    fn observe(
        &mut self,
        quota: &Quota,
        (dated, uncounted): (Option<Instant>, u64),
        now: Instant,
    ) -> bool {
        let Some(limit) = quota.limit() else {
            return false;
        };
        let limit = limit.max(1);
        // The level is of the instant the announcement is dated, the reset as read now.
        let read_after = dated.map_or(Duration::ZERO, |at| now.saturating_duration_since(at));
        if let Some(refill) = refill_period(quota, limit, read_after) {
            self.refill = refill;
        }
        let Some(at) = dated else {
            // Undated: the level may only go down.
            let level = quota.remaining().saturating_sub(uncounted);
            if level >= self.told.left(now) {
                return false;
            }
            self.told = Told::new(limit, self.net_refill(limit), Window::Refilling);
            self.told.set_level(now, level);
            self.since.clear();
            (self.told_at, self.answers) = (now, 0);
            return true;
        };
        if at < self.told_at || self.let_go.is_some_and(|start| at < start) {
            return false;
        }
        let before = self.told.left(now);
        let round_trip = now.saturating_duration_since(at);
        self.ledger.round_trip = Some(
            self.ledger
                .round_trip
                .map_or(round_trip, |r| r.min(round_trip)),
        );
        let mut dated_by = self.since.iter().filter(|start| start.at == at);
        // Of several starts at one instant, which the server counted before the answering
        // one is not known: only an answer to a start alone at its instant is an anchor.
        if let (Some(start), None) = (dated_by.next(), dated_by.next()) {
            let anchor = Anchor {
                at,
                level: quota.remaining(),
                spent: start.spent,
                returned: start.returned,
            };
            self.ledger.anchor(anchor, limit, self.refill);
        }
        // Several answers to starts at one instant may come in any order; the lowest level
        // they said counts the starts of all of them.
        (self.level, self.answers) = if at == self.told_at && self.answers > 0 {
            (self.level.min(quota.remaining()), self.answers + 1)
        } else {
            (quota.remaining(), 1)
        };
        self.told_at = at;
        self.told = self.bucket_at(limit);
        self.told.left(now) != before
    }

    /// The bucket of `limit` whose level was `self.level` at `self.told_at`, refilling at the
    /// server's pace, and the starts the server did not count spent from it again.
    fn bucket_at(&mut self, limit: u64) -> Told {
        let at = self.told_at;
        let mut told = Told::new(limit, self.net_refill(limit), Window::Refilling);
        told.set_level(at, self.level);
        while self.since.front().is_some_and(|start| start.at < at) {
            self.since.pop_front();
        }
        // Of the starts at `at`, the server counted at least as many as answered; which of
        // the rest it counted is not known, so the dearest are taken as not counted.
        let at_once = self.since.iter().take_while(|start| start.at == at).count();
        let uncounted = at_once.saturating_sub(self.answers);
        if uncounted > 0 {
            let mut costs: Vec<u64> = self.since.iter().take(at_once).map(|s| s.cost).collect();
            costs.sort_unstable_by(|a, b| b.cmp(a));
            costs[..uncounted]
                .iter()
                .for_each(|&cost| told.started(at, cost));
        }
        for start in self.since.iter().skip(at_once) {
            told.started(start.at, start.cost);
        }
        told
    }

    /// How long the bucket takes to refill `limit` for the gate: the server's refill less
    /// what the others take of it.
    fn net_refill(&self, limit: u64) -> Duration {
        if self.ledger.others == 0.0 {
            return self.refill;
        }
        let pace = limit as f64 / self.refill.as_secs_f64();
        let left = (pace - self.ledger.others).max(pace * (1.0 - MOST_OTHERS));
        Duration::try_from_secs_f64(limit as f64 / left).map_or(MAX_WAIT, |d| d.min(MAX_WAIT))
    }

    fn started(&mut self, now: Instant, cost: u64) {
        self.told.started(now, cost);
        if self.since.len() == KEPT_STARTS {
            self.let_go = self.since.pop_front().map(|start| start.at);
        }
        self.ledger.spent += cost;
        self.since.push_back(Start {
            at: now,
            cost,
            spent: self.ledger.spent,
            returned: self.ledger.returned,
        });
    }

    fn settle(&mut self, (sent, now): (Instant, Instant), estimated: u64, actual: u64) {
        self.told.settle(sent, now, estimated, actual);
        if let Some(start) = self.start_at(sent, estimated) {
            start.cost = (start.cost + actual).saturating_sub(estimated);
        }
        if actual >= estimated {
            self.ledger.spent += actual - estimated;
            return;
        }
        // The server gave it back before it admitted the starts of the last round trip:
        // their announcements count it.
        let round_trip = self.ledger.round_trip.unwrap_or_default();
        let server_gave = now.checked_sub(round_trip).unwrap_or(now);
        self.given_back(estimated - actual, server_gave, now);
    }

    /// The server refused the call started at `sent` (now), which drew `cost`. It is spent
    /// no more when the bucket is rebuilt, and the ledger takes it as never spent: the
    /// others' pace is read again, as the refusal's own announcement, read before the gate
    /// knew of the refusal, took the call as spent and so the others' as less than it was.
    fn refused(&mut self, (sent, now): (Instant, Instant), cost: u64) {
        if let Some(start) = self.start_at(sent, cost) {
            start.cost = start.cost.saturating_sub(cost);
        }
        self.given_back(cost, sent, now);
        let (limit, others) = (self.told.limit(), self.ledger.others);
        self.ledger.fit(limit, self.refill);
        if self.ledger.others != others {
            let per = self.net_refill(limit);
            self.told.repace(now, per);
        }
    }

    /// The start at `sent` that drew `cost`: of several at one instant, one of that cost, or
    /// else the dearest, so that what comes off it never comes off a cheaper one instead.
    fn start_at(&mut self, sent: Instant, cost: u64) -> Option<&mut Start> {
        let at_sent = self.since.iter_mut().filter(|start| start.at == sent);
        at_sent.max_by_key(|start| (start.cost == cost, start.cost))
    }

    /// `units` came back to the server's bucket before it admitted the starts from `from`
    /// to `now`: the ledger's totals, and those of these starts and anchors, count them.
    fn given_back(&mut self, units: u64, from: Instant, now: Instant) {
        self.ledger.returned += units;
        let between = |at: Instant| from <= at && at <= now;
        let starts = self.since.iter_mut().filter(|start| between(start.at));
        starts.for_each(|start| start.returned += units);
        let anchors = self.ledger.anchors.iter_mut();
        anchors
            .filter(|anchor| between(anchor.at))
            .for_each(|anchor| anchor.returned += units);
    }
}

/// The most anchors a ledger keeps.
const KEPT_ANCHORS: usize = 1_024;

/// At most this share of the server's refill (as the latest reset gives it) is taken as the
/// others': the gate keeps a trickle of its own, and learns again from the answers it brings.
const MOST_OTHERS: f64 = 0.95;

/// The others' pace is taken as read plus this many times its standard error: as fast as
/// the anchors make likely, so that the gate leaves room for what they may take, and less
/// room as the anchors show their pace better.
const OTHERS_ERRORS: f64 = 2.0;

/// The others' pace is read once its standard error is at most this share of the server's
/// pace: before, the anchors say too little of it to go by.
const MOST_ERROR: f64 = 0.3;

impl Ledger {
    /// Takes in `anchor`, a dated announcement of a bucket of `limit` that the server refills
    /// in `refill`, and reads the others' pace again.
    fn anchor(&mut self, anchor: Anchor, limit: u64, refill: Duration) {
        let pace = limit as f64 / refill.as_secs_f64();
        if let Some(last) = self.anchors.back() {
            let gap = (anchor.at - last.at).as_secs_f64();
            let given_back = anchor.returned.saturating_sub(last.returned) as f64;
            if last.level as f64 + pace * gap + given_back >= limit as f64 {
                self.anchors.clear();
            }
        }
        if self.anchors.len() == KEPT_ANCHORS {
            self.anchors.pop_front();
        }
        self.anchors.push_back(anchor);
        while self
            .anchors
            .front()
            .is_some_and(|first| anchor.at - first.at > refill)
        {
            self.anchors.pop_front();
        }
        self.fit(limit, refill);
    }

    /// Reads the others' pace again from the anchors kept, of a bucket of `limit` that the
    /// server refills in `refill`.
    fn fit(&mut self, limit: u64, refill: Duration) {
        let pace = limit as f64 / refill.as_secs_f64();
        let Some(first) = self.anchors.front().copied() else {
            return;
        };
        // Without others, the level plus what the gate spent since the first anchor less
        // the refill since is the same at every anchor; the others make it fall, at their
        // pace. Its slope is fitted over every anchor; how far they scatter about it (a
        // refund landing early or late, anchors close together) says how well it is known.
        let points = self.anchors.iter().map(|a| {
            let t = (a.at - first.at).as_secs_f64();
            let own = a.spent.wrapping_sub(first.spent) as f64
                - a.returned.wrapping_sub(first.returned) as f64;
            // From the first anchor's level, so that the squares summed stay small.
            (t, a.level as f64 - first.level as f64 + own - pace * t)
        });
        let n = self.anchors.len() as f64;
        if n < 3.0 {
            return;
        }
        let sums = points.fold([0.0; 5], |[st, sy, stt, sty, syy], (t, y)| {
            [st + t, sy + y, stt + t * t, sty + t * y, syy + y * y]
        });
        let [st, sy, stt, sty, syy] = sums;
        let (tt, ty, yy) = (stt - st * st / n, sty - st * sy / n, syy - sy * sy / n);
        let slope = ty / tt;
        let error = ((yy - slope * ty).max(0.0) / (n - 2.0) / tt).sqrt();
        if error <= MOST_ERROR * pace {
            self.others = (OTHERS_ERRORS * error - slope).max(0.0);
        }
    }
}

/// How long the bucket of `quota` takes to refill `limit`, from what it says: it lacked
/// `limit - remaining` when its level was taken, `read_after` before it was read, and is full
/// again `resets_in` after it was read (a reset written as a duration from when the server
/// sent it is taken as from when it was read: later, so the refill slower, never faster).
/// `None` when it says nothing of it (full, or full at once), unless it gave its window.
fn refill_period(quota: &Quota, limit: u64, read_after: Duration) -> Option<Duration> {
    let lacking = limit.saturating_sub(quota.remaining());
    if lacking == 0 || quota.resets_in().is_zero() {
        return quota.window();
    }
    let to_full = quota.resets_in().saturating_add(read_after);
    let nanos = to_full.as_nanos() * u128::from(limit) / u128::from(lacking);
    let nanos = u64::try_from(nanos).unwrap_or(u64::MAX).max(1);
    Some(Duration::from_nanos(nanos).min(MAX_WAIT))
}
