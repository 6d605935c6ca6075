//! The loan: slots of the in-flight limit that the gate's state lends out while nothing could
//! hold a call or needs its end, so that an uncontended call without a rate starts and ends
//! with one atomic operation each, and no lock.
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
//! hold a call: nobody waiting, no rate, no backoff (nor a streak of them to count successes
//! against), no announced quota or budget, no fleet.
//!
//! A call that started before the loan opened may give its slot back to it: the state counts
//! it in flight, and takes it back with the loan's free slots.

use std::sync::atomic::{AtomicU64, Ordering};

/// The loan's one word: whether it is open, the starts made since it opened, and the slots
/// free in it.
#[derive(Debug, Default)]
pub(crate) struct Loan(AtomicU64);

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

/// What a closed loan gives back: its free slots, and the starts made from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Returned {
    pub(crate) free: u64,
    pub(crate) starts: u64,
}

impl Loan {
    /// Takes a slot, if the loan is open and has one free.
    #[inline]
    pub(crate) fn start(&self) -> bool {
        let mut word = self.0.load(Ordering::Relaxed);
        loop {
            // A closed loan is all zero: no slot free in it.
            if word & FREE == 0 || (word & !OPEN) >> STARTS_SHIFT >= MAX_STARTS {
                return false;
            }
            let taken = word - 1 + (1 << STARTS_SHIFT);
            match (self.0).compare_exchange_weak(word, taken, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(now) => word = now,
            }
        }
    }

    /// Gives a successful call's slot back, if the loan is open; `false`: the call must end
    /// under the lock.
    #[inline]
    pub(crate) fn end(&self) -> bool {
        let mut word = self.0.load(Ordering::Relaxed);
        loop {
            if word & OPEN == 0 || word & FREE == FREE {
                return false;
            }
            match (self.0).compare_exchange_weak(
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
    /// flight. Under the lock, with the loan closed.
    pub(crate) fn open(&self, lent: usize) {
        debug_assert!(lent > 0 && lent <= MAX_LENT);
        debug_assert_eq!(self.0.load(Ordering::Relaxed), 0, "closed while locked");
        self.0.store(OPEN | lent as u64, Ordering::Release);
    }

    /// Whether the loan is open. (A closed loan stays all zero until it opens: no call
    /// changes it.)
    #[inline]
    pub(crate) fn is_open(&self) -> bool {
        self.0.load(Ordering::Relaxed) != 0
    }

    /// Closes the loan: what it gives back, if it was open. Under the lock.
    pub(crate) fn close(&self) -> Option<Returned> {
        if !self.is_open() {
            return None;
        }
        let word = self.0.swap(0, Ordering::Acquire);
        Some(Returned {
            free: word & FREE,
            starts: (word & !OPEN) >> STARTS_SHIFT,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loan_lends_its_slots_and_counts_the_starts_made_from_it() {
        let loan = Loan::default();
        assert!(!loan.start(), "closed");
        assert!(!loan.end(), "closed: the call ends under the lock");
        assert_eq!(loan.close(), None);
        loan.open(2);
        assert!(loan.start() && loan.start());
        assert!(!loan.start(), "both slots out");
        assert!(loan.end());
        // One back; a call that started before the loan opened gives its slot back too.
        assert!(loan.end());
        assert!(loan.start());
        assert_eq!(loan.close(), Some(Returned { free: 1, starts: 3 }));
        assert!(!loan.start() && !loan.end(), "closed again");
        assert_eq!(loan.close(), None);
    }

    #[test]
    fn a_loan_that_counted_its_most_starts_lets_no_more_start() {
        let loan = Loan::default();
        loan.open(1);
        loan.0
            .store(OPEN | (MAX_STARTS << STARTS_SHIFT) | 1, Ordering::Relaxed);
        assert!(
            !loan.start(),
            "the next call takes the lock, which closes it"
        );
        assert_eq!(
            loan.close(),
            Some(Returned {
                free: 1,
                starts: MAX_STARTS
            })
        );
    }
}
