use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::stream::{FusedStream, Stream};
use futures_util::stream::{Fuse, StreamExt as _};
use pin_project::pin_project;
use tokio::time::Instant;

use crate::pace::Spacing;
use crate::size_hint::batch_size_hint;
use crate::timer::PreciseTimer;

/// Stream for [`PacelineExt::interval_gate`](crate::PacelineExt::interval_gate): batches
/// at least `min_interval` apart.
#[must_use = "streams do nothing unless polled"]
#[pin_project]
pub struct IntervalGate<St: Stream> {
    #[pin]
    upstream: Fuse<St>,
    buffer: Vec<St::Item>,
    max_batch: usize,
    spacing: Spacing,
    precise: bool,
    timer: PreciseTimer,
}

impl<St: Stream> IntervalGate<St> {
    #[track_caller]
    pub(crate) fn new(upstream: St, min_interval: Duration, max_batch: usize) -> Self {
        assert!(max_batch > 0, "`max_batch` must be at least 1 (got 0)");
        Self {
            upstream: upstream.fuse(),
            buffer: Vec::new(),
            max_batch,
            spacing: Spacing::new(min_interval),
            precise: false,
            timer: PreciseTimer::default(),
        }
    }

    /// Switches to precise timing: each batch goes out within a fraction of a millisecond of
    /// its earliest instant, instead of up to about a millisecond after it.
    ///
    /// tokio's timer fires on millisecond ticks, rounding every deadline up, so each wait can
    /// grow by up to a millisecond: at a 10 ms interval, up to a tenth of the allowed rate. In
    /// precise mode the gate sleeps until about 1.5 ms before the deadline and then yields to
    /// the scheduler until the clock reaches it, so it is still never early.
    ///
    /// **Cost**: the task is re-polled continuously for the last millisecond or so of every
    /// wait, taking that much CPU time of one core per emission (the shorter the interval, the
    /// larger that share of a core), though it yields between polls so other tasks still run.
    /// The crate's BENCHMARKS.md has what both modes measured. Under tokio's paused clock it
    /// behaves exactly like the default mode.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use futures::StreamExt;
    /// use paceline::prelude::*;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let batches: Vec<Vec<u32>> = futures::stream::iter(0..3)
    ///     .interval_gate(Duration::from_millis(10), 1)
    ///     .precise()
    ///     .collect()
    ///     .await;
    /// assert_eq!(batches, [[0], [1], [2]]);
    /// # }
    /// ```
    pub fn precise(mut self) -> Self {
        self.precise = true;
        self
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

impl<St: Stream> Stream for IntervalGate<St> {
    type Item = Vec<St::Item>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        let max_batch = *this.max_batch;

        // Keep pulling while the gate is closed, so upstream work overlaps the wait. The batch
        // is filled in a local `Vec` allocated fresh at its first item, not in `this.buffer`
        // in place: the compiler then knows that storing an item cannot overwrite the
        // upstream's state, and keeps that state in registers across the loop instead of
        // reloading it after every push (about 0.3 ns an item with a ready upstream).
        let mut buffer = std::mem::take(this.buffer);
        if buffer.is_empty() {
            match this.upstream.as_mut().poll_next(cx) {
                Poll::Ready(Some(item)) => {
                    buffer = Vec::with_capacity(max_batch);
                    buffer.push(item);
                }
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
        while buffer.len() < max_batch {
            match this.upstream.as_mut().poll_next(cx) {
                Poll::Ready(Some(item)) => buffer.push(item),
                Poll::Ready(None) | Poll::Pending => break,
            }
        }
        if this.spacing.is_unlimited() {
            return Poll::Ready(Some(buffer));
        }

        // Loop rather than trust the timer: whatever the runtime does, never early.
        let now = loop {
            let now = Instant::now();
            match this.spacing.not_before() {
                Some(deadline) if now < deadline => {
                    let waited = if *this.precise {
                        this.timer.poll_until_precise(deadline, cx)
                    } else {
                        this.timer.poll_until(deadline, cx)
                    };
                    if waited.is_pending() {
                        // The batch waits in the stream, so that dropping it loses nothing
                        // more than before and `into_parts` hands it back.
                        *this.buffer = buffer;
                        return Poll::Pending;
                    }
                }
                _ => break now,
            }
        };
        this.spacing.record(now);
        Poll::Ready(Some(buffer))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        batch_size_hint(self.buffer.len(), self.upstream.size_hint(), self.max_batch)
    }
}

impl<St: Stream> FusedStream for IntervalGate<St> {
    fn is_terminated(&self) -> bool {
        self.upstream.is_done() && self.buffer.is_empty()
    }
}

impl<St: Stream + fmt::Debug> fmt::Debug for IntervalGate<St>
where
    St::Item: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IntervalGate")
            .field("upstream", &self.upstream)
            .field("buffer", &self.buffer)
            .field("max_batch", &self.max_batch)
            .field("spacing", &self.spacing)
            .field("precise", &self.precise)
            .finish_non_exhaustive()
    }
}
