//! How a bench's bars are judged, and what a bar that fails does: the process exits non-zero,
//! after the whole summary is printed, so that a regression cannot pass as a line of output.
//!
//! A bar is judged on a figure measured in this one process (for the timing bars, the median
//! of rounds in which both sides ran back to back: see README.md, "How a bar is judged"). A
//! run that measured nothing a bar needs (a filtered run, `--test`, `--profile-time`) judges
//! nothing and exits 0.

use std::sync::Mutex;

/// The bars that failed in this run, by what they measured.
static FAILED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Judges one bar: `PASS` if `held`, else `FAIL`, and the failure is kept for [`exit`].
pub(crate) fn judge(what: &str, held: bool) -> &'static str {
    if held {
        return "PASS";
    }
    FAILED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(what.to_owned());
    "FAIL"
}

/// Ends the bench: exits with status 1, naming them, if any bar failed.
pub(crate) fn exit() {
    let failed = FAILED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if failed.is_empty() {
        return;
    }
    eprintln!();
    eprintln!("{} bar(s) not met:", failed.len());
    for what in failed.iter() {
        eprintln!("  FAIL {what}");
    }
    std::process::exit(1);
}
