//! Send, Sync and Unpin of every public type, and coexistence with the peers' extension traits.

use std::pin::Pin;
use std::rc::Rc;
use std::time::Duration;

use futures::stream::{self, BoxStream, Iter};
use paceline::{GroupedWithin, IntervalGate, RateHandle, TimerThrottle, WindowThrottle};

fn is_send<T: Send>() {}
fn is_sync<T: Sync>() {}
fn is_unpin<T: Unpin>() {}

type Upstream = Iter<std::vec::IntoIter<u32>>;
type NotUnpin = Pin<Box<dyn futures::Stream<Item = u32> + Send + Sync>>;

#[test]
fn combinators_are_send_sync_and_unpin_when_upstream_is() {
    is_send::<IntervalGate<Upstream>>();
    is_sync::<IntervalGate<Upstream>>();
    is_unpin::<IntervalGate<Upstream>>();
    is_send::<TimerThrottle<Upstream>>();
    is_sync::<TimerThrottle<Upstream>>();
    is_unpin::<TimerThrottle<Upstream>>();
    is_send::<WindowThrottle<Upstream>>();
    is_sync::<WindowThrottle<Upstream>>();
    is_unpin::<WindowThrottle<Upstream>>();
    is_send::<GroupedWithin<Upstream>>();
    is_sync::<GroupedWithin<Upstream>>();
    is_unpin::<GroupedWithin<Upstream>>();
    // A pinned-box upstream is itself Unpin; so are the combinators around it.
    is_unpin::<IntervalGate<NotUnpin>>();
    is_send::<IntervalGate<BoxStream<'static, u32>>>();
}

#[test]
fn the_rate_handle_crosses_threads() {
    is_send::<RateHandle>();
    is_sync::<RateHandle>();
    is_unpin::<RateHandle>();
}

#[test]
fn a_stream_of_non_send_items_still_works_on_one_thread() {
    // Nothing in the combinators needs Send: an Rc item stream builds and runs locally.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    let items = vec![Rc::new(1), Rc::new(2)];
    let out: Vec<Vec<Rc<i32>>> = rt.block_on(futures::StreamExt::collect(
        paceline::PacelineExt::interval_gate(stream::iter(items), Duration::from_millis(1), 1),
    ));
    assert_eq!(out.len(), 2);
}

#[tokio::test(start_paused = true)]
async fn works_beside_futures_and_tokio_stream_extension_traits() {
    use futures::StreamExt as _;
    use paceline::prelude::*;
    use tokio_stream::StreamExt as _;

    // Methods of all three traits on one stream, with no name clash of ours. (futures and
    // tokio-stream clash with each other on `map`, hence the one qualified call.)
    let throttled = stream::iter(0..6u32).window_throttle(10, Duration::from_secs(1));
    let timed = throttled.timeout(Duration::from_secs(5));
    let grouped = futures::StreamExt::map(timed, Result::unwrap)
        .grouped_within(4, Duration::from_millis(10))
        .ready_chunks(1)
        .flat_map(stream::iter);
    let batches: Vec<Vec<u32>> = futures::StreamExt::collect(grouped).await;
    assert_eq!(batches, [vec![0, 1, 2, 3], vec![4, 5]]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn combinators_run_on_a_multi_thread_runtime() {
    use futures::StreamExt as _;
    use paceline::prelude::*;

    let task = tokio::spawn(async {
        stream::iter(0..10u32)
            .timer_throttle(5, Duration::from_millis(2))
            .interval_gate(Duration::ZERO, 3)
            .collect::<Vec<_>>()
            .await
    });
    let batches = task.await.unwrap();
    assert_eq!(batches.concat(), (0..10).collect::<Vec<_>>());
}

#[test]
fn the_gate_and_its_streams_cross_threads() {
    use paceline::{ConfigError, Error, Gate, GateStats, Page, RateLimited, Scope};
    is_send::<Gate<std::io::Error>>();
    is_sync::<Gate<std::io::Error>>();
    is_unpin::<Gate<std::io::Error>>();
    is_send::<RateLimited>();
    is_send::<Scope>();
    is_sync::<Scope>();
    is_send::<GateStats>();
    is_send::<Error<std::io::Error>>();
    is_sync::<ConfigError>();
    is_send::<Page<u32, String>>();
    type Call = std::future::Ready<Result<u32, std::io::Error>>;
    type Map = paceline::ThrottledMap<Upstream, fn(u32) -> Call, Call, std::io::Error>;
    is_send::<Map>();
    is_unpin::<Map>();
    is_send::<paceline::ThrottledMapUnordered<Upstream, fn(u32) -> Call, Call, std::io::Error>>();
    is_send::<
        paceline::Paged<
            std::io::Error,
            fn(Option<u32>) -> std::future::Ready<Result<Page<u32, u32>, std::io::Error>>,
            std::future::Ready<Result<Page<u32, u32>, std::io::Error>>,
            u32,
            u32,
        >,
    >();
}

#[cfg(feature = "redis")]
#[test]
fn the_redis_store_crosses_threads() {
    is_send::<paceline::RedisStore>();
    is_sync::<paceline::RedisStore>();
    is_send::<paceline::StoreError>();
    is_sync::<paceline::StoreError>();
}

#[cfg(feature = "redis-tls")]
#[test]
fn the_tls_settings_and_the_check_cross_threads() {
    is_send::<paceline::RedisTls>();
    is_sync::<paceline::RedisTls>();
    // A program may spawn the check.
    fn sends<T: Send>(_: &T) {}
    let store = paceline::RedisStore::open("redis://127.0.0.1:1", "ns").unwrap();
    sends(&store.check());
}

#[cfg(feature = "http")]
#[test]
fn the_served_sim_crosses_threads() {
    is_send::<paceline_sim::http::HttpServer>();
    is_sync::<paceline_sim::http::HttpServer>();
}
