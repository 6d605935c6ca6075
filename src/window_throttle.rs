use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use futures_core::stream::{FusedStream, Stream};
use futures_util::stream::{Fuse, StreamExt as _};
use pin_project::pin_project;
use tokio::time::Instant;

use crate::pace::SlidingWindow;
use crate::rate::{Rate, RateHandle, RateSource};
use crate::size_hint::held_size_hint;
use crate::timer::Timer;

/// Stream for [`PacelineExt::window_throttle`](crate::PacelineExt::window_throttle): at most
/// `n` items in every window of length `per`.
#[must_use = "streams do nothing unless polled"]
#[pin_project]
pub struct WindowThrottle<St: Stream> {
    #[pin]
    upstream: Fuse<St>,
    /// An item pulled while the window was full, waiting for room.
    held: Option<St::Item>,
    window: SlidingWindow,
    rate: RateSource,
    timer: Timer,
}

impl<St: Stream> WindowThrottle<St> {
    #[track_caller]
    pub(crate) fn new(upstream: St, n: usize, per: Duration) -> Self {
        Self {
            upstream: upstream.fuse(),
            held: None,
            window: SlidingWindow::new(),
            rate: RateSource::new(Rate::new(n, per)),
            timer: Timer::default(),
        }
    }

    /// A handle that changes this throttle's rate while it runs; see [`RateHandle`].
    pub fn rate_handle(&mut self) -> RateHandle {
        self.rate.handle()
    }

    /// The upstream and the item held back for room in the window, if any.
    pub fn into_parts(self) -> (St, Option<St::Item>) {
        (self.upstream.into_inner(), self.held)
    }

    /// The upstream.
    pub fn get_ref(&self) -> &St {
        self.upstream.get_ref()
    }
}

impl<St: Stream> Stream for WindowThrottle<St> {
    type Item = St::Item;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        // Pull even while the window is full: the end of upstream is then seen at once, and
        // the timer is polled only when an item really waits for it.
        if this.held.is_none() {
            match ready!(this.upstream.as_mut().poll_next(cx)) {
                Some(item) => *this.held = Some(item),
                None => return Poll::Ready(None),
            }
        }
        let (now, rate) = loop {
            // Read in the loop: a handle may change the rate while the item waits.
            let rate = this.rate.current();
            let now = Instant::now();
            match this.window.not_before(rate) {
                // Loop rather than trust the timer: whatever the runtime does, never early.
                Some(deadline) if now < deadline => {
                    this.rate.wake_on_change(cx.waker());
                    ready!(this.timer.poll_until(deadline, cx));
                }
                _ => break (now, rate),
            }
        };
        this.window.record(now, rate);
        Poll::Ready(this.held.take())
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        held_size_hint(self.held.is_some(), self.upstream.size_hint())
    }
}

impl<St: Stream> FusedStream for WindowThrottle<St> {
    fn is_terminated(&self) -> bool {
        self.upstream.is_done() && self.held.is_none()
    }
}

impl<St: Stream + fmt::Debug> fmt::Debug for WindowThrottle<St>
where
    St::Item: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WindowThrottle")
            .field("upstream", &self.upstream)
            .field("held", &self.held)
            .field("window", &self.window)
            .field("rate", &self.rate)
            .finish_non_exhaustive()
    }
}
