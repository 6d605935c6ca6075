#![cfg(feature = "tonic")]
//! The `tracing` debug event that tells why the gRPC classifier did not wait what a server's
//! pushback seemed to ask: one for each pushback it cannot use, none for one it can.
//!
//! One test in its own process: `tracing` caches, for the whole process, which callsites a
//! subscriber wants, and tests that ran beside it on other threads (with no subscriber)
//! could have that cache computed without this test's subscriber.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use paceline::tonic::{PUSHBACK_KEY, rate_limited};
use tonic::Status;
use tonic::metadata::AsciiMetadataValue;
use tracing_subscriber::layer::SubscriberExt;

/// Every event of target `paceline::tonic`: its level and its message.
#[derive(Clone, Default)]
struct Events(Arc<Mutex<Vec<(tracing::Level, String)>>>);

impl Events {
    fn take(&self) -> Vec<(tracing::Level, String)> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// The `message` field of an event.
#[derive(Default)]
struct Message(String);

impl tracing::field::Visit for Message {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Events {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if event.metadata().target() != "paceline::tonic" {
            return;
        }
        let mut message = Message::default();
        event.record(&mut message);
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((*event.metadata().level(), message.0));
    }
}

fn exhausted(values: &[&str]) -> Status {
    let mut status = Status::resource_exhausted("quota");
    for value in values {
        let value = AsciiMetadataValue::try_from(*value).expect("a valid metadata value");
        status.metadata_mut().append(PUSHBACK_KEY, value);
    }
    status
}

#[test]
fn each_pushback_the_classifier_cannot_use_is_told_at_debug_level() {
    let events = Events::default();
    let _default =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(events.clone()));
    let told = |values: &[&str]| {
        rate_limited(&exhausted(values));
        events.take()
    };
    for usable in [&[][..], &["0"], &["1500"], &["86400000"]] {
        assert_eq!(told(usable), [], "{usable:?}");
    }
    for (values, why) in [
        (&["-1"][..], "negative"),
        (&["soon"], "not a 32-bit count"),
        (&["2147483648"], "not a 32-bit count"),
        (&["5", "5"], "more than once"),
        (&["86400001"], "longer than a day"),
    ] {
        let told = told(values);
        assert_eq!(told.len(), 1, "{values:?}: {told:?}");
        assert_eq!(told[0].0, tracing::Level::DEBUG, "{values:?}");
        assert!(told[0].1.contains(why), "{values:?}: {told:?}");
    }
}
