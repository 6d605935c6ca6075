//! Budgets in several dimensions through the gate: a call waits for every budget it draws
//! from (told or announced), its line keeps what each waiter draws, a retry draws again, a
//! deadline counts them, a dropped call gives back what it held in flight, and a server
//! counting each dimension in a sliding window never sees more than its limit; in paused
//! time, over random costs.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use paceline::{
    Announcement, Budget, CallOptions, Cost, Dimension, Error, Gate, Quota, RateLimited,
    ScopeLimits, Window,
};
use proptest::prelude::*;
use tokio::time::{self, Instant};

use crate::support;

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

fn never(_: &()) -> Option<RateLimited> {
    None
}

fn tokens(n: u64) -> CallOptions {
    CallOptions::new().cost_in(Dimension::TOKENS, n)
}

/// Runs `calls` (each its options and its actual cost) at once through `gate`, each taking
/// `takes`; returns when each started, in the order they were made.
async fn starts_of(
    gate: &Gate<()>,
    calls: Vec<(CallOptions, Cost)>,
    takes: Duration,
) -> Vec<Duration> {
    let start = Instant::now();
    let calls = calls.into_iter().map(|(options, used)| {
        let gate = gate.clone();
        tokio::spawn(async move {
            let make = || async {
                let at = start.elapsed();
                time::sleep(takes).await;
                Ok::<_, ()>(at)
            };
            gate.call_settled(options, make, move |_| used.clone())
                .await
                .unwrap()
        })
    });
    let mut starts = Vec::new();
    for call in calls.collect::<Vec<_>>() {
        starts.push(call.await.unwrap());
    }
    starts
}

#[tokio::test(start_paused = true)]
async fn waiting_calls_start_as_the_tokens_they_need_come_back() {
    let gate = Gate::builder(never)
        .budget(Budget::per_second(Dimension::TOKENS, 1_000))
        .build()
        .unwrap();
    let calls = [400, 400, 400, 100, 700]
        .map(|n| (tokens(n), Cost::new()))
        .to_vec();
    let starts = starts_of(&gate, calls, 10 * MS).await;
    // 800 at once; the third waits for the first's 400 (1 s), and the fourth, in line
    // behind it, goes with it; the fifth needs the second's too (1 s) and the third's (2 s).
    let ms = |n| n * MS;
    assert_eq!(starts, [ms(0), ms(0), ms(1000), ms(1000), ms(2000)]);
    // At 2.01 s, the fifth's 700 are in the window.
    assert_eq!(gate.budget_left(&Dimension::TOKENS), Some(300));
    assert_eq!(gate.budget_left(&Dimension::REQUESTS), None);
}

#[tokio::test(start_paused = true)]
async fn a_call_of_no_tokens_is_not_held_by_a_spent_budget_of_tokens() {
    let gate = Gate::builder(never)
        .budget(Budget::per_minute(Dimension::TOKENS, 1_000))
        .budget(Budget::per_minute(Dimension::REQUESTS, 10))
        .build()
        .unwrap();
    // As a configuration file may name them: a call of no tokens, and one of no request.
    let no_tokens = CallOptions::new().try_cost_in(Dimension::new("tokens"), 0);
    let no_request = CallOptions::new().try_cost_in(Dimension::REQUESTS, 0);
    let calls = vec![
        (tokens(1_000), Cost::new()),
        (no_tokens.unwrap(), Cost::new()),
        (tokens(1), Cost::new()),
    ];
    let starts = starts_of(&gate, calls, 10 * MS).await;
    // The call of no tokens goes at once beside the one that spent the minute's; the next
    // token waits for the minute.
    assert_eq!(starts, [Duration::ZERO, Duration::ZERO, 60 * SEC]);
    // Of the requests, the third's is in the minute now; the first two have left it.
    assert_eq!(gate.budget_left(&Dimension::REQUESTS), Some(9));
    let calls = vec![(no_request.unwrap(), Cost::new())];
    starts_of(&gate, calls, 10 * MS).await;
    assert_eq!(
        gate.budget_left(&Dimension::REQUESTS),
        Some(9),
        "not counted"
    );
}

#[tokio::test(start_paused = true)]
async fn what_a_call_used_is_settled_from_its_value_in_each_dimension() {
    let gate = Gate::builder(never)
        .budget(Budget::per_minute(Dimension::INPUT_TOKENS, 2_000))
        .budget(Budget::per_minute(Dimension::OUTPUT_TOKENS, 1_000))
        .build()
        .unwrap();
    // Output charged at `max_tokens` (800) as it starts; the answer used 100: 700 back.
    let chat = CallOptions::new()
        .cost_in(Dimension::INPUT_TOKENS, 500)
        .cost_in(Dimension::OUTPUT_TOKENS, 800);
    let used = Cost::new().with(Dimension::OUTPUT_TOKENS, 100);
    let starts = starts_of(&gate, vec![(chat.clone(), used.clone()); 3], SEC).await;
    // The second waited for the first's answer (1 s), the third for the second's.
    assert_eq!(starts, [Duration::ZERO, SEC, 2 * SEC]);
    assert_eq!(gate.budget_left(&Dimension::OUTPUT_TOKENS), Some(700));
    assert_eq!(gate.budget_left(&Dimension::INPUT_TOKENS), Some(500));
    // A settle that says less than nothing of a dimension leaves its estimate: input stays.
    let more = Cost::new().with(Dimension::OUTPUT_TOKENS, 900);
    let late = starts_of(&gate, vec![(tokens(0), more)], SEC).await;
    assert_eq!(late, [Duration::ZERO]);
    assert_eq!(
        gate.budget_left(&Dimension::OUTPUT_TOKENS),
        Some(0),
        "900 more than 0"
    );
}

#[tokio::test(start_paused = true)]
async fn a_settle_in_units_still_reads_a_number() {
    let gate = Gate::builder(never).rate(10.0).build().unwrap();
    let start = Instant::now();
    let options = CallOptions::new().cost(1);
    gate.call_settled(options.clone(), || async { Ok::<u64, ()>(5) }, |n| *n)
        .await
        .unwrap();
    gate.call_with(options, || async { Ok::<_, ()>(()) })
        .await
        .unwrap();
    assert_eq!(start.elapsed(), 500 * MS);
}

#[tokio::test(start_paused = true)]
async fn a_throttled_call_draws_its_tokens_again_when_retried() {
    let gate = Gate::builder(|_: &&str| Some(RateLimited::new().retry_after(SEC)))
        .budget(Budget::per_minute(Dimension::TOKENS, 1_000))
        .build()
        .unwrap();
    let attempts = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let result = gate
        .call_with(tokens(400), || {
            let attempts = Arc::clone(&attempts);
            async move {
                let mut attempts = attempts.lock().unwrap();
                attempts.push(start.elapsed());
                if attempts.len() == 1 {
                    Err("slow down")
                } else {
                    Ok(())
                }
            }
        })
        .await;
    assert!(result.is_ok());
    assert_eq!(*attempts.lock().unwrap(), [Duration::ZERO, SEC]);
    assert_eq!(
        gate.budget_left(&Dimension::TOKENS),
        Some(200),
        "two attempts of 400"
    );
    // A third would need 400: not before the first attempt's leave the window.
    let hurried = tokens(400).max_wait(30 * SEC);
    let late = gate.call_with(hurried, || async { Ok(()) }).await;
    match late {
        Err(Error::Deadline { earliest, .. }) => assert_eq!(*earliest - start, 60 * SEC),
        other => panic!("expected a deadline's refusal, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_dropped_call_no_longer_counts_as_in_flight() {
    let gate = Gate::builder(never).quota_reserve(0).build().unwrap();
    let running = {
        let gate = gate.clone();
        tokio::spawn(async move {
            let make = || async {
                time::sleep(10 * SEC).await;
                Ok::<_, ()>(())
            };
            gate.call_with(tokens(300), make).await
        })
    };
    time::sleep(MS).await;
    let minute = 60 * SEC;
    let words = |left| Announcement::new(Dimension::TOKENS, Quota::new(left, minute));
    // In flight, its 300 tokens are not counted in what a server says is left.
    gate.observe_all([words(1_000)]);
    assert_eq!(gate.budget_left(&Dimension::TOKENS), Some(700));
    running.abort();
    let _ = running.await;
    // Dropped: a lower announcement is taken whole.
    gate.observe_all([words(650)]);
    assert_eq!(gate.budget_left(&Dimension::TOKENS), Some(650));
    assert_eq!(gate.stats().in_flight, 0);
}

#[tokio::test(start_paused = true)]
async fn every_announced_policy_holds_and_the_tightest_binds() {
    let gate = Gate::builder(never).quota_reserve(0).build().unwrap();
    // 10 a second, but the day has 3 left.
    gate.observe_all([
        Announcement::new(Dimension::UNITS, Quota::new(10, SEC)).policy("second"),
        Announcement::new(Dimension::UNITS, Quota::new(3, 86_400 * SEC)).policy("day"),
    ]);
    let start = Instant::now();
    for _ in 0..3 {
        gate.call(|| async { Ok::<_, ()>(()) }).await.unwrap();
    }
    // Not all in the first second: the day binds. Its last unit is kept for the call that
    // learns its next window, which goes when the day resets.
    assert_eq!(start.elapsed(), 86_400 * SEC);
}

/// One call of a random schedule: arrives `gap` after the one before, estimated at
/// `estimate` tokens, of which it used `used` (at most the estimate), taking `takes`.
#[derive(Debug, Clone)]
struct Call {
    gap: Duration,
    estimate: u64,
    used: u64,
    takes: Duration,
}

fn schedule() -> impl Strategy<Value = Vec<Call>> {
    let call =
        (0u64..300, 1u64..600, 0u64..=100, 1u64..2_000).prop_map(|(gap, estimate, used, takes)| {
            Call {
                gap: Duration::from_millis(gap),
                estimate,
                used: estimate * used / 100,
                takes: Duration::from_millis(takes),
            }
        });
    prop::collection::vec(call, 1..40)
}

proptest! {
    #![proptest_config(support::regressions_beside_the_file(ProptestConfig::with_cases(64)))]

    /// Whatever the arrivals, estimates and lengths: a server that counts requests and the
    /// tokens each call used, both in sliding windows, never sees more than either limit in
    /// any window, whatever kind of window the gate keeps (each keeps to a sliding one); and
    /// every call runs once.
    #[test]
    fn a_server_counting_in_sliding_windows_never_sees_more_than_its_limits(
        window in prop_oneof![Just(Window::Sliding), Just(Window::Fixed), Just(Window::Refilling)],
        calls in schedule(),
    ) {
        let (requests, words, per) = (4u64, 1_000u64, SEC);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        let seen = runtime.block_on(async {
            // The fixed and refilling kinds keep to a sliding window of the same length
            // only at half the limit (a fixed window's end and the next one's start, a full
            // bucket and its refill, fit in one span): so the gate is told half.
            let halve = move |n: u64| if window == Window::Sliding { n } else { n / 2 };
            let gate = Gate::builder(never)
                .max_in_flight(64)
                .budget(Budget::new(Dimension::REQUESTS, halve(requests), per).window(window))
                .budget(Budget::new(Dimension::TOKENS, halve(words), per).window(window))
                .build()
                .unwrap();
            let start = Instant::now();
            let seen = Arc::new(Mutex::new(Vec::new()));
            let mut handles = Vec::new();
            for call in calls.clone() {
                time::sleep(call.gap).await;
                let (gate, seen) = (gate.clone(), Arc::clone(&seen));
                handles.push(tokio::spawn(async move {
                    let used = call.used.min(halve(words));
                    let make = || async {
                        seen.lock().unwrap().push((start.elapsed(), used));
                        time::sleep(call.takes).await;
                        Ok::<_, ()>(())
                    };
                    let options = tokens(call.estimate.min(halve(words)));
                    let settle = move |_: &()| Cost::new().with(Dimension::TOKENS, used);
                    gate.call_settled(options, make, settle).await.unwrap();
                }));
            }
            for handle in handles {
                handle.await.unwrap();
            }
            Arc::try_unwrap(seen).unwrap().into_inner().unwrap()
        });
        prop_assert_eq!(seen.len(), calls.len());
        for (i, &(at, _)) in seen.iter().enumerate() {
            let window: Vec<_> = seen[..=i].iter().filter(|(t, _)| *t + per > at).collect();
            let spent: u64 = window.iter().map(|(_, used)| used).sum();
            prop_assert!(window.len() as u64 <= requests, "{} requests in the window to {:?}", window.len(), at);
            prop_assert!(spent <= words, "{} tokens in the window to {:?}", spent, at);
        }
    }
}

/// The starts of `calls` (each its tenant, among `tenants`, and its schedule) through one gate
/// whose every tenant may spend `words` tokens a second (`ScopeLimits::budget`): for each
/// call, its tenant, when it started, and the tokens it used, in the order they started.
async fn tenants_run(calls: &[(usize, Call)], words: u64) -> Vec<(usize, Duration, u64)> {
    let tenant = ScopeLimits::new().budget(Budget::per_second(Dimension::TOKENS, words));
    let gate = Gate::builder(never)
        .max_in_flight(64)
        .per_scope(tenant)
        .build()
        .unwrap();
    let start = Instant::now();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut handles = Vec::new();
    for (tenant, call) in calls.iter().cloned() {
        time::sleep(call.gap).await;
        let (gate, seen) = (gate.clone(), Arc::clone(&seen));
        handles.push(tokio::spawn(async move {
            let used = call.used.min(words);
            let make = || async {
                seen.lock().unwrap().push((tenant, start.elapsed(), used));
                time::sleep(call.takes).await;
                Ok::<_, ()>(())
            };
            let options = tokens(call.estimate.min(words)).scopes([format!("tenant-{tenant}")]);
            let settle = move |_: &()| Cost::new().with(Dimension::TOKENS, used);
            gate.call_settled(options, make, settle).await.unwrap();
        }));
    }
    for handle in handles {
        handle.await.unwrap();
    }
    Arc::try_unwrap(seen).unwrap().into_inner().unwrap()
}

proptest! {
    #![proptest_config(support::regressions_beside_the_file(ProptestConfig::with_cases(48)))]

    /// Whatever the arrivals, tenants, estimates and lengths: each tenant's budget of tokens
    /// a second holds its own calls (a server counting each tenant's tokens in sliding
    /// windows never sees more than the limit), every call runs once, and a tenant's calls
    /// start exactly when they would with no other tenant: one out of tokens never holds
    /// another back.
    #[test]
    fn each_tenants_budget_holds_its_calls_and_no_others(
        calls in schedule(),
        tenants in prop::collection::vec(0usize..3, 40),
    ) {
        let words = 1_000u64;
        let calls: Vec<(usize, Call)> = tenants.into_iter().zip(calls).collect();
        let run = |calls: Vec<(usize, Call)>| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .unwrap();
            runtime.block_on(async move { tenants_run(&calls, words).await })
        };
        let seen = run(calls.clone());
        prop_assert_eq!(seen.len(), calls.len());
        for tenant in 0..3 {
            let own: Vec<_> = seen.iter().filter(|(t, ..)| *t == tenant).collect();
            for (i, &&(_, at, _)) in own.iter().enumerate() {
                let spent: u64 = own[..=i].iter().filter(|(_, t, _)| *t + SEC > at).map(|(.., u)| u).sum();
                prop_assert!(spent <= words, "tenant {}: {} tokens in the window to {:?}", tenant, spent, at);
            }
            // Alone: the same calls, the others' gaps kept as waits of their own.
            let alone: Vec<(usize, Call)> = calls
                .iter()
                .scan(Duration::ZERO, |gap, (t, call)| {
                    *gap += call.gap;
                    Some((*t == tenant).then(|| {
                        let call = Call { gap: std::mem::take(gap), ..call.clone() };
                        (*t, call)
                    }))
                })
                .flatten()
                .collect();
            let alone: Vec<Duration> = run(alone).into_iter().map(|(_, at, _)| at).collect();
            let together: Vec<Duration> = own.iter().map(|(_, at, _)| *at).collect();
            prop_assert_eq!(together, alone, "tenant {}", tenant);
        }
    }
}

/// A scope's told budget settles what its calls used: a call of 800 tokens that used 100
/// leaves the tenant room for another at once.
#[tokio::test(start_paused = true)]
async fn a_scopes_budget_settles_what_its_calls_used() {
    let tenant = ScopeLimits::new().budget(Budget::per_minute(Dimension::TOKENS, 1_000));
    let gate = Gate::builder(never).per_scope(tenant).build().unwrap();
    let prompt = || tokens(800).scopes(["a"]);
    let used = |_: &Duration| Cost::new().with(Dimension::TOKENS, 100);
    let start = Instant::now();
    let at = || async move { Ok::<_, ()>(start.elapsed()) };
    assert_eq!(
        gate.call_settled(prompt(), at, used).await,
        Ok(Duration::ZERO)
    );
    // 900 left (200 had it not settled): the next goes at once, and keeps its 800.
    assert_eq!(gate.call_with(prompt(), at).await, Ok(Duration::ZERO));
    // 100 left: the third waits for the minute's window to pass both.
    assert_eq!(gate.call_with(prompt(), at).await, Ok(60 * SEC));
}

/// What a server announced for a scope holds that scope's calls alone.
#[tokio::test(start_paused = true)]
async fn a_budget_announced_for_a_scope_holds_that_scope_alone() {
    let gate = Gate::builder(never)
        .per_scope(ScopeLimits::new())
        .build()
        .unwrap();
    let empty = Announcement::new(Dimension::TOKENS, Quota::new(0, 5 * SEC)).window(Window::Fixed);
    gate.observe_all_in("a", [empty]).unwrap();
    let start = Instant::now();
    let call = |tenant: &'static str| {
        let gate = gate.clone();
        async move {
            let at = || async move { Ok::<_, ()>(start.elapsed()) };
            gate.call_with(tokens(1).scopes([tenant]), at)
                .await
                .unwrap()
        }
    };
    let (a, b) = futures::join!(call("a"), call("b"));
    assert_eq!((a, b), (5 * SEC, Duration::ZERO));
}
