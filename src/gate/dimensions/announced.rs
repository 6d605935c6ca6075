//! A budget a server announced, kept by the rules of its kind of window: a fixed window by the
//! announced quota's rules (`budget.rs`), a bucket that refills evenly as a told bucket whose
//! level each announcement sets.
//!
//! A bucket's announcement is dated by the start of the call that carried it, when the gate
//! knows it ([`answering`](super::super::answering)): the server counted every call started
//! before, and none started after. Its level then is what it said; the calls started since
//! are spent from it again, each at its cost as settled so far. An announcement dated before
//! the one the budget holds is older news, and is ignored. Undated (read outside a call),
//! the calls in flight are taken as uncounted, and the budget may only go down.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use super::super::budget::{QuotaBudget, Spend};
use super::super::quota::Window;
use super::told::Told;
use crate::Quota;
use crate::time::MAX_WAIT;

/// A budget a server announced, by the rules of its window.
#[derive(Debug)]
pub(super) enum Kept {
    /// A fixed window, or one of a kind the server did not say: the announced quota's rules.
    Window(QuotaBudget),
    /// A bucket that refills evenly.
    Bucket(Bucket),
}

/// An announced bucket: its level as the latest announcement set it, spent since.
#[derive(Debug)]
pub(super) struct Bucket {
    told: Told,
    /// When the level was announced (the start of the call that carried it).
    told_at: Instant,
    /// Whether `told_at` dates an announcement (else it is when one was read).
    dated: bool,
    /// The starts since `told_at`, each with its cost as settled so far (at most
    /// [`KEPT_STARTS`]; an announcement dated before the last start let go is ignored).
    since: VecDeque<(Instant, u64)>,
    /// The latest start let go from `since` to keep it short.
    let_go: Option<Instant>,
    /// How long the server takes to refill the bucket's limit, as its resets say.
    refill: Duration,
}

/// The most starts a bucket keeps to count again against a dated announcement.
const KEPT_STARTS: usize = 4_096;

impl Kept {
    /// A budget from its first announcement, `quota`, read at `now` while `uncounted` units
    /// of the calls in flight may not be counted in it: a bucket if `window` says so and
    /// `quota` gives its limit, else a fixed window, keeping `reserve` units unspent.
    pub(super) fn first(
        window: Option<Window>,
        quota: &Quota,
        (reserve, uncounted): (u64, u64),
        now: Instant,
    ) -> Self {
        if window == Some(Window::Refilling) {
            if let Some(bucket) = Bucket::first(quota, now, uncounted) {
                return Kept::Bucket(bucket);
            }
        }
        let mut budget = QuotaBudget::new(reserve);
        budget.observe(quota, uncounted, 0, now);
        Kept::Window(budget)
    }

    /// Takes in `quota`, announced by the answer to a call started at `dated` if known, read
    /// at `now` while `uncounted` units of the calls in flight may not be counted in it.
    /// Returns whether the budget changed.
    pub(super) fn observe(
        &mut self,
        quota: &Quota,
        (dated, uncounted): (Option<Instant>, u64),
        now: Instant,
    ) -> bool {
        match self {
            Kept::Window(budget) => budget.observe(quota, uncounted, 0, now),
            Kept::Bucket(bucket) => bucket.observe(quota, (dated, uncounted), now),
        }
    }

    pub(super) fn check(&mut self, now: Instant, cost: u64) -> Spend {
        match self {
            Kept::Window(budget) => budget.check(now, cost),
            Kept::Bucket(bucket) => match bucket.told.next_start(now, cost) {
                Some(at) => Spend::NotBefore(at),
                None => Spend::Now,
            },
        }
    }

    pub(super) fn earliest(&self, now: Instant, cost: u64) -> Instant {
        match self {
            Kept::Window(budget) => budget.earliest(now, 0, cost),
            Kept::Bucket(bucket) => bucket.told.next_start(now, cost).unwrap_or(now),
        }
    }

    pub(super) fn started(&mut self, now: Instant, cost: u64) {
        match self {
            Kept::Window(budget) => budget.started(now, cost),
            Kept::Bucket(bucket) => {
                bucket.told.started(now, cost);
                if bucket.since.len() == KEPT_STARTS {
                    bucket.let_go = bucket.since.pop_front().map(|(start, _)| start);
                }
                bucket.since.push_back((now, cost));
            }
        }
    }

    pub(super) fn settle(&mut self, (sent, now): (Instant, Instant), estimated: u64, actual: u64) {
        match self {
            Kept::Window(budget) => budget.settle(Some(sent), estimated, actual),
            Kept::Bucket(bucket) => {
                bucket.told.settle(sent, now, estimated, actual);
                let start = bucket.since.iter_mut().find(|(at, _)| *at == sent);
                if let Some((_, cost)) = start {
                    *cost = (*cost + actual).saturating_sub(estimated);
                }
            }
        }
    }

    pub(super) fn ended(&mut self, sent: Option<Instant>) {
        if let Kept::Window(budget) = self {
            budget.ended(sent);
        }
    }

    pub(super) fn left(&self, now: Instant) -> Option<u64> {
        match self {
            Kept::Window(budget) => budget.left(),
            Kept::Bucket(bucket) => Some(bucket.told.left(now)),
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
            dated: false,
            since: VecDeque::new(),
            let_go: None,
            refill: per,
        };
        let level = quota.remaining().saturating_sub(uncounted);
        bucket.told.set_level(at, level);
        Some(bucket)
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
            self.told = Told::new(limit, self.refill, Window::Refilling);
            self.told.set_level(now, level);
            self.since.clear();
            (self.told_at, self.dated) = (now, false);
            return true;
        };
        if at < self.told_at || self.let_go.is_some_and(|start| at < start) {
            return false;
        }
        let before = self.told.left(now);
        self.told = self.bucket_at(limit, (at, quota.remaining()));
        (self.told_at, self.dated) = (at, true);
        self.told.left(now) != before
    }

    /// The bucket of `limit` whose level was `level` at `at`, refilling at the server's pace,
    /// and the starts since spent from it again.
    fn bucket_at(&mut self, limit: u64, (at, level): (Instant, u64)) -> Told {
        let mut told = Told::new(limit, self.refill, Window::Refilling);
        told.set_level(at, level);
        while self.since.front().is_some_and(|(start, _)| *start <= at) {
            self.since.pop_front();
        }
        for &(start, cost) in &self.since {
            told.started(start, cost);
        }
        told
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
