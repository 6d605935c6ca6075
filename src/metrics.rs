//! What a gate tells the world while it works, with the `metrics` feature: counters and
//! gauges through the [`metrics`](https://docs.rs/metrics) facade, and a `tracing` span per
//! call. Without the feature, only the names below are here, and a call carries nothing
//! for either.
//!
//! # Metrics
//!
//! With the `metrics` feature, every gate records the metrics below into the recorder the
//! program installed (Prometheus, StatsD, OpenTelemetry…), each labelled [`LABEL`] (`gate`)
//! with the gate's [name](crate::GateBuilder::name), [`DEFAULT_GATE_NAME`] for a gate built
//! without one. A gate takes its handles from the recorder when it is built: install the
//! recorder first, or the gate records nothing.
//!
//! | name | kind | what |
//! |---|---|---|
//! | `paceline_gate_calls_total` | counter | attempts started, retries included ([`GateStats::calls`](crate::GateStats::calls)) |
//! | `paceline_gate_successes_total` | counter | attempts that succeeded ([`GateStats::successes`](crate::GateStats::successes)) |
//! | `paceline_gate_errors_total` | counter | attempts that failed with an error that is not a throttle ([`GateStats::other_errors`](crate::GateStats::other_errors)) |
//! | `paceline_gate_throttles_total` | counter | attempts the classifier called rate-limited ([`GateStats::throttles`](crate::GateStats::throttles)) |
//! | `paceline_gate_retries_total` | counter | throttled calls tried again ([`GateStats::retries`](crate::GateStats::retries)) |
//! | `paceline_gate_gave_up_total` | counter | calls given up after the retry limit ([`GateStats::gave_up`](crate::GateStats::gave_up)) |
//! | `paceline_gate_held_by_fleet_total` | counter | with a [store](crate::GateBuilder::store): call starts it held back for a backoff another gate on its namespace began ([`GateStats::held_by_fleet`](crate::GateStats::held_by_fleet)) |
//! | `paceline_gate_store_unanswered_total` | counter | with a [store](crate::GateBuilder::store): call starts that went ahead on the gate's own state because the store did not answer in time ([`GateStats::store_unanswered`](crate::GateStats::store_unanswered)) |
//! | `paceline_gate_turned_away_total` | counter | with a [bound on the line](crate::GateBuilder::max_queued): calls turned away as they arrived, the line full ([`GateStats::turned_away`](crate::GateStats::turned_away)) |
//! | `paceline_gate_in_flight` | gauge | calls in progress ([`GateStats::in_flight`](crate::GateStats::in_flight)) |
//! | `paceline_gate_queued` | gauge | calls waiting to start ([`GateStats::queued`](crate::GateStats::queued)) |
//! | `paceline_gate_queued_by_priority` | gauge | calls waiting to start, of each [priority](crate::Priority): labelled `priority` too (`interactive`, `normal`, `bulk`) |
//! | `paceline_gate_in_flight_by_priority` | gauge | calls in progress, of each priority, labelled as above |
//! | `paceline_gate_rate_per_second` | gauge | the rate call starts are paced at, fixed or adaptive ([`GateStats::rate`](crate::GateStats::rate)); absent for a gate without a rate |
//! | `paceline_gate_backing_off` | gauge | 1 while a gate-wide backoff holds calls back ([`GateStats::backoff_until`](crate::GateStats::backoff_until) is set), else 0 |
//! | `paceline_gate_scope_calls_total` | counter | with [`scope_metrics`](crate::GateBuilder::scope_metrics): attempts that went out, of each scope it lists, labelled `scope` too |
//! | `paceline_gate_scope_throttles_total` | counter | with `scope_metrics`: attempts throttled, of each scope it lists, labelled as above |
//!
//! The counters are counted where the gate counts its [`GateStats`](crate::GateStats), and
//! agree with them exactly. (With a [store](crate::GateBuilder::store), a call start that the
//! store is still clearing is in `GateStats::calls` already, and in
//! `paceline_gate_calls_total` once it goes out.) `held_by_fleet_total` and
//! `store_unanswered_total` are registered only for a gate built with a
//! [store](crate::GateBuilder::store) (a `RedisStore`, with the `redis` feature), and
//! `turned_away_total` only for one built with a [bound](crate::GateBuilder::max_queued): a
//! gate without one shows no counter that could never move.
//!
//! The gauges are updated where the state they show changes, so they are right whenever
//! they are read: `in_flight` and `queued` move by increments, which add up in whatever
//! order threads apply them; the rate is set under the gate's lock, in the order it
//! changes. `backing_off` goes to 1 when a throttle (or, with a store, a backoff another
//! process began) starts the gate-wide backoff, and back to 0 when that backoff ends,
//! whether or not any call waits then: a short task, spawned on the tokio runtime of the
//! call that was throttled, waits for the end (following it if another throttle moves it)
//! and sets the gauge in the same instant, once the runtime runs it. A backoff of a
//! [scope](crate::Scope) holds only that scope's calls and is not shown.
//!
//! ```
//! # #[cfg(feature = "metrics")]
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! use paceline::{Gate, RateLimited};
//!
//! let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
//! let prometheus = recorder.handle();
//! // A program installs its recorder once, for every thread (`install_recorder()`); a
//! // thread's own does here.
//! let gate = metrics::with_local_recorder(&recorder, || {
//!     Gate::builder(|e: &u16| (*e == 429).then(RateLimited::new))
//!         .name("ads-api")
//!         .max_retries(0)
//!         .build()
//!         .unwrap()
//! });
//! gate.call(|| async { Ok::<_, u16>(()) }).await.unwrap();
//! let _ = gate.call(|| async { Err::<(), _>(429) }).await;
//! let scrape = prometheus.render();
//! assert!(scrape.contains(r#"paceline_gate_calls_total{gate="ads-api"} 2"#));
//! assert!(scrape.contains(r#"paceline_gate_gave_up_total{gate="ads-api"} 1"#));
//! assert!(scrape.contains(r#"paceline_gate_backing_off{gate="ads-api"} 1"#));
//! assert_eq!(gate.stats().calls, 2);
//! # }
//! # #[cfg(not(feature = "metrics"))]
//! # fn main() {}
//! ```
//!
//! # Spans
//!
//! Every call through a gate ([`Gate::call`](crate::Gate::call) and its kin, each item of
//! [`throttled_map`](crate::PacelineExt::throttled_map), each page of
//! [`Gate::paged`](crate::Gate::paged)) runs inside a `tracing` span named `call`, at
//! `DEBUG` level with the target `paceline::gate`:
//!
//! | field | what |
//! |---|---|
//! | `gate` | the gate's name |
//! | `wait_ms` | milliseconds from the call's arrival at the gate to the start of its first attempt (empty if it never started) |
//! | `attempts` | the attempts it made, the first included: 1 + its retries (empty if it was dropped before it ended) |
//!
//! The user's future runs inside the span, so its own spans and events nest under it, and
//! so do the gate's own events of the call (a throttle's warning). When no subscriber wants
//! the span, a call checks `tracing`'s level filter once (a load from memory) and reads no
//! clock and allocates nothing for it.

use std::borrow::Cow;

use crate::gate::classify::Scope;
use crate::gate::options::Priority;

/// The scopes whose calls the metrics count apart (see
/// [`GateBuilder::scope_metrics`](crate::GateBuilder::scope_metrics)).
pub(crate) type ScopeLabels = Vec<Scope>;

/// The name of a gate built without a [name](crate::GateBuilder::name): the value of its
/// [`LABEL`] and of its spans' `gate` field.
pub const DEFAULT_GATE_NAME: &str = "default";

/// The label every metric of a gate carries, with the gate's name as its value.
pub const LABEL: &str = "gate";

/// Counter: attempts started, retries included.
pub const CALLS: &str = "paceline_gate_calls_total";
/// Counter: attempts that succeeded.
pub const SUCCESSES: &str = "paceline_gate_successes_total";
/// Counter: attempts that failed with an error that is not a throttle.
pub const ERRORS: &str = "paceline_gate_errors_total";
/// Counter: attempts the classifier called rate-limited.
pub const THROTTLES: &str = "paceline_gate_throttles_total";
/// Counter: throttled calls tried again.
pub const RETRIES: &str = "paceline_gate_retries_total";
/// Counter: calls given up after the retry limit.
pub const GAVE_UP: &str = "paceline_gate_gave_up_total";
/// Counter: call starts the [store](crate::GateBuilder::store) held back for a backoff
/// another gate on its namespace began.
pub const HELD_BY_FLEET: &str = "paceline_gate_held_by_fleet_total";
/// Counter: call starts that went ahead on the gate's own state because the
/// [store](crate::GateBuilder::store) did not answer in time.
pub const STORE_UNANSWERED: &str = "paceline_gate_store_unanswered_total";
/// Counter: calls turned away as they arrived, the gate's line full.
pub const TURNED_AWAY: &str = "paceline_gate_turned_away_total";
/// Gauge: calls in progress.
pub const IN_FLIGHT: &str = "paceline_gate_in_flight";
/// Gauge: calls waiting to start.
pub const QUEUED: &str = "paceline_gate_queued";
/// Gauge: calls waiting to start, of each [priority](crate::Priority), labelled
/// [`PRIORITY_LABEL`] (`interactive`, `normal` or `bulk`).
pub const QUEUED_BY_PRIORITY: &str = "paceline_gate_queued_by_priority";
/// Gauge: calls in progress, of each [priority](crate::Priority), labelled
/// [`PRIORITY_LABEL`].
pub const IN_FLIGHT_BY_PRIORITY: &str = "paceline_gate_in_flight_by_priority";
/// The label that names a priority: `priority`.
pub const PRIORITY_LABEL: &str = "priority";
/// Gauge: the rate call starts are paced at, in calls per second.
pub const RATE: &str = "paceline_gate_rate_per_second";
/// Gauge: 1 while a gate-wide backoff holds calls back, else 0.
pub const BACKING_OFF: &str = "paceline_gate_backing_off";
/// Attempts that went out, of a scope [`scope_metrics`](crate::GateBuilder::scope_metrics)
/// lists.
pub const SCOPE_CALLS: &str = "paceline_gate_scope_calls_total";
/// Attempts throttled, of a scope `scope_metrics` lists.
pub const SCOPE_THROTTLES: &str = "paceline_gate_scope_throttles_total";
/// The label of a scope's metrics, beside [`LABEL`].
pub const SCOPE_LABEL: &str = "scope";

#[cfg(feature = "metrics")]
pub(crate) use self::spans::{CallTrace, Trace, ended, enter, went_out};
#[cfg(not(feature = "metrics"))]
pub(crate) use self::without_spans::{CallTrace, Trace, ended, enter, went_out};

/// The spans of calls, with the `metrics` feature.
#[cfg(feature = "metrics")]
mod spans {
    use tokio::time::Instant;
    use tracing::Span;

    /// A call's span, if a subscriber wants it: handed from attempt to attempt.
    ///
    /// Every call carries one, so it is a pointer, null when no subscriber wants the span; and
    /// everything done with a span (open, enter, record, close) is out of line, away from the
    /// calls that have none.
    #[derive(Debug, Default)]
    pub(crate) struct Trace(Option<Box<CallTrace>>);

    /// A call's span, and when the call arrived at the gate.
    #[derive(Debug)]
    pub(crate) struct CallTrace {
        span: Span,
        arrived: Instant,
    }

    impl Trace {
        /// The span of a call through the gate named `gate`, if a subscriber wants it: checked
        /// at the call's arrival, which it notes.
        #[inline]
        pub(crate) fn begin(gate: &str) -> Self {
            if tracing::enabled!(target: "paceline::gate", tracing::Level::DEBUG) {
                Trace(begin_traced(gate))
            } else {
                Trace(None)
            }
        }

        /// The span and the call's arrival, if traced.
        #[inline]
        pub(crate) fn get(&self) -> Option<&CallTrace> {
            self.0.as_deref()
        }
    }

    impl Drop for Trace {
        #[inline]
        fn drop(&mut self) {
            if let Some(trace) = self.0.take() {
                close(trace);
            }
        }
    }

    /// Closes a call's span.
    #[cold]
    #[inline(never)]
    fn close(trace: Box<CallTrace>) {
        drop(trace);
    }

    /// The span of the call traced by `trace` is entered (the call is polled) while this lives.
    pub(crate) struct Entered<'a>(Option<&'a CallTrace>);

    /// Enters the span of the call traced by `trace`, if any, until the guard is dropped.
    #[inline]
    pub(crate) fn enter(trace: Option<&CallTrace>) -> Entered<'_> {
        if let Some(trace) = trace {
            enter_span(trace);
        }
        Entered(trace)
    }

    impl Drop for Entered<'_> {
        #[inline]
        fn drop(&mut self) {
            if let Some(trace) = self.0 {
                exit_span(trace);
            }
        }
    }

    #[cold]
    #[inline(never)]
    fn enter_span(trace: &CallTrace) {
        trace
            .span
            .with_subscriber(|(id, dispatch)| dispatch.enter(id));
    }

    #[cold]
    #[inline(never)]
    fn exit_span(trace: &CallTrace) {
        trace
            .span
            .with_subscriber(|(id, dispatch)| dispatch.exit(id));
    }

    #[cold]
    #[inline(never)]
    fn begin_traced(gate: &str) -> Option<Box<CallTrace>> {
        let span = tracing::debug_span!(
            target: "paceline::gate",
            "call",
            gate,
            wait_ms = tracing::field::Empty,
            attempts = tracing::field::Empty,
        );
        if span.is_disabled() {
            return None;
        }
        Some(Box::new(CallTrace {
            span,
            arrived: Instant::now(),
        }))
    }

    /// Attempt `number` of the call traced by `trace` went out: the first notes how long the
    /// call waited.
    #[inline]
    pub(crate) fn went_out(trace: Option<&CallTrace>, number: u32) {
        if let Some(trace) = trace.filter(|_| number == 1) {
            record_wait(trace);
        }
    }

    #[cold]
    #[inline(never)]
    fn record_wait(trace: &CallTrace) {
        let waited = Instant::now().saturating_duration_since(trace.arrived);
        trace.span.record("wait_ms", waited.as_secs_f64() * 1e3);
    }

    /// The call traced by `trace` ended with its attempt `number`.
    #[inline]
    pub(crate) fn ended(trace: Option<&CallTrace>, number: u32) {
        if let Some(trace) = trace {
            record_attempts(trace, number);
        }
    }

    #[cold]
    #[inline(never)]
    fn record_attempts(trace: &CallTrace, number: u32) {
        trace.span.record("attempts", number);
    }
}

/// Without the `metrics` feature a call has no span, and its attempts carry nothing for one.
#[cfg(not(feature = "metrics"))]
mod without_spans {
    /// No call has a span.
    #[derive(Debug)]
    pub(crate) enum CallTrace {}

    #[derive(Debug, Default)]
    pub(crate) struct Trace;

    impl Trace {
        #[inline(always)]
        pub(crate) fn begin(_gate: &str) -> Self {
            Trace
        }

        #[inline(always)]
        pub(crate) fn get(&self) -> Option<&CallTrace> {
            None
        }
    }

    /// Nothing is entered.
    pub(crate) struct Entered;

    #[inline(always)]
    pub(crate) fn enter(_trace: Option<&CallTrace>) -> Entered {
        Entered
    }

    #[inline(always)]
    pub(crate) fn went_out(_trace: Option<&CallTrace>, _number: u32) {}

    #[inline(always)]
    pub(crate) fn ended(_trace: Option<&CallTrace>, _number: u32) {}
}

/// The gate's name as the builder takes it: `&'static str` or `String`, without a copy.
pub(crate) type Name = Cow<'static, str>;

/// A call's priority, kept with what it holds of the gate for the gauges by priority: with
/// the `metrics` feature only, so that without it a call carries nothing for them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeldPriority(#[cfg(feature = "metrics")] Priority);

impl HeldPriority {
    #[inline(always)]
    pub(crate) fn new(priority: Priority) -> Self {
        #[cfg(not(feature = "metrics"))]
        let _ = priority;
        Self(
            #[cfg(feature = "metrics")]
            priority,
        )
    }

    /// The priority kept (without the `metrics` feature, the default: no gauge reads it).
    #[inline(always)]
    pub(crate) fn get(self) -> Priority {
        #[cfg(feature = "metrics")]
        return self.0;
        #[cfg(not(feature = "metrics"))]
        Priority::Normal
    }
}

#[cfg(feature = "metrics")]
pub(crate) use self::recording::GateMetrics;

/// Without the `metrics` feature every hook is empty, and the gate carries nothing for them.
#[cfg(not(feature = "metrics"))]
#[derive(Debug)]
pub(crate) struct GateMetrics;

#[cfg(not(feature = "metrics"))]
#[allow(clippy::unused_self)]
impl GateMetrics {
    #[inline(always)]
    pub(crate) fn new(_name: &Name, _rate: Option<f64>) -> Self {
        GateMetrics
    }
    #[inline(always)]
    pub(crate) fn started(&self, _priority: Priority) {}
    #[inline(always)]
    pub(crate) fn went_out(&self, _scopes: &[Scope]) {}
    #[inline(always)]
    pub(crate) fn with_store(self, _name: &Name) -> Self {
        self
    }
    #[inline(always)]
    pub(crate) fn with_scope_labels(self, _name: &Name, _label_of: ScopeLabels) -> Self {
        self
    }
    #[inline(always)]
    pub(crate) fn with_bound(self, _name: &Name) -> Self {
        self
    }
    #[inline(always)]
    pub(crate) fn turned_away(&self) {}
    #[inline(always)]
    pub(crate) fn unstarted(&self, _priority: Priority) {}
    #[inline(always)]
    pub(crate) fn held_by_fleet(&self) {}
    #[inline(always)]
    pub(crate) fn store_unanswered(&self) {}
    #[inline(always)]
    pub(crate) fn succeeded(&self, _priority: Priority) {}
    #[inline(always)]
    pub(crate) fn failed(&self, _priority: Priority) {}
    #[inline(always)]
    pub(crate) fn released(&self, _priority: Priority) {}
    #[inline(always)]
    pub(crate) fn throttled(&self, _gave_up: bool, _priority: Priority, _scopes: &[Scope]) {}
    #[inline(always)]
    pub(crate) fn joined(&self, _priority: Priority) {}
    #[inline(always)]
    pub(crate) fn left_line(&self, _priority: Priority) {}
    #[inline(always)]
    pub(crate) fn rate(&self, _rate: impl FnOnce() -> Option<f64>) {}
    #[inline(always)]
    pub(crate) fn backoff_until(&self, _until: impl FnOnce() -> Option<tokio::time::Instant>) {}
}

#[cfg(feature = "metrics")]
mod recording {
    use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

    use metrics::{Counter, Gauge, Unit};
    use tokio::time::Instant;

    use super::{
        BACKING_OFF, CALLS, ERRORS, GAVE_UP, IN_FLIGHT, LABEL, Name, QUEUED, RATE, RETRIES,
        SUCCESSES, THROTTLES,
    };
    use super::{HELD_BY_FLEET, STORE_UNANSWERED, TURNED_AWAY};
    use super::{IN_FLIGHT_BY_PRIORITY, PRIORITY_LABEL, Priority, QUEUED_BY_PRIORITY};
    use super::{SCOPE_CALLS, SCOPE_LABEL, SCOPE_THROTTLES, Scope, ScopeLabels};
    use std::collections::HashMap;

    /// A gate's handles on the recorder installed when it was built.
    #[derive(Debug)]
    pub(crate) struct GateMetrics {
        calls: Counter,
        successes: Counter,
        errors: Counter,
        throttles: Counter,
        retries: Counter,
        gave_up: Counter,
        /// Registered only for a gate with a store (no-op handles otherwise).
        held_by_fleet: Counter,
        store_unanswered: Counter,
        /// Registered only for a gate with a bound on its line (a no-op handle otherwise).
        turned_away: Counter,
        in_flight: Gauge,
        queued: Gauge,
        /// By priority, in the order of [`Priority`]'s variants.
        queued_by_priority: [Gauge; 3],
        in_flight_by_priority: [Gauge; 3],
        rate: Gauge,
        backing_off: Arc<BackingOff>,
        /// The counters of each scope counted apart (calls, throttles), if the user listed
        /// any.
        by_scope: HashMap<Scope, [Counter; 2]>,
    }

    impl GateMetrics {
        /// Registers the metrics of a gate named `name` whose rate starts at `rate`.
        pub(crate) fn new(name: &Name, rate: Option<f64>) -> Self {
            describe();
            let label = [(LABEL, name.clone())];
            let counter = |key: &'static str| metrics::counter!(key, &label);
            let gauge = |key: &'static str| metrics::gauge!(key, &label);
            let by_priority = |key: &'static str| {
                ["interactive", "normal", "bulk"].map(|priority| {
                    let labels = [(LABEL, name.clone()), (PRIORITY_LABEL, priority.into())];
                    metrics::gauge!(key, &labels)
                })
            };
            let metrics = Self {
                calls: counter(CALLS),
                successes: counter(SUCCESSES),
                errors: counter(ERRORS),
                throttles: counter(THROTTLES),
                retries: counter(RETRIES),
                gave_up: counter(GAVE_UP),
                held_by_fleet: Counter::noop(),
                store_unanswered: Counter::noop(),
                turned_away: Counter::noop(),
                in_flight: gauge(IN_FLIGHT),
                queued: gauge(QUEUED),
                queued_by_priority: by_priority(QUEUED_BY_PRIORITY),
                in_flight_by_priority: by_priority(IN_FLIGHT_BY_PRIORITY),
                // A gate without a rate has no rate to show.
                rate: rate.map_or_else(Gauge::noop, |_| gauge(RATE)),
                backing_off: Arc::new(BackingOff {
                    gauge: gauge(BACKING_OFF),
                    until: Mutex::new(None),
                }),
                by_scope: HashMap::new(),
            };
            // A gate's gauges are there from its start, not from its first change.
            metrics.in_flight.set(0.0);
            metrics.queued.set(0.0);
            let by_priority = metrics.queued_by_priority.iter();
            for gauge in by_priority.chain(&metrics.in_flight_by_priority) {
                gauge.set(0.0);
            }
            metrics.backing_off.gauge.set(0.0);
            if let Some(rate) = rate {
                metrics.rate.set(rate);
            }
            metrics
        }

        /// The core let a call of `priority` start: it holds a slot.
        #[inline]
        pub(crate) fn started(&self, priority: Priority) {
            self.in_flight.increment(1.0);
            self.in_flight_by_priority[priority as usize].increment(1.0);
        }

        /// A call of `priority` holds its slot no longer.
        #[inline]
        fn ended(&self, priority: Priority) {
            self.in_flight.decrement(1.0);
            self.in_flight_by_priority[priority as usize].decrement(1.0);
        }

        /// A call's attempt (of `scopes`) went out: the user's future runs.
        #[inline]
        pub(crate) fn went_out(&self, scopes: &[Scope]) {
            self.calls.increment(1);
            if !self.by_scope.is_empty() {
                self.count_scopes(0, scopes);
            }
        }

        /// Counts one of the counter at `which` for each of `scopes` listed.
        #[cold]
        fn count_scopes(&self, which: usize, scopes: &[Scope]) {
            for counters in scopes.iter().filter_map(|scope| self.by_scope.get(scope)) {
                counters[which].increment(1);
            }
        }

        /// The user counts the calls of `scopes` apart: their counters are registered too,
        /// as `new` registered the others.
        pub(crate) fn with_scope_labels(self, name: &Name, scopes: ScopeLabels) -> Self {
            metrics::describe_counter!(
                SCOPE_CALLS,
                Unit::Count,
                "Attempts that went out, of one scope."
            );
            metrics::describe_counter!(
                SCOPE_THROTTLES,
                Unit::Count,
                "Attempts throttled, of one scope."
            );
            let by_scope = scopes
                .into_iter()
                .map(|scope| {
                    let label = Name::Owned(scope.as_str().to_owned());
                    let labels = [(LABEL, name.clone()), (SCOPE_LABEL, label)];
                    let counters =
                        [SCOPE_CALLS, SCOPE_THROTTLES].map(|key| metrics::counter!(key, &labels));
                    (scope, counters)
                })
                .collect();
            Self { by_scope, ..self }
        }

        /// The gate has a store: the counters of its answers are registered too, from the
        /// same recorder, as `new` registered the others.
        pub(crate) fn with_store(self, name: &Name) -> Self {
            describe_store();
            let label = [(LABEL, name.clone())];
            Self {
                held_by_fleet: metrics::counter!(HELD_BY_FLEET, &label),
                store_unanswered: metrics::counter!(STORE_UNANSWERED, &label),
                ..self
            }
        }

        /// The gate has a bound on its line: the counter of calls it turns away is
        /// registered too, as [`with_store`](Self::with_store) registers the store's.
        pub(crate) fn with_bound(self, name: &Name) -> Self {
            metrics::describe_counter!(
                TURNED_AWAY,
                Unit::Count,
                "Calls turned away as they arrived, the gate's line full."
            );
            let label = [(LABEL, name.clone())];
            Self {
                turned_away: metrics::counter!(TURNED_AWAY, &label),
                ..self
            }
        }

        /// A call was turned away as it arrived, the line full.
        pub(crate) fn turned_away(&self) {
            self.turned_away.increment(1);
        }

        /// A started call was turned back by the fleet's store before it went out.
        pub(crate) fn unstarted(&self, priority: Priority) {
            self.ended(priority);
        }

        /// The store held a call start back for a backoff another gate began.
        pub(crate) fn held_by_fleet(&self) {
            self.held_by_fleet.increment(1);
        }

        /// A call start went ahead without the store's answer.
        pub(crate) fn store_unanswered(&self) {
            self.store_unanswered.increment(1);
        }

        #[inline]
        pub(crate) fn succeeded(&self, priority: Priority) {
            self.successes.increment(1);
            self.ended(priority);
        }

        pub(crate) fn failed(&self, priority: Priority) {
            self.errors.increment(1);
            self.ended(priority);
        }

        /// A running call was dropped: its slot is free.
        pub(crate) fn released(&self, priority: Priority) {
            self.ended(priority);
        }

        pub(crate) fn throttled(&self, gave_up: bool, priority: Priority, scopes: &[Scope]) {
            self.throttles.increment(1);
            if !self.by_scope.is_empty() {
                self.count_scopes(1, scopes);
            }
            match gave_up {
                true => self.gave_up.increment(1),
                false => self.retries.increment(1),
            }
            self.ended(priority);
        }

        #[inline]
        pub(crate) fn joined(&self, priority: Priority) {
            self.queued.increment(1.0);
            self.queued_by_priority[priority as usize].increment(1.0);
        }

        #[inline]
        pub(crate) fn left_line(&self, priority: Priority) {
            self.queued.decrement(1.0);
            self.queued_by_priority[priority as usize].decrement(1.0);
        }

        /// The rate may have changed: `rate` reads it. Called under the gate's lock, so
        /// that the gauge takes the changes in the order they were made.
        pub(crate) fn rate(&self, rate: impl FnOnce() -> Option<f64>) {
            if let Some(rate) = rate() {
                self.rate.set(rate);
            }
        }

        /// A gate-wide backoff may have begun or grown: `until` reads when it ends, if one
        /// runs.
        pub(crate) fn backoff_until(&self, until: impl FnOnce() -> Option<Instant>) {
            if let Some(until) = until() {
                self.backing_off.until(until);
            }
        }
    }

    /// The backoff gauge, and the end of the backoff it shows while a task watches for it.
    #[derive(Debug)]
    struct BackingOff {
        gauge: Gauge,
        /// The latest end of the gate-wide backoff, while a task waits for it.
        until: Mutex<Option<Instant>>,
    }

    impl BackingOff {
        fn lock(&self) -> MutexGuard<'_, Option<Instant>> {
            self.until.lock().unwrap_or_else(PoisonError::into_inner)
        }

        /// The gate-wide backoff runs until `end`, or later if a watch already knows so.
        fn until(self: &Arc<Self>, end: Instant) {
            let mut until = self.lock();
            if let Some(known) = &mut *until {
                // The task watching picks the new end up when the old one passes.
                *known = (*known).max(end);
                return;
            }
            // Without a runtime no task can watch for the end: the gauge is left alone
            // rather than set to 1 for good. (A gate waits on tokio's timers, so its calls
            // run on a runtime.)
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                return;
            };
            *until = Some(end);
            self.gauge.set(1.0);
            runtime.spawn(watch(Arc::clone(self)));
        }
    }

    /// Sets the gauge back to 0 when the backoff ends, following it while it grows.
    async fn watch(backing_off: Arc<BackingOff>) {
        loop {
            let Some(end) = *backing_off.lock() else {
                return;
            };
            tokio::time::sleep_until(end).await;
            let mut until = backing_off.lock();
            if *until == Some(end) {
                *until = None;
                backing_off.gauge.set(0.0);
                return;
            }
        }
    }

    /// Says what each metric means, and in which unit, to the recorder the gate registers
    /// with (a thread's own recorder may differ from the global one, so every gate says it).
    fn describe() {
        let counters = [
            (
                CALLS,
                "Attempts started through the gate, retries included.",
            ),
            (SUCCESSES, "Attempts that succeeded."),
            (
                ERRORS,
                "Attempts that failed with an error that is not a throttle.",
            ),
            (THROTTLES, "Attempts the classifier called rate-limited."),
            (RETRIES, "Throttled calls tried again."),
            (GAVE_UP, "Calls given up after the retry limit."),
        ];
        for (name, help) in counters {
            metrics::describe_counter!(name, Unit::Count, help);
        }
        metrics::describe_gauge!(IN_FLIGHT, Unit::Count, "Calls in progress.");
        metrics::describe_gauge!(QUEUED, Unit::Count, "Calls waiting to start.");
        metrics::describe_gauge!(
            QUEUED_BY_PRIORITY,
            Unit::Count,
            "Calls waiting to start, of each priority."
        );
        metrics::describe_gauge!(
            IN_FLIGHT_BY_PRIORITY,
            Unit::Count,
            "Calls in progress, of each priority."
        );
        metrics::describe_gauge!(
            RATE,
            Unit::CountPerSecond,
            "The rate call starts are paced at, in calls per second."
        );
        metrics::describe_gauge!(
            BACKING_OFF,
            "1 while a gate-wide backoff holds calls back, else 0."
        );
    }

    /// Says what the counters of a gate with a store mean, as [`describe`] does the others.
    fn describe_store() {
        metrics::describe_counter!(
            HELD_BY_FLEET,
            Unit::Count,
            "Call starts the store held back for a backoff another gate on its namespace began."
        );
        metrics::describe_counter!(
            STORE_UNANSWERED,
            Unit::Count,
            "Call starts that went ahead on the gate's own state because the store did not \
             answer in time."
        );
    }
}
