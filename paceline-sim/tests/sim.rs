//! Exact scenarios for the simulated API, in paused time (instants asserted to the millisecond).

use std::time::Duration;

use futures::future::join_all;
use paceline_sim::{
    Accepted, Announced, Limit, Log, OtherClients, Outcome, Policy, Rejected, Request, Server,
    Which,
};
use tokio::task::JoinHandle;
use tokio::time::{self, Instant, sleep, sleep_until};

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Whole milliseconds from `start` to `at`; panics on a fraction.
fn ms_from(start: Instant, at: Instant) -> u64 {
    let d = at - start;
    assert_eq!(d.subsec_nanos() % 1_000_000, 0, "not a whole ms: {d:?}");
    d.as_millis() as u64
}

/// Spawns a task that sends one call at `start + send_ms`.
fn call_at(
    api: &Server,
    send_ms: u64,
    scope: Option<&'static str>,
) -> JoinHandle<Result<Accepted, Rejected>> {
    let api = api.clone();
    let send = api.start() + ms(send_ms);
    tokio::spawn(async move {
        sleep_until(send).await;
        api.call(scope).await
    })
}

async fn all(
    handles: Vec<JoinHandle<Result<Accepted, Rejected>>>,
) -> Vec<Result<Accepted, Rejected>> {
    join_all(handles)
        .await
        .into_iter()
        .map(|r| r.expect("a call panicked"))
        .collect()
}

/// Our requests as (arrival ms, accepted, Retry-After ms).
fn our_view(log: &Log) -> Vec<(u64, bool, Option<u64>)> {
    log.ours()
        .map(|r| {
            let retry = r.retry_after.map(|d| d.as_millis() as u64);
            (ms_from(log.start(), r.arrived), r.is_accepted(), retry)
        })
        .collect()
}

fn accepted_arrivals(log: &Log) -> Vec<u64> {
    log.ours()
        .filter(|r| r.is_accepted())
        .map(|r| ms_from(log.start(), r.arrived))
        .collect()
}

fn retry_after_ms(answer: &Result<Accepted, Rejected>) -> Option<u64> {
    answer
        .as_ref()
        .err()?
        .retry_after
        .map(|d| d.as_millis() as u64)
}

// ---------------------------------------------------------------------------------------------
// Token bucket

#[tokio::test(start_paused = true)]
async fn token_bucket_admits_the_burst_then_the_rate() {
    let api = Server::builder()
        .global(Policy::token_bucket(2.0, 3))
        .build();
    // Ten at once: the burst of 3 goes, the rest are told when the next token comes (500 ms).
    let answers = all((0..10).map(|_| call_at(&api, 0, None)).collect()).await;
    assert_eq!(answers.iter().filter(|a| a.is_ok()).count(), 3);
    assert!(
        answers
            .iter()
            .filter(|a| a.is_err())
            .all(|a| retry_after_ms(a) == Some(500))
    );

    // Then back to back from 100 ms (arrivals every 100 ms from 150 ms): one every 500 ms.
    for _ in 0..20 {
        let _ = api.call(None).await;
    }
    let log = api.log();
    let accepted = accepted_arrivals(&log);
    assert_eq!(accepted, [50, 50, 50, 550, 1_050, 1_550, 2_050]);
    // The bucket was empty at 50 ms; at 150 ms it holds 0.2 token, so the next is 400 ms away.
    assert_eq!(our_view(&log)[10], (150, false, Some(400)));
}

#[tokio::test(start_paused = true)]
async fn token_bucket_refills_to_its_burst_only() {
    let api = Server::builder()
        .latency(Duration::ZERO)
        .global(Policy::token_bucket(4.0, 4))
        .build();
    for _ in 0..4 {
        api.call(None).await.unwrap();
    }
    sleep(10 * SEC).await;
    let answers = all((0..6).map(|_| call_at(&api, 10_000, None)).collect()).await;
    assert_eq!(answers.iter().filter(|a| a.is_ok()).count(), 4);
}

#[tokio::test(start_paused = true)]
async fn the_rate_schedule_changes_the_rate_at_its_instants() {
    let policy = Policy::token_bucket(4.0, 1)
        .rate_from(100 * SEC, 2.0)
        .rate_from(200 * SEC, 4.0);
    let api = Server::builder()
        .latency(Duration::ZERO)
        .global(policy)
        .build();
    // A polite client without latency: calls, and after a throttle waits exactly Retry-After.
    while api.start().elapsed() < 300 * SEC {
        if let Err(e) = api.call(None).await {
            sleep(e.retry_after.unwrap()).await;
        }
    }
    let accepted = accepted_arrivals(&api.log());
    let mut expected: Vec<u64> = (0..=400).map(|k| k * 250).collect(); // to 100 s at 4/s
    expected.extend((1..=200).map(|k| 100_000 + k * 500)); // to 200 s at 2/s
    expected.extend((1..400).map(|k| 200_000 + k * 250)); // at 4/s until the client stops
    assert_eq!(accepted, expected);
}

// ---------------------------------------------------------------------------------------------
// Fixed window

#[tokio::test(start_paused = true)]
async fn fixed_windows_are_aligned_at_the_start_plus_the_phase() {
    let api = Server::builder()
        .global(Policy::fixed_window(2, SEC).phase(ms(300)))
        .build();
    // Arrivals at 50, 150, 250 | 350, 1250, 1299 | 1300.
    let sends = [0, 100, 200, 300, 1_200, 1_249, 1_250];
    let answers = all(sends.iter().map(|&t| call_at(&api, t, None)).collect()).await;
    let got: Vec<_> = answers
        .iter()
        .map(|a| (a.is_ok(), retry_after_ms(a)))
        .collect();
    assert_eq!(
        got,
        [
            (true, None),
            (true, None),
            (false, Some(50)), // window [-700, 300) is full
            (true, None),
            (true, None),
            (false, Some(1)), // window [300, 1300) is full
            (true, None),
        ]
    );
    assert_eq!(
        api.log()
            .fixed_windows_over(SEC, ms(300), 2, Which::OursAccepted),
        0
    );
}

// ---------------------------------------------------------------------------------------------
// Penalty

#[tokio::test(start_paused = true)]
async fn the_penalty_doubles_for_each_request_inside_and_caps() {
    let policy = Policy::token_bucket(1.0, 1).penalty(15 * SEC, 60 * SEC);
    let api = Server::builder().global(policy).build();
    // Back to back: arrivals at 50, 150, …, 550.
    let answers: Vec<_> = {
        let mut v = Vec::new();
        for _ in 0..6 {
            v.push(api.call(None).await);
        }
        v
    };
    let retry: Vec<_> = answers.iter().map(retry_after_ms).collect();
    assert_eq!(
        retry,
        [
            None,
            Some(15_000),
            Some(30_000),
            Some(60_000),
            Some(60_000),
            Some(60_000)
        ]
    );
    let log = api.log();
    let outcomes: Vec<_> = log.ours().map(|r| r.outcome).collect();
    let over = Outcome::Rejected {
        by: Limit::Global,
        in_penalty: false,
    };
    let inside = Outcome::Rejected {
        by: Limit::Global,
        in_penalty: true,
    };
    assert_eq!(
        outcomes,
        [Outcome::Accepted, over, inside, inside, inside, inside]
    );
    assert_eq!(
        (log.accepted(), log.rejected(), log.in_penalty()),
        (1, 5, 4)
    );
    // The last restarted the penalty at 550 ms, for 60 s: it runs to 60.55 s.
    let end = api.start() + ms(60_550);
    sleep_until(end - ms(51)).await;
    assert!(api.call(None).await.unwrap_err().retry_after == Some(60 * SEC));
    // That one (arrived at 60.549 s) restarted it again, to 120.549 s; arrive just at its end.
    sleep_until(api.start() + ms(120_549 - 50)).await;
    assert!(api.call(None).await.is_ok());
}

#[tokio::test(start_paused = true)]
async fn a_new_penalty_starts_at_first_again() {
    let policy = Policy::fixed_window(1, SEC).penalty(2 * SEC, 60 * SEC);
    let api = Server::builder().global(policy).build();
    api.call(None).await.unwrap(); // arrives at 50
    let e = api.call(None).await.unwrap_err(); // 150: over, 2 s to 2.15 s
    assert_eq!(e.retry_after, Some(2 * SEC));
    let e = api.call(None).await.unwrap_err(); // 250: inside, 4 s to 4.25 s
    assert_eq!(e.retry_after, Some(4 * SEC));
    sleep_until(api.start() + ms(5_000 - 50)).await;
    api.call(None).await.unwrap(); // 5 s: penalty over, new window
    let e = api.call(None).await.unwrap_err(); // 5.1 s: over, a new penalty of 2 s
    assert_eq!(e.retry_after, Some(2 * SEC));
}

#[tokio::test(start_paused = true)]
async fn sent_into_a_known_penalty_counts_sends_after_the_news() {
    let policy = Policy::token_bucket(1.0, 1).penalty(15 * SEC, 900 * SEC);
    let careless = Server::builder().global(policy.clone()).build();
    let handles = [0, 100, 199, 210].map(|t| call_at(&careless, t, None));
    all(handles.into()).await;
    // Arrivals 50 (ok), 150 (a penalty of 15 s), 249, 260 (inside it). The throttle of #1
    // reached the caller at 200 ms: #2 was sent before that, #3 after.
    let log = careless.log();
    assert_eq!(log.in_penalty(), 2);
    assert_eq!(log.sent_into_known_penalty(), 1);

    // One task calling again as soon as it hears back sends at the instant of the news: the
    // log still orders the two events, and counts the sends.
    let sequential = Server::builder().global(policy.clone()).build();
    for _ in 0..5 {
        let _ = sequential.call(None).await;
    }
    assert_eq!(sequential.log().sent_into_known_penalty(), 3);

    let polite = Server::builder().global(policy).build();
    for _ in 0..3 {
        match polite.call(None).await {
            Ok(_) => {}
            Err(e) => sleep(e.retry_after.unwrap()).await,
        }
    }
    let log = polite.log();
    assert_eq!((log.accepted(), log.rejected()), (2, 1));
    assert_eq!((log.in_penalty(), log.sent_into_known_penalty()), (0, 0));
}

// ---------------------------------------------------------------------------------------------
// Retry-After

#[tokio::test(start_paused = true)]
async fn retry_after_is_sent_or_not_as_configured() {
    for on in [true, false] {
        let bucket = Server::builder()
            .global(Policy::token_bucket(4.0, 1).retry_after(on))
            .build();
        let window = Server::builder()
            .global(Policy::fixed_window(1, SEC).retry_after(on))
            .build();
        let penalty = Server::builder()
            .global(
                Policy::fixed_window(1, SEC)
                    .penalty(15 * SEC, 60 * SEC)
                    .retry_after(on),
            )
            .build();
        let mut got = Vec::new();
        for api in [&bucket, &window, &penalty] {
            api.call(None).await.unwrap(); // arrives at 50 ms
            got.push(retry_after_ms(&api.call(None).await)); // 150 ms
            got.push(retry_after_ms(&api.call(None).await)); // 250 ms
            sleep_until(api.start() + SEC).await;
        }
        let expected = if on {
            // Next token at 300 ms; window ends at 1 s; penalty 15 s then 30 s.
            [
                Some(150),
                Some(50),
                Some(850),
                Some(750),
                Some(15_000),
                Some(30_000),
            ]
        } else {
            [None; 6]
        };
        assert_eq!(got, expected, "retry_after({on})");
    }
}

// ---------------------------------------------------------------------------------------------
// Other clients

#[tokio::test(start_paused = true)]
async fn other_clients_take_their_share_first() {
    let policy = Policy::fixed_window(10, SEC).other_clients(OtherClients::even(4.0));
    let api = Server::builder().global(policy).build();
    // Ours arrive at 900 ms and 1900 ms, 20 each; others at every 250 ms.
    let mut handles: Vec<_> = (0..20).map(|_| call_at(&api, 850, None)).collect();
    handles.extend((0..20).map(|_| call_at(&api, 1_850, None)));
    all(handles).await;
    let log = api.log();
    // [0, 1 s) had 3 of theirs (250, 500, 750): 7 of ours. [1 s, 2 s) had 4: 6 of ours.
    assert_eq!(log.accepted(), 13);
    assert_eq!(log.others(), 7);
    // The server's windows never held more than 10; a sliding second did: [900, 1900) holds
    // our 7 at 900 and their 4.
    assert_eq!(log.max_in_window(SEC, Which::AllAccepted), 11);
    assert_eq!(
        log.fixed_windows_over(SEC, Duration::ZERO, 10, Which::AllAccepted),
        0
    );
    let theirs: Vec<_> = log
        .requests()
        .iter()
        .filter(|r| !r.ours)
        .map(|r| {
            (
                ms_from(log.start(), r.arrived),
                r.is_accepted(),
                r.number,
                r.sent,
            )
        })
        .collect();
    let expected: Vec<_> = [250, 500, 750, 1_000, 1_250, 1_500, 1_750]
        .into_iter()
        .map(|t| (t, true, None, None))
        .collect();
    assert_eq!(theirs, expected);
}

#[tokio::test(start_paused = true)]
async fn other_clients_come_first_at_the_same_instant_and_never_start_a_penalty() {
    let policy = Policy::fixed_window(1, SEC)
        .penalty(10 * SEC, 60 * SEC)
        .other_clients(OtherClients::even(2.0));
    let api = Server::builder().global(policy).build();
    // Theirs at 500 takes the first window's room; ours at 500 is over (a penalty starts).
    let e = call_at(&api, 450, None).await.unwrap().unwrap_err();
    assert_eq!(e.retry_after, Some(10 * SEC));
    // Theirs at 1000 takes the next window's room, theirs at 1500 is rejected: no penalty
    // grows from them (ours is still in the first one, so check the log instead).
    sleep(2 * SEC).await;
    let log = api.log();
    let theirs: Vec<_> = log
        .requests()
        .iter()
        .filter(|r| !r.ours)
        .map(|r| (ms_from(log.start(), r.arrived), r.outcome))
        .collect();
    let over = Outcome::Rejected {
        by: Limit::Global,
        in_penalty: false,
    };
    assert_eq!(
        theirs,
        [
            (500, Outcome::Accepted),
            (1_000, Outcome::Accepted),
            (1_500, over),
            (2_000, Outcome::Accepted),
            (2_500, over)
        ]
    );
    // Our penalty still ends at 10.5 s.
    sleep_until(api.start() + ms(10_500 - 50)).await;
    // The window [10 s, 11 s) was taken by theirs at 10 s; over, not inside a penalty.
    let e = api.call(None).await.unwrap_err();
    assert_eq!(e.retry_after, Some(10 * SEC));
    assert!(!api.log().ours().last().unwrap().in_penalty());
}

#[tokio::test(start_paused = true)]
async fn random_other_clients_keep_their_mean_rate_and_the_server_its_limit() {
    let policy = Policy::token_bucket(10.0, 1).other_clients(OtherClients::random(4.0));
    let api = Server::builder()
        .seed(7)
        .latency(Duration::ZERO)
        .global(policy)
        .build();
    while api.start().elapsed() < 100 * SEC {
        if let Err(e) = api.call(None).await {
            sleep(e.retry_after.unwrap()).await;
        }
    }
    let log = api.log();
    assert!(
        (340..=460).contains(&log.others()),
        "{} others",
        log.others()
    );
    let all_accepted = log.requests().iter().filter(|r| r.is_accepted()).count();
    // A greedy client takes every token the moment it comes (10/s, plus the first).
    assert!(
        (995..=1_001).contains(&all_accepted),
        "{all_accepted} accepted"
    );
    // Arrivals at whole milliseconds.
    assert!(
        log.requests()
            .iter()
            .all(|r| (r.arrived - log.start()).subsec_nanos() % 1_000_000 == 0)
    );
}

// ---------------------------------------------------------------------------------------------
// Scopes

#[tokio::test(start_paused = true)]
async fn each_scope_has_its_own_limit_under_the_global_one() {
    let api = Server::builder()
        .global(Policy::fixed_window(5, SEC))
        .per_scope(Policy::fixed_window(2, SEC))
        .build();
    let scopes = [
        Some("a"),
        Some("a"),
        Some("a"),
        Some("b"),
        Some("b"),
        None,
        None,
        None,
    ];
    let answers = all(scopes.iter().map(|&s| call_at(&api, 0, s)).collect()).await;
    let got: Vec<_> = answers
        .iter()
        .map(|a| a.as_ref().map(|_| ()).map_err(|e| e.scope.clone()))
        .collect();
    assert_eq!(
        got,
        [
            Ok(()),
            Ok(()),
            Err(Some("a".to_owned())), // a's limit; uses no global room
            Ok(()),
            Ok(()),
            Ok(()),    // the 5th in the global window
            Err(None), // the global limit
            Err(None),
        ]
    );
    let log = api.log();
    assert_eq!(log.in_scope(Some("a")).accepted(), 2);
    assert_eq!(log.in_scope(None).rejected(), 2);
    let by: Vec<_> = log
        .ours()
        .filter_map(|r| match r.outcome {
            Outcome::Rejected { by, .. } => Some(by),
            Outcome::Accepted => None,
        })
        .collect();
    assert_eq!(by, [Limit::Scope, Limit::Global, Limit::Global]);
}

#[tokio::test(start_paused = true)]
async fn a_scope_penalty_holds_back_its_scope_only() {
    let api = Server::builder()
        .per_scope(Policy::fixed_window(1, SEC).penalty(15 * SEC, 60 * SEC))
        .build();
    api.call(Some("a")).await.unwrap();
    let e = api.call(Some("a")).await.unwrap_err();
    assert_eq!(
        (e.retry_after, e.scope.as_deref()),
        (Some(15 * SEC), Some("a"))
    );
    api.call(Some("b")).await.unwrap();
    api.call(None).await.unwrap();
    let e = api.call(Some("a")).await.unwrap_err();
    assert_eq!(e.retry_after, Some(30 * SEC));
    assert_eq!(api.log().sent_into_known_penalty(), 1);
}

// ---------------------------------------------------------------------------------------------
// Latency

#[tokio::test(start_paused = true)]
async fn latency_up_and_down_are_exact() {
    let api = Server::builder()
        .latency_up(ms(30))
        .latency_down(ms(70))
        .build();
    sleep(ms(5)).await;
    let answer = api.call(Some("x")).await.unwrap();
    assert_eq!(answer.request, 0);
    assert_eq!(ms_from(api.start(), Instant::now()), 105);
    let log = api.log();
    let r = &log.requests()[0];
    let t = |i: Option<Instant>| i.map(|i| ms_from(log.start(), i));
    assert_eq!(
        (t(r.sent), ms_from(log.start(), r.arrived), t(r.answered)),
        (Some(5), 35, Some(105))
    );
    assert_eq!(
        (r.number, r.scope.as_deref(), r.sends_before_answer),
        (Some(0), Some("x"), Some(1))
    );
}

#[tokio::test(start_paused = true)]
async fn the_default_latency_is_50_ms_each_way() {
    let api = Server::builder().build();
    api.call(None).await.unwrap();
    assert_eq!(api.start().elapsed(), 100 * MS);
}

#[tokio::test(start_paused = true)]
async fn jitter_adds_whole_milliseconds_up_to_its_maximum() {
    let api = Server::builder()
        .latency(ms(50))
        .jitter(ms(10))
        .seed(1)
        .build();
    all((0..200).map(|k| call_at(&api, k, None)).collect()).await;
    let log = api.log();
    let mut ups = Vec::new();
    for r in log.ours() {
        let up = ms_from(r.sent.unwrap(), r.arrived);
        let down = ms_from(r.arrived, r.answered.unwrap());
        assert!(
            (50..=60).contains(&up) && (50..=60).contains(&down),
            "{up} {down}"
        );
        ups.push(up);
    }
    assert!(ups.contains(&50) && ups.contains(&60));
    // Requests overtake each other: the log is in arrival order, not sending order.
    let numbers: Vec<_> = log.ours().map(|r| r.number.unwrap()).collect();
    assert!(numbers.windows(2).any(|w| w[0] > w[1]));
}

#[tokio::test(start_paused = true)]
async fn a_dropped_call_still_reaches_the_server() {
    let api = Server::builder()
        .global(Policy::fixed_window(1, SEC))
        .build();
    // Dropped on the way up, and on the way down.
    assert!(time::timeout(ms(10), api.call(None)).await.is_err());
    assert!(time::timeout(ms(60), api.call(None)).await.is_err());
    sleep(SEC).await;
    let log = api.log();
    let seen: Vec<_> = log
        .ours()
        .map(|r| (ms_from(log.start(), r.arrived), r.is_accepted(), r.answered))
        .collect();
    assert_eq!(seen, [(50, true, None), (60, false, None)]);
}

// ---------------------------------------------------------------------------------------------
// Log analyses on hand-made logs

fn request(start: Instant, arrived_ms: u64, ours: bool, outcome: Outcome) -> Request {
    Request {
        ours,
        number: None,
        scope: None,
        sent: None,
        arrived: start + ms(arrived_ms),
        answered: None,
        sends_before_answer: None,
        outcome,
        retry_after: None,
    }
}

#[test]
fn window_analyses_on_a_hand_made_log() {
    let t0 = Instant::now();
    let rejected = Outcome::Rejected {
        by: Limit::Global,
        in_penalty: false,
    };
    let in_penalty = Outcome::Rejected {
        by: Limit::Global,
        in_penalty: true,
    };
    let log = Log::new(
        t0,
        vec![
            request(t0, 2_000, true, Outcome::Accepted),
            request(t0, 0, true, Outcome::Accepted),
            request(t0, 500, false, Outcome::Accepted),
            request(t0, 999, true, Outcome::Accepted),
            request(t0, 999, true, rejected),
            request(t0, 1_000, false, rejected),
            request(t0, 1_998, true, in_penalty),
            request(t0, 1_999, true, Outcome::Accepted),
        ],
    );
    let arrivals: Vec<_> = log
        .requests()
        .iter()
        .map(|r| ms_from(t0, r.arrived))
        .collect();
    assert_eq!(arrivals, [0, 500, 999, 999, 1_000, 1_998, 1_999, 2_000]);
    assert_eq!(
        (
            log.accepted(),
            log.rejected(),
            log.in_penalty(),
            log.others()
        ),
        (4, 2, 1, 2)
    );

    // Ours accepted at 0, 999, 1999, 2000: [0, 1000) and [1999, 2999) hold 2.
    assert_eq!(log.max_in_window(SEC, Which::OursAccepted), 2);
    // All of ours: [999, 1999) holds 999, 999, 1998.
    assert_eq!(log.max_in_window(SEC, Which::OursArrived), 3);
    // Accepted, ours and theirs: [0, 1000) holds 0, 500, 999.
    assert_eq!(log.max_in_window(SEC, Which::AllAccepted), 3);
    // Everything: [999, 1999) holds 999, 999, 1000, 1998.
    assert_eq!(log.max_in_window(SEC, Which::AllArrived), 4);
    // A window of 1 ms holds the two at 999.
    assert_eq!(log.max_in_window(MS, Which::AllArrived), 2);

    // Over 2 per second, ours (0, 999, 999, 1998, 1999, 2000): the second at 999 (third in
    // (-1, 999]), 1998 (third in (998, 1998]) and 2000 (third in (1000, 2000]); not 1999, as
    // (999, 1999] leaves out the two at 999.
    assert_eq!(log.over_limit(SEC, 2, Which::OursArrived), 3);
    // Over 3, everything: the second at 999, 1000, 1998.
    assert_eq!(log.over_limit(SEC, 3, Which::AllArrived), 3);
    assert_eq!(log.over_limit(SEC, 4, Which::AllArrived), 0);
    // Aligned windows [0, 1000), [1000, 2000), [2000, 3000) hold 4, 3, 1 of all arrivals.
    assert_eq!(
        log.fixed_windows_over(SEC, Duration::ZERO, 3, Which::AllArrived),
        1
    );
    assert_eq!(
        log.fixed_windows_over(SEC, Duration::ZERO, 2, Which::AllArrived),
        2
    );
    // With a phase of 999 ms: [-1, 999), [999, 1999), [1999, 2999) hold 2, 4, 2.
    assert_eq!(
        log.fixed_windows_over(SEC, ms(999), 2, Which::AllArrived),
        1
    );
}

#[test]
fn sent_into_known_penalty_on_a_hand_made_log() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + ms(n);
    let ours = |number: u64, scope: Option<&str>, sent: u64| Request {
        number: Some(number),
        scope: scope.map(str::to_owned),
        sent: Some(at(sent)),
        ..request(t0, sent + 50, true, Outcome::Accepted)
    };
    // #0 was throttled by the global limit at 50 ms for 1 s (to 1050 ms); the answer reached
    // the caller at 100 ms, after #0 and #1 had been sent.
    let throttled = Request {
        outcome: Outcome::Rejected {
            by: Limit::Global,
            in_penalty: false,
        },
        retry_after: Some(SEC),
        answered: Some(at(100)),
        sends_before_answer: Some(2),
        ..ours(0, None, 0)
    };
    let log = Log::new(
        t0,
        vec![
            throttled.clone(),
            ours(1, None, 100), // sent before the answer was delivered: not counted
            ours(2, Some("a"), 100), // sent after it, at the same instant: counted
            ours(3, None, 1_049), // counted
            ours(4, None, 1_050), // the penalty is over
        ],
    );
    assert_eq!(log.sent_into_known_penalty(), 2);

    // A scope's throttle covers its own scope only; one without Retry-After tells nothing.
    let scoped = Request {
        outcome: Outcome::Rejected {
            by: Limit::Scope,
            in_penalty: false,
        },
        scope: Some("a".to_owned()),
        ..throttled.clone()
    };
    let silent = Request {
        retry_after: None,
        ..throttled.clone()
    };
    let later = |log_head: Request| {
        Log::new(
            t0,
            vec![
                log_head,
                ours(2, Some("a"), 200),
                ours(3, Some("b"), 200),
                ours(4, None, 200),
            ],
        )
    };
    assert_eq!(later(scoped).sent_into_known_penalty(), 1);
    assert_eq!(later(silent).sent_into_known_penalty(), 0);
    assert_eq!(later(throttled).sent_into_known_penalty(), 3);
}

// ---------------------------------------------------------------------------------------------
// Determinism

/// A busy scenario with jitter, random other clients, scopes and a penalty, as offsets.
async fn busy_scenario(
    seed: u64,
) -> Vec<(
    Option<u64>,
    Option<u64>,
    u64,
    Option<u64>,
    Outcome,
    Option<Duration>,
)> {
    let api = Server::builder()
        .seed(seed)
        .jitter(ms(20))
        .global(Policy::token_bucket(5.0, 5).other_clients(OtherClients::random(2.0)))
        .per_scope(
            Policy::fixed_window(2, SEC)
                .penalty(SEC, 8 * SEC)
                .other_clients(OtherClients::random(0.5)),
        )
        .build();
    let handles: Vec<_> = (0..300)
        .map(|k| call_at(&api, k * 37, [Some("a"), Some("b"), None][k as usize % 3]))
        .collect();
    all(handles).await;
    let log = api.log();
    let start = log.start();
    let off = |i: Option<Instant>| i.map(|i| ms_from(start, i));
    log.requests()
        .iter()
        .map(|r| {
            (
                r.number,
                off(r.sent),
                ms_from(start, r.arrived),
                off(r.answered),
                r.outcome,
                r.retry_after,
            )
        })
        .collect()
}

#[test]
fn the_same_seed_gives_the_same_log() {
    let run = |seed| {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap()
            .block_on(busy_scenario(seed))
    };
    let first = run(42);
    assert!(first.len() > 300, "other clients are in the log");
    assert!(first.iter().any(|r| matches!(
        r.4,
        Outcome::Rejected {
            in_penalty: true,
            ..
        }
    )));
    assert_eq!(first, run(42));
    assert_ne!(first, run(43));
}

#[tokio::test(start_paused = true)]
async fn the_same_seed_gives_the_same_log_within_one_runtime() {
    let first = busy_scenario(5).await;
    assert_eq!(first, busy_scenario(5).await);
}

// ---------------------------------------------------------------------------------------------
// Announced quotas

/// An answer's (accepted, tightest quota, each policy's quotas, Retry-After).
type Announcement = (
    bool,
    Option<Announced>,
    Vec<(Limit, Announced)>,
    Option<Duration>,
);

fn announced(answer: &Result<Accepted, Rejected>) -> Announcement {
    match answer {
        Ok(a) => (true, a.quota, a.quotas.clone(), None),
        Err(r) => (false, r.quota, r.quotas.clone(), r.retry_after),
    }
}

fn quota(remaining: u64, resets_in: Duration, limit: u64, window: Duration) -> Announced {
    Announced {
        remaining,
        resets_in,
        limit,
        window,
    }
}

#[tokio::test(start_paused = true)]
async fn a_fixed_window_announces_exactly_across_its_boundaries() {
    let api = Server::builder()
        .global(
            Policy::fixed_window(2, SEC)
                .phase(ms(300))
                .announce_quota(true),
        )
        .build();
    // Arrivals at 50, 150, 250 | 350, 1250, 1299 | 1300, in windows that end at 300, 1300, 2300.
    let sends = [0, 100, 200, 300, 1_200, 1_249, 1_250];
    let answers = all(sends.iter().map(|&t| call_at(&api, t, None)).collect()).await;
    let got: Vec<_> = answers
        .iter()
        .map(|a| {
            let (ok, q, _, _) = announced(a);
            let q = q.expect("an announcement");
            assert_eq!((q.limit, q.window), (2, SEC));
            (ok, q.remaining, q.resets_in.as_millis() as u64)
        })
        .collect();
    assert_eq!(
        got,
        [
            (true, 1, 250),
            (true, 0, 150),
            (false, 0, 50), // rejected: none left, and the reset is the Retry-After
            (true, 1, 950),
            (true, 0, 50),
            (false, 0, 1),
            (true, 1, 1_000),
        ]
    );
    for a in &answers {
        let (_, q, quotas, retry_after) = announced(a);
        assert_eq!(quotas, [(Limit::Global, q.unwrap())]);
        if let Some(retry_after) = retry_after {
            assert_eq!(q.unwrap().resets_in, retry_after);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_token_bucket_announces_whole_tokens_and_the_time_to_fill_up() {
    let api = Server::builder()
        .latency(Duration::ZERO)
        .global(Policy::token_bucket(2.0, 3).announce_quota(true))
        .build();
    let window = ms(1_500); // 3 tokens at 2 per second
    let answers = join_all((0..4).map(|_| api.call(None))).await;
    let got: Vec<_> = answers
        .iter()
        .map(announced)
        .map(|a| (a.0, a.1, a.3))
        .collect();
    assert_eq!(
        got,
        [
            (true, Some(quota(2, ms(500), 3, window)), None),
            (true, Some(quota(1, SEC, 3, window)), None),
            (true, Some(quota(0, ms(1_500), 3, window)), None),
            // Rejected: the next token is 500 ms away, the full bucket 1.5 s.
            (false, Some(quota(0, ms(1_500), 3, window)), Some(ms(500))),
        ]
    );
    // At 700 ms it holds 1.4 tokens: one goes, 0.4 is left (none whole), 2.6 are missing.
    sleep(ms(700)).await;
    let a = api.call(None).await.unwrap();
    assert_eq!(a.quota, Some(quota(0, ms(1_300), 3, window)));
}

#[tokio::test(start_paused = true)]
async fn announcements_count_other_clients_and_hold_to_the_end_of_a_penalty() {
    let policy = Policy::fixed_window(5, SEC)
        .other_clients(OtherClients::even(4.0))
        .penalty(2 * SEC, 8 * SEC)
        .announce_quota(true);
    let api = Server::builder().global(policy).build();
    let remaining_and_reset = |a: &Result<Accepted, Rejected>| {
        let q = announced(a).1.unwrap();
        (a.is_ok(), q.remaining, q.resets_in.as_millis() as u64)
    };
    // Theirs at 250 and 500 took two of the first window's five: ours at 600 leaves two.
    let first = call_at(&api, 550, None).await.unwrap();
    assert_eq!(remaining_and_reset(&first), (true, 2, 400));
    // At 700: two more go in; the third is over and starts a penalty of 2 s, to 2.7 s,
    // which outlasts the window (it ends at 1 s).
    let answers = all((0..3).map(|_| call_at(&api, 650, None)).collect()).await;
    let got: Vec<_> = answers.iter().map(remaining_and_reset).collect();
    assert_eq!(got, [(true, 1, 300), (true, 0, 300), (false, 0, 2_000)]);
    // Inside the penalty at 1.65 s (the window has room): it grows to 4 s, to 5.65 s.
    let inside = call_at(&api, 1_600, None).await.unwrap();
    assert_eq!(remaining_and_reset(&inside), (false, 0, 4_000));
    // After it, at 6 s: theirs at 6 s came first.
    let after = call_at(&api, 5_950, None).await.unwrap();
    assert_eq!(remaining_and_reset(&after), (true, 3, 1_000));
}

#[tokio::test(start_paused = true)]
async fn a_global_and_a_scope_policy_announce_each_and_the_tightest_leads() {
    let api = Server::builder()
        .latency(Duration::ZERO)
        .global(Policy::fixed_window(10, SEC).announce_quota(true))
        .per_scope(Policy::token_bucket(1.0, 2).announce_quota(true))
        .build();
    let scopes = [Some("a"), Some("a"), Some("a"), None];
    let answers = join_all(scopes.map(|s| api.call(s))).await;
    let global = |remaining| (Limit::Global, quota(remaining, SEC, 10, SEC));
    let scope = |remaining, resets_in| (Limit::Scope, quota(remaining, resets_in, 2, 2 * SEC));
    let expected = [
        (true, vec![global(9), scope(1, SEC)]),
        (true, vec![global(8), scope(0, 2 * SEC)]),
        // The scope rejects the third, which the global window does not count.
        (false, vec![global(8), scope(0, 2 * SEC)]),
        (true, vec![global(7)]),
    ];
    for (answer, (ok, quotas)) in answers.iter().zip(expected) {
        let (got_ok, quota, got_quotas, _) = announced(answer);
        assert_eq!((got_ok, &got_quotas), (ok, &quotas));
        // The one with fewer left.
        let tightest = quotas.iter().map(|&(_, q)| q).min_by_key(|q| q.remaining);
        assert_eq!(quota, tightest);
    }
    assert_eq!(announced(&answers[0]).1.unwrap().limit, 2);
}

#[tokio::test(start_paused = true)]
async fn no_policy_announces_unless_told_to() {
    let api = Server::builder()
        .global(Policy::fixed_window(1, SEC))
        .per_scope(Policy::unlimited().announce_quota(true))
        .build();
    for answer in [api.call(Some("a")).await, api.call(Some("a")).await] {
        let (_, quota, quotas, _) = announced(&answer);
        assert_eq!((quota, quotas), (None, vec![]));
    }
}

// ---------------------------------------------------------------------------------------------
// Types

#[test]
fn public_types_are_send_sync_and_errors_are_errors() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Server>();
    send_sync::<Log>();
    send_sync::<Rejected>();
    send_sync::<Accepted>();
    send_sync::<Announced>();
    fn error<E: std::error::Error + Send + Sync + 'static>() {}
    error::<Rejected>();
    fn send_future<F: std::future::Future + Send>(_: F) {}
    let api = Server::builder().build();
    send_future(api.call(Some("scope")));
}
