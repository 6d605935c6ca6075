//! A gate as a member of its fleet: its heartbeat, by which the fleet counts its live gates,
//! and the starts it leased from the fleet's rate, which it spends without asking Redis.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::gate::Scope;
use crate::gate::dimensions::BudgetDraw;

/// A name that process `pid` makes `nanos` after the epoch (for a check's keys, a gate's id
/// among the fleet's members): two processes at the same instant, or one process at two
/// instants, make different ones.
pub(super) fn nonce(nanos: u64, pid: u32) -> u64 {
    let seed = nanos ^ u64::from(pid).rotate_left(32);
    crate::rng::SplitMix64::new(seed).next_u64()
}

/// How often a gate tells the fleet it is live, unless set (`RedisStore::heartbeat`).
pub(super) const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(1);
/// A gate that has not told the fleet it is live for this many heartbeats has dropped out.
const HEARTBEATS_MISSED: u32 = 3;

/// A gate as a member of its fleet: live while it asks to start calls, as its heartbeat in
/// Redis says (see `RedisStore`'s Membership).
#[derive(Debug)]
pub(super) struct Member {
    /// Its name among the fleet's members, unique to the gate.
    pub(super) id: String,
    pub(super) heartbeat: Duration,
    /// The fleet's members it counts before it has heard how many are live.
    pub(super) assumed: u64,
    beat: Mutex<Beat>,
    leases: Mutex<Leases>,
}

#[derive(Debug, Default)]
struct Beat {
    /// When the next start tells the fleet the gate is live (`None`: the first does).
    next: Option<Instant>,
    /// The fleet's live members, as the last heartbeat heard (0: none heard yet).
    members: u64,
}

/// What the gate leased, for each kind of call it leased for (see [`Cost`]): each kind's
/// leases apart, so that calls of several kinds (the tenants whose calls take turns, say)
/// each spend their own.
#[derive(Debug, Default)]
struct Leases {
    kinds: Vec<Leasing>,
    /// Counts revocations: a refill asked for before one brings nothing.
    generation: u64,
    /// The last round trip of a start to Redis.
    trip: Duration,
    /// The leases the gate took: the last one's id.
    made: u64,
    /// Leases that drew from budgets, dropped with starts left, until reclaimed.
    dropped: Vec<Lease>,
}

/// The most kinds of call a gate holds leases for at once: a kind beyond them ends the
/// leases of the kind first leased for, once idle kinds have made room.
const MOST_KINDS: usize = 32;

/// What the gate leased for one kind of call: the lease it spends, and the next, which a
/// refill brought before the first ran out (see [`Member::refill_due`]).
#[derive(Debug)]
struct Leasing {
    cost: Cost,
    spending: Option<Lease>,
    next: Option<Lease>,
    /// The last leased start, on this process's clock: the next lease's first start comes
    /// an interval after it at the soonest.
    last: Option<Instant>,
    /// A refill is on its way to Redis.
    refilling: bool,
}

impl Leasing {
    /// Whether it holds no start and waits for none.
    fn is_idle(&self) -> bool {
        let spent = (self.spending.as_ref()).is_none_or(|lease| lease.left == 0);
        spent && self.next.is_none() && !self.refilling
    }

    /// Its leases are ended: those that spent budgets for starts left go to `dropped`.
    fn end(&mut self, dropped: &mut Vec<Lease>) {
        drop_lease(dropped, self.spending.take());
        drop_lease(dropped, self.next.take());
    }

    /// The next lease, if any, takes over from the one spent. Returns the one spent.
    fn promote(&mut self) -> Option<Lease> {
        let last = self.last;
        let promoted = self.next.take().map(|next| next.after(last));
        std::mem::replace(&mut self.spending, promoted)
    }
}

/// `lease` is dropped: if it spent budgets for starts left, they may go back.
fn drop_lease(dropped: &mut Vec<Lease>, lease: Option<Lease>) {
    if let Some(lease) = lease.filter(|lease| lease.left > 0 && !lease.cost.draws.is_empty()) {
        dropped.push(lease);
    }
}

impl Leases {
    /// The leases for calls of `cost`, if the gate holds any or waits for a refill.
    fn of(&mut self, cost: Parts<'_>) -> Option<&mut Leasing> {
        self.kinds.iter_mut().find(|kind| kind.cost.is(cost))
    }

    /// Where the leases for calls of `cost` are, new if the gate had none, once the idle
    /// kinds are gone; if the most are still kept, the kind first leased for ends.
    fn index_of(&mut self, cost: &Cost) -> usize {
        let parts = cost.parts();
        if let Some(at) = self.kinds.iter().position(|kind| kind.cost.is(parts)) {
            return at;
        }
        self.kinds.retain(|kind| !kind.is_idle());
        if self.kinds.len() >= MOST_KINDS {
            let mut oldest = self.kinds.remove(0);
            oldest.end(&mut self.dropped);
        }
        self.kinds.push(Leasing {
            cost: cost.clone(),
            spending: None,
            next: None,
            last: None,
            refilling: false,
        });
        self.kinds.len() - 1
    }
}

/// The kind of call a lease is for: its units, what it draws of each budget told the gate,
/// and its scopes. Only calls of the same kind spend it: a call of other scopes could spend
/// a slot past its scope's backoff, or its rate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Cost {
    pub(super) units: u64,
    pub(super) draws: Box<[BudgetDraw]>,
    pub(super) scopes: Box<[Scope]>,
}

/// A [`Cost`], borrowed from the call that asks.
pub(super) type Parts<'a> = (u64, &'a [BudgetDraw], &'a [Scope]);

impl Cost {
    pub(super) fn new((units, draws, scopes): Parts<'_>) -> Self {
        Self {
            units,
            draws: draws.into(),
            scopes: scopes.into(),
        }
    }

    fn parts(&self) -> Parts<'_> {
        (self.units, &self.draws, &self.scopes)
    }

    fn is(&self, (units, draws, scopes): Parts<'_>) -> bool {
        self.units == units && *self.draws == *draws && *self.scopes == *scopes
    }
}

/// Starts of the fleet's rate that Redis reserved for this gate beyond the one it asked for,
/// each an interval after the one before: the gate's next calls of the same cost take them in
/// turn, without asking Redis (see `RedisStore::lease`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Lease {
    /// What each start costs, and draws of each budget told the gate (a call of another
    /// cost, or other draws, asks Redis).
    pub(super) cost: Cost,
    /// The instant of the next start, on this process's clock.
    pub(super) next: Instant,
    /// The instant of the next start as Redis reserved it, in microseconds of its clock,
    /// where it spent the start's budgets: it does not move when a start comes late.
    pub(super) reserved: i64,
    /// The time between two of its starts.
    pub(super) interval: Duration,
    /// The starts left.
    pub(super) left: u32,
    /// When the starts left are lost: a gate whose calls fell behind its slots takes them
    /// late, until this.
    pub(super) expires: Instant,
    /// Which lease it is, once the gate holds it (0 before).
    id: u64,
}

/// `duration` in whole microseconds, as Redis's clock counts.
pub(super) fn signed_micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

impl Lease {
    /// `starts` starts that cost `cost`, the first at `next` (`reserved` on Redis's clock)
    /// and each `interval` after the one before, which expire `span` after the last is due.
    pub(super) fn new(
        cost: Cost,
        (next, reserved): (Instant, i64),
        (interval, starts): (Duration, u32),
        span: Duration,
    ) -> Self {
        Self {
            cost,
            next,
            reserved,
            interval,
            left: starts,
            expires: next + interval * starts + span,
            id: 0,
        }
    }

    /// The instants, on Redis's clock, of the starts left, where each spent its budgets.
    pub(super) fn reserved_left(&self) -> impl Iterator<Item = i64> + use<> {
        let (first, step) = (self.reserved, signed_micros(self.interval));
        (0..i64::from(self.left)).map(move |i| first.saturating_add(step.saturating_mul(i)))
    }

    /// Its starts moved on to come an interval after `last` at the soonest, and its expiry
    /// with them.
    fn after(mut self, last: Option<Instant>) -> Self {
        if let Some(soonest) = last.map(|last| last + self.interval) {
            if soonest > self.next {
                self.expires += soonest - self.next;
                self.next = soonest;
            }
        }
        self
    }

    /// When its last start is due, as things stand.
    fn last_start(&self) -> Instant {
        self.next + self.interval * self.left.saturating_sub(1)
    }
}

impl Member {
    /// A gate that tells the fleet it is live once a `heartbeat`, and counts `assumed`
    /// members until it has heard how many are.
    pub(super) fn new(heartbeat: Duration, assumed: u64) -> Self {
        static MADE: AtomicU64 = AtomicU64::new(0);
        let made = MADE.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos() as u64);
        Self {
            id: format!(
                "{:016x}",
                nonce(nanos ^ made.rotate_left(40), std::process::id())
            ),
            heartbeat,
            assumed,
            beat: Mutex::default(),
            leases: Mutex::default(),
        }
    }

    fn beat(&self) -> MutexGuard<'_, Beat> {
        self.beat.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn leases(&self) -> MutexGuard<'_, Leases> {
        self.leases.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Its id, if a start at `now` is to tell the fleet the gate is live.
    pub(super) fn due(&self, now: Instant) -> Option<&str> {
        let due = self.beat().next.is_none_or(|next| now >= next);
        due.then_some(self.id.as_str())
    }

    /// The fleet had `members` live members as a start told it this gate is live, at `now`.
    pub(super) fn heard(&self, members: u64, now: Instant) {
        let mut beat = self.beat();
        beat.members = members;
        beat.next = Some(now + self.heartbeat);
    }

    /// The fleet's live members, as the last heartbeat heard (0: none heard yet).
    pub(super) fn members(&self) -> u64 {
        self.beat().members
    }

    /// The members it shares the fleet's limits with while Redis does not answer: those
    /// last heard, or those assumed before any were.
    pub(super) fn sharing(&self) -> u64 {
        match self.members() {
            0 => self.assumed,
            heard => heard,
        }
    }

    /// Another gate's membership, told and counted as this one's is.
    pub(super) fn another(&self) -> Self {
        Self::new(self.heartbeat, self.assumed)
    }

    /// How long the fleet counts a gate live after its heartbeat.
    pub(super) fn lives(&self) -> Duration {
        self.heartbeat * HEARTBEATS_MISSED
    }

    /// The next leased start for a call of `cost`, at `now`: how long the call waits for it.
    /// A start that comes late takes its slot late, and the slots after it move on with it,
    /// each an interval after the one before, until the lease expires; then the next lease,
    /// if a refill brought one, takes over. Calls of other kinds spend their own leases.
    /// Returns the wait, and the start as Redis reserved it.
    pub(super) fn leased(&self, cost: Parts<'_>, now: Instant) -> Option<(Duration, i64)> {
        let mut leases = self.leases();
        let Leases { kinds, dropped, .. } = &mut *leases;
        let kind = kinds.iter_mut().find(|kind| kind.cost.is(cost))?;
        loop {
            let held = kind.spending.as_mut()?;
            let at = held.next.max(now);
            if held.left == 0 || at >= held.expires {
                drop_lease(dropped, kind.promote());
                continue;
            }
            let reserved = held.reserved;
            held.next = at + held.interval;
            held.reserved = reserved.saturating_add(signed_micros(held.interval));
            held.left -= 1;
            kind.last = Some(at);
            return Some((at - now, reserved));
        }
    }

    /// Whether a leased start of `cost` at `now` asks Redis for the next lease as well, so
    /// that it comes before the one being spent runs out: when the one being spent has less
    /// than two round trips left, no refill is on its way and none waits. Returns the
    /// refill's ticket for [`Member::refilled`], and the starts the gate has leased still,
    /// which the refill need not cover.
    pub(super) fn refill_due(&self, cost: Parts<'_>, now: Instant) -> Option<(u64, u32)> {
        let mut leases = self.leases();
        let (generation, trip) = (leases.generation, leases.trip);
        let kind = leases.of(cost)?;
        let spending = kind.spending.as_ref()?;
        let ends = spending.last_start().min(spending.expires);
        let left = spending.left;
        let due = !kind.refilling
            && kind.next.is_none()
            && ends.saturating_duration_since(now) < trip * 2;
        kind.refilling |= due;
        due.then_some((generation, left))
    }

    /// The refill of calls of `cost` asked for with `ticket` came back with `lease`
    /// (`None`: it brought none): the gate spends it after the one it spends, unless a
    /// revocation came in between.
    /// Returns the lease's id, for [`Member::reclaim`], if the gate holds it.
    pub(super) fn refilled(&self, ticket: u64, cost: &Cost, lease: Option<Lease>) -> Option<u64> {
        let mut leases = self.leases();
        if let Some(kind) = leases.of(cost.parts()) {
            kind.refilling = false;
        }
        let mut lease = lease.filter(|_| ticket == leases.generation)?;
        leases.made += 1;
        lease.id = leases.made;
        let id = lease.id;
        let at = leases.index_of(cost);
        let Leases { kinds, dropped, .. } = &mut *leases;
        let kind = &mut kinds[at];
        if kind.spending.is_some() {
            drop_lease(dropped, kind.next.replace(lease));
        } else {
            kind.spending = Some(lease.after(kind.last));
            drop_lease(dropped, kind.next.take());
        }
        Some(id)
    }

    /// The lease `id`, once the gate no longer holds it with starts left, for what it spent
    /// of the budgets for them to go back: `Err` with when to ask again while the gate
    /// holds it unexpired; `None` if it was spent.
    pub(super) fn reclaim(&self, id: u64, now: Instant) -> Result<Option<Lease>, Instant> {
        let mut leases = self.leases();
        if let Some(dropped) = leases.dropped.iter().position(|lease| lease.id == id) {
            return Ok(Some(leases.dropped.swap_remove(dropped)));
        }
        let holds = |lease: &Option<Lease>| lease.as_ref().is_some_and(|lease| lease.id == id);
        let Some(kind) =
            (leases.kinds.iter_mut()).find(|kind| holds(&kind.spending) || holds(&kind.next))
        else {
            return Ok(None);
        };
        if let Some(next) = kind.next.as_ref().filter(|lease| lease.id == id) {
            return Err(next.expires.max(now));
        }
        let held = kind.spending.as_ref().expect("the lease held");
        if held.left == 0 {
            return Ok(None);
        }
        if now < held.expires {
            return Err(held.expires);
        }
        Ok(kind.promote())
    }

    /// A start's round trip to Redis took `trip`.
    pub(super) fn tripped(&self, trip: Duration) {
        self.leases().trip = trip;
    }

    /// The span a lease asked for now covers: `span`, or two round trips to Redis if
    /// longer, so that a refill asked for as a lease runs low comes back before it ran out.
    pub(super) fn lease_span(&self, span: Duration) -> Duration {
        if span.is_zero() {
            return span;
        }
        span.max(self.leases().trip * 2)
    }

    /// How many starts the gate asks Redis for, for `wanted` calls (a call asking, and those
    /// waiting behind it that no lease covers), at `interval` between two starts of the
    /// fleet's: the gate's share of the fleet's starts in `span` (its rate over its live
    /// members), but no more than wanted, and one at least; one while the gate has not
    /// heard how many members the fleet has. Were every member's calls to wait, the fleet's
    /// leases would reach a span ahead, together.
    pub(super) fn starts_to_ask(&self, wanted: u32, interval: Duration, span: Duration) -> u32 {
        let members = self.members();
        if members == 0 || interval.is_zero() {
            return 1;
        }
        let share = span.as_secs_f64() / interval.as_secs_f64() / members as f64;
        (share as u32).min(wanted).max(1)
    }

    /// Redis reserved `lease`'s starts for this gate, as a start asked for it: the gate
    /// spends it now.
    /// Returns the lease's id, for [`Member::reclaim`].
    pub(super) fn lease_out(&self, mut lease: Lease) -> u64 {
        let mut leases = self.leases();
        leases.made += 1;
        lease.id = leases.made;
        let id = lease.id;
        if lease.left == 0 {
            return id;
        }
        let at = leases.index_of(&lease.cost);
        let Leases { kinds, dropped, .. } = &mut *leases;
        let kind = &mut kinds[at];
        // A start asks Redis only once the gate has spent what it leased for its kind; a
        // refill on its way then may have come back while the start asked: the gate spends
        // both, the earlier first.
        match kind.spending.take() {
            Some(refill) if refill.left > 0 && kind.next.is_none() => {
                let (first, then) = if refill.next <= lease.next {
                    (refill, lease)
                } else {
                    (lease, refill)
                };
                kind.spending = Some(first);
                kind.next = Some(then);
            }
            held => {
                // Its first slot is the fleet's next after the start that asked for it.
                drop_lease(dropped, held);
                drop_lease(dropped, kind.next.take());
                kind.last = None;
                kind.spending = Some(lease);
            }
        }
        id
    }

    /// The gate learnt of a throttle: what it leased is not spent, nor what a refill on its
    /// way brings.
    pub(super) fn revoke(&self) {
        let mut leases = self.leases();
        let Leases { kinds, dropped, .. } = &mut *leases;
        for mut kind in kinds.drain(..) {
            kind.end(dropped);
        }
        leases.generation += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// A call of one unit, of no scope, that draws from no budget.
    const ONE: Parts<'static> = (1, &[], &[]);

    /// The wait for the next leased start of a call of `units` of no scope that draws from
    /// no budget.
    fn take(member: &Member, units: u64, now: Instant) -> Option<Duration> {
        member.leased((units, &[], &[]), now).map(|(wait, _)| wait)
    }

    /// A lease's starts go in turn, each at its instant; a late one goes at once and moves
    /// the next on; none goes once the lease expired; a call of another cost ends the lease,
    /// as does a revocation.
    #[test]
    fn leased_starts_go_in_turn_and_end_with_the_lease() {
        let member = Member::new(DEFAULT_HEARTBEAT, 1);
        let t0 = Instant::now();
        assert_eq!(take(&member, 1, t0), None, "nothing leased");
        let lease = Lease {
            cost: Cost::new(ONE),
            next: t0 + 10 * MS,
            reserved: 0,
            interval: 10 * MS,
            left: 4,
            expires: t0 + 60 * MS,
            id: 0,
        };
        member.lease_out(lease.clone());
        assert_eq!(take(&member, 1, t0), Some(10 * MS));
        // The second start (due at 20 ms) comes at 25: it goes at once, the third at 35.
        assert_eq!(take(&member, 1, t0 + 25 * MS), Some(Duration::ZERO));
        assert_eq!(take(&member, 1, t0 + 30 * MS), Some(5 * MS));
        // The fourth would go at 60, as the lease expires.
        assert_eq!(take(&member, 1, t0 + 60 * MS), None, "expired");
        member.lease_out(lease.clone());
        assert_eq!(take(&member, 1, t0 + 59 * MS), Some(Duration::ZERO));
        member.lease_out(Lease {
            left: 1,
            ..lease.clone()
        });
        take(&member, 1, t0).unwrap();
        assert_eq!(take(&member, 1, t0), None, "all spent");
        member.lease_out(lease.clone());
        assert_eq!(take(&member, 2, t0), None, "another cost");
        assert_eq!(take(&member, 1, t0), Some(10 * MS), "the lease stays");
        member.lease_out(lease.clone());
        member.revoke();
        assert_eq!(take(&member, 1, t0), None, "revoked");
        member.lease_out(Lease { left: 0, ..lease });
        assert_eq!(take(&member, 1, t0), None, "an empty lease");
    }

    /// A lease within two round trips of its last start asks for the next, once; the next
    /// follows the one spent, an interval after its last start at the soonest; a refill asked
    /// for before a revocation brings nothing; one that comes when nothing is spent is spent
    /// at once.
    #[test]
    fn a_lease_running_low_is_refilled_once_and_the_refill_follows_it() {
        let member = Member::new(DEFAULT_HEARTBEAT, 1);
        let t0 = Instant::now();
        let lease = |next: u32, left| {
            let first = (t0 + next * MS, 0);
            Lease::new(Cost::new(ONE), first, (10 * MS, left), 20 * MS)
        };
        member.tripped(10 * MS);
        assert_eq!(member.refill_due(ONE, t0), None, "nothing leased");
        // Starts at 10, 20, 30 and 40 ms.
        member.lease_out(lease(10, 4));
        assert_eq!(member.refill_due(ONE, t0), None, "40 ms left");
        assert_eq!(take(&member, 1, t0), Some(10 * MS));
        assert_eq!(
            member.refill_due(ONE, t0 + 20 * MS),
            None,
            "20 ms left: two round trips"
        );
        assert_eq!(
            member.refill_due(ONE, t0 + 21 * MS),
            Some((0, 3)),
            "19 ms left"
        );
        assert_eq!(
            member.refill_due(ONE, t0 + 21 * MS),
            None,
            "one is on its way"
        );
        // Its slots were reserved from 35 ms (it came back early): they follow the last
        // leased start, as the script reserved them after the fleet's pace.
        member.refilled(0, &Cost::new(ONE), Some(lease(35, 2)));
        assert_eq!(member.refill_due(ONE, t0 + 22 * MS), None, "one waits");
        let starts: Vec<_> = (0..6)
            .map(|_| take(&member, 1, t0 + 20 * MS).map(|wait| wait + 20 * MS))
            .collect();
        let at = |ms| Some(ms * MS);
        assert_eq!(starts, [at(20), at(30), at(40), at(50), at(60), None]);

        // A refill asked for before a revocation brings nothing.
        member.lease_out(lease(10, 2));
        let (ticket, _) = member.refill_due(ONE, t0 + 10 * MS).expect("due");
        member.revoke();
        member.refilled(ticket, &Cost::new(ONE), Some(lease(30, 2)));
        assert_eq!(take(&member, 1, t0), None, "revoked");
        // One that comes when nothing is leased is spent at once, one that brings nothing
        // lets the next be asked for.
        member.lease_out(lease(10, 1));
        let (ticket, _) = member.refill_due(ONE, t0).expect("due");
        assert_eq!(take(&member, 1, t0), Some(10 * MS));
        assert_eq!(take(&member, 1, t0), None, "spent");
        member.refilled(ticket, &Cost::new(ONE), Some(lease(30, 1)));
        assert_eq!(take(&member, 1, t0), Some(30 * MS));
        member.lease_out(lease(10, 1));
        let (ticket, _) = member.refill_due(ONE, t0).expect("due");
        member.refilled(ticket, &Cost::new(ONE), None);
        assert_eq!(member.refill_due(ONE, t0), Some((ticket, 1)), "asked again");
        member.refilled(ticket, &Cost::new(ONE), None);

        // A refill that came back while a start asked Redis is spent with what the start
        // leased, the earlier first, whichever came back first.
        for ask_first in [false, true] {
            member.revoke();
            member.lease_out(lease(10, 1));
            let (ticket, _) = member.refill_due(ONE, t0).expect("due");
            assert_eq!(take(&member, 1, t0), Some(10 * MS));
            assert_eq!(
                take(&member, 1, t0),
                None,
                "spent: the next start asks Redis"
            );
            if ask_first {
                member.lease_out(lease(50, 2));
                member.refilled(ticket, &Cost::new(ONE), Some(lease(30, 2)));
            } else {
                member.refilled(ticket, &Cost::new(ONE), Some(lease(30, 2)));
                member.lease_out(lease(50, 2));
            }
            let starts: Vec<_> = (0..5).map(|_| take(&member, 1, t0)).collect();
            let expected = if ask_first {
                // The start's lease first, then the refill's, after it.
                [at(50), at(60), at(70), at(80), None]
            } else {
                [at(30), at(40), at(50), at(60), None]
            };
            assert_eq!(
                starts, expected,
                "the start's lease came back first: {ask_first}"
            );
        }
    }

    /// A lease that drew from budgets is reclaimed, with the instants Redis reserved for the
    /// starts left, once the gate no longer holds it: when it expired, or at once when a
    /// revocation dropped it; one spent, or one that drew from no
    /// budget, leaves nothing to reclaim.
    #[test]
    fn a_lease_that_drew_from_budgets_is_reclaimed_once_the_gate_no_longer_holds_it() {
        use crate::gate::dimensions::BudgetDraw;
        use crate::{Budget, Dimension};

        let member = Member::new(DEFAULT_HEARTBEAT, 1);
        let t0 = Instant::now();
        let draws: Box<[BudgetDraw]> = Box::new([BudgetDraw::told(
            Budget::new(Dimension::TOKENS, 10, Duration::from_secs(1)),
            2,
        )]);
        let lease = |left| {
            let cost = Cost::new((1, &draws, &[]));
            Lease::new(cost, (t0 + 10 * MS, 5_000), (10 * MS, left), 20 * MS)
        };
        let taken = |member: &Member, now| member.leased((1, &draws, &[]), now);
        // Starts at 10, 20 and 30 ms (5,000, 15,000 and 25,000 µs on Redis's clock); it
        // expires at 60 ms.
        let id = member.lease_out(lease(3));
        assert_eq!(taken(&member, t0), Some((10 * MS, 5_000)));
        assert_eq!(member.reclaim(id, t0 + 59 * MS), Err(t0 + 60 * MS), "held");
        let reclaimed = member.reclaim(id, t0 + 60 * MS).unwrap().expect("expired");
        assert_eq!(
            reclaimed.reserved_left().collect::<Vec<_>>(),
            [15_000, 25_000]
        );
        assert_eq!(taken(&member, t0 + 60 * MS), None, "no longer held");
        assert_eq!(member.reclaim(id, t0 + 60 * MS), Ok(None), "reclaimed once");

        // A call of other draws finds none, and leaves it held; a revocation drops it, and
        // it is reclaimed at once.
        let (first, id) = (id, member.lease_out(lease(3)));
        assert_ne!(id, first, "each lease its own id");
        assert_eq!(member.leased(ONE, t0), None);
        assert_eq!(member.reclaim(id, t0), Err(t0 + 60 * MS), "held");
        member.revoke();
        assert_eq!(member.reclaim(id, t0).unwrap().map(|l| l.left), Some(3));
        let id = member.lease_out(lease(2));
        member.revoke();
        assert_eq!(member.reclaim(id, t0).unwrap().map(|l| l.left), Some(2));
        // Spent: nothing.
        let id = member.lease_out(lease(1));
        assert!(taken(&member, t0).is_some());
        assert_eq!(member.reclaim(id, t0 + 60 * MS), Ok(None));
        // A refill waiting behind the lease spent is held till it expires, apart from the
        // one spent, each by its own id.
        let spent = member.lease_out(lease(3));
        let refill = Lease::new(
            Cost::new((1, &draws, &[])),
            (t0 + 40 * MS, 35_000),
            (10 * MS, 2),
            20 * MS,
        );
        let cost = refill.cost.clone();
        member.tripped(10 * MS);
        let (ticket, _) = member.refill_due(cost.parts(), t0 + 15 * MS).expect("due");
        let refilled = member.refilled(ticket, &cost, Some(refill)).expect("held");
        assert_ne!(refilled, spent);
        assert_eq!(member.reclaim(spent, t0), Err(t0 + 60 * MS));
        assert_eq!(member.reclaim(refilled, t0), Err(t0 + 80 * MS));
        let reclaimed = member.reclaim(spent, t0 + 60 * MS).unwrap();
        assert_eq!(
            reclaimed.map(|lease| lease.left),
            Some(3),
            "expired unspent"
        );
        assert_eq!(member.reclaim(refilled, t0 + 60 * MS), Err(t0 + 80 * MS));
        member.revoke();
        // Of no budget: dropped, nothing to give back.
        let plain = Lease::new(Cost::new(ONE), (t0, 0), (10 * MS, 3), 20 * MS);
        let id = member.lease_out(plain);
        member.revoke();
        assert_eq!(member.reclaim(id, t0), Ok(None));
    }

    /// Calls of each kind (units, draws, scopes) spend their own leases, side by side; a
    /// kind past the most kept ends the leases of the kind first leased for, once an idle
    /// kind has made room.
    #[test]
    fn each_kind_of_call_spends_its_own_lease() {
        let member = Member::new(DEFAULT_HEARTBEAT, 1);
        let t0 = Instant::now();
        let scopes: Vec<[Scope; 1]> = (0..=MOST_KINDS + 1)
            .map(|i| [Scope::from(format!("tenant-{i}"))])
            .collect();
        let lease = |scopes: &[Scope], left| {
            let cost = Cost::new((1, &[], scopes));
            Lease::new(cost, (t0 + 10 * MS, 0), (10 * MS, left), 20 * MS)
        };
        let take = |scopes: &[Scope]| member.leased((1, &[], scopes), t0).map(|(wait, _)| wait);
        member.lease_out(lease(&scopes[0], 2));
        member.lease_out(lease(&scopes[1], 2));
        assert_eq!(take(&scopes[0]), Some(10 * MS));
        assert_eq!(
            take(&scopes[1]),
            Some(10 * MS),
            "its own, from its first slot"
        );
        assert_eq!(take(&[]), None, "no scope: none leased");
        assert_eq!(take(&scopes[1]), Some(20 * MS));
        assert_eq!(take(&scopes[1]), None, "spent");
        // The spent kind makes room, though the first holds one still older.
        for scopes in &scopes[2..MOST_KINDS] {
            member.lease_out(lease(scopes, 2));
        }
        member.lease_out(lease(&scopes[MOST_KINDS], 2));
        assert_eq!(take(&scopes[0]), Some(20 * MS), "kept");
        // Its last start taken, the first makes room; then, none idle, the first leased
        // for of those left ends.
        member.lease_out(lease(&scopes[1], 2));
        member.lease_out(lease(&scopes[MOST_KINDS + 1], 2));
        assert_eq!(take(&scopes[2]), None, "the first leased for ended");
        assert_eq!(take(&scopes[3]), Some(10 * MS));
        assert_eq!(take(&scopes[MOST_KINDS + 1]), Some(10 * MS));
        assert_eq!(take(&scopes[1]), Some(10 * MS));
    }

    /// A lease covers its span, or two round trips to Redis if longer; zero leases nothing.
    #[test]
    fn a_lease_covers_two_round_trips_when_redis_is_slower_than_its_span() {
        let member = Member::new(DEFAULT_HEARTBEAT, 1);
        assert_eq!(member.lease_span(20 * MS), 20 * MS);
        member.tripped(15 * MS);
        assert_eq!(member.lease_span(20 * MS), 30 * MS);
        assert_eq!(member.lease_span(Duration::ZERO), Duration::ZERO);
    }

    /// A gate tells the fleet it is live at its first start, then once a heartbeat after it
    /// last heard the members; it is counted live for three heartbeats.
    #[test]
    fn a_gate_tells_the_fleet_it_is_live_once_a_heartbeat() {
        let member = Member::new(DEFAULT_HEARTBEAT, 1);
        let t0 = Instant::now();
        assert_eq!(member.due(t0), Some(member.id.as_str()));
        // Until the answer comes, each start tells it again.
        assert!(member.due(t0 + 5 * MS).is_some());
        member.heard(3, t0 + 10 * MS);
        assert_eq!(member.members(), 3);
        assert_eq!(member.due(t0 + 10 * MS), None);
        assert_eq!(member.due(t0 + 1_009 * MS), None);
        assert!(member.due(t0 + 1_010 * MS).is_some());
        assert_eq!(member.lives(), 3 * DEFAULT_HEARTBEAT);
        // Until it heard the members, it shares the limits with those assumed; then with
        // those heard, as another gate made like it does.
        let assuming = Member::new(DEFAULT_HEARTBEAT, 40);
        assert_eq!((assuming.members(), assuming.sharing()), (0, 40));
        assuming.heard(3, t0);
        assert_eq!((assuming.members(), assuming.sharing()), (3, 3));
        let another = assuming.another();
        assert_eq!(
            (another.sharing(), another.heartbeat),
            (40, DEFAULT_HEARTBEAT)
        );
        assert_eq!(member.sharing(), 3);
        // Two members made at one instant by one process have different ids.
        assert_ne!(Member::new(DEFAULT_HEARTBEAT, 1).id, member.id);
    }

    /// A gate asks for its share of the fleet's starts in a span, no more than wait, and one
    /// at least; one before it heard the fleet's members.
    #[test]
    fn a_gate_asks_for_its_share_of_a_span_and_no_more_than_waits() {
        let member = Member::new(DEFAULT_HEARTBEAT, 1);
        let span = 20 * MS;
        let interval = Duration::from_micros(100);
        assert_eq!(
            member.starts_to_ask(51, interval, span),
            1,
            "no members heard"
        );
        member.heard(4, Instant::now());
        // 200 of the fleet's starts in 20 ms, 50 this gate's.
        assert_eq!(member.starts_to_ask(81, interval, span), 50);
        assert_eq!(member.starts_to_ask(4, interval, span), 4, "three wait");
        assert_eq!(member.starts_to_ask(1, interval, span), 1, "none waits");
        assert_eq!(member.starts_to_ask(0, interval, span), 1, "none wanted");
        // 5 ms between the fleet's starts: 4 in the span, one each.
        assert_eq!(member.starts_to_ask(51, 5 * MS, span), 1);
        assert_eq!(member.starts_to_ask(51, Duration::ZERO, span), 1);
        assert_eq!(member.starts_to_ask(51, interval, Duration::ZERO), 1);
    }
}
