use std::future::Future;
use std::time::Duration;

use futures_core::Stream;

use crate::{
    Gate, GroupedWithin, IntervalGate, ThrottledMap, ThrottledMapUnordered, TimerThrottle,
    WindowThrottle,
};

/// Pacing combinators for every [`Stream`].
///
/// Brought into scope by `use paceline::prelude::*;`. The method names differ from those of
/// `futures::StreamExt` and `tokio_stream::StreamExt`, so all three traits can be in scope at
/// once.
///
/// Every combinator keeps upstream order, never loses or duplicates an item, buffers at most
/// its own size argument, ends right after upstream ends (having flushed what it holds), and
/// takes its time from `tokio::time`, so it runs exactly under tokio's paused clock. Each
/// needs a tokio runtime with the time driver enabled when first polled (not when built).
pub trait PacelineExt: Stream {
    /// Batches items so that two batches never go out closer than `min_interval`.
    ///
    /// The gate measures spacing from the instant of the last emission, so a server counting
    /// requests in windows of its own phase never sees two batches closer than
    /// `min_interval`. Batch *k* goes out at `max(emission k-1 + min_interval, arrival of its
    /// first item)`: an idle gate lets an item through at once, and no batch waits longer than
    /// it must. While the gate is closed it keeps pulling upstream, up to `max_batch` items, and
    /// each batch takes every item that has arrived, up to `max_batch`. When upstream ends, the
    /// last batch waits its turn and then the stream ends at once. Batches are never empty.
    ///
    /// A zero `min_interval` makes this `ready_chunks(max_batch)`. For sub-millisecond timing
    /// see [`IntervalGate::precise`].
    ///
    /// # Panics
    ///
    /// Panics if `max_batch` is zero.
    ///
    /// # Cancel safety
    ///
    /// Dropping the stream drops the items buffered for the next batch (at most `max_batch`);
    /// [`IntervalGate::into_parts`] hands them back instead.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use futures::StreamExt;
    /// use paceline::prelude::*;
    /// use tokio::time::Instant;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let start = Instant::now();
    /// let batches: Vec<(u128, Vec<u32>)> = futures::stream::iter(0..7)
    ///     .interval_gate(Duration::from_millis(100), 3)
    ///     .map(|batch| (start.elapsed().as_millis(), batch))
    ///     .collect()
    ///     .await;
    /// assert_eq!(batches, [(0, vec![0, 1, 2]), (100, vec![3, 4, 5]), (200, vec![6])]);
    /// # }
    /// ```
    #[track_caller]
    fn interval_gate(self, min_interval: Duration, max_batch: usize) -> IntervalGate<Self>
    where
        Self: Sized,
    {
        IntervalGate::new(self, min_interval, max_batch)
    }

    /// Lets at most `n` items through per timer period of length `per`.
    ///
    /// A period starts when an item comes to an idle throttle, which lets it through at once
    /// with a full set of `n` vouchers. Each item spends a voucher; with none left, the next
    /// item waits for the period's end, when the vouchers are refilled and the next period
    /// starts at once if an item is waiting. Otherwise the throttle goes idle and its timer is
    /// off.
    ///
    /// This is the weak guarantee of any timer-based throttle: at most `n` in each of *its*
    /// periods, so up to `2n` in a window of length `per` that straddles a period's end. When
    /// the server counts in windows of its own, use
    /// [`window_throttle`](PacelineExt::window_throttle). The throttle's rate can be changed
    /// while it runs through [`TimerThrottle::rate_handle`].
    ///
    /// # Panics
    ///
    /// Panics if `n` is zero.
    ///
    /// # Cancel safety
    ///
    /// While it waits, the throttle holds the one item it will pass on next (pulled so that
    /// the end of upstream is seen at once); dropping the stream drops that item.
    /// [`TimerThrottle::into_parts`] hands it back instead.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use futures::StreamExt;
    /// use paceline::prelude::*;
    /// use tokio::time::Instant;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let start = Instant::now();
    /// let seconds: Vec<u64> = futures::stream::iter(0..7)
    ///     .timer_throttle(3, Duration::from_secs(1))
    ///     .map(|_| start.elapsed().as_secs())
    ///     .collect()
    ///     .await;
    /// assert_eq!(seconds, [0, 0, 0, 1, 1, 1, 2]);
    /// # }
    /// ```
    #[track_caller]
    fn timer_throttle(self, n: usize, per: Duration) -> TimerThrottle<Self>
    where
        Self: Sized,
    {
        TimerThrottle::new(self, n, per)
    }

    /// Lets at most `n` items through in *every* window of length `per`, whatever its phase.
    ///
    /// Item *i* goes out at `max(its arrival, emission i-n + per)`: the strongest guarantee a
    /// server counting in windows of any phase can ask for, with no capacity wasted. The
    /// throttle's rate can be changed while it runs through [`WindowThrottle::rate_handle`].
    /// It keeps the instants of its last `n` emissions, so its memory grows with `n`.
    ///
    /// # Panics
    ///
    /// Panics if `n` is zero.
    ///
    /// # Cancel safety
    ///
    /// While it waits, the throttle holds the one item it will pass on next (pulled so that
    /// the end of upstream is seen at once); dropping the stream drops that item.
    /// [`WindowThrottle::into_parts`] hands it back instead.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use futures::StreamExt;
    /// use paceline::prelude::*;
    /// use tokio::time::{Instant, sleep};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let start = Instant::now();
    /// // Two items at 0 ms and two at 900 ms, through at most 2 per second.
    /// let arrivals = futures::stream::iter([0, 0, 900, 900]).then(|ms| async move {
    ///     sleep(Duration::from_millis(ms).saturating_sub(start.elapsed())).await;
    ///     ms
    /// });
    /// let out: Vec<u128> = arrivals
    ///     .window_throttle(2, Duration::from_secs(1))
    ///     .map(|_| start.elapsed().as_millis())
    ///     .collect()
    ///     .await;
    /// // A timer throttle would pass all four within 900 ms; no 1 s window holds 3 here.
    /// assert_eq!(out, [0, 0, 1000, 1000]);
    /// # }
    /// ```
    #[track_caller]
    fn window_throttle(self, n: usize, per: Duration) -> WindowThrottle<Self>
    where
        Self: Sized,
    {
        WindowThrottle::new(self, n, per)
    }

    /// Batches items: a batch goes out when it holds `n` items, or `within` after its first
    /// item arrived, whichever comes first.
    ///
    /// Batches are never empty; the timer runs only while a partial batch waits; when upstream
    /// ends, the partial batch goes out at once and the stream ends. A zero `within` makes
    /// this `ready_chunks(n)`.
    ///
    /// # Panics
    ///
    /// Panics if `n` is zero.
    ///
    /// # Cancel safety
    ///
    /// Dropping the stream drops the partial batch (at most `n - 1` items);
    /// [`GroupedWithin::into_parts`] hands it back instead.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use futures::StreamExt;
    /// use paceline::prelude::*;
    /// use tokio::time::{Instant, sleep};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let start = Instant::now();
    /// // Five items at once, then one more 500 ms later.
    /// let arrivals = futures::stream::iter([0, 0, 0, 0, 0, 500]).then(|ms| async move {
    ///     sleep(Duration::from_millis(ms).saturating_sub(start.elapsed())).await;
    ///     ms
    /// });
    /// let batches: Vec<(u128, usize)> = arrivals
    ///     .grouped_within(3, Duration::from_millis(200))
    ///     .map(|batch| (start.elapsed().as_millis(), batch.len()))
    ///     .collect()
    ///     .await;
    /// // Full at once; then two items wait 200 ms; the last is flushed when upstream ends.
    /// assert_eq!(batches, [(0, 3), (200, 2), (500, 1)]);
    /// # }
    /// ```
    #[track_caller]
    fn grouped_within(self, n: usize, within: Duration) -> GroupedWithin<Self>
    where
        Self: Sized,
    {
        GroupedWithin::new(self, n, within)
    }

    /// Calls `f` on each item through `gate`, yielding the results in input order.
    ///
    /// Each item's call starts when the gate lets it: in its turn among every user of the gate
    /// (in arrival order, for calls of one scope or of none), within its in-flight limit, its
    /// backoffs and its rate. A throttled call is tried
    /// again (with a clone of its item: wrap large items in an `Arc`) first in line when the
    /// backoff lifts, up to the gate's retry limit, and then yields [`Error::GaveUp`]; any
    /// other error is yielded at once as [`Error::Call`]. At most the gate's `max_in_flight`
    /// items are taken from upstream ahead of the results, which bounds memory.
    ///
    /// # Cancel safety
    ///
    /// Dropping the stream drops the calls in progress and gives their slots and places in
    /// line back to the gate; the items taken for them are lost.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use futures::StreamExt;
    /// use paceline::prelude::*;
    /// use paceline::{Gate, RateLimited};
    /// use tokio::time::{Instant, sleep};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let gate = Gate::builder(|e: &u16| (*e == 429).then(RateLimited::new))
    ///     .max_in_flight(2)
    ///     .build()
    ///     .unwrap();
    /// let start = Instant::now();
    /// // Each call takes 100 ms; the first one longest.
    /// let results: Vec<(u64, u128)> = futures::stream::iter([1, 2, 3])
    ///     .throttled_map(&gate, |id: u64| async move {
    ///         sleep(Duration::from_millis(if id == 1 { 300 } else { 100 })).await;
    ///         Ok::<_, u16>(id)
    ///     })
    ///     .map(|result| (result.unwrap(), start.elapsed().as_millis()))
    ///     .collect()
    ///     .await;
    /// // Results come in input order, so 2's waits for 1's; and it keeps its place among
    /// // the 2 (`max_in_flight`) items taken ahead, so 3 starts only once 1 is done.
    /// assert_eq!(results, [(1, 300), (2, 300), (3, 400)]);
    /// # }
    /// ```
    ///
    /// [`Error::GaveUp`]: crate::Error::GaveUp
    /// [`Error::Call`]: crate::Error::Call
    fn throttled_map<F, Fut, R, E>(self, gate: &Gate<E>, f: F) -> ThrottledMap<Self, F, Fut, E>
    where
        Self: Sized,
        Self::Item: Clone,
        F: FnMut(Self::Item) -> Fut,
        Fut: Future<Output = Result<R, E>>,
    {
        ThrottledMap::new(self, gate, f)
    }

    /// Like [`throttled_map`](PacelineExt::throttled_map), yielding each result as its call
    /// finishes.
    ///
    /// A slow call holds back no result but its own, and a finished call's slot goes to the
    /// next item at once, so `max_in_flight` calls stay in progress while items wait.
    ///
    /// # Cancel safety
    ///
    /// Dropping the stream drops the calls in progress and gives their slots and places in
    /// line back to the gate; the items taken for them are lost. Results already yielded are
    /// the caller's; none is held back inside the stream.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use futures::StreamExt;
    /// use paceline::prelude::*;
    /// use paceline::{Gate, RateLimited};
    /// use tokio::time::{Instant, sleep};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let gate = Gate::builder(|e: &u16| (*e == 429).then(RateLimited::new))
    ///     .max_in_flight(2)
    ///     .build()
    ///     .unwrap();
    /// let start = Instant::now();
    /// let results: Vec<(u64, u128)> = futures::stream::iter([1, 2, 3])
    ///     .throttled_map_unordered(&gate, |id: u64| async move {
    ///         sleep(Duration::from_millis(if id == 1 { 300 } else { 100 })).await;
    ///         Ok::<_, u16>(id)
    ///     })
    ///     .map(|result| (result.unwrap(), start.elapsed().as_millis()))
    ///     .collect()
    ///     .await;
    /// // 3 takes 2's slot at 100 ms and is done long before 1.
    /// assert_eq!(results, [(2, 100), (3, 200), (1, 300)]);
    /// # }
    /// ```
    fn throttled_map_unordered<F, Fut, R, E>(
        self,
        gate: &Gate<E>,
        f: F,
    ) -> ThrottledMapUnordered<Self, F, Fut, E>
    where
        Self: Sized,
        Self::Item: Clone,
        F: FnMut(Self::Item) -> Fut,
        Fut: Future<Output = Result<R, E>>,
    {
        ThrottledMapUnordered::new(self, gate, f)
    }
}

impl<St: Stream + ?Sized> PacelineExt for St {}
