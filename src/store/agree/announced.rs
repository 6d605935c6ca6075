//! The fleet keeps each budget a server announced (of a dimension and policy) as one, on a
//! `redis-server` whose clock the test sets: observe_budget.lua takes in what a gate reckons
//! of it after an announcement, which only ever lowers what is left, but for an answer that
//! shows the window reset (as the gate's own budget takes one); start.lua spends a
//! window's units spread until its reset, and a bucket's as a told bucket; settle_budgets.lua
//! gives back to a window only what no announcement has counted since. A scope's announced
//! budget is kept by the same scripts and rules, at a key of its scope's.

use std::num::NonZeroU64;
use std::time::Duration;

use super::FakeTimeRedis;
use crate::gate::dimensions::{BudgetDraw, Reckoned, Source};
use crate::gate::fleet::FleetAsk;
use crate::store::redis::{RedisStore, int};
use crate::{Budget, Dimension, Window};

const MS: Duration = Duration::from_millis(1);

/// The test's clock: `ms` milliseconds after its first second.
fn at(ms: u64) -> Duration {
    Duration::from_millis(1_000 + ms)
}

/// A fleet's budget of tokens a server announced, of kind `window`: a bucket of 10 that
/// refills in a second, or a window (whose limit and length say nothing).
fn announced(window: Window) -> Budget {
    let limit = if window == Window::Refilling { 10 } else { 1 };
    Budget::new(Dimension::TOKENS, limit, Duration::from_secs(1)).window(window)
}

/// A store on `namespace` of `redis`, its scripts loaded.
fn store_on(redis: &FakeTimeRedis, namespace: &str) -> RedisStore {
    let store = RedisStore::open(&redis.url(), namespace).expect("a store");
    store.load_scripts(&mut redis.connect()).expect("load");
    store
}

struct Fleet<'a> {
    redis: &'a FakeTimeRedis,
    store: RedisStore,
    budget: Budget,
    source: Source,
}

impl Fleet<'_> {
    /// A gate reckons `left` of the budget at `now`, a window of which resets in
    /// `resets_in`, from an answer to a call of a start the store did not reserve.
    fn announce(&self, now: Duration, left: u64, resets_in: Duration) {
        self.answer(now, left, resets_in, None);
    }

    /// A gate reckons what the server said, `left`, at `now`, a window of which resets in
    /// `resets_in`, from the answer to a call the store started at `dated`.
    fn answer(&self, now: Duration, left: u64, resets_in: Duration, dated: Option<i64>) {
        self.redis.set_clock(now);
        let reckoned = Reckoned {
            budget: self.budget.clone(),
            source: self.source.clone(),
            left,
            resets_in,
            unsent: 0,
            said: left,
            dated: dated.map(|at| NonZeroU64::new(at as u64).expect("a start")),
        };
        let call = self.store.observe_budget_call(&reckoned);
        let _: Vec<redis::Value> = call.query(&mut self.redis.connect()).expect("it runs");
    }

    fn draw(&self, units: u64) -> BudgetDraw {
        BudgetDraw {
            source: self.source.clone(),
            ..BudgetDraw::told(self.budget.clone(), units)
        }
    }

    /// Asks at `now` to start a call of `units`: `Ok(start)` (microseconds after `now`) or
    /// `Err(ask again after)`.
    fn start(&self, now: Duration, units: u64) -> Result<(i64, i64), i64> {
        self.redis.set_clock(now);
        let asked = FleetAsk {
            budgets: Box::new([self.draw(units)]),
            ..FleetAsk::default()
        };
        let call = self
            .store
            .start_call(&[], None, (&asked, None, 1), (1, 20 * MS));
        let reply: Vec<redis::Value> = call.query(&mut self.redis.connect()).expect("it runs");
        let field = |i| int(&reply, i).expect("a number");
        match field(0) {
            1 => Ok((field(1), field(5))),
            2 => Err(field(1)),
            other => panic!("an answer of budgets: {other} in {reply:?}"),
        }
    }

    /// A call started at `sent` (the store's clock) with `units` cost `actual`, settled at
    /// `now`.
    fn settle(&self, now: Duration, (sent, units): (i64, u64), actual: u64) {
        self.redis.set_clock(now);
        let call = self
            .store
            .settle_budgets_call(&[self.draw(units)], &[actual], Some(sent));
        let _: Vec<redis::Value> = call.query(&mut self.redis.connect()).expect("it runs");
    }
}

#[test]
fn the_fleet_spends_an_announced_window_spread_until_its_reset_and_lower_words_only() {
    spends_a_window(Source::Announced(Some("minute".into())));
}

/// A scope's window is the same budget kept for that scope: the same steps come to the same.
#[test]
fn the_fleet_spends_a_scopes_announced_window_as_the_gates() {
    spends_a_window(Source::AnnouncedIn("tenant".into(), Some("minute".into())));
}

/// A window of `source`, through the steps of its rules.
fn spends_a_window(source: Source) {
    let redis = FakeTimeRedis::start();
    let store = store_on(&redis, "announced-window");
    let fleet = Fleet {
        redis: &redis,
        store,
        budget: announced(Window::Fixed),
        source,
    };
    // 10 left for a second: a call of 4 starts at once; the next of 4 takes its share of
    // the time left after the first (4 of 10 units: 400 ms on).
    fleet.announce(at(0), 10, Duration::from_secs(1));
    let (wait, first) = fleet.start(at(0), 4).expect("room");
    assert_eq!(wait, 0);
    let (wait, second) = fleet.start(at(0), 4).expect("its share");
    assert_eq!((wait, second - first), (400_000, 400_000));
    // 2 left: a call of 4 waits for the reset.
    assert_eq!(fleet.start(at(500), 4), Err(500_000));
    // A gate that reckons more is left says nothing new; one that reckons less is taken at
    // its word: 1 left, and a call of 2 waits for the reset too.
    fleet.announce(at(500), 9, 500 * MS);
    fleet.announce(at(500), 1, 500 * MS);
    assert_eq!(fleet.start(at(500), 2), Err(500_000));
    assert!(fleet.start(at(900), 1).is_ok(), "1 was left");
    assert_eq!(fleet.start(at(950), 1), Err(50_000));
    // The call of 400 ms used nothing, but an announcement came after it started: the
    // server's word counts it, and nothing goes back.
    fleet.settle(at(960), (second, 4), 0);
    assert_eq!(fleet.start(at(960), 1), Err(40_000));

    // Past the reset nothing is known: one call goes to learn the next window, and the
    // others ask again every 20 ms until its word, which counts it as the window's first
    // start.
    assert_eq!(fleet.start(at(1_000), 1).map(|(wait, _)| wait), Ok(0));
    assert_eq!(fleet.start(at(1_050), 1), Err(20_000));
    fleet.announce(at(1_100), 3, Duration::from_secs(5));
    // An older window's answer (resetting more than a second before the known one) changes
    // nothing.
    fleet.announce(at(1_100), 0, 10 * MS);
    // A call of 3 takes its share after the learning call's (1 of 4 units of the 5.1 s
    // left): at 2.275 s.
    let (wait, sent) = fleet.start(at(1_100), 3).expect("3 left");
    assert_eq!(wait, 1_175_000);
    assert_eq!(fleet.start(at(1_100), 1), Err(5_000_000));
    // It started after the last word and used 1 of its 3: 2 go back, and as the last start
    // it spreads the next by its real cost: a call of 2 takes its share after it (1 of 3
    // units of the 3.825 s left), at 3.55 s.
    fleet.settle(at(2_300), (sent, 3), 1);
    assert_eq!(
        fleet.start(at(2_300), 2).map(|(wait, _)| wait),
        Ok(1_250_000)
    );
}

/// The rule `QuotaBudget::observe_dated` keeps in one process, kept by the fleet: an answer
/// to a call started after the least the server said of a window was read, that says more,
/// is of the next window, however late its rounded reset puts that.
#[test]
fn the_fleet_takes_an_answer_finding_more_than_was_said_before_its_call_as_a_new_window() {
    let redis = FakeTimeRedis::start();
    let store = store_on(&redis, "announced-more");
    let fleet = Fleet {
        redis: &redis,
        store,
        budget: announced(Window::Fixed),
        source: Source::Announced(None),
    };
    let held = |now| fleet.start(at(now), 1).map(|(wait, _)| wait);
    // 5 of a window said to reset in a second: a call starts at once.
    fleet.answer(at(0), 5, Duration::from_secs(1), None);
    let (_, first) = fleet.start(at(0), 1).expect("room");
    // An instant on the store's clock.
    let micros = |ms: i64| first + ms * 1_000;
    // Its answer, read at 100 ms: 1 left, the least said yet. Then, at 300 ms, another's: 0.
    fleet.answer(at(100), 1, 900 * MS, Some(first));
    fleet.answer(at(300), 0, 700 * MS, Some(first));
    assert_eq!(held(300), Err(700_000));
    // What changes nothing: an answer saying no more than the least (though its rounded
    // reset is later); an undated one saying more; one to a call started before the least
    // was read (the server may have counted it first), though after another, higher, word.
    fleet.answer(at(400), 0, Duration::from_secs(2), Some(micros(350)));
    assert_eq!(held(400), Err(600_000));
    fleet.answer(at(400), 4, 600 * MS, None);
    assert_eq!(held(400), Err(600_000));
    fleet.answer(at(400), 4, 600 * MS, Some(micros(200)));
    assert_eq!(held(400), Err(600_000));
    // An answer to a call started as the least was read that finds 3 left: the window
    // reset since the server said 0, though it says the reset is 2 s off. That is the new
    // window's word: the next call starts at once, and 2 spread after it until the new
    // reset.
    fleet.answer(at(500), 3, Duration::from_secs(2), Some(micros(300)));
    assert_eq!(held(500), Ok(0));
    assert_eq!(held(500), Ok(1_000_000 * 2 / 3));
    // An older window's answer, though it says more, is not the next one's: the last unit
    // is spread after the last start (at 1.167 s) until the reset at 2.5 s, to 1.833 s.
    fleet.answer(at(600), 5, 10 * MS, Some(micros(550)));
    assert_eq!(held(600), Ok(1_233_333));
    // The new window's first word is the least said of it: an answer to a call started
    // after it was read that says more is the next window's.
    fleet.answer(at(700), 4, Duration::from_secs(2), Some(micros(520)));
    assert_eq!(held(700), Ok(0));
}

#[test]
fn the_fleet_spends_an_announced_bucket_as_a_told_one_and_lower_words_only() {
    let redis = FakeTimeRedis::start();
    let store = store_on(&redis, "announced-bucket");
    let fleet = Fleet {
        redis: &redis,
        store,
        budget: announced(Window::Refilling),
        source: Source::Announced(None),
    };
    // A full bucket of 10 that refills in a second: 4 start, and 6 are left.
    fleet.announce(at(0), 10, Duration::ZERO);
    assert!(fleet.start(at(0), 4).is_ok());
    // A gate that reckons 8 are left says nothing new: 6 more go at once, then a 7th unit
    // waits 100 ms for the refill.
    fleet.announce(at(0), 8, Duration::ZERO);
    assert!(fleet.start(at(0), 6).is_ok());
    assert_eq!(fleet.start(at(0), 1), Err(100_000));
    // Half a second on, 5 have come back; a gate reckons 2 (others took 3): a call of 4
    // waits for 2 more, 200 ms.
    fleet.announce(at(500), 2, Duration::ZERO);
    assert_eq!(fleet.start(at(500), 4), Err(200_000));
    // A bucket kept at a much slower refill than the one now read (full far past a refill
    // from now) takes the word of a gate that reads the new one.
    let slow = Fleet {
        budget: Budget::new(Dimension::TOKENS, 10, Duration::from_secs(100))
            .window(Window::Refilling),
        ..fleet
    };
    slow.announce(at(2_000), 0, Duration::ZERO);
    assert_eq!(slow.start(at(2_000), 1), Err(10_000_000));
    let fleet = Fleet {
        budget: announced(Window::Refilling),
        ..slow
    };
    fleet.announce(at(2_000), 5, Duration::ZERO);
    assert!(fleet.start(at(2_000), 5).is_ok());
}

/// Two policies of one dimension, the same policy of two scopes and of the gate, and a told
/// budget alike in all but whence, are kept apart.
#[test]
fn announced_budgets_of_each_policy_and_told_ones_are_kept_apart() {
    let redis = FakeTimeRedis::start();
    let store = store_on(&redis, "announced-apart");
    let fleet = |source: Source| Fleet {
        redis: &redis,
        store: store.namespace("announced-apart").expect("a store"),
        budget: announced(Window::Fixed),
        source,
    };
    let minute = fleet(Source::Announced(Some("minute".into())));
    let day = fleet(Source::Announced(Some("day".into())));
    let none = fleet(Source::Announced(None));
    let of = |scope: &str| fleet(Source::AnnouncedIn(scope.into(), Some("minute".into())));
    let (a, b) = (of("a"), of("b"));
    minute.announce(at(0), 0, Duration::from_secs(1));
    assert!(minute.start(at(0), 1).is_err());
    assert!(day.start(at(0), 1).is_ok());
    assert!(none.start(at(0), 1).is_ok());
    // The gate's minute is spent; each scope's is its own.
    assert!(a.start(at(0), 1).is_ok());
    a.announce(at(0), 0, Duration::from_secs(1));
    assert!(a.start(at(0), 1).is_err());
    assert!(b.start(at(0), 1).is_ok());
    // A told fixed window of 1 a second: the first call fits.
    assert!(fleet(Source::Told).start(at(0), 1).is_ok());
}
