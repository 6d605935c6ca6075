//! A throttle's rate, and the handle that changes it while the stream runs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Waker;
use std::time::Duration;

use futures_util::task::AtomicWaker;

/// `n` emissions per `per`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rate {
    pub(crate) n: usize,
    pub(crate) per: Duration,
}

impl Rate {
    #[track_caller]
    pub(crate) fn new(n: usize, per: Duration) -> Self {
        assert!(n > 0, "`n` must be at least 1 (got 0)");
        Self { n, per }
    }
}

/// Changes the rate of a running [`TimerThrottle`](crate::TimerThrottle) or
/// [`WindowThrottle`](crate::WindowThrottle).
///
/// Cheap to clone; any clone may be moved to another task or thread. A new rate never breaks
/// what the throttle already promised:
/// - a timer throttle keeps the running period (its length and its vouchers) and uses the new
///   rate from its next period on;
/// - a window throttle checks its next emission against the new rate *and the emissions it
///   already made*, so lowering the rate never lets a burst through, and raising it lets a
///   waiting item go as soon as the new rate allows (a throttle waiting for room is woken).
///   It keeps only its last `n` emissions; a new rate that looks further back counts the
///   forgotten ones as if they were as recent as the newest of them: never early, at worst
///   a little late.
///
/// If the throttle has been dropped, setting a rate does nothing.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use futures::StreamExt;
/// use paceline::prelude::*;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let mut calls = futures::stream::iter(0..6).window_throttle(3, Duration::from_secs(1));
/// let handle = calls.rate_handle();
/// let start = tokio::time::Instant::now();
/// let mut seen = Vec::new();
/// while let Some(i) = calls.next().await {
///     if i == 2 {
///         // The server said "slow down": 1 call per second from now on.
///         handle.set_rate(1, Duration::from_secs(1));
///     }
///     seen.push(start.elapsed().as_secs());
/// }
/// assert_eq!(seen, [0, 0, 0, 1, 2, 3]);
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct RateHandle {
    shared: Arc<SharedRate>,
}

#[derive(Debug)]
struct SharedRate {
    /// Bumped on every change, so that a throttle checks for one with a single atomic load.
    version: AtomicU64,
    rate: Mutex<Rate>,
    /// The throttle waiting for room, so that a new rate can let it go sooner.
    waiting: AtomicWaker,
}

impl RateHandle {
    /// Sets the rate to `n` emissions per `per`.
    ///
    /// # Panics
    ///
    /// Panics if `n` is zero.
    #[track_caller]
    pub fn set_rate(&self, n: usize, per: Duration) {
        let rate = Rate::new(n, per);
        *self
            .shared
            .rate
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = rate;
        self.shared.version.fetch_add(1, Ordering::Release);
        self.shared.waiting.wake();
    }

    /// The rate most recently set: `(n, per)`.
    pub fn rate(&self) -> (usize, Duration) {
        let rate = *self
            .shared
            .rate
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        (rate.n, rate.per)
    }
}

/// The rate a throttle goes by, with the shared cell behind its handles made only once a
/// handle is asked for.
#[derive(Debug)]
pub(crate) struct RateSource {
    rate: Rate,
    shared: Option<(Arc<SharedRate>, u64)>,
}

impl RateSource {
    pub(crate) fn new(rate: Rate) -> Self {
        Self { rate, shared: None }
    }

    /// The rate in force now, taking in any change made through a handle.
    pub(crate) fn current(&mut self) -> Rate {
        if let Some((shared, seen)) = &mut self.shared {
            let version = shared.version.load(Ordering::Acquire);
            if version != *seen {
                *seen = version;
                self.rate = *shared.rate.lock().unwrap_or_else(PoisonError::into_inner);
            }
        }
        self.rate
    }

    /// Asks to be woken when a handle sets a new rate (only if a handle exists).
    pub(crate) fn wake_on_change(&self, waker: &Waker) {
        if let Some((shared, _)) = &self.shared {
            shared.waiting.register(waker);
        }
    }

    pub(crate) fn handle(&mut self) -> RateHandle {
        let rate = self.current();
        let (shared, _) = self.shared.get_or_insert_with(|| {
            let shared = SharedRate {
                version: AtomicU64::new(0),
                rate: Mutex::new(rate),
                waiting: AtomicWaker::new(),
            };
            (Arc::new(shared), 0)
        });
        RateHandle {
            shared: Arc::clone(shared),
        }
    }
}
