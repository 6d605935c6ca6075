use proptest::prelude::*;

use super::*;

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

/// The `limits` library's sliding-window counter, as its in-memory storage keeps it: fixed
/// windows of `per` from `epoch` (the server's phase), the current window's count and the
/// previous one's; a request is admitted while the previous count weighted by what is left
/// of the current window, plus the current count, rounded down, leaves room.
#[derive(Debug)]
struct Server {
    limit: u64,
    per: Duration,
    epoch: Instant,
    /// The index of the current window, and the counts of it and of the one before.
    window: u64,
    current: u64,
    previous: u64,
}

impl Server {
    fn new(limit: u64, per: Duration, epoch: Instant) -> Self {
        Self {
            limit,
            per,
            epoch,
            window: 0,
            current: 0,
            previous: 0,
        }
    }

    /// The weighted count at `at`.
    fn weighted(&mut self, at: Instant) -> f64 {
        let since = at - self.epoch;
        let window = (since.as_nanos() / self.per.as_nanos()) as u64;
        match window - self.window {
            0 => {}
            1 => (self.previous, self.current) = (self.current, 0),
            _ => (self.previous, self.current) = (0, 0),
        }
        self.window = window;
        let into = (since.as_nanos() % self.per.as_nanos()) as f64 / self.per.as_nanos() as f64;
        self.previous as f64 * (1.0 - into) + self.current as f64
    }

    /// Whether it admits a request of `cost` arriving at `at` (and counts it if so).
    fn admits(&mut self, at: Instant, cost: u64) -> bool {
        let admitted = self.weighted(at).floor() as u64 + cost <= self.limit;
        if admitted {
            self.current += cost;
        }
        admitted
    }

    /// What it says is left at `at`.
    fn remaining(&mut self, at: Instant) -> u64 {
        self.limit.saturating_sub(self.weighted(at).floor() as u64)
    }
}

#[test]
fn a_burst_is_held_a_whole_window_then_given_back_evenly() {
    let t0 = Instant::now();
    let mut counter = Counter::new(20, 2 * SEC);
    counter.started(t0, 20);
    // The phase whose window began with the burst counts it whole until that window ends.
    assert_eq!(counter.left(t0 + 2 * SEC - MS), 0);
    let next = counter.next_start(t0, 1).unwrap();
    assert!(
        next > t0 + 2 * SEC && next <= t0 + 2 * SEC + 101 * MS,
        "{next:?}"
    );
    // Then a unit every 100 ms.
    assert_eq!(counter.left(t0 + 3 * SEC), 10);
    assert_eq!(counter.left(t0 + 4 * SEC), 20);
    assert_eq!(counter.next_start(t0 + 4 * SEC, 20), None);
}

#[test]
fn a_moving_window_s_limit_is_kept_too() {
    // Whatever the gate started in the last `per` counts whole for the phase whose window
    // began `per` ago.
    let t0 = Instant::now();
    let mut counter = Counter::new(10, SEC);
    for k in 0..10 {
        counter.started(t0 + k * 90 * MS, 1);
    }
    assert_eq!(counter.left(t0 + 900 * MS), 0);
    assert_eq!(counter.left(t0 + 999 * MS), 0);
}

#[test]
fn spent_evenly_it_lets_the_limit_through_every_window() {
    let t0 = Instant::now();
    let mut counter = Counter::new(20, 2 * SEC);
    let mut now = t0;
    let mut starts = 0;
    while now < t0 + 20 * SEC {
        match counter.next_start(now, 1) {
            Some(at) => now = at,
            None => {
                counter.started(now, 1);
                starts += 1;
            }
        }
    }
    // A burst of 20, a window's wait, then a unit as each comes back: 20 and 9 windows of 19
    // (a unit of each window is the weighted count's fraction, rounded up).
    assert_eq!(starts, 191);
}

#[test]
fn a_settled_call_gives_back_or_is_charged() {
    let t0 = Instant::now();
    let mut counter = Counter::new(10, SEC);
    counter.started(t0, 5);
    counter.settle(t0, t0 + MS, 5, 2);
    assert_eq!(counter.left(t0 + MS), 8);
    counter.settle(t0, t0 + MS, 2, 4);
    assert_eq!(counter.left(t0 + MS), 6);
    assert_eq!(counter.limit(), 10);
    assert_eq!(counter.per(), SEC);
    // Charged 3 more than its estimate of 2: counted from its end.
    counter.settle(t0, t0 + 2 * MS, 2, 5);
    assert_eq!(counter.left(t0 + 2 * MS), 3);
}

#[test]
fn what_a_call_gives_back_comes_off_the_starts_of_its_instant_in_turn() {
    // Two starts at one instant, of 3 each: 5 given back takes the first 3 and 2 of the
    // other.
    let t0 = Instant::now();
    let mut counter = Counter::new(10, SEC);
    counter.started(t0, 3);
    counter.started(t0, 3);
    counter.settle(t0, t0 + MS, 6, 1);
    assert_eq!(counter.left(t0 + MS), 9);
    // No more than they spent: 2 given back of the 1 left.
    counter.settle(t0, t0 + MS, 2, 0);
    assert_eq!(counter.left(t0 + MS), 10);
}

#[test]
fn a_start_is_counted_from_when_its_answer_was_read() {
    // The server counted the 4 when they arrived, by 300 ms at the latest: counted from then
    // they weigh whole until 1.3 s, and nothing from 2.3 s.
    let t0 = Instant::now();
    let mut counter = Counter::new(10, SEC);
    counter.started(t0, 4);
    counter.answered(t0, t0 + 300 * MS);
    assert_eq!(counter.left(t0 + 1299 * MS), 6);
    assert_eq!(counter.left(t0 + 2299 * MS), 9);
    assert_eq!(counter.left(t0 + 2300 * MS), 10);
    assert_eq!(counter.next_start(t0 + 1299 * MS, 10), Some(t0 + 2300 * MS));
    // What it gives back comes off it still.
    counter.settle(t0, t0 + 400 * MS, 4, 1);
    assert_eq!(counter.left(t0 + 1299 * MS), 9);
}

#[test]
fn each_answer_dates_one_start_of_its_instant_once() {
    let t0 = Instant::now();
    let mut counter = Counter::new(100, SEC);
    counter.started(t0, 20);
    counter.started(t0, 60);
    // The first answer read dates one start; the second, the other.
    counter.answered(t0, t0 + 100 * MS);
    counter.answered(t0, t0 + 200 * MS);
    // A third (the same answer read again) dates neither later.
    counter.answered(t0, t0 + 900 * MS);
    // At 2.16 s the 20 of 100 ms are gone; of the 60 of 200 ms, the window before one that
    // began at 1.2 s weighs 4 %.
    assert_eq!(counter.left(t0 + 2160 * MS), 97);
    assert_eq!(counter.left(t0 + 2200 * MS), 100);
    // An answer to no start it counts changes nothing.
    counter.answered(t0 + MS, t0 + 900 * MS);
    assert_eq!(counter.left(t0 + 2200 * MS), 100);
}

#[test]
fn a_counter_kept_as_a_longer_window_keeps_its_starts_as_dated_and_counts_earlier_ones() {
    let t0 = Instant::now();
    let mut counter = Counter::new(10, SEC);
    counter.started(t0 + SEC, 3);
    counter.answered(t0 + SEC, t0 + 1500 * MS);
    let counter = counter.kept_as(2 * SEC, [(t0, 4)]);
    assert_eq!((counter.limit(), counter.per()), (10, 2 * SEC));
    assert_eq!(counter.earliest_sent(), Some(t0));
    assert_eq!(counter.left(t0 + 1500 * MS), 3);
    // At 4.5 s the window before one that began at 3.5 s weighs the 3 of 1.5 s at a half
    // (counted from 1 s, at a quarter); the 4 of 0 s are gone.
    assert_eq!(counter.left(t0 + 4500 * MS), 8);
    assert_eq!(counter.left(t0 + 5499 * MS), 9);
    assert_eq!(counter.left(t0 + 5500 * MS), 10);
}

#[test]
fn the_worst_phase_is_the_most_any_phase_counts() {
    // One request 1.5 s old and one 0.5 s old, windows of 1 s: the phase whose window began
    // 0.5 s ago counts the young one whole and the old one at a half.
    let ages = [(1500 * MS, 1), (500 * MS, 1)];
    assert!((worst_weighted(ages, SEC) - 1.5).abs() < 1e-9);
    // 5 requests 0.3 s old and one 1.1 s old: the phase whose window began 0.3 s ago counts
    // the 5 whole and the old one at 0.7; the one whose window began 0.1 s ago, all six at
    // 0.9.
    let ages = [(300 * MS, 5), (1100 * MS, 1)];
    assert!((worst_weighted(ages, SEC) - 5.7).abs() < 1e-9);
    // Two windows old, nothing.
    assert_eq!(worst_weighted([(2 * SEC, 3)], SEC), 0.0);
    assert_eq!(worst_weighted([], SEC), 0.0);
}

proptest! {
    /// Against the `limits` library's counter of any phase, a gate that keeps its starts in
    /// a counter of the server's window (or longer) and starts calls when it allows is never
    /// refused, and, kept busy, lets through at least what a window's wait after a burst
    /// leaves.
    #[test]
    fn a_counter_of_any_phase_admits_every_start(
        limit in 1u64..30,
        per_ms in 200u64..3_000,
        phase in 0.0f64..1.0,
        longer in 1.0f64..1.3,
        costs in proptest::collection::vec(1u64..4, 1..200),
        gaps in proptest::collection::vec(0u64..400, 200),
        remaining_every in 1usize..10,
    ) {
        let t0 = Instant::now() + Duration::from_secs(10);
        let per = Duration::from_millis(per_ms);
        let mut server = Server::new(limit, per, t0 - per.mul_f64(phase));
        let mut counter = Counter::new(limit, per.mul_f64(longer));
        let mut now = t0;
        for (i, (&cost, &gap)) in costs.iter().zip(&gaps).enumerate() {
            let cost = cost.min(limit);
            now += Duration::from_millis(gap);
            if let Some(at) = counter.next_start(now, cost) {
                prop_assert!(at > now);
                prop_assert!(counter.left(at) >= cost);
                now = at;
            }
            counter.started(now, cost);
            prop_assert!(server.admits(now, cost), "refused at {:?}, {i}", now - t0);
            // Now and then the server says what it counted beyond the gate's starts (here
            // nothing, but the rounding), which the gate takes in as the moving window does.
            if i % remaining_every == 0 {
                let (left, said) = (counter.left(now), server.remaining(now));
                if said < left {
                    counter.started(now, left - said);
                }
            }
        }
    }
}
