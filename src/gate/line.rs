//! The line of calls waiting to start: retries before new calls; then by priority (each lower
//! priority kept a share of starts); within each, the scopes take turns. Each waiter carries
//! a value of the async layer's choosing (`W`: its waker), which the line keeps but never
//! looks into.
//!
//! Turns are fair queueing over lanes, one lane per first scope (calls of no scope share a
//! lane of their own). A waiter's turn is the cost its lane has had served or queued before
//! it, divided by the lane's weight and counted from the line's clock: a call that joins a
//! lane with nothing waiting takes the turn of the last call started, plus its own cost;
//! one that joins a lane with calls waiting takes the turn after the last of them. The line
//! goes by turn, then by arrival. So within a lane calls keep their order, and a lane's
//! backlog holds back a call of another lane by at most that call's cost (in proportion to
//! their weights), plus one call, of each lane (see `tests`). Finding the next waiter,
//! joining and leaving each cost O(log n) for n waiters, and a lane with nothing waiting is
//! forgotten: scopes seen once cost nothing once their calls started.

use std::collections::{BTreeSet, HashMap};
use std::fmt;

use super::classify::Scope;
use super::dimensions::Draws;
use super::options::Priority;

/// A waiter's place in line: retries before first attempts; then by priority, by turn, and
/// by arrival.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Ticket {
    /// The class in the top bit (retries first), the priority in the next two, the turn in
    /// the others: one word, so that a ticket is as small as a call's other state.
    key: u64,
    seq: u64,
}

const CLASS_BIT: u64 = 1 << 63;
/// A turn counts a call's cost in this many parts, shared out by its lane's weight (at most
/// as many), so that a lane of weight 1 moves on by this much for each unit.
const WEIGHT_PARTS: u64 = 1024;
const PRIORITY_SHIFT: u32 = 61;
const TURN_MASK: u64 = (1 << PRIORITY_SHIFT) - 1;
const PRIORITIES: [Priority; 3] = [Priority::Interactive, Priority::Normal, Priority::Bulk];

impl Ticket {
    fn new(class: Class, priority: Priority, turn: u64, seq: u64) -> Self {
        Self {
            key: Self::first_key(class, priority) | turn.min(TURN_MASK),
            seq,
        }
    }

    /// The key of the first ticket of `class` and `priority`.
    fn first_key(class: Class, priority: Priority) -> u64 {
        let class = match class {
            Class::Retry => 0,
            Class::New => CLASS_BIT,
        };
        class | (priority as u64) << PRIORITY_SHIFT
    }

    fn class(self) -> Class {
        if self.key & CLASS_BIT == 0 {
            Class::Retry
        } else {
            Class::New
        }
    }

    pub(crate) fn priority(self) -> Priority {
        PRIORITIES[((self.key & !CLASS_BIT) >> PRIORITY_SHIFT) as usize]
    }

    fn turn(self) -> u64 {
        self.key & TURN_MASK
    }
}

impl fmt::Debug for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ticket")
            .field("class", &self.class())
            .field("priority", &self.priority())
            .field("turn", &self.turn())
            .field("seq", &self.seq)
            .finish()
    }
}

/// Where a call is, or would be, in line: the place its ticket gives, or, for a call arriving,
/// the place it would take at its priority.
#[derive(Debug, Clone, Copy)]
pub(crate) enum LinePlace {
    Taken(Ticket),
    Arriving(Priority),
}

impl LinePlace {
    /// The priority of the call at this place.
    pub(crate) fn priority(self) -> Priority {
        match self {
            LinePlace::Taken(ticket) => ticket.priority(),
            LinePlace::Arriving(priority) => priority,
        }
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
    /// What it draws of the budgets of other dimensions (set by the core once it joined).
    pub(crate) draws: Draws,
    parked: W,
    /// Stepped out of its lane, held back by a scope of its own that is not the lane's.
    apart: bool,
}

/// The calls of one lane: those in line by ticket, how many wait (those stepped out apart
/// too), and the turn after the last of them.
#[derive(Debug)]
struct Lane {
    queue: BTreeSet<Ticket>,
    waiting: usize,
    last_turn: u64,
    /// The waiter that found the lane's own scope holding it back, if one did: the lane is
    /// out of line until that waiter (or any of the lane's) finds it free again, or leaves.
    held_by: Option<Ticket>,
    /// The lane's share of turns: its scope's weight.
    weight: u64,
}

impl Default for Lane {
    fn default() -> Self {
        Self::weighing(1)
    }
}

impl Lane {
    fn weighing(weight: u32) -> Self {
        Self {
            queue: BTreeSet::new(),
            waiting: 0,
            last_turn: 0,
            held_by: None,
            weight: u64::from(weight),
        }
    }

    /// Puts `ticket` in the lane's queue; if it becomes the lane's first, in `heads` too.
    fn insert(&mut self, ticket: Ticket, heads: &mut BTreeSet<Ticket>) {
        let first = self.queue.first().copied();
        self.queue.insert(ticket);
        if self.held_by.is_none() && first.is_none_or(|first| ticket < first) {
            if let Some(first) = first {
                heads.remove(&first);
            }
            heads.insert(ticket);
        }
    }

    /// Takes `ticket` out of the lane's queue; if it was the lane's first in `heads` (the
    /// lane is not held out), the next takes its place there.
    fn remove(&mut self, ticket: Ticket, heads: &mut BTreeSet<Ticket>) {
        self.queue.remove(&ticket);
        if heads.remove(&ticket) {
            if let Some(&next) = self.queue.first() {
                heads.insert(next);
            }
        }
    }

    /// The lane comes back in line; `true` if it was held out.
    fn release(&mut self, heads: &mut BTreeSet<Ticket>) -> bool {
        let held = self.held_by.take().is_some();
        if held {
            if let Some(&first) = self.queue.first() {
                heads.insert(first);
            }
        }
        held
    }
}

/// The lanes of one priority, and what the line keeps of that priority.
#[derive(Debug, Default)]
struct Level {
    /// The turn of the latest call of this priority that started from the line.
    clock: u64,
    /// The lanes with calls waiting, by first scope; calls of no scope in `unscoped`.
    lanes: HashMap<Scope, Lane>,
    unscoped: Lane,
    /// Calls waiting, retries included.
    waiting: usize,
    /// First attempts waiting.
    new_waiting: usize,
    /// Starts of other priorities since this one's last, while its first attempts waited.
    passed_over: u32,
}

impl Level {
    fn lane(&self, scopes: &[Scope]) -> Option<&Lane> {
        match scopes.first() {
            Some(scope) => self.lanes.get(scope),
            None => Some(&self.unscoped),
        }
    }

    /// The lane of a call of `scopes` that waits.
    fn lane_mut(&mut self, scopes: &[Scope]) -> &mut Lane {
        match scopes.first() {
            Some(scope) => self
                .lanes
                .get_mut(scope)
                .expect("a waiter's lane is kept while it waits"),
            None => &mut self.unscoped,
        }
    }

    /// The lane of a call of `scopes`, made with the weight `weight_of` gives its scope if
    /// none waits.
    fn lane_or_new(
        &mut self,
        scopes: &[Scope],
        weight_of: impl FnOnce(&Scope) -> u32,
    ) -> &mut Lane {
        match scopes.first() {
            Some(scope) => self
                .lanes
                .entry(scope.clone())
                .or_insert_with(|| Lane::weighing(weight_of(scope))),
            None => &mut self.unscoped,
        }
    }

    /// The lane of calls of `scopes` has nothing waiting: it is forgotten, and its next call
    /// takes its turn from the clock.
    fn forget(&mut self, scopes: &[Scope]) {
        match scopes.first() {
            Some(scope) => {
                self.lanes.remove(scope);
            }
            None => self.unscoped = Lane::default(),
        }
    }
}

/// How far a call of `cost` units moves on the turns of a lane of `weight` (from 1 to
/// [`WEIGHT_PARTS`]).
fn turns(cost: u64, weight: u64) -> u64 {
    cost.saturating_mul(WEIGHT_PARTS) / weight.clamp(1, WEIGHT_PARTS)
}

/// How a waiter held back by one of its own scopes steps out of line (see [`Line::step_out`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Apart {
    /// With its lane: the scope that holds it is its lane's, and holds the whole lane.
    WithLane,
    /// Alone: another of its scopes holds it; the calls behind it in its lane carry on.
    Alone,
}

/// The calls waiting to start, in the order they may.
#[derive(Debug)]
pub(crate) struct Line<W> {
    /// Every waiter, in line or stepped out, by ticket (the lanes and `heads` keep the order).
    waiters: HashMap<Ticket, Waiter<W>>,
    /// The first waiter in line of each lane that is in line: the calls that may go next.
    heads: BTreeSet<Ticket>,
    /// How many lanes are held out of line.
    held_lanes: usize,
    next_seq: u64,
    levels: [Level; 3],
}

impl<W> Default for Line<W> {
    fn default() -> Self {
        Self {
            waiters: HashMap::new(),
            heads: BTreeSet::new(),
            held_lanes: 0,
            next_seq: 0,
            levels: Default::default(),
        }
    }
}

impl<W: Default> Line<W> {
    /// Takes a place in line, for a call of `scopes` that costs `cost` units: after the calls
    /// of its lane waiting already, and at the earliest at the turn of the latest call of its
    /// priority that started. `weight_of` gives the weight of its lane's scope, if the lane
    /// has nothing waiting.
    pub(crate) fn join(
        &mut self,
        (class, priority): (Class, Priority),
        scopes: Box<[Scope]>,
        cost: u64,
        weight_of: impl Fn(&Scope) -> u32,
    ) -> Ticket {
        let ticket = self.ticket_for((class, priority), &scopes, cost, &weight_of);
        self.next_seq += 1;
        self.rejoin(ticket, scopes, cost, weight_of);
        ticket
    }

    /// Goes back to the place in line that `ticket` gives.
    pub(crate) fn rejoin(
        &mut self,
        ticket: Ticket,
        scopes: Box<[Scope]>,
        cost: u64,
        weight_of: impl FnOnce(&Scope) -> u32,
    ) {
        let level = &mut self.levels[ticket.priority() as usize];
        let lane = level.lane_or_new(&scopes, weight_of);
        lane.waiting += 1;
        lane.last_turn = lane.last_turn.max(ticket.turn());
        lane.insert(ticket, &mut self.heads);
        level.waiting += 1;
        if ticket.class() == Class::New {
            level.new_waiting += 1;
        }
        let waiter = Waiter {
            scopes,
            cost,
            draws: Draws::NONE,
            parked: W::default(),
            apart: false,
        };
        self.waiters.insert(ticket, waiter);
    }
}

impl<W> Line<W> {
    /// Whether nobody waits, in line or stepped out.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.waiters.is_empty()
    }

    /// How many wait.
    pub(crate) fn len(&self) -> usize {
        self.waiters.len()
    }

    /// How many calls of `scopes` that cost `cost` and draw `draws` wait among the first
    /// `most` of their lane, priority by priority: the calls the fleet's store may lease
    /// starts for.
    pub(crate) fn alike_in_line(
        &self,
        (cost, draws, scopes): (u64, &Draws, &[Scope]),
        most: usize,
    ) -> usize {
        let lanes = self.levels.iter().filter_map(|level| level.lane(scopes));
        lanes
            .flat_map(|lane| &lane.queue)
            .take(most)
            .filter(|ticket| {
                let waiter = &self.waiters[ticket];
                waiter.cost == cost && waiter.draws == *draws && *waiter.scopes == *scopes
            })
            .count()
    }

    /// How many calls wait in the lanes of calls of `scopes`, of every priority.
    pub(crate) fn in_lane(&self, scopes: &[Scope]) -> usize {
        let lanes = self.levels.iter().filter_map(|level| level.lane(scopes));
        lanes.map(|lane| lane.waiting).sum()
    }

    /// How many of `priority` or a higher one wait.
    pub(crate) fn len_at_or_above(&self, priority: Priority) -> usize {
        self.levels[..=priority as usize]
            .iter()
            .map(|level| level.waiting)
            .sum()
    }

    /// The ticket a call of `scopes` that costs `cost` units would take if it joined now
    /// (`weight_of` gives the weight of its lane's scope, if the lane has nothing waiting).
    pub(crate) fn ticket_for(
        &self,
        (class, priority): (Class, Priority),
        scopes: &[Scope],
        cost: u64,
        weight_of: impl FnOnce(&Scope) -> u32,
    ) -> Ticket {
        let level = &self.levels[priority as usize];
        let (after, weight) = match level.lane(scopes) {
            Some(lane) => (lane.last_turn.max(level.clock), lane.weight),
            None => (
                level.clock,
                scopes.first().map_or(1, |s| weight_of(s).into()),
            ),
        };
        let turn = after.saturating_add(turns(cost, weight));
        Ticket::new(class, priority, turn, self.next_seq)
    }

    /// The weight of `scope`'s lanes becomes `weight`, for the calls that join them from now.
    pub(crate) fn set_weight(&mut self, scope: &Scope, weight: u32) {
        for level in &mut self.levels {
            if let Some(lane) = level.lanes.get_mut(scope) {
                lane.weight = u64::from(weight);
            }
        }
    }

    /// Leaves the line without starting. A waiter that held its lane out of line gives the
    /// lane back to the line, whose next waiter finds out whether the lane is still held.
    /// Returns the waiter, if it was in line.
    pub(crate) fn leave(&mut self, ticket: Ticket) -> Option<Waiter<W>> {
        let waiter = self.waiters.remove(&ticket)?;
        let level = &mut self.levels[ticket.priority() as usize];
        level.waiting -= 1;
        if ticket.class() == Class::New {
            level.new_waiting -= 1;
        }
        let lane = level.lane_mut(&waiter.scopes);
        if lane.held_by == Some(ticket) {
            lane.queue.remove(&ticket);
            lane.release(&mut self.heads);
            self.held_lanes -= 1;
        } else if !waiter.apart {
            lane.remove(ticket, &mut self.heads);
        }
        lane.waiting -= 1;
        if lane.waiting == 0 {
            level.forget(&waiter.scopes);
        }
        Some(waiter)
    }

    /// The waiter holding `ticket` starts: it leaves the line, its priority's clock moves on
    /// to its turn, and every other priority with first attempts waiting was passed over once.
    /// Returns the waiter.
    ///
    /// # Panics
    ///
    /// If `ticket` is not in line.
    pub(crate) fn start(&mut self, ticket: Ticket) -> Waiter<W> {
        let waiter = self.leave(ticket).expect("a waiter keeps its ticket");
        let started = ticket.priority() as usize;
        for (index, level) in self.levels.iter_mut().enumerate() {
            if index == started {
                level.clock = level.clock.max(ticket.turn());
                level.passed_over = 0;
            } else if level.new_waiting > 0 {
                level.passed_over += 1;
            } else {
                level.passed_over = 0;
            }
        }
        waiter
    }

    /// The waiter holding `ticket` is held back by one of its own scopes: it steps out of
    /// line, `apart` says how, until [`Line::step_in`] brings it back. Returns whether it
    /// carries the hold (it stepped out alone, or holds its lane out: not when another waiter
    /// of its lane does), and whether it did not before.
    ///
    /// # Panics
    ///
    /// If `ticket` is not in line.
    pub(crate) fn step_out(&mut self, ticket: Ticket, apart: Apart) -> Option<bool> {
        let waiter = self
            .waiters
            .get_mut(&ticket)
            .expect("a waiter keeps its ticket");
        let lane = self.levels[ticket.priority() as usize].lane_mut(&waiter.scopes);
        match apart {
            Apart::WithLane => match lane.held_by {
                None => {
                    if let Some(first) = lane.queue.first() {
                        self.heads.remove(first);
                    }
                    lane.held_by = Some(ticket);
                    self.held_lanes += 1;
                    Some(true)
                }
                Some(holder) => (holder == ticket).then_some(false),
            },
            Apart::Alone if waiter.apart => Some(false),
            Apart::Alone => {
                lane.remove(ticket, &mut self.heads);
                waiter.apart = true;
                Some(true)
            }
        }
    }

    /// Whether the waiter holding `ticket` stepped out of line, alone or with its lane.
    pub(crate) fn is_out(&self, ticket: Ticket) -> bool {
        self.waiters.get(&ticket).is_some_and(|waiter| {
            let held = || {
                let lane = self.levels[ticket.priority() as usize].lane(&waiter.scopes);
                lane.is_some_and(|lane| lane.held_by.is_some())
            };
            waiter.apart || (self.held_lanes > 0 && held())
        })
    }

    /// The waiter holding `ticket` is no longer held back by its scopes: it comes back in
    /// line, and its lane with it. Nothing, if it left.
    pub(crate) fn step_in(&mut self, ticket: Ticket) {
        let Some(waiter) = self.waiters.get_mut(&ticket) else {
            return;
        };
        let lane = self.levels[ticket.priority() as usize].lane_mut(&waiter.scopes);
        if std::mem::take(&mut waiter.apart) {
            lane.insert(ticket, &mut self.heads);
        }
        if lane.release(&mut self.heads) {
            self.held_lanes -= 1;
        }
    }

    /// The lanes of `scope` come back in line (its limits changed): `ask` is given what the
    /// async layer keeps for the waiter that held each out (its waker), to ask again.
    pub(crate) fn release_lanes(&mut self, scope: &Scope, mut ask: impl FnMut(&mut W)) {
        for level in &mut self.levels {
            let Some(lane) = level.lanes.get_mut(scope) else {
                continue;
            };
            let holder = lane.held_by;
            if lane.release(&mut self.heads) {
                self.held_lanes -= 1;
            }
            if let Some(waiter) = holder.and_then(|holder| self.waiters.get_mut(&holder)) {
                ask(&mut waiter.parked);
            }
        }
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

    /// The waiter holding `ticket`, to change.
    ///
    /// # Panics
    ///
    /// If `ticket` is not in line.
    pub(crate) fn waiter_mut(&mut self, ticket: Ticket) -> &mut Waiter<W> {
        self.waiters
            .get_mut(&ticket)
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

    /// The waiter in line that may go next: a retry if one may; else the first attempt of a
    /// lower priority whose share of starts is due, if any; else the first in line. Waiters
    /// stepped out of line are not in it.
    pub(crate) fn first(&self) -> Option<Ticket> {
        let first = *self.heads.first()?;
        if first.class() == Class::Retry {
            return Some(first);
        }
        let lower = PRIORITIES
            .iter()
            .filter(|priority| **priority > first.priority());
        for &priority in lower {
            let level = &self.levels[priority as usize];
            // Due a start early: two lower priorities may fall due at once, and the one
            // served second must still have its start within `SHARE_EVERY`.
            if level.new_waiting > 0 && level.passed_over + 2 >= Priority::SHARE_EVERY {
                let from = Ticket {
                    key: Ticket::first_key(Class::New, priority),
                    seq: 0,
                };
                let to = Ticket {
                    key: from.key + (1 << PRIORITY_SHIFT),
                    seq: 0,
                };
                if let Some(&due) = self.heads.range(from..to).next() {
                    return Some(due);
                }
            }
        }
        Some(first)
    }

    /// The units of the waiters surely ahead of `ticket` that `held` does not hold back: what
    /// they spend before it starts. Those of a higher priority are left out: the share of a
    /// lower one may let it go before some of them.
    pub(crate) fn cost_ahead(
        &self,
        ticket: Ticket,
        held: impl Fn(&[Scope], (u64, &Draws)) -> bool,
    ) -> u64 {
        self.waiters
            .iter()
            .filter(|(ahead, _)| **ahead < ticket)
            .filter(|(ahead, _)| {
                ahead.class() == Class::Retry || ahead.priority() == ticket.priority()
            })
            .filter(|(_, waiter)| !held(&waiter.scopes, (waiter.cost, &waiter.draws)))
            .map(|(_, waiter)| waiter.cost)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use proptest::prelude::*;

    use super::*;

    /// What only the tests ask of the line.
    impl<W> Line<W> {
        /// Checks what the line keeps beside its waiters against the waiters themselves: each
        /// lane's queue holds its waiters not stepped out alone; `heads` the first of each lane's
        /// queue that is not held out; the counts agree.
        pub(crate) fn check(&self) {
            let mut heads = BTreeSet::new();
            let mut held = 0;
            for (index, level) in self.levels.iter().enumerate() {
                let lanes = level
                    .lanes
                    .iter()
                    .map(|(scope, lane)| (Some(scope), lane))
                    .chain(std::iter::once((None, &level.unscoped)));
                for (scope, lane) in lanes {
                    let of_lane: Vec<_> = self
                        .waiters
                        .iter()
                        .filter(|(ticket, _)| ticket.priority() as usize == index)
                        .filter(|(_, waiter)| waiter.scopes.first() == scope)
                        .collect();
                    assert_eq!(lane.waiting, of_lane.len(), "lane {scope:?}");
                    let in_line: BTreeSet<Ticket> = of_lane
                        .iter()
                        .filter(|(_, waiter)| !waiter.apart)
                        .map(|(ticket, _)| **ticket)
                        .collect();
                    assert_eq!(lane.queue, in_line, "lane {scope:?}");
                    match lane.held_by {
                        Some(holder) => {
                            held += 1;
                            assert!(self.waiters.contains_key(&holder), "a holder waits");
                        }
                        None => heads.extend(lane.queue.first()),
                    }
                }
            }
            assert_eq!(self.heads, heads);
            assert_eq!(self.held_lanes, held);
        }

        /// How many lanes have calls waiting (the lanes of calls of no scope included).
        pub(crate) fn lanes(&self) -> usize {
            self.levels
                .iter()
                .map(|level| level.lanes.len() + usize::from(level.unscoped.waiting > 0))
                .sum()
        }
    }

    /// Failures kept beside this file, as the store's property tests keep theirs.
    fn config() -> ProptestConfig {
        ProptestConfig {
            failure_persistence: Some(Box::new(
                proptest::test_runner::FileFailurePersistence::WithSource("proptest-regressions"),
            )),
            ..ProptestConfig::default()
        }
    }

    /// Every scope's weight alike.
    fn even(_: &Scope) -> u32 {
        1
    }

    fn scopes(lane: &str) -> Box<[Scope]> {
        if lane.is_empty() {
            Box::new([])
        } else {
            Box::new([lane.into(), "token".into()])
        }
    }

    /// Starts the first waiter, as the gate does when nothing holds any: its lane's name.
    fn start_next(line: &mut Line<()>) -> Option<(String, u64)> {
        let ticket = line.first()?;
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
            line.join((Class::New, Priority::Normal), scopes("a"), 1, even);
        }
        for _ in 0..3 {
            start_next(&mut line);
        }
        line.join((Class::New, Priority::Normal), scopes("b"), 1, even);
        line.join((Class::New, Priority::Normal), scopes("b"), 1, even);
        let order = lanes_started(&mut line);
        assert!(order.starts_with("a b a b a a"), "{order}");
    }

    #[test]
    fn scopes_take_turns_by_cost_and_calls_of_no_scope_share_a_lane() {
        let mut line = Line::<()>::default();
        for _ in 0..3 {
            line.join((Class::New, Priority::Normal), scopes("big"), 3, even);
        }
        for _ in 0..6 {
            line.join((Class::New, Priority::Normal), scopes("small"), 1, even);
        }
        for _ in 0..3 {
            line.join((Class::New, Priority::Normal), scopes(""), 1, even);
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
        let first = line.join((Class::New, Priority::Normal), scopes("a"), 1, even);
        let second = line.join((Class::New, Priority::Normal), scopes("a"), 1, even);
        line.join((Class::New, Priority::Normal), scopes("b"), 1, even);
        let retry = line.join((Class::Retry, Priority::Normal), scopes("a"), 1, even);
        assert!(retry < first && first < second);
        assert_eq!(line.first(), Some(retry));
        assert_eq!(lanes_started(&mut line), "a a b a");
    }

    #[test]
    fn a_place_given_back_is_taken_again_and_a_lane_with_nothing_waiting_is_forgotten() {
        let mut line = Line::<()>::default();
        for n in 0..10_000 {
            line.join(
                (Class::New, Priority::Normal),
                scopes(&format!("tenant-{n}")),
                1,
                even,
            );
        }
        assert_eq!(line.lanes(), 10_000);
        let ticket = line.first().unwrap();
        line.leave(ticket);
        line.rejoin(ticket, scopes("tenant-0"), 1, even);
        assert_eq!(line.first(), Some(ticket));
        while start_next(&mut line).is_some() {}
        assert_eq!((line.len(), line.lanes()), (0, 0));
        // A scope seen again starts afresh, from the line's clock.
        let again = line.join((Class::New, Priority::Normal), scopes("tenant-5"), 1, even);
        assert_eq!(again.turn(), line.levels[1].clock + WEIGHT_PARTS);
    }

    #[test]
    fn the_ticket_a_call_would_take_is_the_one_it_takes() {
        let mut line = Line::<()>::default();
        line.join((Class::New, Priority::Normal), scopes("a"), 4, even);
        let would = line.ticket_for((Class::New, Priority::Normal), &scopes("a"), 2, even);
        assert_eq!(
            line.join((Class::New, Priority::Normal), scopes("a"), 2, even),
            would
        );
        assert_eq!(line.cost_ahead(would, |_, _| false), 4);
        let other = line.ticket_for((Class::New, Priority::Normal), &scopes("b"), 1, even);
        assert_eq!(line.cost_ahead(other, |_, _| false), 0);
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
        #![proptest_config(config())]

        /// Whatever the arrivals, their costs and the lanes' weights: every call starts once,
        /// each lane in its order of arrival; and between two starts of one lane whose second
        /// call was already waiting, each other lane spends at most that call's cost in
        /// proportion to their weights, and one call's more (and a unit for the turns'
        /// rounding, where a weight does not divide a unit's parts).
        #[test]
        fn lanes_take_turns_in_order_and_none_spends_more_than_one_turn_between_anothers(
            steps in steps(),
            weights in prop::array::uniform4(prop_oneof![3 => Just(1u32), 1 => 1..=4u32]),
        ) {
            let weight_of = |scope: &Scope| weights[scope.as_str().parse::<usize>().unwrap()];
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
                        line.join((Class::New, Priority::Normal), scopes(&lane.to_string()), cost, weight_of);
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
                                let share = f64::from(weights[other]) / f64::from(weights[lane]);
                                // Turns count a unit in 1024 parts, which a weight of 3
                                // does not divide: its turns round down, a part a call.
                                let exact = [lane, other]
                                    .iter()
                                    .all(|&l| WEIGHT_PARTS % u64::from(weights[l]) == 0);
                                let rounding = if exact { 0.0 } else { 1.0 };
                                let most = cost as f64 * share + max_cost[other] as f64 + rounding;
                                prop_assert!(
                                    spent_since[lane][other] as f64 <= most,
                                    "lane {} spent {} between two of lane {}'s starts (weights {:?}): {:?}",
                                    other, spent_since[lane][other], lane, weights, started
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

    #[derive(Debug, Clone)]
    enum Op {
        Join {
            lane: usize,
            retry: bool,
        },
        /// The `n`-th waiter (of those waiting, by ticket) steps out: with its lane, or
        /// alone.
        Out {
            n: usize,
            with_lane: bool,
        },
        In {
            n: usize,
        },
        Leave {
            n: usize,
        },
        /// A lane's scope has new limits: its lanes come back in line.
        Release {
            lane: usize,
        },
        Start,
    }

    fn ops() -> impl Strategy<Value = Vec<Op>> {
        let op = prop_oneof![
            4 => (0usize..3, any::<bool>()).prop_map(|(lane, retry)| Op::Join { lane, retry }),
            2 => (0usize..50, any::<bool>()).prop_map(|(n, with_lane)| Op::Out { n, with_lane }),
            2 => (0usize..50).prop_map(|n| Op::In { n }),
            1 => (0usize..50).prop_map(|n| Op::Leave { n }),
            1 => (1usize..3).prop_map(|lane| Op::Release { lane }),
            2 => Just(Op::Start),
        ];
        prop::collection::vec(op, 0..150)
    }

    proptest! {
        #![proptest_config(config())]

        /// Whatever waiters join, step out (alone or with their lane), come back, leave or
        /// start: the lanes, the first of each and the held lanes' count agree with the
        /// waiters; the first in line is never a waiter stepped out, nor of a lane held out,
        /// and is the first of its lane.
        #[test]
        fn stepping_out_and_in_keeps_the_line_whole(ops in ops()) {
            let mut line = Line::<()>::default();
            for op in ops {
                let mut waiting: Vec<Ticket> = line.waiters.keys().copied().collect();
                waiting.sort();
                let nth = |n: usize| (!waiting.is_empty()).then(|| waiting[n % waiting.len()]);
                match op {
                    Op::Join { lane, retry } => {
                        let class = if retry { Class::Retry } else { Class::New };
                        line.join((class, Priority::Normal), scopes(["", "a", "b"][lane]), 1, even);
                    }
                    Op::Out { n, with_lane } => {
                        if let Some(ticket) = nth(n) {
                            let apart = if with_lane { Apart::WithLane } else { Apart::Alone };
                            line.step_out(ticket, apart);
                        }
                    }
                    Op::In { n } => {
                        if let Some(ticket) = nth(n) {
                            line.step_in(ticket);
                        }
                    }
                    Op::Leave { n } => {
                        if let Some(ticket) = nth(n) {
                            line.leave(ticket);
                        }
                    }
                    Op::Release { lane } => {
                        let scope = Scope::from(["", "a", "b"][lane]);
                        let mut asked = 0;
                        line.release_lanes(&scope, |()| asked += 1);
                        prop_assert!(asked <= 1, "one holder a lane");
                    }
                    Op::Start => {
                        if let Some(ticket) = line.first() {
                            prop_assert!(!line.is_out(ticket));
                            let waiter = line.waiter(ticket);
                            let lane = line.levels[1].lane(&waiter.scopes).unwrap();
                            prop_assert_eq!(lane.queue.first(), Some(&ticket));
                            line.start(ticket);
                        }
                    }
                }
                line.check();
            }
        }
    }

    #[test]
    fn a_higher_priority_goes_ahead_of_every_lower_one_whatever_its_scope() {
        let mut line = Line::<()>::default();
        for _ in 0..3 {
            line.join((Class::New, Priority::Bulk), scopes("batch"), 1, even);
        }
        line.join((Class::New, Priority::Normal), scopes("app"), 1, even);
        line.join(
            (Class::New, Priority::Interactive),
            scopes("click"),
            1,
            even,
        );
        line.join((Class::Retry, Priority::Bulk), scopes("batch"), 1, even);
        assert_eq!(
            lanes_started(&mut line),
            "batch click app batch batch batch"
        );
    }

    #[test]
    fn the_cost_surely_ahead_is_of_the_retries_and_the_calls_own_priority() {
        let mut line = Line::<()>::default();
        line.join((Class::Retry, Priority::Bulk), scopes("a"), 2, even);
        line.join((Class::New, Priority::Interactive), scopes("a"), 3, even);
        line.join((Class::New, Priority::Bulk), scopes("a"), 5, even);
        // A bulk call waits for the retry and the bulk call; the interactive one may come
        // after it, by the share of starts bulk calls keep.
        let bulk = line.ticket_for((Class::New, Priority::Bulk), &scopes("a"), 1, even);
        assert_eq!(line.cost_ahead(bulk, |_, _| false), 2 + 5);
        let interactive =
            line.ticket_for((Class::New, Priority::Interactive), &scopes("a"), 1, even);
        assert_eq!(line.cost_ahead(interactive, |_, _| false), 2 + 3);
    }

    #[derive(Debug, Clone)]
    enum Mixed {
        Join(Priority),
        Start,
    }

    fn mixed() -> impl Strategy<Value = Vec<Mixed>> {
        let priority = prop_oneof![
            Just(Priority::Interactive),
            Just(Priority::Normal),
            Just(Priority::Bulk)
        ];
        let step = prop_oneof![
            3 => priority.prop_map(Mixed::Join),
            2 => Just(Mixed::Start),
        ];
        prop::collection::vec(step, 0..300)
    }

    proptest! {
        #![proptest_config(config())]

        /// Whatever the arrivals: a first attempt starts ahead of a waiting one of a higher
        /// priority only as its own priority's share, after being passed over eight times;
        /// and while a priority has calls waiting, no ten starts in a row pass it over.
        #[test]
        fn higher_priorities_go_first_and_each_lower_one_has_one_start_in_ten(
            steps in mixed(),
        ) {
            let mut line = Line::<()>::default();
            let mut waiting = [0usize; 3];
            let mut passed_over = [0u32; 3];
            let drain = std::iter::repeat_n(Mixed::Start, 300);
            for step in steps.into_iter().chain(drain) {
                match step {
                    Mixed::Join(priority) => {
                        line.join((Class::New, priority), scopes(""), 1, even);
                        waiting[priority as usize] += 1;
                    }
                    Mixed::Start => {
                        let Some(ticket) = line.first() else { continue };
                        let started = ticket.priority() as usize;
                        let higher_waits = waiting[..started].iter().any(|&n| n > 0);
                        prop_assert!(
                            !higher_waits || passed_over[started] + 2 >= Priority::SHARE_EVERY,
                            "{:?} started ahead of a higher priority, passed over {} times",
                            ticket.priority(), passed_over[started]
                        );
                        line.start(ticket);
                        waiting[started] -= 1;
                        for (index, passed) in passed_over.iter_mut().enumerate() {
                            if index != started && waiting[index] > 0 {
                                *passed += 1;
                                prop_assert!(*passed < Priority::SHARE_EVERY, "{:?}", waiting);
                            } else {
                                *passed = 0;
                            }
                        }
                    }
                }
            }
            prop_assert_eq!(waiting, [0, 0, 0]);
            prop_assert!(line.is_empty());
        }
    }

    /// The calls a lease may be for: those of the same cost, draws and scopes among the first
    /// of their lane, of every priority; and all the calls waiting in a lane.
    #[test]
    fn calls_alike_are_counted_in_their_own_lane() {
        use crate::Dimension;

        let mut line = Line::<()>::default();
        let tokens = Draws::NONE.with(Dimension::TOKENS, 5);
        let mut join = |priority, lane: &str, cost, draws: &Draws| {
            let ticket = line.join((Class::New, priority), scopes(lane), cost, even);
            line.waiter_mut(ticket).draws = draws.clone();
        };
        join(Priority::Normal, "a", 1, &Draws::NONE);
        join(Priority::Normal, "a", 1, &tokens);
        join(Priority::Bulk, "a", 1, &Draws::NONE);
        join(Priority::Normal, "a", 2, &Draws::NONE);
        join(Priority::Normal, "b", 1, &Draws::NONE);
        join(Priority::Normal, "", 1, &Draws::NONE);
        let a: Box<[Scope]> = scopes("a");
        let ab: Box<[Scope]> = Box::new([Scope::from("a"), Scope::from("b")]);
        assert_eq!(
            line.alike_in_line((1, &Draws::NONE, &a), 64),
            2,
            "of either priority"
        );
        assert_eq!(line.alike_in_line((1, &tokens, &a), 64), 1, "of its draws");
        assert_eq!(
            line.alike_in_line((2, &Draws::NONE, &a), 64),
            1,
            "of its cost"
        );
        assert_eq!(
            line.alike_in_line((1, &Draws::NONE, &ab), 64),
            0,
            "of its scopes"
        );
        assert_eq!(line.alike_in_line((1, &Draws::NONE, &[]), 64), 1);
        assert_eq!(
            line.alike_in_line((1, &Draws::NONE, &a), 2),
            1,
            "among the first 2"
        );
        assert_eq!(line.in_lane(&a), 4);
        assert_eq!(line.in_lane(&ab), 4, "the lane of its first scope");
        assert_eq!(line.in_lane(&scopes("b")), 1);
        assert_eq!(line.in_lane(&[]), 1);
    }
}
