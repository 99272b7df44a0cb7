//! SIGINT/SIGTERM/SIGHUP handling while a run is in progress.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use signal_hook::SigId;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

use crate::error::LaunchError;

/// While alive, the launcher's SIGINT, SIGTERM and SIGHUP only record the
/// signal (the run then stops its ranks and returns); dropping it unregisters
/// the actions.
///
/// signal-hook leaves its OS-level handler installed after the last action is
/// unregistered, so later deliveries of these signals do nothing unless the
/// application registered actions of its own.
pub(crate) struct SignalGuard {
    ids: Vec<SigId>,
    caught: Arc<AtomicUsize>,
}

impl SignalGuard {
    pub(crate) fn install() -> Result<Self, LaunchError> {
        let mut guard = SignalGuard {
            ids: Vec::new(),
            caught: Arc::new(AtomicUsize::new(0)),
        };
        for signal in [SIGINT, SIGTERM, SIGHUP] {
            let id = signal_hook::flag::register_usize(
                signal,
                Arc::clone(&guard.caught),
                signal as usize,
            )
            // On error, `guard` drops and unregisters what was registered.
            .map_err(LaunchError::Signals)?;
            guard.ids.push(id);
        }
        Ok(guard)
    }

    /// The last signal received since `install`, if any.
    pub(crate) fn caught(&self) -> Option<i32> {
        match self.caught.load(Ordering::SeqCst) {
            0 => None,
            signal => i32::try_from(signal).ok(),
        }
    }
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        for id in self.ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}
