use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use futures_core::stream::{FusedStream, Stream};
use futures_util::stream::{Fuse, StreamExt as _};
use pin_project::pin_project;
use tokio::time::Instant;

use crate::time::after;

use crate::size_hint::batch_size_hint;
use crate::timer::Timer;

/// Stream for [`PacelineExt::grouped_within`](crate::PacelineExt::grouped_within): batches of
/// `n` items, or fewer once `within` has passed since the first.
#[must_use = "streams do nothing unless polled"]
#[pin_project]
pub struct GroupedWithin<St: Stream> {
    #[pin]
    upstream: Fuse<St>,
    buffer: Vec<St::Item>,
    n: usize,
    within: Duration,
    /// When the partial batch in `buffer` is due; set once it first waits.
    due: Option<Instant>,
    timer: Timer,
}

impl<St: Stream> GroupedWithin<St> {
    #[track_caller]
    pub(crate) fn new(upstream: St, n: usize, within: Duration) -> Self {
        assert!(n > 0, "`n` must be at least 1 (got 0)");
        Self {
            upstream: upstream.fuse(),
            buffer: Vec::new(),
            n,
            within,
            due: None,
            timer: Timer::default(),
        }
    }

    /// The upstream and the items buffered for the next batch.
    pub fn into_parts(self) -> (St, Vec<St::Item>) {
        (self.upstream.into_inner(), self.buffer)
    }

    /// The upstream.
    pub fn get_ref(&self) -> &St {
        self.upstream.get_ref()
    }
}

impl<St: Stream> Stream for GroupedWithin<St> {
    type Item = Vec<St::Item>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        let n = *this.n;
        // Filled in a local `Vec` allocated fresh at the batch's first item, not in
        // `this.buffer` in place: the compiler then knows that storing an item cannot
        // overwrite the upstream's state, and keeps that state in registers across the loop.
        let mut buffer = std::mem::take(this.buffer);
        loop {
            match this.upstream.as_mut().poll_next(cx) {
                Poll::Ready(Some(item)) => {
                    if buffer.is_empty() {
                        buffer = Vec::with_capacity(n);
                    }
                    buffer.push(item);
                    if buffer.len() == n {
                        *this.due = None;
                        return Poll::Ready(Some(buffer));
                    }
                }
                Poll::Ready(None) => {
                    *this.due = None;
                    return Poll::Ready((!buffer.is_empty()).then_some(buffer));
                }
                Poll::Pending => break,
            }
        }
        if buffer.is_empty() {
            return Poll::Pending;
        }
        // The partial batch waits in the stream, so that `into_parts` can hand it back.
        *this.buffer = buffer;
        // The batch's first item came in during the poll that first reaches this point (a full
        // batch returns before pulling more), so reading the clock here, rather than once per
        // batch at the first item, dates it to within this one poll.
        let due = *this
            .due
            .get_or_insert_with(|| after(Instant::now(), *this.within));
        ready!(this.timer.poll_until(due, cx));
        *this.due = None;
        Poll::Ready(Some(std::mem::take(this.buffer)))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        batch_size_hint(self.buffer.len(), self.upstream.size_hint(), self.n)
    }
}

impl<St: Stream> FusedStream for GroupedWithin<St> {
    fn is_terminated(&self) -> bool {
        self.upstream.is_done() && self.buffer.is_empty()
    }
}

impl<St: Stream + fmt::Debug> fmt::Debug for GroupedWithin<St>
where
    St::Item: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupedWithin")
            .field("upstream", &self.upstream)
            .field("buffer", &self.buffer)
            .field("n", &self.n)
            .field("within", &self.within)
            .field("due", &self.due)
            .finish_non_exhaustive()
    }
}
