//! Where a gate's shared state lives beyond the process: the in-process state (in
//! `gate/state.rs`) is always there and decides alone by default; a store adds what the other
//! processes of a fleet did (their backoffs, their share of the rate budget, the rate they
//! found together).
//!
//! Without a store feature, nothing here is built into a store: the gate's code for one stays.
#![cfg_attr(not(feature = "redis"), allow(dead_code))]

#[cfg(feature = "redis")]
pub(crate) mod redis;

use std::fmt;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::time::Instant;

use crate::gate::Scope;
use crate::gate::adaptive::{AdaptiveRate, RateEvent};

/// The store's answer to "may this call start?".
#[derive(Debug)]
pub(crate) enum Clearance {
    /// Start after `wait`: a slot of the shared rate budget is reserved for then. `fleet` is
    /// the fleet's adaptive rate, if it changed since the version the gate knows.
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
    /// The store did not answer in time: the in-process state decides alone.
    Unavailable,
}

/// The adaptive rate a fleet shares, at one version of it.
#[derive(Debug)]
pub(crate) struct FleetRate {
    pub(crate) version: u64,
    pub(crate) rate: AdaptiveRate,
}

/// The shared state of one gate, kept outside the process.
///
/// Durations, not instants, cross this boundary: the store measures them on its own clock, so
/// a process whose clock is off cannot shift a backoff or a rate slot for the others.
pub(crate) trait Store: fmt::Debug + Send + Sync + 'static {
    /// Asks to start one call of `scopes`, spaced `interval` from the fleet's previous start
    /// if the gate paces calls. An adaptive gate passes its rate and the version of the
    /// fleet's rate it knows, to hear of a newer one.
    fn clear(
        &self,
        scopes: &[Scope],
        interval: Option<Duration>,
        adaptive: Option<(u64, AdaptiveRate)>,
    ) -> BoxFuture<'static, Clearance>;

    /// Tells the fleet that calls (of `scope`, or all) must wait `length` from now; a backoff
    /// already running longer is kept. Does not wait for the answer.
    fn back_off(&self, scope: Option<&Scope>, length: Duration);

    /// Tells the fleet the adaptive rate this process reached by `event`, from the fleet's
    /// rate at `version`; if another process changed it since, `event` is applied to theirs.
    /// Does not wait for the answer.
    fn share_rate(&self, version: u64, rate: AdaptiveRate, event: RateEvent);
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

    pub(crate) fn to_local(self, micros: i64) -> Instant {
        let offset = Duration::from_micros(micros.abs_diff(self.store_micros));
        if micros >= self.store_micros {
            self.local + offset
        } else {
            self.local.checked_sub(offset).unwrap_or(self.local)
        }
    }
}
