//! Which call of a gate the code running now answers for: set while a call's future is
//! polled, so that what a response announces ([`Gate::observe_all`](crate::Gate::observe_all))
//! is dated by when the call that carried it started. A server counted the calls started
//! before that one in what it announced, and none started after.

use std::cell::Cell;

use tokio::time::Instant;

thread_local! {
    /// The gate (by its shared state's address) and the start of the call being polled.
    static ANSWERING: Cell<Option<(usize, Instant)>> = const { Cell::new(None) };
}

/// Runs `poll` (a call's future of the gate at `gate`, started at `sent`) as the call that
/// answers for `gate`; what was set before is set again after, for a call polled inside
/// another's.
#[inline]
pub(crate) fn polling<R>(gate: usize, sent: Option<Instant>, poll: impl FnOnce() -> R) -> R {
    let Some(sent) = sent else { return poll() };
    let outer = ANSWERING.with(|cell| cell.replace(Some((gate, sent))));
    // Set back even if `poll` panics, so that a caught panic leaves no stale answer.
    let _restore = Restore(outer);
    poll()
}

/// When the call of the gate at `gate` whose future is being polled started, if one is.
pub(crate) fn answering(gate: usize) -> Option<Instant> {
    ANSWERING
        .with(Cell::get)
        .and_then(|(of, sent)| (of == gate).then_some(sent))
}

struct Restore(Option<(usize, Instant)>);

impl Drop for Restore {
    fn drop(&mut self) {
        ANSWERING.with(|cell| cell.set(self.0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_answers_for_its_own_gate_and_an_inner_one_for_its_own_while_polled() {
        let t0 = Instant::now();
        let t1 = t0 + std::time::Duration::from_secs(1);
        assert_eq!(answering(1), None);
        polling(1, Some(t0), || {
            assert_eq!(answering(1), Some(t0));
            assert_eq!(answering(2), None, "another gate's");
            polling(2, Some(t1), || assert_eq!(answering(2), Some(t1)));
            assert_eq!(answering(1), Some(t0), "set back after the inner call");
            polling(1, None, || {
                assert_eq!(answering(1), Some(t0), "untimed: unchanged")
            });
        });
        assert_eq!(answering(1), None);
        let caught = std::panic::catch_unwind(|| polling(1, Some(t0), || panic!("the user's")));
        assert!(caught.is_err());
        assert_eq!(answering(1), None, "set back after a panic");
    }
}
