use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use futures_core::stream::{FusedStream, Stream};
use futures_util::stream::{Fuse, StreamExt as _};
use pin_project::pin_project;
use tokio::time::Instant;

use crate::pace::{Admit, Vouchers};
use crate::rate::{Rate, RateHandle, RateSource};
use crate::size_hint::held_size_hint;
use crate::timer::Timer;

/// Stream for [`PacelineExt::timer_throttle`](crate::PacelineExt::timer_throttle): `n`
/// vouchers per timer period.
#[must_use = "streams do nothing unless polled"]
#[pin_project]
pub struct TimerThrottle<St: Stream> {
    #[pin]
    upstream: Fuse<St>,
    /// An item pulled while the vouchers were spent, waiting for the period's end.
    held: Option<St::Item>,
    vouchers: Vouchers,
    rate: RateSource,
    /// Armed for the end of the running period; idle (never re-armed) between periods.
    timer: Timer,
}

impl<St: Stream> TimerThrottle<St> {
    #[track_caller]
    pub(crate) fn new(upstream: St, n: usize, per: Duration) -> Self {
        Self {
            upstream: upstream.fuse(),
            held: None,
            vouchers: Vouchers::new(),
            rate: RateSource::new(Rate::new(n, per)),
            timer: Timer::default(),
        }
    }

    /// A handle that changes this throttle's rate while it runs; see [`RateHandle`].
    pub fn rate_handle(&mut self) -> RateHandle {
        self.rate.handle()
    }

    /// The upstream and the item held back for the next period, if any.
    pub fn into_parts(self) -> (St, Option<St::Item>) {
        (self.upstream.into_inner(), self.held)
    }

    /// The upstream.
    pub fn get_ref(&self) -> &St {
        self.upstream.get_ref()
    }

    #[cold]
    #[inline(never)]
    fn poll_slow(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<St::Item>> {
        let mut this = self.project();
        loop {
            // Pull even while the vouchers are spent: the end of upstream is then seen at once,
            // and the timer is polled only when an item really waits for it.
            let item = match this.held.take() {
                Some(item) => item,
                None => match ready!(this.upstream.as_mut().poll_next(cx)) {
                    Some(item) => item,
                    None => return Poll::Ready(None),
                },
            };
            // The timer firing is the cheap sign that the period may have ended; while it has
            // not, the period runs and no clock is read.
            let may_have_ended = this.timer.is_elapsed();
            let rate = &mut *this.rate;
            match this
                .vouchers
                .admit(may_have_ended, Instant::now, || rate.current())
            {
                Admit::Opened(end) => {
                    this.timer.arm(end);
                    return Poll::Ready(Some(item));
                }
                Admit::Spent => return Poll::Ready(Some(item)),
                Admit::Wait(end) => {
                    *this.held = Some(item);
                    ready!(this.timer.poll_until(end, cx));
                }
            }
        }
    }
}

impl<St: Stream> Stream for TimerThrottle<St> {
    type Item = St::Item;

    #[inline]
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        // The fast path, small enough to inline into the caller's loop: a period is running
        // (its timer has not fired) and a voucher is left. Everything else is `poll_slow`.
        let this = self.as_mut().project();
        if this.held.is_none() && this.vouchers.has_period() && !this.timer.is_elapsed() {
            let Some(item) = ready!(this.upstream.poll_next(cx)) else {
                return Poll::Ready(None);
            };
            // The period runs (its timer has not fired): no clock is read.
            let rate = this.rate;
            if let Admit::Spent = this.vouchers.admit(false, Instant::now, || rate.current()) {
                return Poll::Ready(Some(item));
            }
            *this.held = Some(item);
        }
        self.poll_slow(cx)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        held_size_hint(self.held.is_some(), self.upstream.size_hint())
    }
}

impl<St: Stream> FusedStream for TimerThrottle<St> {
    fn is_terminated(&self) -> bool {
        self.upstream.is_done() && self.held.is_none()
    }
}

impl<St: Stream + fmt::Debug> fmt::Debug for TimerThrottle<St>
where
    St::Item: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimerThrottle")
            .field("upstream", &self.upstream)
            .field("held", &self.held)
            .field("vouchers", &self.vouchers)
            .field("rate", &self.rate)
            .finish_non_exhaustive()
    }
}
