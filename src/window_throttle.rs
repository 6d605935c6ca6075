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
use crate::timer::Timer;

/// Stream for [`PacelineExt::window_throttle`](crate::PacelineExt::window_throttle): at most
/// `n` items in every window of length `per`.
#[must_use = "streams do nothing unless polled"]
#[pin_project]
pub struct WindowThrottle<St> {
    #[pin]
    upstream: Fuse<St>,
    window: SlidingWindow,
    rate: RateSource,
    timer: Timer,
}

impl<St: Stream> WindowThrottle<St> {
    #[track_caller]
    pub(crate) fn new(upstream: St, n: usize, per: Duration) -> Self {
        Self {
            upstream: upstream.fuse(),
            window: SlidingWindow::new(),
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

impl<St: Stream> Stream for WindowThrottle<St> {
    type Item = St::Item;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        let rate = this.rate.current();
        // Pull only once the window has room: nothing is held, so nothing is lost on drop.
        while let Some(deadline) = this.window.not_before(rate) {
            if Instant::now() >= deadline {
                break;
            }
            ready!(this.timer.poll_until(deadline, cx));
        }
        let item = ready!(this.upstream.as_mut().poll_next(cx));
        if item.is_some() {
            this.window.record(Instant::now(), rate);
        }
        Poll::Ready(item)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.upstream.size_hint()
    }
}

impl<St: Stream> FusedStream for WindowThrottle<St> {
    fn is_terminated(&self) -> bool {
        self.upstream.is_done()
    }
}

impl<St: fmt::Debug> fmt::Debug for WindowThrottle<St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WindowThrottle")
            .field("upstream", &self.upstream)
            .field("window", &self.window)
            .field("rate", &self.rate)
            .finish_non_exhaustive()
    }
}
