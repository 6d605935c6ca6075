//! The `tracing` span of every call through a gate: one per call (per item of a mapped
//! stream, per page of a listing), with its gate's name, its wait and its attempts; none
//! when no subscriber wants `DEBUG`. Paused time.
//!
//! One test in its own process: `tracing` caches, for the whole process, which callsites a
//! subscriber wants, and tests that ran beside it on other threads (with no subscriber)
//! could have that cache computed without this test's subscriber.
#![cfg(feature = "metrics")]

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use paceline::prelude::*;
use paceline::{CallOptions, Error, Gate, Page, RateLimited};
use tokio::time::sleep;

const SEC: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);

/// A span as the collector saw it: its name, every value recorded for each field (a field
/// recorded twice shows both, as a log line would), and the events inside it.
#[derive(Debug, Clone, Default)]
struct Seen {
    name: &'static str,
    fields: BTreeMap<&'static str, Vec<String>>,
    events: usize,
}

impl Seen {
    fn add(&mut self, field: &tracing::field::Field, value: String) {
        self.fields.entry(field.name()).or_default().push(value);
    }
}

impl tracing::field::Visit for Seen {
    fn record_f64(&mut self, field: &tracing::field::Field, value: f64) {
        self.add(field, value.to_string());
    }
    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        self.add(field, value.to_string());
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.add(field, value.to_owned());
    }
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
        self.add(field, format!("{value:?}"));
    }
}

/// Collects every span of target `paceline::gate` when it closes.
#[derive(Clone, Default)]
struct Collector {
    closed: Arc<Mutex<Vec<Seen>>>,
}

impl Collector {
    fn closed(&self) -> Vec<Seen> {
        self.closed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl<S> tracing_subscriber::Layer<S> for Collector
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut seen = Seen {
            name: attrs.metadata().name(),
            ..Seen::default()
        };
        attrs.record(&mut seen);
        let span = ctx.span(id).expect("a new span");
        span.extensions_mut().insert(seen);
    }

    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let span = ctx.span(id).expect("a live span");
        let mut extensions = span.extensions_mut();
        values.record(extensions.get_mut::<Seen>().expect("seen at birth"));
    }

    fn on_event(&self, event: &tracing::Event<'_>, ctx: tracing_subscriber::layer::Context<'_, S>) {
        if let Some(span) = ctx.event_span(event) {
            if let Some(seen) = span.extensions_mut().get_mut::<Seen>() {
                seen.events += 1;
            }
        }
    }

    fn on_close(&self, id: tracing::span::Id, ctx: tracing_subscriber::layer::Context<'_, S>) {
        let span = ctx.span(&id).expect("a closing span");
        if span.metadata().target() != "paceline::gate" {
            return;
        }
        let seen = span
            .extensions_mut()
            .remove::<Seen>()
            .expect("seen at birth");
        self.closed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(seen);
    }
}

/// A span's fields as `(gate, wait_ms, attempts)`, absent ones as "-".
fn fields(seen: &Seen) -> (String, String, String) {
    let field = |name| {
        seen.fields
            .get(name)
            .map_or_else(|| "-".into(), |v| v.join(","))
    };
    assert_eq!(seen.name, "call");
    (field("gate"), field("wait_ms"), field("attempts"))
}

fn span_fields(gate: &str, wait_ms: &str, attempts: &str) -> (String, String, String) {
    (gate.into(), wait_ms.into(), attempts.into())
}

/// One test, so that no other test's subscriber comes and goes meanwhile: `tracing` caches
/// which callsites are wanted for every subscriber in the process at once.
#[tokio::test(start_paused = true)]
async fn every_call_has_a_span_with_its_wait_and_attempts() {
    use tracing_subscriber::layer::SubscriberExt as _;
    // A subscriber that wants INFO and above gets no span.
    let collector = Collector::default();
    let info = tracing_subscriber::registry()
        .with(collector.clone())
        .with(tracing_subscriber::filter::LevelFilter::INFO);
    let info = tracing::subscriber::set_default(info);
    let gate = Gate::builder(|_: &()| None).build().unwrap();
    gate.call(|| async { Ok::<_, ()>(()) }).await.unwrap();
    assert!(collector.closed().is_empty());
    drop(info);

    let collector = Collector::default();
    let _default =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(collector.clone()));

    // One slot; "slow down" asks for 300 ms.
    let gate = Gate::builder(|e: &&str| {
        (*e == "slow down").then(|| RateLimited::new().retry_after(300 * MS))
    })
    .name("ads")
    .max_in_flight(1)
    .build()
    .unwrap();
    let first = gate.call(|| async {
        tracing::info!("inside the first call");
        sleep(SEC).await;
        Ok::<_, &str>("first")
    });
    let mut tries = 0;
    let throttled_once = gate.call(|| {
        tries += 1;
        let first = tries == 1;
        async move {
            if first {
                Err("slow down")
            } else {
                Ok("second")
            }
        }
    });
    let third = gate.call(|| async { Ok::<_, &str>("third") });
    let answers = futures::join!(first, throttled_once, third);
    assert_eq!(answers, (Ok("first"), Ok("second"), Ok("third")));
    // The first went at once; the second at 1 s, throttled, again at 1.3 s; the third, which
    // a retry goes before, at 1.3 s.
    let closed = collector.closed();
    let seen: Vec<_> = closed.iter().map(fields).collect();
    assert_eq!(
        seen,
        [
            span_fields("ads", "0", "1"),
            span_fields("ads", "1000", "2"),
            span_fields("ads", "1300", "1"),
        ]
    );
    assert_eq!(
        closed[0].events, 1,
        "the user's event is inside its call's span"
    );

    // A call that gives up; one too late to start, which never started.
    let give_up = Gate::builder(|_: &&str| Some(RateLimited::new().retry_after(SEC)))
        .max_retries(2)
        .build()
        .unwrap();
    let gave_up = give_up.call(|| async { Err::<(), _>("no") }).await;
    assert!(matches!(gave_up, Err(Error::GaveUp { attempts: 3, .. })));
    let hurried = CallOptions::new().max_wait(100 * MS);
    let late = give_up.call_with(hurried, || async { Ok(()) }).await;
    assert!(matches!(late, Err(Error::Deadline { .. })));
    // A stream's items and a listing's pages, one span each.
    let mapped: Vec<_> = futures::stream::iter(0..2)
        .throttled_map(&gate, |n| async move { Ok::<_, &str>(n) })
        .collect()
        .await;
    assert_eq!(mapped, [Ok(0), Ok(1)]);
    let rows: Vec<_> = gate
        .paged(|token: Option<u32>| async move {
            Ok::<_, &str>(Page {
                rows: vec![token.unwrap_or(0)],
                next: token.is_none().then_some(1),
            })
        })
        .collect()
        .await;
    assert_eq!(rows, [Ok(0), Ok(1)]);

    let seen: Vec<_> = collector.closed()[3..].iter().map(fields).collect();
    assert_eq!(
        seen,
        [
            span_fields("default", "0", "3"),
            span_fields("default", "-", "1"),
            span_fields("ads", "0", "1"),
            span_fields("ads", "0", "1"),
            span_fields("ads", "0", "1"),
            span_fields("ads", "0", "1"),
        ]
    );
}
