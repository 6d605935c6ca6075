//! Which call of a gate the code running now answers for: set while a call's future is
//! polled, so that what a response announces ([`Gate::observe_all`](crate::Gate::observe_all))
//! is dated by when the call that carried it started, and read under the call's first scope
//! ([`paceline::reqwest::send`](crate::reqwest::send) inside a `call_in`). A server counted
//! the calls started before that one in what it announced, and none started after.
//!
//! What the fleet's store is told while a call's future is polled (an announcement) is
//! handed back to the call, which ends only once the store has heard it: a process that
//! stops as its last call returns leaves the fleet what that call learnt.

use std::cell::Cell;
use std::num::NonZeroU64;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::classify::Scope;

/// When a call started, and where its fleet's store put that start (in microseconds of the
/// store's clock), if it did.
pub(crate) type Started = (Instant, Option<NonZeroU64>);
type Answering = (usize, Started, Option<Scope>);

thread_local! {
    /// The gate (by its shared state's address), the start of the call being polled, its scope.
    static ANSWERING: Cell<Option<Answering>> = const { Cell::new(None) };
    /// What the call being polled told the fleet's store, still on its way there.
    static TOLD: Cell<Vec<JoinHandle<()>>> = const { Cell::new(Vec::new()) };
}

/// Runs `poll` (a call's future of the gate at `gate`, started at `sent`, of `scope`) as the
/// call that answers for `gate`; what was set before is set again after, for a call polled
/// inside another's. Returns what `poll` returned, and, for a gate with a store (`fleet`), what it
/// told the store ([`told`]) that may still be on its way there. (A gate without one tells
/// nothing, and lets what an outer call told stand.)
#[inline]
pub(crate) fn polling<R>(
    (gate, fleet): (usize, bool),
    (sent, scope): (Option<Started>, Option<&Scope>),
    poll: impl FnOnce() -> R,
) -> (R, Vec<JoinHandle<()>>) {
    let Some(sent) = sent else {
        return (poll(), Vec::new());
    };
    let outer = ANSWERING.with(|cell| cell.replace(Some((gate, sent, scope.cloned()))));
    if !fleet {
        let _restore = Restore(outer, None);
        return (poll(), Vec::new());
    }
    let outer_told = TOLD.with(Cell::take);
    // Set back even if `poll` panics, so that a caught panic leaves no stale answer.
    let _restore = Restore(outer, Some(Cell::new(outer_told)));
    let polled = poll();
    (polled, TOLD.with(Cell::take))
}

/// When the call of the gate at `gate` being polled started, if one is, and its first scope.
pub(crate) fn answering(gate: usize) -> Option<(Started, Option<Scope>)> {
    let answering = ANSWERING.with(Cell::take);
    let of = (answering.as_ref()).filter(|(of, ..)| *of == gate);
    let of = of.map(|(_, sent, scope)| (*sent, scope.clone()));
    ANSWERING.with(|cell| cell.set(answering));
    of
}

/// The gate at `gate` told its fleet's store something, on its way there as `telling`: if a
/// call of that gate is being polled, it ends only once the store has heard. Outside a call,
/// the telling goes on by itself.
pub(crate) fn told(gate: usize, telling: JoinHandle<()>) {
    if answering(gate).is_some() {
        TOLD.with(|cell| {
            let mut told = cell.take();
            told.push(telling);
            cell.set(told);
        });
    }
}

/// What a call polled inside another set back: the outer call's answering, and what it had
/// told its store, if the inner call took that aside.
struct Restore(Option<Answering>, Option<Cell<Vec<JoinHandle<()>>>>);

impl Drop for Restore {
    fn drop(&mut self) {
        ANSWERING.with(|cell| cell.set(self.0.take()));
        if let Some(told) = &self.1 {
            TOLD.with(|cell| cell.set(told.take()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn what_a_call_tells_its_store_waits_in_that_call_and_no_other() {
        let t0 = (Instant::now(), None);
        let telling = || tokio::spawn(async {});
        // Outside any call, the telling goes on by itself.
        told(1, telling());
        let ((), outer) = polling((1, true), (Some(t0), None), || {
            told(1, telling());
            let ((), inner) = polling((2, true), (Some(t0), None), || {
                told(2, telling());
                told(1, telling());
            });
            assert_eq!(inner.len(), 1, "the inner call's own only");
            // A gate without a store tells nothing, and leaves the outer call's tellings be.
            let ((), storeless) = polling((3, false), (Some(t0), None), || told(1, telling()));
            assert!(storeless.is_empty());
            told(1, telling());
        });
        assert_eq!(outer.len(), 2, "told before and after the inner calls");
        let ((), untimed) = polling((1, true), (None, None), || told(1, telling()));
        assert!(untimed.is_empty());
        let caught = std::panic::catch_unwind(|| {
            polling((1, true), (Some(t0), None), || {
                told(1, telling());
                panic!("the user's")
            })
        });
        assert!(caught.is_err());
        let ((), after) = polling((1, true), (Some(t0), None), || {});
        assert!(
            after.is_empty(),
            "nothing left over from the call that panicked"
        );
    }

    #[test]
    fn a_call_answers_for_its_own_gate_and_an_inner_one_for_its_own_while_polled() {
        let now = Instant::now();
        let t0 = (now, None);
        // The inner call's start was put by its fleet's store.
        let t1 = (now + std::time::Duration::from_secs(1), NonZeroU64::new(7));
        assert_eq!(answering(1), None);
        polling((1, false), (Some(t0), None), || {
            assert_eq!(answering(1), Some((t0, None)));
            assert_eq!(answering(2), None, "another gate's");
            let account = Scope::from("acct-1");
            polling((2, true), (Some(t1), Some(&account)), || {
                assert_eq!(answering(2), Some((t1, Some(account.clone()))))
            });
            assert_eq!(
                answering(1),
                Some((t0, None)),
                "set back after the inner call"
            );
            polling((1, false), (None, None), || {
                assert_eq!(answering(1), Some((t0, None)), "untimed: unchanged")
            });
        });
        assert_eq!(answering(1), None);
        let caught = std::panic::catch_unwind(|| {
            polling((1, false), (Some(t0), None), || panic!("the user's"))
        });
        assert!(caught.is_err());
        assert_eq!(answering(1), None, "set back after a panic");
    }
}
