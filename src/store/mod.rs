//! Where a gate's shared state lives beyond the process. The in-process core (`gate/core.rs`)
//! is always there and decides alone by default; a store adds what the other processes of a
//! fleet did: their backoffs, their share of the rate budget, the rate they found together.
//!
//! The gate owns the trait a store speaks ([`FleetStore`], in `gate/fleet.rs`, which also
//! holds the gate's side of the talk); the store implements it and depends on the gate, never
//! the reverse.

#[cfg(test)]
mod agree;
mod connection;
mod member;
pub(crate) mod redis;
#[cfg(feature = "redis-tls")]
pub(crate) mod tls;
