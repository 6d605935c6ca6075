//! The clock the benches time passes with: this thread's CPU time where the OS offers one.
//!
//! Everything a pass does runs on the calling thread (a current-thread runtime, no I/O), so
//! its CPU time is its whole cost; unlike wall time it leaves out the stretches when other
//! processes had the core, which on a busy two-core machine otherwise swamp the few
//! nanoseconds being compared. Elsewhere it falls back to wall time: noisier on a busy
//! machine, but the same for both sides of a comparison.

use std::time::Duration;

#[cfg(unix)]
pub(crate) fn now() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, exclusively borrowed `timespec` for the call to fill in.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

#[cfg(not(unix))]
pub(crate) fn now() -> Duration {
    use std::sync::OnceLock;
    use std::time::Instant;

    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed()
}
