//! The gate's shared state in a real Redis Cluster of three `redis-server` nodes, started on
//! free loopback ports for each test. These run in real time.

use std::time::Duration;

use futures::StreamExt;
use paceline::prelude::*;
use paceline::{Gate, RateLimited, RedisStore, StoreError};
use tokio::time::Instant;

use crate::support::max_in_window;
use crate::support::redis_server::RedisCluster;

const MS: Duration = Duration::from_millis(1);

#[derive(Debug, Clone)]
struct Slow(Duration);

fn gate(cluster: &RedisCluster, namespace: &str, rate: Option<f64>) -> Gate<Slow> {
    let store = RedisStore::open_cluster(cluster.seeds(), namespace).expect("valid seeds");
    let mut builder = Gate::builder(|slow: &Slow| Some(RateLimited::new().retry_after(slow.0)))
        .max_retries(0)
        .max_in_flight(8)
        .store(store);
    if let Some(rate) = rate {
        builder = builder.rate(rate);
    }
    builder.build().unwrap()
}

/// Makes `each` calls through every gate at once; returns when each call started.
async fn run_calls(gates: &[Gate<Slow>], each: usize) -> Vec<Instant> {
    let runs = gates.iter().map(|gate| {
        futures::stream::iter(0..each)
            .throttled_map(gate, |_| async { Ok::<_, Slow>(Instant::now()) })
            .map(Result::unwrap)
            .collect::<Vec<_>>()
    });
    let mut starts: Vec<Instant> = futures::future::join_all(runs).await.concat();
    starts.sort();
    starts
}

#[test]
fn a_cluster_needs_a_seed_and_each_seed_must_be_a_redis_url() {
    let none: [&str; 0] = [];
    assert_eq!(
        RedisStore::open_cluster(none, "ns").unwrap_err(),
        StoreError::NoSeeds
    );
    let bad = RedisStore::open_cluster(["redis://127.0.0.1:7000", "http://nope"], "ns");
    assert!(matches!(bad, Err(StoreError::InvalidUrl { .. })), "{bad:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gates_share_a_backoff_and_a_budget_through_the_cluster() {
    let cluster = RedisCluster::start();
    // The namespace's slot lives on some node; its keys all go there.
    let slot = cluster.slot("paceline:{ads}:pace");
    let (a, b) = (
        gate(&cluster, "ads", Some(20.0)),
        gate(&cluster, "ads", Some(20.0)),
    );

    // One budget: 40 starts of two gates at 20/s together, reserved 50 ms apart on the
    // clock of the node that serves the slot. A start can come later than its slot by the
    // reply's trip, never earlier: 39 intervals at least, less one trip; and in any second,
    // 20 slots plus at most one start delayed from the second before.
    let starts = run_calls(&[a.clone(), b.clone()], 20).await;
    let span = starts[39] - starts[0];
    assert!(span >= 1900 * MS, "span {span:?}");
    assert!(span < 3500 * MS, "span {span:?}: budget wasted");
    let most = max_in_window(&starts, Duration::from_secs(1));
    assert!(most <= 21, "{most} starts in one second");
    assert_eq!(a.stats().store_unanswered + b.stats().store_unanswered, 0);
    assert!(
        cluster.cli(cluster.owner(slot), &["exists", "paceline:{ads}:pace"]) == "1",
        "the budget's key is on the node that serves its slot"
    );

    // One backoff: A is throttled for 400 ms; B's next call waits it out.
    let throttled_at = Instant::now();
    let result = a.call(|| async { Err::<(), _>(Slow(400 * MS)) }).await;
    assert!(result.unwrap_err().is_gave_up());
    // The backoff reaches Redis without A's call waiting for it: wait for its key.
    let owner = cluster.owner(slot);
    while cluster.cli(owner, &["exists", "paceline:{ads}:backoff"]) != "1" {
        assert!(
            throttled_at.elapsed() < Duration::from_secs(5),
            "no backoff key"
        );
        tokio::time::sleep(MS).await;
    }
    let b_start = b
        .call(|| async { Ok::<_, Slow>(Instant::now()) })
        .await
        .unwrap();
    assert!(
        b_start - throttled_at >= 400 * MS,
        "B started {:?} after A's throttle",
        b_start - throttled_at
    );
    assert_eq!(b.stats().held_by_fleet, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_migrating_mid_run_loses_nothing_and_the_gates_follow_it() {
    let cluster = RedisCluster::start();
    let slot = cluster.slot("paceline:{moving}:pace");
    let (a, b) = (
        gate(&cluster, "moving", Some(100.0)),
        gate(&cluster, "moving", Some(100.0)),
    );
    let from = cluster.owner(slot);
    let to = (from + 1) % cluster.nodes.len();
    // 300 calls at 100/s take 3 s; the slot moves to another node after about one.
    let migrate = async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        tokio::task::block_in_place(|| cluster.migrate(slot, to));
    };
    let items = |gate: Gate<Slow>| async move {
        futures::stream::iter(0..150)
            .throttled_map(&gate, |i| async move { Ok::<_, Slow>(i) })
            .map(Result::unwrap)
            .collect::<Vec<_>>()
            .await
    };
    let (a_items, b_items, ()) = tokio::join!(items(a.clone()), items(b.clone()), migrate);
    // Every item came through once, in order, through both gates.
    let expected: Vec<i32> = (0..150).collect();
    assert_eq!(a_items, expected);
    assert_eq!(b_items, expected);
    assert_eq!(cluster.owner(slot), to, "the slot moved");
    // The gates followed the slot: after the move, their starts are reserved on the new node.
    let unanswered = a.stats().store_unanswered + b.stats().store_unanswered;
    let after = run_calls(&[a.clone(), b.clone()], 10).await;
    assert_eq!(after.len(), 20);
    assert_eq!(
        a.stats().store_unanswered + b.stats().store_unanswered,
        unanswered,
        "every start after the move was answered by the cluster"
    );
    assert_eq!(cluster.cli(to, &["exists", "paceline:{moving}:pace"]), "1");
}
