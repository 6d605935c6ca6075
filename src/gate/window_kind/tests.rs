use proptest::prelude::*;

use super::*;

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

/// How a server writes its resets.
#[derive(Debug, Clone, Copy)]
enum Written {
    Exactly,
    /// In whole seconds of a clock whose seconds begin this long after the test's start,
    /// rounded up or down.
    WholeSeconds(Duration, bool),
    /// As whole seconds from when the answer is read, rounded up or down.
    SecondsFrom(bool),
}

impl Written {
    fn reset(self, t0: Instant, at: Instant, read: Instant) -> Instant {
        let round = |secs: f64, up: bool| if up { secs.ceil() } else { secs.floor() };
        let (phase, up) = match self {
            Written::Exactly => return at,
            Written::SecondsFrom(up) => {
                let secs = at.saturating_duration_since(read).as_secs_f64();
                return read + Duration::from_secs_f64(round(secs, up));
            }
            Written::WholeSeconds(phase, up) => (phase, up),
        };
        let epoch = t0.checked_sub(SEC).unwrap() + phase;
        let secs = (at - epoch).as_secs_f64();
        epoch + Duration::from_secs_f64(round(secs, up))
    }
}

/// A server of `limit` requests per `window`, fixed windows from `t0` or moving ones: what
/// it says to a request that arrives at `arrived`, after those that arrived at `before`.
fn answer(
    (limit, window, moving): (u64, Duration, bool),
    t0: Instant,
    before: &[Instant],
    arrived: Instant,
) -> (u64, Instant) {
    if moving {
        let counted: Vec<_> = (before.iter().copied())
            .filter(|&at| at + window > arrived)
            .chain([arrived])
            .collect();
        let reset = counted.iter().min().unwrap().to_owned() + window;
        return (limit.saturating_sub(counted.len() as u64), reset);
    }
    let n = ((arrived - t0).as_nanos() / window.as_nanos()) as u32;
    let (start, end) = (t0 + window * n, t0 + window * (n + 1));
    let counted = before.iter().filter(|&&at| at >= start && at < end).count() as u64 + 1;
    (limit.saturating_sub(counted), end)
}

/// The gate starts a call at each of `starts` (sorted); each arrives `latency` later and its
/// answer is read `latency` after that. Returns the window learnt, if any.
fn learn(
    server: (u64, Duration, bool),
    written: Written,
    starts: &[Instant],
    latency: Duration,
) -> Option<Duration> {
    learn_with_trips(server, written, starts, &[(latency, latency)])
}

/// As [`learn`], the `i`th call taking `trips[i % trips.len()]` each way: calls may overtake
/// one another.
fn learn_with_trips(
    server: (u64, Duration, bool),
    written: Written,
    starts: &[Instant],
    trips: &[(Duration, Duration)],
) -> Option<Duration> {
    let mut learnt = None;
    answer_each(
        server,
        written,
        (starts, trips),
        |kind, quota, dated, read| {
            learnt = kind.observe(&quota, Some(dated), read);
            learnt.is_some()
        },
    );
    learnt
}

/// Runs `starts` against the server, the `i`th call taking `trips[i % trips.len()]` each
/// way, and gives `answered` each answer as the gate reads it: the gate's kind, the quota
/// announced, the start of the call and when the answer is read. Stops when it says so.
fn answer_each(
    server: (u64, Duration, bool),
    written: Written,
    (starts, trips): (&[Instant], &[(Duration, Duration)]),
    answered: impl FnMut(&mut WindowKind, Quota, Instant, Instant) -> bool,
) {
    answer_tightest(&[server], (written, false), (starts, trips), answered);
}

/// As [`answer_each`], against several servers at once (policies one server keeps, each
/// counting every request) whose answers announce the tightest policy only, as
/// [`crate::http::quota`] reads it: the lowest rate that can be kept up until its reset, and
/// of equal rates, the one that resets last. With `told`, each tells its window.
fn answer_tightest(
    servers: &[(u64, Duration, bool)],
    (written, told): (Written, bool),
    (starts, trips): (&[Instant], &[(Duration, Duration)]),
    mut answered: impl FnMut(&mut WindowKind, Quota, Instant, Instant) -> bool,
) {
    let t0 = starts[0];
    let trip = |i: usize| trips[i % trips.len()];
    let mut kind = WindowKind::new(t0);
    // Every start and every read, in time order (starts first at an instant: a call's
    // answer is read no sooner than it started).
    let mut events: Vec<(Instant, bool, usize)> = Vec::new();
    for (i, &start) in starts.iter().enumerate() {
        let (up, down) = trip(i);
        events.push((start, true, i));
        events.push((start + up + down, false, i));
    }
    events.sort_by_key(|&(at, is_start, _)| (at, !is_start));
    let arrivals: Vec<_> = (starts.iter().enumerate())
        .map(|(i, &s)| s + trip(i).0)
        .collect();
    for (at, is_start, i) in events {
        if is_start {
            kind.started(at, 1);
            continue;
        }
        let before: Vec<_> = arrivals
            .iter()
            .copied()
            .filter(|&a| a < arrivals[i])
            .collect();
        let tightest = servers.iter().map(|&server| {
            let (remaining, reset) = answer(server, t0, &before, arrivals[i]);
            let reset = written.reset(t0, reset, at);
            let quota =
                Quota::new(remaining, reset.saturating_duration_since(at)).with_limit(server.0);
            let rate = remaining as f64 / quota.resets_in().as_secs_f64();
            let quota = if told {
                quota.with_window(server.1)
            } else {
                quota
            };
            (rate, std::cmp::Reverse(reset), quota)
        });
        let tightest = tightest.min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let (_, _, quota) = tightest.expect("a server");
        if answered(&mut kind, quota, starts[i], at) {
            return;
        }
    }
}

/// Starts every `every` while a moving window of `limit` per `window` has room, for
/// `span`: the window holds starts spread over it.
fn spread(
    (limit, window): (u64, Duration),
    every: Duration,
    span: Duration,
    t0: Instant,
) -> Vec<Instant> {
    let mut starts: Vec<Instant> = Vec::new();
    let mut at = t0;
    while at < t0 + span {
        let in_window = starts.iter().filter(|&&s| s + window > at).count() as u64;
        if in_window < limit {
            starts.push(at);
            at += every;
        } else {
            at = starts[starts.len() - limit as usize] + window;
        }
    }
    starts
}

/// A burst of `burst` starts 10 ms apart, then one every `every`, until `span`.
fn burst_then_every(burst: u32, every: Duration, span: Duration, t0: Instant) -> Vec<Instant> {
    let mut starts: Vec<_> = (0..burst).map(|i| t0 + 10 * MS * i).collect();
    let mut at = t0 + 10 * MS * burst + every;
    while at < t0 + span {
        starts.push(at);
        at += every;
    }
    starts
}

#[test]
fn a_moving_window_spent_as_a_fixed_one_is_learnt_at_least_as_long_as_it_is() {
    let t0 = Instant::now();
    // As a gate reading the quota as a fixed window spends a moving one of 20 in any 2 s: a
    // burst, then what is left spread until the reset it was told.
    let starts = burst_then_every(10, 240 * MS, 6 * SEC, t0);
    for written in [Written::Exactly, Written::WholeSeconds(820 * MS, true)] {
        let learnt = learn((20, 2 * SEC, true), written, &starts, 2 * MS);
        let learnt = learnt.unwrap_or_else(|| panic!("{written:?}: not learnt"));
        assert!(
            learnt >= 1500 * MS && learnt <= 2 * SEC,
            "{written:?}: {learnt:?}"
        );
    }
    // Rounded down, 2 s is within the rounding; 4 s is not.
    let floor = Written::WholeSeconds(820 * MS, false);
    assert_eq!(learn((20, 2 * SEC, true), floor, &starts, 2 * MS), None);
    let starts = burst_then_every(10, 480 * MS, 12 * SEC, t0);
    for written in [floor, Written::SecondsFrom(true)] {
        let learnt = learn((20, 4 * SEC, true), written, &starts, 2 * MS);
        let learnt = learnt.unwrap_or_else(|| panic!("{written:?}: not learnt"));
        // The oldest start counted, or the longest reset less its rounding: at least 3.5 s.
        assert!(
            learnt >= 3500 * MS && learnt <= 4 * SEC,
            "{written:?}: {learnt:?}"
        );
    }
}

#[test]
fn a_moving_window_whose_resets_are_exact_is_as_long_as_the_longest() {
    let t0 = Instant::now();
    let starts = spread((10, 2500 * MS), 120 * MS, 12 * SEC, t0);
    let learnt = learn((10, 2500 * MS, true), Written::Exactly, &starts, 5 * MS);
    // The longest reset read: a window less the trip from the server back.
    assert_eq!(learnt, Some(2495 * MS));
}

#[test]
fn a_fixed_window_kept_busy_is_never_taken_for_a_moving_one() {
    let t0 = Instant::now();
    // As many starts as a moving window would let go: a fixed window lets them too.
    let starts = spread((10, 2 * SEC), 120 * MS, 20 * SEC, t0);
    for written in [
        Written::Exactly,
        Written::WholeSeconds(300 * MS, false),
        Written::WholeSeconds(300 * MS, true),
        Written::SecondsFrom(true),
        Written::SecondsFrom(false),
    ] {
        assert_eq!(learn((10, 2 * SEC, false), written, &starts, 5 * MS), None);
    }
}

/// An undated answer may have been read later than any trip the gate has seen, so its reset
/// may be late by more than the gate allows for: it is not the earlier answer another is
/// judged against.
#[test]
fn an_undated_answer_is_no_reference() {
    let t0 = Instant::now();
    let mut kind = WindowKind::new(t0);
    let with_limit = Quota::new(0, 2 * SEC).with_limit(10);
    assert_eq!(kind.observe(&with_limit, None, t0), None);
    kind.started(t0 + 3 * SEC, 1);
    // Read 3 s after that reset, nearly all left unspent: against it, a fixed window would
    // say more.
    assert_eq!(
        kind.observe(&with_limit, Some(t0 + 3 * SEC), t0 + 3 * SEC),
        None
    );
}

#[test]
fn an_undated_answer_or_one_without_a_limit_is_not_judged() {
    let t0 = Instant::now();
    let mut kind = WindowKind::new(t0);
    let with_limit = Quota::new(0, 2 * SEC).with_limit(10);
    assert_eq!(kind.observe(&with_limit, Some(t0), t0), None);
    kind.started(t0 + 3 * SEC, 1);
    // Read 3 s after a reset at 2 s, nearly all left unspent: a fixed window says more.
    assert_eq!(kind.observe(&with_limit, None, t0 + 3 * SEC), None);
    let no_limit = Quota::new(0, 2 * SEC);
    assert_eq!(
        kind.observe(&no_limit, Some(t0 + 3 * SEC), t0 + 3 * SEC),
        None
    );
    // Dated: moving, and at least as long as the longest reset less its rounding.
    assert_eq!(
        kind.observe(&with_limit, Some(t0 + 3 * SEC), t0 + 3 * SEC),
        Some(SEC)
    );
}

#[test]
fn an_answer_that_counts_no_more_than_the_gates_starts_since_the_last_reset_says_nothing() {
    let t0 = Instant::now();
    let said = |remaining| {
        let mut kind = WindowKind::new(t0);
        kind.observe(&Quota::new(0, 2 * SEC).with_limit(10), Some(t0), t0);
        kind.started(t0 + 3 * SEC, 1);
        let read = t0 + 3 * SEC;
        kind.observe(
            &Quota::new(remaining, 2 * SEC).with_limit(10),
            Some(read),
            read,
        )
    };
    // 9 left of 10 after one start since the reset at 2 s: as a fixed window would say.
    assert_eq!(said(9), None);
    // 8 left: the server counted something from before that reset.
    assert_eq!(said(8), Some(SEC));
}

#[test]
fn answers_older_than_two_windows_are_let_go() {
    let t0 = Instant::now();
    let mut kind = WindowKind::new(t0);
    let quota = Quota::new(5, 2 * SEC).with_limit(10);
    kind.observe(&quota, Some(t0), t0);
    kind.observe(&quota, Some(t0), t0 + SEC);
    assert_eq!(kind.answers.len(), 2);
    // Kept two of the longest windows, 10 % longer, and two seconds past their resets: to
    // 8.4 s.
    let read = t0 + 8300 * MS;
    kind.observe(&quota, Some(read), read);
    assert_eq!(kind.answers.len(), 3, "none let go yet");
    let read = t0 + 8500 * MS;
    kind.observe(&quota, Some(read), read);
    assert_eq!(kind.answers.len(), 3, "the first let go");
}

#[test]
fn the_window_a_server_announces_is_the_one_learnt() {
    let t0 = Instant::now();
    let mut kind = WindowKind::new(t0);
    let quota = Quota::new(0, SEC).with_limit(10).with_window(7 * SEC);
    kind.observe(&quota, Some(t0), t0);
    let read = t0 + 3 * SEC;
    assert_eq!(kind.observe(&quota, Some(read), read), Some(7 * SEC));
}

/// Starts of 1 unit at 0 s and 1 s, of 2 at 1.5 s and of 1 at 1.9 s, the last answered at
/// 2 s with 3 of 10 counted, after `between` ran on the kind: the window learnt.
fn counted_back(between: impl FnOnce(&mut WindowKind, Instant)) -> Duration {
    let t0 = Instant::now();
    let mut kind = WindowKind::new(t0);
    let answered = t0 + 1_900 * MS;
    for (at, cost) in [(t0, 1), (t0 + SEC, 1), (t0 + 1_500 * MS, 2), (answered, 1)] {
        kind.started(at, cost);
    }
    between(&mut kind, t0);
    let quota = Quota::new(7, 100 * MS).with_limit(10);
    kind.learn_window(&quota, Some(answered), t0 + 2 * SEC);
    kind.window()
}

/// Whether `window` is `expected`, as found to within [`COUNTED_PRECISION`] below it.
fn near(window: Duration, expected: Duration) -> bool {
    window <= expected && expected - window <= COUNTED_PRECISION
}

#[test]
fn the_starts_an_answer_counted_are_those_made_before_it_was_read_and_not_refused() {
    // The calls of 1.9 s and 1.5 s make 3: the oldest reached the server by 1.6 s (a trip of
    // 100 ms), 300 ms before the answered one. No shorter window counts 3 under any phase.
    let window = counted_back(|_, _| {});
    assert!(near(window, 300 * MS), "{window:?}");
    // Refused, the call of 1.5 s was not counted: those of 1.9 s, 1 s and 0 s were, and the
    // window holds 1.8 s at least.
    let refused = |kind: &mut WindowKind, t0| kind.refused(t0 + 1_500 * MS);
    let window = counted_back(refused);
    assert!(near(window, 1_800 * MS), "{window:?}");
    // A call of 2 started after the answer was read (by a task that took the gate's state
    // first) is none of those it counted.
    let later = |kind: &mut WindowKind, t0| kind.started(t0 + 3 * SEC, 2);
    let window = counted_back(later);
    assert!(near(window, 300 * MS), "{window:?}");
}

#[test]
fn a_sliding_window_counter_s_count_shows_its_window_no_longer_than_it_is() {
    // A counter of 10 per 2 s whose window began with a burst of 10 at 0 s: at 2.5 s, the
    // previous window weighs 0.75, and with a call then, it counts 8.5, and says 8 (rounded
    // down). As a moving window, 8 counted at 2.5 s would mean one of the burst, 2.5 s old,
    // still in it; a counter's previous window weighs in, and under its worst phase one of
    // 1.92 s counts that much: the window learnt, no longer than the server's 2 s.
    let t0 = Instant::now();
    let mut kind = WindowKind::new(t0);
    kind.started(t0, 10);
    // Its answer: none left, the next unit back in 2 s.
    kind.observe(&Quota::new(0, 2 * SEC).with_limit(10), Some(t0), t0);
    let at = t0 + 2_500 * MS;
    kind.started(at, 1);
    kind.learn_window(&Quota::new(2, SEC).with_limit(10), Some(at), at);
    let window = kind.window();
    let shortest = Duration::from_secs_f64(2.5 / 1.3);
    assert!(
        window <= shortest && shortest - window <= COUNTED_PRECISION,
        "{window:?}"
    );
}

#[test]
fn resets_that_do_not_give_the_window_back_whole_show_it_moves() {
    // A window of 20 whose resets are whole seconds: the gate spent 4 in the second before
    // each, and the call sent after it finds 6 left: 10 missing.
    let t0 = Instant::now();
    let mut kind = WindowKind::new(t0);
    let limit = 20;
    let probe = |kind: &mut WindowKind, k: u32, left: u64, uncounted: u64| {
        let reset = t0 + k * SEC;
        for i in 0..4 {
            kind.started(reset - SEC + i * 200 * MS, 1);
        }
        let before = Quota::new(0, SEC - 100 * MS).with_limit(limit);
        kind.observe(&before, Some(reset - 100 * MS), reset - 100 * MS);
        kind.started(reset, 1);
        let after = Quota::new(left, SEC).with_limit(limit);
        kind.probed((&after, uncounted), 0.0, reset)
    };
    assert_eq!(probe(&mut kind, 1, 6, 0), None);
    assert_eq!(probe(&mut kind, 2, 6, 0), None);
    // 15 left, and the 6 the gate started from a second before the reset passed (the call
    // that learnt the last window, the 4, and the one that learns this): whole again.
    assert_eq!(probe(&mut kind, 3, 15, 0), None, "back whole");
    // So is 14 with one in flight.
    assert_eq!(probe(&mut kind, 4, 14, 1), None);
    // Three in a row that are not: moving, of the window its answers show (the longest
    // reset, 0.9 s, less its rounding: none yet; the counts, as the starts show them).
    assert_eq!(probe(&mut kind, 5, 6, 0), None);
    assert_eq!(probe(&mut kind, 6, 12, 1), None);
    let learnt = probe(&mut kind, 7, 6, 0);
    assert!(learnt.is_some_and(|w| !w.is_zero()), "{learnt:?}");
    // A reset of now, or no limit, says nothing.
    let now = Quota::new(0, Duration::ZERO).with_limit(limit);
    assert_eq!(kind.probed((&now, 0), 0.0, t0 + 8 * SEC), None);
    assert_eq!(
        kind.probed((&Quota::new(0, SEC), 0), 0.0, t0 + 8 * SEC),
        None
    );
}

#[test]
fn resets_that_others_spend_from_at_once_are_still_whole() {
    // Each reset as above, 6 left after it: the gate counts from 1.2 s before it (the reset
    // that passed, 0.2 s before, less a second's rounding), and its 6 starts there leave 8
    // missing. Others who take 4 a second took 4.8 in those 1.2 s, 7.2 at the margin, 8 in
    // whole units: the window came back whole. At 3 a second, 6 at the margin: it moves.
    let t0 = Instant::now();
    let judge = |others: f64| {
        let mut kind = WindowKind::new(t0);
        let mut learnt = None;
        for k in 1..=7 {
            let reset = t0 + k * SEC;
            for i in 0..4 {
                kind.started(reset - SEC + i * 200 * MS, 1);
            }
            let before = Quota::new(0, SEC - 100 * MS).with_limit(20);
            kind.observe(&before, Some(reset - 100 * MS), reset - 100 * MS);
            kind.started(reset, 1);
            let after = Quota::new(6, SEC).with_limit(20);
            learnt = learnt.or(kind.probed((&after, 0), others, reset));
        }
        learnt
    };
    assert_eq!(judge(4.0), None, "others took what is missing");
    assert!(judge(3.0).is_some(), "others took less than is missing");
}

#[test]
fn a_reset_before_which_nothing_is_known_says_nothing_of_the_next_window() {
    let t0 = Instant::now();
    let mut kind = WindowKind::new(t0 + 5 * SEC);
    // No answer's reset has passed yet.
    let after = Quota::new(6, SEC).with_limit(20).with_window(2 * SEC);
    assert_eq!(kind.probed((&after, 0), 0.0, t0 + 5 * SEC), None);
    // One has, at 5.5 s, but the starts from a second before it (its rounding) were made
    // before the gate knew the quota, from 5 s.
    let at = t0 + 5 * SEC;
    kind.observe(&Quota::new(0, 500 * MS).with_limit(20), Some(at), at);
    for _ in 0..3 {
        assert_eq!(kind.probed((&after, 0), 0.0, t0 + 5_500 * MS), None);
    }
    // From a reset a second after the gate knew it, every start since is known.
    let mut kind = WindowKind::new(at);
    kind.observe(&Quota::new(0, SEC).with_limit(20), Some(at), at);
    let probed = |kind: &mut WindowKind| kind.probed((&after, 0), 0.0, t0 + 6 * SEC);
    assert_eq!(probed(&mut kind), None);
    assert_eq!(probed(&mut kind), None);
    assert_eq!(probed(&mut kind), Some(2 * SEC));
}

#[test]
fn an_answer_that_says_as_much_left_as_before_shows_nothing_given_back() {
    let t0 = Instant::now();
    let mut kind = WindowKind::new(t0);
    let first = 1_300 * MS + Duration::from_nanos(123);
    kind.observe(&Quota::new(2, first).with_limit(10), Some(t0), t0);
    let read = t0 + SEC;
    let same = Quota::new(2, 2_500 * MS).with_limit(10);
    kind.observe(&same, Some(read - MS), read);
    assert_eq!(kind.late(), Duration::ZERO);
}

/// Every answer of `learn_with_trips`'s run taken in as the gate takes them, once the quota
/// is known to move as well: the longest the window was ever taken to be.
fn longest_learnt(
    server: (u64, Duration, bool),
    written: Written,
    starts: &[Instant],
    trips: &[(Duration, Duration)],
) -> Duration {
    let (mut moving, mut longest) = (false, Duration::ZERO);
    answer_each(
        server,
        written,
        (starts, trips),
        |kind, quota, dated, read| {
            if moving {
                kind.learn_window(&quota, Some(dated), read);
            } else {
                moving = kind.observe(&quota, Some(dated), read).is_some();
            }
            if moving {
                longest = longest.max(kind.window());
            }
            false
        },
    );
    longest
}

/// Starts `gaps` milliseconds apart, from now.
fn starts_apart(gaps: &[u64]) -> Vec<Instant> {
    let t0 = Instant::now();
    (gaps.iter())
        .scan(t0, |at, gap| {
            *at += Duration::from_millis(*gap);
            Some(*at)
        })
        .collect()
}

/// Trips each way, in milliseconds.
fn trips_of(trips_ms: &[(u64, u64)]) -> Vec<(Duration, Duration)> {
    (trips_ms.iter())
        .map(|&(up, down)| (Duration::from_millis(up), Duration::from_millis(down)))
        .collect()
}

/// Up to 20 calls' trips each way, up to 200 ms.
fn trips_ms() -> impl Strategy<Value = Vec<(u64, u64)>> {
    prop::collection::vec((0u64..200, 0u64..200), 1..20)
}

/// Resets written exactly; in whole seconds of any phase, or from the answer, rounded either
/// way.
fn written() -> impl Strategy<Value = Written> {
    prop_oneof![
        Just(Written::Exactly),
        (0u64..1000, any::<bool>())
            .prop_map(|(phase, up)| Written::WholeSeconds(Duration::from_millis(phase), up)),
        any::<bool>().prop_map(Written::SecondsFrom),
    ]
}

proptest! {
    /// Whatever the starts and the trips each way (calls overtaking one another: a call
    /// started after the one answered may reach the server first, and be counted in its
    /// answer), and however the resets are written, a moving window is never taken to be
    /// longer than it is: each bound the gate takes its length from is a lower bound.
    #[test]
    fn a_moving_window_is_never_learnt_longer_than_it_is(
        gaps in prop::collection::vec(0u64..200, 1..300),
        limit in 1u64..30,
        window_ms in 500u64..6_000,
        trips_ms in trips_ms(),
        written in written(),
    ) {
        let window = Duration::from_millis(window_ms);
        let (starts, trips) = (starts_apart(&gaps), trips_of(&trips_ms));
        let learnt = longest_learnt((limit, window, true), written, &starts, &trips);
        prop_assert!(learnt <= window, "learnt {:?} of {:?}", learnt, window);
    }

    /// Whatever the starts, the trips each way (calls overtaking one another), and how the
    /// resets are written (exactly; in whole seconds of any phase, or from the answer, rounded
    /// either way): a fixed window of 2 s or more is never learnt as a moving one.
    #[test]
    fn no_fixed_window_is_learnt_as_moving(
        gaps in prop::collection::vec(0u64..400, 1..300),
        limit in 1u64..30,
        window_ms in 2_000u64..6_000,
        trips_ms in trips_ms(),
        written in written(),
    ) {
        let window = Duration::from_millis(window_ms);
        let (starts, trips) = (starts_apart(&gaps), trips_of(&trips_ms));
        let learnt = learn_with_trips((limit, window, false), written, &starts, &trips);
        prop_assert_eq!(learnt, None);
    }

    /// Nor are two fixed windows of one server, whose answers announce whichever policy is
    /// the tightest, as a gate reading one quota takes them: an answer of one says less than
    /// one of the other would, and the reset of each moves to the other's.
    #[test]
    fn no_two_fixed_windows_whose_tightest_is_read_are_learnt_as_moving(
        gaps in prop::collection::vec(0u64..400, 1..300),
        (short, more) in (1u64..20, 1u64..40),
        (short_ms, long_s) in (2_000u64..4_000, 5u64..30),
        trips_ms in trips_ms(),
        written in written(),
        told in any::<bool>(),
    ) {
        // The longer window allows more (two policies of one limit, their windows untold,
        // cannot be told apart).
        let servers = [
            (short, Duration::from_millis(short_ms), false),
            (short + more, Duration::from_secs(long_s), false),
        ];
        let (starts, trips) = (starts_apart(&gaps), trips_of(&trips_ms));
        let mut learnt = None;
        answer_tightest(&servers, (written, told), (&starts, &trips), |kind, quota, dated, read| {
            learnt = kind.observe(&quota, Some(dated), read);
            learnt.is_some()
        });
        prop_assert_eq!(learnt, None);
    }
}

#[test]
fn a_policy_is_its_limit_and_the_window_told_of_it() {
    let t0 = Instant::now();
    let mut kind = WindowKind::new(t0);
    let burst = Quota::new(5, SEC).with_limit(10);
    assert!(kind.is_of(&burst), "nothing heard yet");
    kind.observe(&burst.with_window(2 * SEC), Some(t0), t0);
    assert!(kind.is_of(&burst), "no window told");
    assert!(kind.is_of(&Quota::new(5, SEC)), "no limit told");
    assert!(!kind.is_of(&burst.with_window(3 * SEC)));
    let sustained = Quota::new(30, 10 * SEC).with_limit(40);
    assert!(!kind.is_of(&sustained));
    // The burst's window is not the sustained one's, which goes untold here.
    kind.observe(&sustained, Some(t0), t0);
    assert!(kind.is_of(&sustained.with_window(20 * SEC)));
}

/// The longest trip an answer took is the network's, not a policy's: it still bounds how
/// late a reset may be read after the answers switch to another policy.
#[test]
fn the_longest_trip_outlives_a_switch_of_policy() {
    let t0 = Instant::now();
    let mut kind = WindowKind::new(t0);
    // Of a policy of 20, an answer read 900 ms after its call started.
    kind.started(t0, 1);
    let twenty = Quota::new(19, 2 * SEC).with_limit(20);
    kind.observe(&twenty, Some(t0), t0 + 900 * MS);
    // Of a policy of 10, two answers read at once, 4 s apart. The call of 1 s may have
    // reached the server as late as 1.9 s, in the window of the second answer: with it, 8
    // left is what a fixed window says.
    let ten = |left| Quota::new(left, 2 * SEC).with_limit(10);
    kind.started(t0 + SEC, 1);
    kind.observe(&ten(9), Some(t0 + SEC), t0 + 1001 * MS);
    kind.started(t0 + 5 * SEC, 1);
    let read = t0 + 5001 * MS;
    assert_eq!(kind.observe(&ten(8), Some(t0 + 5 * SEC), read), None);
}

/// What a gate reading one quota saw of express-rate-limit's burst (10 per 2 s) and
/// sustained (40 per 20 s) limits: nine calls at once, then one every 690 ms, each answer
/// the tightest of the two, its reset in whole seconds from the answer, rounded up.
#[test]
fn a_burst_limit_and_a_sustained_one_read_by_their_tightest_are_not_learnt_as_moving() {
    let t0 = Instant::now();
    let mut starts: Vec<_> = (0..9).map(|i| t0 + MS * i).collect();
    starts.extend((0..80).map(|i| t0 + 2 * SEC + 690 * MS * i));
    let servers = [(10, 2 * SEC, false), (40, 20 * SEC, false)];
    for told in [false, true] {
        let mut learnt = None;
        let written = (Written::SecondsFrom(true), told);
        answer_tightest(
            &servers,
            written,
            (&starts, &[(MS, MS)]),
            |kind, quota, at, read| {
                learnt = kind.observe(&quota, Some(at), read);
                learnt.is_some()
            },
        );
        assert_eq!(learnt, None, "told the windows: {told}");
    }
}

#[test]
fn resets_a_few_milliseconds_short_of_whole_seconds_apart_are_whole_seconds() {
    let t0 = Instant::now();
    let mut kind = WindowKind::new(t0);
    // Resets at 2 s and at 4.995 s, read at 0.25 s and 4 s: whole seconds apart, give or take
    // the clocks' reads. Rounded, they say nothing of a start at 1.5 s, which the server may
    // have counted in the first window: 8 left, and the two starts since a second before the
    // first reset, are the limit.
    let first = Quota::new(5, 1750 * MS).with_limit(10);
    kind.observe(&first, Some(t0 + 250 * MS), t0 + 250 * MS);
    kind.started(t0 + 1500 * MS, 1);
    kind.started(t0 + 4 * SEC, 1);
    let second = Quota::new(8, 995 * MS).with_limit(10);
    assert_eq!(
        kind.observe(&second, Some(t0 + 4 * SEC), t0 + 4 * SEC),
        None
    );
    // Nor, with another start, does 7 left at 4.5 s: the first reset still may be a second
    // early, the start at 1.5 s in the second window.
    kind.started(t0 + 4500 * MS, 1);
    let third = Quota::new(7, 495 * MS).with_limit(10);
    let read = t0 + 4500 * MS;
    assert_eq!(kind.observe(&third, Some(read), read), None);
}

/// A fixed window of 10 per 2 s that others spend from, 4 a second: after its reset, an
/// answer says less than the gate's own starts would leave. Judged beside the others' pace,
/// it is a fixed window still; judged as if the gate were alone, it reads as a moving one.
#[test]
fn a_fixed_window_others_spend_from_is_not_taken_for_a_moving_one() {
    let t0 = Instant::now();
    let trip = 10 * MS;
    let judge = |others: f64| {
        let mut kind = WindowKind::new(t0);
        let quota = |left, resets_in| Quota::new(left, resets_in).with_limit(10);
        // The first window: the gate's call at 0 s, 9 left until 2 s.
        kind.started(t0, 1);
        let first = kind.observe_beside(&quota(9, 2 * SEC - trip), (Some(t0), others), t0 + trip);
        assert_eq!(first, None);
        // The next window: others took 4 from 2 s to 3 s; the gate's call at 3 s finds 5
        // left until 4 s.
        let at = t0 + 3 * SEC;
        kind.started(at, 1);
        kind.observe_beside(&quota(5, SEC - trip), (Some(at), others), at + trip)
    };
    assert_eq!(judge(4.0), None, "a fixed window, others spending");
    assert!(
        judge(0.0).is_some(),
        "alone, the gate would take it for moving"
    );
}

/// An answer at 0 s, 2 of 10 left, resetting at 1.3 s (written exactly); then the answer to
/// a call started at 0.999 s and read at 1 s, 9 left, resetting at `second_reset`.
fn given_back_before_the_reset(second_reset: Duration) -> WindowKind {
    let t0 = Instant::now();
    let mut kind = WindowKind::new(t0);
    let first = 1_300 * MS + Duration::from_nanos(123);
    kind.observe(&Quota::new(2, first).with_limit(10), Some(t0), t0);
    let read = t0 + SEC;
    let second = Quota::new(9, second_reset - SEC).with_limit(10);
    kind.observe(&second, Some(read - MS), read);
    kind
}

#[test]
fn a_window_given_back_before_its_reset_shows_the_resets_late() {
    // More left at 1 s than at 0 s: the server gave back by 1 s, and its reset of 1.3 s was
    // written 0.3 s late, at least. Later resets are taken that much sooner.
    let kind = given_back_before_the_reset(3_500 * MS);
    let late = 300 * MS + Duration::from_nanos(123);
    assert_eq!(kind.late(), late);
    let quota = Quota::new(5, 2 * SEC).with_limit(10);
    assert_eq!(kind.corrected(&quota).resets_in(), 2 * SEC - late);
    assert_eq!(
        kind.corrected(&Quota::new(5, 100 * MS)).resets_in(),
        Duration::ZERO
    );
    // The longest reset, less how late, bounds the window.
    assert_eq!(kind.window(), 2_500 * MS - late);
}

#[test]
fn resets_in_whole_seconds_are_not_taken_as_late() {
    // Two whole seconds apart: written in whole seconds, whose rounding takes the lateness in.
    let kind = given_back_before_the_reset(3_300 * MS + Duration::from_nanos(123));
    assert_eq!(kind.late(), Duration::ZERO);
    let quota = Quota::new(5, 2 * SEC).with_limit(10);
    assert_eq!(kind.corrected(&quota).resets_in(), 2 * SEC);
}

#[test]
fn resets_are_taken_as_a_second_late_at_most() {
    let t0 = Instant::now();
    let mut kind = WindowKind::new(t0);
    kind.observe(&Quota::new(2, 5_500 * MS).with_limit(10), Some(t0), t0);
    let read = t0 + SEC;
    let second = Quota::new(9, 7_700 * MS).with_limit(10);
    kind.observe(&second, Some(read - MS), read);
    assert_eq!(kind.late(), SEC);
}

/// A window kept of the gate's starts (a moving window's counter, its margin grown by
/// refusals) may reach further back than the answers show a window: the starts are kept
/// that far, where with nothing announced they would go after two seconds.
#[test]
fn starts_are_kept_as_far_back_as_a_window_kept_of_them_asks() {
    let t0 = Instant::now();
    let starts = |keep: Option<Duration>| {
        let mut kind = WindowKind::new(t0);
        if let Some(span) = keep {
            kind.keep_starts_for(span);
        }
        kind.started(t0, 2);
        kind.started(t0 + 5 * SEC, 1);
        kind.starts_since(t0).collect::<Vec<_>>()
    };
    assert_eq!(starts(Some(10 * SEC)), [(t0, 2), (t0 + 5 * SEC, 1)]);
    assert_eq!(starts(None), [(t0 + 5 * SEC, 1)]);
}
