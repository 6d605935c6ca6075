//! The loan: slots of the in-flight limit that the gate's state lends out while nothing could
//! hold a call or needs its end, so that an uncontended call without a rate starts and ends
//! with one atomic operation each, and no lock; with a fixed rate, the pace's next start is
//! lent too, and a call on loan starts with two, after one clock read.
//!
//! The state (under its lock) lends the slots it has free as it lets a call through that
//! nothing held: it counts them as in flight, and opens the loan with them. A call takes one
//! ([`Loan::start`]) and, if it succeeds, gives it back ([`Loan::end`]); every other end (an
//! error, a throttle, a dropped call, a cost to settle) takes the lock. Every acquisition of
//! the lock first closes the loan ([`Loan::close`]) and takes back what it lent: the slots
//! still free, and the starts made, from which the state counts the calls that went out and
//! the successes that came back. So under the lock the state is exact, and whatever it
//! decides (a call held, a backoff, an announced quota, a limit changed) holds at once: a call
//! finds the loan closed and takes the lock. The state lends again only where nothing could
//! hold a call: nobody waiting, no adaptive rate, no backoff (nor a streak of them to count
//! successes against), no announced quota or budget, no fleet.
//!
//! A fixed rate is lent as the instant its next start is due ([`LentPace`]): a call on loan
//! starts only at or after it, and moves it one interval past its own start
//! ([`Loan::start_paced`]); closing the loan gives the pace back the last start made from it.
//! A call that moved the pace and then found no slot free puts it back, unless another call
//! moved it since or the loan closed: then the pace keeps a start that was not made, and the
//! next start waits one interval longer than it had to, never less.
//!
//! A call that started before the loan opened may give its slot back to it: the state counts
//! it in flight, and takes it back with the loan's free slots.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// The loan: its one word (whether it is open, the starts made since it opened, and the
/// slots free in it) and the pace it lends.
#[derive(Debug)]
pub(crate) struct Loan {
    word: AtomicU64,
    pace: Paces,
}

/// A fixed rate as the state lends it: when its next start is due, the interval between two
/// starts, and the rate, for the record of a call started on loan.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct LentPace {
    /// The earliest the next start may be; `None`: now.
    pub(crate) next: Option<Instant>,
    pub(crate) interval: Duration,
    pub(crate) per_second: f64,
}

/// The lent pace, in nanoseconds after the loan's epoch, so that a start reads and moves it
/// with one atomic operation.
#[derive(Debug)]
struct Paces {
    /// Every instant below is counted from this one, the loan's making.
    epoch: Instant,
    /// The earliest the next start on loan may be; [`UNLENT`] while no pace is lent.
    due: AtomicU64,
    /// What `due` was when lent: under the lock, where it tells whether a start moved it.
    lent_due: AtomicU64,
    /// The interval, and the rate's `f64` bits: written before `due`, read after it.
    interval: AtomicU64,
    per_second: AtomicU64,
}

/// No pace is lent: every paced start takes the lock.
const UNLENT: u64 = u64::MAX;

/// Set while the loan is open; a closed loan is all zero.
const OPEN: u64 = 1 << 63;
/// The starts since the loan opened sit above this bit.
const STARTS_SHIFT: u32 = 32;
/// The most starts the loan counts before a call must take the lock (which closes it).
const MAX_STARTS: u64 = (1 << 31) - 1;
/// The free slots sit below [`STARTS_SHIFT`].
const FREE: u64 = (1 << STARTS_SHIFT) - 1;

/// The most slots the state lends at once: a gate of `usize::MAX` slots lends this many, and
/// the free count, with the slots given back by calls that started before, stays below
/// `u32::MAX`.
pub(crate) const MAX_LENT: usize = 1 << 30;

/// What a closed loan gives back: its free slots, the starts made from it, and the last
/// start that moved its pace, if one did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Returned {
    pub(crate) free: u64,
    pub(crate) starts: u64,
    pub(crate) last_start: Option<Instant>,
}

impl Loan {
    /// A closed loan, counting its pace's instants from now.
    pub(crate) fn new() -> Self {
        Self {
            word: AtomicU64::new(0),
            pace: Paces {
                epoch: Instant::now(),
                due: AtomicU64::new(UNLENT),
                lent_due: AtomicU64::new(UNLENT),
                interval: AtomicU64::new(0),
                per_second: AtomicU64::new(0),
            },
        }
    }

    /// Takes a slot and the pace's start at `now`, if the loan is open with a pace lent, a
    /// slot free, and the next start due by `now`: the rate the call starts at.
    #[inline]
    pub(crate) fn start_paced(&self, now: Instant) -> Option<f64> {
        let pace = &self.pace;
        let due = pace.due.load(Ordering::Acquire);
        // An instant before the epoch (a clock paused before the gate was built) takes the
        // lock, where instants are exact.
        let at = nanos(now.checked_duration_since(pace.epoch)?)?;
        if due == UNLENT || at < due {
            return None;
        }
        let next = at.saturating_add(pace.interval.load(Ordering::Relaxed));
        let exchanged = pace
            .due
            .compare_exchange(due, next, Ordering::AcqRel, Ordering::Relaxed);
        if exchanged.is_err() {
            return None;
        }
        if self.start() {
            return Some(f64::from_bits(pace.per_second.load(Ordering::Relaxed)));
        }
        // No slot: the start was not made. (If another call moved the pace since, or the
        // loan closed, it stays moved: the next start waits longer, never less.)
        let _ = (pace.due).compare_exchange(next, due, Ordering::Relaxed, Ordering::Relaxed);
        None
    }

    /// Takes a slot, if the loan is open and has one free.
    #[inline]
    pub(crate) fn start(&self) -> bool {
        let mut word = self.word.load(Ordering::Relaxed);
        loop {
            // A closed loan is all zero: no slot free in it.
            if word & FREE == 0 || (word & !OPEN) >> STARTS_SHIFT >= MAX_STARTS {
                return false;
            }
            let taken = word - 1 + (1 << STARTS_SHIFT);
            match (self.word).compare_exchange_weak(
                word,
                taken,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => word = now,
            }
        }
    }

    /// Gives a successful call's slot back, if the loan is open; `false`: the call must end
    /// under the lock.
    #[inline]
    pub(crate) fn end(&self) -> bool {
        let mut word = self.word.load(Ordering::Relaxed);
        loop {
            if word & OPEN == 0 || word & FREE == FREE {
                return false;
            }
            match (self.word).compare_exchange_weak(
                word,
                word + 1,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => word = now,
            }
        }
    }

    /// Opens the loan with `lent` slots (at most [`MAX_LENT`]), which the state counts in
    /// flight, and `pace`, the gate's fixed rate if it has one. Under the lock, with the loan
    /// closed.
    pub(crate) fn open(&self, lent: usize, pace: Option<LentPace>) {
        debug_assert!(lent > 0 && lent <= MAX_LENT);
        debug_assert_eq!(self.word.load(Ordering::Relaxed), 0, "closed while locked");
        let paces = &self.pace;
        if let Some(LentPace {
            next,
            interval,
            per_second,
        }) = pace
        {
            // A next start before the epoch is due now; one too far to count in nanoseconds
            // is not lent, and calls take the lock.
            let due = next.map_or(Some(0), |next| {
                nanos(next.saturating_duration_since(paces.epoch))
            });
            if let (Some(due), Some(interval)) = (due, nanos(interval)) {
                paces.interval.store(interval, Ordering::Relaxed);
                paces
                    .per_second
                    .store(per_second.to_bits(), Ordering::Relaxed);
                paces.lent_due.store(due, Ordering::Relaxed);
                paces.due.store(due, Ordering::Release);
            }
        }
        self.word.store(OPEN | lent as u64, Ordering::Release);
    }

    /// Whether the loan is open. (A closed loan stays all zero until it opens: no call
    /// changes it.)
    #[inline]
    pub(crate) fn is_open(&self) -> bool {
        self.word.load(Ordering::Relaxed) != 0
    }

    /// Closes the loan: what it gives back, if it was open. Under the lock.
    pub(crate) fn close(&self) -> Option<Returned> {
        if !self.is_open() {
            return None;
        }
        let word = self.word.swap(0, Ordering::Acquire);
        let paces = &self.pace;
        let due = paces.due.swap(UNLENT, Ordering::Acquire);
        let lent_due = paces.lent_due.swap(UNLENT, Ordering::Relaxed);
        // A start that moved the pace moved it one interval past itself.
        let moved = due != lent_due;
        let last_start = moved.then(|| {
            let interval = paces.interval.load(Ordering::Relaxed);
            paces.epoch + Duration::from_nanos(due - interval)
        });
        Some(Returned {
            free: word & FREE,
            starts: (word & !OPEN) >> STARTS_SHIFT,
            last_start,
        })
    }
}

/// `span` in nanoseconds, if it fits.
#[inline]
fn nanos(span: Duration) -> Option<u64> {
    u64::try_from(span.as_nanos()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn returned(free: u64, starts: u64, last_start: Option<Instant>) -> Option<Returned> {
        Some(Returned {
            free,
            starts,
            last_start,
        })
    }

    #[test]
    fn a_loan_lends_its_slots_and_counts_the_starts_made_from_it() {
        let loan = Loan::new();
        assert!(!loan.start(), "closed");
        assert!(!loan.end(), "closed: the call ends under the lock");
        assert_eq!(loan.close(), None);
        loan.open(2, None);
        assert!(loan.start() && loan.start());
        assert!(!loan.start(), "both slots out");
        assert!(loan.end());
        // One back; a call that started before the loan opened gives its slot back too.
        assert!(loan.end());
        assert!(loan.start());
        assert_eq!(loan.start_paced(Instant::now()), None, "no pace lent");
        assert_eq!(loan.close(), returned(1, 3, None));
        assert!(!loan.start() && !loan.end(), "closed again");
        assert_eq!(loan.close(), None);
    }

    #[test]
    fn a_loan_that_counted_its_most_starts_lets_no_more_start() {
        let loan = Loan::new();
        loan.open(1, None);
        loan.word
            .store(OPEN | (MAX_STARTS << STARTS_SHIFT) | 1, Ordering::Relaxed);
        assert!(
            !loan.start(),
            "the next call takes the lock, which closes it"
        );
        assert_eq!(loan.close(), returned(1, MAX_STARTS, None));
    }

    /// A lent pace lets a start at or after its next start's instant, spaces the next one
    /// interval after it, and gives the last back when the loan closes; a start that finds no
    /// slot puts the pace back as it was.
    #[test]
    fn a_lent_pace_spaces_the_starts_made_from_it_and_gives_back_the_last() {
        let loan = Loan::new();
        let t0 = loan.pace.epoch;
        let ms = Duration::from_millis;
        let pace = |next| LentPace {
            next,
            interval: ms(10),
            per_second: 100.0,
        };
        assert_eq!(loan.start_paced(t0), None, "closed");
        loan.open(1, Some(pace(Some(t0 + ms(5)))));
        assert_eq!(loan.start_paced(t0 + ms(4)), None, "not due yet");
        assert_eq!(
            loan.start_paced(t0 + ms(5)),
            Some(100.0),
            "due at the instant"
        );
        assert_eq!(loan.start_paced(t0 + ms(15)), None, "due, but no slot free");
        assert!(loan.end());
        assert_eq!(
            loan.start_paced(t0 + ms(14)),
            None,
            "the start without a slot put the pace back: due at 15 ms, not 25"
        );
        assert_eq!(loan.start_paced(t0 + ms(15)), Some(100.0));
        assert_eq!(loan.close(), returned(0, 2, Some(t0 + ms(15))));
        assert_eq!(loan.start_paced(t0 + ms(60)), None, "closed: no pace lent");
        // Lent with no start before it: due at once; an unmoved pace gives nothing back.
        loan.open(2, Some(pace(None)));
        assert_eq!(loan.close(), returned(2, 0, None));
        loan.open(2, Some(pace(None)));
        assert_eq!(loan.start_paced(t0), Some(100.0));
        assert_eq!(loan.start_paced(t0 + ms(9)), None);
        assert_eq!(loan.close(), returned(1, 1, Some(t0)));
        // An instant before the epoch (a clock paused before the loan was made) is not
        // counted, and takes the lock.
        loan.open(1, Some(pace(None)));
        if let Some(before) = t0.checked_sub(ms(1)) {
            assert_eq!(loan.start_paced(before), None);
        }
        assert_eq!(loan.close(), returned(1, 0, None));
    }
}
