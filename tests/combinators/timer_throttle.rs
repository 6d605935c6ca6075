//! Exact scenarios for `timer_throttle`, in paused time (instants asserted to the millisecond).

use std::time::Duration;

use futures::{StreamExt, channel::mpsc, stream};
use paceline::prelude::*;
use tokio::time::{self, Instant};
use tokio_test::{assert_pending, assert_ready_eq, task};

use crate::support::{self, ms_since, record, scheduled};

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

fn instants(out: &[(u64, usize)]) -> Vec<u64> {
    out.iter().map(|(ms, _)| *ms).collect()
}

#[tokio::test(start_paused = true)]
async fn seven_at_once_through_three_per_second() {
    let start = Instant::now();
    let out = record(start, scheduled(start, vec![0; 7]).timer_throttle(3, SEC)).await;
    assert_eq!(instants(&out), [0, 0, 0, 1000, 1000, 1000, 2000]);
    assert_eq!(
        out.iter().map(|(_, i)| *i).collect::<Vec<_>>(),
        (0..7).collect::<Vec<_>>()
    );
}

#[tokio::test(start_paused = true)]
async fn an_item_at_an_idle_throttle_passes_at_once_with_a_full_set_of_vouchers() {
    let start = Instant::now();
    let arrivals = vec![0, 1500, 1500, 1500, 1500];
    let out = record(start, scheduled(start, arrivals).timer_throttle(3, SEC)).await;
    // The period [0, 1000) ended with nothing waiting, so the throttle went idle; the item at
    // 1500 opens a new period [1500, 2500) with 3 vouchers.
    assert_eq!(instants(&out), [0, 1500, 1500, 1500, 2500]);
}

#[tokio::test(start_paused = true)]
async fn a_waiting_item_opens_the_next_period_at_once_at_the_period_end() {
    let start = Instant::now();
    // 2 per second: items 0 and 1 use the first period; 2 waits for its end (1000); the next
    // period is [1000, 2000), so 3 (arriving at 1400) uses its second voucher and 4 waits.
    let arrivals = vec![0, 0, 0, 1400, 1400];
    let out = record(start, scheduled(start, arrivals).timer_throttle(2, SEC)).await;
    assert_eq!(instants(&out), [0, 0, 1000, 1400, 2000]);
}

#[tokio::test(start_paused = true)]
async fn the_guides_trickle_timeline_shows_the_weak_guarantee() {
    let start = Instant::now();
    let out = record(
        start,
        scheduled(start, vec![0, 900, 1000, 1100]).timer_throttle(2, SEC),
    )
    .await;
    // At most 2 in each of its own periods, but 3 in the window [900, 1900).
    assert_eq!(instants(&out), [0, 900, 1000, 1100]);
}

#[tokio::test(start_paused = true)]
async fn its_timer_is_off_while_idle() {
    let (tx, rx) = mpsc::unbounded();
    let mut throttle = task::spawn(rx.timer_throttle(1, SEC));
    tx.unbounded_send(0).unwrap();
    assert_ready_eq!(throttle.poll_next(), Some(0));
    assert_pending!(throttle.poll_next());
    // The period ends at 1 s with nothing waiting: nothing wakes the throttle.
    time::advance(5 * SEC).await;
    assert!(!throttle.is_woken());
    tx.unbounded_send(1).unwrap();
    assert!(throttle.is_woken());
    assert_ready_eq!(throttle.poll_next(), Some(1));
}

#[tokio::test(start_paused = true)]
async fn with_vouchers_spent_it_wakes_exactly_at_the_period_end() {
    let (tx, rx) = mpsc::unbounded();
    let mut throttle = task::spawn(rx.timer_throttle(1, SEC));
    tx.unbounded_send(0).unwrap();
    tx.unbounded_send(1).unwrap();
    assert_ready_eq!(throttle.poll_next(), Some(0));
    assert_pending!(throttle.poll_next());
    time::advance(999 * MS).await;
    assert!(!throttle.is_woken());
    time::advance(MS).await;
    assert!(throttle.is_woken());
    assert_ready_eq!(throttle.poll_next(), Some(1));
}

#[tokio::test(start_paused = true)]
async fn a_new_rate_takes_effect_from_the_next_period() {
    let start = Instant::now();
    let mut throttle = stream::iter(0..6).timer_throttle(2, SEC);
    let handle = throttle.rate_handle();
    let mut at = Vec::new();
    while let Some(i) = throttle.next().await {
        at.push(ms_since(start));
        if i == 0 {
            // Mid-period: the running period keeps its 2 vouchers and its length.
            handle.set_rate(3, 2 * SEC);
        }
    }
    assert_eq!(at, [0, 0, 1000, 1000, 1000, 3000]);
    assert_eq!(handle.rate(), (3, 2 * SEC));
}

#[tokio::test(start_paused = true)]
async fn into_parts_hands_back_the_one_held_item() {
    let mut throttle = stream::iter(0..5).timer_throttle(2, SEC);
    assert_eq!(throttle.next().await, Some(0));
    assert_eq!(throttle.next().await, Some(1));
    let mut spawned = task::spawn(throttle);
    assert_pending!(spawned.poll_next());
    let (upstream, held) = spawned.into_inner().into_parts();
    assert_eq!(held, Some(2));
    assert_eq!(upstream.collect::<Vec<_>>().await, [3, 4]);
}

#[tokio::test(start_paused = true)]
async fn ends_at_once_when_upstream_ends() {
    let start = Instant::now();
    let mut throttle = stream::iter(0..3).timer_throttle(3, SEC);
    for i in 0..3 {
        assert_eq!(throttle.next().await, Some(i));
    }
    assert_eq!(throttle.next().await, None);
    assert_eq!(ms_since(start), 0);
    assert!(futures::stream::FusedStream::is_terminated(&throttle));
}

#[tokio::test(start_paused = true)]
async fn errors_as_items_pass_in_order() {
    let items: Vec<Result<u8, &str>> = vec![Ok(1), Err("boom"), Ok(2), Err("again")];
    let out: Vec<_> = stream::iter(items.clone())
        .timer_throttle(1, MS)
        .collect()
        .await;
    assert_eq!(out, items);
}

#[test]
#[should_panic(expected = "`n` must be at least 1")]
fn zero_n_panics_naming_the_argument() {
    let _ = stream::iter(0..1).timer_throttle(0, SEC);
}

#[test]
#[should_panic(expected = "`n` must be at least 1")]
fn a_zero_rate_through_the_handle_panics_naming_the_argument() {
    let mut throttle = stream::iter(0..1).timer_throttle(1, SEC);
    throttle.rate_handle().set_rate(0, SEC);
}

#[test]
fn builds_outside_a_runtime() {
    let throttle = stream::iter(0..3).timer_throttle(1, SEC);
    assert_eq!(futures::Stream::size_hint(&throttle), (3, Some(3)));
}

#[tokio::test(start_paused = true)]
async fn an_absurd_period_is_the_longest_wait_and_never_panics() {
    for per in support::ABSURD {
        let start = Instant::now();
        // One item passes at once, and the stream ends at once.
        let one = record(start, stream::iter([7]).timer_throttle(1, per)).await;
        assert_eq!((one, ms_since(start)), (vec![(0, 7)], 0));
        let two = record(start, stream::iter([1, 2]).timer_throttle(1, per)).await;
        assert_eq!(two, [(0, 1), (support::LONGEST_WAIT_MS, 2)]);
    }
}

#[tokio::test(start_paused = true)]
async fn a_rate_raised_while_an_item_waits_lets_it_go_at_the_period_end_not_before() {
    let (tx, rx) = mpsc::unbounded();
    let mut throttle = task::spawn(rx.timer_throttle(1, SEC));
    let handle = throttle.rate_handle();
    for i in 0..4 {
        tx.unbounded_send(i).unwrap();
    }
    assert_ready_eq!(throttle.poll_next(), Some(0));
    // Item 1 waits for the period's end at 1000 ms; at 300 ms the rate becomes 3 per second.
    // The running period keeps its voucher count and its end.
    assert_pending!(throttle.poll_next());
    time::advance(300 * MS).await;
    handle.set_rate(3, SEC);
    if throttle.is_woken() {
        assert_pending!(throttle.poll_next());
    }
    time::advance(699 * MS).await;
    assert_pending!(throttle.poll_next());
    time::advance(MS).await;
    assert!(throttle.is_woken());
    // At 1000 ms the next period opens with the new rate: 3 vouchers, all three go.
    assert_ready_eq!(throttle.poll_next(), Some(1));
    assert_ready_eq!(throttle.poll_next(), Some(2));
    assert_ready_eq!(throttle.poll_next(), Some(3));
}
