//! The `tracing` events a test's code sent: level, target and message, in order.

use std::fmt;
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::subscriber::Interest;
use tracing::{Event, Level, Metadata, Subscriber, span};

/// One event as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    pub level: Level,
    pub target: String,
    pub message: String,
}

/// The events sent on this thread while the returned guard lives; spans are wanted too.
pub fn record() -> (Events, tracing::subscriber::DefaultGuard) {
    record_up_to(Level::TRACE)
}

/// The events at `level` or above sent on this thread while the returned guard lives; no
/// span or event below it is wanted.
pub fn record_up_to(level: Level) -> (Events, tracing::subscriber::DefaultGuard) {
    let events = Events {
        sent: Arc::default(),
        level,
    };
    let guard = tracing::subscriber::set_default(events.clone());
    (events, guard)
}

#[derive(Debug, Clone)]
pub struct Events {
    sent: Arc<Mutex<Vec<Sent>>>,
    level: Level,
}

impl Events {
    /// The messages sent at `level` to `target`.
    pub fn messages(&self, level: Level, target: &str) -> Vec<String> {
        let sent = self.sent.lock().unwrap();
        sent.iter()
            .filter(|e| e.level == level && e.target == target)
            .map(|e| e.message.clone())
            .collect()
    }
}

struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl Subscriber for Events {
    // Asked at each callsite every time, since other tests of the process record at other
    // levels (or not at all) on their own threads.
    fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
        Interest::sometimes()
    }
    fn enabled(&self, meta: &Metadata<'_>) -> bool {
        *meta.level() <= self.level
    }
    fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
        span::Id::from_u64(1)
    }
    fn record(&self, _: &span::Id, _: &span::Record<'_>) {}
    fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut message = Message(String::new());
        event.record(&mut message);
        let meta = event.metadata();
        self.sent.lock().unwrap().push(Sent {
            level: *meta.level(),
            target: meta.target().to_owned(),
            message: message.0,
        });
    }
    fn enter(&self, _: &span::Id) {}
    fn exit(&self, _: &span::Id) {}
}
