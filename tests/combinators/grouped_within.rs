//! Exact scenarios for `grouped_within`, in paused time (instants asserted to the millisecond).

use std::time::Duration;

use futures::{StreamExt, channel::mpsc, stream};
use paceline::prelude::*;
use tokio::time::{self, Instant};
use tokio_test::{assert_pending, assert_ready_eq, task};

use crate::support::{self, ms_since, record, scheduled};

const MS: Duration = Duration::from_millis(1);

#[tokio::test(start_paused = true)]
async fn a_full_batch_goes_at_once() {
    let start = Instant::now();
    let out = record(
        start,
        scheduled(start, vec![0, 0, 0, 0, 0, 0, 0]).grouped_within(3, 100 * MS),
    )
    .await;
    // Two full batches at 0; the last item is flushed when upstream ends, right after it.
    assert_eq!(out, [(0, vec![0, 1, 2]), (0, vec![3, 4, 5]), (0, vec![6])]);
}

#[tokio::test(start_paused = true)]
async fn a_partial_batch_goes_within_the_limit_of_its_first_item() {
    let start = Instant::now();
    let arrivals = vec![10, 50, 110, 130, 200, 240, 260, 900];
    let out = record(
        start,
        scheduled(start, arrivals).grouped_within(3, 100 * MS),
    )
    .await;
    assert_eq!(
        out,
        [
            (110, vec![0, 1, 2]), // full when the third arrives, before 10 + 100
            (230, vec![3, 4]),    // first at 130: due at 230, holding two
            (340, vec![5, 6]),    // first at 240: due at 340
            (900, vec![7]),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn an_item_arriving_exactly_at_the_due_time_joins_the_batch() {
    let start = Instant::now();
    let out = record(
        start,
        scheduled(start, vec![0, 100, 500]).grouped_within(5, 100 * MS),
    )
    .await;
    assert_eq!(out, [(100, vec![0, 1]), (500, vec![2])]);
}

#[tokio::test(start_paused = true)]
async fn zero_within_batches_what_is_ready_like_ready_chunks() {
    let start = Instant::now();
    let out = record(
        start,
        scheduled(start, vec![0, 0, 0, 7]).grouped_within(2, Duration::ZERO),
    )
    .await;
    assert_eq!(out, [(0, vec![0, 1]), (0, vec![2]), (7, vec![3])]);
}

#[tokio::test(start_paused = true)]
async fn the_timer_runs_only_while_a_partial_batch_waits() {
    let (tx, rx) = mpsc::unbounded();
    let mut grouped = task::spawn(rx.grouped_within(2, 100 * MS));
    assert_pending!(grouped.poll_next());
    time::advance(1000 * MS).await;
    assert!(!grouped.is_woken(), "no timer while nothing is buffered");

    tx.unbounded_send(0).unwrap();
    assert!(grouped.is_woken());
    assert_pending!(grouped.poll_next());
    time::advance(99 * MS).await;
    assert!(!grouped.is_woken());
    time::advance(MS).await;
    assert!(grouped.is_woken());
    assert_ready_eq!(grouped.poll_next(), Some(vec![0]));

    assert_pending!(grouped.poll_next());
    time::advance(1000 * MS).await;
    assert!(!grouped.is_woken(), "the timer stops with the batch");
    drop(tx);
    assert_ready_eq!(grouped.poll_next(), None);
}

#[tokio::test(start_paused = true)]
async fn upstream_end_flushes_the_partial_batch_at_once() {
    let start = Instant::now();
    let mut grouped = stream::iter(0..5).grouped_within(3, 100 * MS);
    assert_eq!(grouped.next().await, Some(vec![0, 1, 2]));
    assert_eq!(grouped.next().await, Some(vec![3, 4]));
    assert_eq!(grouped.next().await, None);
    assert_eq!(ms_since(start), 0);
    assert!(futures::stream::FusedStream::is_terminated(&grouped));
}

#[tokio::test(start_paused = true)]
async fn into_parts_hands_back_the_partial_batch() {
    let (tx, rx) = mpsc::unbounded();
    let mut grouped = task::spawn(rx.grouped_within(3, 100 * MS));
    tx.unbounded_send(7).unwrap();
    tx.unbounded_send(8).unwrap();
    assert_pending!(grouped.poll_next());
    let (_upstream, partial) = grouped.into_inner().into_parts();
    assert_eq!(partial, [7, 8]);
}

#[tokio::test(start_paused = true)]
async fn errors_as_items_pass_in_order() {
    let items: Vec<Result<u8, &str>> = vec![Ok(1), Err("boom"), Ok(2)];
    let batches: Vec<_> = stream::iter(items.clone())
        .grouped_within(2, MS)
        .collect()
        .await;
    assert_eq!(batches.concat(), items);
}

#[test]
#[should_panic(expected = "`n` must be at least 1")]
fn zero_n_panics_naming_the_argument() {
    let _ = stream::iter(0..1).grouped_within(0, MS);
}

#[test]
fn builds_outside_a_runtime() {
    let grouped = stream::iter(0..5).grouped_within(2, MS);
    assert_eq!(futures::Stream::size_hint(&grouped), (3, Some(5)));
}

#[tokio::test(start_paused = true)]
async fn an_absurd_within_is_the_longest_wait_and_never_panics() {
    for within in support::ABSURD {
        let start = Instant::now();
        // One item is flushed at once when upstream ends.
        let one = record(start, stream::iter([7]).grouped_within(2, within)).await;
        assert_eq!((one, ms_since(start)), (vec![(0, vec![7])], 0));
        // A partial batch waits for its company, and goes when upstream ends.
        let start = Instant::now();
        let two = record(
            start,
            scheduled(start, vec![0, 10_000]).grouped_within(3, within),
        );
        assert_eq!(two.await, [(10_000, vec![0, 1])]);
    }
}
