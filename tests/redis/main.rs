//! The gate's shared state in a real Redis: a single `redis-server`, a cluster, TLS with ACL
//! users, and a fleet of worker processes sharing one limit through it. All in real time.

#[path = "../support/mod.rs"]
mod support;

#[cfg(all(feature = "redis", feature = "http"))]
mod announced_fleet;
#[cfg(all(feature = "redis", feature = "http"))]
mod fleet;
#[cfg(feature = "redis")]
mod redis_cluster;
#[cfg(feature = "redis")]
mod redis_store;
#[cfg(feature = "redis-tls")]
mod redis_tls;
#[cfg(all(feature = "redis", feature = "http"))]
mod scoped_fleet;
#[cfg(all(feature = "redis", feature = "http"))]
mod small_window_fleet;
