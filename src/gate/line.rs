//! The line of calls waiting to start: retries before new calls; within each, the scopes take
//! turns. Each waiter carries a value of the async layer's choosing (`W`: its waker), which
//! the line keeps but never looks into.
//!
//! Turns are fair queueing over lanes, one lane per first scope (calls of no scope share a
//! lane of their own). A waiter's turn is the cost its lane has had served or queued before
//! it, counted from the line's clock: a call that joins a lane with nothing waiting takes the
//! turn of the last call started, plus its own cost; one that joins a lane with calls waiting
//! takes the turn after the last of them. The line goes by turn, then by arrival. So within a
//! lane calls keep their order, and a lane's backlog holds back a call of another lane by at
//! most that call's cost, plus one call, of each lane (see `tests`). Finding the next waiter,
//! joining and leaving each cost O(log n) for n waiters, and a lane with nothing waiting is
//! forgotten: scopes seen once cost nothing once their calls started.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use super::classify::Scope;

/// A waiter's place in line: retries before new calls, each by turn and then by arrival.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Ticket {
    /// The class in the top bit (retries first), the turn in the others: one word, so that a
    /// ticket is as small as a call's other state.
    key: u64,
    seq: u64,
}

const CLASS_BIT: u64 = 1 << 63;

impl Ticket {
    fn new(class: Class, turn: u64, seq: u64) -> Self {
        let class = match class {
            Class::Retry => 0,
            Class::New => CLASS_BIT,
        };
        Self {
            key: class | turn.min(CLASS_BIT - 1),
            seq,
        }
    }

    fn class(self) -> Class {
        if self.key & CLASS_BIT == 0 {
            Class::Retry
        } else {
            Class::New
        }
    }

    fn turn(self) -> u64 {
        self.key & !CLASS_BIT
    }
}

impl fmt::Debug for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ticket")
            .field("class", &self.class())
            .field("turn", &self.turn())
            .field("seq", &self.seq)
            .finish()
    }
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

/// The calls of one lane in line: how many wait, and the turn after the last of them.
#[derive(Debug, Default, Clone, Copy)]
struct Lane {
    waiting: usize,
    last_turn: u64,
}

/// The calls waiting to start, in the order they may.
#[derive(Debug)]
pub(crate) struct Line<W> {
    waiters: BTreeMap<Ticket, Waiter<W>>,
    next_seq: u64,
    /// The line's clock: the turn of the latest call that started from the line.
    clock: u64,
    /// The lanes with calls waiting, by first scope; calls of no scope in `unscoped`.
    lanes: HashMap<Scope, Lane>,
    unscoped: Lane,
}

impl<W> Default for Line<W> {
    fn default() -> Self {
        Self {
            waiters: BTreeMap::new(),
            next_seq: 0,
            clock: 0,
            lanes: HashMap::new(),
            unscoped: Lane::default(),
        }
    }
}

impl<W: Default> Line<W> {
    /// Takes a place in line, for a call of `scopes` that costs `cost` units: after the calls
    /// of its lane waiting already, and at the earliest at the turn of the latest call that
    /// started.
    pub(crate) fn join(&mut self, class: Class, scopes: Box<[Scope]>, cost: u64) -> Ticket {
        let ticket = self.ticket_for(class, &scopes, cost);
        self.next_seq += 1;
        self.rejoin(ticket, scopes, cost);
        ticket
    }

    /// Goes back to the place in line that `ticket` gives.
    pub(crate) fn rejoin(&mut self, ticket: Ticket, scopes: Box<[Scope]>, cost: u64) {
        let lane = self.lane_mut(&scopes);
        lane.waiting += 1;
        lane.last_turn = lane.last_turn.max(ticket.turn());
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

    /// The ticket a call of `scopes` that costs `cost` units would take if it joined now.
    pub(crate) fn ticket_for(&self, class: Class, scopes: &[Scope], cost: u64) -> Ticket {
        let after = match self.lane(scopes) {
            Some(lane) => lane.last_turn.max(self.clock),
            None => self.clock,
        };
        Ticket::new(class, after.saturating_add(cost), self.next_seq)
    }

    /// Leaves the line without starting.
    pub(crate) fn leave(&mut self, ticket: Ticket) {
        let Some(waiter) = self.waiters.remove(&ticket) else {
            return;
        };
        let first = waiter.scopes.first();
        let lane = match first {
            Some(scope) => self.lanes.get_mut(scope),
            None => Some(&mut self.unscoped),
        };
        let Some(lane) = lane else { return };
        lane.waiting -= 1;
        if lane.waiting == 0 {
            // Forgotten: its next call takes its turn from the line's clock.
            match first {
                Some(scope) => {
                    self.lanes.remove(scope);
                }
                None => self.unscoped = Lane::default(),
            }
        }
    }

    /// The waiter holding `ticket` starts: it leaves the line, and the line's clock moves on
    /// to its turn.
    pub(crate) fn start(&mut self, ticket: Ticket) {
        self.clock = self.clock.max(ticket.turn());
        self.leave(ticket);
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

    /// The units of the waiters ahead of `ticket` that `held` does not hold back: what they
    /// spend before it starts.
    pub(crate) fn cost_ahead(&self, ticket: Ticket, held: impl Fn(&[Scope]) -> bool) -> u64 {
        self.waiters
            .range(..ticket)
            .filter(|(_, waiter)| !held(&waiter.scopes))
            .map(|(_, waiter)| waiter.cost)
            .sum()
    }

    /// How many lanes have calls waiting (the lane of calls of no scope included).
    #[cfg(test)]
    pub(crate) fn lanes(&self) -> usize {
        self.lanes.len() + usize::from(self.unscoped.waiting > 0)
    }

    fn lane(&self, scopes: &[Scope]) -> Option<&Lane> {
        match scopes.first() {
            Some(scope) => self.lanes.get(scope),
            None => Some(&self.unscoped),
        }
    }

    fn lane_mut(&mut self, scopes: &[Scope]) -> &mut Lane {
        match scopes.first() {
            Some(scope) => self.lanes.entry(scope.clone()).or_default(),
            None => &mut self.unscoped,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use proptest::prelude::*;

    use super::*;

    fn scopes(lane: &str) -> Box<[Scope]> {
        if lane.is_empty() {
            Box::new([])
        } else {
            Box::new([lane.into(), "token".into()])
        }
    }

    /// Starts the first waiter, as the gate does when nothing holds any: its lane's name.
    fn start_next(line: &mut Line<()>) -> Option<(String, u64)> {
        let ticket = line.first_free(|_| false)?;
        let waiter = line.waiter(ticket);
        let started = (
            waiter.scopes.first().map_or("", Scope::as_str).to_owned(),
            waiter.cost,
        );
        line.start(ticket);
        Some(started)
    }

    fn lanes_started(line: &mut Line<()>) -> String {
        std::iter::from_fn(|| start_next(line))
            .map(|(lane, _)| {
                if lane.is_empty() {
                    "-".to_owned()
                } else {
                    lane
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn a_scopes_backlog_holds_back_a_call_of_another_scope_by_one_turn() {
        let mut line = Line::<()>::default();
        for _ in 0..100 {
            line.join(Class::New, scopes("a"), 1);
        }
        for _ in 0..3 {
            start_next(&mut line);
        }
        line.join(Class::New, scopes("b"), 1);
        line.join(Class::New, scopes("b"), 1);
        let order = lanes_started(&mut line);
        assert!(order.starts_with("a b a b a a"), "{order}");
    }

    #[test]
    fn scopes_take_turns_by_cost_and_calls_of_no_scope_share_a_lane() {
        let mut line = Line::<()>::default();
        for _ in 0..3 {
            line.join(Class::New, scopes("big"), 3);
        }
        for _ in 0..6 {
            line.join(Class::New, scopes("small"), 1);
        }
        for _ in 0..3 {
            line.join(Class::New, scopes(""), 1);
        }
        // Turns: big 3, 6, 9; small 1..=6; no scope 1, 2, 3; ties go by arrival.
        assert_eq!(
            lanes_started(&mut line),
            "small - small - big small - small small big small big"
        );
    }

    #[test]
    fn within_a_scope_calls_keep_their_order_and_retries_go_before_every_new_call() {
        let mut line = Line::<()>::default();
        let first = line.join(Class::New, scopes("a"), 1);
        let second = line.join(Class::New, scopes("a"), 1);
        line.join(Class::New, scopes("b"), 1);
        let retry = line.join(Class::Retry, scopes("a"), 1);
        assert!(retry < first && first < second);
        assert_eq!(line.first_free(|_| false), Some(retry));
        assert_eq!(lanes_started(&mut line), "a a b a");
    }

    #[test]
    fn a_place_given_back_is_taken_again_and_a_lane_with_nothing_waiting_is_forgotten() {
        let mut line = Line::<()>::default();
        for n in 0..10_000 {
            line.join(Class::New, scopes(&format!("tenant-{n}")), 1);
        }
        assert_eq!(line.lanes(), 10_000);
        let ticket = line.first_free(|_| false).unwrap();
        line.leave(ticket);
        line.rejoin(ticket, scopes("tenant-0"), 1);
        assert_eq!(line.first_free(|_| false), Some(ticket));
        while start_next(&mut line).is_some() {}
        assert_eq!((line.len(), line.lanes()), (0, 0));
        // A scope seen again starts afresh, from the line's clock.
        let again = line.join(Class::New, scopes("tenant-5"), 1);
        assert_eq!(again.turn(), line.clock + 1);
    }

    #[test]
    fn the_ticket_a_call_would_take_is_the_one_it_takes() {
        let mut line = Line::<()>::default();
        line.join(Class::New, scopes("a"), 4);
        let would = line.ticket_for(Class::New, &scopes("a"), 2);
        assert_eq!(line.join(Class::New, scopes("a"), 2), would);
        assert_eq!(line.cost_ahead(would, |_| false), 4);
        let other = line.ticket_for(Class::New, &scopes("b"), 1);
        assert_eq!(line.cost_ahead(other, |_| false), 0);
    }

    #[derive(Debug, Clone)]
    enum Step {
        Join { lane: usize, cost: u64 },
        Start,
    }

    fn steps() -> impl Strategy<Value = Vec<Step>> {
        let step = prop_oneof![
            3 => (0usize..4, 1u64..5).prop_map(|(lane, cost)| Step::Join { lane, cost }),
            2 => Just(Step::Start),
        ];
        prop::collection::vec(step, 0..200)
    }

    proptest! {
        /// Whatever the arrivals and their costs: every call starts once, each lane in its
        /// order of arrival; and between two starts of one lane whose second call was already
        /// waiting, each other lane spends at most that call's cost and one call's more.
        #[test]
        fn lanes_take_turns_in_order_and_none_spends_more_than_one_turn_between_anothers(
            steps in steps(),
        ) {
            let mut line = Line::<()>::default();
            // Per lane: the calls waiting (arrival number, cost), in the order they came.
            let mut waiting: Vec<VecDeque<(usize, u64)>> = vec![VecDeque::new(); 4];
            let mut started: Vec<(usize, usize, u64)> = Vec::new();
            // Per lane, what every other lane spent since its last start, and whether its
            // next call was waiting at that start.
            let mut spent_since = [[0u64; 4]; 4];
            let mut next_was_waiting = [false; 4];
            let mut max_cost = [0u64; 4];
            let mut arrivals = 0;
            let drain = std::iter::repeat_n(Step::Start, 200);
            for step in steps.into_iter().chain(drain) {
                match step {
                    Step::Join { lane, cost } => {
                        line.join(Class::New, scopes(&lane.to_string()), cost);
                        waiting[lane].push_back((arrivals, cost));
                        max_cost[lane] = max_cost[lane].max(cost);
                        arrivals += 1;
                    }
                    Step::Start => {
                        let Some((lane, cost)) = start_next(&mut line) else { continue };
                        let lane: usize = lane.parse().unwrap();
                        let (arrival, expected) = waiting[lane].pop_front().expect("it waited");
                        prop_assert_eq!(cost, expected, "lane {} out of order", lane);
                        started.push((lane, arrival, cost));
                        if next_was_waiting[lane] {
                            for other in (0..4).filter(|&other| other != lane) {
                                prop_assert!(
                                    spent_since[lane][other] <= cost + max_cost[other],
                                    "lane {} spent {} between two of lane {}'s starts: {:?}",
                                    other, spent_since[lane][other], lane, started
                                );
                            }
                        }
                        spent_since[lane] = [0; 4];
                        next_was_waiting[lane] = !waiting[lane].is_empty();
                        for other in (0..4).filter(|&other| other != lane) {
                            spent_since[other][lane] += cost;
                        }
                    }
                }
            }
            prop_assert_eq!(started.len(), arrivals, "every call started once");
            prop_assert_eq!((line.len(), line.lanes()), (0, 0));
        }
    }
}
