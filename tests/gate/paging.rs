//! Paging through a gate: rows in order, at most one page ahead, throttled pages retried
//! without losing or repeating rows.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use paceline::{Error, Gate, Page, RateLimited};
use tokio::time;

#[derive(Debug, Clone, PartialEq)]
enum ApiError {
    Slow,
    Broken,
}

fn gate() -> Gate<ApiError> {
    Gate::builder(|e: &ApiError| {
        (*e == ApiError::Slow).then(|| RateLimited::new().retry_after(Duration::from_secs(1)))
    })
    .max_retries(3)
    .build()
    .unwrap()
}

/// A listing of `0..total`, `per_page` rows a page, the token being the next offset; pages
/// whose offsets are in `throttle_once` fail once with a throttle. Records each fetch.
fn listing(
    total: u32,
    per_page: u32,
    throttle_once: Vec<u32>,
    fetches: Arc<Mutex<Vec<u32>>>,
) -> impl FnMut(Option<u32>) -> futures::future::BoxFuture<'static, Result<Page<u32, u32>, ApiError>>
{
    let throttle_once = Arc::new(Mutex::new(throttle_once));
    move |token| {
        let fetches = Arc::clone(&fetches);
        let throttle_once = Arc::clone(&throttle_once);
        Box::pin(async move {
            let from = token.unwrap_or(0);
            fetches.lock().unwrap().push(from);
            time::sleep(Duration::from_millis(100)).await;
            let mut once = throttle_once.lock().unwrap();
            if let Some(i) = once.iter().position(|&o| o == from) {
                once.remove(i);
                return Err(ApiError::Slow);
            }
            let to = (from + per_page).min(total);
            Ok(Page {
                rows: (from..to).collect(),
                next: (to < total).then_some(to),
            })
        })
    }
}

#[tokio::test(start_paused = true)]
async fn rows_come_in_order_and_throttled_pages_are_retried_without_loss_or_repeat() {
    let fetches = Arc::new(Mutex::new(Vec::new()));
    let rows: Vec<u32> = gate()
        .paged(listing(10, 3, vec![3, 9], Arc::clone(&fetches)))
        .map(Result::unwrap)
        .collect()
        .await;
    assert_eq!(rows, (0..10).collect::<Vec<_>>());
    assert_eq!(*fetches.lock().unwrap(), [0, 3, 3, 6, 9, 9]);
}

#[tokio::test(start_paused = true)]
async fn it_fetches_at_most_one_page_ahead_and_nothing_once_the_consumer_stops() {
    let fetches = Arc::new(Mutex::new(Vec::new()));
    let mut rows = gate().paged(listing(100, 5, vec![], Arc::clone(&fetches)));
    assert_eq!(rows.next().await, Some(Ok(0)));
    // Page 0 is being read; page 5 is fetched meanwhile, but not page 10.
    time::sleep(Duration::from_secs(10)).await;
    assert_eq!(rows.next().await, Some(Ok(1)));
    time::sleep(Duration::from_secs(10)).await;
    assert_eq!(*fetches.lock().unwrap(), [0, 5]);
    for expected in 2..6 {
        assert_eq!(rows.next().await, Some(Ok(expected)));
    }
    // Now reading page 5: page 10 may be fetched.
    time::sleep(Duration::from_secs(10)).await;
    assert_eq!(*fetches.lock().unwrap(), [0, 5, 10]);
    drop(rows);
    time::sleep(Duration::from_secs(10)).await;
    assert_eq!(*fetches.lock().unwrap(), [0, 5, 10]);
}

#[tokio::test(start_paused = true)]
async fn an_error_comes_after_the_rows_fetched_before_it_and_ends_the_stream() {
    let gate = gate();
    let mut calls = 0;
    let rows: Vec<_> = gate
        .paged(move |token: Option<u32>| {
            calls += 1;
            let n = calls;
            async move {
                match (n, token) {
                    (1, None) => Ok(Page {
                        rows: vec![1, 2],
                        next: Some(2),
                    }),
                    _ => Err(ApiError::Broken),
                }
            }
        })
        .collect()
        .await;
    assert_eq!(rows, [Ok(1), Ok(2), Err(Error::Call(ApiError::Broken))]);
}

#[tokio::test(start_paused = true)]
async fn a_page_throttled_past_the_retry_limit_gives_up() {
    let gate = gate();
    let rows: Vec<Result<u32, _>> = gate
        .paged(|_: Option<u32>| async { Err::<Page<u32, u32>, _>(ApiError::Slow) })
        .collect()
        .await;
    assert_eq!(
        rows,
        [Err(Error::GaveUp {
            attempts: 4,
            last: ApiError::Slow
        })]
    );
}

#[tokio::test(start_paused = true)]
async fn an_empty_listing_ends_after_one_fetch() {
    let fetches = Arc::new(Mutex::new(Vec::new()));
    let rows: Vec<_> = gate()
        .paged(listing(0, 3, vec![], Arc::clone(&fetches)))
        .collect()
        .await;
    assert!(rows.is_empty());
    assert_eq!(*fetches.lock().unwrap(), [0]);
}

#[tokio::test(start_paused = true)]
async fn the_listing_is_terminated_only_once_its_last_row_or_its_error_is_taken() {
    use futures::stream::FusedStream;
    let fetches = Arc::new(Mutex::new(Vec::new()));
    let gate = gate();
    let mut rows = Box::pin(gate.paged(listing(3, 2, vec![], Arc::clone(&fetches))));
    assert!(!rows.is_terminated(), "nothing fetched yet");
    assert_eq!(rows.next().await, Some(Ok(0)));
    assert!(format!("{rows:?}").starts_with("Paged {"), "{rows:?}");
    assert_eq!(rows.next().await, Some(Ok(1)));
    assert!(!rows.is_terminated(), "the last page is still to come");
    assert_eq!(rows.next().await, Some(Ok(2)));
    assert!(!rows.is_terminated(), "the end is seen only when asked for");
    assert_eq!(rows.next().await, None);
    assert!(rows.is_terminated());

    // A failed fetch ends the listing once its error has been handed out.
    let broken = |_: Option<u32>| async { Err::<Page<u32, u32>, _>(ApiError::Broken) };
    let mut rows = Box::pin(gate.paged(broken));
    assert_eq!(rows.next().await, Some(Err(Error::Call(ApiError::Broken))));
    assert!(!rows.is_terminated(), "None is still to be handed out");
    assert_eq!(rows.next().await, None);
    assert!(rows.is_terminated());
}

/// A tenant's listing is a call of its scope, page by page: its throttle, scoped to it, holds
/// back its own pages (retried for the same token, nothing lost) while another tenant's
/// listing goes on; a page that cannot start within its `max_wait` ends the listing with a
/// deadline, the rows before it yielded.
#[tokio::test(start_paused = true)]
async fn a_scoped_listing_waits_for_its_own_scope_only() {
    use paceline::{CallOptions, Scope};
    let gate: Gate<Scope> = Gate::builder(|tenant: &Scope| {
        Some(
            RateLimited::new()
                .retry_after(Duration::from_secs(10))
                .scope(tenant.clone()),
        )
    })
    .max_retries(3)
    .build()
    .unwrap();
    let start = time::Instant::now();
    let throttled = Arc::new(Mutex::new(false));
    let listing = |tenant: &'static str, options: CallOptions| {
        let throttled = Arc::clone(&throttled);
        gate.paged_with(options.scopes([tenant]), move |page: Option<u32>| {
            let throttled = Arc::clone(&throttled);
            async move {
                let page = page.unwrap_or(0);
                // Tenant a's second page is throttled once.
                if tenant == "a"
                    && page == 1
                    && !std::mem::replace(&mut *throttled.lock().unwrap(), true)
                {
                    return Err(Scope::from(tenant));
                }
                let next = (page < 2).then_some(page + 1);
                Ok(Page {
                    rows: vec![(page, start.elapsed())],
                    next,
                })
            }
        })
    };
    let (a, b): (Vec<_>, Vec<_>) = futures::join!(
        listing("a", CallOptions::new())
            .map(Result::unwrap)
            .collect(),
        listing("b", CallOptions::new())
            .map(Result::unwrap)
            .collect(),
    );
    let secs = Duration::from_secs;
    assert_eq!(a, [(0, secs(0)), (1, secs(10)), (2, secs(10))]);
    assert_eq!(
        b,
        [(0, secs(0)), (1, secs(0)), (2, secs(0))],
        "b is not held by a's backoff"
    );
    // Held by its own backoff longer than a page may wait: the listing ends there.
    gate.call_in(["c"], || async { Err::<(), _>(Scope::from("c")) })
        .await
        .ok();
    let hurried = CallOptions::new().max_wait(Duration::from_secs(1));
    let c: Vec<_> = listing("c", hurried).collect().await;
    assert!(
        matches!(c.as_slice(), [Err(Error::Deadline { .. })]),
        "{c:?}"
    );
}
