//! Choosing a combinator: how each one behaves on the same burst.
//!
//! Seven requests arrive at once (t = 0) and the server allows 3 per second. Each timeline
//! shows when the combinator lets them go (`x` = one item, `[..]` = one batch).
//!
//! ```text
//! t (s)                     0         1         2
//! interval_gate(1 s, 3)     [xxx]     [xxx]     [x]       batches, ≥ 1 s apart
//! timer_throttle(3, 1 s)    xxx       xxx       x         3 vouchers per timer period
//! window_throttle(3, 1 s)   xxx       xxx       x         ≤ 3 in every 1 s window
//! grouped_within(3, 1 s)    [xxx][xxx][x]                 full batches go at once
//! ```
//!
//! On a burst they look alike. They differ when items trickle in:
//!
//! ```text
//! arrivals (s)              0    0.9  1.0  1.1
//! timer_throttle(2, 1 s)    0    0.9  1.0  1.1     periods [0, 1) and [1, 2): 3 sends within 0.2 s
//! window_throttle(2, 1 s)   0    0.9  1.0  1.9     never 3 in any 1 s window
//! interval_gate(0.5 s, 1)   0    0.9  1.4  1.9     never closer than 0.5 s
//! ```
//!
//! - **[`window_throttle`](crate::PacelineExt::window_throttle)** when the server's limit is
//!   "n per window" and it counts in windows of its own phase: the only one of the three that
//!   a server can never catch with `n + 1` in a window. Memory grows with `n`.
//! - **[`interval_gate`](crate::PacelineExt::interval_gate)** when the server wants requests
//!   spaced out (per-connection SMS binds, APIs that punish bursts), or when calls can be
//!   batched: one batch per interval carries up to `max_batch` items. Spacing is measured from
//!   the actual last send, so it cannot be skewed by the client's clock. `precise()` removes
//!   tokio's millisecond rounding at a small CPU cost.
//! - **[`timer_throttle`](crate::PacelineExt::timer_throttle)** when a limit is per period of
//!   the client's own (a budget of n per minute, refilled each minute) and bursts of up to `2n`
//!   across a period's end are acceptable. It is the cheapest: an item within the budget costs
//!   no clock read.
//! - **[`grouped_within`](crate::PacelineExt::grouped_within)** is not a limiter but a
//!   batcher: it bounds how long an item waits for company, for bulk endpoints.
//!
//! Combine them: `grouped_within` then `window_throttle` sends bulk requests of up to `n` items
//! with at most `k` requests per window.
//!
//! # Calls to a remote API: the gate
//!
//! The combinators above pace a stream by a limit the program knows. A [`Gate`](crate::Gate)
//! is for calls whose limit the server enforces and may announce only by refusing them. One
//! gate stands for one limit (one API host, one developer token: whatever the server counts
//! by) and is shared, by cloning it, by every task and stream that calls through it:
//!
//! ```text
//! task A ──┐                          ┌─ call ─ 429 ─┐ backoff: nobody starts ┌─ retry ─ ok
//! task B ──┼── line (retries, ─────► │  call ─── ok  │                       ├─ B's next ─ ok
//! stream ──┘   scopes in turn)        └─ call ─── ok  └───────────────────────┘
//!             in-flight limit, rate                    until Retry-After, or 2^k x base
//! ```
//!
//! - **What starts a call**: the gate lets a waiting call start when it is first in line
//!   (retries first; then by [`Priority`](crate::Priority), each lower one keeping a share of
//!   starts; then scope by scope in turn, each scope's calls in the order they came: see
//!   [`Gate::call_in`](crate::Gate::call_in)), a slot of `max_in_flight` is free, no backoff holds it (the gate-wide one, or one of its own
//!   [scopes](crate::Scope)), the [rate](crate::GateBuilder::rate), if set, allows it, and
//!   so does the quota the server announced, if it did ([`Gate::observe`](crate::Gate::observe)):
//!   what is left, spread evenly until the server's reset. A call may cost several units of
//!   the rate and the quota, and may say by when it must start
//!   ([`CallOptions`](crate::CallOptions)); one that the gate knows cannot start in time
//!   fails at once.
//! - **Limits of each scope under the gate's**: with
//!   [`per_scope`](crate::GateBuilder::per_scope), each scope (an account, a tenant, a model)
//!   has its own rate, in-flight limit, adaptive rate or announced quota
//!   ([`Gate::observe_in`](crate::Gate::observe_in)) as well, and a call starts only when it
//!   fits each. A waiter its own scope holds back steps out of the line, with the calls of
//!   its scope behind it, until that hold ends; the other scopes' calls go on meanwhile.
//! - **When more comes than the API takes**: the line is unbounded unless
//!   [`max_queued`](crate::GateBuilder::max_queued) bounds it; then a call that finds the
//!   line full fails at once ([`Error::Overloaded`](crate::Error::Overloaded)) and is never
//!   made, and a call let in is never turned away later. The in-flight limit and the rate
//!   can be changed while the gate runs ([`Gate::set_max_in_flight`](crate::Gate::set_max_in_flight),
//!   [`Gate::set_rate`](crate::Gate::set_rate)), and calls already waiting see the change.
//! - **What a throttle does**: the classifier given to [`Gate::builder`](crate::Gate::builder)
//!   says which errors mean "rate-limited" ([`RateLimited`](crate::RateLimited)). The first such
//!   answer begins a backoff that every caller honours at once; calls already in flight finish;
//!   the throttled call is tried again first when the backoff ends, up to the retry limit,
//!   and the others come back gradually: the in-flight limit grows from one back to full over
//!   as long as the backoff lasted, so that the first throttle of a server whose bucket is
//!   not yet full again stops the wave after one call. Other errors reach their caller at
//!   once. No wait is ever longer than a year, whatever the
//!   server or the classifier says.
//! - **An unknown limit**: with [`adaptive`](crate::GateBuilder::adaptive), the gate cuts its
//!   rate on a throttle and grows it back per second of success, settling just under the rate
//!   that failed.
//! - **Three ways in**: [`Gate::call`](crate::Gate::call) for one call,
//!   [`throttled_map`](crate::PacelineExt::throttled_map) (and its unordered variant) for a
//!   stream of items, [`Gate::paged`](crate::Gate::paged) for a paged listing. All three make
//!   their attempts the same way, so they behave alike.
//!
//! # Choosing `rate` from a stated limit
//!
//! An API documents "N requests per window": 100 per 10 s is 10 a second. A gate whose
//! [rate](crate::GateBuilder::rate) is exactly that has no slack. It spaces starts exactly
//! one interval apart at the client, but the server counts arrivals, in windows of its own:
//! one call that starts or travels a little late lands beside the next one, the server counts
//! one too many, and its 429 holds back every caller for a full Retry-After, far longer than
//! a margin would have cost. So, from the stated limit:
//!
//! - **Leave a margin**, 5–10 % under it: `rate(9.0)` for a stated 10 a second. The margin
//!   is all it costs.
//! - **Read the announced quota**, where the server sends one on its responses
//!   ([`Gate::observe`](crate::Gate::observe); with the `http` feature, `paceline::http::quota`
//!   reads the headers): the gate then spends what the server says is left, spread evenly
//!   until its reset, keeping a reserve. Set no rate, or the stated one as a ceiling.
//! - **Adapt, starting from it**: [`adaptive`](crate::GateBuilder::adaptive) with the stated
//!   limit as both the starting rate and the ceiling. A throttle cuts the rate, and it settles
//!   just under what the server really allows, which is less than stated when other clients
//!   share the limit.
//!
//! ```
//! use paceline::{Gate, RateLimited};
//!
//! // The API states "100 requests per 10 s": 10 a second.
//! let classify = |status: &u16| (*status == 429).then(RateLimited::new);
//!
//! // A margin of 10 %.
//! let with_margin = Gate::builder(classify).rate(9.0).build().unwrap();
//!
//! // Adaptive, from the stated limit, never above it, never below 1 a second.
//! let adaptive = Gate::builder(classify).rate(10.0).adaptive(1.0, 10.0).build().unwrap();
//!
//! assert_eq!(with_margin.stats().rate, Some(9.0));
//! assert_eq!(adaptive.stats().rate, Some(10.0));
//! ```
//!
//! # A fleet of processes: the store
//!
//! Workers on several machines that call one API share its limit. With the `redis` feature,
//! [`GateBuilder::store`](crate::GateBuilder::store) keeps what they must share in Redis:
//!
//! | in Redis, shared by the fleet | in each process |
//! |---|---|
//! | the gate-wide and scoped backoffs | the line of waiting calls and the in-flight limit |
//! | the rate budget (one start per interval, fleet-wide) | retries and their count |
//! | the adaptive rate, versioned | the counters of [`Gate::stats`](crate::Gate::stats) |
//! | the announced quota and the told budgets | a scope's announced quota |
//! | the live gates (a heartbeat each) | the slots it leased |
//!
//! Every instant in Redis comes from the Redis server's clock, so a worker whose clock is off
//! cannot shorten a backoff for the others. A call start asks Redis once, or takes a slot its
//! gate leased for the calls waiting in its line; if Redis does not answer in time, the gate
//! goes on with its own state, keeping to its share of the fleet's limits (one of its live
//! gates'), and asks again a little later, so an outage slows nothing down, loses nothing,
//! and keeps the fleet's limits (see [`RedisStore`](crate::RedisStore#when-redis-fails)).
