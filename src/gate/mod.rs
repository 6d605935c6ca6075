//! The gate for calls to one remote API: an in-flight limit, a backoff shared by every caller,
//! an optional (adaptive) rate, and retries of throttled calls.
//!
//! One call's path, file by file:
//! 1. `handle.rs`: [`Gate::call`] and its kin (with the scopes, cost and deadline of
//!    `options.rs`), like `map.rs`'s streams, `paging.rs` and the tower and reqwest
//!    front-ends, hand each call to `call.rs`.
//! 2. `call.rs`: a call first arrives ([`Arrival`](call::Arrival)): it tells `state.rs`, and
//!    starts, takes its place in line, or is refused (the line is full, or it cannot start
//!    by its deadline) before its future is made. A [`Call`](call::Call) is one attempt: it
//!    waits in line (its waker parked there) or on its timer until the state lets it start,
//!    runs the user's future, and tells the state how it ended (`ended.rs`: what the call's
//!    front-end receives). Throttled, it hands its front-end what the next attempt carries.
//!    A first attempt that nothing holds goes out in the caller's own future (`unheld.rs`).
//! 3. `state.rs`: the gate's shared state behind its one lock; every change is one method
//!    there, which asks the pure core and wakes the next waiter. While nothing could hold a
//!    call, it lends its free slots (`loan.rs`): a call without a rate that nothing holds
//!    takes one and gives it back without the lock, and every acquisition takes them back.
//! 4. `core.rs`: the pure decisions. May a call start now, or not before when and why, or is
//!    it turned away (the line of `line.rs` and its bound, the in-flight limit and its
//!    gradual resume after a backoff from `ramp.rs`, a backoff, the rate, the server's
//!    announced quota from `budget.rs`, the limits of the call's scopes from `scopes.rs`);
//!    what an attempt's end changes (the backoff from `backoff.rs`, the rate from
//!    `adaptive.rs`, retry or give up); a limit changed while the gate runs. A waiter that
//!    its own scopes hold back steps out of the line until the hold ends, so that the calls
//!    behind it go on.
//! 5. `fleet.rs`, with a store only: the trait a store speaks, and the clearing of a started
//!    call by the store (the fleet's backoffs and rate budget); `store/` implements it.

mod adaptive;
pub(crate) mod answering;
mod backoff;
mod backoffs;
pub(crate) mod budget;
mod builder;
pub(crate) mod call;
pub(crate) mod classify;
pub(crate) mod core;
mod counter;
pub(crate) mod dimensions;
pub(crate) mod ended;
// Only the `redis` feature brings a store for a fleet to speak to.
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) mod fleet;
mod handle;
mod line;
mod loan;
mod map;
pub(crate) mod options;
mod pace;
pub(crate) mod partitions;
mod quota;
mod ramp;
mod say;
mod scopes;
pub(crate) mod settle;
pub(crate) mod state;
mod stats;
mod unheld;
mod window_kind;

pub use self::backoff::Jitter;
pub use self::builder::GateBuilder;
pub use self::classify::{RateLimited, Scope};
pub use self::dimensions::{Budget, Cost};
pub use self::handle::Gate;
pub use self::map::{CostOf, ScopesOf, ThrottledMap, ThrottledMapUnordered, UnitCost, Unscoped};
pub use self::options::{CallOptions, Priority};
pub use self::partitions::PolicyOf;
pub use self::quota::{Announcement, Dimension, Quota, Window};
pub use self::scopes::ScopeLimits;
pub use self::settle::Settle;
pub use self::stats::GateStats;
