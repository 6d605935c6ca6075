//! Scopes take turns in the gate's line: a tenant's backlog holds back another tenant's calls
//! by a turn each, not by the whole backlog. Against the simulated API in paused time, beside
//! the same calls with no scope, which wait in one line in arrival order.

use std::time::Duration;

use paceline::{CallOptions, Gate, RateLimited};
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

/// A tenant with 200 calls at 0 s and one with 10 calls at 1 s, through a gate paced at 10 a
/// second (4 in flight) to an API that allows 10 a second (a bucket of 10), 50 ms away; each
/// call in its tenant's scope, or in none.
async fn two_tenants(scoped: bool) -> Figures {
    let server = Server::builder()
        .latency(ms(50))
        .global(Policy::token_bucket(10.0, 10))
        .build();
    let gate = Gate::builder(|_: &Rejected| Some(RateLimited::new()))
        .max_in_flight(4)
        .rate(10.0)
        .build()
        .unwrap();
    let start = Instant::now();
    let call = |tenant: &'static str, arrive_ms: u64| {
        let (gate, server) = (gate.clone(), server.clone());
        async move {
            sleep_until(start + ms(arrive_ms)).await;
            let arrived = Instant::now();
            let options = if scoped {
                CallOptions::new().scopes([tenant])
            } else {
                CallOptions::new()
            };
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
            (tenant, waited, support::ms_since(start))
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
