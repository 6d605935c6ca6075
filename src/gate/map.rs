//! Streams of calls through a gate: `throttled_map` (input order) and its unordered variant.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::TryFuture;
use futures_core::stream::{FusedStream, Stream};
use futures_util::stream::{Fuse, FuturesUnordered, StreamExt as _};
use pin_project::pin_project;

use super::attempt::{Attempt, Outcome};
use super::{Gate, Scope};
use crate::error::Error;

/// One item's call in progress: the item is kept for a retry.
#[pin_project]
struct Tracked<T, E, Fut> {
    seq: u64,
    item: Option<T>,
    attempts: u32,
    #[pin]
    attempt: Attempt<E, Fut>,
}

impl<T, E, R, Fut: Future<Output = Result<R, E>>> Future for Tracked<T, E, Fut> {
    type Output = (u64, T, u32, Outcome<R, E>);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        this.attempt.poll(cx).map(|outcome| {
            let item = this.item.take().expect("polled after completion");
            (*this.seq, item, *this.attempts, outcome)
        })
    }
}

/// A finished call: the item's sequence number and its result.
type Finished<R, E> = (u64, Result<R, Error<E>>);

/// What both streams share: pulling items, starting their calls, retrying throttled ones.
struct Driver<St: Stream, F, Fut, E> {
    upstream: Pin<Box<Fuse<St>>>,
    gate: Gate<E>,
    f: F,
    in_progress: FuturesUnordered<Tracked<St::Item, E, Fut>>,
    next_seq: u64,
    window: usize,
}

impl<St, F, Fut, R, E> Driver<St, F, Fut, E>
where
    St: Stream,
    St::Item: Clone,
    F: FnMut(St::Item) -> Fut,
    Fut: Future<Output = Result<R, E>>,
{
    fn new(upstream: St, gate: &Gate<E>, f: F) -> Self {
        let window = gate.shared.lock().max_in_flight;
        Self {
            upstream: Box::pin(upstream.fuse()),
            gate: gate.clone(),
            f,
            in_progress: FuturesUnordered::new(),
            next_seq: 0,
            window,
        }
    }

    fn track(&mut self, seq: u64, item: St::Item, attempts: u32) {
        let fut = (self.f)(item.clone());
        let attempt = Attempt::new(
            self.gate.clone(),
            Box::new([] as [Scope; 0]),
            attempts > 1,
            fut,
        );
        self.in_progress.push(Tracked {
            seq,
            item: Some(item),
            attempts,
            attempt,
        });
    }

    /// Pulls upstream while fewer than `room` calls are in progress.
    fn fill(&mut self, cx: &mut Context<'_>, room: usize) {
        while self.in_progress.len() < room {
            match self.upstream.as_mut().poll_next(cx) {
                Poll::Ready(Some(item)) => {
                    let seq = self.next_seq;
                    self.next_seq += 1;
                    self.track(seq, item, 1);
                }
                Poll::Ready(None) | Poll::Pending => break,
            }
        }
    }

    /// The next finished call: its sequence number and result. `Ready(None)` when upstream
    /// has ended and nothing is in progress.
    fn poll_finished(&mut self, cx: &mut Context<'_>, room: usize) -> Poll<Option<Finished<R, E>>> {
        loop {
            self.fill(cx, room);
            match self.in_progress.poll_next_unpin(cx) {
                Poll::Ready(Some((seq, item, attempts, outcome))) => match outcome {
                    Outcome::Done(value) => return Poll::Ready(Some((seq, Ok(value)))),
                    Outcome::Failed(error) => {
                        return Poll::Ready(Some((seq, Err(Error::Call(error)))));
                    }
                    Outcome::Throttled(error) => {
                        match self.gate.retry_or_give_up(attempts, error) {
                            Some(error) => return Poll::Ready(Some((seq, Err(error)))),
                            None => self.track(seq, item, attempts + 1),
                        }
                    }
                },
                Poll::Ready(None) if self.upstream.is_done() => return Poll::Ready(None),
                Poll::Ready(None) | Poll::Pending => return Poll::Pending,
            }
        }
    }

    fn is_terminated(&self) -> bool {
        self.upstream.is_done() && self.in_progress.is_empty()
    }
}

/// Stream for [`PacelineExt::throttled_map`](crate::PacelineExt::throttled_map): results in
/// input order.
#[must_use = "streams do nothing unless polled"]
#[pin_project]
pub struct ThrottledMap<St: Stream, F, Fut: TryFuture, E> {
    driver: Driver<St, F, Fut, E>,
    /// Finished results waiting for an earlier one, by sequence number from `next_out`.
    done: VecDeque<Option<Result<Fut::Ok, Error<E>>>>,
    next_out: u64,
}

impl<St, F, Fut, R, E> ThrottledMap<St, F, Fut, E>
where
    St: Stream,
    St::Item: Clone,
    F: FnMut(St::Item) -> Fut,
    Fut: Future<Output = Result<R, E>>,
{
    pub(crate) fn new(upstream: St, gate: &Gate<E>, f: F) -> Self {
        Self {
            driver: Driver::new(upstream, gate, f),
            done: VecDeque::new(),
            next_out: 0,
        }
    }
}

impl<St, F, Fut, R, E> Stream for ThrottledMap<St, F, Fut, E>
where
    St: Stream,
    St::Item: Clone,
    F: FnMut(St::Item) -> Fut,
    Fut: Future<Output = Result<R, E>>,
{
    type Item = Result<R, Error<E>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.project();
        loop {
            if let Some(Some(_)) = this.done.front() {
                *this.next_out += 1;
                let result = this.done.pop_front().flatten().expect("checked above");
                return Poll::Ready(Some(result));
            }
            // Results waiting for an earlier one count against the window, bounding memory.
            let room = this
                .driver
                .window
                .saturating_sub(this.done.iter().filter(|r| r.is_some()).count());
            match this.driver.poll_finished(cx, room.max(1)) {
                Poll::Ready(Some((seq, result))) => {
                    let slot =
                        usize::try_from(seq - *this.next_out).expect("window fits in memory");
                    if this.done.len() <= slot {
                        this.done.resize_with(slot + 1, || None);
                    }
                    this.done[slot] = Some(result);
                }
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl<St, F, Fut, R, E> FusedStream for ThrottledMap<St, F, Fut, E>
where
    St: Stream,
    St::Item: Clone,
    F: FnMut(St::Item) -> Fut,
    Fut: Future<Output = Result<R, E>>,
{
    fn is_terminated(&self) -> bool {
        self.driver.is_terminated() && self.done.is_empty()
    }
}

/// Stream for
/// [`PacelineExt::throttled_map_unordered`](crate::PacelineExt::throttled_map_unordered):
/// results as the calls finish.
#[must_use = "streams do nothing unless polled"]
#[pin_project]
pub struct ThrottledMapUnordered<St: Stream, F, Fut, E> {
    driver: Driver<St, F, Fut, E>,
}

impl<St, F, Fut, R, E> ThrottledMapUnordered<St, F, Fut, E>
where
    St: Stream,
    St::Item: Clone,
    F: FnMut(St::Item) -> Fut,
    Fut: Future<Output = Result<R, E>>,
{
    pub(crate) fn new(upstream: St, gate: &Gate<E>, f: F) -> Self {
        Self {
            driver: Driver::new(upstream, gate, f),
        }
    }
}

impl<St, F, Fut, R, E> Stream for ThrottledMapUnordered<St, F, Fut, E>
where
    St: Stream,
    St::Item: Clone,
    F: FnMut(St::Item) -> Fut,
    Fut: Future<Output = Result<R, E>>,
{
    type Item = Result<R, Error<E>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let driver = self.project().driver;
        let room = driver.window;
        driver
            .poll_finished(cx, room)
            .map(|finished| finished.map(|(_, result)| result))
    }
}

impl<St, F, Fut, R, E> FusedStream for ThrottledMapUnordered<St, F, Fut, E>
where
    St: Stream,
    St::Item: Clone,
    F: FnMut(St::Item) -> Fut,
    Fut: Future<Output = Result<R, E>>,
{
    fn is_terminated(&self) -> bool {
        self.driver.is_terminated()
    }
}

impl<St: Stream, F, Fut: TryFuture, E> fmt::Debug for ThrottledMap<St, F, Fut, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThrottledMap")
            .field("in_progress", &self.driver.in_progress.len())
            .field("waiting_for_order", &self.done.len())
            .finish_non_exhaustive()
    }
}

impl<St: Stream, F, Fut, E> fmt::Debug for ThrottledMapUnordered<St, F, Fut, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThrottledMapUnordered")
            .field("in_progress", &self.driver.in_progress.len())
            .finish_non_exhaustive()
    }
}
