//! A simulated rate-limited API, to test a client against, in tokio's paused time: the
//! test companion of [paceline](https://docs.rs/paceline), as tokio-test is tokio's. Add it as
//! a dev-dependency; it depends on no part of paceline, so it can test any client.
//!
//! A [`Server`] models the remote side of a rate-limited API: a [`Policy`] per server and
//! optionally per scope (a fixed-window quota or a token bucket whose rate may follow a
//! schedule, an escalating penalty, Retry-After on or off, exact or [rounded](Rounding) to
//! whole seconds, [other clients](OtherClients)
//! sharing the capacity), and the network's latency each way, with optional seeded jitter.
//! [`Server::call`] is the caller's side of one request: it resolves to [`Accepted`] or to a
//! [`Rejected`] error, as an HTTP 429 would. The server records every request it saw, with
//! the caller's and the server's instants, in a [`Log`] whose analyses state what the server
//! would hold against the client: requests inside a penalty, requests sent while a penalty
//! was known to run, the most requests in any window.
//!
//! Everything runs on `tokio::time` and needs no background task: the server judges requests
//! (and works out other clients' arrivals) when a call arrives or the log is read. Under
//! paused time (`#[tokio::test(start_paused = true)]`) a test of minutes of traffic runs in
//! milliseconds, and the same calls with the same [seed](ServerBuilder::seed) give the same
//! log.
//!
//! # Testing your own pipeline
//!
//! Build the server inside a paused-time test, make your code call [`Server::call`] where it
//! would call the real API (for instance behind a trait your client is generic over, or a
//! closure it takes), run it, then assert on [`Server::log`]. The example below checks that a
//! pipeline that spaces its calls with paceline's `window_throttle` never exceeds a quota of 5
//! requests
//! per second, in windows whose phase the client does not know, while one that does not
//! space them is turned away:
//!
//! ```
//! use std::time::Duration;
//! use futures::StreamExt;
//! use paceline::prelude::*;
//! use paceline_sim::{Policy, Server, Which};
//!
//! const SEC: Duration = Duration::from_secs(1);
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let quota = Policy::fixed_window(5, SEC).phase(Duration::from_millis(300));
//!
//! // Paced: 20 calls, at most 5 in any second, up to 20 in flight.
//! let api = Server::builder().global(quota.clone()).build();
//! let answers: Vec<_> = futures::stream::iter(0..20)
//!     .window_throttle(5, SEC)
//!     .map(|_| api.call(None))
//!     .buffered(20)
//!     .collect()
//!     .await;
//! assert!(answers.iter().all(Result::is_ok));
//! let log = api.log();
//! assert_eq!(log.max_in_window(SEC, Which::OursArrived), 5);
//! assert_eq!(log.over_limit(SEC, 5, Which::OursArrived), 0);
//!
//! // Unpaced: all 20 at once; the first window takes 5, the other 15 are throttled.
//! let api = Server::builder().global(quota).build();
//! let calls = (0..20).map(|_| api.call(None));
//! let answers = futures::future::join_all(calls).await;
//! assert_eq!(answers.iter().filter(|a| a.is_err()).count(), 15);
//! let log = api.log();
//! assert_eq!((log.accepted(), log.rejected()), (5, 15));
//! // Each was told to come back when the server's window ends, 300 ms after its start.
//! assert_eq!(log.ours().last().unwrap().retry_after, Some(Duration::from_millis(250)));
//! # }
//! ```
//!
//! A penalty scenario, Google Ads style: 15 s, doubling for every request inside it, up to
//! 15 minutes. A client that retries at once is punished for longer and longer; the log shows
//! how many of its requests went into a penalty it already knew about:
//!
//! ```
//! use std::time::Duration;
//! use paceline_sim::{Policy, Server};
//!
//! const SEC: Duration = Duration::from_secs(1);
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let api = Server::builder()
//!     .global(Policy::token_bucket(1.0, 1).penalty(15 * SEC, 900 * SEC))
//!     .build();
//! // A careless client: calls again as soon as each answer comes back, throttled or not.
//! for _ in 0..5 {
//!     let _ = api.call(None).await;
//! }
//! let log = api.log();
//! let retry_after: Vec<_> = log.ours().map(|r| r.retry_after.map(|d| d.as_secs())).collect();
//! // The first is accepted, the second starts the penalty, then it doubles.
//! assert_eq!(retry_after, [None, Some(15), Some(30), Some(60), Some(120)]);
//! assert_eq!(log.in_penalty(), 3);
//! assert_eq!(log.sent_into_known_penalty(), 3);
//! # }
//! ```
//!
//! # Announcing the quota
//!
//! Many real APIs tell the client, on every response, how many requests it has left and when
//! that count resets. A policy does too when [told to](Policy::announce_quota): every answer
//! then carries an [`Announced`] quota ([`Accepted::quota`], [`Rejected::quota`], and per
//! policy in `quotas`), so that a client that paces itself from these numbers can be tested.
//! They are exact for a fixed window and follow a stated mapping for a token bucket (see
//! [`Announced`]):
//!
//! ```
//! use std::time::Duration;
//! use paceline_sim::{Policy, Server};
//!
//! const SEC: Duration = Duration::from_secs(1);
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let api = Server::builder()
//!     .global(Policy::fixed_window(3, 10 * SEC).announce_quota(true))
//!     .build();
//! let mut remaining = Vec::new();
//! for _ in 0..4 {
//!     let quota = match api.call(None).await {
//!         Ok(accepted) => accepted.quota,
//!         Err(rejected) => rejected.quota,
//!     };
//!     remaining.push(quota.unwrap().remaining);
//! }
//! assert_eq!(remaining, [2, 1, 0, 0]);
//! # }
//! ```
//!
//! # Over HTTP
//!
//! With the `http` feature, [`http::serve`] puts a server on a loopback port, for clients
//! that speak HTTP (reqwest, hyper): 429 with `Retry-After` for a rejected request, and the
//! announced quota, if any, in header fields of the [dialect](http::Dialect) you choose (the
//! IETF draft's `RateLimit-Policy` and `RateLimit`, the older `RateLimit-*`, or
//! `X-RateLimit-*`).
//!
//! # A server far away
//!
//! With the `slow-link` feature, [`SlowLink`] puts any TCP server (a Redis your fleet shares,
//! say) some milliseconds away from its clients: a proxy on a loopback port that holds every
//! byte a while each way.
//!
//! The analyses say exactly what they count (ours or everyone's, accepted or all arrivals);
//! see [`Log`]. Instants in the log are `tokio::time::Instant`s; [`Log::start`] is the
//! server's start, to turn them into offsets.

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod announce;
mod answer;
mod fixed_window;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub mod http;
mod llm;
mod log;
mod others;
mod penalty;
mod policy;
mod rng;
mod server;
#[cfg(feature = "slow-link")]
mod slow_link;
mod token_bucket;
pub mod written;

pub use announce::Announced;
pub use answer::{Accepted, Rejected};
pub use llm::{Completion, Llm, LlmBuilder, LlmDialect, RefusedCompletion};
pub use log::{Limit, Log, Outcome, Request, Which};
pub use policy::{OtherClients, Policy, Rounding};
pub use server::{Server, ServerBuilder};
#[cfg(feature = "slow-link")]
#[cfg_attr(docsrs, doc(cfg(feature = "slow-link")))]
pub use slow_link::SlowLink;
