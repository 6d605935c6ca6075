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
