//! SIGINT/SIGTERM/SIGHUP handling: while a run is in progress they only stop
//! the run; outside runs the process gets back the action these signals had
//! before the first run. A signal the process inherited as ignored (`nohup`
//! ignores SIGHUP, a shell starts background jobs with SIGINT ignored) is
//! never touched: it stays ignored during runs too, and the ranks and any
//! later child inherit the ignore, as with any other program.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use signal_hook::SigId;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

use crate::error::LaunchError;

/// The signals that stop a run.
const SIGNALS: [i32; 3] = [SIGINT, SIGTERM, SIGHUP];

/// True while no run is in progress: then the default-action emulations
/// registered by [`SignalGuard::install`] terminate the process, as the
/// default action of these signals would.
static IDLE: AtomicBool = AtomicBool::new(true);

/// Runs in progress, and which signals have our handler.
static STATE: Mutex<State> = Mutex::new(State {
    active: 0,
    handled: [false; SIGNALS.len()],
});

struct State {
    active: usize,
    /// Per signal of [`SIGNALS`]: whether signal-hook's handler is installed
    /// (it stays for the life of the process once it is).
    handled: [bool; SIGNALS.len()],
}

/// A signal's action as the process had it before anything of ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Disposition {
    Default,
    Ignored,
    /// A handler of the application: signal-hook chains to it.
    Handler,
}

/// The current action of `signal`. Only meaningful for a signal that does not
/// have our handler yet: signal-hook installs one OS handler per signal and
/// never removes it.
fn disposition(signal: i32) -> Disposition {
    // SAFETY: a zeroed sigaction is a valid out-parameter, and sigaction with
    // a null new action only reads the current disposition.
    let current = unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(signal, std::ptr::null(), &mut old) != 0 {
            // Cannot happen for these signals; assume the usual default.
            return Disposition::Default;
        }
        old
    };
    match current.sa_sigaction {
        libc::SIG_DFL => Disposition::Default,
        libc::SIG_IGN => Disposition::Ignored,
        _ => Disposition::Handler,
    }
}

/// The launcher's own actions of one run: they record the first signal
/// received and count them all.
struct Caught {
    first: AtomicUsize,
    count: AtomicUsize,
}

/// While alive, the launcher's SIGINT, SIGTERM and SIGHUP only record the
/// signal (the run then stops its ranks and returns); dropping it unregisters
/// the actions, and once no run is in progress any more, a signal whose
/// action was the default one gets it back (emulated: see [`disposition`]).
/// Signals the process ignores are left alone.
pub(crate) struct SignalGuard {
    ids: Vec<SigId>,
    /// Whether this guard counts in `State::active` (install succeeded).
    counted: bool,
    caught: Arc<Caught>,
}

impl SignalGuard {
    pub(crate) fn install() -> Result<Self, LaunchError> {
        let mut state = STATE.lock().unwrap_or_else(PoisonError::into_inner);
        let mut guard = SignalGuard {
            ids: Vec::new(),
            counted: false,
            caught: Arc::new(Caught {
                first: AtomicUsize::new(0),
                count: AtomicUsize::new(0),
            }),
        };
        for (index, signal) in SIGNALS.into_iter().enumerate() {
            // Looked at before our first registration, which replaces it.
            let first = (!state.handled[index]).then(|| disposition(signal));
            // Inherited as ignored (nohup, a background job): the user asked
            // for this signal not to stop anything.
            if first == Some(Disposition::Ignored) {
                continue;
            }
            let caught = Arc::clone(&guard.caught);
            let value = usize::try_from(signal).unwrap_or(usize::MAX);
            let action = move || {
                let _ = caught
                    .first
                    .compare_exchange(0, value, Ordering::SeqCst, Ordering::SeqCst);
                caught.count.fetch_add(1, Ordering::SeqCst);
            };
            // SAFETY: the action only performs atomic operations on memory
            // kept alive by its own `Arc`, which is async-signal-safe; it
            // neither allocates nor locks. The `Arc` is dropped with the
            // action, outside the signal handler, when it is unregistered.
            match unsafe { signal_hook::low_level::register(signal, action) } {
                Ok(id) => {
                    guard.ids.push(id);
                    state.handled[index] = true;
                    if first == Some(Disposition::Default) {
                        // Registered once for the life of the process; it
                        // acts only while `IDLE` is true (still now: until
                        // the run is set up, the default action stands).
                        // Failing leaves the signal ignored between runs,
                        // which is no reason to refuse this run.
                        let _ = signal_hook::flag::register_conditional_default(signal, &IDLE);
                    }
                }
                Err(err) => {
                    // Unlocked first: dropping `guard` then unregisters what
                    // was registered, and its `Drop` takes the lock.
                    drop(state);
                    return Err(LaunchError::Signals(err));
                }
            }
        }
        // Only now: a signal arriving before our actions were registered
        // still had its default action.
        IDLE.store(false, Ordering::SeqCst);
        state.active += 1;
        guard.counted = true;
        Ok(guard)
    }

    /// The first signal received since `install`, if any.
    pub(crate) fn caught(&self) -> Option<i32> {
        match self.caught.first.load(Ordering::SeqCst) {
            0 => None,
            signal => i32::try_from(signal).ok(),
        }
    }

    /// How many signals were received since `install`.
    pub(crate) fn count(&self) -> usize {
        self.caught.count.load(Ordering::SeqCst)
    }
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        let mut state = STATE.lock().unwrap_or_else(PoisonError::into_inner);
        // A guard whose install failed half-way never counted itself.
        if self.counted {
            state.active = state.active.saturating_sub(1);
        }
        // First the default action, then remove ours: a signal in between
        // terminates the process (the run is over) instead of being lost.
        if state.active == 0 {
            IDLE.store(true, Ordering::SeqCst);
        }
        for id in self.ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}
