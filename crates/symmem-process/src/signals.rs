//! SIGINT/SIGTERM/SIGHUP while children run: while a [`SignalGuard`] lives they only record
//! that they came (its holder then stops its children and returns); once no guard lives any
//! more, the process gets back the action these signals had before the first guard. A signal
//! the process inherited as ignored (`nohup` ignores SIGHUP, a shell starts background jobs
//! with SIGINT ignored) is never touched: it stays ignored while guarded too, and the children
//! inherit the ignore unless they are started with [`default_signals`](crate::default_signals).

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use signal_hook::SigId;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

use crate::sys::{self, Caught, Disposition};

/// The signals a guard records.
const SIGNALS: [i32; 3] = [SIGINT, SIGTERM, SIGHUP];

/// True while no guard lives: then the default-action emulations registered by
/// [`SignalGuard::install`] terminate the process, as the default action of these signals
/// would.
static IDLE: AtomicBool = AtomicBool::new(true);

/// Guards alive, and which signals have our handler.
static STATE: Mutex<State> = Mutex::new(State {
    active: 0,
    handled: [false; SIGNALS.len()],
});

struct State {
    active: usize,
    /// Per signal of [`SIGNALS`]: whether signal-hook's handler is installed (it stays for the
    /// life of the process once it is).
    handled: [bool; SIGNALS.len()],
}

/// The signal handlers could not be installed.
#[derive(Debug, thiserror::Error)]
#[error(
    "could not install the handlers of SIGINT, SIGTERM and SIGHUP that stop the child \
     processes on Ctrl-C: {cause}; the system refused a signal action it always allows, so \
     report it with this message"
)]
pub struct SignalsError {
    /// What the system said (in the message).
    pub cause: io::Error,
}

/// While alive, SIGINT, SIGTERM and SIGHUP of this process only record the signal
/// ([`SignalGuard::caught`], [`SignalGuard::count`]): the holder stops its children and
/// returns. Dropping it unregisters its actions, and once no guard lives any more, a signal
/// whose action was the default one gets it back (emulated: signal-hook never removes its
/// handler). Signals the process ignores are left alone. Guards may live side by side (runs
/// on several threads): each records every signal.
pub struct SignalGuard {
    ids: Vec<SigId>,
    /// Whether this guard counts in `State::active` (install succeeded).
    counted: bool,
    caught: Arc<Caught>,
}

impl SignalGuard {
    pub fn install() -> Result<Self, SignalsError> {
        let mut state = STATE.lock().unwrap_or_else(PoisonError::into_inner);
        let mut guard = SignalGuard {
            ids: Vec::new(),
            counted: false,
            caught: Arc::new(Caught::default()),
        };
        for (index, signal) in SIGNALS.into_iter().enumerate() {
            // Looked at before our first registration, which replaces it.
            let first = (!state.handled[index]).then(|| sys::disposition(signal));
            // Inherited as ignored (nohup, a background job): the user asked for this signal
            // not to stop anything.
            if first == Some(Disposition::Ignored) {
                continue;
            }
            match sys::record(signal, Arc::clone(&guard.caught)) {
                Ok(id) => {
                    guard.ids.push(id);
                    state.handled[index] = true;
                    if first == Some(Disposition::Default) {
                        // Registered once for the life of the process; it acts only while
                        // `IDLE` is true (still now: until the guard is set up, the default
                        // action stands). Failing leaves the signal ignored between guards,
                        // which is no reason to refuse this one.
                        let _ = signal_hook::flag::register_conditional_default(signal, &IDLE);
                    }
                }
                Err(cause) => {
                    // Unlocked first: dropping `guard` then unregisters what was registered,
                    // and its `Drop` takes the lock.
                    drop(state);
                    return Err(SignalsError { cause });
                }
            }
        }
        // Only now: a signal arriving before our actions were registered still had its
        // default action.
        IDLE.store(false, Ordering::SeqCst);
        state.active += 1;
        guard.counted = true;
        Ok(guard)
    }

    /// The first signal received since `install` (or [`raise`](Self::raise)d), if any.
    pub fn caught(&self) -> Option<i32> {
        match self.caught.first.load(Ordering::SeqCst) {
            0 => None,
            signal => i32::try_from(signal).ok(),
        }
    }

    /// How many signals were received since `install`.
    pub fn count(&self) -> usize {
        self.caught.count.load(Ordering::SeqCst)
    }

    /// Records `signal` as if this process had received it, for this guard only: for a
    /// holder that stops its children for a reason of its own, and for tests (a real signal
    /// would reach every guard of the process).
    pub fn raise(&self, signal: i32) {
        self.caught
            .record(usize::try_from(signal).unwrap_or(usize::MAX));
    }
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        let mut state = STATE.lock().unwrap_or_else(PoisonError::into_inner);
        // A guard whose install failed half-way never counted itself.
        if self.counted {
            state.active = state.active.saturating_sub(1);
        }
        // First the default action, then remove ours: a signal in between terminates the
        // process (nothing is guarded any more) instead of being lost.
        if state.active == 0 {
            IDLE.store(true, Ordering::SeqCst);
        }
        for id in self.ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guard_records_what_it_is_told_and_only_that() {
        let guard = SignalGuard::install().expect("handlers install");
        let other = SignalGuard::install().expect("a second guard installs");
        assert_eq!((guard.caught(), guard.count()), (None, 0));
        guard.raise(SIGTERM);
        guard.raise(SIGINT);
        assert_eq!((guard.caught(), guard.count()), (Some(SIGTERM), 2));
        assert_eq!((other.caught(), other.count()), (None, 0));
    }
}
