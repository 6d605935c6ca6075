//! What a gate tells of itself: its counters and state, as [`Gate::stats`](super::Gate::stats)
//! returns them.

/// A snapshot of a gate's counters and state, from [`Gate::stats`](crate::Gate::stats).
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct GateStats {
    /// Attempts started (retries included).
    pub calls: u64,
    /// Attempts that succeeded.
    pub successes: u64,
    /// Attempts the classifier called rate-limited.
    pub throttles: u64,
    /// Throttled calls tried again.
    pub retries: u64,
    /// Calls given up after the retry limit.
    pub gave_up: u64,
    /// Attempts that failed with an error that is not a throttle.
    pub other_errors: u64,
    /// Call starts that the [store](crate::GateBuilder::store) held back for a backoff another
    /// gate on its namespace began; each waited for the backoff's end, then asked again.
    pub held_by_fleet: u64,
    /// Call starts that went ahead on this gate's own state alone, because the
    /// [store](crate::GateBuilder::store) did not answer in time.
    pub store_unanswered: u64,
    /// Calls turned away as they arrived, the gate's line full
    /// ([`GateBuilder::max_queued`](crate::GateBuilder::max_queued)): each failed with
    /// [`Error::Overloaded`](crate::Error::Overloaded) and made no attempt, so none is
    /// among `calls`.
    pub turned_away: u64,
    /// The current rate in calls per second, if the gate paces calls.
    pub rate: Option<f64>,
    /// When the gate-wide backoff ends, if one is running.
    pub backoff_until: Option<tokio::time::Instant>,
    /// Calls in progress.
    pub in_flight: usize,
    /// Calls waiting to start: every call in the gate's line, whatever holds it (the
    /// in-flight limit, a backoff, the rate, the announced quota), retries included; not
    /// the calls in flight.
    pub queued: usize,
    /// Scopes whose state the gate keeps, with limits per scope
    /// ([`GateBuilder::per_scope`](crate::GateBuilder::per_scope)): those in use, and idle ones
    /// not swept out yet (at most as many again, and 1,024).
    pub scopes_kept: usize,
    /// The live gates of the fleet on the [store](crate::GateBuilder::store)'s namespace,
    /// this one among them, as the store last heard (`None` without a store, or before it
    /// has heard): while the store does not answer, this gate keeps to one such share of
    /// the fleet's limits.
    pub fleet_members: Option<u64>,
}
