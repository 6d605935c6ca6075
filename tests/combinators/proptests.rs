//! Property tests: every timer combinator against a small reference model of its rules, over
//! random arrival schedules and parameters, in tokio's paused time.
//!
//! Each model is an event-by-event simulation written from the rules in DESIGN.md ("Guarantees
//! of the timer combinators"); none of them calls the crate. Every schedule is in whole
//! milliseconds, so emission instants are exact and compared to the millisecond. Besides the
//! model, each property checks the combinator's guarantee directly (spacing, windows, batch
//! sizes, order, bounded buffering), so that a model and an implementation sharing a mistake
//! still trip over the guarantee.

use std::cell::{Cell, OnceCell, RefCell};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::pin;
use std::rc::Rc;
use std::time::Duration;

use futures::stream::LocalBoxStream;
use futures::{Stream, StreamExt};
use paceline::RateHandle;
use paceline::prelude::*;
use proptest::prelude::*;
use tokio::time::Instant;

use crate::support::{self, ms_since, scheduled};

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// 1000 cases per property unless `PROPTEST_CASES` says otherwise: about ten seconds for
/// the whole file in debug on two cores. Failures are kept next to this file, in
/// `proptests.proptest-regressions`.
fn config() -> ProptestConfig {
    let defaults = ProptestConfig::default();
    support::regressions_beside_the_file(ProptestConfig {
        cases: if std::env::var_os("PROPTEST_CASES").is_some() {
            defaults.cases
        } else {
            1000
        },
        ..defaults
    })
}

/// Runs `future` on a fresh current-thread runtime whose clock starts paused.
fn paused<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime")
        .block_on(future)
}

// ---------------------------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------------------------

/// Arrival offsets in ms, non-decreasing: bursts (zero gaps), trickles and idle stretches.
fn arrivals() -> impl Strategy<Value = Vec<u64>> {
    let gap = prop_oneof![4 => Just(0u64), 4 => 1..30u64, 2 => 30..400u64];
    prop::collection::vec(gap, 0..=60).prop_map(|gaps| {
        gaps.into_iter()
            .scan(0, |at, gap| {
                *at += gap;
                Some(*at)
            })
            .collect()
    })
}

/// A duration in ms that is sometimes zero.
fn millis(max: u64) -> impl Strategy<Value = u64> {
    prop_oneof![1 => Just(0u64), 5 => 1..=max]
}

/// Rate changes made by the consumer right after the emission with the given index.
fn rate_changes() -> impl Strategy<Value = BTreeMap<usize, (usize, u64)>> {
    prop::collection::btree_map(0..60usize, (1..=6usize, millis(300)), 0..=4)
}

// ---------------------------------------------------------------------------------------------
// Driving a combinator
// ---------------------------------------------------------------------------------------------

/// How many items a combinator pulled from upstream and how many it has handed on, and how far
/// the first ever ran ahead of the second.
#[derive(Debug, Default, Clone)]
struct Ledger {
    pulled: Rc<Cell<usize>>,
    emitted: Rc<Cell<usize>>,
    max_ahead: Rc<Cell<usize>>,
    /// When each item was pulled.
    pulled_at: Rc<RefCell<Vec<Instant>>>,
}

impl Ledger {
    /// `upstream`, counting every item pulled from it.
    fn count<S: Stream + 'static>(&self, upstream: S) -> LocalBoxStream<'static, S::Item> {
        let ledger = self.clone();
        upstream
            .inspect(move |_| {
                ledger.pulled_at.borrow_mut().push(Instant::now());
                ledger.pulled.set(ledger.pulled.get() + 1);
                ledger
                    .max_ahead
                    .set(ledger.max_ahead.get().max(ledger.ahead()));
            })
            .boxed_local()
    }

    fn emit(&self, items: usize) {
        self.emitted.set(self.emitted.get() + items);
    }

    /// Items pulled and not yet handed on.
    fn ahead(&self) -> usize {
        self.pulled.get() - self.emitted.get()
    }
}

/// How many upstream items an emission carries.
trait Items {
    fn items(&self) -> usize;
}

impl Items for usize {
    fn items(&self) -> usize {
        1
    }
}

impl<T> Items for Vec<T> {
    fn items(&self) -> usize {
        self.len()
    }
}

/// What a run to the end showed.
#[derive(Debug)]
struct Run<T> {
    /// `(ms since start, item)` per emission.
    out: Vec<(u64, T)>,
    /// When the stream returned `None`.
    end: u64,
    /// The most items ever pulled and not yet emitted.
    max_ahead: usize,
    /// When each item was pulled from upstream, in ms since the start.
    pulled_at: Vec<u64>,
}

impl<T> Run<T> {
    fn instants(&self) -> Vec<u64> {
        self.out.iter().map(|(at, _)| *at).collect()
    }
}

/// Feeds the schedule `arrivals` through the combinator `build` makes, and records the run.
/// Right after emission `k`, `after_emission(k)` runs (the consumer changing a rate, say).
fn run<S: Stream + Unpin>(
    arrivals: &[u64],
    build: impl FnOnce(LocalBoxStream<'static, usize>) -> S,
    mut after_emission: impl FnMut(usize),
) -> Run<S::Item>
where
    S::Item: Items,
{
    let arrivals = arrivals.to_vec();
    paused(async move {
        let start = Instant::now();
        let ledger = Ledger::default();
        let mut stream = build(ledger.count(scheduled(start, arrivals)));
        let mut out = Vec::new();
        while let Some(item) = stream.next().await {
            ledger.emit(item.items());
            out.push((ms_since(start), item));
            after_emission(out.len() - 1);
        }
        let pulled_at = ledger.pulled_at.borrow();
        let pulled_at = pulled_at.iter().map(|at| ms_since_at(start, *at)).collect();
        Run {
            out,
            end: ms_since(start),
            max_ahead: ledger.max_ahead.get(),
            pulled_at,
        }
    })
}

/// Whole milliseconds from `start` to `at`.
fn ms_since_at(start: Instant, at: Instant) -> u64 {
    (at - start).as_millis() as u64
}

/// What the first emissions from an endless upstream showed.
#[derive(Debug)]
struct Endless<T> {
    /// `(ms since start, item)` per emission.
    out: Vec<(u64, T)>,
    /// Items pulled and not yet emitted, right after each emission.
    ahead: Vec<usize>,
    /// The most items ever pulled and not yet emitted.
    max_ahead: usize,
}

impl<T> Endless<T> {
    fn instants(&self) -> Vec<u64> {
        self.out.iter().map(|(at, _)| *at).collect()
    }
}

/// Takes `take` emissions from the combinator `build` puts on an endless, always-ready
/// upstream.
fn run_endless<S: Stream>(
    take: usize,
    build: impl FnOnce(LocalBoxStream<'static, usize>) -> S,
) -> Endless<S::Item>
where
    S::Item: Items,
{
    paused(async move {
        let start = Instant::now();
        let ledger = Ledger::default();
        let mut stream = pin!(build(ledger.count(futures::stream::iter(0..))));
        let mut out = Vec::new();
        let mut ahead = Vec::new();
        while out.len() < take {
            let item = stream.next().await.expect("an endless upstream never ends");
            ledger.emit(item.items());
            ahead.push(ledger.ahead());
            out.push((ms_since(start), item));
        }
        Endless {
            out,
            ahead,
            max_ahead: ledger.max_ahead.get(),
        }
    })
}

/// The batches' items, in order.
fn flatten(out: &[(u64, Vec<usize>)]) -> Vec<usize> {
    out.iter()
        .flat_map(|(_, batch)| batch.iter().copied())
        .collect()
}

/// When the stream must end: at once after its last emission; at 0 with nothing to emit.
fn end_of<T>(model: &[(u64, T)]) -> u64 {
    model.last().map_or(0, |(at, _)| *at)
}

/// The rate in force for each of `len` items: `initial`, then each change from the item after
/// the emission it follows.
fn rates_in_force(
    len: usize,
    initial: (usize, u64),
    changes: &BTreeMap<usize, (usize, u64)>,
) -> Vec<(usize, u64)> {
    (0..len)
        .map(|i| {
            changes
                .range(..i)
                .next_back()
                .map_or(initial, |(_, rate)| *rate)
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Reference models: one event-by-event simulation per combinator, from the rules alone.
// ---------------------------------------------------------------------------------------------

/// `interval_gate(interval, max_batch)`: batches of item indices with their instants.
fn interval_gate_model(
    arrivals: &[u64],
    interval: u64,
    max_batch: usize,
) -> Vec<(u64, Vec<usize>)> {
    let mut out: Vec<(u64, Vec<usize>)> = Vec::new();
    let mut next = 0;
    while next < arrivals.len() {
        let last = out.last().map(|(at, _)| *at);
        // The batch's first item is pulled no earlier than the previous emission.
        let available = arrivals[next].max(last.unwrap_or(0));
        let at = last.map_or(available, |last| available.max(last + interval));
        let mut batch = vec![next];
        next += 1;
        while next < arrivals.len() && batch.len() < max_batch && arrivals[next] <= at {
            batch.push(next);
            next += 1;
        }
        out.push((at, batch));
    }
    out
}

/// When `interval_gate(_, max_batch)` pulls each item from upstream, given its emissions
/// `model`: at the item's arrival, even while the gate is closed, unless `max_batch` items are
/// already buffered; then when the batch holding the item `max_batch` places earlier goes out
/// and makes room.
fn interval_gate_pull_model(
    arrivals: &[u64],
    model: &[(u64, Vec<usize>)],
    max_batch: usize,
) -> Vec<u64> {
    let mut emitted_at = vec![0; arrivals.len()];
    for (at, batch) in model {
        for &item in batch {
            emitted_at[item] = *at;
        }
    }
    (0..arrivals.len())
        .map(|i| match i.checked_sub(max_batch) {
            Some(earlier) => arrivals[i].max(emitted_at[earlier]),
            None => arrivals[i],
        })
        .collect()
}

/// One period of a timer throttle: `[start, end)` with `n` vouchers.
#[derive(Debug, Clone, Copy)]
struct Period {
    start: u64,
    end: u64,
    n: usize,
}

/// `timer_throttle`, with `rates[i]` the rate in force when item `i` is considered: each
/// item's instant and the index of its period in the periods returned.
fn timer_throttle_model(
    arrivals: &[u64],
    rates: &[(usize, u64)],
) -> (Vec<(u64, usize)>, Vec<Period>) {
    let mut out: Vec<(u64, usize)> = Vec::new();
    let mut periods: Vec<Period> = Vec::new();
    let mut left = 0;
    for (i, &arrival) in arrivals.iter().enumerate() {
        let (n, per) = rates[i];
        // Items are pulled one at a time, the next once the previous is out.
        let t = arrival.max(out.last().map_or(0, |(at, _)| *at));
        let running = periods.last().filter(|period| t < period.end).copied();
        let at = match running {
            Some(_) if left > 0 => {
                left -= 1;
                t
            }
            // Vouchers spent: wait for the end, where the next period starts at once.
            Some(period) => {
                periods.push(Period {
                    start: period.end,
                    end: period.end + per,
                    n,
                });
                left = n - 1;
                period.end
            }
            // Idle (or the last period is over): a period starts now.
            None => {
                periods.push(Period {
                    start: t,
                    end: t + per,
                    n,
                });
                left = n - 1;
                t
            }
        };
        out.push((at, periods.len() - 1));
    }
    (out, periods)
}

/// `window_throttle`, with `rates[i]` the rate in force when item `i` goes out:
/// `e_i = max(a_i, e_{i-1}, e_{i-n} + per)`.
fn window_throttle_model(arrivals: &[u64], rates: &[(usize, u64)]) -> Vec<u64> {
    let mut out: Vec<u64> = Vec::new();
    for (i, &arrival) in arrivals.iter().enumerate() {
        let (n, per) = rates[i];
        let mut at = arrival.max(out.last().copied().unwrap_or(0));
        if i >= n {
            at = at.max(out[i - n] + per);
        }
        out.push(at);
    }
    out
}

/// `grouped_within(n, within)`: batches of item indices with their instants.
fn grouped_within_model(arrivals: &[u64], n: usize, within: u64) -> Vec<(u64, Vec<usize>)> {
    let mut out: Vec<(u64, Vec<usize>)> = Vec::new();
    let mut next = 0;
    while next < arrivals.len() {
        let available = arrivals[next].max(end_of(&out));
        let due = available + within;
        let mut batch = vec![next];
        next += 1;
        while next < arrivals.len() && batch.len() < n && arrivals[next] <= due {
            batch.push(next);
            next += 1;
        }
        let last_in = *batch.last().expect("never empty");
        let at = if batch.len() == n || next == arrivals.len() {
            // Full, or flushed when upstream ends right after its last item: at once.
            arrivals[last_in].max(available)
        } else {
            due
        };
        out.push((at, batch));
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Guarantees checked directly on a run
// ---------------------------------------------------------------------------------------------

/// The most emissions in any half-open window `[e, e + per)` that starts at an emission (the
/// busiest window of any phase starts at one).
fn busiest_window(instants: &[u64], per: u64) -> usize {
    instants
        .iter()
        .map(|&from| {
            instants
                .iter()
                .filter(|&&at| from <= at && at < from + per)
                .count()
        })
        .max()
        .unwrap_or(0)
}

fn check_batches(run: &Run<Vec<usize>>, len: usize, max_batch: usize) -> Result<(), TestCaseError> {
    prop_assert_eq!(
        flatten(&run.out),
        (0..len).collect::<Vec<_>>(),
        "order, loss, duplicates"
    );
    for (at, batch) in &run.out {
        prop_assert!(!batch.is_empty(), "empty batch at {}", at);
        prop_assert!(
            batch.len() <= max_batch,
            "batch of {} at {}",
            batch.len(),
            at
        );
    }
    prop_assert!(
        run.max_ahead <= max_batch,
        "pulled {} items ahead of the emissions",
        run.max_ahead
    );
    Ok(())
}

/// Each emission lies in the period the model gives it, and no period holds more emissions
/// than its `n`. (A period is not told apart by its instants alone: a zero-length period
/// `[t, t)` still lets out its item at `t`.)
fn check_periods(
    instants: &[u64],
    model: &[(u64, usize)],
    periods: &[Period],
) -> Result<(), TestCaseError> {
    let mut held = vec![0; periods.len()];
    for (&at, &(_, index)) in instants.iter().zip(model) {
        let period = periods[index];
        prop_assert!(
            period.start <= at && (at < period.end || at == period.start),
            "emission at {} outside its {:?}",
            at,
            period
        );
        held[index] += 1;
    }
    for (period, held) in periods.iter().zip(held) {
        prop_assert!(
            held <= period.n,
            "{} emissions in {:?}: {:?}",
            held,
            period,
            instants
        );
    }
    Ok(())
}

fn check_items(run: &Run<usize>, len: usize) -> Result<(), TestCaseError> {
    let items: Vec<usize> = run.out.iter().map(|(_, item)| *item).collect();
    prop_assert_eq!(
        items,
        (0..len).collect::<Vec<_>>(),
        "order, loss, duplicates"
    );
    // A throttle holds only the one item it passes on next.
    prop_assert!(run.max_ahead <= 1, "pulled {} items ahead", run.max_ahead);
    Ok(())
}

/// Never more than `bound` items pulled and not yet emitted, and none left over right after
/// an emission (an always-ready upstream fills every batch, and a throttle passes on what it
/// pulled).
fn check_endless<T>(run: &Endless<T>, bound: usize) -> Result<(), TestCaseError> {
    prop_assert!(
        run.max_ahead <= bound,
        "pulled {} items ahead",
        run.max_ahead
    );
    prop_assert!(
        run.ahead.iter().all(|&ahead| ahead == 0),
        "items pulled and not emitted after emissions: {:?}",
        run.ahead
    );
    Ok(())
}

/// An always-ready upstream as a schedule: long enough that the model's end of upstream never
/// shows in the first `take` emissions of at most `size` items each.
fn ready(take: usize, size: usize) -> Vec<u64> {
    vec![0; (take + 1) * size]
}

// ---------------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------------

// The arrival schedule comes last in every property: proptest shrinks the inputs in order, so
// the schedule is shrunk once the sizes and rates are already small.
proptest! {
    #![proptest_config(config())]

    #[test]
    fn interval_gate_follows_its_model(
        interval in millis(150),
        max_batch in 1..=8usize,
        arrivals in arrivals(),
    ) {
        let run = run(&arrivals, |up| up.interval_gate(ms(interval), max_batch), |_| {});
        let model = interval_gate_model(&arrivals, interval, max_batch);
        check_batches(&run, arrivals.len(), max_batch)?;
        // It keeps pulling while closed, up to `max_batch` items, and no further.
        let pulls = interval_gate_pull_model(&arrivals, &model, max_batch);
        prop_assert_eq!(&run.pulled_at, &pulls, "pull instants");
        for pair in run.out.windows(2) {
            prop_assert!(pair[1].0 >= pair[0].0 + interval, "closer than {}: {:?}", interval, pair);
        }
        prop_assert_eq!(&run.out, &model);
        prop_assert_eq!(run.end, end_of(&model), "end of stream");
    }

    #[test]
    fn timer_throttle_follows_its_model(
        n in 1..=6usize,
        per in millis(300),
        arrivals in arrivals(),
    ) {
        let run = run(&arrivals, |up| up.timer_throttle(n, ms(per)), |_| {});
        let (model, periods) = timer_throttle_model(&arrivals, &vec![(n, per); arrivals.len()]);
        check_items(&run, arrivals.len())?;
        let instants = run.instants();
        prop_assert!(busiest_window(&instants, per) <= 2 * n, "over 2n in a window: {:?}", instants);
        check_periods(&instants, &model, &periods)?;
        let model: Vec<u64> = model.iter().map(|(at, _)| *at).collect();
        prop_assert_eq!(&instants, &model);
        prop_assert_eq!(run.end, model.last().copied().unwrap_or(0), "end of stream");
    }

    #[test]
    fn window_throttle_follows_its_model(
        n in 1..=6usize,
        per in millis(300),
        arrivals in arrivals(),
    ) {
        let run = run(&arrivals, |up| up.window_throttle(n, ms(per)), |_| {});
        let model = window_throttle_model(&arrivals, &vec![(n, per); arrivals.len()]);
        check_items(&run, arrivals.len())?;
        let instants = run.instants();
        prop_assert!(busiest_window(&instants, per) <= n, "over n in a window: {:?}", instants);
        prop_assert_eq!(&instants, &model);
        prop_assert_eq!(run.end, model.last().copied().unwrap_or(0), "end of stream");
    }

    #[test]
    fn grouped_within_follows_its_model(
        n in 1..=8usize,
        within in millis(150),
        arrivals in arrivals(),
    ) {
        let run = run(&arrivals, |up| up.grouped_within(n, ms(within)), |_| {});
        let model = grouped_within_model(&arrivals, n, within);
        check_batches(&run, arrivals.len(), n)?;
        prop_assert_eq!(&run.out, &model);
        prop_assert_eq!(run.end, end_of(&model), "end of stream");
    }

    #[test]
    fn interval_gate_never_drains_an_endless_upstream(
        max_batch in 1..=6usize,
        interval in millis(150),
        take in 1..=30usize,
    ) {
        let run = run_endless(take, |up| up.interval_gate(ms(interval), max_batch));
        check_endless(&run, max_batch)?;
        let model = interval_gate_model(&ready(take, max_batch), interval, max_batch);
        prop_assert_eq!(&run.out[..], &model[..take]);
    }

    #[test]
    fn grouped_within_never_drains_an_endless_upstream(
        n in 1..=6usize,
        within in millis(150),
        take in 1..=30usize,
    ) {
        let run = run_endless(take, |up| up.grouped_within(n, ms(within)));
        check_endless(&run, n)?;
        let model = grouped_within_model(&ready(take, n), n, within);
        prop_assert_eq!(&run.out[..], &model[..take]);
    }

    #[test]
    fn timer_throttle_never_drains_an_endless_upstream(
        n in 1..=6usize,
        per in millis(300),
        take in 1..=30usize,
    ) {
        let run = run_endless(take, |up| up.timer_throttle(n, ms(per)));
        // A throttle holds only the one item it passes on next.
        check_endless(&run, 1)?;
        let arrivals = ready(take, 1);
        let (model, _) = timer_throttle_model(&arrivals, &vec![(n, per); arrivals.len()]);
        let model: Vec<u64> = model.iter().map(|(at, _)| *at).collect();
        prop_assert_eq!(&run.instants()[..], &model[..take]);
    }

    #[test]
    fn window_throttle_never_drains_an_endless_upstream(
        n in 1..=6usize,
        per in millis(300),
        take in 1..=30usize,
    ) {
        let run = run_endless(take, |up| up.window_throttle(n, ms(per)));
        check_endless(&run, 1)?;
        let arrivals = ready(take, 1);
        let model = window_throttle_model(&arrivals, &vec![(n, per); arrivals.len()]);
        prop_assert_eq!(&run.instants()[..], &model[..take]);
    }

    #[test]
    fn window_throttle_rate_changes_count_the_emissions_already_made(
        n in 1..=6usize,
        per in millis(300),
        changes in rate_changes(),
        arrivals in arrivals(),
    ) {
        window_throttle_rate_changes(n, per, &changes, &arrivals)?;
    }

    #[test]
    fn timer_throttle_rate_changes_apply_from_the_next_period(
        n in 1..=6usize,
        per in millis(300),
        changes in rate_changes(),
        arrivals in arrivals(),
    ) {
        timer_throttle_rate_changes(n, per, &changes, &arrivals)?;
    }
}

/// A window throttle of `n` per `per` ms whose consumer changes the rate as `changes` says,
/// against its model and its rule.
fn window_throttle_rate_changes(
    n: usize,
    per: u64,
    changes: &BTreeMap<usize, (usize, u64)>,
    arrivals: &[u64],
) -> Result<(), TestCaseError> {
    let handle = OnceCell::new();
    let run = run(
        arrivals,
        |up| {
            let mut throttle = up.window_throttle(n, ms(per));
            handle.set(throttle.rate_handle()).expect("built once");
            throttle
        },
        |k| set_rate_after(&handle, changes, k),
    );
    let rates = rates_in_force(arrivals.len(), (n, per), changes);
    let model = window_throttle_model(arrivals, &rates);
    check_items(&run, arrivals.len())?;
    let instants = run.instants();
    for (i, &(n, per)) in rates.iter().enumerate() {
        // The rule of the rate in force, over the emissions made before the change too.
        if i >= n {
            prop_assert!(
                instants[i] >= instants[i - n] + per,
                "emission {} at {} under {} per {} ms, but emission {} at {}: {:?}",
                i,
                instants[i],
                n,
                per,
                i - n,
                instants[i - n],
                instants
            );
        }
        // Never held longer than `per` after the previous emission or its arrival.
        if i > 0 {
            let latest = arrivals[i].max(instants[i - 1] + per);
            prop_assert!(
                instants[i] <= latest,
                "emission {} later than {}: {:?}",
                i,
                latest,
                instants
            );
        }
    }
    // Exactly the model while `n` was never raised: until then the emissions the rule
    // looks back to are among the last `n`, which the throttle remembers; after a raise
    // it may have forgotten them and stay on the safe side, so only the rule holds.
    let exact = rates
        .windows(2)
        .position(|pair| pair[1].0 > pair[0].0)
        .map_or(rates.len(), |i| i + 1);
    prop_assert_eq!(&instants[..exact], &model[..exact]);
    prop_assert_eq!(
        run.end,
        instants.last().copied().unwrap_or(0),
        "end of stream"
    );
    Ok(())
}

/// A timer throttle of `n` per `per` ms whose consumer changes the rate as `changes` says,
/// against its model.
fn timer_throttle_rate_changes(
    n: usize,
    per: u64,
    changes: &BTreeMap<usize, (usize, u64)>,
    arrivals: &[u64],
) -> Result<(), TestCaseError> {
    let handle = OnceCell::new();
    let run = run(
        arrivals,
        |up| {
            let mut throttle = up.timer_throttle(n, ms(per));
            handle.set(throttle.rate_handle()).expect("built once");
            throttle
        },
        |k| set_rate_after(&handle, changes, k),
    );
    let rates = rates_in_force(arrivals.len(), (n, per), changes);
    let (model, periods) = timer_throttle_model(arrivals, &rates);
    check_items(&run, arrivals.len())?;
    let instants = run.instants();
    check_periods(&instants, &model, &periods)?;
    let model: Vec<u64> = model.iter().map(|(at, _)| *at).collect();
    prop_assert_eq!(&instants, &model);
    prop_assert_eq!(run.end, model.last().copied().unwrap_or(0), "end of stream");
    Ok(())
}

/// The cases the rate-change properties once failed on (shrunk, as the regressions file's
/// comments record them), replayed as they are: a regression seed regenerates its case only
/// while the strategies stay exactly as they were, these stay whatever the strategies become.
/// `n`, `per` in ms, rate changes after emissions, arrivals in ms.
type RateCase = (usize, u64, &'static [(usize, (usize, u64))], &'static [u64]);

#[test]
fn rate_changes_that_once_failed() {
    let cases: [RateCase; 3] = [
        (1, 0, &[(0, (1, 1))], &[0; 8]),
        (1, 0, &[(1, (2, 1))], &[0; 17]),
        (1, 0, &[(1, (2, 28))], &[0; 3]),
    ];
    for (n, per, changes, arrivals) in cases {
        let changes: BTreeMap<_, _> = changes.iter().copied().collect();
        window_throttle_rate_changes(n, per, &changes, arrivals).unwrap();
        timer_throttle_rate_changes(n, per, &changes, arrivals).unwrap();
    }
}

/// The consumer's side of a rate change: right after emission `k`, the rate `changes` names
/// for it, if any.
fn set_rate_after(
    handle: &OnceCell<RateHandle>,
    changes: &BTreeMap<usize, (usize, u64)>,
    k: usize,
) {
    if let Some(&(n, per)) = changes.get(&k) {
        let handle = handle.get().expect("taken when the throttle was built");
        handle.set_rate(n, ms(per));
    }
}
