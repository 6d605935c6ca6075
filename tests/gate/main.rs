//! The gate: its slots, backoffs, retries and order, deadlines, costs, announced quotas and
//! paging in paused time; the scenarios against the simulated API and their pictures; its
//! metrics; and, in real time, a backoff's end against nginx's token bucket (the herd), and
//! limits per account beside a global one against nginx's buckets.

#[path = "../support/mod.rs"]
mod support;

mod bounded_line;
mod cost;
mod deadline;
mod dimensions;
mod fair_turns;
mod found_rate;
mod gate;
#[cfg(feature = "http")]
mod herd;
#[cfg(feature = "http")]
mod llm;
#[cfg(feature = "metrics")]
mod metrics;
mod paging;
mod per_account;
#[cfg(feature = "http")]
mod per_account_nginx;
mod plots;
mod quota;
mod runtime_limits;
mod scenarios;
mod scope_limits;
