//! The longest wait the crate takes, and instants added without overflow.

use std::time::Duration;

use tokio::time::Instant;

/// The longest any wait may be: one year. Longer durations (a `Duration::MAX` interval, a
/// Retry-After of centuries) are taken as this. A year is far beyond any real rate limit's
/// window or penalty, and far from where adding to an `Instant` could overflow.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// `at + by`, with `by` taken as at most [`MAX_WAIT`].
#[inline]
pub(crate) fn after(at: Instant, by: Duration) -> Instant {
    at.checked_add(by.min(MAX_WAIT)).unwrap_or(at)
}
