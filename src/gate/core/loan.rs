//! The core's side of the loan (see [`Loan`](crate::gate::loan::Loan)): the slots it lends
//! while nothing could hold a call or needs its end, counted in flight until taken back.

use super::super::loan::{LentPace, MAX_LENT, Returned};
use super::Core;

impl<W> Core<W> {
    /// Lends the slots free now, if nothing could hold a call nor needs a call's end beyond
    /// its slot back and its success counted: nobody waits, no start is being cleared (nor
    /// must be), and no backoff, streak of throttles, adaptive rate or announced quota. Each
    /// lent slot counts in flight, at one unit, until [`Core::take_back`]. Returns how many
    /// (0: none), and the fixed rate's pace to lend with them, if the gate has one.
    pub(crate) fn lend(&mut self) -> (usize, Option<LentPace>) {
        let plain = self.line.is_empty() && !self.clearing && !self.serial;
        let unheld = self.backoffs.is_calm() && self.dims.is_empty();
        let pace = self.pace.lendable();
        if !(plain && unheld && pace.is_some()) {
            return (0, None);
        }
        let lent = (self.max_in_flight.saturating_sub(self.in_flight)).min(MAX_LENT);
        self.in_flight += lent;
        self.in_flight_cost += lent as u64;
        (lent, pace.flatten())
    }

    /// Takes back what was lent (`lent` slots) as the loan returned it: its free slots are
    /// free again; each start made from it is a call, and each slot given back to it a
    /// success (some by calls that started before it opened); the last start that moved its
    /// pace is the pace's last start, of one unit.
    pub(crate) fn take_back(&mut self, lent: usize, returned: Returned) {
        let Returned {
            free,
            starts,
            last_start,
        } = returned;
        if let Some(at) = last_start {
            self.pace.started(at, 1);
        }
        let free_slots = usize::try_from(free).expect("at most u32::MAX");
        self.in_flight -= free_slots;
        self.in_flight_cost -= free;
        self.counts.calls += starts;
        self.counts.successes += starts + free - lent as u64;
    }
}
