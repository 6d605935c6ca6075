//! Scopes take turns in the gate's line: a tenant's backlog holds back another tenant's calls
//! by a turn each, not by the whole backlog. Against the simulated API in paused time, beside
//! the same calls with no scope, which wait in one line in arrival order.

use std::time::Duration;

use paceline::{CallOptions, Gate, Priority, RateLimited, ScopeLimits};
use paceline_sim::{Policy, Rejected, Server};
use tokio::time::{Instant, sleep_until};

use crate::support;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[derive(Debug, Default, PartialEq)]
struct Tenant {
    calls: usize,
    /// The longest a call waited from its arrival to its start, in ms.
    longest_wait: u64,
    /// When its last answer came, in ms.
    last_answer: u64,
}

#[derive(Debug, Default, PartialEq)]
struct Figures {
    big: Tenant,
    small: Tenant,
    throttled: usize,
}

/// An API that allows 10 calls a second (a bucket of 10), 50 ms away, and a gate paced at 10
/// a second with 4 calls in flight.
fn api_and_gate() -> (Server, Gate<Rejected>) {
    let server = Server::builder()
        .latency(ms(50))
        .global(Policy::token_bucket(10.0, 10))
        .build();
    let gate = Gate::builder(|_: &Rejected| Some(RateLimited::new()))
        .max_in_flight(4)
        .rate(10.0)
        .build()
        .unwrap();
    (server, gate)
}

/// A call to `server` through `gate` with `options`, made `arrive_ms` after `start`: how long
/// it waited from its arrival to its start, and when its answer came, in ms from `start`.
async fn call_at(
    (server, gate): (Server, Gate<Rejected>),
    options: CallOptions,
    start: Instant,
    arrive_ms: u64,
) -> (u64, u64) {
    sleep_until(start + ms(arrive_ms)).await;
    let arrived = Instant::now();
    let waited = gate
        .call_with(options, || {
            let server = server.clone();
            // The future is made as the call arrives; it runs when it starts.
            async move {
                let waited = support::ms_since(arrived);
                server.call(None).await.map(|_| waited)
            }
        })
        .await
        .unwrap();
    (waited, support::ms_since(start))
}

/// A tenant with 200 calls at 0 s and one with 10 calls at 1 s, through [`api_and_gate`];
/// each call in its tenant's scope, or in none.
async fn two_tenants(scoped: bool) -> Figures {
    let (server, gate) = api_and_gate();
    let start = Instant::now();
    let call = |tenant: &'static str, arrive_ms: u64| {
        let options = if scoped {
            CallOptions::new().scopes([tenant])
        } else {
            CallOptions::new()
        };
        let pair = (server.clone(), gate.clone());
        async move {
            let (waited, at) = call_at(pair, options, start, arrive_ms).await;
            (tenant, waited, at)
        }
    };
    let big = (0..200).map(|_| call("big", 0));
    let small = (0..10).map(|_| call("small", 1_000));
    let ends = futures::future::join_all(big.chain(small)).await;
    let mut figures = Figures::default();
    for (tenant, waited, at) in ends {
        let tenant = match tenant {
            "big" => &mut figures.big,
            _ => &mut figures.small,
        };
        tenant.calls += 1;
        tenant.longest_wait = tenant.longest_wait.max(waited);
        tenant.last_answer = tenant.last_answer.max(at);
    }
    figures.throttled = server.log().rejected();
    figures
}

#[tokio::test(start_paused = true)]
async fn a_tenants_backlog_holds_back_another_by_a_turn_not_by_the_backlog() {
    // In one line, the small tenant's 10 calls wait behind the 190 of the big one's still
    // waiting at 1 s: 19.9 s each, the last answered at 21 s.
    assert_eq!(
        two_tenants(false).await,
        Figures {
            big: Tenant {
                calls: 200,
                longest_wait: 19_900,
                last_answer: 20_000,
            },
            small: Tenant {
                calls: 10,
                longest_wait: 19_900,
                last_answer: 21_000,
            },
            throttled: 0,
        }
    );
    // Taking turns, from 1 s the two share the rate: the small tenant's 10 calls start
    // every other 100 ms, the last answered at 3 s (its ideal, half the rate from 1 s, is
    // 2.9 s); the big tenant's last call ends when it did, a call later. Nothing throttled.
    assert_eq!(
        two_tenants(true).await,
        Figures {
            big: Tenant {
                calls: 200,
                longest_wait: 20_900,
                last_answer: 21_000,
            },
            small: Tenant {
                calls: 10,
                longest_wait: 1_900,
                last_answer: 3_000,
            },
            throttled: 0,
        }
    );
}

#[derive(Debug, Default, PartialEq)]
struct Clicks {
    /// The longest an interactive call waited from its arrival to its start, in ms.
    longest_wait: u64,
    /// All of their waits, in ms.
    total_wait: u64,
    /// When the batch's last answer came, in ms.
    batch_done: u64,
    throttled: usize,
}

/// A batch of 200 calls at 0 s and a user's call every 2 s from 1 s (10 of them), through
/// [`api_and_gate`]; the batch's calls at `Priority::Bulk` and the user's at `Interactive`,
/// or all at the default priority.
async fn batch_and_clicks(prioritised: bool) -> Clicks {
    let (server, gate) = api_and_gate();
    let start = Instant::now();
    let call = |priority: Priority, arrive_ms: u64| {
        let priority = if prioritised {
            priority
        } else {
            Priority::Normal
        };
        let options = CallOptions::new().priority(priority);
        call_at((server.clone(), gate.clone()), options, start, arrive_ms)
    };
    let batch = futures::future::join_all((0..200).map(|_| call(Priority::Bulk, 0)));
    let clicks = (0..10).map(|k| call(Priority::Interactive, 1_000 + 2_000 * k));
    let (batch, clicks) = futures::join!(batch, futures::future::join_all(clicks));
    Clicks {
        longest_wait: clicks.iter().map(|&(waited, _)| waited).max().unwrap(),
        total_wait: clicks.iter().map(|&(waited, _)| waited).sum(),
        batch_done: batch.iter().map(|&(_, at)| at).max().unwrap(),
        throttled: server.log().rejected(),
    }
}

#[tokio::test(start_paused = true)]
async fn an_interactive_call_goes_ahead_of_a_queued_batch() {
    // At one priority, the user's first call waits behind the 190 of the batch still
    // waiting at 1 s, 19 s, and each later one as long, less the 2 s between them.
    assert_eq!(
        batch_and_clicks(false).await,
        Clicks {
            longest_wait: 19_000,
            total_wait: 104_500,
            batch_done: 20_000,
            throttled: 0,
        }
    );
    // Interactive, each waits for the next start the rate allows and no more: 100 ms at
    // most, 1 s in all. The batch ends the 10 starts they took later.
    assert_eq!(
        batch_and_clicks(true).await,
        Clicks {
            longest_wait: 100,
            total_wait: 1_000,
            batch_done: 21_000,
            throttled: 0,
        }
    );
}

/// A steady stream of interactive calls, more than the rate allows, beside a batch: the batch
/// still has a start in every ten, and ends; without its share it would wait for the stream.
#[tokio::test(start_paused = true)]
async fn a_batch_behind_a_steady_interactive_stream_still_has_its_share() {
    let gate = Gate::builder(|_: &()| Some(RateLimited::new()))
        .max_in_flight(1)
        .rate(10.0)
        .build()
        .unwrap();
    let start = Instant::now();
    let call = |priority: Priority| {
        let gate = gate.clone();
        async move {
            let options = CallOptions::new().priority(priority);
            gate.call_with(options, || async { Ok::<_, ()>(()) })
                .await
                .unwrap();
            support::ms_since(start)
        }
    };
    // 20 bulk calls and 200 interactive ones, all waiting at once behind a first call.
    let bulk = futures::future::join_all((0..20).map(|_| call(Priority::Bulk)));
    let interactive = futures::future::join_all((0..200).map(|_| call(Priority::Interactive)));
    let (bulk, interactive) = futures::join!(bulk, interactive);
    // Starts every 100 ms: the bulk calls' at every ninth, from the first call on.
    let bulk_starts: Vec<u64> = bulk.iter().map(|at| at / 100).collect();
    assert_eq!(bulk_starts, (0..20).map(|k| k * 9).collect::<Vec<_>>());
    assert_eq!(interactive.iter().max(), Some(&21_900));
}

/// A bounded line counts against a call the waiters of its priority and higher ones only: a
/// backlog of bulk calls that fills the bound turns away the next bulk call, never an
/// interactive one, which starts ahead of the backlog.
#[tokio::test(start_paused = true)]
async fn a_bulk_backlog_at_the_bound_never_turns_away_an_interactive_call() {
    use paceline::Error;

    let gate = Gate::builder(|_: &()| Some(RateLimited::new()))
        .max_in_flight(1)
        .max_queued(2)
        .build()
        .unwrap();
    let start = Instant::now();
    let call = |priority: Priority, arrive_ms: u64| {
        let gate = gate.clone();
        async move {
            sleep_until(start + ms(arrive_ms)).await;
            let options = CallOptions::new().priority(priority);
            let ended = gate
                .call_with(options, || async {
                    tokio::time::sleep(ms(100)).await;
                    Ok::<_, ()>(())
                })
                .await;
            match ended {
                Ok(()) => Some(support::ms_since(start)),
                Err(Error::Overloaded(_)) => None,
                Err(other) => panic!("{other:?}"),
            }
        }
    };
    // A bulk call runs; two wait (the bound); a third is turned away at 1 ms. Then three
    // interactive calls: two wait, ahead of the bulk ones; the third is turned away, as is a
    // normal one, which counts the interactive calls waiting.
    let ends = futures::future::join_all([
        call(Priority::Bulk, 0),
        call(Priority::Bulk, 0),
        call(Priority::Bulk, 0),
        call(Priority::Bulk, 1),
        call(Priority::Interactive, 2),
        call(Priority::Interactive, 2),
        call(Priority::Interactive, 3),
        call(Priority::Normal, 4),
    ])
    .await;
    assert_eq!(
        ends,
        [
            Some(100),
            Some(400),
            Some(500),
            None,
            Some(200),
            Some(300),
            None,
            None
        ]
    );
    assert_eq!(gate.stats().turned_away, 3);
}

/// A paying tenant of weight `paying_weight` and a free one of weight 1, each with 40 calls
/// at 0 s, through [`api_and_gate`] with limits per scope that set only the weights (the
/// paying tenant's set while its first 2 calls wait, if `set_while_waiting`): when each
/// tenant's last answer came, in ms, and how many calls the server refused.
async fn paying_and_free(paying_weight: u32, set_while_waiting: bool) -> (u64, u64, usize) {
    let (server, _) = api_and_gate();
    let built_weight = if set_while_waiting { 1 } else { paying_weight };
    let gate = Gate::builder(|_: &Rejected| Some(RateLimited::new()))
        .max_in_flight(4)
        .rate(10.0)
        .per_scope_with(move |scope| match scope.as_str() {
            "paying" => ScopeLimits::new().weight(built_weight),
            _ => ScopeLimits::new(),
        })
        .build()
        .unwrap();
    let start = Instant::now();
    let call = |tenant: &'static str| {
        let options = CallOptions::new().scopes([tenant]);
        let pair = (server.clone(), gate.clone());
        async move { (tenant, call_at(pair, options, start, 0).await.1) }
    };
    let first = (0..3).flat_map(|_| [call("paying"), call("free")]);
    let first = tokio::spawn(futures::future::join_all(first));
    tokio::task::yield_now().await;
    if set_while_waiting {
        let paying = ScopeLimits::new().weight(paying_weight);
        gate.set_scope_limits("paying", paying).unwrap();
    }
    let rest = (3..40).flat_map(|_| [call("paying"), call("free")]);
    let mut ends = futures::future::join_all(rest).await;
    ends.extend(first.await.unwrap());
    let last = |who: &str| {
        let ends = ends.iter().filter(|(tenant, _)| *tenant == who);
        ends.map(|&(_, at)| at).max().unwrap()
    };
    (last("paying"), last("free"), server.log().rejected())
}

#[tokio::test(start_paused = true)]
async fn a_scope_of_weight_three_has_three_turns_to_anothers_one() {
    // Equal weights: the two alternate, and the paying tenant's last call is the 79th start
    // (7.9 s), the free one's the 80th.
    assert_eq!(paying_and_free(1, false).await, (7_900, 8_000, 0));
    // Weight 3: the paying tenant takes three starts in four until its 40 calls are done,
    // its last the 53rd start (5.2 s; three quarters of the rate would take 53.3 starts);
    // the free tenant's last is still the 80th. Nothing throttled.
    assert_eq!(paying_and_free(3, false).await, (5_200, 8_000, 0));
    // Set while the tenant's calls wait in its lane, the weight counts for the calls that
    // join it after: all but its first 3.
    assert_eq!(paying_and_free(3, true).await, (5_400, 8_000, 0));
}

#[test]
fn a_weight_of_zero_or_above_the_most_is_refused_by_name() {
    for weight in [0, ScopeLimits::MAX_WEIGHT + 1] {
        let refused = std::panic::catch_unwind(|| ScopeLimits::new().weight(weight));
        let message = *refused.unwrap_err().downcast::<String>().unwrap();
        assert_eq!(
            message,
            format!("a scope's `weight` must be from 1 to 1024 (got {weight})")
        );
    }
    let heaviest = ScopeLimits::new().weight(ScopeLimits::MAX_WEIGHT);
    assert_ne!(heaviest, ScopeLimits::new().weight(1));
    assert_eq!(ScopeLimits::new().weight(1), ScopeLimits::default());
}
