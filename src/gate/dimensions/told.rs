//! A budget the user told the gate: at most `limit` units per `per`, by one of three rules of
//! what a window is (fixed, sliding, refilling). Pure: takes instants, answers "start now" or
//! "not before T".
//!
//! Each rule keeps exactly what its window needs and no more:
//! - **Fixed**: windows of `per` back to back from the first start; the units started in the
//!   current one.
//! - **Sliding**: the starts of the last `per`, each with its units; a call starts when the
//!   units of the starts less than `per` ago leave room for it.
//! - **Refilling**: a bucket of `limit` units that refills evenly, `limit` every `per`, kept as
//!   the instant it would be full again (the generic cell rate algorithm's "theoretical
//!   arrival time"), so a start is one addition.
//!
//! A call that costs more than the whole budget could never fit; rather than wait forever, it
//! starts alone, when the window is empty (the bucket full).
//!
//! A call that turns out to cost more than its estimate is charged at its end, in the window
//! of its end (a sliding window counts the extra from then: the server may count the output
//! of an answer when it ends); one that cost less gives back to the window it spent from, if
//! that one is still current.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use super::super::quota::Window;
use crate::time::after;

/// The state of one told budget.
#[derive(Debug, Clone)]
pub(super) struct Told {
    limit: u64,
    per: Duration,
    state: State,
}

#[derive(Debug, Clone)]
enum State {
    /// The current window began at `start` (`None`: nothing started yet), and `used` units
    /// started in it.
    Fixed { start: Option<Instant>, used: u64 },
    /// The starts less than `per` ago, oldest first, each with its units, and their sum.
    Sliding {
        starts: VecDeque<(Instant, u64)>,
        used: u64,
    },
    /// When the bucket is full again (at or before now: it is full).
    Refilling { full_at: Option<Instant> },
}

impl Told {
    pub(super) fn new(limit: u64, per: Duration, window: Window) -> Self {
        debug_assert!(limit > 0 && !per.is_zero(), "checked by Budget::new");
        let state = match window {
            Window::Fixed => State::Fixed {
                start: None,
                used: 0,
            },
            Window::Sliding => State::Sliding {
                starts: VecDeque::new(),
                used: 0,
            },
            Window::Refilling => State::Refilling { full_at: None },
        };
        Self { limit, per, state }
    }

    /// The units it allows in a window.
    pub(super) fn limit(&self) -> u64 {
        self.limit
    }

    /// How long its window is (a bucket's: how long it takes to refill its limit).
    #[cfg(test)]
    pub(super) fn per(&self) -> Duration {
        self.per
    }

    /// A bucket now refills its limit in `per`, from `now`: what it lacks then takes as much
    /// longer, or shorter, to refill. Of a bucket only.
    pub(super) fn repace(&mut self, now: Instant, per: Duration) {
        if let State::Refilling {
            full_at: Some(full),
        } = &mut self.state
        {
            let lacking = full.saturating_duration_since(now);
            let ratio = per.as_secs_f64() / self.per.as_secs_f64();
            *full = after(now, lacking.mul_f64(ratio));
        }
        self.per = per;
    }

    /// A bucket's level is `level` at `at` (at most full). Of a bucket only: the other
    /// kinds keep what they spent, not a level.
    pub(super) fn set_level(&mut self, at: Instant, level: u64) {
        let lacking = self.refill(self.limit.saturating_sub(level), true);
        if let State::Refilling { full_at } = &mut self.state {
            *full_at = Some(after(at, lacking));
        }
    }

    /// The time the bucket takes to refill `units`, rounded up (what a start spends: a sum of
    /// them is never shorter than the whole) or down (what a settle gives back, never more).
    fn refill(&self, units: u64, up: bool) -> Duration {
        let (nanos, limit) = (
            self.per.as_nanos() * u128::from(units),
            u128::from(self.limit),
        );
        let nanos = if up {
            nanos.div_ceil(limit)
        } else {
            nanos / limit
        };
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// When a call of `cost` units may start, from `now`: `None` for at once. Spends nothing.
    pub(super) fn next_start(&self, now: Instant, cost: u64) -> Option<Instant> {
        let cost = cost.min(self.limit);
        let at = match &self.state {
            State::Fixed { start: None, .. } => return None,
            State::Fixed {
                start: Some(start),
                used,
            } => {
                let end = after(*start, self.per);
                if now >= end || used.saturating_add(cost) <= self.limit {
                    return None;
                }
                end
            }
            State::Sliding { starts, used } => {
                // The oldest starts expire first: skip the expired ones, then as many more as
                // the call needs room for.
                let mut left = *used;
                let mut at = None;
                for &(start, units) in starts {
                    let expires = after(start, self.per);
                    if expires > now && left.saturating_add(cost) <= self.limit {
                        break;
                    }
                    left -= units;
                    at = Some(expires);
                }
                at?
            }
            State::Refilling { full_at } => {
                let full_at = (*full_at)?;
                // Room for `cost` once the bucket lacks no more than `limit - cost`.
                full_at.checked_sub(self.refill(self.limit - cost, false))?
            }
        };
        (at > now).then_some(at)
    }

    /// A call of `cost` units started at `now`, which [`Told::next_start`] allowed.
    pub(super) fn started(&mut self, now: Instant, cost: u64) {
        let refill = self.refill(cost, true);
        match &mut self.state {
            State::Fixed { start, used } => {
                let current = start.filter(|start| now < after(*start, self.per));
                if current.is_none() {
                    *start = Some(window_of(self.per, *start, now));
                    *used = 0;
                }
                *used = used.saturating_add(cost);
            }
            State::Sliding { starts, used } => {
                while let Some(&(start, units)) = starts.front() {
                    if after(start, self.per) > now {
                        break;
                    }
                    starts.pop_front();
                    *used -= units;
                }
                starts.push_back((now, cost));
                *used = used.saturating_add(cost);
            }
            State::Refilling { full_at } => {
                let from = full_at.map_or(now, |full_at| full_at.max(now));
                *full_at = Some(after(from, refill));
            }
        }
    }

    /// A call that started at `sent` spending `estimated` units ended at `now`, having cost
    /// `actual`.
    pub(super) fn settle(&mut self, sent: Instant, now: Instant, estimated: u64, actual: u64) {
        if actual > estimated {
            // Spent beyond what the start said: at its end, as a start of what it cost more
            // (in the current fixed window, if it still runs, or in the next).
            self.started(now, actual - estimated);
            return;
        }
        let back = self.given_back(now - sent, estimated, actual);
        let refill = self.refill(back, false);
        match &mut self.state {
            State::Fixed {
                start: Some(start),
                used,
            } if sent >= *start && now < after(*start, self.per) => {
                *used = used.saturating_sub(back);
            }
            State::Fixed { .. } => {}
            State::Sliding { starts, used } => {
                // From the starts of that instant, which expire together: a call's own, or
                // what others of the instant spent (which is as good).
                let mut back = back;
                for (_, units) in starts.iter_mut().filter(|(start, _)| *start == sent) {
                    let taken = back.min(*units);
                    (*units, *used, back) = (*units - taken, *used - taken, back - taken);
                }
            }
            State::Refilling { full_at } => {
                // Never past full: a bucket holds at most `limit`.
                if let Some(full) = full_at {
                    *full = full.checked_sub(refill).map_or(now, |back| back.max(now));
                }
            }
        }
    }

    /// What a call that spent `estimated` units `ran` ago, and used `actual`, gives back. All
    /// it did not use, but from a bucket: a server that counted only what the call used
    /// would have had the rest in its bucket all along, and may have found it full since,
    /// refilling nothing while it was. The bucket's level after the start was at most
    /// `limit - estimated`, so with what it did not use it was at most `limit - actual`, and
    /// it refilled `ran`'s worth since: it could overflow by what that refill exceeds
    /// `actual`, which is not given back.
    fn given_back(&self, ran: Duration, estimated: u64, actual: u64) -> u64 {
        let back = estimated - actual;
        if !matches!(self.state, State::Refilling { .. }) {
            return back;
        }
        let refilled = (ran.as_nanos() * u128::from(self.limit)).div_ceil(self.per.as_nanos());
        let refilled = u64::try_from(refilled).unwrap_or(u64::MAX);
        back.saturating_sub(refilled.saturating_sub(actual))
    }

    /// Units that may start at `now` before the budget holds a call back.
    pub(super) fn left(&self, now: Instant) -> u64 {
        match &self.state {
            State::Fixed { start, used } => match start {
                Some(start) if now < after(*start, self.per) => self.limit.saturating_sub(*used),
                _ => self.limit,
            },
            State::Sliding { starts, .. } => {
                let live = starts
                    .iter()
                    .filter(|(start, _)| after(*start, self.per) > now)
                    .map(|(_, units)| units)
                    .fold(0u64, |sum, units| sum.saturating_add(*units));
                self.limit.saturating_sub(live)
            }
            State::Refilling { full_at } => {
                let lacking =
                    full_at.map_or(Duration::ZERO, |full| full.saturating_duration_since(now));
                let lacking =
                    (lacking.as_nanos() * u128::from(self.limit)).div_ceil(self.per.as_nanos());
                self.limit
                    .saturating_sub(u64::try_from(lacking).unwrap_or(u64::MAX))
            }
        }
    }
}

/// The start of the fixed window of `per` that holds `now`, windows running back to back
/// from `first` (the start of an earlier window), or from `now` if none began yet.
fn window_of(per: Duration, first: Option<Instant>, now: Instant) -> Instant {
    let Some(first) = first else { return now };
    let per = per.as_nanos();
    let skipped = (now - first).as_nanos() / per * per;
    first + Duration::from_nanos(u64::try_from(skipped).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests;
