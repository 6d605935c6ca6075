//! A sliding-window counter of unknown phase: what the gate keeps of an announced window the
//! answers showed moves. Pure: takes instants, answers "start now" or "not before T".
//!
//! A sliding-window counter (the `limits` library's and so Flask-Limiter's and slowapi's
//! `sliding-window-counter`, Cloudflare's) counts in fixed windows of `per`, and admits a
//! request while the current window's count plus the previous window's, weighted by the
//! share of the last `per` that still overlaps it, leaves room: a request it counted leaves
//! it not at once, as from a moving window, but evenly over the next window. At the start
//! of a window the previous one counts whole, so a burst a window's start saw is spent for a
//! whole window and then given back over the next one; a moving window would have given it
//! all back a window after it came. Its windows' phase is the server's, and its answers do
//! not tell it (Flask-Limiter's resets say when the next unit comes back, in whole seconds).
//!
//! So the gate keeps its starts (and what else the server counted, as starts) and lets a call
//! start only when every phase the windows could have leaves room for it: the worst phase's
//! weighted count. That holds a moving window of `per` too: the phase whose current window
//! began `per` ago counts every start of the last `per` whole. Spent evenly, the worst phase
//! lets the limit through every `per`, as either server does; only a burst costs more, a
//! window before the next start where a moving window would let a second burst go at once.
//!
//! The weighted count with the windows' current one begun `g` ago counts the starts of the
//! last `g` whole and those `g` to `g + per` ago at `1 - g / per`; between two starts' edges
//! it only falls as `g` grows, so the worst phase is at an edge: `g` zero, a start's age, or
//! a start's age less `per`. Without new starts, every phase's count only falls with time,
//! and so does the worst: the earliest start is found by halving the span to when it is
//! empty.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use crate::time::after;

/// How close [`Counter::next_start`] finds the earliest start: well within the millisecond
/// to which tokio's timer rounds.
const PRECISION: Duration = Duration::from_micros(50);

/// A sliding-window counter of `limit` units per `per`, of unknown phase: the starts of the
/// last two windows.
#[derive(Debug, Clone)]
pub(crate) struct Counter {
    limit: u64,
    per: Duration,
    /// The starts counted less than `2 * per` ago, by when they are counted from, oldest
    /// first.
    starts: VecDeque<Start>,
}

/// A start the counter counts: the server counted it when it arrived, after the call's start
/// and before its answer was read, so it is counted from the start until the answer is read,
/// and from the answer on (the latest the server can have counted it) once it is.
#[derive(Debug, Clone, Copy)]
struct Start {
    sent: Instant,
    counted: Instant,
    units: u64,
}

impl Counter {
    /// A counter of `limit` units per `per` (at least a unit and a nanosecond).
    pub(crate) fn new(limit: u64, per: Duration) -> Self {
        Self {
            limit: limit.max(1),
            per: per.max(Duration::from_nanos(1)),
            starts: VecDeque::new(),
        }
    }

    /// The units it allows in a window.
    pub(crate) fn limit(&self) -> u64 {
        self.limit
    }

    /// How long its windows are.
    pub(crate) fn per(&self) -> Duration {
        self.per
    }

    /// `cost` units started at `now` (or the server counted them then).
    pub(crate) fn started(&mut self, now: Instant, cost: u64) {
        self.count(Start {
            sent: now,
            counted: now,
            units: cost,
        });
    }

    /// Counts `start` among the others, in order of when each is counted from, and lets go
    /// of those counted two windows before it.
    fn count(&mut self, start: Start) {
        let gone = |at: Instant| after(at, self.per.saturating_mul(2)) <= start.counted;
        while self.starts.front().is_some_and(|s| gone(s.counted)) {
            self.starts.pop_front();
        }
        if start.units > 0 {
            let at = self.starts.partition_point(|s| s.counted <= start.counted);
            self.starts.insert(at, start);
        }
    }

    /// The answer to a call started at `sent` was read at `now`: the server counted it by
    /// then, and it is counted from then on. A call whose answer was read already, or none
    /// that started then, changes nothing.
    pub(crate) fn answered(&mut self, sent: Instant, now: Instant) {
        let unanswered = |s: &Start| s.sent == sent && s.counted == sent;
        if let Some(at) = self.starts.iter().position(unanswered)
            && let Some(start) = self.starts.remove(at)
        {
            self.count(Start {
                counted: now.max(sent),
                ..start
            });
        }
    }

    /// A counter of `limit` units per `per` that counts the starts this one counts, and
    /// `earlier` (oldest first) before them.
    pub(crate) fn kept_as(
        &self,
        per: Duration,
        earlier: impl IntoIterator<Item = (Instant, u64)>,
    ) -> Self {
        let mut counter = Counter::new(self.limit, per);
        for (at, cost) in earlier {
            counter.started(at, cost);
        }
        for &start in &self.starts {
            counter.count(start);
        }
        counter
    }

    /// The earliest start it counts.
    pub(crate) fn earliest_sent(&self) -> Option<Instant> {
        self.starts.iter().map(|s| s.sent).min()
    }

    /// A call that started at `sent` spending `estimated` units ended at `now`, having cost
    /// `actual`: more, and the rest is counted from now; less, and its start counts less.
    pub(crate) fn settle(&mut self, sent: Instant, now: Instant, estimated: u64, actual: u64) {
        if actual > estimated {
            self.started(now, actual - estimated);
            return;
        }
        let mut back = estimated - actual;
        for start in self.starts.iter_mut().filter(|s| s.sent == sent) {
            let taken = back.min(start.units);
            (start.units, back) = (start.units - taken, back - taken);
        }
    }

    /// The worst phase's weighted count at `now`.
    fn weighted(&self, now: Instant) -> f64 {
        let ages = self.starts.iter().rev().map(|start| {
            let age = now.saturating_duration_since(start.counted);
            (age, start.units)
        });
        worst_weighted(ages, self.per)
    }

    /// Units that may start at `now` under every phase.
    pub(crate) fn left(&self, now: Instant) -> u64 {
        let weighted = self.weighted(now).ceil();
        let limit = self.limit as f64;
        if weighted >= limit {
            0
        } else {
            (limit - weighted) as u64
        }
    }

    /// When a call of `cost` units may start, from `now`: `None` for at once. A call dearer
    /// than the whole limit starts alone, when nothing is counted. Spends nothing.
    pub(crate) fn next_start(&self, now: Instant, cost: u64) -> Option<Instant> {
        let cost = cost.min(self.limit);
        if self.left(now) >= cost {
            return None;
        }
        let last = self.starts.back()?.counted;
        // Two windows after the last start, nothing is counted.
        let (mut early, mut late) = (now, after(last, self.per.saturating_mul(2)).max(now));
        while late - early > PRECISION {
            let mid = early + (late - early) / 2;
            if self.left(mid) >= cost {
                late = mid;
            } else {
                early = mid;
            }
        }
        Some(late)
    }
}

/// The worst phase's weighted count of a sliding-window counter of `per`, whose requests are
/// `ages` old, each with its units: the most that any phase of its windows counts, the
/// previous window weighted by its overlap with the last `per`.
pub(crate) fn worst_weighted(
    ages: impl IntoIterator<Item = (Duration, u64)>,
    per: Duration,
) -> f64 {
    let horizon = per.saturating_mul(2);
    let mut ages: Vec<(Duration, u64)> = (ages.into_iter())
        .filter(|&(age, cost)| age < horizon && cost > 0)
        .collect();
    ages.sort_unstable();
    // The units of the requests younger than each, and of all.
    let mut sums = Vec::with_capacity(ages.len() + 1);
    sums.push(0u64);
    for &(_, cost) in &ages {
        sums.push(sums[sums.len() - 1].saturating_add(cost));
    }
    // The units of the requests at most `age` old.
    let within = |age: Duration| sums[ages.partition_point(|&(a, _)| a <= age)] as f64;
    let at = |g: Duration| {
        let current = within(g);
        let previous = within(g.saturating_add(per)) - current;
        current + previous * (1.0 - g.as_secs_f64() / per.as_secs_f64())
    };
    let edges = ages.iter().filter_map(|&(age, _)| {
        if age < per {
            Some(age)
        } else {
            age.checked_sub(per)
        }
    });
    std::iter::once(Duration::ZERO)
        .chain(edges)
        .map(at)
        .fold(0.0, f64::max)
}

#[cfg(test)]
mod tests;
