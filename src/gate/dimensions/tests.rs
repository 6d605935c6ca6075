use std::time::Duration;

use tokio::time::Instant;

use super::announced::{Kept, Moving};
use super::*;
use crate::Quota;
use crate::error::ConfigError;

const SEC: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);

fn tokens(n: u64) -> Draws {
    Draws::NONE.with(Dimension::TOKENS, n)
}

#[test]
fn a_call_draws_its_units_one_request_and_what_it_names() {
    let draws = tokens(700).with(Dimension::new("rows"), 3);
    assert_eq!(draws.of(&Dimension::UNITS, 5), 5);
    assert_eq!(draws.of(&Dimension::REQUESTS, 5), 1);
    assert_eq!(draws.of(&Dimension::TOKENS, 5), 700);
    assert_eq!(draws.of(&Dimension::new("rows"), 5), 3);
    assert_eq!(draws.of(&Dimension::OUTPUT_TOKENS, 5), 0);
    assert_eq!(
        draws.with(Dimension::TOKENS, 10).of(&Dimension::TOKENS, 5),
        10,
        "replaced"
    );
    assert_eq!(
        Draws::NONE
            .with(Dimension::REQUESTS, 0)
            .of(&Dimension::REQUESTS, 1),
        0
    );
}

#[test]
fn a_call_waits_for_every_budget_it_draws_from() {
    let t0 = Instant::now();
    let budgets = [
        Budget::per_second(Dimension::REQUESTS, 10).window(Window::Fixed),
        Budget::per_minute(Dimension::TOKENS, 1_000).window(Window::Fixed),
    ];
    let mut dims = Dimensions::new(&budgets, 0);
    assert!(!dims.is_empty());
    assert_eq!(dims.check(t0, 1, &tokens(600)), Spend::Now);
    dims.started(t0, 1, &tokens(600));
    assert_eq!(dims.left(&Dimension::TOKENS, t0), Some(400));
    assert_eq!(dims.left(&Dimension::REQUESTS, t0), Some(9));
    assert_eq!(dims.left(&Dimension::INPUT_TOKENS, t0), None);
    // Tokens hold the next back a minute; a call naming none goes.
    assert_eq!(
        dims.check(t0, 1, &tokens(600)),
        Spend::NotBefore(t0 + 60 * SEC)
    );
    assert_eq!(dims.earliest(t0, 1, &tokens(600)), t0 + 60 * SEC);
    assert_eq!(dims.check(t0, 1, &Draws::NONE), Spend::Now);
}

#[test]
fn announced_budgets_are_kept_per_dimension_and_policy_less_what_is_in_flight() {
    let t0 = Instant::now();
    let mut dims = Dimensions::new(&[], 0);
    assert!(dims.is_empty());
    dims.started(t0, 1, &tokens(300));
    let second = Announcement::new(Dimension::UNITS, Quota::new(5, SEC)).policy("second");
    let day = Announcement::new(Dimension::UNITS, Quota::new(2, 3600 * SEC)).policy("day");
    let words = Announcement::new(Dimension::TOKENS, Quota::new(1_000, 10 * SEC));
    assert!(dims.observe(&second, (None, 0, 0), t0));
    assert!(dims.observe(&day, (None, 0, 0), t0));
    assert!(dims.observe(&words, (None, 1, 1), t0));
    // The day's 2 bind the units, less a call's room (a unit at least); the 300 tokens in
    // flight come off the 1,000.
    assert_eq!(dims.left(&Dimension::UNITS, t0), Some(1));
    assert_eq!(dims.left(&Dimension::TOKENS, t0), Some(700));
    // Ended: no longer in flight, so a later announcement is taken whole.
    dims.ended(Some(t0), &tokens(300));
    assert!(dims.in_flight.is_empty());
    let lower = Announcement::new(Dimension::TOKENS, Quota::new(650, 10 * SEC));
    assert!(dims.observe(&lower, (None, 0, 0), t0));
    assert_eq!(dims.left(&Dimension::TOKENS, t0), Some(650));
}

#[test]
fn the_tokens_in_flight_are_summed_over_the_calls_out_until_each_ends() {
    let t0 = Instant::now();
    let mut dims = Dimensions::new(&[], 0);
    dims.started(t0, 1, &tokens(300));
    dims.started(t0, 1, &tokens(200));
    assert_eq!(dims.in_flight, [(Dimension::TOKENS, 500)]);
    dims.ended(Some(t0), &tokens(300));
    assert_eq!(dims.in_flight, [(Dimension::TOKENS, 200)]);
    // Undated, an announcement is taken less the call still out.
    let words = Announcement::new(Dimension::TOKENS, Quota::new(1_000, 10 * SEC));
    assert!(dims.observe(&words, (None, 1, 1), t0));
    assert_eq!(dims.left(&Dimension::TOKENS, t0), Some(800));
}

#[test]
fn an_announced_budget_settles_what_a_call_cost() {
    let t0 = Instant::now();
    let mut dims = Dimensions::new(&[Budget::per_minute(Dimension::TOKENS, 5_000)], 0);
    let words = Announcement::new(Dimension::TOKENS, Quota::new(4_000, 60 * SEC));
    dims.observe(&words, (None, 0, 0), t0);
    dims.started(t0 + SEC, 1, &tokens(1_000));
    // The announced window keeps the largest call's cost in reserve (as the gate's quota
    // does): 4,000 less 1,000 spent, less 1,000 kept; the told budget has 4,000.
    assert_eq!(dims.left(&Dimension::TOKENS, t0 + SEC), Some(2_000));
    let used = Cost::new().with(Dimension::TOKENS, 1_500);
    dims.settle((t0 + SEC, t0 + 2 * SEC), (1, &tokens(1_000)), &used);
    assert_eq!(dims.left(&Dimension::TOKENS, t0 + 2 * SEC), Some(1_500));
    // The told budget paid for the 500 too: 3,500 left.
    dims.announced.clear();
    assert_eq!(dims.left(&Dimension::TOKENS, t0 + 2 * SEC), Some(3_500));
    // A settle naming another dimension leaves tokens as they were.
    dims.settle(
        (t0 + SEC, t0 + 2 * SEC),
        (1, &tokens(1_000)),
        &Cost::from(7),
    );
    assert_eq!(dims.left(&Dimension::TOKENS, t0 + 2 * SEC), Some(3_500));
}

#[test]
fn an_answer_awaited_outlasts_any_instant() {
    let t0 = Instant::now();
    let at = Spend::NotBefore(t0 + SEC);
    assert_eq!(later(Spend::Now, at), at);
    assert_eq!(later(at, Spend::Now), at);
    assert_eq!(later(at, Spend::NotBefore(t0)), at);
    assert_eq!(later(Spend::NotBefore(t0), at), at);
    assert_eq!(later(at, Spend::AwaitAnswer), Spend::AwaitAnswer);
    assert_eq!(later(Spend::AwaitAnswer, Spend::Now), Spend::AwaitAnswer);
}

#[test]
fn a_cost_replaces_what_it_said_of_a_dimension() {
    let cost = Cost::new()
        .with(Dimension::TOKENS, 1)
        .with(Dimension::TOKENS, 2);
    assert_eq!(cost.get(&Dimension::TOKENS), Some(2));
    let budget = Budget::new(Dimension::TOKENS, 9, Duration::MAX).window(Window::Refilling);
    assert_eq!(
        (
            budget.dimension(),
            budget.limit(),
            budget.per(),
            budget.kind()
        ),
        (
            &Dimension::TOKENS,
            9,
            crate::time::MAX_WAIT,
            Window::Refilling
        )
    );
}

#[test]
fn a_budget_per_second_minute_or_day_lasts_that_long() {
    let per = |budget: Budget| budget.per().as_secs();
    assert_eq!(per(Budget::per_second(Dimension::TOKENS, 1)), 1);
    assert_eq!(per(Budget::per_minute(Dimension::TOKENS, 1)), 60);
    assert_eq!(per(Budget::per_day(Dimension::TOKENS, 1)), 86_400);
    assert_eq!(
        Budget::per_day(Dimension::TOKENS, 1).kind(),
        Window::Sliding
    );
}

#[test]
#[should_panic(expected = "`limit`")]
fn a_budget_of_nothing_is_refused() {
    let _ = Budget::per_day(Dimension::REQUESTS, 0);
}

#[test]
#[should_panic(expected = "`per`")]
fn a_budget_of_no_time_is_refused() {
    let _ = Budget::new(Dimension::REQUESTS, 1, Duration::ZERO);
}

#[test]
fn a_budget_read_from_configuration_names_what_cannot_work() {
    let tokens = Dimension::TOKENS;
    let minute = Duration::from_secs(60);
    assert_eq!(
        Budget::try_new(tokens.clone(), 0, minute),
        Err(ConfigError::ZeroBudgetLimit)
    );
    assert_eq!(
        Budget::try_new(tokens.clone(), 1, Duration::ZERO),
        Err(ConfigError::ZeroBudgetWindow)
    );
    // Both wrong: the limit is named first, as `new` panics.
    assert_eq!(
        Budget::try_new(tokens.clone(), 0, Duration::ZERO),
        Err(ConfigError::ZeroBudgetLimit)
    );
    let panic_of = |limit, per| {
        let panic = std::panic::catch_unwind(|| Budget::new(Dimension::TOKENS, limit, per));
        *panic.unwrap_err().downcast::<String>().unwrap()
    };
    assert_eq!(
        ConfigError::ZeroBudgetLimit.to_string(),
        panic_of(0, minute)
    );
    assert_eq!(
        ConfigError::ZeroBudgetWindow.to_string(),
        panic_of(1, Duration::ZERO)
    );
    let one = Budget::try_new(tokens.clone(), 1, Duration::from_nanos(1)).unwrap();
    assert_eq!((one.limit(), one.per()), (1, Duration::from_nanos(1)));
    // A window of centuries is kept to the longest wait, as `new` keeps it.
    let long = Budget::try_new(tokens.clone(), 5, Duration::MAX).unwrap();
    assert_eq!(long, Budget::new(tokens, 5, Duration::MAX));
    assert_eq!(long.per(), crate::time::MAX_WAIT);
}

fn bucket(remaining: u64, resets_in: Duration) -> Announcement {
    let quota = Quota::new(remaining, resets_in).with_limit(600);
    Announcement::new(Dimension::TOKENS, quota).window(Window::Refilling)
}

#[test]
fn an_announced_bucket_refills_at_the_pace_its_reset_gives() {
    let t0 = Instant::now();
    let mut dims = Dimensions::new(&[], 5);
    // 100 of 600 left, full in 50 s: 10 tokens a second, whatever the reserve.
    assert!(dims.observe(&bucket(100, 50 * SEC), (None, 0, 0), t0));
    assert_eq!(dims.left(&Dimension::TOKENS, t0), Some(100));
    assert_eq!(dims.left(&Dimension::TOKENS, t0 + 10 * SEC), Some(200));
    assert_eq!(
        dims.check(t0, 1, &tokens(150)),
        Spend::NotBefore(t0 + 5 * SEC)
    );
    dims.started(t0, 1, &tokens(100));
    assert_eq!(dims.earliest(t0, 1, &tokens(30)), t0 + 3 * SEC);
}

#[test]
fn a_dated_announcement_counts_the_calls_started_since_and_an_older_one_is_ignored() {
    let t0 = Instant::now();
    let mut dims = Dimensions::new(&[], 0);
    dims.observe(&bucket(600, Duration::ZERO), (None, 0, 0), t0);
    // Calls at 1 s (the one that answers) and 2 s, of 100 each.
    dims.started(t0 + SEC, 1, &tokens(100));
    dims.started(t0 + 2 * SEC, 1, &tokens(100));
    // The answer to the call of 1 s: 500 left then (it was counted), full in 10 s.
    let read = t0 + 3 * SEC;
    assert!(dims.observe(&bucket(500, 8 * SEC), (Some(t0 + SEC), 0, 0), read));
    // Its 100 lacking come back in the 10 s from 1 s to the reset: 10 a second. At 3 s, 500
    // and 20 refilled, less the call of 2 s.
    assert_eq!(dims.left(&Dimension::TOKENS, read), Some(420));
    // An answer to a call older than 1 s is older news.
    assert!(!dims.observe(&bucket(10, 8 * SEC), (Some(t0), 0, 0), read));
    assert_eq!(dims.left(&Dimension::TOKENS, read), Some(420));
    // The 2 s call settles at 60; the same answer read again replays it at 60.
    let used = Cost::new().with(Dimension::TOKENS, 60);
    dims.settle((t0 + 2 * SEC, read), (1, &tokens(100)), &used);
    assert_eq!(dims.left(&Dimension::TOKENS, read), Some(460));
    assert!(!dims.observe(&bucket(500, 8 * SEC), (Some(t0 + SEC), 0, 0), read));
    assert_eq!(dims.left(&Dimension::TOKENS, read), Some(460));
}

#[test]
fn an_undated_announcement_may_only_lower_a_bucket() {
    let t0 = Instant::now();
    let mut dims = Dimensions::new(&[], 0);
    dims.observe(&bucket(300, 30 * SEC), (None, 0, 0), t0);
    // 200 of the calls in flight are taken off; higher than the budget knows: ignored.
    assert!(!dims.observe(&bucket(550, 5 * SEC), (None, 0, 0), t0));
    assert_eq!(dims.left(&Dimension::TOKENS, t0), Some(300));
    dims.in_flight.push((Dimension::TOKENS, 200));
    assert!(dims.observe(&bucket(450, 15 * SEC), (None, 0, 0), t0));
    assert_eq!(dims.left(&Dimension::TOKENS, t0), Some(250));
}

#[test]
fn a_bucket_without_its_limit_is_read_as_a_fixed_window() {
    let t0 = Instant::now();
    let mut dims = Dimensions::new(&[], 0);
    let no_limit =
        Announcement::new(Dimension::TOKENS, Quota::new(100, 10 * SEC)).window(Window::Refilling);
    dims.observe(&no_limit, (None, 0, 0), t0);
    assert!(matches!(dims.announced[0].budget, Kept::Window(..)));
    // A full bucket says nothing of its pace but through its window, if it gave one.
    let full = Quota::new(600, Duration::ZERO)
        .with_limit(600)
        .with_window(60 * SEC);
    let full = Announcement::new(Dimension::REQUESTS, full).window(Window::Refilling);
    dims.observe(&full, (None, 0, 0), t0);
    dims.started(t0, 1, &Draws::NONE);
    assert!(matches!(dims.announced[1].budget, Kept::Bucket(_)));
    assert_eq!(
        dims.left(&Dimension::REQUESTS, t0 + 100 * Duration::from_millis(1)),
        Some(600)
    );
}

#[test]
fn the_requests_in_flight_are_uncounted_of_an_announced_requests_budget_alone() {
    let t0 = Instant::now();
    let mut dims = Dimensions::new(&[], 0);
    let requests = Announcement::new(Dimension::REQUESTS, Quota::new(50, 10 * SEC));
    let input = Announcement::new(Dimension::INPUT_TOKENS, Quota::new(900, 10 * SEC));
    // Three requests in flight besides the answering one; none named input tokens.
    dims.observe(&requests, (None, 7, 3), t0);
    dims.observe(&input, (None, 7, 3), t0);
    assert_eq!(dims.left(&Dimension::REQUESTS, t0), Some(47));
    assert_eq!(dims.left(&Dimension::INPUT_TOKENS, t0), Some(900));
}

#[test]
fn a_dated_announcement_replays_every_start_since_and_not_those_let_go() {
    let t0 = Instant::now();
    let mut dims = Dimensions::new(&[], 0);
    // 600 a minute: 10 a second.
    dims.observe(&bucket(600, Duration::ZERO), (None, 0, 0), t0);
    for n in 1..=3 {
        dims.started(t0 + n * SEC, 1, &tokens(50));
    }
    // The answer to the call of 1 s, read at 3 s: 500 left then, full at 11 s (10 a
    // second); the calls of 2 s and 3 s come off it again.
    assert!(dims.observe(&bucket(500, 8 * SEC), (Some(t0 + SEC), 0, 0), t0 + 3 * SEC));
    assert_eq!(
        dims.left(&Dimension::TOKENS, t0 + 3 * SEC),
        Some(500 + 20 - 100)
    );
    // Once more starts than it keeps went, an answer dated before the last let go is older
    // than what the bucket can count again: ignored.
    for n in 0..4_100 {
        dims.started(t0 + 4 * SEC + Duration::from_nanos(n), 1, &tokens(0));
    }
    let read = t0 + 5 * SEC;
    let before = dims.left(&Dimension::TOKENS, read);
    assert!(!dims.observe(&bucket(0, 60 * SEC), (Some(t0 + 4 * SEC), 0, 0), read));
    assert_eq!(dims.left(&Dimension::TOKENS, read), before);
    let last = t0 + 4 * SEC + Duration::from_nanos(4_099);
    assert!(dims.observe(&bucket(0, 60 * SEC), (Some(last), 0, 0), read));
}

#[test]
fn of_two_answers_dated_alike_the_lower_wins_and_a_full_bucket_says_no_pace() {
    let t0 = Instant::now();
    let mut dims = Dimensions::new(&[], 0);
    // Full, its reset says nothing of its pace (and divides nothing).
    dims.observe(&bucket(600, 5 * SEC), (None, 0, 0), t0);
    assert_eq!(dims.left(&Dimension::TOKENS, t0), Some(600));
    // Two calls started at 1 s; the second admitted found less left, and may answer first.
    let at = t0 + SEC;
    assert!(dims.observe(&bucket(300, 20 * SEC), (Some(at), 0, 0), at));
    dims.observe(&bucket(400, 20 * SEC), (Some(at), 0, 0), at);
    assert_eq!(dims.left(&Dimension::TOKENS, at), Some(300));
}

/// Five calls start at one instant, the server counts them in `counted` order, and their
/// answers are read in `read` order: whatever the orders, the bucket never holds more than
/// the server's, and holds as much once every answer is read.
fn answers_to_starts_at_one_instant(counted: [usize; 5], read: [usize; 5]) {
    const COSTS: [u64; 5] = [100, 50, 200, 80, 120];
    let t0 = Instant::now();
    let mut dims = Dimensions::new(&[], 0);
    dims.observe(&bucket(600, Duration::ZERO), (None, 0, 0), t0);
    let at = t0 + SEC;
    for cost in COSTS {
        dims.started(at, 1, &tokens(cost));
    }
    let server_left = 600 - COSTS.iter().sum::<u64>();
    let mut level = 600;
    let levels = counted.map(|call| {
        level -= COSTS[call];
        (call, level)
    });
    for call in read {
        let (_, said) = levels.iter().find(|(counted, _)| *counted == call).unwrap();
        dims.observe(&bucket(*said, Duration::ZERO), (Some(at), 0, 0), at);
        let left = dims.left(&Dimension::TOKENS, at).unwrap();
        assert!(
            left <= server_left,
            "{left} left, {counted:?} counted, {read:?} read"
        );
    }
    assert_eq!(dims.left(&Dimension::TOKENS, at), Some(server_left));
}

#[test]
fn a_settle_of_one_of_several_starts_at_an_instant_comes_off_that_one() {
    let t0 = Instant::now();
    let mut dims = Dimensions::new(&[], 0);
    dims.observe(&bucket(600, Duration::ZERO), (None, 0, 0), t0);
    let at = t0 + SEC;
    dims.started(at, 1, &tokens(100));
    dims.started(at, 1, &tokens(200));
    // The call of 200 settles at 20; an answer dated before both spends them again at
    // 100 and 20 (not at 0 and 200, as taking the 180 off the call of 100 would).
    let used = Cost::new().with(Dimension::TOKENS, 20);
    dims.settle((at, at), (1, &tokens(200)), &used);
    dims.observe(&bucket(600, Duration::ZERO), (Some(t0 + MS), 0, 0), at);
    assert_eq!(dims.left(&Dimension::TOKENS, at), Some(480));
}

#[test]
fn answers_to_starts_at_one_instant_never_raise_the_bucket_whatever_their_order() {
    let orders = [
        [0, 1, 2, 3, 4],
        [4, 3, 2, 1, 0],
        [2, 0, 4, 1, 3],
        [1, 3, 0, 4, 2],
    ];
    for counted in orders {
        for read in orders {
            answers_to_starts_at_one_instant(counted, read);
        }
    }
}

#[test]
fn an_answer_dated_at_the_last_start_let_go_still_counts() {
    let t0 = Instant::now();
    let mut dims = Dimensions::new(&[], 0);
    dims.observe(&bucket(600, Duration::ZERO), (None, 0, 0), t0);
    for n in 0..4_097 {
        dims.started(t0 + Duration::from_nanos(n), 1, &tokens(0));
    }
    // The start at 0 ns was let go; an answer dated then counted it, and all before.
    assert!(dims.observe(&bucket(100, 49 * SEC), (Some(t0), 0, 0), t0 + SEC));
    assert_eq!(dims.left(&Dimension::TOKENS, t0 + SEC), Some(110));
}

/// A server's bucket of 600 tokens a minute (10 a second), from 500 at `t0`, that others
/// spend from at `others` a second: its level at `at`, the gate having spent `own` net.
fn server_level(t0: Instant, at: Instant, others: u64, own: u64) -> u64 {
    let millis = u64::try_from((at - t0).as_millis()).unwrap();
    500 + (10 - others) * millis / 1000 - own
}

/// What the server announces of its bucket at level `level`: full again at 10 a second.
fn announced_at(level: u64) -> Announcement {
    bucket(level, Duration::from_millis((600 - level) * 100))
}

/// A bucket first announced at `t0` with 500 left.
fn from_500(t0: Instant) -> Dimensions {
    let mut dims = Dimensions::new(&[], 0);
    dims.observe(&announced_at(500), (None, 0, 0), t0);
    dims
}

/// A call of `cost` started at `at`, answered at once: `level` left.
fn start_answered(dims: &mut Dimensions, (at, cost): (Instant, u64), level: u64) {
    dims.started(at, 1, &tokens(cost));
    dims.observe(&announced_at(level), (Some(at), 0, 0), at);
}

/// How many tokens the bucket gains over the next 10 s, as the gate sees it at `at`.
fn gained_in_10_s(dims: &Dimensions, at: Instant) -> u64 {
    let left = |at| dims.left(&Dimension::TOKENS, at).unwrap();
    left(at + 10 * SEC) - left(at)
}

#[test]
fn others_spending_the_same_bucket_are_read_from_what_it_fell_by_beyond_the_gates_own() {
    let t0 = Instant::now();
    let mut dims = from_500(t0);
    // Each second a call of 20, answered at once, settled half a second later at 12 (the
    // server gives 8 back then too) but one at 30; at 5.001 s a call of 50 that the server
    // refuses. Others spend 4 a second.
    let mut own = 0;
    for k in 1..=12 {
        let at = t0 + k * SEC;
        own += 20;
        start_answered(&mut dims, (at, 20), server_level(t0, at, 4, own));
        // The call of 2 s used 30: the server charged 10 more as it ended.
        let used = if k == 2 { 30 } else { 12 };
        let used_cost = Cost::new().with(Dimension::TOKENS, used);
        dims.settle((at, at + SEC / 2), (1, &tokens(20)), &used_cost);
        own = own + used - 20;
        if k == 5 {
            let refused = at + Duration::from_millis(1);
            dims.started(refused, 1, &tokens(50));
            dims.refused((refused, refused), 1, &tokens(50));
        }
    }
    // Over 11 s of answers: the others' 4 a second, exactly; the gate's share refills at 6.
    assert_eq!(gained_in_10_s(&dims, t0 + 12 * SEC), 60);
}

#[test]
fn a_refusal_known_after_its_answer_reads_the_others_again_at_once() {
    let t0 = Instant::now();
    let mut dims = from_500(t0);
    // A call of 20 each second, answered at once; others spend 4 a second.
    for k in 1..=9 {
        let at = t0 + k * SEC;
        start_answered(
            &mut dims,
            (at, 20),
            server_level(t0, at, 4, 20 * u64::from(k)),
        );
    }
    assert_eq!(gained_in_10_s(&dims, t0 + 9 * SEC), 60);
    // A call of 50 at 10 s, which the server refuses: its answer, read before the refusal
    // is known, says the level without it, as if others had taken 50 less. The others'
    // pace is read as about 4.4 a second: 2.7 less, and twice its error of 1.6 more.
    let at = t0 + 10 * SEC;
    dims.started(at, 1, &tokens(50));
    let level = server_level(t0, at, 4, 180);
    dims.observe(&announced_at(level), (Some(at), 0, 0), at);
    assert_eq!(gained_in_10_s(&dims, at), 56);
    // Once the refusal is known, the pace is read again, and the bucket refills at once at
    // what the others leave.
    dims.refused((at, at), 1, &tokens(50));
    assert_eq!(gained_in_10_s(&dims, at), 60);
}

#[test]
fn the_others_are_read_over_the_last_refill_period_only() {
    let t0 = Instant::now();
    let mut dims = from_500(t0);
    // A call of 12 every 1.4 s (no whole number of them a minute apart), answered at once;
    // others spend 5 a second for the first 43 calls (60.2 s), then nothing.
    let mut level = 500;
    for k in 1..=93 {
        level = level + 14 - if k <= 43 { 7 } else { 0 } - 12;
        start_answered(&mut dims, (t0 + k * 1400 * MS, 12), level);
    }
    // The last minute's answers show no others: the bucket refills at the server's 10.
    assert_eq!(gained_in_10_s(&dims, t0 + 93 * 1400 * MS), 100);
}

#[test]
fn a_bucket_that_may_have_filled_says_nothing_of_others() {
    let t0 = Instant::now();
    let mut dims = from_500(t0);
    // Calls of 10 a second for 3 s, nobody else spending: then idle for 40 s, the bucket
    // full (the server lost its refill meanwhile), then calls of 20 a second for 10 s.
    let mut level = 500;
    let mut last = t0;
    for k in (1..=3).chain(43..=53) {
        let at = t0 + k * SEC;
        let cost = if k <= 3 { 10 } else { 20 };
        level = (level + 10 * (at - last).as_secs()).min(600) - cost;
        last = at;
        start_answered(&mut dims, (at, cost), level);
    }
    // No others: the bucket refills at the server's 10 a second.
    assert_eq!(gained_in_10_s(&dims, t0 + 53 * SEC), 100);
}

/// What the bucket gains in 10 s as the gate sees it after each of four calls of 10, one a
/// second from 1 s, answered at once, while others spend 4 a second; each answer's level is
/// off by `scatter`'s share of it.
fn gained_with_scatter(scatter: [i64; 4]) -> Vec<u64> {
    let t0 = Instant::now();
    let mut dims = from_500(t0);
    let mut gained = Vec::new();
    for (k, off) in (1..=4).zip(scatter) {
        let at = t0 + k * SEC;
        let level = server_level(t0, at, 4, 10 * k as u64);
        start_answered(&mut dims, (at, 10), level.checked_add_signed(off).unwrap());
        gained.push(gained_in_10_s(&dims, at));
    }
    gained
}

#[test]
fn the_others_are_read_once_the_anchors_show_them_well_and_as_fast_as_they_may_be() {
    // Anchors that agree: the others' 4 a second, exactly, from the third.
    assert_eq!(gained_with_scatter([0; 4]), [100, 100, 60, 60]);
    // Off by 0, +5, -5 and 0: the slope is read as 5 a second, its standard error as
    // 5 √0.18 = 2.12 (4.33 of three anchors, more than 0.3 of the server's 10 a second:
    // not read yet). The others are taken as 5 + 2 × 2.12 = 9.24 a second: 7.6 gained, 8
    // as the levels fall between whole tokens.
    assert_eq!(gained_with_scatter([0, 5, -5, 0]), [100, 100, 100, 8]);
    // Off by 4, three anchors leave an error of 4 √0.75 = 3.46 a second, too much.
    assert_eq!(gained_with_scatter([0, 4, -4, 0])[2], 100);
    // Off by 8 (a standard error of 8 √0.18 = 3.39 a second), they say too little of the
    // others to go by.
    assert_eq!(gained_with_scatter([0, 8, -8, 0]), [100; 4]);
}

#[test]
fn what_comes_back_within_a_round_trip_of_a_start_is_in_its_announcement() {
    let t0 = Instant::now();
    let mut dims = from_500(t0);
    // A call of 20 each second, its answer read 200 ms after it started; the call of 5 s
    // drew 120 and used 20: the server gave 100 back just before it admitted the call of
    // 6 s, and the gate learns it 100 ms after that call started. Others spend 4 a second.
    let mut own = 0;
    let round_trip = Duration::from_millis(200);
    for k in 1..=12 {
        let at = t0 + k * SEC;
        let cost = if k == 5 { 120 } else { 20 };
        dims.started(at, 1, &tokens(cost));
        own += cost;
        if k == 6 {
            let used = Cost::new().with(Dimension::TOKENS, 20);
            dims.settle(
                (t0 + 5 * SEC, at + round_trip / 2),
                (1, &tokens(120)),
                &used,
            );
            own -= 100;
        }
        let level = server_level(t0, at, 4, own);
        dims.observe(&announced_at(level), (Some(at), 0, 0), at + round_trip);
    }
    let read = t0 + 12 * SEC + round_trip;
    assert_eq!(gained_in_10_s(&dims, read), 60);
}

#[test]
fn a_refused_call_is_not_spent_again_when_an_older_answer_rebuilds_the_bucket() {
    let t0 = Instant::now();
    let mut dims = from_500(t0);
    // A call at 1 s, then one at 2 s that the server refuses at 2.1 s; the answer to the
    // call of 1 s comes after, read at 3 s: 490 left then, full 9 s after it is read.
    dims.started(t0 + SEC, 1, &tokens(10));
    dims.started(t0 + 2 * SEC, 1, &tokens(50));
    dims.refused((t0 + 2 * SEC, t0 + 2100 * MS), 1, &tokens(50));
    let read = t0 + 3 * SEC;
    dims.observe(&bucket(490, 9 * SEC), (Some(t0 + SEC), 0, 0), read);
    assert_eq!(dims.left(&Dimension::TOKENS, read), Some(490 + 20));
}

#[test]
fn others_taking_the_whole_refill_leave_the_gate_a_trickle() {
    let t0 = Instant::now();
    let mut dims = from_500(t0);
    let mut own = 0;
    for k in 1..=12 {
        let at = t0 + k * SEC;
        own += 1;
        start_answered(&mut dims, (at, 1), server_level(t0, at, 10, own));
    }
    // All 10 a second are the others': the gate keeps 5 % of the refill, to learn again.
    assert_eq!(gained_in_10_s(&dims, t0 + 12 * SEC), 5);
}

/// An announced budget that did not say its kind, of 10 with a reset 2 s away, at 0 s and at
/// 3 s; the gate started one call between, at 3 s.
fn two_answers_three_seconds_apart(kind: Option<Window>) -> (Dimensions, Instant) {
    let t0 = Instant::now();
    let mut dims = Dimensions::new(&[], 0);
    let quota = Quota::new(0, 2 * SEC).with_limit(10);
    let mut announced = Announcement::new(Dimension::TOKENS, quota).policy("p");
    announced.window = kind;
    // The first answer opens the budget; the same again, dated, is what a later one is judged
    // against.
    dims.observe(&announced, (Some(t0), 0, 0), t0);
    dims.observe(&announced, (Some(t0), 0, 0), t0);
    let at = t0 + 3 * SEC;
    dims.started(at, 1, &tokens(1));
    dims.observe(&announced, (Some(at), 0, 0), at);
    (dims, at)
}

#[test]
fn an_announced_budget_of_no_kind_that_shows_it_moves_is_kept_as_a_moving_window() {
    // Had the window been fixed, the answer of 3 s would count the one call since a second
    // before the first reset (at 2 s): 9 left. It says none: it moves. The 10 the server
    // counted by 0 s (taken as the gate's, started by then) it still counts at 3 s: a
    // window of 3 / 1.1 s at least, by the worst phase of a sliding-window counter (whose
    // previous window weighs in), kept 5 % longer: 2.86 s. What it holds comes back as such a
    // counter's does, evenly over the window after its own, the call of 3 s last.
    let (dims, at) = two_answers_three_seconds_apart(None);
    assert!(matches!(dims.announced[0].budget, Kept::Moving(_)));
    let left = |after: Duration| dims.left(&Dimension::TOKENS, at + after);
    assert_eq!(left(Duration::ZERO), Some(0));
    // The 10 weigh 57 % (2 * 2.86 - 4.1 s of 2.86 s), and the call of 3 s whole.
    assert_eq!(left(1100 * MS), Some(3));
    assert_eq!(left(3 * SEC), Some(9));
    assert_eq!(left(5727 * MS), Some(9));
    assert_eq!(left(5728 * MS), Some(10));
}

#[test]
fn an_announced_budget_said_to_be_fixed_is_not_learnt_as_moving() {
    let (dims, _) = two_answers_three_seconds_apart(Some(Window::Fixed));
    assert!(matches!(dims.announced[0].budget, Kept::Window(_, None)));
}

#[test]
fn a_bucket_that_may_have_filled_with_what_was_given_back_says_nothing_of_others() {
    let t0 = Instant::now();
    let mut dims = from_500(t0);
    // Calls of 10 at 1 s and 2 s, and of 110 at 3 s that gives 100 back at 4 s; nobody else
    // spends. The server then holds 510 at 4 s: refilled and given back, it is full at 13 s
    // and loses its refill until calls of 20 a second from 15 s.
    let mut level = 500;
    let mut last = t0;
    for k in (1..=3).chain(15..=25) {
        let at = t0 + k * SEC;
        let cost = match k {
            1 | 2 => 10,
            3 => 110,
            _ => 20,
        };
        if k == 15 {
            let used = Cost::new().with(Dimension::TOKENS, 10);
            dims.settle((t0 + 3 * SEC, t0 + 4 * SEC), (1, &tokens(110)), &used);
            level = (level + 10 + 100).min(600);
            last = t0 + 4 * SEC;
        }
        level = (level + 10 * (at - last).as_secs()).min(600) - cost;
        last = at;
        start_answered(&mut dims, (at, cost), level);
    }
    // The refill alone could not have filled it from 400 at 3 s by 15 s; with the 100 given
    // back it could, and did: no others.
    assert_eq!(gained_in_10_s(&dims, t0 + 25 * SEC), 100);
}

/// Keeps the generic quota as `moving`, as its answers would have shown it to be.
fn keep_moving(dims: &mut Dimensions, moving: Moving) {
    let budget = Kept::Moving(moving);
    let generic = |a: &Announced| a.dimension == Dimension::UNITS && a.policy.is_none();
    match dims.announced.iter_mut().find(|a| generic(a)) {
        Some(known) => known.budget = budget,
        None => dims.announced.push(Announced {
            dimension: Dimension::UNITS,
            policy: None,
            budget,
            shared_since: None,
        }),
    }
}

#[test]
fn the_gate_wide_quota_learnt_moving_joins_the_budgets_and_replaces_no_other() {
    use crate::gate::window_kind::WindowKind;
    let t0 = Instant::now();
    let mut dims = Dimensions::new(&[], 0);
    dims.observe(&bucket(300, 30 * SEC), (None, 0, 0), t0);
    let tokens_policy = Announcement::new(Dimension::UNITS, Quota::new(7, SEC)).policy("p");
    dims.observe(&tokens_policy, (None, 0, 0), t0);
    keep_moving(&mut dims, Moving::new((10, SEC), WindowKind::new(t0), t0));
    assert_eq!(dims.announced.len(), 3, "each budget kept apart");
    assert_eq!(dims.left(&Dimension::TOKENS, t0), Some(300));
    assert!(matches!(dims.announced[2].budget, Kept::Moving(_)));
    // Learnt again, the gate-wide window replaces the one it learnt before.
    keep_moving(&mut dims, Moving::new((20, SEC), WindowKind::new(t0), t0));
    assert_eq!(dims.announced.len(), 3);
    // The policy's 7, less a call's room, and the moving window's 20: the least.
    assert_eq!(dims.left(&Dimension::UNITS, t0), Some(6));
}

#[test]
fn a_moving_window_counts_what_the_server_counted_beyond_the_gates_starts_and_grows() {
    use crate::gate::window_kind::WindowKind;
    let t0 = Instant::now();
    let mut dims = Dimensions::new(&[], 0);
    // 10 in any 2 s (kept 5 % longer, 2.1 s); the gate started 3 at 0 s.
    keep_moving(
        &mut dims,
        Moving::new((10, 2 * SEC), WindowKind::new(t0), t0),
    );
    dims.started(t0, 3, &Draws::NONE);
    let units = |dims: &Dimensions, at| dims.left(&Dimension::UNITS, at).unwrap();
    assert_eq!(units(&dims, t0), 7);
    // An answer read at 1 s says 5 left: 2 more counted, taken as counted at 1 s.
    let five = Announcement::new(Dimension::UNITS, Quota::new(5, SEC).with_limit(10));
    assert!(dims.observe(&five, (None, 0, 0), t0 + SEC));
    assert_eq!(units(&dims, t0 + SEC), 5);
    // Each counted whole for 2.1 s, then less as the window after wears on: at 3.2 s, the
    // 5 weigh 48 % (as in the window before one that began at 2.1 s).
    assert_eq!(units(&dims, t0 + 2100 * MS), 5);
    assert_eq!(units(&dims, t0 + 3200 * MS), 7);
    assert_eq!(units(&dims, t0 + 4200 * MS), 9, "the gate's 3 left");
    assert_eq!(units(&dims, t0 + 5199 * MS), 9);
    assert_eq!(units(&dims, t0 + 5200 * MS), 10, "the 2 more left");
    // Saying as much as it knows, or more, changes nothing.
    assert!(!dims.observe(&five, (None, 0, 0), t0 + SEC));
    let eight = Announcement::new(Dimension::UNITS, Quota::new(8, SEC).with_limit(10));
    assert!(!dims.observe(&eight, (None, 0, 0), t0 + SEC));
    // A window the server says is 4 s: kept 4.2 s from then, what it counted still counted:
    // at 5.4 s, the 5 weigh 71 % (as in the window before one that began at 4.2 s).
    let longer = Quota::new(7, SEC).with_limit(10).with_window(4 * SEC);
    let longer = Announcement::new(Dimension::UNITS, longer);
    assert!(dims.observe(&longer, (None, 0, 0), t0 + SEC));
    assert!(!dims.observe(&longer, (None, 0, 0), t0 + SEC), "said again");
    assert_eq!(units(&dims, t0 + 5400 * MS), 6);
    assert_eq!(units(&dims, t0 + 9399 * MS), 9);
    assert_eq!(
        units(&dims, t0 + 9400 * MS),
        10,
        "two windows after the 2 more"
    );
}

#[test]
fn a_moving_window_grows_as_a_later_answer_shows_it_longer() {
    use crate::gate::window_kind::WindowKind;
    let t0 = Instant::now();
    let mut dims = Dimensions::new(&[], 0);
    keep_moving(
        &mut dims,
        Moving::new((10, 2 * SEC), WindowKind::new(t0), t0),
    );
    dims.started(t0, 3, &Draws::NONE);
    // The answer to that call, read at once, resets in 4 s, written in whole seconds: the
    // window is 3 s at least, kept 3.15 s: its 3 count whole for 3.15 s, and less until
    // 6.3 s.
    let four = Announcement::new(Dimension::UNITS, Quota::new(7, 4 * SEC).with_limit(10));
    assert!(dims.observe(&four, (Some(t0), 0, 0), t0));
    let units = |at| dims.left(&Dimension::UNITS, at).unwrap();
    assert_eq!(units(t0 + 3150 * MS), 7);
    assert_eq!(units(t0 + 5 * SEC), 8);
    assert_eq!(units(t0 + 6299 * MS), 9);
    assert_eq!(units(t0 + 6300 * MS), 10);
}

/// A server keeps a burst limit, 10 in any 2 s, and a sustained one, 40 per 20 s, and the
/// gate reads the tightest of them as its one quota: the burst's, learnt moving, is not
/// stretched over the sustained one's 20 s when that one is the tightest.
#[test]
fn a_moving_window_is_of_one_policy_and_the_quota_of_another_is_kept_as_a_fixed_window() {
    use crate::gate::window_kind::WindowKind;
    let t0 = Instant::now();
    let mut dims = Dimensions::new(&[], 0);
    let burst = Quota::new(7, 2 * SEC).with_limit(10).with_window(2 * SEC);
    let mut kind = WindowKind::new(t0);
    kind.observe(&burst, Some(t0), t0);
    keep_moving(&mut dims, Moving::new((10, 2 * SEC), kind, t0));
    dims.started(t0, 3, &Draws::NONE);
    let units = |dims: &Dimensions, at| dims.left(&Dimension::UNITS, at);
    assert_eq!(units(&dims, t0 + SEC), Some(7));
    let sustained = Quota::new(30, 15 * SEC)
        .with_limit(40)
        .with_window(20 * SEC);
    let sustained = Announcement::new(Dimension::UNITS, sustained);
    assert!(dims.observe(&sustained, (Some(t0 + SEC), 0, 0), t0 + SEC));
    assert!(matches!(dims.announced[0].budget, Kept::Window(..)));
    // Its 30, less a call's room, until its reset, where the burst's 10 kept 22 s would have
    // left 7.
    assert_eq!(units(&dims, t0 + 3 * SEC), Some(29));
    // The burst's word again: a fixed window still, until its own answers show it moves.
    let burst = Announcement::new(Dimension::UNITS, burst);
    dims.observe(&burst, (Some(t0 + 3 * SEC), 0, 0), t0 + 3 * SEC);
    assert!(matches!(dims.announced[0].budget, Kept::Window(..)));
}

#[test]
fn an_announced_window_whose_probe_ends_unanswered_is_forgotten() {
    let t0 = Instant::now();
    let mut dims = Dimensions::new(&[], 0);
    let empty = Announcement::new(Dimension::TOKENS, Quota::new(0, SEC)).window(Window::Fixed);
    dims.observe(&empty, (None, 0, 0), t0);
    assert_eq!(dims.check(t0, 1, &tokens(1)), Spend::NotBefore(t0 + SEC));
    // At the reset one call goes to learn the next window; the next waits for its answer.
    assert_eq!(dims.check(t0 + SEC, 1, &tokens(1)), Spend::Now);
    dims.started(t0 + SEC, 1, &tokens(1));
    assert_eq!(dims.check(t0 + SEC, 1, &tokens(1)), Spend::AwaitAnswer);
    // It ends without one: the server no longer announces, and holds nothing back.
    dims.ended(Some(t0 + SEC), &tokens(1));
    assert_eq!(dims.check(t0 + SEC, 1, &tokens(1)), Spend::Now);
}

/// What a gate shares with its fleet of the budgets servers announced: a window from its
/// first word, a bucket once a reset has shown its refill, and a moving window not at all;
/// what a call settles goes to the fleet's announced budgets only if they were shared when
/// it started.
#[test]
fn a_fleet_shares_announced_windows_and_buckets_whose_refill_is_known() {
    let t0 = Instant::now();
    let told = Budget::per_minute(Dimension::REQUESTS, 100);
    let mut dims = Dimensions::new(std::slice::from_ref(&told), 0);
    let window = Announcement::new(Dimension::TOKENS, Quota::new(4_000, 60 * SEC)).policy("min");
    let full = Announcement::new(
        Dimension::TOKENS,
        Quota::new(600, Duration::ZERO).with_limit(600),
    )
    .window(Window::Refilling);
    dims.observe(&window, (None, 0, 0), t0);
    dims.observe(&full, (None, 0, 0), t0);
    let draws = dims.fleet_draws(1, &tokens(300));
    let sources: Vec<_> = draws.iter().map(|d| (d.source.clone(), d.units)).collect();
    // A full bucket's reset (0 s) shows no refill: not shared yet.
    assert_eq!(
        sources,
        [
            (Source::Told, 1),
            (Source::Announced(Some("min".into())), 300)
        ]
    );
    assert_eq!(dims.reckoned(&full, t0, 0), None);
    let reckoned = dims.reckoned(&window, t0, 0).expect("shared");
    assert_eq!((reckoned.left, reckoned.resets_in), (4_000, 60 * SEC));
    assert_eq!(reckoned.budget.kind(), Window::Fixed);

    // A call starts; then the bucket's reset shows its refill (100 of 600 gone, full in
    // 10 s: a minute for the whole).
    dims.started(t0, 1, &tokens(300));
    let later = t0 + SEC;
    dims.observe(&bucket(500, 10 * SEC), (None, 0, 0), later);
    dims.observe(&window, (None, 0, 0), later);
    let reckoned = dims
        .reckoned(&bucket(500, 10 * SEC), later, 0)
        .expect("shared");
    assert_eq!(
        (
            reckoned.budget.limit(),
            reckoned.budget.per(),
            reckoned.budget.kind()
        ),
        (600, 60 * SEC, Window::Refilling)
    );
    assert_eq!(reckoned.source, Source::Announced(None));
    assert_eq!(dims.fleet_draws(1, &tokens(300)).len(), 3);
    // It used 100 tokens: the told budget has nothing of tokens to settle, the window it
    // started under (shared since its first word, whatever came after) takes it back, the
    // bucket shared since does not.
    let used = Cost::new().with(Dimension::TOKENS, 100);
    let (settled, actual) = dims.fleet_settled((Some(t0), 1), &tokens(300), &used);
    assert_eq!(settled.len(), 1);
    assert_eq!(
        (settled[0].source.clone(), settled[0].units, actual[0]),
        (Source::Announced(Some("min".into())), 300, 100)
    );
    let (settled, _) = dims.fleet_settled((Some(later), 1), &tokens(300), &used);
    assert_eq!(settled.len(), 2, "a call started once both were shared");
    let (settled, _) = dims.fleet_settled((None, 1), &tokens(300), &used);
    assert!(settled.is_empty(), "a start not known gives nothing back");
}

#[test]
fn a_refusal_keeps_a_moving_window_longer_up_to_twice_what_the_answers_show() {
    use crate::gate::window_kind::WindowKind;
    let t0 = Instant::now();
    let mut dims = Dimensions::new(&[], 0);
    // 10 in any 2 s, kept 2.1 s; the gate started 10 at 0 s.
    keep_moving(
        &mut dims,
        Moving::new((10, 2 * SEC), WindowKind::new(t0), t0),
    );
    dims.started(t0, 10, &Draws::NONE);
    let units = |dims: &Dimensions, at| dims.left(&Dimension::UNITS, at).unwrap();
    // Counted whole for 2.1 s, less until 4.2 s.
    assert_eq!(units(&dims, t0 + 4199 * MS), 9);
    assert_eq!(units(&dims, t0 + 4200 * MS), 10);
    // A call started at 3 s is refused: the window is longer than kept, 10 % more: 2.31 s,
    // the 10 of 0 s counted until 4.62 s.
    let at = t0 + 3 * SEC;
    dims.started(at, 1, &Draws::NONE);
    dims.refused((at, at + MS), 1, &Draws::NONE);
    assert_eq!(units(&dims, t0 + 4619 * MS), 9);
    assert_eq!(units(&dims, t0 + 4620 * MS), 10);
    // Refused again and again, it is kept twice as long as the answers show, no longer: the
    // 10 of 0 s counted until 8 s.
    for _ in 0..10 {
        dims.started(at, 1, &Draws::NONE);
        dims.refused((at, at + MS), 1, &Draws::NONE);
    }
    assert!(units(&dims, t0 + 8 * SEC - MS) < 10);
    assert_eq!(units(&dims, t0 + 8 * SEC), 10);
}

#[test]
fn a_moving_window_is_kept_shorter_when_the_answers_show_it_shorter() {
    use crate::gate::window_kind::WindowKind;
    let t0 = Instant::now();
    let mut dims = Dimensions::new(&[], 0);
    // Learnt 3 s long (kept 3.15 s); the gate started 10 at 0 s.
    keep_moving(
        &mut dims,
        Moving::new((10, 3 * SEC), WindowKind::new(t0), t0),
    );
    dims.started(t0, 10, &Draws::NONE);
    let units = |dims: &Dimensions, at| dims.left(&Dimension::UNITS, at).unwrap();
    assert_eq!(units(&dims, t0 + 4400 * MS), 3, "the 10 count until 6.3 s");
    // An answer at 1 s says the window is 2 s: kept 2.1 s, the 10 count until 4.2 s.
    let told = Quota::new(0, SEC).with_limit(10).with_window(2 * SEC);
    assert!(dims.observe(
        &Announcement::new(Dimension::UNITS, told),
        (None, 0, 0),
        t0 + SEC
    ));
    assert_eq!(units(&dims, t0 + 4199 * MS), 9);
    assert_eq!(units(&dims, t0 + 4200 * MS), 10);
    // Said again, it is kept as it is.
    assert!(!dims.observe(
        &Announcement::new(Dimension::UNITS, told),
        (None, 0, 0),
        t0 + SEC
    ));
}

#[test]
fn only_the_answer_to_the_call_sent_after_a_reset_is_judged_for_what_the_reset_gave_back() {
    let t0 = Instant::now();
    let mut dims = Dimensions::new(&[], 0);
    let quota = |left, resets_in| {
        let quota = Quota::new(left, resets_in).with_limit(20);
        Announcement::new(Dimension::UNITS, quota)
    };
    dims.observe(&quota(19, 2 * SEC), (None, 0, 0), t0);
    // The window resets at 2 s; the call sent then learns the next, whole again.
    let probe = t0 + 2 * SEC;
    dims.started(probe, 1, &Draws::NONE);
    dims.observe(&quota(19, 2 * SEC), (Some(probe), 0, 0), probe + 10 * MS);
    // Then others spend 14 of it: the answers of the window say 5 left, three times. They
    // are not answers to a call sent after a reset: the window stays fixed.
    for k in 5..8 {
        let at = t0 + k * 100 * MS + 2 * SEC;
        dims.started(at, 1, &Draws::NONE);
        let resets_in = probe + 2 * SEC - at;
        dims.observe(&quota(5, resets_in), (Some(at), 0, 0), at + 10 * MS);
    }
    assert!(matches!(dims.announced[0].budget, Kept::Window(..)));
}

/// What a call cost beyond its start comes off the announced windows of units alone.
#[test]
fn a_charge_comes_off_the_announced_windows_of_units_only() {
    let t0 = Instant::now();
    let mut dims = Dimensions::new(&[], 0);
    let units = Announcement::new(Dimension::UNITS, Quota::new(10, 10 * SEC));
    let words = Announcement::new(Dimension::TOKENS, Quota::new(1_000, 10 * SEC));
    dims.observe(&units, (None, 0, 0), t0);
    dims.observe(&words, (None, 0, 0), t0);
    // Less a call's room, a unit.
    assert_eq!(dims.left(&Dimension::UNITS, t0), Some(9));
    dims.charge(3);
    assert_eq!(dims.left(&Dimension::UNITS, t0), Some(6));
    assert_eq!(dims.left(&Dimension::TOKENS, t0), Some(1_000));
}

/// Forgetting a budget of a dimension and policy leaves the dimension's other policies,
/// and the other dimensions' budgets of that policy.
#[test]
fn forgetting_a_policy_of_a_dimension_leaves_the_rest() {
    let t0 = Instant::now();
    let mut dims = Dimensions::new(&[], 0);
    let of = |dimension, left, policy| {
        Announcement::new(dimension, Quota::new(left, 10 * SEC)).policy(policy)
    };
    dims.observe(&of(Dimension::UNITS, 3, "second"), (None, 0, 0), t0);
    dims.observe(&of(Dimension::UNITS, 8, "day"), (None, 0, 0), t0);
    dims.observe(&of(Dimension::TOKENS, 500, "second"), (None, 0, 0), t0);
    dims.forget(&Dimension::UNITS, Some("second"));
    // The day's 8, less a call's room.
    assert_eq!(dims.left(&Dimension::UNITS, t0), Some(7));
    assert_eq!(dims.left(&Dimension::TOKENS, t0), Some(500));
}

/// A window whose call sent to learn the next one ended without an announcement is
/// forgotten (the server no longer announces it); the other budgets stay.
#[test]
fn a_window_whose_learning_call_ended_unanswered_is_forgotten_and_the_rest_kept() {
    let t0 = Instant::now();
    let mut dims = Dimensions::new(&[], 0);
    let units = Announcement::new(Dimension::UNITS, Quota::new(5, SEC));
    let words = Announcement::new(Dimension::TOKENS, Quota::new(1_000, 60 * SEC));
    dims.observe(&units, (None, 0, 0), t0);
    dims.observe(&words, (None, 0, 0), t0);
    // Past the units' reset, a call goes to learn the next window, and ends unanswered.
    let probe = t0 + 2 * SEC;
    assert_eq!(dims.check(probe, 1, &Draws::NONE), Spend::Now);
    dims.started(probe, 1, &Draws::NONE);
    assert_eq!(dims.check(probe, 1, &Draws::NONE), Spend::AwaitAnswer);
    dims.ended(Some(probe), &Draws::NONE);
    assert_eq!(dims.left(&Dimension::UNITS, probe), None);
    assert_eq!(
        dims.announced.len(),
        1,
        "the units' window is no longer kept"
    );
    assert_eq!(dims.left(&Dimension::TOKENS, probe), Some(1_000));
}

/// The units of the calls waiting ahead come off an announced window of units, and of no
/// other dimension's.
#[test]
fn the_calls_ahead_are_spent_first_from_a_window_of_units_only() {
    let t0 = Instant::now();
    let units = Announcement::new(Dimension::UNITS, Quota::new(10, 10 * SEC));
    let words = Announcement::new(Dimension::TOKENS, Quota::new(10, 10 * SEC));
    let mut dims = Dimensions::new(&[], 0);
    dims.observe(&units, (None, 0, 0), t0);
    // 20 units ahead: a call of 1 waits for the window's reset.
    assert_eq!(
        dims.earliest_behind(t0, 20, (1, &Draws::NONE)),
        t0 + 10 * SEC
    );
    let mut dims = Dimensions::new(&[], 0);
    dims.observe(&words, (None, 0, 0), t0);
    // 20 units ahead draw no tokens: a call of 1 token may start at once.
    assert_eq!(dims.earliest_behind(t0, 20, (1, &tokens(1))), t0);
}

/// A fleet's store keeps the generic quota: every start draws on it once, whether this
/// process heard it announced or not, beside each other budget announced.
#[test]
fn a_fleet_draws_on_its_generic_quota_once_beside_the_other_budgets() {
    let t0 = Instant::now();
    let mut dims = Dimensions::new(&[], 0).with_fleet_quota(true);
    let units = Announcement::new(Dimension::UNITS, Quota::new(10, 10 * SEC));
    let words = Announcement::new(Dimension::TOKENS, Quota::new(1_000, 10 * SEC));
    dims.observe(&units, (None, 0, 0), t0);
    dims.observe(&words, (None, 0, 0), t0);
    let draws = dims.fleet_draws(1, &tokens(5));
    let sources: Vec<_> = (draws.iter())
        .map(|draw| {
            (
                draw.budget.dimension.clone(),
                draw.units,
                draw.source.clone(),
            )
        })
        .collect();
    assert_eq!(
        sources,
        [
            (Dimension::UNITS, 1, Source::Announced(None)),
            (Dimension::TOKENS, 5, Source::Announced(None)),
        ]
    );
}

/// A moving window shown longer counts again the gate's starts it had let go of that the
/// longer window still holds, beside those it kept (each once).
#[test]
fn a_moving_window_shown_longer_counts_again_the_starts_it_still_holds() {
    use crate::gate::window_kind::WindowKind;
    // Far enough on that two of the longer windows before it are instants too.
    let t0 = Instant::now() + 10 * SEC;
    let mut dims = Dimensions::new(&[], 0);
    // 10 in any 1 s (kept 5 % longer); 3 start at 0 s, and 2 at 2.1 s, when the counter
    // lets the first 3 go, two kept windows old (the starts the gate keeps to learn the
    // window's kind still hold them, to the instant).
    keep_moving(&mut dims, Moving::new((10, SEC), WindowKind::new(t0), t0));
    dims.started(t0, 3, &Draws::NONE);
    dims.started(t0 + 2100 * MS, 2, &Draws::NONE);
    let units = |dims: &Dimensions, at| dims.left(&Dimension::UNITS, at).unwrap();
    assert_eq!(units(&dims, t0 + 2200 * MS), 8);
    // The server says the window is 4 s, and 8 are left: the 3 of 0 s are in it again.
    let longer = Quota::new(8, SEC).with_limit(10).with_window(4 * SEC);
    let longer = Announcement::new(Dimension::UNITS, longer);
    assert!(dims.observe(&longer, (None, 0, 0), t0 + 2200 * MS));
    assert_eq!(units(&dims, t0 + 2200 * MS), 5);
}

/// An announced bucket holds nothing back once full again, and does while it refills.
#[test]
fn an_announced_bucket_is_idle_once_full_again() {
    let t0 = Instant::now();
    let mut dims = Dimensions::new(&[], 0);
    // 100 of 600 left, full in 50 s.
    dims.observe(&bucket(100, 50 * SEC), (None, 0, 0), t0);
    let idle = |dims: &Dimensions, at| dims.announced[0].budget.is_idle(at);
    assert!(!idle(&dims, t0));
    assert!(!idle(&dims, t0 + 49 * SEC));
    assert!(idle(&dims, t0 + 50 * SEC));
}

/// A moving window holds nothing back once the gate's starts have left it.
#[test]
fn a_moving_window_is_idle_once_the_starts_have_left_it() {
    use crate::gate::window_kind::WindowKind;
    let t0 = Instant::now();
    let mut dims = Dimensions::new(&[], 0);
    keep_moving(&mut dims, Moving::new((10, SEC), WindowKind::new(t0), t0));
    let idle = |dims: &Dimensions, at| dims.announced[0].budget.is_idle(at);
    assert!(idle(&dims, t0));
    dims.started(t0, 3, &Draws::NONE);
    assert!(!idle(&dims, t0 + SEC));
    // Counted whole for the window kept (1.05 s), then less over the next.
    assert!(idle(&dims, t0 + 2100 * MS));
}

/// Of a window the gate keeps nothing of, the fleet is told only "resets now", and only of
/// its generic quota: that lets the fleet send another call to learn the next window.
#[test]
fn of_a_window_kept_nowhere_the_fleet_hears_only_that_its_generic_quota_resets_now() {
    let t0 = Instant::now();
    let dims = Dimensions::new(&[], 0).with_fleet_quota(true);
    let now = Announcement::new(Dimension::UNITS, Quota::new(0, Duration::ZERO));
    let reckoned = dims.reckoned(&now, t0, 2).expect("told");
    let expected = Reckoned {
        budget: window_budget(Dimension::UNITS),
        source: Source::Announced(None),
        left: 0,
        resets_in: Duration::ZERO,
        unsent: 2,
        said: 0,
        dated: None,
    };
    assert_eq!(reckoned, expected);
    let later = Announcement::new(Dimension::UNITS, Quota::new(3, SEC));
    assert_eq!(dims.reckoned(&later, t0, 0), None);
    let tokens_now = Announcement::new(Dimension::TOKENS, Quota::new(0, Duration::ZERO));
    assert_eq!(dims.reckoned(&tokens_now, t0, 0), None);
}
