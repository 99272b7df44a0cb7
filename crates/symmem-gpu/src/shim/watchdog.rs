//! A bound on the SHMEM library's own collectives (init, malloc, free, barrier, finalize).
//!
//! A C call cannot be cancelled, and one that waits for a peer the library cannot reach (a
//! bootstrap network that does not cross hosts, a heap folder on another host) waits forever.
//! symmem's control plane has every rank agree on a collective before the library's runs, so
//! a library collective that does not return is this rank's library stuck, not a peer that
//! never came: after the collective timeout the watchdog names the call and ends the process
//! with status 1, so that the launcher reports it instead of a job that prints nothing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use symmem::ProviderKind;
use symmem::settings::COLLECTIVE_TIMEOUT;

/// The exit status of a rank whose library call did not return.
pub(crate) const EXIT_STUCK: i32 = 1;

/// What the calling thread and the watchdog share. Arming costs the call two atomic stores and
/// one uncontended lock: the watchdog is never woken per call (a futex wake-up per allocation
/// would cost microseconds on a path that takes about 24 us on an H200); it looks every
/// [`tick`] instead.
struct Shared {
    /// Start of the clock `armed_at` counts on.
    epoch: Instant,
    /// When the call under way began, in nanoseconds since `epoch` plus one; 0 when none is.
    armed_at: AtomicU64,
    /// The name of the last call armed (read only when one overruns).
    call: Mutex<&'static str>,
    /// Set when the watchdog drops; the thread waits on it between looks.
    stop: Mutex<bool>,
    wake: Condvar,
}

impl Shared {
    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX - 1)
    }
}

/// One thread per library that watches the call under way (see the module docs).
pub(crate) struct Watchdog {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// How often the watchdog looks at the call under way: a quarter of the timeout, between 1 ms
/// and 1 s, so that a stuck call ends at most a quarter late.
fn tick(timeout: Duration) -> Duration {
    (timeout / 4).clamp(Duration::from_millis(1), Duration::from_secs(1))
}

impl Watchdog {
    /// Watches calls of `backend`'s library for `timeout` each. The thread starts at once; it
    /// touches nothing but its own state until a call overruns.
    pub(crate) fn start(backend: ProviderKind, timeout: Duration) -> Self {
        let shared = Arc::new(Shared {
            epoch: Instant::now(),
            armed_at: AtomicU64::new(0),
            call: Mutex::new(""),
            stop: Mutex::new(false),
            wake: Condvar::new(),
        });
        let watched = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("symmem-watchdog".into())
            .spawn(move || watch(&watched, backend, timeout))
            .ok();
        if thread.is_none() {
            tracing::warn!("no watchdog thread: a library call that hangs will not be ended");
        }
        Self { shared, thread }
    }

    /// Runs `f`, the library's `call`; the process ends (naming `call`) if it does not return
    /// within the timeout.
    pub(crate) fn guard<T>(&self, call: &'static str, f: impl FnOnce() -> T) -> T {
        *lock(&self.shared.call) = call;
        let began = self.shared.now() + 1;
        self.shared.armed_at.store(began, Ordering::Release);
        let out = f();
        self.shared.armed_at.store(0, Ordering::Release);
        out
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        *lock(&self.shared.stop) = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The watchdog thread: every [`tick`], ends the process if the call under way began more
/// than `timeout` ago.
fn watch(shared: &Shared, backend: ProviderKind, timeout: Duration) {
    let limit = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
    let mut stop = lock(&shared.stop);
    loop {
        if *stop {
            return;
        }
        let armed_at = shared.armed_at.load(Ordering::Acquire);
        if armed_at != 0 && shared.now().saturating_sub(armed_at - 1) >= limit {
            let call = *lock(&shared.call);
            stuck(backend, call, timeout);
        }
        stop = shared
            .wake
            .wait_timeout(stop, tick(timeout))
            .unwrap_or_else(PoisonError::into_inner)
            .0;
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
    fn the_watchdog_looks_a_quarter_timeout_apart_within_bounds() {
        assert_eq!(tick(Duration::from_secs(60)), Duration::from_secs(1));
        assert_eq!(tick(Duration::from_millis(200)), Duration::from_millis(50));
        assert_eq!(tick(Duration::from_micros(100)), Duration::from_millis(1));
    }

    #[test]
    fn calls_that_return_in_time_pass_through() {
        let dog = Watchdog::start(ProviderKind::Nvshmem, Duration::from_secs(30));
        for i in 0..3 {
            assert_eq!(dog.guard("barrier_all", || i), i);
        }
    }

    /// Each call has its own deadline: calls that together take longer than the timeout, each
    /// well within it, pass (a watchdog that kept the first call's start would end this test).
    #[test]
    fn each_call_gets_the_whole_timeout() {
        let dog = Watchdog::start(ProviderKind::Nvshmem, Duration::from_millis(600));
        for _ in 0..4 {
            dog.guard("malloc", || std::thread::sleep(Duration::from_millis(200)));
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
