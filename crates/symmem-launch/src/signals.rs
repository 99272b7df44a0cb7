//! SIGINT/SIGTERM/SIGHUP handling: while a run is in progress they only stop
//! the run; outside runs the process gets back the action these signals had
//! before the first run.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use signal_hook::SigId;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

use crate::error::LaunchError;

/// The signals that stop a run.
const SIGNALS: [i32; 3] = [SIGINT, SIGTERM, SIGHUP];

/// True while no run is in progress: then the default-action emulations
/// registered by [`prepare`] terminate the process, as the default action of
/// these signals would.
static IDLE: AtomicBool = AtomicBool::new(true);

/// Runs in progress, and whether [`prepare`] already ran.
static STATE: Mutex<State> = Mutex::new(State {
    active: 0,
    prepared: false,
});

struct State {
    active: usize,
    prepared: bool,
}

/// The signals whose action is the default one (terminate), before anything
/// of ours is registered. signal-hook installs one OS handler per signal and
/// never removes it, so from the first run on the default action has to be
/// emulated. A signal that was ignored stays ignored outside runs (signal-hook
/// does not call an ignoring previous disposition), and a handler of the
/// application keeps being called (signal-hook chains to it).
fn default_disposition(signal: i32) -> bool {
    // SAFETY: a zeroed sigaction is a valid out-parameter, and sigaction with
    // a null new action only reads the current disposition.
    let current = unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(signal, std::ptr::null(), &mut old) != 0 {
            // Cannot happen for these signals; assume the usual default.
            return true;
        }
        old
    };
    current.sa_sigaction == libc::SIG_DFL
}

/// The launcher's own actions of one run: they record the first signal
/// received and count them all.
struct Caught {
    first: AtomicUsize,
    count: AtomicUsize,
}

/// While alive, the launcher's SIGINT, SIGTERM and SIGHUP only record the
/// signal (the run then stops its ranks and returns); dropping it unregisters
/// the actions, and once no run is in progress any more, these signals get
/// their default action back (see [`default_disposition`]).
pub(crate) struct SignalGuard {
    ids: Vec<SigId>,
    caught: Arc<Caught>,
}

impl SignalGuard {
    pub(crate) fn install() -> Result<Self, LaunchError> {
        let mut state = STATE.lock().unwrap_or_else(PoisonError::into_inner);
        // Looked at before our first registration, which replaces it.
        let defaults: Vec<i32> = if state.prepared {
            Vec::new()
        } else {
            SIGNALS
                .into_iter()
                .filter(|&s| default_disposition(s))
                .collect()
        };
        let mut guard = SignalGuard {
            ids: Vec::new(),
            caught: Arc::new(Caught {
                first: AtomicUsize::new(0),
                count: AtomicUsize::new(0),
            }),
        };
        for signal in SIGNALS {
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
                Ok(id) => guard.ids.push(id),
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
        if !state.prepared {
            state.prepared = true;
            for signal in defaults {
                // Registered once for the life of the process; they act only
                // while `IDLE` is true. Failing leaves the signal ignored
                // between runs, which is no reason to refuse this run.
                let _ = signal_hook::flag::register_conditional_default(signal, &IDLE);
            }
        }
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
        let counted = self.ids.len() == SIGNALS.len();
        if counted {
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
