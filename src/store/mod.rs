//! Where a gate's shared state lives beyond the process. The in-process core (`gate/core.rs`)
//! is always there and decides alone by default; a store adds what the other processes of a
//! fleet did: their backoffs, their share of the rate budget, the rate they found together.
//!
//! The store knows the gate's public types only ([`Scope`]); the gate's side of the talk is
//! `gate/fleet.rs`.

mod connection;
pub(crate) mod redis;
#[cfg(feature = "redis-tls")]
pub(crate) mod tls;

use std::fmt;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::time::Instant;

use crate::gate::Scope;
use crate::time::after;

/// The store's answer to "may this call start?".
#[derive(Debug)]
pub(crate) enum Clearance {
    /// Start after `wait`: a slot of the shared rate budget is reserved for then. `fleet` is
    /// the fleet's adaptive rate, if it is newer than the version the gate knows.
    Go {
        wait: Duration,
        fleet: Option<FleetRate>,
    },
    /// A backoff holds the call for `remaining`: the gate-wide one (`None`) or that of the
    /// call's scope at this index.
    Held {
        scope: Option<usize>,
        remaining: Duration,
    },
    /// The quota the server announced to the fleet has nothing for the call before `after`
    /// (its window is spent, or the call sent to learn the next window has not brought its
    /// answer yet): ask again then.
    Later(Duration),
    /// The store did not answer in time: the in-process state decides alone.
    Unavailable,
}

/// The adaptive rate a fleet shares, at one version of it: its state as the gate wrote it,
/// with instants in microseconds of the store's clock (see [`ClockPair`]).
#[derive(Debug)]
pub(crate) struct FleetRate {
    pub(crate) version: u64,
    pub(crate) state: String,
}

/// The store's answer to "replace the fleet's rate".
#[derive(Debug)]
pub(crate) enum Replaced {
    Stored,
    /// The fleet has no rate any more (it expired): store it as the first version.
    Expired,
    /// Another process replaced it first: this is theirs.
    Stale(FleetRate),
}

/// The shared state of one gate, kept outside the process.
///
/// Durations, not instants, cross this boundary: the store measures them on its own clock, so
/// a process whose clock is off cannot shift a backoff or a rate slot for the others.
pub(crate) trait Store: fmt::Debug + Send + Sync + 'static {
    /// Asks to start one call of `scopes` that costs `cost` units, spaced `interval` (for
    /// its cost) from the fleet's previous start if the gate paces calls, and within the
    /// quota the server announced to the fleet. An adaptive gate passes the version of the
    /// fleet's rate it knows, to hear of a newer one.
    fn clear(
        &self,
        scopes: &[Scope],
        interval: Option<Duration>,
        known_rate: Option<u64>,
        cost: u64,
    ) -> BoxFuture<'static, Clearance>;

    /// Tells the fleet that a call started at `sent` (on this process's clock, if known)
    /// cost `more` units more (or less, if negative) than it started with, at `per_unit`
    /// between two starts for each unit if the gate paces calls. Does not wait for the
    /// answer.
    fn settle(&self, more: i64, per_unit: Option<Duration>, sent: Option<Instant>);

    /// Tells the fleet what a server announced: `left` units may be spent (what it said,
    /// less the gate's reserve and its other calls in flight) until its window resets in
    /// `resets_in`. Does not wait for the answer.
    fn observe(&self, left: u64, resets_in: Duration);

    /// Tells the fleet that calls (of `scope`, or all) must wait `length` from now; a backoff
    /// already running longer is kept. Does not wait for the answer.
    fn back_off(&self, scope: Option<&Scope>, length: Duration);

    /// Replaces the fleet's adaptive rate (`per_second`, and its whole `state`) if the fleet's
    /// is still at version `based_on`. `None` if the store did not answer.
    fn replace_rate(
        &self,
        based_on: u64,
        per_second: f64,
        state: String,
    ) -> BoxFuture<'static, Option<Replaced>>;

    /// This process's clock and the store's, read at the store's last answer.
    fn clock(&self) -> Option<ClockPair>;
}

/// One instant read on both clocks: this process's and the store's (in microseconds), to
/// carry instants from one to the other.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClockPair {
    pub(crate) local: Instant,
    pub(crate) store_micros: i64,
}

impl ClockPair {
    pub(crate) fn to_store(self, at: Instant) -> i64 {
        let micros = |d: Duration| i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
        if at >= self.local {
            self.store_micros.saturating_add(micros(at - self.local))
        } else {
            self.store_micros.saturating_sub(micros(self.local - at))
        }
    }

    /// The local instant of `micros` on the store's clock; one further ahead than the
    /// crate's longest wait (Redis data gone wrong) is taken as that far.
    pub(crate) fn to_local(self, micros: i64) -> Instant {
        let offset = Duration::from_micros(micros.abs_diff(self.store_micros));
        if micros >= self.store_micros {
            after(self.local, offset)
        } else {
            self.local.checked_sub(offset).unwrap_or(self.local)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::MAX_WAIT;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn instants_cross_to_the_store_clock_and_back_on_both_sides_of_the_reading() {
        let local = Instant::now() + 100_000 * MS;
        let pair = ClockPair {
            local,
            store_micros: 5_000_000,
        };
        assert_eq!(pair.to_store(local), 5_000_000);
        assert_eq!(pair.to_store(local + 1_500 * MS), 6_500_000);
        assert_eq!(pair.to_store(local - 2_000 * MS), 3_000_000);
        assert_eq!(pair.to_local(5_000_000), local);
        assert_eq!(pair.to_local(6_500_000), local + 1_500 * MS);
        assert_eq!(pair.to_local(3_000_000), local - 2_000 * MS);
    }

    #[test]
    fn absurd_store_instants_never_panic() {
        let local = Instant::now();
        let pair = ClockPair {
            local,
            store_micros: 0,
        };
        assert_eq!(pair.to_local(i64::MAX), local + MAX_WAIT);
        // Far back: in the past, however far this platform's clock reaches.
        assert!(pair.to_local(i64::MIN) <= local);
        assert_eq!(pair.to_store(local + MAX_WAIT), MAX_WAIT.as_micros() as i64);
    }
}
