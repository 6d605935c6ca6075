use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use futures_core::stream::{FusedStream, Stream};
use futures_util::stream::{Fuse, StreamExt as _};
use pin_project::pin_project;
use tokio::time::Instant;

use crate::pace::Vouchers;
use crate::rate::{Rate, RateHandle, RateSource};
use crate::timer::Timer;

/// Stream for [`PacelineExt::timer_throttle`](crate::PacelineExt::timer_throttle): `n`
/// vouchers per timer period.
#[must_use = "streams do nothing unless polled"]
#[pin_project]
pub struct TimerThrottle<St> {
    #[pin]
    upstream: Fuse<St>,
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
            vouchers: Vouchers::new(),
            rate: RateSource::new(Rate::new(n, per)),
            timer: Timer::default(),
        }
    }

    /// A handle that changes this throttle's rate while it runs; see [`RateHandle`].
    pub fn rate_handle(&mut self) -> RateHandle {
        self.rate.handle()
    }

    /// The upstream. The throttle buffers nothing, so nothing is lost.
    pub fn into_inner(self) -> St {
        self.upstream.into_inner()
    }

    /// The upstream.
    pub fn get_ref(&self) -> &St {
        self.upstream.get_ref()
    }
}

impl<St: Stream> Stream for TimerThrottle<St> {
    type Item = St::Item;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        let running = loop {
            // The timer firing is the cheap sign that the period ended; while it has not, the
            // period runs and no clock is read. Once it has, the clock confirms it.
            let running = match this.vouchers.period_end() {
                None => false,
                Some(_) if !this.timer.is_elapsed() => true,
                Some(_) => this.vouchers.is_running(Instant::now()),
            };
            match this.vouchers.period_end() {
                Some(end) if running && this.vouchers.is_spent() => {
                    ready!(this.timer.poll_until(end, cx));
                }
                _ => break running,
            }
        };
        // Pull only once a voucher is certain: nothing is held, so nothing is lost on drop.
        let item = ready!(this.upstream.as_mut().poll_next(cx));
        if item.is_some() {
            if running {
                let spent = this.vouchers.spend();
                debug_assert!(spent, "a voucher was left before the pull");
            } else {
                let rate = this.rate.current();
                this.vouchers.start_period(Instant::now(), rate);
                let end = this.vouchers.period_end().expect("a period just started");
                this.timer.arm(end);
            }
        }
        Poll::Ready(item)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.upstream.size_hint()
    }
}

impl<St: Stream> FusedStream for TimerThrottle<St> {
    fn is_terminated(&self) -> bool {
        self.upstream.is_done()
    }
}

impl<St: fmt::Debug> fmt::Debug for TimerThrottle<St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimerThrottle")
            .field("upstream", &self.upstream)
            .field("vouchers", &self.vouchers)
            .field("rate", &self.rate)
            .finish_non_exhaustive()
    }
}
