//! The line of calls waiting to start: retries before new calls, each in arrival order. Each
//! waiter carries a value of the async layer's choosing (`W`: its waker), which the line
//! keeps but never looks into.

use std::collections::BTreeMap;

use super::classify::Scope;

/// A waiter's place in line: retries before new calls, each in arrival order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Ticket {
    class: Class,
    seq: u64,
}

/// Which calls go first. The order of the variants is the order of the line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Class {
    /// A call tried again after a throttle: it goes before every new call.
    Retry,
    /// A call's first attempt.
    New,
}

/// One call in line.
#[derive(Debug)]
pub(crate) struct Waiter<W> {
    pub(crate) scopes: Box<[Scope]>,
    pub(crate) cost: u64,
    parked: W,
}

/// The calls waiting to start, in the order they may.
#[derive(Debug)]
pub(crate) struct Line<W> {
    waiters: BTreeMap<Ticket, Waiter<W>>,
    next_seq: u64,
}

impl<W> Default for Line<W> {
    fn default() -> Self {
        Self {
            waiters: BTreeMap::new(),
            next_seq: 0,
        }
    }
}

impl<W: Default> Line<W> {
    /// Takes a place in line, for a call of `scopes` that costs `cost` units.
    pub(crate) fn join(&mut self, class: Class, scopes: Box<[Scope]>, cost: u64) -> Ticket {
        let ticket = Ticket {
            class,
            seq: self.next_seq,
        };
        self.next_seq += 1;
        self.rejoin(ticket, scopes, cost);
        ticket
    }

    /// Goes back to the place in line that `ticket` gives.
    pub(crate) fn rejoin(&mut self, ticket: Ticket, scopes: Box<[Scope]>, cost: u64) {
        let waiter = Waiter {
            scopes,
            cost,
            parked: W::default(),
        };
        self.waiters.insert(ticket, waiter);
    }
}

impl<W> Line<W> {
    /// Whether nobody waits.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.waiters.is_empty()
    }

    /// How many wait.
    pub(crate) fn len(&self) -> usize {
        self.waiters.len()
    }

    /// Leaves the line without starting.
    pub(crate) fn leave(&mut self, ticket: Ticket) {
        self.waiters.remove(&ticket);
    }

    /// The waiter holding `ticket`.
    ///
    /// # Panics
    ///
    /// If `ticket` is not in line.
    pub(crate) fn waiter(&self, ticket: Ticket) -> &Waiter<W> {
        self.waiters
            .get(&ticket)
            .expect("a waiter keeps its ticket")
    }

    /// What the async layer keeps for the waiter holding `ticket` (its waker).
    ///
    /// # Panics
    ///
    /// If `ticket` is not in line.
    pub(crate) fn parked(&mut self, ticket: Ticket) -> &mut W {
        &mut self
            .waiters
            .get_mut(&ticket)
            .expect("a waiter keeps its ticket")
            .parked
    }

    /// The first waiter that `held` (by its scopes) does not hold back.
    pub(crate) fn first_free(&self, held: impl Fn(&[Scope]) -> bool) -> Option<Ticket> {
        self.waiters
            .iter()
            .find(|(_, waiter)| !held(&waiter.scopes))
            .map(|(ticket, _)| *ticket)
    }

    /// The units of the waiters ahead of `ticket` (of every waiter, for `None`) that `held`
    /// does not hold back: what they spend before it starts.
    pub(crate) fn cost_ahead(
        &self,
        ticket: Option<Ticket>,
        held: impl Fn(&[Scope]) -> bool,
    ) -> u64 {
        self.waiters
            .iter()
            .take_while(|(waiter, _)| ticket.is_none_or(|mine| **waiter < mine))
            .filter(|(_, waiter)| !held(&waiter.scopes))
            .map(|(_, waiter)| waiter.cost)
            .sum()
    }
}
