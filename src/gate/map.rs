//! Streams of calls through a gate: `throttled_map` (input order) and its unordered variant.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use futures_core::TryFuture;
use futures_core::stream::{FusedStream, Stream};
use futures_util::stream::{Fuse, FuturesUnordered, StreamExt as _};
use pin_project::pin_project;

use super::call::{Arrival, Call, Retry, Turn};
use super::classify::Scope;
use super::ended::Estimated;
use super::handle::Gate;
use super::options::Terms;
use super::state::Shared;
use crate::error::Error;

/// One item's call in progress (the item is kept for a retry), or one the gate turned away
/// as it arrived: its error, handed out in its turn.
#[pin_project(project = TrackedProj)]
enum Tracked<T, E, Fut: Future> {
    Calling {
        seq: u64,
        item: Option<T>,
        #[pin]
        call: Call<Arc<Shared<E>>, E, Fut>,
    },
    Refused {
        seq: u64,
        error: Option<Error<E>>,
    },
}

/// An item's call that ended, or was throttled: its sequence number, and its result or the
/// item with what its next attempt carries.
type ItemEnded<T, R, E> = (u64, Result<Result<R, Error<E>>, (T, ItemRetry<E>)>);

/// What the next attempt of an item's call carries.
type ItemRetry<E> = Retry<Arc<Shared<E>>, E, Estimated, Infallible>;

impl<T, E, R, Fut: Future<Output = Result<R, E>>> Future for Tracked<T, E, Fut> {
    type Output = ItemEnded<T, R, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let (seq, ended) = match self.project() {
            TrackedProj::Calling { seq, item, call } => match ready!(call.poll(cx)) {
                Turn::Ended(ended) => (seq, Ok(ended.into_result())),
                Turn::Again(retry) => {
                    let item = item.take().expect("polled after completion");
                    (seq, Err((item, retry)))
                }
            },
            TrackedProj::Refused { seq, error } => {
                let error = error.take().expect("polled after completion");
                (seq, Ok(Err(error)))
            }
        };
        Poll::Ready((*seq, ended))
    }
}

/// A finished call: the item's sequence number and its result.
type Finished<R, E> = (u64, Result<R, Error<E>>);

/// Which scopes an item's call belongs to; see [`ThrottledMap::scoped`].
///
/// Implemented by every `FnMut(&T) -> impl IntoIterator<Item = impl Into<Scope>>`, and by
/// [`Unscoped`].
pub trait ScopesOf<T> {
    /// The scopes of `item`'s call.
    fn scopes_of(&mut self, item: &T) -> Box<[Scope]>;
}

/// The calls belong to no scope: only the gate-wide backoff holds them back.
#[derive(Debug, Clone, Copy, Default)]
pub struct Unscoped;

impl<T> ScopesOf<T> for Unscoped {
    fn scopes_of(&mut self, _: &T) -> Box<[Scope]> {
        Box::new([])
    }
}

impl<T, F, I> ScopesOf<T> for F
where
    F: FnMut(&T) -> I,
    I: IntoIterator,
    I::Item: Into<Scope>,
{
    fn scopes_of(&mut self, item: &T) -> Box<[Scope]> {
        self(item).into_iter().map(Into::into).collect()
    }
}

/// What an item's call costs of the gate's rate and of the announced quota; see
/// [`ThrottledMap::costed`].
///
/// Implemented by every `FnMut(&T) -> u64`, and by [`UnitCost`].
pub trait CostOf<T> {
    /// The units `item`'s call costs: at least 1 (a zero is taken as 1).
    fn cost_of(&mut self, item: &T) -> u64;
}

/// Every call costs one unit.
#[derive(Debug, Clone, Copy, Default)]
pub struct UnitCost;

impl<T> CostOf<T> for UnitCost {
    fn cost_of(&mut self, _: &T) -> u64 {
        1
    }
}

impl<T, F: FnMut(&T) -> u64> CostOf<T> for F {
    fn cost_of(&mut self, item: &T) -> u64 {
        self(item).max(1)
    }
}

/// What both streams share: pulling items, starting their calls, retrying throttled ones.
#[pin_project]
struct Driver<St: Stream, F, Fut: Future, E, S, C> {
    #[pin]
    upstream: Fuse<St>,
    calls: Calls<St::Item, F, Fut, E, S, C>,
    next_seq: u64,
}

/// The calls in progress, and what makes the next attempt of one.
struct Calls<T, F, Fut: Future, E, S, C> {
    gate: Gate<E>,
    f: F,
    scopes: S,
    costs: C,
    in_progress: FuturesUnordered<Tracked<T, E, Fut>>,
}

impl<T, F, Fut, E, S, C> Calls<T, F, Fut, E, S, C>
where
    Fut: Future,
    T: Clone,
    F: FnMut(T) -> Fut,
    S: ScopesOf<T>,
    C: CostOf<T>,
{
    /// Starts the call for `item`: its future is made only if the gate lets it in; one
    /// turned away ends with its error, in its turn.
    fn track(&mut self, seq: u64, item: T) {
        let scopes = self.scopes.scopes_of(&item);
        let terms = Terms::cost(self.costs.cost_of(&item));
        let shared = Arc::clone(self.gate.shared());
        let tracked = match Arrival::new(shared, scopes, terms, Estimated) {
            Ok(arrival) => Tracked::Calling {
                seq,
                call: arrival.attempt((self.f)(item.clone())),
                item: Some(item),
            },
            Err(refused) => Tracked::Refused {
                seq,
                error: Some(refused.into_error()),
            },
        };
        self.in_progress.push(tracked);
    }

    /// Starts the next attempt of the call for `item`, which `retry` carries.
    fn retry(&mut self, seq: u64, item: T, retry: ItemRetry<E>) {
        let call = retry.attempt((self.f)(item.clone()));
        self.in_progress.push(Tracked::Calling {
            seq,
            item: Some(item),
            call,
        });
    }
}

impl<St, F, Fut, E> Driver<St, F, Fut, E, Unscoped, UnitCost>
where
    St: Stream,
    Fut: Future,
{
    fn new(upstream: St, gate: &Gate<E>, f: F) -> Self {
        Self {
            upstream: upstream.fuse(),
            calls: Calls {
                gate: gate.clone(),
                f,
                scopes: Unscoped,
                costs: UnitCost,
                in_progress: FuturesUnordered::new(),
            },
            next_seq: 0,
        }
    }
}

impl<St: Stream, F, Fut: Future, E, S, C> Driver<St, F, Fut, E, S, C> {
    /// The same driver with other scope and cost settings: calls already made keep theirs.
    fn with<S2, C2>(
        self,
        settings: impl FnOnce(S, C) -> (S2, C2),
    ) -> Driver<St, F, Fut, E, S2, C2> {
        let Calls {
            gate,
            f,
            scopes,
            costs,
            in_progress,
        } = self.calls;
        let (scopes, costs) = settings(scopes, costs);
        Driver {
            upstream: self.upstream,
            calls: Calls {
                gate,
                f,
                scopes,
                costs,
                in_progress,
            },
            next_seq: self.next_seq,
        }
    }
}

impl<St, F, Fut, R, E, S, C> Driver<St, F, Fut, E, S, C>
where
    St: Stream,
    St::Item: Clone,
    F: FnMut(St::Item) -> Fut,
    Fut: Future<Output = Result<R, E>>,
    S: ScopesOf<St::Item>,
    C: CostOf<St::Item>,
{
    /// Pulls upstream while fewer than `room` calls are in progress.
    fn fill(self: Pin<&mut Self>, cx: &mut Context<'_>, room: usize) {
        let mut this = self.project();
        while this.calls.in_progress.len() < room {
            match this.upstream.as_mut().poll_next(cx) {
                Poll::Ready(Some(item)) => {
                    let seq = *this.next_seq;
                    *this.next_seq += 1;
                    this.calls.track(seq, item);
                }
                Poll::Ready(None) | Poll::Pending => break,
            }
        }
    }

    /// The next finished call: its sequence number and result. `Ready(None)` when upstream
    /// has ended and nothing is in progress.
    fn poll_finished(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        room: usize,
    ) -> Poll<Option<Finished<R, E>>> {
        loop {
            // The calls in progress first: one whose turn in the gate's line came starts
            // before the next item arrives at the gate, which would still count it as waiting
            // (and turn the item away if that filled the line).
            let this = self.as_mut().project();
            match this.calls.in_progress.poll_next_unpin(cx) {
                Poll::Ready(Some((seq, Ok(result)))) => return Poll::Ready(Some((seq, result))),
                Poll::Ready(Some((seq, Err((item, retry))))) => {
                    this.calls.retry(seq, item, retry);
                    continue;
                }
                Poll::Ready(None) | Poll::Pending => {}
            }
            let before = this.calls.in_progress.len();
            self.as_mut().fill(cx, room);
            let this = self.as_mut().project();
            if this.calls.in_progress.len() == before {
                // No new call to poll: every call is pending, and upstream too (or done).
                let ended = this.upstream.is_done() && this.calls.in_progress.is_empty();
                return if ended {
                    Poll::Ready(None)
                } else {
                    Poll::Pending
                };
            }
        }
    }
}

impl<St: Stream, F, Fut: Future, E, S, C> Driver<St, F, Fut, E, S, C> {
    /// How many calls the stream keeps in progress: the gate's in-flight limit as it is now
    /// ([`Gate::set_max_in_flight`] may change it).
    fn window(&self) -> usize {
        self.calls.gate.max_in_flight()
    }

    fn is_terminated(&self) -> bool {
        self.upstream.is_done() && self.calls.in_progress.is_empty()
    }
}

/// Stream for [`PacelineExt::throttled_map`](crate::PacelineExt::throttled_map): results in
/// input order.
#[must_use = "streams do nothing unless polled"]
#[pin_project]
pub struct ThrottledMap<St: Stream, F, Fut: TryFuture, E, S = Unscoped, C = UnitCost> {
    #[pin]
    driver: Driver<St, F, Fut, E, S, C>,
    /// Finished results waiting for an earlier one, by sequence number from `next_out`.
    done: VecDeque<Option<Result<Fut::Ok, Error<E>>>>,
    next_out: u64,
}

impl<St: Stream, F, Fut: TryFuture, E> ThrottledMap<St, F, Fut, E> {
    pub(crate) fn new(upstream: St, gate: &Gate<E>, f: F) -> Self {
        Self {
            driver: Driver::new(upstream, gate, f),
            done: VecDeque::new(),
            next_out: 0,
        }
    }
}

impl<St: Stream, F, Fut: TryFuture, E, S, C> ThrottledMap<St, F, Fut, E, S, C> {
    /// Says which scopes each item's call belongs to (say, its account), so that a throttle
    /// scoped to one of them holds back only the calls in it. Set it before the first poll;
    /// calls already made keep their scopes.
    ///
    /// # Examples
    ///
    /// ```
    /// use futures::StreamExt;
    /// use paceline::prelude::*;
    /// use paceline::Gate;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let gate: Gate<String> = Gate::builder(|_: &String| None).build().unwrap();
    /// let updates = vec![("acct-1", 10), ("acct-2", 20)];
    /// let done: Vec<_> = futures::stream::iter(updates)
    ///     .throttled_map(&gate, |(_, bid)| async move { Ok::<_, String>(bid) })
    ///     .scoped(|(account, _): &(&str, u32)| [paceline::Scope::from(*account)])
    ///     .collect()
    ///     .await;
    /// assert_eq!(done, [Ok(10), Ok(20)]);
    /// # }
    /// ```
    pub fn scoped<S2: ScopesOf<St::Item>>(
        self,
        scopes_of: S2,
    ) -> ThrottledMap<St, F, Fut, E, S2, C> {
        self.with(|_, costs| (scopes_of, costs))
    }

    /// Says what each item's call costs of the gate's rate and of the server's announced
    /// quota (see [`CallOptions::cost`](crate::CallOptions::cost)): a batch of `n` rows, the
    /// points of a query. One unit each by default. Set it before the first poll; calls
    /// already made keep their cost.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use futures::StreamExt;
    /// use paceline::prelude::*;
    /// use paceline::{Gate, RateLimited};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// // 100 rows per second, sent in batches of different sizes.
    /// let gate = Gate::builder(|_: &()| Some(RateLimited::new())).rate(100.0).build().unwrap();
    /// let start = tokio::time::Instant::now();
    /// let batches = vec![vec![0u8; 50], vec![0; 150], vec![0; 10]];
    /// let sent: Vec<_> = futures::stream::iter(batches)
    ///     .throttled_map(&gate, |batch| async move { Ok::<_, ()>((batch.len(), start.elapsed())) })
    ///     .costed(|batch: &Vec<u8>| batch.len() as u64)
    ///     .collect()
    ///     .await;
    /// let ms = Duration::from_millis;
    /// // Each batch waits for the rows of the one before: 50 rows, then 150.
    /// assert_eq!(sent, [Ok((50, ms(0))), Ok((150, ms(500))), Ok((10, ms(2_000)))]);
    /// # }
    /// ```
    pub fn costed<C2: CostOf<St::Item>>(self, cost_of: C2) -> ThrottledMap<St, F, Fut, E, S, C2> {
        self.with(|scopes, _| (scopes, cost_of))
    }

    /// The same stream with other scope and cost settings.
    fn with<S2, C2>(
        self,
        settings: impl FnOnce(S, C) -> (S2, C2),
    ) -> ThrottledMap<St, F, Fut, E, S2, C2> {
        let Self {
            driver,
            done,
            next_out,
        } = self;
        ThrottledMap {
            driver: driver.with(settings),
            done,
            next_out,
        }
    }
}

impl<St, F, Fut, R, E, S, C> Stream for ThrottledMap<St, F, Fut, E, S, C>
where
    St: Stream,
    St::Item: Clone,
    F: FnMut(St::Item) -> Fut,
    Fut: Future<Output = Result<R, E>>,
    S: ScopesOf<St::Item>,
    C: CostOf<St::Item>,
{
    type Item = Result<R, Error<E>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        loop {
            if let Some(Some(_)) = this.done.front() {
                *this.next_out += 1;
                let result = this.done.pop_front().flatten().expect("checked above");
                return Poll::Ready(Some(result));
            }
            // Results waiting for an earlier one count against the window, bounding memory.
            let room = this
                .driver
                .window()
                .saturating_sub(this.done.iter().filter(|r| r.is_some()).count());
            match this.driver.as_mut().poll_finished(cx, room.max(1)) {
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

impl<St, F, Fut, R, E, S, C> FusedStream for ThrottledMap<St, F, Fut, E, S, C>
where
    St: Stream,
    St::Item: Clone,
    F: FnMut(St::Item) -> Fut,
    Fut: Future<Output = Result<R, E>>,
    S: ScopesOf<St::Item>,
    C: CostOf<St::Item>,
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
pub struct ThrottledMapUnordered<St: Stream, F, Fut: Future, E, S = Unscoped, C = UnitCost> {
    #[pin]
    driver: Driver<St, F, Fut, E, S, C>,
}

impl<St: Stream, F, Fut: Future, E> ThrottledMapUnordered<St, F, Fut, E> {
    pub(crate) fn new(upstream: St, gate: &Gate<E>, f: F) -> Self {
        Self {
            driver: Driver::new(upstream, gate, f),
        }
    }
}

impl<St: Stream, F, Fut: Future, E, S, C> ThrottledMapUnordered<St, F, Fut, E, S, C> {
    /// Says which scopes each item's call belongs to; see [`ThrottledMap::scoped`].
    pub fn scoped<S2: ScopesOf<St::Item>>(
        self,
        scopes_of: S2,
    ) -> ThrottledMapUnordered<St, F, Fut, E, S2, C> {
        ThrottledMapUnordered {
            driver: self.driver.with(|_, costs| (scopes_of, costs)),
        }
    }

    /// Says what each item's call costs; see [`ThrottledMap::costed`].
    pub fn costed<C2: CostOf<St::Item>>(
        self,
        cost_of: C2,
    ) -> ThrottledMapUnordered<St, F, Fut, E, S, C2> {
        ThrottledMapUnordered {
            driver: self.driver.with(|scopes, _| (scopes, cost_of)),
        }
    }
}

impl<St, F, Fut, R, E, S, C> Stream for ThrottledMapUnordered<St, F, Fut, E, S, C>
where
    St: Stream,
    St::Item: Clone,
    F: FnMut(St::Item) -> Fut,
    Fut: Future<Output = Result<R, E>>,
    S: ScopesOf<St::Item>,
    C: CostOf<St::Item>,
{
    type Item = Result<R, Error<E>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let driver = self.project().driver;
        let room = driver.window();
        driver
            .poll_finished(cx, room)
            .map(|finished| finished.map(|(_, result)| result))
    }
}

impl<St, F, Fut, R, E, S, C> FusedStream for ThrottledMapUnordered<St, F, Fut, E, S, C>
where
    St: Stream,
    St::Item: Clone,
    F: FnMut(St::Item) -> Fut,
    Fut: Future<Output = Result<R, E>>,
    S: ScopesOf<St::Item>,
    C: CostOf<St::Item>,
{
    fn is_terminated(&self) -> bool {
        self.driver.is_terminated()
    }
}

impl<St: Stream, F, Fut: TryFuture, E, S, C> fmt::Debug for ThrottledMap<St, F, Fut, E, S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThrottledMap")
            .field("in_progress", &self.driver.calls.in_progress.len())
            .field("waiting_for_order", &self.done.len())
            .finish_non_exhaustive()
    }
}

impl<St: Stream, F, Fut: Future, E, S, C> fmt::Debug
    for ThrottledMapUnordered<St, F, Fut, E, S, C>
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThrottledMapUnordered")
            .field("in_progress", &self.driver.calls.in_progress.len())
            .finish_non_exhaustive()
    }
}
