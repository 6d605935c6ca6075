//! The stream combinators (`interval_gate`, `timer_throttle`, `window_throttle`,
//! `grouped_within`): exact scenarios for each in paused time, property tests against a
//! reference model of their rules, and the auto traits of every public type.

#[path = "../support/mod.rs"]
mod support;

mod auto_traits;
mod grouped_within;
mod interval_gate;
mod proptests;
mod timer_throttle;
mod window_throttle;
