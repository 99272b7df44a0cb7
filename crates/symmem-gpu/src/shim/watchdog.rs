//! A bound on the SHMEM library's own collectives (init, malloc, free, barrier, finalize).
//!
//! A C call cannot be cancelled, and one that waits for a peer the library cannot reach (a
//! bootstrap network that does not cross hosts, a heap folder on another host) waits forever.
//! symmem's control plane has every rank agree on a collective before the library's runs, so
//! a library collective that does not return is this rank's library stuck, not a peer that
//! never came: after the collective timeout the watchdog names the call and ends the process
//! with status 1, so that the launcher reports it instead of a job that prints nothing.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use symmem::ProviderKind;
use symmem::settings::COLLECTIVE_TIMEOUT;

/// The exit status of a rank whose library call did not return.
pub(crate) const EXIT_STUCK: i32 = 1;

#[derive(Default)]
struct Watch {
    /// The call under way and when it must have returned.
    armed: Option<(&'static str, Instant)>,
    stop: bool,
}

type Shared = Arc<(Mutex<Watch>, Condvar)>;

/// One thread per library that watches the call under way (see the module docs).
pub(crate) struct Watchdog {
    timeout: Duration,
    shared: Shared,
    thread: Option<JoinHandle<()>>,
}

impl Watchdog {
    /// Watches calls of `backend`'s library for `timeout` each. The thread starts at once; it
    /// touches nothing but its own state until a call overruns.
    pub(crate) fn start(backend: ProviderKind, timeout: Duration) -> Self {
        let shared: Shared = Arc::default();
        let watched = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("symmem-watchdog".into())
            .spawn(move || watch(&watched, backend, timeout))
            .ok();
        if thread.is_none() {
            tracing::warn!("no watchdog thread: a library call that hangs will not be ended");
        }
        Self {
            timeout,
            shared,
            thread,
        }
    }

    /// Runs `f`, the library's `call`; the process ends (naming `call`) if it does not return
    /// within the timeout.
    pub(crate) fn guard<T>(&self, call: &'static str, f: impl FnOnce() -> T) -> T {
        let deadline = Instant::now().checked_add(self.timeout);
        if let Some(deadline) = deadline {
            lock(&self.shared).armed = Some((call, deadline));
            self.shared.1.notify_one();
        }
        let out = f();
        lock(&self.shared).armed = None;
        out
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        lock(&self.shared).stop = true;
        self.shared.1.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn lock(shared: &Shared) -> MutexGuard<'_, Watch> {
    shared.0.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The watchdog thread: sleeps until the armed call's deadline, and ends the process if the
/// call is still the one under way then.
fn watch(shared: &Shared, backend: ProviderKind, timeout: Duration) {
    let mut watch = lock(shared);
    loop {
        if watch.stop {
            return;
        }
        watch = match watch.armed {
            None => shared.1.wait(watch).unwrap_or_else(PoisonError::into_inner),
            Some((call, deadline)) => {
                let now = Instant::now();
                if now >= deadline {
                    stuck(backend, call, timeout);
                }
                shared
                    .1
                    .wait_timeout(watch, deadline - now)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0
            }
        };
    }
}

/// Says which call hung and ends the process at once: the library's own exit handlers may
/// wait on the very call that hangs.
fn stuck(backend: ProviderKind, call: &str, timeout: Duration) -> ! {
    eprintln!(
        "symmem: {backend} {call} did not return within {} ({}): the library cannot reach \
         every rank (across hosts: check its bootstrap network interface and that each host \
         can reach rank 0's), or it is stuck; this rank stops with status {EXIT_STUCK}",
        symmem::format_duration(timeout),
        COLLECTIVE_TIMEOUT.name,
    );
    // SAFETY: `_exit` ends the process without running exit handlers; it takes no pointers.
    // Output written by Rust's `eprintln!` is unbuffered, and result lines are flushed as
    // written.
    unsafe { libc::_exit(EXIT_STUCK) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    const CHILD: &str = "WATCHDOG_TEST_CHILD";

    #[test]
    fn calls_that_return_in_time_pass_through() {
        let dog = Watchdog::start(ProviderKind::Nvshmem, Duration::from_secs(30));
        for i in 0..3 {
            assert_eq!(dog.guard("barrier_all", || i), i);
        }
    }

    /// Run by [`a_call_that_hangs_ends_the_process_naming_it`] in a child process.
    #[test]
    #[ignore = "the child process of a_call_that_hangs_ends_the_process_naming_it"]
    fn hanging_call() {
        if std::env::var_os(CHILD).is_none() {
            eprintln!("SKIPPED: {CHILD} unset; a_call_that_hangs_... runs this as its child");
            return;
        }
        let dog = Watchdog::start(ProviderKind::Nvshmem, Duration::from_millis(200));
        dog.guard("init", || std::thread::sleep(Duration::from_secs(60)));
        unreachable!("the watchdog ends the process first");
    }

    #[test]
    fn a_call_that_hangs_ends_the_process_naming_it() {
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "shim::watchdog::tests::hanging_call",
                "--ignored",
            ])
            .args(["--nocapture", "--test-threads", "1"])
            .env(CHILD, "1")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(EXIT_STUCK), "{stderr}");
        assert!(
            stderr.contains("nvshmem init did not return within 200ms")
                && stderr.contains(COLLECTIVE_TIMEOUT.name),
            "{stderr}"
        );
    }
}
