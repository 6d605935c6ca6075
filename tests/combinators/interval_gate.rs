//! Exact scenarios for `interval_gate`, in paused time (instants asserted to the millisecond).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::{Stream, StreamExt, channel::mpsc, stream};
use paceline::prelude::*;
use tokio::time::{self, Instant};
use tokio_test::{assert_pending, assert_ready_eq, task};

use crate::support::{self, ms_since, record, scheduled};

const MS: Duration = Duration::from_millis(1);

#[tokio::test(start_paused = true)]
async fn a_burst_goes_out_in_full_batches_an_interval_apart() {
    let start = Instant::now();
    let out = record(
        start,
        scheduled(start, vec![0; 7]).interval_gate(100 * MS, 3),
    )
    .await;
    assert_eq!(
        out,
        [(0, vec![0, 1, 2]), (100, vec![3, 4, 5]), (200, vec![6])]
    );
}

#[tokio::test(start_paused = true)]
async fn a_batch_waits_its_turn_and_takes_everything_that_arrived_meanwhile() {
    let start = Instant::now();
    let gate = scheduled(start, vec![0, 30, 60, 100, 250, 420]).interval_gate(100 * MS, 10);
    let out = record(start, gate).await;
    // 30 and 60 wait for 100, where the item arriving at 100 joins them; 250 finds the gate
    // idle and goes at once; 420 comes after 350, so it goes at its arrival too.
    assert_eq!(
        out,
        [
            (0, vec![0]),
            (100, vec![1, 2, 3]),
            (250, vec![4]),
            (420, vec![5])
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn the_guides_trickle_timeline() {
    let start = Instant::now();
    let out = record(
        start,
        scheduled(start, vec![0, 900, 1000, 1100]).interval_gate(500 * MS, 1),
    )
    .await;
    let at: Vec<u64> = out.iter().map(|(ms, _)| *ms).collect();
    assert_eq!(at, [0, 900, 1400, 1900]);
}

#[tokio::test(start_paused = true)]
async fn spacing_counts_from_the_actual_emission_when_the_consumer_is_late() {
    let start = Instant::now();
    let mut gate = stream::iter(0..3).interval_gate(100 * MS, 1);
    assert_eq!(gate.next().await, Some(vec![0]));
    time::sleep(250 * MS).await; // the consumer comes back late
    assert_eq!(gate.next().await, Some(vec![1]));
    assert_eq!(ms_since(start), 250);
    assert_eq!(gate.next().await, Some(vec![2]));
    assert_eq!(ms_since(start), 350);
}

#[tokio::test(start_paused = true)]
async fn upstream_end_flushes_after_the_interval_and_then_ends_at_once() {
    let start = Instant::now();
    let mut gate = stream::iter(0..4).interval_gate(100 * MS, 2);
    assert_eq!(gate.next().await, Some(vec![0, 1]));
    assert_eq!(gate.next().await, Some(vec![2, 3]));
    assert_eq!(ms_since(start), 100);
    assert_eq!(gate.next().await, None);
    assert_eq!(
        ms_since(start),
        100,
        "the stream must end at once, not one interval later"
    );
    assert!(futures::stream::FusedStream::is_terminated(&gate));
}

#[tokio::test(start_paused = true)]
async fn an_empty_upstream_ends_at_once() {
    let start = Instant::now();
    let mut gate = stream::iter(Vec::<u8>::new()).interval_gate(100 * MS, 2);
    assert_eq!(gate.next().await, None);
    assert_eq!(ms_since(start), 0);
}

#[tokio::test(start_paused = true)]
async fn zero_interval_batches_what_is_ready_like_ready_chunks() {
    let start = Instant::now();
    let out = record(
        start,
        scheduled(start, vec![0, 0, 0, 0, 0, 10]).interval_gate(Duration::ZERO, 2),
    )
    .await;
    assert_eq!(
        out,
        [
            (0, vec![0, 1]),
            (0, vec![2, 3]),
            (0, vec![4]),
            (10, vec![5])
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn precise_mode_keeps_the_same_instants_under_the_paused_clock() {
    let start = Instant::now();
    let gate = scheduled(start, vec![0, 0, 0, 5, 7])
        .interval_gate(10 * MS, 1)
        .precise();
    let at: Vec<u64> = record(start, gate)
        .await
        .iter()
        .map(|(ms, _)| *ms)
        .collect();
    assert_eq!(at, [0, 10, 20, 30, 40]);
}

#[tokio::test(start_paused = true)]
async fn keeps_pulling_upstream_while_the_gate_is_closed_up_to_max_batch() {
    let (tx, rx) = mpsc::unbounded();
    let pulled = Arc::new(AtomicUsize::new(0));
    let counted = rx.inspect({
        let pulled = Arc::clone(&pulled);
        move |_| {
            pulled.fetch_add(1, Ordering::SeqCst);
        }
    });
    let mut gate = task::spawn(counted.interval_gate(100 * MS, 2));
    tx.unbounded_send(0).unwrap();
    assert_ready_eq!(gate.poll_next(), Some(vec![0]));

    // Closed: items are pulled (the gate is woken by upstream) but held until 100 ms.
    assert_pending!(gate.poll_next());
    for i in 1..=3 {
        tx.unbounded_send(i).unwrap();
    }
    assert!(gate.is_woken());
    assert_pending!(gate.poll_next());
    // Items 1 and 2 are pulled and held; item 3 stays upstream, since a batch holds 2 at most.
    assert_eq!(pulled.load(Ordering::SeqCst), 3);

    time::advance(99 * MS).await;
    assert!(!gate.is_woken());
    assert_pending!(gate.poll_next());
    time::advance(MS).await;
    assert!(gate.is_woken());
    assert_ready_eq!(gate.poll_next(), Some(vec![1, 2]));
    assert_pending!(gate.poll_next());
    time::advance(100 * MS).await;
    assert_ready_eq!(gate.poll_next(), Some(vec![3]));
    drop(tx);
    assert_ready_eq!(gate.poll_next(), None);
}

#[tokio::test(start_paused = true)]
async fn into_parts_hands_back_the_buffered_items() {
    let mut gate = stream::iter(0..5).interval_gate(100 * MS, 3);
    assert_eq!(gate.next().await, Some(vec![0, 1, 2]));
    // Poll once: it pulls the rest, then waits for the interval.
    let mut spawned = task::spawn(gate);
    assert_pending!(spawned.poll_next());
    let (mut upstream, buffered) = spawned.into_inner().into_parts();
    assert_eq!(buffered, [3, 4]);
    assert_eq!(upstream.next().await, None);
}

#[tokio::test(start_paused = true)]
async fn errors_as_items_pass_in_order() {
    let items: Vec<Result<u8, &str>> = vec![Ok(1), Err("boom"), Ok(2)];
    let batches: Vec<_> = stream::iter(items.clone())
        .interval_gate(10 * MS, 1)
        .collect()
        .await;
    assert_eq!(batches.concat(), items);
}

#[test]
#[should_panic(expected = "`max_batch` must be at least 1")]
fn zero_max_batch_panics_naming_the_argument() {
    let _ = stream::iter(0..1).interval_gate(MS, 0);
}

#[test]
fn builds_outside_a_runtime() {
    let gate = stream::iter(0..3).interval_gate(MS, 2);
    assert_eq!(Stream::size_hint(&gate), (2, Some(3)));
}

#[tokio::test(start_paused = true)]
async fn an_absurd_interval_is_the_longest_wait_and_never_panics() {
    for interval in support::ABSURD {
        let start = Instant::now();
        // One item passes at once, and the stream ends at once.
        let one = record(start, stream::iter([7]).interval_gate(interval, 1)).await;
        assert_eq!((one, ms_since(start)), (vec![(0, vec![7])], 0));
        let two = record(start, stream::iter([1, 2]).interval_gate(interval, 1)).await;
        assert_eq!(two, [(0, vec![1]), (support::LONGEST_WAIT_MS, vec![2])]);
    }
}
