//! `Stream` operators for calling rate-limited remote APIs as fast as they allow, and never
//! faster.
//!
//! A program that calls an ad platform, a cloud control plane or an SMS gateway must stay under
//! the server's limit, or it is throttled, penalised or disconnected; yet every call it holds
//! back needlessly is time lost. The server counts requests in windows of its own, out of phase
//! with the client's clock, so a client that refills a token bucket on its own ticks can put
//! `n + 1` requests into one server window. paceline's combinators state their guarantees in
//! terms a server can check, prove them with property tests in tokio's paused time, and cost
//! less per item than the usual peers.
//!
//! | combinator | output | guarantee |
//! |---|---|---|
//! | [`interval_gate`](PacelineExt::interval_gate)`(min_interval, max_batch)` | `Vec<T>` | two batches never closer than `min_interval`; none later than needed |
//! | [`timer_throttle`](PacelineExt::timer_throttle)`(n, per)` | `T` | at most `n` per timer period (so at most `2n` in any window of `per`) |
//! | [`window_throttle`](PacelineExt::window_throttle)`(n, per)` | `T` | at most `n` in *every* window of length `per` |
//! | [`grouped_within`](PacelineExt::grouped_within)`(n, within)` | `Vec<T>` | a batch at `n` items or `within` after its first, whichever is first |
//!
//! All of them keep upstream order, never lose or duplicate an item, buffer at most their own
//! size argument, flush what they hold when upstream ends and then end at once, and take their
//! time from `tokio::time`. tokio rounds timer deadlines up to the next millisecond, so a
//! combinator may act up to about a millisecond late, never early. No duration makes them (or
//! the gate) panic: a wait longer than a year, such as `Duration::MAX`, is taken as a year.
//!
//! ```
//! use std::time::Duration;
//! use futures::StreamExt;
//! use paceline::prelude::*;
//! use tokio::time::Instant;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! // An SMS gateway allows 2 submissions in any second.
//! let start = Instant::now();
//! let sent: Vec<(u128, &str)> = futures::stream::iter(["a", "b", "c", "d", "e"])
//!     .window_throttle(2, Duration::from_secs(1))
//!     .map(|sms| (start.elapsed().as_millis(), sms))
//!     .collect()
//!     .await;
//! assert_eq!(sent, [(0, "a"), (0, "b"), (1000, "c"), (1000, "d"), (2000, "e")]);
//! # }
//! ```
//!
//! The [`guide`] compares the combinators on timelines, to help choose between them.
//!
//! For calls to a remote API, a [`Gate`] shares one backoff, one in-flight limit and one
//! (adaptive) rate among every caller; [`PacelineExt::throttled_map`] drives a stream through
//! it.
//!
//! # Features
//!
//! | feature | adds |
//! |---|---|
//! | `redis` | `RedisStore`: a gate's backoffs and rate shared by a fleet of processes |
//! | `redis-tls` | `rediss://` for `RedisStore` (rustls on ring), and `RedisTls` for a private CA or a client certificate; `redis-tls-webpki-roots` trusts Mozilla's roots instead of the system's |
//! | `http` | `http`: a classifier for 429 and 503 responses and their `Retry-After`, and a reader of the quota a server announces in its headers |
//! | `reqwest-middleware` | [`reqwest`]: `GateMiddleware`, which paces every request of a `reqwest_middleware` client through a gate (implies `http`) |
//! | `tonic` | `tonic`: a classifier for gRPC's `tonic::Status`, `RESOURCE_EXHAUSTED` and `UNAVAILABLE` with the delay of their `RetryInfo` |
//! | `tower` | `tower`: a `Layer` that sends every request of a tower `Service` through a gate, shared by every clone |
//! | `metrics` | every gate's counters and gauges through the `metrics` facade, labelled by the gate's name, and a `tracing` span per call (see [`metrics`]) |
//!
//! To test a pipeline against a rate-limited API before it meets the real one, the
//! [`paceline-sim`](https://docs.rs/paceline-sim) crate (a dev-dependency) simulates one in
//! paused time: quotas, token buckets, escalating penalties and other clients, with a log of
//! what the server saw; its `http` feature serves it on a loopback port.

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod error;
mod ext;
mod gate;
mod grouped_within;
pub mod guide;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub mod http;
mod interval_gate;
pub mod metrics;
mod pace;
mod paging;
mod rate;
#[cfg(feature = "reqwest-middleware")]
#[cfg_attr(docsrs, doc(cfg(feature = "reqwest-middleware")))]
pub mod reqwest;
mod rng;
mod size_hint;
#[cfg(feature = "redis")]
mod store;
mod time;
mod timer;
mod timer_throttle;
#[cfg(feature = "tonic")]
#[cfg_attr(docsrs, doc(cfg(feature = "tonic")))]
pub mod tonic;
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod tower;
mod window_throttle;

#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use error::StoreError;
pub use error::{ConfigError, Error, Overloaded};
pub use ext::PacelineExt;
pub use gate::{
    Announcement, Budget, CallOptions, Cost, CostOf, Dimension, Gate, GateBuilder, GateStats,
    Jitter, PolicyOf, Priority, Quota, RateLimited, Scope, ScopeLimits, ScopesOf, Settle,
    ThrottledMap, ThrottledMapUnordered, UnitCost, Unscoped, Window,
};
pub use grouped_within::GroupedWithin;
pub use interval_gate::IntervalGate;
pub use paging::{Page, Paged};
pub use rate::RateHandle;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use store::redis::RedisStore;
#[cfg(feature = "redis-tls")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis-tls")))]
pub use store::tls::RedisTls;
pub use timer_throttle::TimerThrottle;
pub use window_throttle::WindowThrottle;

/// Compiles and runs the README's examples as doctests, so that they cannot drift from the
/// API; the README shows them whole, as a user would paste them. Its reqwest example needs
/// the `reqwest-middleware` feature.
#[doc = include_str!("../README.md")]
#[cfg(all(doctest, feature = "reqwest-middleware"))]
pub struct ReadmeDoctests;

/// `use paceline::prelude::*;` brings the extension trait into scope.
pub mod prelude {
    pub use crate::PacelineExt;
}
