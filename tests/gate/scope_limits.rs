//! Limits per scope under the gate's own (`GateBuilder::per_scope`, `per_scope_with`,
//! `Gate::set_scope_limits`): each scope's calls keep to its rate and its in-flight limit, a
//! scope held back by its own limits never holds back another's calls, and idle scopes are
//! forgotten. In paused time, exact to the millisecond; every call runs in a task of its own,
//! so that a waiter nobody wakes shows as a call that never ends.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use paceline::{CallOptions, ConfigError, Error, Gate, Quota, RateLimited, Scope, ScopeLimits};
use proptest::prelude::*;
use tokio::task::JoinHandle;
use tokio::time::{self, Instant, sleep, sleep_until};

use crate::support;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Never a throttle: these tests are about limits the gate is told.
fn never(_: &()) -> Option<RateLimited> {
    None
}

/// One call as it ran: its scope, its number in arrival order, and when it started and
/// ended, in ms since the test's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ran {
    scope: usize,
    number: usize,
    started: u64,
    ended: u64,
}

/// A call of `scopes` that arrives `arrive` ms after `start` and works `work` ms, in a task
/// of its own; what it ran as, once it ends.
fn spawn_call(
    gate: &Gate<()>,
    start: Instant,
    (scope, number): (usize, usize),
    scopes: Vec<String>,
    (arrive, work): (u64, u64),
) -> JoinHandle<Ran> {
    let gate = gate.clone();
    tokio::spawn(async move {
        sleep_until(start + ms(arrive)).await;
        let started = gate
            .call_with(CallOptions::new().scopes(scopes), || async move {
                let started = support::ms_since(start);
                sleep(ms(work)).await;
                Ok(started)
            })
            .await
            .unwrap();
        Ran {
            scope,
            number,
            started,
            ended: support::ms_since(start),
        }
    })
}

/// Waits for every call, failing (rather than hanging) if one is never woken.
async fn all_ended(calls: Vec<JoinHandle<Ran>>) -> Vec<Ran> {
    let ended = time::timeout(Duration::from_secs(3_600), futures::future::join_all(calls));
    let ended = ended.await.expect("a call waited for ever");
    ended.into_iter().map(Result::unwrap).collect()
}

/// When each call of one scope starts, by the scope's limits alone: in arrival order, each
/// once it has arrived, `interval` ms after the one before, and once fewer than
/// `max_in_flight` of the scope's calls are in flight. `calls`: (arrival, work) in ms, in
/// arrival order.
fn scope_alone(calls: &[(u64, u64)], interval: u64, max_in_flight: usize) -> Vec<u64> {
    let mut starts: Vec<u64> = Vec::new();
    let mut ends: Vec<u64> = Vec::new();
    for &(arrive, work) in calls {
        let paced = starts.last().map_or(0, |last| last + interval);
        let mut later_ends = ends.clone();
        later_ends.sort_unstable_by(|a, b| b.cmp(a));
        let slot = later_ends.get(max_in_flight - 1).copied().unwrap_or(0);
        let start = arrive.max(paced).max(slot);
        starts.push(start);
        ends.push(start + work);
    }
    starts
}

/// Rates whose intervals are whole milliseconds, as the timers that pace them are.
const RATES: [f64; 6] = [2.0, 4.0, 5.0, 8.0, 10.0, 20.0];

fn arrivals() -> impl Strategy<Value = Vec<(usize, u64, u64)>> {
    // (scope, ms since the call before, ms of work); every arrival at its own instant.
    prop::collection::vec((0usize..4, 1u64..300, 1u64..600), 0..48)
}

fn limits() -> impl Strategy<Value = Vec<(usize, usize)>> {
    // Per scope: an index into `RATES`, and an in-flight limit.
    prop::collection::vec((0..RATES.len(), 1usize..4), 4)
}

/// Runs `arrivals` through `gate`, each call of scope `i` named `scope-i` (and `shared` too,
/// if given, as a second scope).
fn run(gate: &Gate<()>, arrivals: &[(usize, u64, u64)], shared: Option<&str>) -> Vec<Ran> {
    support::paused_runtime().block_on(async {
        let start = Instant::now();
        let mut arrive = 0;
        let calls = arrivals
            .iter()
            .enumerate()
            .map(|(number, &(scope, gap, work))| {
                arrive += gap;
                let mut scopes = vec![format!("scope-{scope}")];
                scopes.extend(shared.map(str::to_owned));
                spawn_call(gate, start, (scope, number), scopes, (arrive, work))
            })
            .collect();
        all_ended(calls).await
    })
}

fn per_scope_gate(limits: &[(usize, usize)]) -> paceline::GateBuilder<()> {
    let limits = limits.to_vec();
    Gate::builder(never).per_scope_with(move |scope: &Scope| {
        let index: usize = scope.as_str()["scope-".len()..].parse().unwrap();
        let (rate, max_in_flight) = limits[index];
        ScopeLimits::new()
            .rate(RATES[rate])
            .max_in_flight(max_in_flight)
    })
}

proptest! {
    #![proptest_config(support::regressions_beside_the_file(ProptestConfig::with_cases(64)))]

    /// With the gate's own limits out of reach, each scope's calls start exactly when its
    /// limits alone allow: never early (its rate, its in-flight limit), never late (no
    /// scope's calls wait for another's, no waiter is left unwoken), in arrival order.
    #[test]
    fn each_scope_starts_its_calls_exactly_as_its_own_limits_allow(
        arrivals in arrivals(),
        limits in limits(),
    ) {
        let gate = per_scope_gate(&limits).max_in_flight(1_000).build().unwrap();
        let ran = run(&gate, &arrivals, None);
        prop_assert_eq!(ran.len(), arrivals.len(), "every call ran once");
        let mut arrive = 0;
        let arrived: Vec<u64> = arrivals.iter().map(|&(_, gap, _)| { arrive += gap; arrive }).collect();
        for (scope, &(rate, max_in_flight)) in limits.iter().enumerate() {
            let calls: Vec<(u64, u64)> = arrivals
                .iter()
                .zip(&arrived)
                .filter(|((of, _, _), _)| *of == scope)
                .map(|((_, _, work), at)| (*at, *work))
                .collect();
            let interval = (1_000.0 / RATES[rate]) as u64;
            let expected = scope_alone(&calls, interval, max_in_flight);
            let started: Vec<u64> = ran.iter().filter(|r| r.scope == scope).map(|r| r.started).collect();
            prop_assert_eq!(started, expected, "scope {}", scope);
        }
        prop_assert_eq!(gate.stats().in_flight, 0);
    }

    /// With the gate's own limits too (an in-flight limit and a rate), and every call also of
    /// one scope shared by all (a model, say, with its own in-flight limit): no limit is ever
    /// exceeded, every call runs once, and each scope's calls start in arrival order.
    #[test]
    fn no_limit_of_the_gate_or_of_any_scope_is_exceeded(
        arrivals in arrivals(),
        limits in limits(),
        gate_in_flight in 1usize..6,
        gate_rate in 0..RATES.len(),
        shared_in_flight in 1usize..5,
    ) {
        let per_scope = limits.clone();
        let gate = Gate::builder(never)
            .max_in_flight(gate_in_flight)
            .rate(RATES[gate_rate] * 2.0)
            .per_scope_with(move |scope: &Scope| match scope.as_str().strip_prefix("scope-") {
                Some(index) => {
                    let (rate, max_in_flight) = per_scope[index.parse::<usize>().unwrap()];
                    ScopeLimits::new().rate(RATES[rate]).max_in_flight(max_in_flight)
                }
                None => ScopeLimits::new().max_in_flight(shared_in_flight),
            })
            .build()
            .unwrap();
        let ran = run(&gate, &arrivals, Some("model"));
        prop_assert_eq!(ran.len(), arrivals.len(), "every call ran once");
        let in_flight_at = |t: u64, scope: Option<usize>| {
            ran.iter()
                .filter(|r| scope.is_none_or(|scope| r.scope == scope))
                .filter(|r| r.started <= t && t < r.ended)
                .count()
        };
        let gate_interval = (1_000.0 / (RATES[gate_rate] * 2.0)) as u64;
        let mut by_start = ran.clone();
        by_start.sort_by_key(|r| (r.started, r.number));
        for pair in by_start.windows(2) {
            prop_assert!(pair[1].started >= pair[0].started + gate_interval, "gate rate: {:?}", pair);
        }
        for r in &ran {
            prop_assert!(in_flight_at(r.started, None) <= gate_in_flight.min(shared_in_flight));
            let (rate, max_in_flight) = limits[r.scope];
            prop_assert!(in_flight_at(r.started, Some(r.scope)) <= max_in_flight, "{:?}", r);
            let interval = (1_000.0 / RATES[rate]) as u64;
            let previous = by_start
                .iter()
                .filter(|o| o.scope == r.scope && o.number < r.number)
                .map(|o| o.started)
                .max();
            if let Some(previous) = previous {
                prop_assert!(r.started >= previous + interval, "scope rate: {:?}", r);
            }
            let later_started_first = ran
                .iter()
                .any(|o| o.scope == r.scope && o.number > r.number && o.started < r.started);
            prop_assert!(!later_started_first, "order within scope {}", r.scope);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_scope_at_its_in_flight_limit_never_holds_back_another_scopes_calls() {
    let gate = Gate::builder(never)
        .max_in_flight(4)
        .per_scope(ScopeLimits::new().max_in_flight(1))
        .build()
        .unwrap();
    let start = Instant::now();
    let mut calls: Vec<_> = (0..5)
        .map(|n| spawn_call(&gate, start, (0, n), vec!["busy".into()], (0, 1_000)))
        .collect();
    calls.push(spawn_call(
        &gate,
        start,
        (1, 5),
        vec!["quiet".into()],
        (10, 100),
    ));
    let ran = all_ended(calls).await;
    let started: Vec<_> = ran.iter().map(|r| r.started).collect();
    // The busy scope's calls go one at a time; the quiet scope's starts as it arrives,
    // ahead of the four busy calls that arrived before it and wait for their scope's slot.
    assert_eq!(started, [0, 1_000, 2_000, 3_000, 4_000, 10]);
}

#[tokio::test(start_paused = true)]
async fn a_call_held_by_its_second_scope_lets_the_calls_behind_it_in_its_lane_go() {
    // Account a's calls share a lane; one of them also needs the model, whose one slot is
    // taken: the account's next call, which does not need the model, goes ahead of it.
    let gate = Gate::builder(never)
        .per_scope_with(|scope: &Scope| match scope.as_str() {
            "model" => ScopeLimits::new().max_in_flight(1),
            _ => ScopeLimits::new(),
        })
        .build()
        .unwrap();
    let start = Instant::now();
    let calls = vec![
        spawn_call(
            &gate,
            start,
            (1, 0),
            vec!["b".into(), "model".into()],
            (0, 500),
        ),
        spawn_call(
            &gate,
            start,
            (0, 1),
            vec!["a".into(), "model".into()],
            (10, 100),
        ),
        spawn_call(&gate, start, (0, 2), vec!["a".into()], (20, 100)),
    ];
    let started: Vec<_> = all_ended(calls).await.iter().map(|r| r.started).collect();
    assert_eq!(started, [0, 500, 20]);
}

#[tokio::test(start_paused = true)]
async fn limits_set_while_the_gate_runs_reach_calls_already_waiting() {
    let gate = Gate::builder(never)
        .per_scope(ScopeLimits::new().max_in_flight(1).rate(1.0))
        .build()
        .unwrap();
    let start = Instant::now();
    let calls: Vec<_> = (0..3)
        .map(|n| {
            spawn_call(
                &gate,
                start,
                (0, n),
                vec!["tenant".into()],
                (n as u64, 2_000),
            )
        })
        .collect();
    sleep_until(start + ms(500)).await;
    // The tenant's plan grows: three at once, five a second. The second call was due at 2 s
    // (its slot), the third at 4 s.
    let plan = ScopeLimits::new().max_in_flight(3).rate(5.0);
    gate.set_scope_limits("tenant", plan).unwrap();
    let started: Vec<_> = all_ended(calls).await.iter().map(|r| r.started).collect();
    assert_eq!(started, [0, 500, 700]);
    // A scope never seen takes the limits set for it, not the builder's.
    gate.set_scope_limits("new", ScopeLimits::new().rate(2.0))
        .unwrap();
    let start = Instant::now();
    let calls: Vec<_> = (0..2)
        .map(|n| spawn_call(&gate, start, (0, n), vec!["new".into()], (n as u64, 0)))
        .collect();
    let started: Vec<_> = all_ended(calls).await.iter().map(|r| r.started).collect();
    assert_eq!(started, [0, 500]);
}

#[test]
fn limits_per_scope_are_refused_clearly_where_they_cannot_work() {
    let gate = Gate::builder(never).build().unwrap();
    assert_eq!(
        gate.set_scope_limits("a", ScopeLimits::new().max_in_flight(1)),
        Err(ConfigError::NoScopeLimits)
    );
    let announced = paceline::Announcement::new(
        paceline::Dimension::TOKENS,
        paceline::Quota::new(1, std::time::Duration::from_secs(1)),
    );
    assert_eq!(
        gate.observe_all_in("a", [announced]),
        Err(ConfigError::NoScopeLimits)
    );
    let message = ConfigError::NoScopeLimits.to_string();
    assert!(message.contains("per_scope"), "{message}");
    let zero = std::panic::catch_unwind(|| ScopeLimits::new().max_in_flight(0));
    let message = *zero
        .unwrap_err()
        .downcast::<String>()
        .unwrap_or_else(|panic| Box::new(panic.downcast::<&str>().map(|s| s.to_string()).unwrap()));
    assert!(message.contains("max_in_flight"), "{message}");
    for rate in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let refused = std::panic::catch_unwind(|| ScopeLimits::new().rate(rate));
        let message = refused.unwrap_err().downcast::<String>().unwrap();
        assert!(message.contains("per_second"), "{message}");
        let refused = std::panic::catch_unwind(|| ScopeLimits::new().adaptive(rate, 10.0));
        let message = refused.unwrap_err().downcast::<String>().unwrap();
        assert!(message.contains("`floor`"), "{message}");
        let refused = std::panic::catch_unwind(|| ScopeLimits::new().adaptive(1.0, rate));
        let message = refused.unwrap_err().downcast::<String>().unwrap();
        assert!(message.contains("`ceiling`"), "{message}");
    }
    let upside_down = std::panic::catch_unwind(|| ScopeLimits::new().adaptive(5.0, 1.0));
    let message = upside_down.unwrap_err().downcast::<String>().unwrap();
    assert!(message.contains("above its `ceiling`"), "{message}");
}

/// What a builder given a value in code panics with.
fn panic_of(build: impl FnOnce() -> ScopeLimits + std::panic::UnwindSafe) -> String {
    let panic = std::panic::catch_unwind(build).expect_err("the builder panics");
    *panic.downcast::<String>().expect("a message")
}

#[tokio::test(start_paused = true)]
async fn limits_that_arrive_while_the_gate_runs_are_refused_by_name_and_change_nothing() {
    let gate = Gate::builder(never)
        .per_scope(ScopeLimits::new().rate(10.0))
        .build()
        .unwrap();
    let start = Instant::now();
    gate.call_in(["tenant"], || async { Ok(()) }).await.unwrap();
    // A tenant's plan, as a billing service sends it while the gate runs.
    let set_plan = |per_second: f64, weight: u32| -> Result<(), ConfigError> {
        let plan = ScopeLimits::new()
            .try_rate(per_second)?
            .try_weight(weight)?;
        gate.set_scope_limits("tenant", plan)
    };
    for rate in [0.0, -1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let refused = set_plan(rate, 1).unwrap_err();
        match refused {
            ConfigError::InvalidScopeRate { which, value } => {
                assert_eq!((which, value.to_bits()), ("per_second", rate.to_bits()));
            }
            ref other => panic!("{rate}: refused as {other:?}"),
        }
        // Told as the builder given it in code says it.
        assert_eq!(
            refused.to_string(),
            panic_of(move || ScopeLimits::new().rate(rate))
        );
    }
    for weight in [0, ScopeLimits::MAX_WEIGHT + 1] {
        let refused = set_plan(5.0, weight).unwrap_err();
        assert_eq!(refused, ConfigError::InvalidWeight { weight });
        assert_eq!(
            refused.to_string(),
            format!(
                "a scope's `weight` must be from 1 to {} (got {weight})",
                ScopeLimits::MAX_WEIGHT
            )
        );
        assert_eq!(
            refused.to_string(),
            panic_of(move || ScopeLimits::new().weight(weight))
        );
    }
    // Nothing changed: the tenant's next call is spaced by its 10 a second.
    assert_eq!(gate.scope_rate("tenant"), Some(10.0));
    gate.call_in(["tenant"], || async { Ok(()) }).await.unwrap();
    assert_eq!(support::ms_since(start), 100);
    // The edges of each range are taken, and the plan with them.
    set_plan(f64::MIN_POSITIVE, ScopeLimits::MAX_WEIGHT).unwrap();
    set_plan(f64::MAX, 1).unwrap();
    set_plan(20.0, 2).unwrap();
    assert_eq!(gate.scope_rate("tenant"), Some(20.0));
}

#[test]
fn each_try_form_builds_what_its_panicking_form_does_or_names_what_cannot_work() {
    let base = || ScopeLimits::new().rate(2.0);
    assert_eq!(base().try_rate(5.0), Ok(base().rate(5.0)));
    assert_ne!(base().try_rate(5.0), Ok(base()), "the rate is set");
    assert_eq!(base().try_max_in_flight(1), Ok(base().max_in_flight(1)));
    assert_ne!(base().try_max_in_flight(1), Ok(base()), "the limit is set");
    assert_eq!(
        base().try_max_in_flight(0),
        Err(ConfigError::ZeroScopeInFlight)
    );
    assert_eq!(
        ConfigError::ZeroScopeInFlight.to_string(),
        panic_of(|| ScopeLimits::new().max_in_flight(0))
    );
    assert_eq!(base().try_weight(3), Ok(base().weight(3)));
    assert_ne!(base().try_weight(3), Ok(base()), "the weight is set");
    assert_eq!(base().try_adaptive(1.0, 9.0), Ok(base().adaptive(1.0, 9.0)));
    assert_ne!(
        base().try_adaptive(1.0, 9.0),
        Ok(base()),
        "the range is set"
    );
    // A floor at its ceiling is a fixed rate that a throttle cannot cut: it may be given.
    assert_eq!(base().try_adaptive(4.0, 4.0), Ok(base().adaptive(4.0, 4.0)));
    for rate in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        for (which, floor, ceiling) in [("floor", rate, 10.0), ("ceiling", 1.0, rate)] {
            let refused = base().try_adaptive(floor, ceiling).unwrap_err();
            let ConfigError::InvalidScopeRate { which: named, .. } = refused else {
                panic!("{floor}..{ceiling}: refused as {refused:?}");
            };
            assert_eq!(named, which);
            assert_eq!(
                refused.to_string(),
                panic_of(move || ScopeLimits::new().adaptive(floor, ceiling))
            );
            assert!(refused.to_string().contains(&format!("`{which}`")));
        }
    }
    let upside_down = base().try_adaptive(5.0, 1.0).unwrap_err();
    assert_eq!(
        upside_down,
        ConfigError::ScopeFloorAboveCeiling {
            floor: 5.0,
            ceiling: 1.0
        }
    );
    assert_eq!(
        upside_down.to_string(),
        "a scope's adaptive rate's `floor` (5/s) is above its `ceiling` (1/s)"
    );
    assert_eq!(
        upside_down.to_string(),
        panic_of(|| ScopeLimits::new().adaptive(5.0, 1.0))
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_that_cannot_start_by_its_deadline_for_its_scopes_rate_is_refused_at_once() {
    let gate = Gate::builder(never)
        .per_scope(ScopeLimits::new().rate(1.0))
        .build()
        .unwrap();
    let start = Instant::now();
    gate.call_in(["a"], || async { Ok(()) }).await.unwrap();
    let hurried = CallOptions::new().scopes(["a"]).max_wait(ms(500));
    let made = Arc::new(Mutex::new(false));
    let late = gate
        .call_with(hurried, || {
            *made.lock().unwrap() = true;
            async { Ok(()) }
        })
        .await;
    match late {
        Err(Error::Deadline { earliest, .. }) => assert_eq!(*earliest, start + ms(1_000)),
        other => panic!("expected a deadline error, got {other:?}"),
    }
    assert!(!*made.lock().unwrap(), "refused before its future was made");
    assert_eq!(support::ms_since(start), 0);
    // Another scope is not held by a's rate.
    let other = CallOptions::new().scopes(["b"]).max_wait(ms(500));
    gate.call_with(other, || async { Ok(()) }).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn dropping_the_waiter_that_holds_its_lane_out_of_line_hands_the_wait_to_the_next() {
    let gate = Gate::builder(never)
        .max_in_flight(1)
        .per_scope(ScopeLimits::new().rate(1.0))
        .build()
        .unwrap();
    let start = Instant::now();
    let a = || vec!["a".to_owned()];
    // b takes the gate's one slot; a's three calls wait for it, parked in line.
    let b = spawn_call(&gate, start, (1, 0), vec!["b".into()], (0, 3_000));
    let a1 = spawn_call(&gate, start, (0, 1), a(), (1, 0));
    let a2 = spawn_call(&gate, start, (0, 2), a(), (2, 0));
    let a3 = spawn_call(&gate, start, (0, 3), a(), (3, 0));
    // At 3 s a1 starts; a's rate then holds a2, which takes a's lane out of line and waits
    // for 4 s on its timer, while a3 stays parked behind it. a2 is dropped.
    sleep_until(start + ms(3_500)).await;
    a2.abort();
    let ran = all_ended(vec![b, a1, a3]).await;
    let started: Vec<_> = ran.iter().map(|r| r.started).collect();
    assert_eq!(started, [0, 3_000, 4_000], "a3 takes up the wait a2 left");
}

#[tokio::test(start_paused = true)]
async fn idle_scopes_are_forgotten_and_come_back_new() {
    let gate = Gate::builder(never)
        .max_in_flight(100_000)
        .per_scope(ScopeLimits::new().rate(1.0).max_in_flight(1))
        .build()
        .unwrap();
    let start = Instant::now();
    let mut most_kept = 0;
    for round in 0..100 {
        let calls = (0..1_000).map(|n| {
            let scope = format!("tenant-{}", round * 1_000 + n);
            gate.call_in([scope], || async { Ok(()) })
        });
        futures::future::try_join_all(calls).await.unwrap();
        most_kept = most_kept.max(gate.stats().scopes_kept);
        sleep(ms(1_000)).await;
    }
    // 100,000 scopes seen, each kept for its one second: never more than the 1,024 the gate
    // keeps before it sweeps, and twice those in use.
    assert!(most_kept <= 2_048, "{most_kept} scopes kept");
    // A forgotten scope's rate starts afresh: its next call goes at once.
    let again = Instant::now();
    gate.call_in(["tenant-5"], || async { Ok(()) })
        .await
        .unwrap();
    assert_eq!(again.elapsed(), Duration::ZERO);
    assert!(start.elapsed() >= Duration::from_secs(100));
}

#[tokio::test(start_paused = true)]
async fn a_throttle_of_one_scope_cuts_that_scopes_adaptive_rate_alone() {
    let gate = Gate::builder(|account: &&'static str| {
        Some(RateLimited::new().retry_after(ms(100)).scope(*account))
    })
    .rate(50.0)
    .per_scope(ScopeLimits::new().adaptive(1.0, 10.0))
    .build()
    .unwrap();
    let throttled_once = Arc::new(Mutex::new(false));
    for account in ["a", "b"] {
        let throttled_once = Arc::clone(&throttled_once);
        gate.call_in([account], move || {
            let first =
                account == "a" && !std::mem::replace(&mut *throttled_once.lock().unwrap(), true);
            async move { if first { Err("a") } else { Ok(()) } }
        })
        .await
        .unwrap();
    }
    let a = gate.scope_rate("a").unwrap();
    assert!(a < 10.0, "a's rate was cut: {a}");
    assert_eq!(gate.scope_rate("b"), Some(10.0), "b's is untouched");
    assert_eq!(gate.stats().rate, Some(50.0), "so is the gate's");
    assert_eq!(gate.scope_rate("never seen"), None);
}

#[tokio::test(start_paused = true)]
async fn a_scope_whose_announced_window_is_open_is_kept_through_a_sweep() {
    let gate = Gate::builder(never)
        .max_in_flight(10_000)
        .per_scope(ScopeLimits::new())
        .quota_reserve(0)
        .build()
        .unwrap();
    let start = Instant::now();
    // Account a has spent its window: none left for 10 s.
    let spent = gate.call_in(["a"], || async {
        gate.observe_in("a", Quota::new(0, ms(10_000))).unwrap();
        Ok(())
    });
    spent.await.unwrap();
    // Enough other scopes, each idle at once, to sweep the table.
    let others = (0..2_000).map(|n| gate.call_in([format!("other-{n}")], || async { Ok(()) }));
    futures::future::try_join_all(others).await.unwrap();
    assert!(gate.stats().scopes_kept < 2_000, "swept");
    gate.call_in(["a"], || async { Ok(()) }).await.unwrap();
    assert_eq!(
        start.elapsed(),
        ms(10_000),
        "a's window still held its call"
    );
}

#[tokio::test(start_paused = true)]
async fn a_raised_rate_reaches_a_call_waiting_for_its_scopes_next_start() {
    let gate = Gate::builder(never)
        .per_scope(ScopeLimits::new().rate(1.0))
        .build()
        .unwrap();
    let start = Instant::now();
    let first = spawn_call(&gate, start, (0, 0), vec!["a".into()], (0, 0));
    // Due at 1 s, by a's rate: it waits on its timer, holding a's lane out of line.
    let second = spawn_call(&gate, start, (0, 1), vec!["a".into()], (1, 0));
    sleep_until(start + ms(100)).await;
    gate.set_scope_limits("a", ScopeLimits::new().rate(10.0))
        .unwrap();
    let started: Vec<_> = all_ended(vec![first, second])
        .await
        .iter()
        .map(|r| r.started)
        .collect();
    assert_eq!(
        started,
        [0, 100],
        "due 100 ms after the first at 10 a second"
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_that_holds_its_lane_for_its_scopes_rate_then_finds_its_slots_taken_waits_for_one() {
    // a: 2 in flight, 1 a second. b's call also needs a (a model, say), and steps out of
    // line alone until a's next start is due; a's second call holds a's lane until then.
    // At 1 s b's call takes a's second slot first: a's call, still holding its lane, now
    // waits for a slot, and must hear when one frees.
    let gate = Gate::builder(never)
        .per_scope(ScopeLimits::new().max_in_flight(2).rate(1.0))
        .build()
        .unwrap();
    let start = Instant::now();
    let a = || vec!["a".to_owned()];
    let first = spawn_call(&gate, start, (0, 0), a(), (0, 5_000));
    let other = spawn_call(&gate, start, (1, 1), vec!["b".into(), "a".into()], (1, 100));
    let second = spawn_call(&gate, start, (0, 2), a(), (2, 0));
    let ran = all_ended(vec![first, other, second]).await;
    let started: Vec<_> = ran.iter().map(|r| r.started).collect();
    assert_eq!(started, [0, 1_000, 2_000]);
}

#[tokio::test(start_paused = true)]
async fn what_a_call_cost_apart_from_its_estimate_moves_its_scopes_pace() {
    // Kills `Scopes::settle` replaced by `()`: each scope's pace settles a call's real cost
    // as the gate's does, and the gate itself has no rate here.
    let gate = Gate::builder(never)
        .per_scope(ScopeLimits::new().rate(10.0))
        .build()
        .unwrap();
    let start = Instant::now();
    let call = |scope: &'static str, cost: u64, actual: u64| {
        let gate = gate.clone();
        async move {
            let options = CallOptions::new().scopes([scope]).cost(cost);
            let at = || async { Ok::<_, ()>(support::ms_since(start)) };
            gate.call_settled(options, at, |_| actual).await.unwrap()
        }
    };
    // 2 units estimated, 5 used: a's next start waits 500 ms, not 200; b's is its own.
    assert_eq!(call("a", 2, 5).await, 0);
    assert_eq!(call("b", 1, 1).await, 0);
    // 5 estimated, 2 used: a's next waits 200 ms, not 500.
    assert_eq!(call("a", 5, 2).await, 500);
    assert_eq!(call("a", 1, 1).await, 700);
    // Estimated at 4, used 1, but it ends after another call of a started, spaced by its 4:
    // what it cost less stays spent, and the call after that waits for the other's 5 units.
    let slow = gate.call_settled(
        CallOptions::new().scopes(["a"]).cost(4),
        || async {
            let at = support::ms_since(start);
            sleep(ms(500)).await;
            Ok::<_, ()>(at)
        },
        |_| 1,
    );
    let (first, second) = tokio::join!(slow, call("a", 5, 5));
    assert_eq!((first.unwrap(), second), (800, 1_200));
    assert_eq!(call("a", 1, 1).await, 1_700);
}

/// A throttle of the scope the failed call names, announcing that scope's quota: nothing left
/// for 2 s.
fn spent(scope: &&'static str) -> Option<RateLimited> {
    let quota = Quota::new(0, ms(2_000));
    Some(
        RateLimited::new()
            .retry_after(ms(100))
            .scope(*scope)
            .quota(quota),
    )
}

/// A call of `scopes` in a task of its own whose first attempt fails with `error` (if any),
/// the next succeeding; when each of its attempts started, in ms since `start`.
fn spawn_tried(
    gate: &Gate<&'static str>,
    start: Instant,
    scopes: &[&'static str],
    error: Option<&'static str>,
) -> JoinHandle<Vec<u64>> {
    let (gate, scopes) = (gate.clone(), scopes.to_vec());
    tokio::spawn(async move {
        let tries = Arc::new(Mutex::new(Vec::new()));
        gate.call_in(scopes, || {
            // The gate makes a retry's future before it waits: the attempt starts when polled.
            let tries = Arc::clone(&tries);
            async move {
                let mut tries = tries.lock().unwrap();
                tries.push(support::ms_since(start));
                match error {
                    Some(error) if tries.len() == 1 => Err(error),
                    _ => Ok(()),
                }
            }
        })
        .await
        .unwrap();
        tries.lock().unwrap().clone()
    })
}

#[tokio::test(start_paused = true)]
async fn a_quota_announced_with_a_kept_scopes_throttle_paces_that_scope_alone() {
    // Kills `Scopes::keeps` replaced by `false`: the quota would pace the whole gate.
    let gate = Gate::builder(spent)
        .per_scope(ScopeLimits::new())
        .build()
        .unwrap();
    let start = Instant::now();
    // a's first attempt is throttled at once: its retry waits out a's backoff (100 ms) and
    // a's quota, with nothing left until it resets at 2 s.
    let a = spawn_tried(&gate, start, &["a"], Some("a"));
    sleep_until(start + ms(10)).await;
    let b = spawn_tried(&gate, start, &["b"], None);
    let neither = spawn_tried(&gate, start, &[], None);
    assert_eq!(
        b.await.unwrap(),
        [10],
        "b's calls are not held by a's quota"
    );
    assert_eq!(neither.await.unwrap(), [10], "nor the gate's");
    assert_eq!(a.await.unwrap(), [0, 2_000]);
}

#[tokio::test(start_paused = true)]
async fn a_quota_announced_with_the_throttle_of_a_scope_the_gate_keeps_nothing_of_is_the_gates() {
    // Kills `Scopes::keeps` replaced by `true`: the quota would go to a scope no call of the
    // gate names, and hold nothing.
    let gate = Gate::builder(|_: &&'static str| spent(&"api key"))
        .per_scope(ScopeLimits::new())
        .build()
        .unwrap();
    let start = Instant::now();
    let a = spawn_tried(&gate, start, &["a"], Some("a"));
    sleep_until(start + ms(10)).await;
    let b = spawn_tried(&gate, start, &["b"], None);
    // At the reset one call goes (a's retry, first in line), and b's once it answers.
    assert_eq!(a.await.unwrap(), [0, 2_000]);
    assert_eq!(
        b.await.unwrap(),
        [2_000],
        "the quota held every call of the gate"
    );
}

#[test]
fn a_builder_shows_the_limits_it_gives_each_scope_when_debugged() {
    // Kills `impl Debug for Rule`'s `fmt` replaced by `Ok(Default::default())`.
    let every = Gate::builder(never).per_scope(ScopeLimits::new().rate(2.0).max_in_flight(3));
    let shown = format!("{every:?}");
    assert!(
        shown.contains(
            "per_scope: Some(Every(ScopeLimits { rate: Some(2.0), adaptive: None, max_in_flight: Some(3), weight: 1, budgets: None }))"
        ),
        "{shown}"
    );
    let by = Gate::builder(never).per_scope_with(|_: &Scope| ScopeLimits::new());
    let shown = format!("{by:?}");
    assert!(shown.contains("per_scope: Some(By(..))"), "{shown}");
    let shown = format!("{:?}", by.build().unwrap());
    assert!(shown.contains("By(..)"), "the gate shows it too: {shown}");
}

#[tokio::test(start_paused = true)]
async fn idle_scopes_are_swept_only_once_the_table_has_doubled_since_the_last_sweep() {
    // Kills `Scopes::kept` replaced by 0 or 1 (the count of scopes kept, as the stats show
    // it), and `*` replaced by `+` in the sweep's threshold in `Scopes::started` (a sweep
    // every other start once the table holds 1,024, rather than once it has doubled).
    let gate = Gate::builder(never)
        .max_in_flight(10_000)
        .per_scope(ScopeLimits::new().rate(1.0))
        .build()
        .unwrap();
    // 1,100 scopes, each kept until its next start is due, in 1 s: the sweep when the
    // table reaches 1,024 keeps all 1,024, and the next waits for 2,048.
    let paced = (0..1_100).map(|n| gate.call_in([format!("paced-{n}")], || async { Ok(()) }));
    futures::future::try_join_all(paced).await.unwrap();
    assert_eq!(gate.stats().scopes_kept, 1_100);
    sleep(ms(1_000)).await;
    // Idle now, all of them, but kept until the table doubles.
    gate.call_in(["late"], || async { Ok(()) }).await.unwrap();
    assert_eq!(gate.stats().scopes_kept, 1_101);
}
