//! The one tokio timer each combinator owns.
//!
//! Made at first use, so that a combinator can be built outside a runtime, and reset in place
//! afterwards, so that no `Sleep` is allocated per item or per batch.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep, sleep_until};

/// How close to its deadline [`Timer::poll_until_precise`] stops sleeping and starts yielding.
///
/// tokio rounds a deadline up to the next millisecond tick and the OS adds its own wake-up
/// latency, so a coarse sleep aimed this far ahead of the deadline wakes before it.
pub(crate) const PRECISE_SPIN: Duration = Duration::from_micros(1_500);

#[derive(Debug, Default)]
pub(crate) struct Timer {
    sleep: Option<Pin<Box<Sleep>>>,
}

impl Timer {
    /// Arms the timer for `deadline` (resetting it only if it was armed for another instant).
    ///
    /// Once armed, [`Timer::is_elapsed`] turns true when the runtime's timer passes `deadline`,
    /// whether or not the timer is polled.
    pub(crate) fn arm(&mut self, deadline: Instant) -> Pin<&mut Sleep> {
        match &mut self.sleep {
            Some(sleep) => {
                if sleep.deadline() != deadline {
                    sleep.as_mut().reset(deadline);
                }
            }
            None => {
                let mut sleep = Box::pin(sleep_until(deadline));
                // `reset` registers the timer at once, which `is_elapsed` relies on.
                sleep.as_mut().reset(deadline);
                self.sleep = Some(sleep);
            }
        }
        self.sleep.as_mut().expect("armed above").as_mut()
    }

    /// Whether the armed deadline has passed, as the runtime's timer saw it: a cheap check
    /// that reads no clock.
    #[inline]
    pub(crate) fn is_elapsed(&self) -> bool {
        self.sleep.as_ref().is_some_and(|sleep| sleep.is_elapsed())
    }

    /// Ready once `deadline` has passed; otherwise registers a wake-up for it.
    ///
    /// tokio's timer fires on millisecond ticks, rounding up, so this is never early and at
    /// most about a millisecond late.
    pub(crate) fn poll_until(&mut self, deadline: Instant, cx: &mut Context<'_>) -> Poll<()> {
        self.arm(deadline).poll(cx)
    }
}

/// A [`Timer`] that can finish the last stretch before a deadline by yielding: only
/// [`IntervalGate`](crate::IntervalGate)'s precise mode needs it, so the clock reading it keeps
/// is not carried by every other timer (each call through a gate has one).
#[derive(Debug, Default)]
pub(crate) struct PreciseTimer {
    timer: Timer,
    /// The clock reading of the last precise yield, to notice a clock that does not move.
    last_spin: Option<Instant>,
}

impl PreciseTimer {
    /// [`Timer::poll_until`].
    pub(crate) fn poll_until(&mut self, deadline: Instant, cx: &mut Context<'_>) -> Poll<()> {
        self.timer.poll_until(deadline, cx)
    }

    /// Like [`Timer::poll_until`], but finishes the last stretch before `deadline` by yielding
    /// to the scheduler instead of sleeping, so the wake-up is not rounded up to the next
    /// millisecond tick. Never early: it returns `Ready` only once the clock reads `deadline`
    /// or later.
    ///
    /// The cost is CPU time: the task is polled again and again for up to [`PRECISE_SPIN`]
    /// before each deadline. If the clock does not move between two such polls (tokio's
    /// paused clock in tests), yielding cannot help and it falls back to the timer.
    pub(crate) fn poll_until_precise(
        &mut self,
        deadline: Instant,
        cx: &mut Context<'_>,
    ) -> Poll<()> {
        let now = Instant::now();
        if now >= deadline {
            self.last_spin = None;
            return Poll::Ready(());
        }
        if deadline - now > PRECISE_SPIN {
            // The coarse part: sleep until shortly before the deadline.
            self.last_spin = None;
            if self
                .timer
                .poll_until(deadline - PRECISE_SPIN, cx)
                .is_pending()
            {
                return Poll::Pending;
            }
        }
        if self.last_spin == Some(now) {
            // The clock stood still across a yield: only the timer can move it on.
            return self.timer.poll_until(deadline, cx);
        }
        self.last_spin = Some(now);
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}
