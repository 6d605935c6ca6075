//! Limits changed while the gate runs (`Gate::set_max_in_flight`, `Gate::set_rate`): calls
//! already waiting see the change at once, calls in flight go on, bad values are refused as
//! the builder refuses them; an adaptive rate takes a new rate as its ceiling. In paused time,
//! exact to the millisecond.

use crate::support;
use std::cell::RefCell;
use std::time::Duration;

use futures::stream;
use paceline::prelude::*;
use paceline::{ConfigError, Gate, RateLimited};
use tokio::time::{Instant, sleep, sleep_until};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A throttle, with a Retry-After of this many ms.
#[derive(Debug, Clone, PartialEq)]
struct Slow(u64);

fn gate() -> paceline::GateBuilder<Slow> {
    Gate::builder(|e: &Slow| Some(RateLimited::new().retry_after(ms(e.0))))
}

/// A call that arrives `arrive_ms` after `start` and takes `work_ms`: when it started and
/// ended, in ms since `start`.
async fn call_at(gate: &Gate<Slow>, start: Instant, arrive_ms: u64, work_ms: u64) -> (u64, u64) {
    sleep_until(start + ms(arrive_ms)).await;
    let started = gate
        .call(|| async {
            let started = support::ms_since(start);
            sleep(ms(work_ms)).await;
            Ok(started)
        })
        .await
        .unwrap();
    (started, support::ms_since(start))
}

/// Runs `change` on `gate` `at_ms` after `start`.
async fn at(start: Instant, at_ms: u64, change: impl FnOnce()) {
    sleep_until(start + ms(at_ms)).await;
    change();
}

#[tokio::test(start_paused = true)]
async fn a_raised_in_flight_limit_starts_waiting_calls_at_once() {
    let gate = gate().max_in_flight(1).build().unwrap();
    let start = Instant::now();
    let calls = futures::join!(
        call_at(&gate, start, 0, 1_000),
        call_at(&gate, start, 0, 1_000),
        call_at(&gate, start, 0, 1_000),
        call_at(&gate, start, 0, 1_000),
        at(start, 100, || gate.set_max_in_flight(3).unwrap()),
    );
    // Two more start the instant the limit rises; the fourth when the first ends.
    assert_eq!(
        calls,
        ((0, 1_000), (100, 1_100), (100, 1_100), (1_000, 2_000), ())
    );
}

#[tokio::test(start_paused = true)]
async fn a_lowered_in_flight_limit_lets_calls_in_flight_finish_and_holds_new_starts() {
    let gate = gate().max_in_flight(3).build().unwrap();
    let start = Instant::now();
    let calls = futures::join!(
        call_at(&gate, start, 0, 100),
        call_at(&gate, start, 0, 200),
        call_at(&gate, start, 0, 300),
        call_at(&gate, start, 0, 100),
        call_at(&gate, start, 0, 100),
        at(start, 50, || gate.set_max_in_flight(1).unwrap()),
    );
    // The three in flight finish; the fourth starts only when none is left, the fifth after.
    assert_eq!(
        calls,
        ((0, 100), (0, 200), (0, 300), (300, 400), (400, 500), ())
    );
    assert_eq!(gate.stats().successes, 5);
}

#[tokio::test(start_paused = true)]
async fn a_mapped_stream_keeps_as_many_calls_in_progress_as_the_limit_allows_now() {
    let gate = gate().max_in_flight(1).build().unwrap();
    let start = Instant::now();
    let starts = RefCell::new(Vec::new());
    let mapped = support::record(
        start,
        stream::iter(0..6u32).throttled_map(&gate, |i| {
            let starts = &starts;
            async move {
                starts.borrow_mut().push(support::ms_since(start));
                sleep(ms(100)).await;
                Ok::<_, Slow>(i)
            }
        }),
    );
    let (out, ()) = futures::join!(
        mapped,
        at(start, 150, || gate.set_max_in_flight(3).unwrap())
    );
    assert_eq!(out.len(), 6);
    // One at a time; from the stream's next poll after 150 ms, three at a time.
    assert_eq!(starts.into_inner(), [0, 100, 200, 200, 200, 300]);
}

#[tokio::test(start_paused = true)]
async fn a_raised_rate_lets_the_waiting_call_start_at_once_and_a_lowered_one_holds_it() {
    let gate = gate().rate(1.0).build().unwrap();
    let start = Instant::now();
    let calls = futures::join!(
        call_at(&gate, start, 0, 0),
        call_at(&gate, start, 0, 0),
        call_at(&gate, start, 0, 0),
        call_at(&gate, start, 0, 0),
        at(start, 100, || gate.set_rate(10.0).unwrap()),
        at(start, 250, || gate.set_rate(2.0).unwrap()),
    );
    // Due at 1 s at first; at 10 a second from 100 ms: one then, one at 200 ms; at 2 a
    // second from 250 ms, the next is due 500 ms after the last start.
    assert_eq!(calls, ((0, 0), (100, 100), (200, 200), (700, 700), (), ()));
    assert_eq!(gate.stats().rate, Some(2.0));
}

#[tokio::test(start_paused = true)]
async fn a_new_rate_counts_the_units_the_last_start_spent() {
    let gate = gate().rate(10.0).build().unwrap();
    let start = Instant::now();
    let costly = paceline::CallOptions::new().cost(4);
    gate.call_with(costly, || async { Ok(()) }).await.unwrap();
    gate.set_rate(20.0).unwrap();
    // Four units at 20 a second: 200 ms after it.
    gate.call(|| async { Ok(()) }).await.unwrap();
    assert_eq!(support::ms_since(start), 200);
}

#[tokio::test(start_paused = true)]
async fn an_adaptive_rate_takes_a_new_rate_as_its_ceiling() {
    let gate = gate()
        .rate(10.0)
        .adaptive(2.0, 100.0)
        .max_retries(3)
        .build()
        .unwrap();
    gate.set_rate(4.0).unwrap();
    assert_eq!(gate.stats().rate, Some(4.0));
    let start = Instant::now();
    // A minute of successes: it never grows past 4 a second, 250 ms apart.
    for i in 0..240u64 {
        gate.call(|| async { Ok(()) }).await.unwrap();
        assert_eq!(support::ms_since(start), 250 * i);
    }
    assert_eq!(gate.stats().rate, Some(4.0));
    // A throttle cuts it, as before, down to its floor.
    let mut tries = 0;
    gate.call(|| {
        tries += 1;
        let first = tries == 1;
        async move { if first { Err(Slow(1_000)) } else { Ok(()) } }
    })
    .await
    .unwrap();
    assert_eq!(gate.stats().rate, Some(2.8));
    // A plan above the old ceiling: the gate starts again from it.
    gate.set_rate(150.0).unwrap();
    assert_eq!(gate.stats().rate, Some(150.0));
    // One below the floor brings the floor down: a throttle then cuts below the old one.
    gate.set_rate(1.0).unwrap();
    let mut tries = 0;
    gate.call(|| {
        tries += 1;
        let first = tries == 1;
        async move { if first { Err(Slow(1_000)) } else { Ok(()) } }
    })
    .await
    .unwrap();
    assert_eq!(gate.stats().rate, Some(1.0), "held at its floor, now 1");
}

#[tokio::test(start_paused = true)]
async fn bad_values_are_refused_as_the_builder_refuses_them_and_change_nothing() {
    let gate = gate().rate(10.0).max_in_flight(2).build().unwrap();
    for value in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let refused = gate.set_rate(value).unwrap_err();
        let built = gate_error(Gate::builder(|_: &Slow| None).rate(value));
        assert_eq!(format!("{refused:?}"), format!("{built:?}"));
        assert!(matches!(
            refused,
            ConfigError::InvalidRate { which: "start", .. }
        ));
    }
    assert_eq!(gate.set_max_in_flight(0), Err(ConfigError::ZeroInFlight));
    assert_eq!(
        gate_error(Gate::builder(|_: &Slow| None).max_in_flight(0)),
        ConfigError::ZeroInFlight
    );
    // Nothing changed: 10 a second, two at once.
    assert_eq!(gate.stats().rate, Some(10.0));
    let start = Instant::now();
    let calls = futures::join!(
        call_at(&gate, start, 0, 1_000),
        call_at(&gate, start, 0, 1_000),
        call_at(&gate, start, 0, 1_000),
    );
    assert_eq!(calls, ((0, 1_000), (100, 1_100), (1_000, 2_000)));
}

fn gate_error(builder: paceline::GateBuilder<Slow>) -> ConfigError {
    builder.build().unwrap_err()
}

#[tokio::test(start_paused = true)]
async fn a_gate_built_without_a_rate_keeps_none() {
    let gate = gate().build().unwrap();
    let refused = gate.set_rate(5.0).unwrap_err();
    assert_eq!(refused, ConfigError::Unpaced);
    assert_eq!(
        refused.to_string(),
        "the gate was built without a rate, so it has none to change; build it with `rate` to change the rate while it runs"
    );
    assert_eq!(gate.stats().rate, None);
    let start = Instant::now();
    for _ in 0..3 {
        gate.call(|| async { Ok(()) }).await.unwrap();
    }
    assert_eq!(support::ms_since(start), 0, "unpaced, as it was built");
}

#[cfg(feature = "metrics")]
#[tokio::test(start_paused = true)]
async fn the_rate_gauge_follows_a_new_rate() {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let prometheus = recorder.handle();
    let gate = metrics::with_local_recorder(&recorder, || {
        gate().name("replanned").rate(10.0).build().unwrap()
    });
    gate.set_rate(2.5).unwrap();
    let scrape = prometheus.render();
    assert!(
        scrape.contains(r#"paceline_gate_rate_per_second{gate="replanned"} 2.5"#),
        "{scrape}"
    );
}
