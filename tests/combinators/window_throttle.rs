//! Exact scenarios for `window_throttle`, in paused time (instants asserted to the millisecond).

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
async fn a_burst_goes_n_at_a_time_one_window_apart() {
    let start = Instant::now();
    let out = record(start, scheduled(start, vec![0; 5]).window_throttle(2, SEC)).await;
    assert_eq!(instants(&out), [0, 0, 1000, 1000, 2000]);
    // The README's first example is this burst: it says when each item goes out.
    let secs: Vec<String> = (instants(&out).iter())
        .map(|ms| format!("{} s", ms / 1000))
        .collect();
    let said = format!("// Goes out at {}.", secs.join(", "));
    support::pages::shown(support::pages::README, &said);
}

#[tokio::test(start_paused = true)]
async fn no_window_of_any_phase_holds_more_than_n() {
    let start = Instant::now();
    let out = record(
        start,
        scheduled(start, vec![0, 900, 1000, 1100]).window_throttle(2, SEC),
    )
    .await;
    // Item 3 must wait until 1900: [900, 1900) already holds 900 and 1000.
    assert_eq!(instants(&out), [0, 900, 1000, 1900]);
}

#[tokio::test(start_paused = true)]
async fn an_item_goes_at_its_arrival_when_the_window_has_room() {
    let start = Instant::now();
    let out = record(
        start,
        scheduled(start, vec![0, 300, 2500, 2600, 2700]).window_throttle(2, SEC),
    )
    .await;
    assert_eq!(instants(&out), [0, 300, 2500, 2600, 3500]);
}

#[tokio::test(start_paused = true)]
async fn lowering_the_rate_counts_the_emissions_already_made() {
    let start = Instant::now();
    let mut throttle = stream::iter(0..5).window_throttle(3, SEC);
    let handle = throttle.rate_handle();
    let mut at = Vec::new();
    while let Some(i) = throttle.next().await {
        at.push(ms_since(start));
        if i == 1 {
            // Two went at 0; at 2 per 2 s the third must wait until 2000, not go at once.
            handle.set_rate(2, 2 * SEC);
        }
    }
    assert_eq!(at, [0, 0, 2000, 2000, 4000]);
}

#[tokio::test(start_paused = true)]
async fn raising_the_rate_takes_effect_at_the_next_emission() {
    let start = Instant::now();
    let mut throttle = stream::iter(0..4).window_throttle(1, SEC);
    let handle = throttle.rate_handle();
    assert_eq!(throttle.next().await, Some(0));
    handle.set_rate(3, SEC);
    let rest: Vec<_> = throttle.map(|_| ms_since(start)).collect().await;
    assert_eq!(rest, [0, 0, 1000]);
}

#[tokio::test(start_paused = true)]
async fn it_wakes_exactly_when_the_oldest_emission_leaves_the_window() {
    let (tx, rx) = mpsc::unbounded();
    let mut throttle = task::spawn(rx.window_throttle(1, SEC));
    tx.unbounded_send(0).unwrap();
    assert_ready_eq!(throttle.poll_next(), Some(0));
    assert_pending!(throttle.poll_next());
    time::advance(400 * MS).await;
    tx.unbounded_send(1).unwrap();
    assert!(throttle.is_woken());
    assert_pending!(throttle.poll_next());
    time::advance(599 * MS).await;
    assert!(!throttle.is_woken());
    time::advance(MS).await;
    assert!(throttle.is_woken());
    assert_ready_eq!(throttle.poll_next(), Some(1));
}

#[tokio::test(start_paused = true)]
async fn ends_at_once_when_upstream_ends_even_with_the_window_full() {
    let start = Instant::now();
    let mut throttle = stream::iter(0..2).window_throttle(2, SEC);
    assert_eq!(throttle.next().await, Some(0));
    assert_eq!(throttle.next().await, Some(1));
    assert_eq!(throttle.next().await, None);
    assert_eq!(ms_since(start), 0);
    assert!(futures::stream::FusedStream::is_terminated(&throttle));
}

#[tokio::test(start_paused = true)]
async fn into_parts_hands_back_the_one_held_item() {
    let mut throttle = stream::iter(0..4).window_throttle(1, SEC);
    assert_eq!(throttle.next().await, Some(0));
    let mut spawned = task::spawn(throttle);
    assert_pending!(spawned.poll_next());
    let (upstream, held) = spawned.into_inner().into_parts();
    assert_eq!(held, Some(1));
    assert_eq!(upstream.collect::<Vec<_>>().await, [2, 3]);
}

#[tokio::test(start_paused = true)]
async fn errors_as_items_pass_in_order() {
    let items: Vec<Result<u8, &str>> = vec![Err("first"), Ok(1), Err("boom"), Ok(2)];
    let out: Vec<_> = stream::iter(items.clone())
        .window_throttle(1, MS)
        .collect()
        .await;
    assert_eq!(out, items);
}

#[test]
#[should_panic(expected = "`n` must be at least 1")]
fn zero_n_panics_naming_the_argument() {
    let _ = stream::iter(0..1).window_throttle(0, SEC);
}

#[test]
fn builds_outside_a_runtime() {
    let throttle = stream::iter(0..3).window_throttle(1, SEC);
    assert_eq!(futures::Stream::size_hint(&throttle), (3, Some(3)));
}

#[tokio::test(start_paused = true)]
async fn a_raise_from_another_task_wakes_a_waiting_throttle() {
    let start = Instant::now();
    let mut throttle = stream::iter(0..3).window_throttle(1, 10 * SEC);
    let handle = throttle.rate_handle();
    tokio::spawn(async move {
        time::sleep(SEC).await;
        handle.set_rate(5, 10 * SEC);
    });
    let at: Vec<_> = throttle.map(|_| ms_since(start)).collect().await;
    assert_eq!(at, [0, 1000, 1000]);
}

#[tokio::test(start_paused = true)]
async fn an_absurd_period_is_the_longest_wait_and_never_panics() {
    for per in support::ABSURD {
        let start = Instant::now();
        // One item passes at once, and the stream ends at once.
        let one = record(start, stream::iter([7]).window_throttle(1, per)).await;
        assert_eq!((one, ms_since(start)), (vec![(0, 7)], 0));
        let two = record(start, stream::iter([1, 2]).window_throttle(1, per)).await;
        assert_eq!(two, [(0, 1), (support::LONGEST_WAIT_MS, 2)]);
    }
}

#[tokio::test(start_paused = true)]
async fn raising_the_rate_while_an_item_waits_wakes_it_to_go_at_once() {
    let (tx, rx) = mpsc::unbounded();
    let mut throttle = task::spawn(rx.window_throttle(1, SEC));
    let handle = throttle.rate_handle();
    tx.unbounded_send(0).unwrap();
    tx.unbounded_send(1).unwrap();
    assert_ready_eq!(throttle.poll_next(), Some(0));
    // Item 1 waits for 1000 ms; at 300 ms the rate becomes 2 per second.
    assert_pending!(throttle.poll_next());
    time::advance(300 * MS).await;
    assert!(!throttle.is_woken());
    handle.set_rate(2, SEC);
    assert!(
        throttle.is_woken(),
        "the waiting throttle hears of the new rate"
    );
    assert_ready_eq!(throttle.poll_next(), Some(1));
    // A third item: two went within the last second (0 and 300 ms), so it waits for 1000.
    tx.unbounded_send(2).unwrap();
    assert_pending!(throttle.poll_next());
    time::advance(699 * MS).await;
    assert_pending!(throttle.poll_next());
    time::advance(MS).await;
    assert_ready_eq!(throttle.poll_next(), Some(2));
}

#[tokio::test(start_paused = true)]
async fn lowering_the_rate_while_an_item_waits_holds_it_until_the_new_rate_allows() {
    let (tx, rx) = mpsc::unbounded();
    let mut throttle = task::spawn(rx.window_throttle(2, SEC));
    let handle = throttle.rate_handle();
    for i in 0..3 {
        tx.unbounded_send(i).unwrap();
    }
    assert_ready_eq!(throttle.poll_next(), Some(0));
    assert_ready_eq!(throttle.poll_next(), Some(1));
    // Item 2 waits for 1000 ms; at 500 ms the rate drops to 1 per 2 s: it must wait until
    // 2000 ms (the last emission, at 0, plus 2 s), not go at 1000.
    assert_pending!(throttle.poll_next());
    time::advance(500 * MS).await;
    handle.set_rate(1, 2 * SEC);
    if throttle.is_woken() {
        assert_pending!(throttle.poll_next());
    }
    time::advance(500 * MS).await;
    assert_pending!(throttle.poll_next());
    time::advance(999 * MS).await;
    assert_pending!(throttle.poll_next());
    time::advance(MS).await;
    assert!(throttle.is_woken());
    assert_ready_eq!(throttle.poll_next(), Some(2));
}
