//! What the gate says aloud, through `tracing`: out of line, so that the log's code stays off
//! every call's path.

use std::time::Duration;

use tokio::time::Instant;

use super::classify::Scope;
use super::core::{Granted, Throttled};

/// Says who waits after a throttle.
#[cold]
#[inline(never)]
pub(super) fn throttled(throttled: &Throttled, now: Instant) {
    let backoff_ms = (throttled.until - now).as_millis() as u64;
    match &throttled.scope {
        None if throttled.extended => tracing::warn!(
            target: "paceline::gate",
            backoff_ms,
            "rate-limited: every call through the gate waits"
        ),
        None => {}
        Some(scope) => tracing::warn!(
            target: "paceline::gate",
            scope = scope.as_str(),
            backoff_ms,
            "rate-limited: calls in this scope wait"
        ),
    }
}

/// Says that calls resume, if `granted` is the first start after a gate-wide backoff.
#[inline]
pub(super) fn if_resumed(granted: &Granted) {
    if let Some(end) = granted.resumed_after {
        resumed(granted.sent.at.unwrap_or(end) - end);
    }
}

/// Says that calls resume, `late` after the gate-wide backoff ended.
#[cold]
#[inline(never)]
fn resumed(late: Duration) {
    let ended_ms_ago = late.as_millis() as u64;
    tracing::info!(target: "paceline::gate", ended_ms_ago, "backoff ended; calls resume");
}

/// Says that the fleet backs off (`scope`, or the whole gate) for `length`.
#[cold]
#[inline(never)]
pub(super) fn fleet_backs_off(scope: Option<&Scope>, length: Duration) {
    tracing::debug!(
        target: "paceline::gate",
        scope = scope.map(Scope::as_str),
        backoff_ms = length.as_millis() as u64,
        "the fleet is backing off: calls wait"
    );
}

/// Says what share of the fleet's limits this process keeps to: `weight` is 1 when the
/// fleet's store answers again, else the fleet's live members, each taking one share.
#[cold]
#[inline(never)]
pub(super) fn fleet_share(weight: u64) {
    match weight {
        1 => tracing::info!(
            target: "paceline::gate",
            "the fleet's store answers: starts count once again"
        ),
        members => tracing::info!(
            target: "paceline::gate",
            members,
            "the fleet's store does not answer: this process keeps to its share of the \
             fleet's limits, one of its live members'"
        ),
    }
}
