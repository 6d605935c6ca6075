//! A per-account limit beside a global one, as Google Ads meters each customer account and
//! the developer token: against the simulated API in paused time, a gate told both limits
//! (`GateBuilder::per_scope`) beside one told only the global limit, which learns each
//! account's limit from its throttles (each backs off that account alone).

use std::time::Duration;

use paceline::{Error, Gate, Quota, RateLimited, ScopeLimits};
use paceline_sim::{Announced, Limit, Policy, Rejected, Server};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[derive(Debug, Default, PartialEq)]
struct Account {
    /// Calls answered, and calls given up after the gate's retries.
    answered: usize,
    gave_up: usize,
    /// When its last answer came, in ms.
    last_answer: u64,
}

#[derive(Debug, Default, PartialEq)]
struct Figures {
    big: Account,
    small: Account,
    /// Requests the server rejected, and of those, how many came while a penalty the gate
    /// had been told of (by a Retry-After) still ran.
    throttled: usize,
    into_known_penalty: usize,
    /// The gate's rate at the end, and the big account's.
    gate_rate: Option<f64>,
    big_rate: Option<f64>,
}

/// An API that allows 20 requests a second in all (a bucket of 20) and 2 a second per
/// account (a bucket of 2), each throttle starting a penalty of 1 s that doubles while
/// requests keep coming, 50 ms away; a gate paced at 20 a second, 8 in flight, each throttle
/// backing off its account, with `per_account` limits or none. One big account sends 60 calls
/// at once, and four small ones 10 each.
async fn accounts(per_account: Option<ScopeLimits>) -> Figures {
    let account_limit = Policy::token_bucket(2.0, 2).penalty(ms(1_000), ms(30_000));
    let server = Server::builder()
        .latency(ms(50))
        .global(Policy::token_bucket(20.0, 20))
        .per_scope(account_limit)
        .build();
    let gate = Gate::builder(|rejected: &Rejected| {
        let throttle = RateLimited::new().retry_after(rejected.retry_after?);
        Some(match &rejected.scope {
            Some(account) => throttle.scope(account.as_str()),
            None => throttle,
        })
    })
    .max_in_flight(8)
    .rate(20.0);
    let gate = match per_account {
        Some(limits) => gate.per_scope(limits),
        None => gate,
    };
    let gate = gate.build().unwrap();
    let start = server.start();
    let call = |account: String| {
        let (server, gate) = (server.clone(), gate.clone());
        async move {
            let scope = account.clone();
            let result = gate
                .call_in([scope], || {
                    let server = server.clone();
                    let account = account.clone();
                    async move { server.call(Some(&account)).await }
                })
                .await;
            (account, result, crate::support::ms_since(start))
        }
    };
    let big = (0..60).map(|_| call("big".to_owned()));
    let small = (0..4).flat_map(|n| (0..10).map(move |_| format!("small-{n}")));
    let ends = futures::future::join_all(big.chain(small.map(call))).await;
    let mut figures = tally(ends, &server);
    figures.gate_rate = gate.stats().rate;
    figures.big_rate = gate.scope_rate("big");
    figures
}

/// The figures of a run: each call's account, result and answer (in ms), tallied for the big
/// account and the small ones, with what the server's log says was throttled.
fn tally<T>(ends: Vec<(String, Result<T, Error<Rejected>>, u64)>, server: &Server) -> Figures {
    let mut figures = Figures::default();
    for (account, result, at) in ends {
        let account = match account.as_str() {
            "big" => &mut figures.big,
            _ => &mut figures.small,
        };
        match result {
            Ok(_) => account.answered += 1,
            Err(Error::GaveUp { .. }) => account.gave_up += 1,
            Err(other) => panic!("{other}"),
        }
        account.last_answer = account.last_answer.max(at);
    }
    let log = server.log();
    figures.throttled = log.rejected();
    figures.into_known_penalty = log.sent_into_known_penalty();
    figures
}

#[tokio::test(start_paused = true)]
async fn a_gate_told_each_accounts_limit_keeps_to_it_and_every_account_ends_on_time() {
    // Told only the global limit, the gate sends each account's calls at the gate's rate
    // and learns the account's limit from 81 throttles; the penalties they start (never
    // sent into) keep the big account's last answer to 64.6 s.
    assert_eq!(
        accounts(None).await,
        Figures {
            big: Account {
                answered: 60,
                gave_up: 0,
                last_answer: 64_550,
            },
            small: Account {
                answered: 40,
                gave_up: 0,
                last_answer: 9_750,
            },
            throttled: 81,
            into_known_penalty: 0,
            gate_rate: Some(20.0),
            big_rate: None,
        }
    );
    // Told both, nothing is throttled, and each account ends when its limit allows: the big
    // one's 60th call starts at 29.5 s (2 a second from 0 s) and is answered 100 ms later;
    // the small ones' 10th at 4.5 s, staggered by the gate's rate behind the other accounts'
    // starts of that instant (the last of five at 4.7 s).
    assert_eq!(
        accounts(Some(ScopeLimits::new().rate(2.0))).await,
        Figures {
            big: Account {
                answered: 60,
                gave_up: 0,
                last_answer: 29_600,
            },
            small: Account {
                answered: 40,
                gave_up: 0,
                last_answer: 4_800,
            },
            throttled: 0,
            into_known_penalty: 0,
            gate_rate: Some(20.0),
            big_rate: Some(2.0),
        }
    );
}

#[tokio::test(start_paused = true)]
async fn a_gate_finds_each_accounts_limit_when_it_is_not_told() {
    // Each account's rate adapts from 20 a second, the gate's: each account's first
    // throttles cut that account's rate alone, the gate's stays, and the big account's
    // settles just under its limit of 2 a second. A third of the throttles of a gate that only
    // backs off, and the big account done in 34.5 s where that gate took 64.6 s (told the
    // limit, 29.6 s).
    let figures = accounts(Some(ScopeLimits::new().adaptive(0.5, 20.0))).await;
    let big_rate = figures.big_rate.unwrap();
    assert!(
        (1.9..2.0).contains(&big_rate),
        "the big account settled at {big_rate}/s"
    );
    // docs/scenarios.md's figure, exactly (the simulation repeats itself).
    assert_eq!(format!("{big_rate:.3}"), "1.996");
    assert_eq!(
        figures,
        Figures {
            big: Account {
                answered: 60,
                gave_up: 0,
                last_answer: 34_464,
            },
            small: Account {
                answered: 40,
                gave_up: 0,
                last_answer: 7_788,
            },
            throttled: 27,
            into_known_penalty: 0,
            gate_rate: Some(20.0),
            big_rate: Some(big_rate),
        }
    );
}

/// What an answer announced for the API as a whole and for the call's account.
fn announced(quotas: &[(Limit, Announced)]) -> (Option<Quota>, Option<Quota>) {
    let of = |limit| {
        quotas
            .iter()
            .find(|(which, _)| *which == limit)
            .map(|(_, a)| Quota::new(a.remaining, a.resets_in))
    };
    (of(Limit::Global), of(Limit::Scope))
}

/// An API that announces its quotas, 20 requests per second in all and 10 per 2 s per
/// account (fixed windows), 50 ms away; a gate of 8 in flight that takes in the quotas it
/// reads: `per_account`, each account's quota for that account (`Gate::observe_in`) and the
/// global one for the gate; else the tightest of the two for the gate, as a client that
/// reads one announcement does. One big account makes 40 calls at once, four small ones 10
/// each.
async fn announced_accounts(per_account: bool) -> Figures {
    let server = Server::builder()
        .latency(ms(50))
        .global(Policy::fixed_window(20, ms(1_000)).announce_quota(true))
        .per_scope(Policy::fixed_window(10, ms(2_000)).announce_quota(true))
        .build();
    let gate = Gate::builder(|rejected: &Rejected| {
        let throttle = RateLimited::new().retry_after(rejected.retry_after?);
        Some(match &rejected.scope {
            Some(account) => throttle.scope(account.as_str()),
            None => throttle,
        })
    })
    .max_in_flight(8)
    .quota_reserve(0);
    let gate = if per_account {
        gate.per_scope(ScopeLimits::new())
    } else {
        gate
    };
    let gate = gate.build().unwrap();
    let start = server.start();
    let call = |account: String| {
        let (server, gate) = (server.clone(), gate.clone());
        async move {
            let scope = account.clone();
            let result = gate
                .call_in([scope], || {
                    let (server, gate, account) = (server.clone(), gate.clone(), account.clone());
                    async move {
                        let answer = server.call(Some(&account)).await;
                        let quotas = match &answer {
                            Ok(accepted) => &accepted.quotas,
                            Err(rejected) => &rejected.quotas,
                        };
                        let (global, scope) = announced(quotas);
                        if per_account {
                            global.into_iter().for_each(|quota| gate.observe(quota));
                            if let Some(quota) = scope {
                                gate.observe_in(account.as_str(), quota).unwrap();
                            }
                        } else {
                            let tightest = Announced::tightest(quotas.iter().map(|(_, a)| *a));
                            if let Some(a) = tightest {
                                gate.observe(Quota::new(a.remaining, a.resets_in));
                            }
                        }
                        answer
                    }
                })
                .await;
            (account, result, crate::support::ms_since(start))
        }
    };
    let big = (0..40).map(|_| call("big".to_owned()));
    let small = (0..4).flat_map(|n| (0..10).map(move |_| format!("small-{n}")));
    let ends = futures::future::join_all(big.chain(small.map(call))).await;
    tally(ends, &server)
}

#[tokio::test(start_paused = true)]
async fn each_accounts_announced_quota_paces_that_account_alone() {
    let answered = |big, small| Figures {
        big: Account {
            answered: 40,
            gave_up: 0,
            last_answer: big,
        },
        small: Account {
            answered: 40,
            gave_up: 0,
            last_answer: small,
        },
        ..Figures::default()
    };
    // One quota for the gate, the tightest announced: each answer's account quota paces
    // every account's calls, so the accounts share one account's 10 per 2 s.
    assert_eq!(announced_accounts(false).await, answered(17_706, 12_818));
    // Each account paced by its own quota: the big account's 40 calls in 8.8 s (its windows
    // of 10, less the one unit each keeps back for the call that learns the next), the small
    // ones' 10 each in 3.0 s. Nothing throttled either way.
    assert_eq!(announced_accounts(true).await, answered(8_818, 2_985));
}
