//! Step marks for the profiler (`benches/profile_steps.py --trace`): where one call spends its
//! time on either side of the hand-over to the session thread. Off unless `_native._trace(True)`
//! turned it on (a mark is then one relaxed load); each mark is a name and the `CLOCK_MONOTONIC`
//! time in ns, the clock of Python's `time.perf_counter_ns()` on Linux, so the profiler can put
//! its own clock reads among them.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

static ON: AtomicBool = AtomicBool::new(false);
/// At most this many marks are kept until taken (a profiler that stops taking them loses the
/// newest, never grows the process).
const KEEP: usize = 4096;
static MARKS: Mutex<Vec<(&'static str, u64)>> = Mutex::new(Vec::new());

/// `CLOCK_MONOTONIC` in ns.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write; CLOCK_MONOTONIC is always present on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Records `step` now, when tracing is on.
pub fn mark(step: &'static str) {
    if ON.load(Ordering::Relaxed) {
        let at = now_ns();
        let mut marks = MARKS.lock().unwrap_or_else(|e| e.into_inner());
        if marks.len() < KEEP {
            marks.push((step, at));
        }
    }
}

/// Turns tracing on or off; either way the marks kept so far are dropped.
pub fn set(on: bool) {
    ON.store(on, Ordering::Relaxed);
    MARKS.lock().unwrap_or_else(|e| e.into_inner()).clear();
}

/// The marks since the last call, oldest first.
pub fn take() -> Vec<(&'static str, u64)> {
    std::mem::take(&mut *MARKS.lock().unwrap_or_else(|e| e.into_inner()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_are_kept_only_while_on_and_in_order() {
        // Other tests of this crate may mark meanwhile: only this test's names are looked at.
        let mine = |marks: Vec<(&'static str, u64)>| -> Vec<(&'static str, u64)> {
            marks
                .into_iter()
                .filter(|m| m.0.starts_with("trace-test"))
                .collect()
        };
        set(false);
        mark("trace-test off");
        assert!(mine(take()).is_empty());
        set(true);
        mark("trace-test a");
        mark("trace-test b");
        let marks = mine(take());
        set(false);
        let names: Vec<_> = marks.iter().map(|m| m.0).collect();
        assert_eq!(names, ["trace-test a", "trace-test b"]);
        assert!(marks[0].1 <= marks[1].1);
        assert!(mine(take()).is_empty());
    }
}
